"""The TC opt: a matmul's REDUCE onto a renderer's tensor core (`caps.tensor_cores`, a TensorCore with its fragment layout).

A kernel whose one reduce is sum_k A[.., m, k] * B[.., k, n] (fp16/bf16 operands widened to the accumulator dtype, before or
after the multiply) is tiled into the instruction's M x N x K: the m and n output ranges become a grid of M x N tiles (m_o, n_o),
each computed by one warp, a LOCAL range of `threads` lanes; the reduce range becomes K-steps (k_o). Lane l holds the A, B
and C elements the TensorCore's layout places at it: A's and B's as STACKs of loads (the fragments), C's as an UPCAST range
over its fragment, whose element is a lane of the REDUCE over k_o of WMMA(A, B, 0) (the reduce lowering folds the accumulator
into the WMMA's C operand, codegen/lowerer.py). The products are exact and accumulate in dtype_out, the instruction's rounding.
Sizes that don't divide the tile are padded: fragment elements past them are 0 (their loads gated off), and the output
elements past them are neither stored nor computed from memory (every access outside the reduce is gated)."""
from __future__ import annotations
from typing import TYPE_CHECKING

from tg_core.dtype import dtypes
from tg_core.uop import Ops
from tg_core.uop.ops import AxisType, UOp
from tg_core.uop.pattern import PatternMatcher, UPat
from tg_core.uop.rewrite import graph_rewrite

if TYPE_CHECKING:
  from tg_core.renderer import FragmentLayout, TensorCore

class TCNotApplicable(Exception):
  """The kernel isn't a matmul this tensor core computes (raised as KernelOptError by apply_opt)."""

def _bits_expr(x: UOp, steps: tuple[tuple[int, int], ...], axis: int) -> UOp:
  """sum over bits b of x of bit_b(x) * steps[b][axis]; a run of bits whose steps double is one (x // 2^lo) % 2^len * step."""
  out, b = x.const_like(0), 0
  while b < len(steps):
    step, e = steps[b][axis], b + 1
    if step == 0:
      b += 1
      continue
    while e < len(steps) and steps[e][axis] == step << (e - b): e += 1
    out = out + (x // (1 << b)) % (1 << (e - b)) * step
    b = e
  return out

def _place(layout: FragmentLayout, lane: UOp, elem: int | UOp) -> tuple[UOp, UOp]:
  """(row, col) in its operand's tile of element `elem` (an int, or a range over the fragment) of `lane`'s fragment."""
  lane_bits, elem_bits = layout
  def at(axis: int) -> UOp:
    e = sum(s[axis] for b, s in enumerate(elem_bits) if elem >> b & 1) if isinstance(elem, int) else _bits_expr(elem, elem_bits, axis)
    return _bits_expr(lane, lane_bits, axis) + e
  return at(0), at(1)

def _masked(x: UOp, conds: list[UOp], zero: bool = False) -> UOp:
  """x with every INDEX in it gated by `conds` too (and, with `zero`, x itself 0 where they fail)."""
  if not conds: return x
  valid = conds[0]
  for c in conds[1:]: valid = valid & c
  subs = {u: UOp(Ops.INDEX, u.dtype, (u.src[0], u.src[1], u.src[2] & valid if len(u.src) > 2 else valid), u.arg) for u in x.toposort() if u.op is Ops.INDEX}
  x = x.substitute(subs)
  return valid.where(x, x.const_like(0)) if zero else x

def _operands(red: UOp, tc: TensorCore) -> tuple[UOp, UOp]:
  """The two dtype_in factors of a REDUCE(ADD) of dtype_out products: MUL(CAST(a), CAST(b)) or CAST(MUL(a, b))."""
  x = red.src[0]
  if x.op is Ops.MUL and all(s.op is Ops.CAST and s.src[0].dtype == tc.dtype_in for s in x.src): return x.src[0].src[0], x.src[1].src[0]
  if x.op is Ops.CAST and x.src[0].op is Ops.MUL and x.src[0].dtype == tc.dtype_in: return x.src[0].src[0], x.src[0].src[1]
  raise TCNotApplicable(f"the reduce is not a sum of {tc.dtype_in} products")

def apply_tc(ast: UOp, tc: TensorCore, out_axes: tuple[AxisType, ...]) -> UOp:
  """The kernel with its matmul on `tc` (see the module doc); raises TCNotApplicable naming why not."""
  if not tc.layout: raise TCNotApplicable(f"the tensor core {tc.dims} declares no fragment layout")
  topo = list(ast.toposort())
  if any(u.op is Ops.RANGE and u.arg[1] not in (*out_axes, AxisType.REDUCE) for u in topo): raise TCNotApplicable("TC must be the first opt")
  reds = [u for u in topo if u.op is Ops.REDUCE]
  if len(reds) != 1 or reds[0].arg is not Ops.ADD or reds[0].dtype != tc.dtype_out or len(reds[0].src) != 2:
    raise TCNotApplicable(f"needs one REDUCE(ADD) of {tc.dtype_out} over one range")
  red = reds[0]
  a, b = _operands(red, tc)
  rk = red.src[1]
  ra, rb = set(a.toposort()), set(b.toposort())
  loops = sorted([u for u in topo if u.op is Ops.RANGE and u.arg[1] in out_axes], key=lambda r: r.arg[0])
  ms, ns = [r for r in loops if r in ra and r not in rb], [r for r in loops if r in rb and r not in ra]
  if rk.op is not Ops.RANGE or rk not in ra or rk not in rb or not ms or not ns: raise TCNotApplicable("the reduce is not a matmul (A[m, k] * B[k, n])")
  rm, rn = ms[-1], ns[-1]
  (tm, tn, tk), sizes = tc.dims, [r.src[0] for r in (rm, rn, rk)]
  if any(s.op is not Ops.CONST for s in sizes): raise TCNotApplicable("symbolic matmul size")
  msz, nsz, ksz = (int(s.arg) for s in sizes)
  # (a matvec would be mostly padding: one row of 16)
  if msz < tm or nsz < tn or ksz < tk: raise TCNotApplicable(f"matmul {msz}x{nsz}x{ksz} is smaller than one {tm}x{tn}x{tk} tile")
  nid = max(u.arg[0] for u in topo if u.op is Ops.RANGE) + 1
  mo, no = UOp.range(-(-msz // tm), rm.arg[0], rm.arg[1], rm.dtype), UOp.range(-(-nsz // tn), rn.arg[0], rn.arg[1], rn.dtype)
  ko = UOp.range(-(-ksz // tk), rk.arg[0], AxisType.REDUCE, rk.dtype)
  lane, ci = UOp.range(tc.threads, nid, AxisType.LOCAL, rm.dtype), UOp.range(tc.fragment_size(2), nid + 1, AxisType.UPCAST, rm.dtype)
  full = {rm: msz, rn: nsz, rk: ksz}
  padded = {r for r, t in ((rm, tm), (rn, tn), (rk, tk)) if full[r] % t}
  def frag(x: UOp, operand: int, rr: UOp, rc: UOp, base_r: UOp, base_c: UOp) -> UOp:
    elems = []
    for i in range(tc.fragment_size(operand)):
      r, c = _place(tc.layout[operand], lane, i)
      vals = {rr: base_r + r, rc: base_c + c}
      # an element of the padding (past a size that doesn't divide the tile) is 0, its loads gated off
      elems.append(_masked(x.substitute(vals), [v < full[k] for k, v in vals.items() if k in padded], zero=True))
    return UOp(Ops.STACK, tc.dtype_in.vec(len(elems)), tuple(elems))
  fa, fb = frag(a, 0, rm, rk, mo * tm, ko * tk), frag(b, 1, rk, rn, ko * tk, no * tn)
  acc_dt = tc.dtype_out.vec(tc.fragment_size(2))
  wmma = UOp(Ops.WMMA, acc_dt, (fa, fb, UOp.const(acc_dt, 0)), tc)
  acc = UOp(Ops.REDUCE, acc_dt, (wmma, ko), Ops.ADD)
  # element ci of the lane's accumulator fragment (ci is a constant in each copy the expander makes: this folds to one GEP)
  sel = acc.gep(acc_dt.count - 1)
  for i in reversed(range(acc_dt.count - 1)): sel = ci.eq(i).where(acc.gep(i), sel)
  crow, ccol = _place(tc.layout[2], lane, ci)
  mexpr, nexpr = mo * tm + crow, no * tn + ccol
  # outside the reduce, every access of an output element in the padding is gated off (the store and any epilogue loads)
  hole = UOp(Ops.NOOP, red.dtype, (), "tc reduce")
  ret = _masked(ast.substitute({red: hole}).substitute({rm: mexpr, rn: nexpr}), [v < full[k] for k, v in ((rm, mexpr), (rn, nexpr)) if k in padded])
  ret = ret.substitute({hole: sel})
  def fix_end(e: UOp) -> UOp | None:
    if mexpr not in e.src[1:] and nexpr not in e.src[1:]: return None
    body, rngs = e.src[0], [mo if s is mexpr else no if s is nexpr else s for s in e.src[1:]]
    if nexpr in e.src[1:]: body, rngs = UOp(Ops.END, dtypes.void, (body, ci)), [lane, *rngs]
    return UOp(Ops.END, dtypes.void, (body, *rngs))
  return graph_rewrite(ret, PatternMatcher([(UPat(Ops.END, name="e"), fix_end)]), name="tc ends")

__all__ = ["apply_tc", "TCNotApplicable"]

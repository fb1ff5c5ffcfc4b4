"""Kernel optimizations: a list of `Opt`s applied to a kernel AST's ranges, a hand-written heuristic that picks
them, and the expander that turns UPCAST/UNROLL ranges into straight-line code.

Ranges are numbered in `kernel_axes` order: output (LOOP) ranges first, then reduce ranges, each by axis id.
UPCAST splits an output range and computes `amt` outputs per thread; UNROLL splits a reduce range and folds `amt`
reduce steps into one loop iteration; LOCAL splits an output range into a workgroup dimension."""
from __future__ import annotations
import functools
import itertools
from dataclasses import dataclass
from enum import Enum, auto
from typing import TYPE_CHECKING

from tg_core.dtype import DType, dtypes
from tg_core.uop import Ops
from tg_core.uop.ops import AxisType, KernelInfo, UOp
from tg_core.uop.pattern import PatternMatcher, UPat
from tg_core.uop.rewrite import graph_rewrite
from tg_core.codegen.vectorize import CantVectorize, access_strides, store_stride, vectorize

if TYPE_CHECKING:
  from tg_core.device import RendererCaps

class OptOps(Enum):
  UPCAST = auto(); UNROLL = auto(); LOCAL = auto(); NOLOCALS = auto()  # noqa: E702
  def __repr__(self) -> str: return f"OptOps.{self.name}"

@dataclass(frozen=True, order=True)
class Opt:
  op: OptOps
  axis: int | None = None
  arg: int | None = None
  def __repr__(self) -> str: return f"Opt(op={self.op!r}, axis={self.axis}, arg={self.arg})"

class KernelOptError(Exception):
  """An Opt that does not apply to this kernel (bad axis, size not divisible, ...)."""

_KIND_ORDER = {AxisType.GLOBAL: 0, AxisType.LOOP: 0, AxisType.LOCAL: 1, AxisType.UPCAST: 2, AxisType.REDUCE: 3, AxisType.UNROLL: 4}

def kernel_axes(ast: UOp) -> list[UOp]:
  """The kernel's RANGEs: output ranges, then reduce ranges; in each kind by axis id."""
  rngs = [u for u in ast.toposort() if u.op is Ops.RANGE]
  return sorted(rngs, key=lambda r: (_KIND_ORDER.get(r.arg[1], 5), r.arg[0]))

def _range_size(r: UOp) -> int:
  if r.src[0].op is not Ops.CONST: raise KernelOptError("symbolic range size")
  return int(r.src[0].arg)

def apply_opt(ast: UOp, opt: Opt) -> UOp:
  axes = kernel_axes(ast)
  if opt.op is OptOps.NOLOCALS: return ast.replace(arg=_with_opts(ast.arg, opt, dont_use_locals=True))
  if opt.axis is None or not 0 <= opt.axis < len(axes): raise KernelOptError(f"axis {opt.axis} out of range for {len(axes)} axes")
  r = axes[opt.axis]
  size, amt = _range_size(r), opt.arg or 0
  want = {OptOps.UPCAST: (AxisType.LOOP, AxisType.GLOBAL), OptOps.LOCAL: (AxisType.LOOP, AxisType.GLOBAL), OptOps.UNROLL: (AxisType.REDUCE,)}[opt.op]
  if r.arg[1] not in want: raise KernelOptError(f"{opt.op} needs an axis of type {want}, axis {opt.axis} is {r.arg[1]}")
  if amt == 0: amt = size
  if amt <= 1 or size % amt != 0: raise KernelOptError(f"{opt.op} by {amt} doesn't divide axis {opt.axis} of size {size}")
  if opt.op in (OptOps.UPCAST, OptOps.UNROLL) and amt > 32: raise KernelOptError(f"{opt.op} by {amt} is too large")
  new_type = {OptOps.UPCAST: AxisType.UPCAST, OptOps.UNROLL: AxisType.UNROLL, OptOps.LOCAL: AxisType.LOCAL}[opt.op]
  next_id = max(x.arg[0] for x in axes) + 1
  inner = UOp.range(amt, next_id, new_type, r.dtype)
  if amt == size: repl, outer = inner, None
  else:
    outer = UOp.range(size // amt, r.arg[0], r.arg[1], r.dtype)
    repl = outer * amt + inner
  ret = ast.substitute({r: repl})
  # the ENDs that closed r now close the new ranges (outer first)
  ret = graph_rewrite(ret, PatternMatcher([(UPat(Ops.END, name="e"), functools.partial(_fix_end, old=repl, new=(outer, inner))),
                                           (UPat(Ops.REDUCE, name="e"), functools.partial(_fix_reduce, old=repl, new=(outer, inner)))]), name="fix ends")
  return ret.replace(arg=_with_opts(ret.arg, opt))

def _fix_end(e: UOp, old: UOp, new: tuple[UOp | None, UOp]) -> UOp | None:
  if old not in e.src[1:]: return None
  body = e.src[0]
  rest = [s for s in e.src[1:] if s is not old]
  if rest: body = UOp(Ops.END, dtypes.void, (body, *rest))
  if (outer := new[0]) is None: return UOp(Ops.END, dtypes.void, (body, new[1]))
  return UOp(Ops.END, dtypes.void, (UOp(Ops.END, dtypes.void, (body, new[1])), outer))

def _fix_reduce(e: UOp, old: UOp, new: tuple[UOp | None, UOp]) -> UOp | None:
  if old not in e.src[1:]: return None
  rngs = [x for s in e.src[1:] for x in ((s,) if s is not old else tuple(n for n in new if n is not None))]
  return UOp(Ops.REDUCE, e.dtype, (e.src[0], *rngs), e.arg)

def _with_opts(info: KernelInfo | None, opt: Opt, **kw: object) -> KernelInfo:
  info = info or KernelInfo()
  return KernelInfo(info.name, info.axis_types, kw.get("dont_use_locals", info.dont_use_locals), info.applied_opts + (opt,), info.opts_to_apply)  # type: ignore[arg-type]

def apply_opts(ast: UOp, opts: list[Opt] | tuple[Opt, ...]) -> UOp:
  for o in opts: ast = apply_opt(ast, o)
  return ast

# *** the expander: UPCAST and UNROLL ranges become straight-line code ***
def _expand_reduce(ctx: set[DType] | None, red: UOp) -> UOp | None:
  unrolls = [r for r in red.src[1:] if r.op is Ops.RANGE and r.arg[1] in (AxisType.UNROLL, AxisType.UPCAST)]
  if not unrolls: return None
  op: Ops = red.arg
  def fold(vals: list[UOp], dt: DType) -> UOp: return functools.reduce(lambda a, b: UOp(op, dt, (a, b)) if op is not Ops.MAX else _max(a, b), vals)
  keep = [r for r in red.src[1:] if r not in unrolls]
  inner = red.src[0]
  # (not when an upcast output axis reads contiguously inside the loop too: that axis vectorizes at its END, no horizontal fold)
  if ctx is not None and keep and op in (Ops.ADD, Ops.MAX) and \
     not any(u.arg[1] is AxisType.UPCAST and _loads_contiguous(inner, u, keep) for u in inner.ranges):
    # an unroll axis the loads are contiguous in becomes a vector accumulator (n partial sums, folded after the loop):
    # the reduction runs on vector loads instead of a chain of scalar adds. Sums reassociate, like numpy's and torch's.
    for r in reversed(unrolls):
      if not _loads_contiguous(inner, r): continue
      try: v = vectorize(inner, r, _range_size(r), ctx)
      except CantVectorize: continue
      vred = UOp(Ops.REDUCE, v.dtype, (fold(_copies(v, [u for u in unrolls if u is not r]), v.dtype), *keep), op)
      return fold([vred.gep(k) for k in range(v.dtype.count)], red.dtype)
  folded = fold(_copies(inner, unrolls), red.dtype)
  return UOp(Ops.REDUCE, red.dtype, (folded, *keep), red.arg) if keep else folded

def _loads_contiguous(x: UOp, r: UOp, inside: list[UOp] | None = None) -> bool:
  """Does some load in x read consecutive elements along r (counting only loads that vary with a range of `inside`)?"""
  return 1 in access_strides(x, r, Ops.LOAD, inside)

def _copies(x: UOp, rngs: list[UOp]) -> list[UOp]:
  """x once for every value of the ranges (the last range varying fastest)."""
  out = [x]
  for r in rngs: out = [y.substitute({r: UOp.const(r.dtype, k)}) for y in out for k in range(_range_size(r))]
  return out

def _max(a: UOp, b: UOp) -> UOp:
  if dtypes.is_float(a.dtype): return (b.ne(b)).where(b, a.maximum(b))
  return a.maximum(b)

def _expand_end(ctx: set[DType] | None, e: UOp) -> UOp | None:
  ups = [r for r in e.src[1:] if r.op is Ops.RANGE and r.arg[1] is AxisType.UPCAST]
  if not ups: return None
  all_ups, body = ups, e.src[0]
  if ctx is not None:  # the renderer takes vectors (of these dtypes): the axis the stores are contiguous in becomes one
    for r in reversed(ups):
      if store_stride(body, r) != 1: continue
      try: body = vectorize(body, r, _range_size(r), ctx)
      except CantVectorize: continue
      ups = [u for u in ups if u is not r]
      break
  bodies = _copies(body, ups)
  rest = [s for s in e.src[1:] if s not in all_ups]
  grp = UOp(Ops.GROUP, dtypes.void, tuple(bodies)) if len(bodies) > 1 else bodies[0]
  return UOp(Ops.END, dtypes.void, (grp, *rest)) if rest else grp

pm_expand = PatternMatcher([
  (UPat(Ops.REDUCE, name="red"), _expand_reduce),
  (UPat(Ops.END, name="e"), _expand_end),
])

def expand_upcasts(ast: UOp, vector_dtypes: set[DType] | None = None) -> UOp:
  """UPCAST/UNROLL ranges -> straight-line code. With `vector_dtypes` (the renderer takes vectors of these) one upcast axis
  per loop nest becomes vectors (see codegen/vectorize.py), the rest scalar copies."""
  return graph_rewrite(ast, pm_expand, ctx=vector_dtypes, name="expand upcast/unroll")

# *** the heuristic ***
def hand_coded_optimizations(ast: UOp, caps: RendererCaps | None = None) -> list[Opt]:
  """Register tiling, driven by the target's declared caps (default: `RendererCaps()`). Reduce kernels upcast the last two
  output axes and unroll the last reduce axis (4x4 tiles, unroll 4). Targets that declare `big_reduce_tile` (CPUs: (16, 8))
  give big reduce kernels that tile without unroll: 128 accumulators fill the vector registers (measured on a 512x512
  fp32 matmul: 21 -> 113 GFLOPS on one core), while small kernels keep 4x4 tiles, which compile ~3x faster; tiny ones
  (< 2^19 multiply-adds, e.g. a 64x64 matmul) take 4x2 tiles without unroll, which halve codegen time again. Elementwise
  kernels upcast the innermost axis by `vector_width` (at least 4); with `transpose_tile`, a transpose also upcasts an
  axis its loads are contiguous in."""
  if caps is None:
    from tg_core.device import RendererCaps
    caps = RendererCaps()
  width = caps.vector_width
  opts: list[Opt] = []
  axes = kernel_axes(ast)
  out_axes = [i for i, r in enumerate(axes) if r.arg[1] in (AxisType.LOOP, AxisType.GLOBAL)]
  red_axes = [i for i, r in enumerate(axes) if r.arg[1] is AxisType.REDUCE]
  sizes = [r.src[0].arg if r.src[0].op is Ops.CONST else 1 for r in axes]
  work = functools.reduce(lambda a, b: a * b, sizes, 1)
  big = caps.big_reduce_tile is not None and bool(red_axes) and len(out_axes) >= 2 and work >= 1 << 22
  # tiny kernels run in microseconds: their compile time (Python codegen and LLVM, both growing with the tile) dominates
  tiny = work < 1 << 19
  def first_fit(cur: UOp, op: OptOps, axis: int, amts: tuple[int, ...]) -> UOp:
    for amt in amts:
      try:
        cand = Opt(op, axis, amt)
        nxt = apply_opt(cur, cand)
        opts.append(cand)
        return nxt
      except KernelOptError: continue
    return cur
  cur = ast
  # one output axis (row/column sums, max, matvec) on a vector target: the axis the loads are contiguous in goes a vector wide
  col_reduce = red_axes and len(out_axes) == 1 and width > 4 and not tiny and \
    _loads_contiguous(ast, axes[out_axes[0]], [axes[i] for i in red_axes])
  if red_axes:
    # (a column reduce takes two vectors per step: each strided row visit reads two cache lines, half the page walks)
    tiles = tuple(_halvings(t) for t in caps.big_reduce_tile) if big and caps.big_reduce_tile else ((4, 2), (2,)) if tiny else \
      (_halvings(min(2 * width, 32)),) if col_reduce else ((4, 3, 2), (4, 3, 2))
    for i, amts in zip(_tile_axes(ast, axes, out_axes), tiles): cur = first_fit(cur, OptOps.UPCAST, i, amts)
    if not big and not tiny and axes[red_axes[-1]] in (cur_axes := kernel_axes(cur)):
      amts = _halvings(width) if len(out_axes) == 1 and width > 4 and not col_reduce else (4, 2)
      cur = first_fit(cur, OptOps.UNROLL, cur_axes.index(axes[red_axes[-1]]), amts)
  elif out_axes:
    cur = first_fit(cur, OptOps.UPCAST, out_axes[-1], _halvings(max(width, 4)))
    # loads strided along the stores (a transpose): a few steps of an axis they are contiguous in share their cache lines
    if caps.transpose_tile > 1 and len(out_axes) > 1 and _loads_strided(ast, axes[out_axes[-1]]):
      for a in reversed(out_axes[:-1]):
        if _loads_contiguous(ast, axes[a]):
          cur = first_fit(cur, OptOps.UPCAST, a, _halvings(caps.transpose_tile))
          break
  return opts

def _loads_strided(x: UOp, r: UOp) -> bool:
  """Does some load in x step through memory with a stride other than 0 or 1 along r?"""
  return any(st not in (0, 1) for st in access_strides(x, r, Ops.LOAD))

def _halvings(n: int) -> tuple[int, ...]: return tuple(n >> i for i in range(n.bit_length() - 1))  # 16 -> (16, 8, 4, 2)

def _tile_axes(ast: UOp, axes: list[UOp], out_axes: list[int]) -> list[int]:
  """The two output axes to tile (the inner one, which gets the bigger tile, first). A tile's loads per step are, for each
  load, the product of the tile sizes of the axes its index depends on: a matmul's (i, j) tile loads a column of A and a
  row of B, and a convolution's (cout, w) tile loads a row of input and a column of weights, where an (h, w) tile would
  load a whole input block for one weight. Pick the pair with the fewest loads per multiply-add; ties go to later axes
  (contiguous in memory)."""
  if len(out_axes) < 2: return list(reversed(out_axes))
  deps = [{a for a in out_axes if axes[a] in u.src[0].ranges} for u in ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
  def cost(pair: tuple[int, int]) -> tuple[int, int, int]:
    return (sum((4 if pair[0] in d else 1) * (4 if pair[1] in d else 1) for d in deps), -pair[1], -pair[0])
  return list(min(((b, a) for a in out_axes for b in out_axes if a < b), key=cost))

def axis_index(ast: UOp, axis_id: int) -> int:
  """The current index (in kernel_axes order) of the range with this axis id; splitting keeps the outer range's id."""
  for i, r in enumerate(kernel_axes(ast)):
    if r.arg[0] == axis_id: return i
  raise KernelOptError(f"no range with axis id {axis_id}")

def beam_candidates(ast: UOp) -> list[list[Opt]]:
  """Opt lists BEAM search times: combinations of upcasts of the last two output axes and an unroll of the last
  reduce axis. Each list is valid for `ast` (built by applying it)."""
  axes = kernel_axes(ast)
  out_ids = [r.arg[0] for r in axes if r.arg[1] in (AxisType.LOOP, AxisType.GLOBAL)][-2:]
  red_ids = [r.arg[0] for r in axes if r.arg[1] is AxisType.REDUCE][-1:]
  cands: list[list[Opt]] = []
  amts = (1, 2, 4, 8)
  for ups in itertools.product(amts, repeat=len(out_ids)):
    for un in (amts if red_ids else (1,)):
      cur, opts = ast, []
      try:
        for aid, n in [*zip(out_ids, ups)] + ([(red_ids[0], un)] if red_ids else []):
          if n == 1: continue
          o = Opt(OptOps.UNROLL if red_ids and aid == red_ids[0] else OptOps.UPCAST, axis_index(cur, aid), n)
          cur = apply_opt(cur, o)
          opts.append(o)
      except KernelOptError: continue
      cands.append(opts)
  return cands

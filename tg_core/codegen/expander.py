"""The expander, the first lowering pass after the opts: UPCAST and UNROLL ranges become straight-line code (scalar
copies, or vectors on renderers that take them: codegen/vectorize.py)."""
from __future__ import annotations
import functools

from tg_core.dtype import DType, dtypes
from tg_core.uop import Ops
from tg_core.uop.ops import AxisType, UOp
from tg_core.uop.pattern import PatternMatcher, UPat
from tg_core.uop.rewrite import graph_rewrite
from tg_core.codegen.opt.apply import _range_size
from tg_core.codegen.vectorize import CantVectorize, loads_contiguous, store_stride, vectorize

def _expand_reduce(ctx: set[DType] | None, red: UOp) -> UOp | None:
  unrolls = [r for r in red.src[1:] if r.op is Ops.RANGE and r.arg[1] in (AxisType.UNROLL, AxisType.UPCAST)]
  if not unrolls: return None
  op: Ops = red.arg
  def fold(vals: list[UOp], dt: DType) -> UOp: return functools.reduce(lambda a, b: UOp(op, dt, (a, b)) if op is not Ops.MAX else _max(a, b), vals)
  keep = [r for r in red.src[1:] if r not in unrolls]
  inner = red.src[0]
  # (not when an upcast output axis reads contiguously inside the loop too: that axis vectorizes at its END, no horizontal fold)
  if ctx is not None and keep and op in (Ops.ADD, Ops.MAX) and \
     not any(u.arg[1] is AxisType.UPCAST and loads_contiguous(inner, u, keep) for u in inner.ranges):
    # an unroll axis the loads are contiguous in becomes a vector accumulator (n partial sums, folded after the loop):
    # the reduction runs on vector loads instead of a chain of scalar adds. Sums reassociate, like numpy's and torch's.
    for r in reversed(unrolls):
      if not loads_contiguous(inner, r): continue
      try: v = vectorize(inner, r, _range_size(r), ctx)
      except CantVectorize: continue
      vred = UOp(Ops.REDUCE, v.dtype, (fold(_copies(v, [u for u in unrolls if u is not r]), v.dtype), *keep), op)
      return fold([vred.gep(k) for k in range(v.dtype.count)], red.dtype)
  folded = fold(_copies(inner, unrolls), red.dtype)
  return UOp(Ops.REDUCE, red.dtype, (folded, *keep), red.arg) if keep else folded

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

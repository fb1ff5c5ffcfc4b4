"""Ops.DPBF16 in codegen: the accumulator folded into the op, and the generic lowering for renderers that don't render it
(caps.native_dpbf16 False). Each uint32 operand holds two bfloat16 (low and high 16 bits); a bfloat16 is the top half of a
float32, so its value is the bits moved up (low half) or masked (high half) and bitcast: the lowering is two shifts or masks,
two multiplies and two adds, which every renderer (the PYTHON interpreter too) runs with the op's value."""
from __future__ import annotations

from tg_core.dtype import dtypes
from tg_core.uop import Ops
from tg_core.uop.ops import UOp
from tg_core.uop.pattern import PatternMatcher, UPat
from tg_core.uop.rewrite import graph_rewrite

def _halves(v: UOp) -> tuple[UOp, UOp]:
  """The float32 values of the low and the high bfloat16 of uint32 `v`."""
  f32 = dtypes.float32.vec(v.dtype.count)
  return (v << 16).bitcast(f32), (v & 0xFFFF0000).bitcast(f32)

def dpbf16_expanded(a: UOp, b: UOp, c: UOp) -> UOp:
  """c + lo(a) * lo(b) + hi(a) * hi(b) in float32 ops (the value of DPBF16(a, b, c); the products are exact)."""
  (alo, ahi), (blo, bhi) = _halves(a), _halves(b)
  return c + alo * blo + ahi * bhi

def _fold_acc(d: UOp, x: UOp) -> UOp | None:
  # DPBF16(a, b, 0) + x -> DPBF16(a, b, x): a reduce's accumulator enters the op (one instruction per step where it is native)
  if d.src[2].op is not Ops.CONST or d.src[2].arg != 0 or x.dtype != d.dtype: return None
  return d.replace(src=(d.src[0], d.src[1], x))

pm_fold_dpbf16 = PatternMatcher([
  (UPat(Ops.ADD, src=(UPat(Ops.DPBF16, name="d"), UPat.var("x"))), _fold_acc),
  (UPat(Ops.ADD, src=(UPat.var("x"), UPat(Ops.DPBF16, name="d"))), _fold_acc),
])
pm_lower_dpbf16 = PatternMatcher([(UPat(Ops.DPBF16, src=(UPat.var("a"), UPat.var("b"), UPat.var("c"))), dpbf16_expanded)])

def rewrite_dpbf16(sink: UOp, native: bool) -> UOp:
  """`sink` with each DPBF16's accumulator folded in and, unless the renderer renders it (`native`), every DPBF16 lowered
  (unchanged, and not walked twice, when it has none)."""
  if not any(u.op is Ops.DPBF16 for u in sink.toposort()): return sink
  sink = graph_rewrite(sink, pm_fold_dpbf16, name="fold dpbf16 accumulator")
  return sink if native else graph_rewrite(sink, pm_lower_dpbf16, name="lower dpbf16")

__all__ = ["dpbf16_expanded", "pm_fold_dpbf16", "pm_lower_dpbf16", "rewrite_dpbf16"]

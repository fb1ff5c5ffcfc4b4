"""Ops.DP4A in codegen: the generic lowering, for renderers that don't render it (caps.native_dp4a False): each byte of the two
int32 operands sign-extended by a shift pair, b's saturated to -127, the four products summed onto c. Every renderer (the PYTHON
interpreter too) then runs plain int32 ops with exactly the op's value (tg_core.uop.ops.python_alu). For those that do, a
reduce's accumulator folded into the op (fold_dp4a)."""
from __future__ import annotations

from tg_core.dtype import dtypes
from tg_core.uop import Ops
from tg_core.uop.ops import UOp
from tg_core.uop.pattern import PatternMatcher, UPat
from tg_core.uop.rewrite import graph_rewrite

def _byte(v: UOp, k: int) -> UOp:
  """Byte k of the int32 v as a signed value: moved to the top, then arithmetically shifted down."""
  return (v << (24 - 8 * k)) >> 24 if k < 3 else v >> 24

def dp4a_expanded(a: UOp, b: UOp, c: UOp, in_range: bool = False) -> UOp:
  """c + sum_k int8(a_k) * max(int8(b_k), -127) in int32 ops (the value of DP4A(a, b, c)); `in_range` (the op's arg): b has no
  byte -128, the max is left out. A uint32 a: c + sum_k uint8(a_k) * int8(b_k)."""
  ret = c
  if a.dtype.scalar() == dtypes.uint32:
    for k in range(4): ret = ret + ((a >> 8 * k) & 255).bitcast(c.dtype) * _byte(b, k)
    return ret
  for k in range(4): ret = ret + _byte(a, k) * (_byte(b, k) if in_range else _byte(b, k).maximum(-127))
  return ret

pm_lower_dp4a = PatternMatcher([(UPat(Ops.DP4A, name="d"), lambda d: dp4a_expanded(*d.src, in_range=d.arg is True))])

def lower_dp4a(sink: UOp) -> UOp:
  """`sink` with every DP4A lowered (unchanged, and not walked twice, when it has none)."""
  if not any(u.op is Ops.DP4A for u in sink.toposort()): return sink
  return graph_rewrite(sink, pm_lower_dp4a, name="lower dp4a")

def _fold_acc(d: UOp, x: UOp) -> UOp | None:
  # DP4A(a, b, 0) + x -> DP4A(a, b, x): a reduce's accumulator enters the op (int32 adds wrap as the op's accumulate does), one
  # instruction per step where it is native rather than the op on a zeroed register and an add. Through a chain of them (each
  # step's c the previous DP4A: several byte dot products summed in one step) it enters the first
  if x.dtype != d.dtype: return None
  if d.src[2].op is Ops.DP4A: return None if (inner := _fold_acc(d.src[2], x)) is None else d.replace(src=(d.src[0], d.src[1], inner))
  if d.src[2].op is not Ops.CONST or d.src[2].arg != 0: return None
  return d.replace(src=(d.src[0], d.src[1], x))

pm_fold_dp4a = PatternMatcher([
  (UPat(Ops.ADD, src=(UPat(Ops.DP4A, name="d"), UPat.var("x"))), _fold_acc),
  (UPat(Ops.ADD, src=(UPat.var("x"), UPat(Ops.DP4A, name="d"))), _fold_acc),
])

def fold_dp4a(sink: UOp) -> UOp:
  """`sink` with each DP4A's accumulator folded in (unchanged, and not walked twice, when it has none)."""
  if not any(u.op is Ops.DP4A for u in sink.toposort()): return sink
  return graph_rewrite(sink, pm_fold_dp4a, name="fold dp4a accumulator")

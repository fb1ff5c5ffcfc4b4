"""The generic lowering of Ops.DP4A, for renderers that don't render it (caps.native_dp4a False): each byte of the two int32
operands sign-extended by a shift pair, b's saturated to -127, the four products summed onto c. Every renderer (the PYTHON
interpreter too) then runs plain int32 ops with exactly the op's value (tg_core.uop.ops.python_alu)."""
from __future__ import annotations

from tg_core.dtype import dtypes
from tg_core.uop import Ops
from tg_core.uop.ops import UOp
from tg_core.uop.pattern import PatternMatcher, UPat
from tg_core.uop.rewrite import graph_rewrite

def _byte(v: UOp, k: int) -> UOp:
  """Byte k of the int32 v as a signed value: moved to the top, then arithmetically shifted down."""
  return (v << (24 - 8 * k)) >> 24 if k < 3 else v >> 24

def dp4a_expanded(a: UOp, b: UOp, c: UOp) -> UOp:
  """c + sum_k int8(a_k) * max(int8(b_k), -127) in int32 ops (the value of DP4A(a, b, c)); a uint32 a: c + sum_k uint8(a_k) * int8(b_k)."""
  ret = c
  if a.dtype.scalar() == dtypes.uint32:
    for k in range(4): ret = ret + ((a >> 8 * k) & 255).bitcast(c.dtype) * _byte(b, k)
    return ret
  for k in range(4): ret = ret + _byte(a, k) * _byte(b, k).maximum(-127)
  return ret

pm_lower_dp4a = PatternMatcher([(UPat(Ops.DP4A, src=(UPat.var("a"), UPat.var("b"), UPat.var("c"))), dp4a_expanded)])

def lower_dp4a(sink: UOp) -> UOp:
  """`sink` with every DP4A lowered (unchanged, and not walked twice, when it has none)."""
  if not any(u.op is Ops.DP4A for u in sink.toposort()): return sink
  return graph_rewrite(sink, pm_lower_dp4a, name="lower dp4a")

"""What the CUDA renderers keep of the core's vectors (caps.vector_upcast): memory accesses. A GPU thread has no vector ALU
(beyond packed half2, unused here), so vector math becomes a STACK of its lanes (the last codegen pass, caps.extra_matcher);
what stays a vector is a LOAD/STORE of a global buffer moving 4, 8 or 16 bytes (float4, float2, half2, ...) and the register
accumulators of vector reductions (REG buffers of a vector dtype, read and written whole). A global vector access is one
instruction only where its address is aligned to its size, which the renderers test at run time (a buffer may be a view at
any offset): otherwise it is done lane by lane. Gated vector accesses go lane by lane."""
from __future__ import annotations

from tg_core.dtype import AddrSpace, dtypes
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp
from tg_core.uop.pattern import PatternMatcher, UPat

def _lane(s: UOp, i: int) -> UOp: return s.gep(i) if s.dtype.count > 1 else s

def _split_alu(x: UOp) -> UOp | None:
  n = max(x.dtype.count, *(s.dtype.count for s in x.src))
  if n == 1: return None
  return UOp(Ops.STACK, x.dtype.scalar().vec(n), tuple(UOp(x.op, x.dtype.scalar(), tuple(_lane(s, i) for s in x.src), x.arg) for i in range(n)))

def _split_const(c: UOp) -> UOp | None:
  if c.dtype.count == 1: return None
  vals = c.arg if isinstance(c.arg, tuple) else (c.arg,) * c.dtype.count
  return UOp(Ops.STACK, c.dtype, tuple(UOp.const(c.dtype.scalar(), v) for v in vals))

def _gep_stack(g: UOp, s: UOp) -> UOp:
  return s.src[g.arg[0]] if len(g.arg) == 1 else UOp(Ops.STACK, g.dtype, tuple(s.src[i] for i in g.arg))

def vector_access_kept(idx: UOp, dtype_count: int) -> bool:
  """A global access the renderers do as one vector instruction (when aligned): ungated, of 4, 8 or 16 bytes."""
  buf = idx.src[0]
  while buf.op is Ops.AFTER: buf = buf.src[0]
  if buf.op is not Ops.PARAM or buf.arg.addrspace is not AddrSpace.GLOBAL: return False
  s = buf.dtype.scalar()
  return len(idx.src) == 2 and s != dtypes.bool and s.itemsize * dtype_count in (4, 8, 16) and s.itemsize <= 4

def _lane_index(idx: UOp, k: int) -> UOp:
  gate = () if len(idx.src) < 3 else (_lane(idx.src[2], k),)
  return UOp(Ops.INDEX, idx.dtype, (idx.src[0], idx.src[1] + k, *gate), idx.arg)

def _split_load(x: UOp) -> UOp | None:
  if x.dtype.count == 1 or x.src[0].op is not Ops.INDEX or _is_reg(x.src[0]) or (len(x.src) == 1 and vector_access_kept(x.src[0], x.dtype.count)): return None
  return UOp(Ops.STACK, x.dtype, tuple(UOp(Ops.LOAD, x.dtype.scalar(), (_lane_index(x.src[0], k), *(_lane(s, k) for s in x.src[1:])))
                                       for k in range(x.dtype.count)))

def _split_store(x: UOp) -> UOp | None:
  n = x.src[1].dtype.count
  if n == 1 or x.src[0].op is not Ops.INDEX or _is_reg(x.src[0]) or (len(x.src) == 2 and vector_access_kept(x.src[0], n)): return None
  return UOp(Ops.GROUP, dtypes.void, tuple(UOp(Ops.STORE, dtypes.void, (_lane_index(x.src[0], k), x.src[1].gep(k), *(_lane(s, k) for s in x.src[2:])))
                                           for k in range(n)))

def _is_reg(idx: UOp) -> bool:
  buf = idx.src[0]
  while buf.op is Ops.AFTER: buf = buf.src[0]
  return buf.op is Ops.BUFFER and buf.arg.addrspace is AddrSpace.REG

pm_devectorize = PatternMatcher([
  (UPat((*GroupOp.ALU, Ops.CAST, Ops.BITCAST), name="x"), _split_alu),
  (UPat(Ops.CONST, name="c"), _split_const),
  (UPat(Ops.GEP, src=(UPat(Ops.STACK, name="s"),), name="g"), _gep_stack),
  (UPat(Ops.LOAD, name="x"), _split_load),
  (UPat(Ops.STORE, name="x"), _split_store),
])

__all__ = ["pm_devectorize", "vector_access_kept"]

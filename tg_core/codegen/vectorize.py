"""Vectorize an UPCAST axis: one loop body over n-wide vectors instead of n scalar copies of it.

The expander uses this for one upcast axis of each END on renderers that declare `vector_upcast` (LLVM): the axis the
output is contiguous in. A load or store whose index is affine in the axis becomes one vector access at stride 1, a
scalar at stride 0, and a lane-by-lane gather/scatter otherwise; a load gated by a lane-dependent condition (padding)
takes a vector gate. Math on vectors is the same ops with vector dtypes, scalars broadcast (STACK of one value).
Whatever has no vector form here (THREEFRY, transcendentals the core approximates, dtypes the renderer emulates, a
load with its own gate) raises CantVectorize and the axis is expanded into scalar copies as before."""
from __future__ import annotations

from tg_core.dtype import AddrSpace, DType, dtypes
from tg_core.uop import Ops
from tg_core.uop.ops import UOp

class CantVectorize(Exception):
  """This body has a node without a vector form: the caller falls back to scalar copies."""

# ops with a vector form in the program IR (the renderer lowers them lane-wise or with vector instructions)
_VEC_OPS = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.NEG, Ops.WHERE, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR,
            Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR, Ops.RECIPROCAL, Ops.SQRT, Ops.TRUNC, Ops.MULACC, Ops.CAST, Ops.BITCAST,
            Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.DP4A, Ops.DPBF16}

def _add_terms(u: UOp) -> list[UOp]:
  out, todo = [], [u]
  while todo:
    x = todo.pop()
    if x.op is Ops.ADD: todo.extend(x.src)
    else: out.append(x)
  return out

def _sum_stride(u: UOp, rng: UOp) -> int | None:
  """The stride of `u` along rng where u is made of rng by ADDs and MULs by int constants only (every other leaf free of
  rng), e.g. (r0*2 + rng)*64: exact integer arithmetic, no simplification needed; else None."""
  if u is rng: return 1
  if rng not in u.toposort(): return 0
  if u.op is Ops.ADD:
    ret = 0
    for s in u.src:
      if (k := _sum_stride(s, rng)) is None: return None
      ret += k
    return ret
  if u.op is Ops.MUL:
    for x, c in (u.src, u.src[::-1]):
      if c.op is Ops.CONST and isinstance(c.arg, int) and (k := _sum_stride(x, rng)) is not None: return k * c.arg
  return None

def affine(idx: UOp, rng: UOp) -> tuple[UOp, int] | None:
  """(base, stride) with idx == base + rng*stride for every value of rng, proven by symbolic simplification; else None."""
  # the common case, read off the sum: terms free of rng, and terms whose stride along rng `_sum_stride` reads (rng, rng*c, or
  # rng inside a scaled sum, (a + rng)*c: "nested", its base part stays in the term)
  base_terms, stride, nested = [], 0, False
  for t in _add_terms(idx):
    if rng not in t.toposort(): base_terms.append(t)
    elif (k := _sum_stride(t, rng)) is None: break
    else: stride, nested = stride + k, nested or not (t is rng or (t.op is Ops.MUL and rng in t.src))
  else:
    # with rng nested in a term, the base is idx at rng = 0, simplified: what the proof below would return for it
    if nested: return idx.substitute({rng: rng.const_like(0)}).simplify(), stride
    base = base_terms[0] if base_terms else idx.const_like(0)
    for t in base_terms[1:]: base = base + t
    return base, stride
  base = idx.substitute({rng: rng.const_like(0)}).simplify()
  d = (idx.substitute({rng: rng.const_like(1)}) - base).simplify()
  if d.op is not Ops.CONST or not isinstance(d.arg, int): return None
  rest = (idx - base - rng * d.arg).simplify()
  return (base, d.arg) if rest.op is Ops.CONST and rest.arg == 0 else None

def _root(buf: UOp) -> UOp:
  while buf.op is Ops.AFTER: buf = buf.src[0]
  return buf

def _kernel_local(buf: UOp) -> bool: return (root := _root(buf)).op is Ops.BUFFER and root.arg.addrspace is AddrSpace.REG

def _vector_buffer(buf: UOp) -> bool:
  """Global buffers, and the scalar kernel-local buffers PACK copies panels into (vector accumulators stay lane-wise)."""
  if buf.op is Ops.PARAM: return buf.arg.addrspace is AddrSpace.GLOBAL
  return _kernel_local(buf) and buf.dtype.count == 1 and (_root(buf).arg.size or 0) > 1

class _Vectorizer:
  def __init__(self, body: UOp, rng: UOp, n: int, dtypes_ok: set[DType]):
    self.rng, self.n, self.dtypes_ok = rng, n, dtypes_ok
    self.deps: set[UOp] = set()
    for u in body.toposort():
      if u is rng or any(s in self.deps for s in u.src): self.deps.add(u)
    self.memo: dict[UOp, UOp] = {}

  def lane(self, u: UOp, k: int) -> UOp:
    """u (a scalar node) with the axis at lane k."""
    return u.substitute({self.rng: self.rng.const_like(k)}).simplify() if u in self.deps else u

  def vec(self, u: UOp) -> UOp:
    """u as an n-wide vector (a scalar that doesn't depend on the axis broadcasts)."""
    v = self.go(u)
    if v.dtype.count == self.n: return v
    # a constant splats as a vector constant (renderers see the divisor of x // 2 as a constant: a shift, not a division)
    return UOp.const(v.dtype.vec(self.n), v.arg) if v.op is Ops.CONST and not isinstance(v.arg, tuple) else v.broadcast(self.n)

  def check_dtype(self, dt: DType) -> None:
    if dt.scalar() not in self.dtypes_ok: raise CantVectorize(f"no vector form for {dt}")

  def go(self, u: UOp) -> UOp:
    if u not in self.deps: return u
    if (ret := self.memo.get(u)) is not None: return ret
    op, n = u.op, self.n
    if u is self.rng: ret = UOp.const(u.dtype.vec(n), tuple(range(n)))
    elif op is Ops.LOAD: ret = self.load(u)
    elif op is Ops.STORE: ret = self.store(u)
    elif op is Ops.REDUCE:
      self.check_dtype(u.dtype)
      ret = UOp(Ops.REDUCE, u.dtype.vec(n), (self.vec(u.src[0]), *u.src[1:]), u.arg)
    elif op in _VEC_OPS:
      self.check_dtype(u.dtype)
      for s in u.src: self.check_dtype(s.dtype)
      ret = UOp(op, u.dtype.vec(n), tuple(self.vec(s) for s in u.src), u.arg)
    elif op is Ops.GROUP: ret = UOp(Ops.GROUP, dtypes.void, tuple(self.go(s) for s in u.src))
    else: raise CantVectorize(f"no vector form for {op}")
    self.memo[u] = ret
    return ret

  def _access(self, idx_node: UOp) -> tuple[UOp, UOp, UOp | None, tuple[UOp, int] | None]:
    if idx_node.op is not Ops.INDEX or len(idx_node.src) not in (2, 3): raise CantVectorize("access not through INDEX(buf, idx[, gate])")
    buf, idx = idx_node.src[0], idx_node.src[1]
    gate = idx_node.src[2] if len(idx_node.src) == 3 else None
    if not _vector_buffer(buf): raise CantVectorize("not a global buffer or a kernel-local panel")
    return buf, idx, gate, (affine(idx, self.rng) or self.lanes_affine(idx)) if idx in self.deps else (idx, 0)

  def lanes_affine(self, idx: UOp) -> tuple[UOp, int] | None:
    """(base, stride) with idx == base + k*stride at each lane k < n, proven lane by lane: an index affine only over the n
    lanes, such as a byte of a packed block `(8*c + k) % 16` (lanes k < 8 don't wrap), which `affine` can't prove for every k."""
    base = self.lane(idx, 0)
    d = (self.lane(idx, 1) - base).simplify()
    if d.op is not Ops.CONST or not isinstance(d.arg, int): return None
    for k in range(2, self.n):
      if (r := (self.lane(idx, k) - base).simplify()).op is not Ops.CONST or r.arg != k * d.arg: return None
    return base, d.arg

  def load(self, u: UOp) -> UOp:
    if len(u.src) != 1: raise CantVectorize("a LOAD with its own gate")
    self.check_dtype(u.dtype)
    buf, idx, gate, aff = self._access(u.src[0])
    n, size = self.n, _root(buf).arg.size
    gate_dep = gate is not None and gate in self.deps
    if aff is not None and aff[1] == 0 and not gate_dep:  # the same element on every lane
      return buf.index(aff[0], *(() if gate is None else (gate,)), dtype=u.src[0].dtype).load(dtype=u.dtype)
    if aff is not None and aff[1] == 1 and isinstance(size, int) and size >= n:
      # one vector load; a lane-dependent gate masks lanes (a scalar gate reads index 0 when masked off: size >= n keeps it in bounds)
      g = () if gate is None else (self.vec(gate),) if gate_dep else (gate,)
      return buf.index(aff[0], *g, dtype=u.src[0].dtype).load(dtype=u.dtype.vec(n))
    lanes = []
    for k in range(n):
      g = () if gate is None else (self.lane(gate, k),)
      lanes.append(buf.index(self.lane(idx, k) if aff is None else (aff[0] + aff[1] * k).simplify(), *g, dtype=u.src[0].dtype).load(dtype=u.dtype))
    return UOp(Ops.STACK, u.dtype.vec(n), tuple(lanes))

  def store(self, u: UOp) -> UOp:
    if len(u.src) != 2: raise CantVectorize("a STORE with its own gate")
    buf, idx, gate, aff = self._access(u.src[0])
    val = self.go(u.src[1])
    n = self.n
    gate_dep = gate is not None and gate in self.deps
    if aff is not None and aff[1] == 1 and not gate_dep:
      return buf.index(aff[0], *(() if gate is None else (gate,)), dtype=u.src[0].dtype).store(val if val.dtype.count == n else val.broadcast(n))
    if aff is not None and aff[1] == 0 and not gate_dep:
      if val.dtype.count == n: raise CantVectorize("every lane stores to one element")  # the last lane wins: keep scalar order
      return buf.index(aff[0], *(() if gate is None else (gate,)), dtype=u.src[0].dtype).store(val)
    stores = []
    for k in range(n):
      g = () if gate is None else (self.lane(gate, k),)
      ik = self.lane(idx, k) if aff is None else (aff[0] + aff[1] * k).simplify()
      stores.append(buf.index(ik, *g, dtype=u.src[0].dtype).store(val.gep(k) if val.dtype.count == n else val))
    return UOp(Ops.GROUP, dtypes.void, tuple(stores))

def vectorize(body: UOp, rng: UOp, n: int, dtypes_ok: set[DType]) -> UOp:
  """`body` (an END's body) computed for all n values of `rng` at once. Raises CantVectorize."""
  return _Vectorizer(body, rng, n, dtypes_ok).go(body)

def access_strides(x: UOp, rng: UOp, op: Ops, inside: list[UOp] | None = None) -> list[int | None]:
  """The stride along `rng` of the index of each `op` (LOAD or STORE) in x: 0 where it doesn't depend on rng, None where
  it isn't affine in it. With `inside`, only the accesses whose index varies with one of those ranges."""
  out: list[int | None] = []
  for u in x.toposort():
    if u.op is not op or u.src[0].op is not Ops.INDEX: continue
    idx = u.src[0].src[1]
    top = idx.toposort()
    if inside is not None and not any(k in top for k in inside): continue
    out.append(0 if rng not in top else aff[1] if (aff := affine(idx, rng)) is not None else None)
  return out

def store_stride(body: UOp, rng: UOp) -> int | None:
  """The stride of `rng` in the index of the body's global stores, if they all agree (None: not affine or no store). A
  panel PACK copies before the loop reads it is a store into a kernel-local buffer: it doesn't decide the output's axis.
  A body with no global store (the copy's own loop nest) takes the stride of its stores into kernel-local panels: the copy
  then runs on vectors, and a padded tail's gate masks lanes of one vector load (left to the compiler, the gated scalar
  copies became gathers and scatters)."""
  stores = [u for u in body.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX]
  stores = [u for u in stores if not _kernel_local(u.src[0].src[0])] or [u for u in stores if _vector_buffer(u.src[0].src[0])]
  strides = {access_strides(u, rng, Ops.STORE)[-1] for u in stores}  # (a node's toposort ends with the node itself)
  return strides.pop() if len(strides) == 1 and None not in strides else None

def loads_contiguous(x: UOp, r: UOp, inside: list[UOp] | None = None) -> bool:
  """Does some load in x read consecutive elements along r (counting only loads that vary with a range of `inside`)?"""
  return 1 in access_strides(x, r, Ops.LOAD, inside)

__all__ = ["CantVectorize", "vectorize", "affine", "access_strides", "store_stride", "loads_contiguous"]

"""Spec tables: what a well-formed graph looks like at each stage of the pipeline, and `type_verify`, which checks one.

A spec is a PatternMatcher whose rule functions return True (the node is valid), False (invalid) or None (this rule
has no opinion, try the next one). A node that no rule accepts is invalid. The stages:
  spec_tensor        the tensor graph the front end builds (movement ops, REDUCE_AXIS, COPY, CALL, ...)
  spec_kernel_graph  the scheduled graph: CALLs of kernels over BUFFERs/PARAMs (call bodies are not entered)
  spec_program       a kernel on its way to code: INDEX/LOAD/STORE, RANGE/END, REDUCE, vectors, ...
  spec_hcq           the HCQ command graph (GETADDR, PROGRAM)
`verify_if_spec(sink, spec, stage)` runs `type_verify` only when SPEC is set (the test suite sets it)."""
from __future__ import annotations
from typing import Any, Callable, Sequence

from tg_core.dtype import AddrSpace, DType, dtypes
from tg_core.helpers import SPEC, all_same, prod
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import AxisType, CallInfo, KernelInfo, ParamArg, UOp, _OPAQUE_CALL_BODIES
from tg_core.uop.pattern import PatternMatcher, UPat

class SpecError(RuntimeError):
  """A graph broke a spec table: the message names the spec, the offending node and its sources."""

class SpecMatcher(PatternMatcher):
  """A spec table. `name` appears in errors; `enter_calls` says which CALL bodies type_verify checks: True (all),
  False (none: a kernel graph's bodies are programs, they follow spec_program) or "value" (only the bodies of
  value-producing calls, which are tensor graphs; opaque bodies belong to later stages)."""
  def __init__(self, patterns: Sequence[tuple[UPat, Callable]], name: str = "spec", enter_calls: bool | str = True):
    super().__init__(patterns)
    self.name, self.enter_calls = name, enter_calls
  def __add__(self, more: PatternMatcher) -> SpecMatcher: return SpecMatcher(self.patterns + more.patterns, self.name, self.enter_calls)

# *** helpers ***

def matches_dtype(u: UOp, dtype: DType) -> bool: return u.dtype == dtype
def is_device(d: Any) -> bool: return isinstance(d, str) or (isinstance(d, tuple) and len(d) > 0 and all(isinstance(s, str) for s in d))
def _is_sint(s: Any) -> bool:
  return (isinstance(s, int) and not isinstance(s, bool) and s >= 0) or (isinstance(s, UOp) and dtypes.is_int(s.dtype))
def _is_int(x: Any) -> bool: return isinstance(x, int) and not isinstance(x, bool)
def _provably_ne(a: Any, b: Any) -> bool:
  """a != b is certain: for ints, plain comparison; for symbolic sizes, only when the value ranges prove it
  (spec must not reject a view whose sizes are equal at runtime but not provably so)."""
  if _is_int(a) and _is_int(b): return a != b
  ne = a.ne(b) if isinstance(a, UOp) else b.ne(a)
  return ne.vmin == ne.vmax and bool(ne.vmin)

def _const_arg_ok(v: Any, dt: DType) -> bool:
  if dt.count > 1 and not isinstance(v, tuple): return _const_arg_ok(v, dt.scalar())  # a scalar broadcast to every lane
  if dt.count > 1: return isinstance(v, tuple) and len(v) == dt.count and all(_const_arg_ok(x, dt.scalar()) for x in v)
  if dt == dtypes.bool: return isinstance(v, bool)
  if dtypes.is_int(dt): return _is_int(v) and (dt == dtypes.weakint or dt.min <= v <= dt.max)
  if dtypes.is_float(dt): return isinstance(v, float)
  return False

def _const_ok(c: UOp) -> bool:
  if len(c.src) > 1 or (c.src and c.src[0].op is not Ops.DEVICE): return False
  return _const_arg_ok(c.arg, c.dtype)

# *** ALU dtype rules (shared by the tensor graph and programs) ***
_TRANSCENDENTAL = {Ops.SIN, Ops.LOG2, Ops.EXP2, Ops.SQRT, Ops.RECIPROCAL}
_BITWISE = {Ops.AND, Ops.OR, Ops.XOR}

def _alu_ok(x: UOp) -> bool:
  dt, src = x.dtype, x.src
  if dt == dtypes.void or any(s.dtype == dtypes.void for s in src): return False
  if x.op in GroupOp.Comparison:
    return len(src) == 2 and src[0].dtype == src[1].dtype and dt == dtypes.bool.vec(src[0].dtype.count)
  if x.op is Ops.WHERE:
    return len(src) == 3 and src[0].dtype.scalar() == dtypes.bool and src[1].dtype == src[2].dtype == dt
  if x.op in (Ops.SHL, Ops.SHR):  # shift operands must be int
    return len(src) == 2 and dtypes.is_int(dt) and src[0].dtype == dt and dtypes.is_int(src[1].dtype)
  if x.op in _TRANSCENDENTAL: return len(src) == 1 and dtypes.is_float(dt) and src[0].dtype == dt
  if x.op in GroupOp.Unary: return len(src) == 1 and src[0].dtype == dt
  if x.op in _BITWISE and dtypes.is_float(dt): return False
  if x.op in GroupOp.Binary: return len(src) == 2 and all(s.dtype == dt for s in src)
  if x.op is Ops.MULACC: return len(src) == 3 and all(s.dtype == dt for s in src)
  if x.op is Ops.DP4A:
    return len(src) == 3 and dt.scalar() == dtypes.int32 and src[0].dtype in (dt, dtypes.uint32.vec(dt.count)) and all(s.dtype == dt for s in src[1:])
  if x.op is Ops.DPBF16:
    return len(src) == 3 and dt.scalar() == dtypes.float32 and src[2].dtype == dt and all(s.dtype == dtypes.uint32.vec(dt.count) for s in src[:2])
  return False

# *** vectors ***
def _stack_ok(x: UOp) -> bool:
  return len(x.src) > 1 and len(x.src) == x.dtype.count and all(x.dtype == s.dtype.vec(len(x.src)) for s in x.src if s.dtype.count == 1)
def _gep_ok(x: UOp) -> bool:
  if len(x.src) != 1 or not isinstance(x.arg, tuple) or not x.arg: return False
  cnt = x.src[0].dtype.count
  return all(_is_int(i) and 0 <= i < cnt for i in x.arg) and x.dtype == x.src[0].dtype.scalar().vec(len(x.arg))

# *** movement ops: the arg fits the source's shape ***
def _movement_ok(x: UOp) -> bool:
  if len(x.src) != 1 or x.dtype != x.src[0].dtype or (ps := x.src[0]._shape) is None or not isinstance(x.arg, tuple): return False
  match x.op:
    case Ops.RESHAPE: return all(_is_sint(s) for s in x.arg) and not _provably_ne(prod(ps), prod(x.arg))
    case Ops.PERMUTE: return sorted(x.arg) == list(range(len(ps))) if all(_is_int(i) for i in x.arg) else False
    case Ops.EXPAND:
      return len(x.arg) == len(ps) and all(_is_sint(n) for n in x.arg) and \
        all(n is s or (_is_int(s) and s == 1) or (_is_int(n) and _is_int(s) and n == s) for s, n in zip(ps, x.arg))
    case Ops.PAD:
      return len(x.arg) == len(ps) and all(isinstance(p, tuple) and len(p) == 2 and all(_is_sint(v) for v in p) for p in x.arg)
    case Ops.SHRINK:
      if len(x.arg) != len(ps) or not all(isinstance(p, tuple) and len(p) == 2 and all(_is_sint(v) for v in p) for p in x.arg): return False
      return all(not (_is_int(b) and _is_int(e)) or b <= e for b, e in x.arg) and \
        all(not (_is_int(e) and _is_int(s)) or e <= s for (_, e), s in zip(x.arg, ps))
    case Ops.FLIP: return len(x.arg) == len(ps) and all(isinstance(f, bool) for f in x.arg)
  return False

def _reduce_axis_ok(x: UOp) -> bool:
  if len(x.src) != 1 or x.dtype != x.src[0].dtype or (ps := x.src[0]._shape) is None: return False
  if not (isinstance(x.arg, tuple) and len(x.arg) == 2 and x.arg[0] in (Ops.ADD, Ops.MUL, Ops.MAX) and isinstance(x.arg[1], tuple)): return False
  return all(_is_int(a) and 0 <= a < len(ps) for a in x.arg[1]) and len(set(x.arg[1])) == len(x.arg[1])

def _param_ok(x: UOp) -> bool: return isinstance(x.arg, ParamArg) and x.dtype.scalar() == x.arg.dtype.scalar()
def _is_alu_param(x: UOp) -> bool: return x.op is Ops.PARAM and isinstance(x.arg, ParamArg) and x.arg.addrspace is AddrSpace.ALU

def _bind_ok(x: UOp) -> bool:
  if len(x.src) != 2 or not (x.src[0].is_variable or _is_alu_param(x.src[0])) or x.src[1].op is not Ops.CONST: return False
  lo, hi = x.src[0].arg.vmin_vmax if x.src[0].arg.vmin_vmax is not None else (x.src[0].dtype.min, x.src[0].dtype.max)
  return x.dtype == x.src[0].dtype and lo <= x.src[1].arg <= hi

def _call_ok(x: UOp) -> bool:
  if x.dtype != dtypes.void or not x.src or not (x.arg is None or isinstance(x.arg, CallInfo)): return False
  if x.src[0].op not in _OPAQUE_CALL_BODIES: return False
  # a value-producing call (RETURNED inputs) has a SINK of stores as its body
  return x.num_returned == 0 or x.src[0].op is Ops.SINK

def _mstack_ok(x: UOp) -> bool:
  if not x.src or not all(s.dtype == x.dtype for s in x.src): return False
  return all(isinstance(s.device, str) for s in x.src) or (all_same(x.src) and x.src[0].device is None)
def _mselect_ok(x: UOp) -> bool:
  return len(x.src) == 1 and isinstance(x.src[0].device, tuple) and _is_int(x.arg) and 0 <= x.arg < len(x.src[0].device) and \
    x.dtype == x.src[0].dtype

def _unshard_ok(x: UOp) -> bool:
  """UNSHARD: a value on a device tuple seen whole, replicated (arg ()) or split on one axis (arg (axis,)). Over an MSTACK the parts
  agree in rank and in every dim but the sharded one (where uneven slices are allowed); replicated parts agree in shape."""
  y = x.src[0]
  if len(x.src) != 1 or not matches_dtype(y, x.dtype) or not isinstance(y.device, tuple) or (ps := y._shape) is None: return False
  if not (isinstance(x.arg, tuple) and len(x.arg) <= 1 and all(_is_int(a) and 0 <= a < len(ps) for a in x.arg)): return False
  if y.op is not Ops.MSTACK: return True
  shapes = [p._shape for p in y.src]
  return all(s is not None and len(s) == len(ps) and all(d == e for i, (d, e) in enumerate(zip(s, ps)) if i not in x.arg) for s in shapes)

def _allreduce_ok(x: UOp) -> bool:
  return len(x.src) == 1 and matches_dtype(x.src[0], x.dtype) and isinstance(x.src[0].device, tuple) and isinstance(x.arg, tuple) and \
    len(x.arg) == 1 and x.arg[0] in (Ops.ADD, Ops.MUL, Ops.MAX)

# AFTER's first source is the buffer (or view) the dependencies write
_AFTER_BASES = GroupOp.Movement | {Ops.PARAM, Ops.BUFFER, Ops.CONTIGUOUS, Ops.INDEX, Ops.AFTER, Ops.UNSHARD, Ops.BITCAST, Ops.INS, Ops.RETURNED}

# *** the shared rules (part of every spec but the kernel graph) ***
spec_shared = SpecMatcher([
  # a loop-ended END requires a trailing bool condition for the backedge (loop again while true)
  (UPat(Ops.END, dtypes.void, src=(UPat(), UPat(Ops.RANGE), UPat(dtype=dtypes.bool))), lambda: True),
  # PARAM/BUFFER have a size in the arg, no shape input. BUFFERs here are kernel-local scratch
  (UPat(Ops.PARAM, src=(), name="x"), _param_ok),
  (UPat(Ops.BUFFER, src=(), name="x"), lambda x:
   (_param_ok(x) and x.arg.device is None) if x.addrspace in (AddrSpace.REG, AddrSpace.LOCAL) else None),
  # GROUP of stores (or groups, or NOOPs)
  (UPat(Ops.GROUP, dtypes.void, src=UPat((Ops.GROUP, Ops.STORE, Ops.NOOP, Ops.INS, Ops.END))), lambda: True),
  (UPat(Ops.AFTER, src=(UPat(_AFTER_BASES),), allow_any_len=True, name="x"), lambda x: matches_dtype(x.src[0], x.dtype)),
  # CUSTOM (inline and non inline): the arg is the source string and the dtype it produces, void for a bare statement
  (UPat((Ops.CUSTOM, Ops.CUSTOMI), name="x"), lambda x: isinstance(x.arg, str)),
  (UPat(Ops.NOOP), lambda: True),
], "spec_shared")

# *** tensor graph: these ops can exist in a tensor graph but not in programs (movement, REDUCE_AXIS, COPY, ...) ***
spec_tensor = SpecMatcher([
  # a global BUFFER is real memory: concrete size, a device
  (UPat(Ops.BUFFER, src=(), name="buf"), lambda buf:
   (not dtypes.is_weak(buf.dtype) and buf.dtype == buf.arg.dtype and _is_int(buf.arg.size) and buf.arg.size >= 0 and is_device(buf.arg.device))
   if isinstance(buf.arg, ParamArg) and buf.addrspace is AddrSpace.GLOBAL else None),
  # a Variable is a 0-d ALU BUFFER with a value range and no device
  (UPat(Ops.BUFFER, src=(), name="buf"), lambda buf:
   (buf.arg.device is None and buf.arg.size is None and buf.arg.vmin_vmax is not None) if buf.is_variable else None),
  (UPat(Ops.BIND, name="x"), _bind_ok),
  (UPat(Ops.CONST, name="c"), _const_ok),
  (UPat(Ops.DEVICE, dtypes.void, src=(), name="d"), lambda d: is_device(d.arg)),
  (UPat(GroupOp.Movement, name="x"), _movement_ok),
  (UPat(GroupOp.ALU, name="x"), _alu_ok),
  (UPat(Ops.CAST, src=(UPat.var("y"),), name="x"), lambda x, y: x.dtype != dtypes.void and y.dtype != dtypes.void),
  (UPat(Ops.BITCAST, src=(UPat.var("y"),), name="x"), lambda x, y: x.dtype != dtypes.void and y.dtype != dtypes.void),
  (UPat(Ops.REDUCE_AXIS, name="x"), _reduce_axis_ok),
  (UPat(Ops.CONTIGUOUS, src=(UPat.var("y"),), allow_any_len=True, name="x"), lambda x, y: matches_dtype(y, x.dtype)),
  (UPat((Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), src=(UPat.var("y"),), name="x"), lambda x, y: matches_dtype(y, x.dtype)),
  (UPat(Ops.ALLREDUCE, name="x"), _allreduce_ok),
  (UPat(Ops.COPY, src=(UPat.var("y"), UPat(Ops.DEVICE)), name="x"), lambda x, y: matches_dtype(y, x.dtype)),
  (UPat(Ops.AFTER, src=(UPat((Ops.MSTACK, Ops.MSELECT)),), allow_any_len=True, name="x"), lambda x: matches_dtype(x.src[0], x.dtype)),
  (UPat(Ops.STORE, dtypes.void, src=(UPat(), UPat()), allow_any_len=True), lambda: True),
  (UPat(Ops.SINK, dtypes.void), lambda: True),
  (UPat(Ops.GROUP, dtypes.void), lambda: True),  # also the gradient tuple: any sources
  (UPat(Ops.CUSTOM_FUNCTION, dtypes.void, name="x"), lambda x: isinstance(x.arg, str)),
  # CALL: void, an opaque body (value-producing calls have a SINK body and RETURNED inputs)
  (UPat(Ops.CALL, name="x"), _call_ok),
  # RETURNED is a placeholder for a buffer a call writes and returns: it has a size in the arg, no shape input
  (UPat(Ops.RETURNED, src=(), name="x"), _param_ok),
  # multi-device
  (UPat(Ops.MSTACK, name="x"), _mstack_ok),
  (UPat(Ops.MSELECT, name="x"), _mselect_ok),
  (UPat(Ops.UNSHARD, name="x"), _unshard_ok),
  (UPat(Ops.STACK, name="x"), _stack_ok),
  (UPat(Ops.GEP, name="x"), _gep_ok),
  # SPECIAL is index before index lowering. custom kernels have this
  (UPat(Ops.SPECIAL, src=(UPat.var("y"),), name="x"), lambda x, y: dtypes.is_int(x.dtype) and dtypes.is_int(y.dtype) and isinstance(x.arg, str)),
  (UPat(Ops.PYLITERAL, dtypes.void), lambda: True),
], "spec_tensor", enter_calls="value") + spec_shared

# *** kernel graph: CALLs of kernels over buffers (call bodies are kernels: check them with spec_program) ***
spec_kernel_graph = SpecMatcher([
  # vector args of a call: consts, params, variables
  (UPat(Ops.STACK, name="s"), lambda s: _stack_ok(s) and all(x.op in (Ops.CONST, Ops.PARAM) or x.is_variable or x.is_bound_var for x in s.src)),
  # param is outside buffer, buffer is a global buffer or a variable. params have a size in the arg, no shape input
  (UPat(Ops.PARAM, src=(), name="x"), _param_ok),
  (UPat(Ops.BUFFER, src=(), name="x"), lambda x: _param_ok(x) and x.addrspace in (AddrSpace.GLOBAL, AddrSpace.ALU)),
  (UPat(Ops.BIND, name="x"), _bind_ok),
  (UPat(Ops.CONST, name="c"), _const_ok),
  (UPat(Ops.DEVICE, dtypes.void, src=(), name="d"), lambda d: is_device(d.arg)),
  (UPat(Ops.BITCAST, src=(UPat(),)), lambda: True),
  (UPat(Ops.MSTACK, name="x"), _mstack_ok),
  (UPat(Ops.MSELECT, name="x"), _mselect_ok),
  (UPat(Ops.COPY, src=(UPat.var("y"),), allow_any_len=True, name="x"), lambda x, y: matches_dtype(y, x.dtype)),
  (UPat(Ops.CALL, name="x"), _call_ok),
  (UPat(Ops.SINK, dtypes.void), lambda: True),
  (UPat(Ops.GROUP, dtypes.void), lambda: True),
  # after on PARAM or AFTER (or the views of them)
  (UPat(Ops.AFTER, src=(UPat(GroupOp.Movement | {Ops.PARAM, Ops.AFTER, Ops.BUFFER, Ops.MSTACK, Ops.MSELECT, Ops.BITCAST}),),
        allow_any_len=True, name="x"), lambda x: matches_dtype(x.src[0], x.dtype)),
  # movement ops (views of the flat PARAM storage) are valid in value positions too
  (UPat(GroupOp.Movement, name="x"), _movement_ok),
], "spec_kernel_graph", enter_calls=False)

# *** program: a kernel on its way to code ***
def _index_ok(x: UOp) -> bool:
  if len(x.src) < 2 or x.dtype == dtypes.void: return False
  buf, idxs = x.src[0], list(x.src[1:])
  if buf.op in GroupOp.ALU or buf.dtype == dtypes.void: return False
  if len(idxs) > 1 and idxs[-1].dtype.scalar() == dtypes.bool: idxs = idxs[:-1]  # trailing validity gate
  return all(dtypes.is_int(i.dtype) for i in idxs)

def _load_ok(x: UOp) -> bool:
  if x.dtype == dtypes.void or len(x.src) not in (1, 3) or x.src[0].dtype == dtypes.void: return False
  # LOAD(index, alt, gate): the gate picks between the loaded value and alt
  return len(x.src) == 1 or (x.src[1].dtype == x.dtype and x.src[2].dtype.scalar() == dtypes.bool)

def _store_ok(x: UOp) -> bool:
  if len(x.src) not in (2, 3) or x.src[0].dtype == dtypes.void or x.src[1].dtype == dtypes.void: return False
  return len(x.src) == 2 or x.src[2].dtype.scalar() == dtypes.bool

def _range_ok(x: UOp) -> bool:
  a = x.arg
  return len(x.src) == 1 and dtypes.is_int(x.dtype) and x.dtype.count == 1 and dtypes.is_int(x.src[0].dtype) and \
    isinstance(a, tuple) and len(a) >= 2 and isinstance(a[-1], AxisType) and all(_is_int(i) for i in a[:-1])

def _end_ok(x: UOp) -> bool:
  rngs = list(x.src[1:])
  if len(rngs) >= 2 and rngs[-1].dtype == dtypes.bool: rngs = rngs[:-1]  # a loop's backedge condition
  return len(rngs) >= 1 and all(r.op is Ops.RANGE for r in rngs)

def _reduce_ok(x: UOp) -> bool:
  return x.arg in (Ops.ADD, Ops.MUL, Ops.MAX) and len(x.src) >= 1 and x.src[0].dtype == x.dtype and all(r.op is Ops.RANGE for r in x.src[1:])

def _bitcast_program_ok(x: UOp, y: UOp) -> bool:
  return x.dtype != dtypes.void and y.dtype != dtypes.void and x.dtype.scalar().bitsize * x.dtype.count == y.dtype.scalar().bitsize * y.dtype.count

def _wmma_ok(x: UOp) -> bool:
  """D = WMMA(A, B, C): D has C's dtype; with a TensorCore arg (the TC opt's) each operand is its fragment: dtype_in vectors of
  A's and B's fragment sizes, C a dtype_out vector of C's."""
  from tg_core.renderer import TensorCore
  if x.dtype != x.src[2].dtype: return False
  if not isinstance(tc := x.arg, TensorCore): return True
  if not tc.layout: return False
  return all(s.dtype == dt.vec(tc.fragment_size(i)) for i, (s, dt) in enumerate(zip(x.src, (tc.dtype_in, tc.dtype_in, tc.dtype_out))))

spec_program = SpecMatcher([
  (UPat(Ops.INDEX, name="x"), _index_ok),
  (UPat(Ops.LOAD, name="x"), _load_ok),
  (UPat(Ops.STORE, dtypes.void, name="x"), _store_ok),
  (UPat(Ops.RANGE, name="x"), _range_ok),
  (UPat(Ops.END, dtypes.void, name="x"), _end_ok),
  (UPat(Ops.REDUCE, name="x"), _reduce_ok),
  (UPat(Ops.SPECIAL, src=(UPat.var("y"),), name="x"), lambda x, y: dtypes.is_int(x.dtype) and dtypes.is_int(y.dtype) and isinstance(x.arg, str)),
  (UPat(Ops.STACK, name="x"), _stack_ok),
  (UPat(Ops.GEP, name="x"), _gep_ok),
  (UPat(Ops.CONST, src=(), name="c"), _const_ok),
  (UPat(GroupOp.ALU, name="x"), _alu_ok),
  (UPat(Ops.CAST, src=(UPat.var("y"),), name="x"), lambda x, y: x.dtype != dtypes.void and y.dtype != dtypes.void),
  (UPat(Ops.BITCAST, src=(UPat.var("y"),), name="x"), _bitcast_program_ok),
  (UPat(Ops.IF, dtypes.void, src=(UPat(dtype=dtypes.bool),), allow_any_len=True), lambda: True),
  (UPat(Ops.ENDIF, dtypes.void, src=(UPat(Ops.IF),), allow_any_len=True), lambda: True),
  (UPat(Ops.BARRIER, dtypes.void), lambda: True),
  (UPat(Ops.SINK, dtypes.void, name="x"), lambda x: x.arg is None or isinstance(x.arg, KernelInfo)),
  (UPat(Ops.LINEAR, dtypes.void), lambda: True),
  (UPat(Ops.WMMA, src=(UPat(), UPat(), UPat()), name="x"), _wmma_ok),
  (UPat(Ops.INS), lambda: True),
], "spec_program") + spec_shared

# *** HCQ command graphs (skeleton) ***
spec_hcq = SpecMatcher([
  (UPat(Ops.GETADDR, dtypes.uint64, src=(UPat((Ops.BUFFER, Ops.PARAM, Ops.SHRINK, Ops.BITCAST, Ops.MSTACK)).or_after(),), name="x"),
   lambda x: is_device(x.arg)),
  (UPat(Ops.PROGRAM, dtypes.void, src=(UPat((Ops.BUFFER, Ops.PARAM)).or_after(),)), lambda: True),
  (UPat(Ops.BUFFER, src=(), name="x"), lambda x: _param_ok(x) and is_device(x.arg.device) if x.addrspace is AddrSpace.GLOBAL else None),
  (UPat(GroupOp.Movement, name="x"), _movement_ok),
  (UPat(Ops.BITCAST, src=(UPat(),)), lambda: True),
  (UPat(Ops.MSTACK, name="x"), _mstack_ok),
  (UPat(Ops.SINK, dtypes.void), lambda: True),
], "spec_hcq", enter_calls=False) + spec_shared

# *** checking ***

def spec_check(spec: PatternMatcher, u: UOp) -> bool | None:
  """The verdict of `spec` on one node: True (valid), False (a rule rejected it) or None (no rule matched)."""
  ret = spec.rewrite(u)
  return None if ret is None else bool(ret)

def _rejecting_rule(spec: PatternMatcher, u: UOp) -> str | None:
  # which rule said False (for the error message; only runs on failure)
  for rule in spec.pdict.get(u.op, []):
    if not rule.early_reject <= {s.op for s in u.src}: continue
    for m in rule.pat.match(u, {}):
      if (ret := rule.fxn(ctx=None, **m) if rule.wants_ctx else rule.fxn(**m)) is not None: return rule.name if not ret else None
  return None

def _short(u: UOp, width: int = 120) -> str:
  arg = repr(u.arg)
  if len(arg) > width: arg = arg[:width] + "..."
  shape = ""
  try:
    if (s := u._shape) is not None: shape = f" shape={s}"
  except Exception as e: shape = f" shape=<{type(e).__name__}>"
  return f"{u.op} {u.dtype!r} arg={arg}{shape} ({len(u.src)} src)"

def _spec_error(spec: PatternMatcher, u: UOp, verdict: bool | None, pos: int | None) -> SpecError:
  name = getattr(spec, "name", type(spec).__name__)
  why = "no rule matched" if verdict is None else (f"rejected by rule at {r}" if (r := _rejecting_rule(spec, u)) else "rejected")
  lines = [f"{name}: invalid {u.op} ({why})" + (f" at position {pos}" if pos is not None else ""),
           f"  uop: {_short(u)}"] + [f"  src[{i}]: {_short(s)}" for i, s in enumerate(u.src)]
  return SpecError("\n".join(lines))

def _nodes(root: UOp, enter_calls: bool | str) -> list[UOp]:
  if enter_calls != "value": return list(root.toposort(enter_calls=bool(enter_calls)))
  ret: dict[UOp, None] = {}
  todo = [root]
  while todo:
    for u in todo.pop().toposort(gate=lambda u: u not in ret, enter_calls=False):
      ret[u] = None
      if u.op is Ops.CALL and u.num_returned > 0 and u.src[0] not in ret: todo.append(u.src[0])
  return list(ret)

def type_verify(uops: UOp | list[UOp], spec: PatternMatcher, enter_calls: bool | str | None = None) -> None:
  """Check every node against `spec`; raise SpecError on the first one no rule accepts. A UOp is walked in
  topological order, into the CALL bodies the spec's `enter_calls` (or the argument) names; a list is checked as given."""
  if isinstance(uops, UOp):
    lst, pos_of = _nodes(uops, enter_calls if enter_calls is not None else getattr(spec, "enter_calls", True)), False
  else: lst, pos_of = list(uops), True
  for i, u in enumerate(lst):
    if (verdict := spec_check(spec, u)) is not True: raise _spec_error(spec, u, verdict, i if pos_of else None)

def verify_if_spec(sink: UOp | list[UOp], spec: PatternMatcher, stage_name: str | None = None) -> None:
  """Pipeline stages call this after they build a graph: with SPEC set it must pass `spec`, else nothing happens."""
  if not SPEC: return
  try: type_verify(sink, spec)
  except SpecError as e:
    if stage_name is None: raise
    raise SpecError(f"after stage {stage_name!r}: {e}") from None

__all__ = ["SpecError", "SpecMatcher", "spec_shared", "spec_tensor", "spec_kernel_graph", "spec_program", "spec_hcq", "type_verify",
           "verify_if_spec", "spec_check", "matches_dtype", "is_device"]

"""`UOp`: the immutable, hash-consed node of tg's IR, and the small records its args use."""
from __future__ import annotations
import functools
import itertools
import math
import struct
import weakref
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Sequence, Union

from tg_core.dtype import AddrSpace, ConstType, DType, dtypes, least_upper_dtype, strong_dtype, truncate_float, truncate_int
from tg_core.helpers import all_int, prod
from tg_core.uop import GroupOp, Ops

sint = Union[int, "UOp"]   # a size that may be symbolic
PyConst = Union[float, int, bool]

class AxisType(Enum):
  DEVICE = "d"; GLOBAL = "g"; THREAD = "t"; LOCAL = "l"; WARP = "w"; LOOP = "L"; UPCAST = "u"  # noqa: E702
  GROUP_REDUCE = "G"; REDUCE = "R"; UNROLL = "r"  # noqa: E702
  KBLOCK = "k"  # the outer loop of a reduce split by the KBLOCK opt: its partial sums accumulate in the output buffer
  def __repr__(self) -> str: return f"AxisType.{self.name}"
axis_to_pos = {AxisType.DEVICE: -2, AxisType.LOOP: -1, AxisType.THREAD: 0, AxisType.GLOBAL: 0, AxisType.WARP: 1, AxisType.LOCAL: 2,
               AxisType.UPCAST: 3, AxisType.GROUP_REDUCE: 2, AxisType.REDUCE: 4, AxisType.UNROLL: 5, AxisType.KBLOCK: 4}

@dataclass(frozen=True)
class ParamArg:
  """What a PARAM, BUFFER or RETURNED is. `size` is the flat element count (a concrete int, None for a scalar);
  a multi-dimensional or symbolic shape is a view (RESHAPE/SHRINK) on top of this flat storage."""
  slot: int
  dtype: DType
  size: int | None = None
  vmin_vmax: tuple[PyConst, PyConst] | None = None
  multiple_of: int | None = None
  name: str | None = None
  addrspace: AddrSpace = AddrSpace.GLOBAL
  device: str | tuple[str, ...] | None = None
  volatile: bool = False
  image: tuple[int, int] | None = None
  def __repr__(self) -> str:
    extra = [f"{k}={getattr(self, k)!r}" for k in ("vmin_vmax", "multiple_of", "name", "device", "image") if getattr(self, k) is not None]
    if self.addrspace != AddrSpace.GLOBAL: extra.append(f"addrspace={self.addrspace!r}")
    if self.volatile: extra.append("volatile=True")
    return f"ParamArg({', '.join([repr(self.slot), repr(self.dtype)] + ([repr(self.size)] if self.size is not None else []) + extra)})"

@dataclass(frozen=True)
class CallInfo:
  """The arg of a CALL: a custom backward, a name for debug output, and compilation hints."""
  grad_fxn: Callable | None = None
  name: str | None = None
  precompile: bool = False
  precompile_backward: bool = False
  aux: Any = None

@dataclass(frozen=True)
class KernelInfo:
  """The arg of a kernel's SINK: its name and the optimizations applied to it."""
  name: str = "test"
  axis_types: tuple[AxisType, ...] = ()
  dont_use_locals: bool = False
  applied_opts: tuple = ()
  opts_to_apply: tuple | None = None

# *** properties derived from sources, computed without recursion ***
_MISSING = object()
class recursive_property:
  """Like functools.cached_property, for properties computed from the sources' values of the same property. On a miss
  it fills the cache of every uncached node below first (in topological order), so deep graphs never recurse."""
  def __init__(self, fxn: Callable[[Any], Any]):
    self.fxn, self.name = fxn, fxn.__name__
    self.__doc__ = fxn.__doc__
  def __set_name__(self, owner: type, name: str) -> None: self.name = name
  def __get__(self, x: Any, owner: Any = None) -> Any:
    if x is None: return self
    d = x.__dict__
    if (v := d.get(self.name, _MISSING)) is not _MISSING: return v
    name = self.name
    if all(name in s.__dict__ for s in x.src): v = d[name] = self.fxn(x)  # the common case: sources known, no walk
    else:
      for u in x.toposort(gate=lambda n: name not in n.__dict__): u.__dict__[name] = self.fxn(u)
      v = d[name]
    return v

# *** hash-consing ***

@functools.cache
def _device_node(device: str | tuple[str, ...]) -> UOp:
  """The DEVICE leaf for a device, kept alive: every constant hangs off one, and rebuilding it per op costs time."""
  return UOp(Ops.DEVICE, arg=device)


def _key_arg(arg: Any) -> Any:
  # floats compare equal across -0.0/0.0 and never equal for NaN: key them by their bits so each distinct constant is one node
  if arg.__class__ is float: return (float, arg.hex())
  if arg.__class__ is tuple and any(a.__class__ is float for a in arg): return tuple(_key_arg(a) for a in arg)
  return arg

# ops whose nodes have no tensor shape (kernel-level and program-level nodes)
_SHAPELESS = frozenset({Ops.STORE, Ops.SINK, Ops.GROUP, Ops.LINEAR, Ops.PROGRAM, Ops.SOURCE, Ops.BINARY, Ops.END, Ops.IF, Ops.ENDIF,
                        Ops.BARRIER, Ops.REWRITE_ERROR, Ops.NOOP, Ops.CUSTOM_FUNCTION, Ops.INDEX, Ops.LOAD, Ops.REDUCE, Ops.STAGE,
                        Ops.STACK, Ops.GEP, Ops.UNROLL, Ops.CONTRACT, Ops.WMMA, Ops.CUSTOM, Ops.CUSTOMI, Ops.GETADDR, Ops.INS,
                        Ops.PYLITERAL, Ops.DEVICE})

class UOpMetaClass(type):
  ucache: dict[tuple, weakref.ReferenceType[UOp]] = {}
  def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None, tag: Any = None) -> UOp:
    key = (op, dtype, src, _key_arg(arg), tag)
    if (wret := UOpMetaClass.ucache.get(key)) is not None and (ret := wret()) is not None: return ret
    created = super().__call__(op, dtype, src, arg, tag)
    UOpMetaClass.ucache[key] = weakref.ref(created)
    return created

class UOp(metaclass=UOpMetaClass):
  """One node of the IR. Immutable and hash-consed: building the same (op, dtype, src, arg, tag) twice gives the
  same object, so identity is structural equality and `==` is `is`. Nodes are freed when nothing refers to them."""
  op: Ops
  dtype: DType
  src: tuple[UOp, ...]
  arg: Any
  tag: Any
  __slots__ = ("op", "dtype", "src", "arg", "tag", "__weakref__", "__dict__")
  unique_num = itertools.count(0)

  def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None, tag: Any = None):
    object.__setattr__(self, "op", op); object.__setattr__(self, "dtype", dtype); object.__setattr__(self, "src", src)  # noqa: E702
    object.__setattr__(self, "arg", arg); object.__setattr__(self, "tag", tag)  # noqa: E702
  def __setattr__(self, name: str, value: Any) -> None: raise AttributeError(f"UOp is immutable (tried to set {name}); use .replace()")
  def __del__(self) -> None:
    try: del UOpMetaClass.ucache[(self.op, self.dtype, self.src, _key_arg(self.arg), self.tag)]
    except (KeyError, AttributeError, TypeError): pass
  def __reduce__(self) -> tuple: return (UOp, (self.op, self.dtype, self.src, self.arg, self.tag))
  def replace(self, **kwargs: Any) -> UOp:
    new = (kwargs.pop("op", self.op), kwargs.pop("dtype", self.dtype), kwargs.pop("src", self.src), kwargs.pop("arg", self.arg), kwargs.pop("tag", self.tag))
    if kwargs: raise TypeError(f"replace got unexpected fields {list(kwargs)}")
    if (self.op, self.dtype, self.src, self.arg, self.tag) == new: return self
    return UOp(*new)
  def rtag(self, tag: Any = True) -> UOp: return self.replace(tag=tag)
  @recursive_property
  def key(self) -> bytes:
    import hashlib
    return hashlib.sha256(str((self.op, self.dtype, self.arg, self.tag)).encode() + b"".join(s.key for s in self.src)).digest()
  def __repr__(self) -> str:
    from tg_core.uop.render import uop_repr
    return uop_repr(self)
  def pyrender(self) -> str:
    from tg_core.uop.render import pyrender
    return pyrender(self)

  # *** graph walking (iterative: graphs are deep) ***
  def toposort(self, gate: Callable[[UOp], bool] | None = None, enter_calls: bool = True) -> dict[UOp, None]:
    """All nodes reachable from self, each after its sources. `gate(u)` False stops the walk at u.
    With enter_calls=False, the body (src[0]) of a CALL is not entered."""
    ret: dict[UOp, None] = {}
    stack: list[tuple[UOp, bool]] = [(self, False)]
    while stack:
      node, visited = stack.pop()
      if node in ret: continue
      if not visited:
        if gate is None or gate(node):
          stack.append((node, True))
          srcs = node.src[1:] if (not enter_calls and node.op is Ops.CALL) else node.src
          for s in reversed(srcs):
            if s not in ret: stack.append((s, False))
      else: ret[node] = None
    return ret
  @functools.cached_property
  def backward_slice(self) -> dict[UOp, None]:
    ts = self.toposort()
    del ts[self]
    return ts
  @property
  def backward_slice_with_self(self) -> dict[UOp, None]: return self.toposort()
  def substitute(self, dvars: dict[UOp, UOp], name: str | None = None, walk: bool = True, enter_calls: bool = False) -> UOp:
    from tg_core.uop.rewrite import graph_rewrite, _substitute
    return graph_rewrite(self, _substitute, dvars, bottom_up=True, walk=walk, enter_calls=enter_calls, name=name or "substitute")
  def simplify(self) -> UOp:
    from tg_core.uop.rewrite import graph_rewrite
    from tg_core.uop.symbolic import symbolic
    return graph_rewrite(self, symbolic, name="simplify")

  # *** shape / device / addrspace (derived, cached) ***
  @recursive_property
  def _shape(self) -> tuple[sint, ...] | None:
    op = self.op
    # the common cases first: a `match` tries its cases in order, and each case compares against every listed op
    if op in _SHAPELESS: return None
    if op in GroupOp.ALU or op is Ops.CAST:
      shapes = [s._shape for s in self.src if s._shape is not None]
      if not shapes: return None
      if not all(s == shapes[0] for s in shapes[1:]): raise ValueError(f"shape mismatch in {self.op}: {shapes}")
      return shapes[0]
    match op:
      case Ops.PARAM | Ops.BUFFER | Ops.RETURNED:
        a: ParamArg = self.arg
        if a.image is not None: return (a.image[0], a.image[1], 4)
        return () if a.size is None else (a.size,)
      case Ops.CONST | Ops.BIND | Ops.RANGE | Ops.SPECIAL: return ()
      case Ops.RESHAPE | Ops.EXPAND: return tuple(self.arg)
      case Ops.PERMUTE:
        ps = self.src[0]._shape
        return None if ps is None else tuple(ps[i] for i in self.arg)
      case Ops.PAD:
        ps = self.src[0]._shape
        return None if ps is None else tuple(_sadd(_sadd(s, b), e) for s, (b, e) in zip(ps, self.arg))
      case Ops.SHRINK: return tuple(_ssub(e, b) for b, e in self.arg)  # no `n+0` shapes from (0, n) shrinks
      case Ops.FLIP: return self.src[0]._shape
      case Ops.REDUCE_AXIS:
        ps = self.src[0]._shape
        return None if ps is None else tuple(1 if i in self.arg[1] else s for i, s in enumerate(ps))
      case Ops.UNSHARD:
        # over an MSTACK the parts may differ in size along the sharded axis (uneven shards): the whole is their sum
        if self.src[0].op is Ops.MSTACK and self.arg and all(s._shape is not None for s in self.src[0].src):
          return tuple(sum(s._shape[i] for s in self.src[0].src) if i in self.arg else d for i, d in enumerate(self.src[0].src[0]._shape))
        ps = self.src[0]._shape
        n = len(self.src[0].device) if isinstance(self.src[0].device, tuple) else 1
        return None if ps is None else tuple(s * n if i in self.arg else s for i, s in enumerate(ps))
      case Ops.MSTACK | Ops.MSELECT | Ops.COPY | Ops.CONTIGUOUS | Ops.CONTIGUOUS_BACKWARD | Ops.DETACH | Ops.AFTER | Ops.ALLREDUCE: return self.src[0]._shape
      case Ops.BITCAST:
        ps = self.src[0]._shape
        if ps is None or self.dtype.itemsize == self.src[0].dtype.itemsize or len(ps) == 0: return ps
        return ps[:-1] + ((ps[-1] * self.src[0].dtype.itemsize) // self.dtype.itemsize,)
      case Ops.CALL:
        if self.dtype == dtypes.void: return None  # a void CALL has no shape
        return ()
    return None
  @property
  def shape(self) -> tuple[sint, ...]:
    if (s := self._shape) is None: raise RuntimeError(f"{self.op} has no shape")
    return s
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> sint: return prod(self.shape)
  def max_numel(self) -> int: return prod(svmax(s) for s in self.shape)
  @recursive_property
  def device(self) -> str | tuple[str, ...] | None:
    match self.op:
      case Ops.DEVICE: return self.arg
      case Ops.PARAM | Ops.BUFFER | Ops.RETURNED: return self.arg.device
      case Ops.COPY: return self.src[1].device
      case Ops.MSTACK: return tuple(str(s.device) for s in self.src)
      case Ops.MSELECT:
        d = self.src[0].device
        return d[self.arg] if isinstance(d, tuple) else d
    for s in self.src:
      if (d := s.device) is not None: return d
    return None
  @recursive_property
  def addrspace(self) -> AddrSpace:
    if self.op in GroupOp.Defines: return self.arg.addrspace
    if self.op in {Ops.SPECIAL, Ops.RANGE, Ops.LOAD, Ops.CONST}: return AddrSpace.ALU  # LOAD brings things into the ALU
    if self.op is Ops.INDEX or self.op in GroupOp.Movement or self.op in {Ops.AFTER, Ops.BITCAST}: return self.src[0].addrspace
    return AddrSpace.ALU
  @property
  def base(self) -> UOp:
    return self.src[0].base if self.op in GroupOp.Movement else self
  @property
  def buf_uop(self) -> UOp:
    """The BUFFER/PARAM/RETURNED under views and AFTERs."""
    u = self
    while u.op not in GroupOp.Defines:
      if u.op in GroupOp.Movement or u.op in {Ops.AFTER, Ops.CONTIGUOUS, Ops.BITCAST, Ops.INDEX}: u = u.src[0]
      else: raise RuntimeError(f"{u.op} is not a buffer")
    return u
  @recursive_property
  def ranges(self) -> dict[UOp, None]:
    """Open RANGEs this node depends on (ENDed and REDUCEd ranges are closed)."""
    if self.op is Ops.RANGE: return {self: None}
    ret: dict[UOp, None] = {}
    start = 1 if self.op in {Ops.END, Ops.REDUCE, Ops.STAGE} else 0
    for s in self.src[:start]: ret.update(s.ranges)
    closed = set(self.src[start:]) if start else set()
    for s in self.src[start:]:
      if s.op is not Ops.RANGE: ret.update(s.ranges)
    if start: ret = {r: None for r in ret if r not in closed}
    else:
      for s in self.src[start:]: ret.update(s.ranges)
    return ret

  # *** constructors ***
  @staticmethod
  def const(dtype: DType, b: ConstType | tuple | UOp, device: str | tuple[str, ...] | None = None, shape: tuple[sint, ...] | None = None) -> UOp:
    if isinstance(b, UOp): return b.cast(dtype) if b.dtype != dtype else b
    ret = UOp(Ops.CONST, dtype, arg=dtypes.as_const(b, dtype) if dtype != dtypes.void else b,
              src=(_device_node(device),) if device is not None else ())
    if shape is not None:
      shape = tuple(shape)
      if any(not isinstance(s, UOp) and s < 0 for s in shape): raise ValueError(f"shape can't contain negative numbers {shape}")
      # a 0-d constant always reshapes to all ones and expands to any shape: no checks needed
      if shape: ret = ret._mop(Ops.RESHAPE, (1,) * len(shape))
      if any(not isinstance(s, int) or s != 1 for s in shape): ret = ret._mop(Ops.EXPAND, shape)
    return ret
  def const_like(self, b: ConstType | UOp) -> UOp:
    """A constant of self's dtype; in the tensor graph it also takes self's device and is broadcast to self's shape."""
    if (shp := self._shape) and self.op not in (Ops.RANGE, Ops.SPECIAL): return UOp.const(self.dtype, b, self.device, shp)
    return UOp.const(self.dtype, b, None)
  @staticmethod
  def cconst(v: ConstType, dtype: DType) -> UOp: return UOp.const(dtype, v)
  @staticmethod
  def variable(name: str, min_val: ConstType, max_val: ConstType, dtype: DType = dtypes.weakint, multiple_of: int | None = None) -> UOp:
    """A symbolic integer in [min_val, max_val]: a 0-d BUFFER in the ALU addrspace. `.bind(v)` gives it a value."""
    if isinstance(min_val, UOp) or isinstance(max_val, UOp): raise TypeError("variable bounds must be concrete")
    if min_val > max_val: raise ValueError(f"variable {name}: min {min_val} > max {max_val}")
    return UOp(Ops.BUFFER, dtype, arg=ParamArg(-1, dtype, None, (min_val, max_val), multiple_of, name, AddrSpace.ALU))
  @property
  def is_variable(self) -> bool: return self.op is Ops.BUFFER and self.arg.addrspace is AddrSpace.ALU
  @property
  def is_bound_var(self) -> bool: return self.op is Ops.BIND
  def bind(self, val: int) -> UOp:
    if not self.is_variable: raise RuntimeError(f"can only bind a variable, not {self.op}")
    lo, hi = self.arg.vmin_vmax
    if not lo <= val <= hi: raise VariableRangeError(f"bind {val} out of range for variable {self.arg.name!r} [{lo}, {hi}]: bind a value in its range")
    return UOp(Ops.BIND, self.dtype, (self, self.const_like(val)))
  def unbind(self) -> tuple[UOp, int]:
    assert self.op is Ops.BIND, f"can't unbind {self.op}"
    return self.src[0], self.src[1].arg
  @property
  def expr(self) -> str: return self.arg.name
  @staticmethod
  def new_buffer(device: str | tuple[str, ...], size: int, dtype: DType, num: int | None = None) -> UOp:
    if not isinstance(size, int): raise TypeError(f"buffer size must be a concrete int, got {size!r}")
    dtype = strong_dtype(dtype)
    return UOp(Ops.BUFFER, dtype, arg=ParamArg(next(UOp.unique_num) if num is None else num, dtype, size, device=device))
  @staticmethod
  def param(slot: int, dtype: DType, shape: sint | tuple[sint, ...] | None = None, device: str | tuple[str, ...] | None = None,
            vmin_vmax: tuple | None = None, multiple_of: int | None = None, name: str | None = None, addrspace: AddrSpace = AddrSpace.GLOBAL,
            volatile: bool = False) -> UOp:
    """A single sint or 1-d shape gives a flat param of that size, None gives a scalar param. The arg stores only the
    concrete max size: a multi-dim shape is a RESHAPE on the flat param, a symbolic shape a max-size param shrunk."""
    if dtypes.is_weak(dtype): raise RuntimeError(f"cannot create param for weak dtype {dtype}")
    if shape is None or shape == (): return UOp(Ops.PARAM, dtype, arg=ParamArg(slot, dtype, None, vmin_vmax, multiple_of, name, addrspace, device, volatile))
    shp = (shape,) if not isinstance(shape, tuple) else shape
    size = prod(s if isinstance(s, int) else s.vmax for s in shp)
    ret = UOp(Ops.PARAM, dtype, arg=ParamArg(slot, dtype, size, vmin_vmax, multiple_of, name, addrspace, device, volatile))
    return ret.view_as(shp)
  def view_as(self, shape: tuple[sint, ...]) -> UOp:
    max_shape = tuple(s if isinstance(s, int) else s.vmax for s in shape)
    ret = self.reshape(max_shape) if max_shape != self.shape else self
    if max_shape != shape: ret = ret.shrink(tuple((0, s) for s in shape))
    return ret
  def param_like(self, slot: int) -> UOp:
    if self.is_variable or self.is_bound_var:
      v = self if self.is_variable else self.src[0]
      return UOp(Ops.PARAM, v.dtype, arg=ParamArg(-1, v.dtype, None, v.arg.vmin_vmax, v.arg.multiple_of, f"p{slot}", AddrSpace.ALU))
    return UOp.param(slot, self.dtype, self.shape if self.shape else None, self.device, addrspace=self.addrspace)
  @staticmethod
  def returned(placement: int, dtype: DType, shape: tuple[sint, ...] | None = None, device: str | tuple[str, ...] | None = None) -> UOp:
    size = None if not shape else prod(s if isinstance(s, int) else s.vmax for s in shape)
    ret = UOp(Ops.RETURNED, dtype, arg=ParamArg(placement, dtype, size, device=device))
    return ret.view_as(shape) if shape else ret
  @staticmethod
  def sink(*srcs: UOp | None, **kwargs: Any) -> UOp: return UOp(Ops.SINK, dtypes.void, tuple(x for x in srcs if x is not None), **kwargs)
  @staticmethod
  def group(*srcs: UOp | None) -> UOp:
    s = tuple(x for x in srcs if x is not None)
    return s[0] if len(s) == 1 else UOp(Ops.GROUP, dtypes.void, s)
  def detach(self) -> UOp: return UOp(Ops.DETACH, self.dtype, (self,))
  def contiguous(self, *args: UOp, **kwargs: Any) -> UOp: return UOp(Ops.CONTIGUOUS, self.dtype, (self, *args), **kwargs)
  def contiguous_backward(self) -> UOp: return UOp(Ops.CONTIGUOUS_BACKWARD, self.dtype, (self,))
  def copy_to_device(self, device: str | tuple[str, ...]) -> UOp: return UOp(Ops.COPY, self.dtype, (self, UOp(Ops.DEVICE, arg=device)))
  def after(self, *deps: UOp) -> UOp: return UOp(Ops.AFTER, self.dtype, (self, *deps))
  def store(self, val: UOp | ConstType, *gate: UOp) -> UOp:
    return UOp(Ops.STORE, dtypes.void, (self, val if isinstance(val, UOp) else self.const_like(val), *gate))
  def load(self, *src: UOp, dtype: DType | None = None) -> UOp: return UOp(Ops.LOAD, dtype or self.dtype, (self, *src))
  def index(self, *idx: UOp, dtype: DType | None = None) -> UOp: return UOp(Ops.INDEX, dtype or self.dtype, (self, *idx))
  def end(self, *rngs: UOp) -> UOp: return UOp(Ops.END, dtypes.void, (self, *rngs)) if rngs else self
  @staticmethod
  def range(end: sint, axis_id: int, axis_type: AxisType = AxisType.LOOP, dtype: DType = dtypes.weakint) -> UOp:
    return UOp(Ops.RANGE, dtype, (sint_to_uop(end),), (axis_id, axis_type))
  @staticmethod
  def special(end: sint, name: str, dtype: DType = dtypes.weakint) -> UOp: return UOp(Ops.SPECIAL, dtype, (sint_to_uop(end),), name)
  def call(self, *srcs: UOp, grad_fxn: Callable | None = None, name: str | None = None, precompile: bool = False,
           precompile_backward: bool = False, aux: Any = None) -> UOp:
    """Call this body with `srcs` bound to its PARAM slots. Opaque bodies give a void CALL; a value body gives a
    value-producing CALL (see `call_outputs`) and this returns the CALL."""
    if self.op in _OPAQUE_CALL_BODIES:
      return UOp(Ops.CALL, dtypes.void, (self, *srcs), CallInfo(grad_fxn, name, precompile, precompile_backward, aux))
    return UOp.call_outputs((self,), *srcs, grad_fxn=grad_fxn, name=name, precompile=precompile, precompile_backward=precompile_backward, aux=aux)
  @staticmethod
  def call_outputs(values: Sequence[UOp], *srcs: UOp, grad_fxn: Callable | None = None, name: str | None = None, precompile: bool = False,
                   precompile_backward: bool = False, aux: Any = None) -> UOp:
    """A value-producing CALL computing `values` (expressions over PARAMs slotted 0..len(srcs)-1) from `srcs`.
    Its body is a SINK of stores into output PARAMs slotted after the inputs; each output has a RETURNED input."""
    for v in values:
      if v.ranges: raise RuntimeError(f"ranges {list(v.ranges)} are leaking out of the call")
    device = next((d for d in [*(v.device for v in values), *(s.device for s in srcs)] if d is not None), None)
    body = UOp.sink(*[UOp.param(len(srcs)+i, strong_dtype(v.dtype), v.shape if v.shape else None, v.device or device).store(v)
                      for i, v in enumerate(values)])
    rets = []
    for i, v in enumerate(values):
      shp = v.shape
      if any(isinstance(s, UOp) for s in shp): shp = tuple(substitute_params(s, srcs) if isinstance(s, UOp) else s for s in shp)
      rets.append(UOp.returned(len(srcs) + 1 + i, strong_dtype(v.dtype), shp if shp else None, v.device or device))
    return UOp(Ops.CALL, dtypes.void, (body, *srcs, *rets), CallInfo(grad_fxn, name, precompile, precompile_backward, aux))
  @property
  def num_returned(self) -> int:
    if self.op is not Ops.CALL: return 0
    return sum(1 for s in self.src[1:] if s.base.op is Ops.RETURNED)
  @property
  def returned_outputs(self) -> tuple[UOp, ...]:
    if self.op is not Ops.CALL: raise RuntimeError(f"returned_outputs of {self.op}, expected CALL")
    return tuple(s.after(self) for s in self.src[1:] if s.base.op is Ops.RETURNED)
  @property
  def call_args(self) -> tuple[UOp, ...]:
    return self.src[1:len(self.src)-self.num_returned]
  @staticmethod
  def custom_function(name: str, *src: UOp) -> UOp: return UOp(Ops.CUSTOM_FUNCTION, dtypes.void, src, name)

  # *** ALU ***
  def alu(self, op: Ops, *src: UOp | ConstType, dtype: DType | None = None) -> UOp:
    srcs = (self, *(s if isinstance(s, UOp) else self.const_like(s) for s in src))
    if dtype is None:
      dtype = dtypes.bool if op in GroupOp.Comparison else (least_upper_dtype(*[s.dtype for s in srcs[-2:]]) if op is Ops.WHERE else
              least_upper_dtype(*[s.dtype for s in srcs]) if op not in {Ops.SHL, Ops.SHR} else self.dtype)
      if srcs[0].dtype.count > 1 and op in GroupOp.Comparison: dtype = dtypes.bool.vec(srcs[0].dtype.count)
      elif (cnt := srcs[-1].dtype.count) > 1 and dtype.count == 1: dtype = dtype.vec(cnt)  # least_upper_dtype gives scalars
    return UOp(op, dtype, srcs)
  def _binop(self, op: Ops, x: UOp | ConstType, reverse: bool) -> UOp:
    y = x if isinstance(x, UOp) else self.const_like(x)
    if y.dtype != self.dtype:
      dt = least_upper_dtype(self.dtype, y.dtype)
      a, b = (self if self.dtype == dt else self.cast(dt)), (y if y.dtype == dt else y.cast(dt))
    else: a, b = self, y
    return b.alu(op, a) if reverse else a.alu(op, b)
  def __add__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.ADD, x, False)
  def __radd__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.ADD, x, True)
  def __sub__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.ADD, -x if not isinstance(x, UOp) else x * -1, False)
  def __rsub__(self, x: UOp | ConstType) -> UOp: return (self * -1)._binop(Ops.ADD, x, True)
  def __mul__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.MUL, x, False)
  def __rmul__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.MUL, x, True)
  def __floordiv__(self, x: UOp | ConstType) -> UOp:
    """C-style integer division (truncates toward zero), not Python's floor division."""
    return self._binop(Ops.IDIV, x, False)
  def __rfloordiv__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.IDIV, x, True)
  def __mod__(self, x: UOp | ConstType) -> UOp:
    """C-style remainder (takes the dividend's sign), not Python's modulo."""
    return self._binop(Ops.MOD, x, False)
  def __rmod__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.MOD, x, True)
  def __truediv__(self, x: UOp | ConstType) -> UOp: return self * (x.reciprocal() if isinstance(x, UOp) else self.const_like(1 / x))
  def __neg__(self) -> UOp: return self * -1 if self.dtype != dtypes.bool else self.logical_not()
  def __lt__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.CMPLT, x, False)
  def __gt__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.CMPLT, x, True)
  def __ge__(self, x: UOp | ConstType) -> UOp: return (self < x).logical_not()
  def __le__(self, x: UOp | ConstType) -> UOp: return (self > x).logical_not()
  def __and__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.AND, x, False)
  def __rand__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.AND, x, True)
  def __or__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.OR, x, False)
  def __ror__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.OR, x, True)
  def __xor__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.XOR, x, False)
  def __rxor__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.XOR, x, True)
  def __lshift__(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.SHL, x)
  def __rshift__(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.SHR, x)
  def __bool__(self) -> bool:
    if self.op is Ops.CONST: return bool(self.arg)
    raise RuntimeError(f"truth value of a symbolic {self.op} is ambiguous; use resolve(x) or sym_infer")
  def __index__(self) -> int:
    if self.op is Ops.CONST and isinstance(self.arg, int): return self.arg
    raise TypeError(f"symbolic {self.op} can't be used as an int")
  __eq__ = object.__eq__
  __hash__ = object.__hash__
  def eq(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.CMPEQ, x, False)
  def ne(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.CMPNE, x, False)
  def logical_not(self) -> UOp: return self.ne(True)
  def maximum(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.MAX, x, False)
  def minimum(self, x: UOp | ConstType) -> UOp: return -((-self).maximum(-x if not isinstance(x, UOp) else x * -1))
  def where(self, x: UOp | ConstType, y: UOp | ConstType) -> UOp:
    if isinstance(x, UOp) and not isinstance(y, UOp): y = x.const_like(y)
    elif isinstance(y, UOp) and not isinstance(x, UOp): x = y.const_like(x)
    elif not isinstance(x, UOp) and not isinstance(y, UOp):
      dt = least_upper_dtype(dtypes.from_py(x), dtypes.from_py(y))
      x, y = UOp.const(dt, x), UOp.const(dt, y)
    assert isinstance(x, UOp) and isinstance(y, UOp)
    if x.dtype != y.dtype:
      dt = least_upper_dtype(x.dtype, y.dtype)
      x, y = x.cast(dt), y.cast(dt)
    return UOp(Ops.WHERE, x.dtype, (self, x, y))
  def reciprocal(self) -> UOp: return self.alu(Ops.RECIPROCAL)
  def sqrt(self) -> UOp: return self.alu(Ops.SQRT)
  def exp2(self) -> UOp: return self.alu(Ops.EXP2)
  def log2(self) -> UOp: return self.alu(Ops.LOG2)
  def sin(self) -> UOp: return self.alu(Ops.SIN)
  def trunc(self) -> UOp: return self.alu(Ops.TRUNC)
  def cast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))
  def bitcast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.BITCAST, dtype, (self,))
  def gep(self, i: int | tuple[int, ...]) -> UOp:
    if isinstance(i, int): i = (i,)
    if self.dtype.count == len(i) and i == tuple(range(len(i))): return self
    return UOp(Ops.GEP, self.dtype.scalar().vec(len(i)) if len(i) > 1 else self.dtype.scalar(), (self,), i)
  def broadcast(self, count: int) -> UOp:
    return self if count == 1 else UOp(Ops.STACK, self.dtype.vec(count), (self,) * count)
  def f(self, op: Ops, **kwargs: Any) -> UOp: return UOp(op, kwargs.pop("dtype", self.dtype), (self,), **kwargs)

  # *** movement (tensor graph) ***
  def _mop(self, op: Ops, arg: Any) -> UOp: return UOp(op, self.dtype, (self,), arg)
  def reshape(self, shape: tuple[sint, ...]) -> UOp:
    shape = tuple(shape)
    if any(not isinstance(s, UOp) and s < 0 for s in shape): raise ValueError(f"shape can't contain negative numbers {shape}")
    # with symbolic views prod equality can be true at runtime but unprovable: only reject provably unequal products
    # (`!=` on UOps is identity, so compare with .ne())
    if not _same_factors(self.shape, shape):  # the common symbolic case (the same symbolic dims, regrouped) needs no simplifier
      old_n, new_n = prod(self.shape), prod(shape)
      ne = old_n.ne(new_n) if isinstance(old_n, UOp) else new_n.ne(old_n) if isinstance(new_n, UOp) else old_n != new_n
      if resolve(ne, False): raise ValueError(f"bad reshape: {self.shape} -> {shape}")
    return self if self.shape == shape else self._mop(Ops.RESHAPE, shape)
  def expand(self, shape: tuple[sint, ...]) -> UOp:
    shape = tuple(shape)
    if len(shape) != len(self.shape) or any(s != n and s != 1 for s, n in zip(self.shape, shape)):
      raise ValueError(f"bad expand: {self.shape} -> {shape}")
    return self if self.shape == shape else self._mop(Ops.EXPAND, shape)
  def permute(self, order: tuple[int, ...]) -> UOp:
    order = tuple(order)
    if sorted(order) != list(range(len(self.shape))): raise ValueError(f"bad permute {order} for shape {self.shape}")
    return self if order == tuple(range(len(order))) else self._mop(Ops.PERMUTE, order)
  def pad(self, arg: tuple[tuple[sint, sint], ...]) -> UOp:
    arg = tuple((b, e) for b, e in arg)
    if len(arg) != len(self.shape): raise ValueError(f"bad pad {arg} for shape {self.shape}")
    return self if all(b == 0 and e == 0 for b, e in arg) else self._mop(Ops.PAD, arg)
  def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> UOp:
    arg = tuple((b, e) for b, e in arg)
    if len(arg) != len(self.shape): raise ValueError(f"bad shrink {arg} for shape {self.shape}")
    return self if all(b == 0 and e == s for (b, e), s in zip(arg, self.shape)) else self._mop(Ops.SHRINK, arg)
  def shrink_to(self, shape: tuple[sint, ...]) -> UOp: return self.shrink(tuple((0, s) for s in shape))
  def flip(self, axis: tuple[bool, ...]) -> UOp:
    axis = tuple(axis)
    return self if not any(axis) else self._mop(Ops.FLIP, axis)
  def r(self, op: Ops, axis: tuple[int, ...]) -> UOp:
    axis = tuple(sorted(a for a in axis if resolve(self.shape[a] != 1)))
    return self if not axis else UOp(Ops.REDUCE_AXIS, self.dtype, (self,), (op, axis))
  def _rop(self, op: Ops, axis: tuple[int, ...]) -> UOp: return self.r(op, axis)

  # *** value ranges (for symbolic simplification) ***
  @property
  def vmin(self) -> ConstType: return self._min_max[0]
  @property
  def vmax(self) -> ConstType: return self._min_max[1]
  @recursive_property
  def _min_max(self) -> tuple[ConstType, ConstType]:
    lo, hi = self._unclamped_min_max()
    # fixed-width ints wrap: a result whose exact range leaves the dtype can be any value of the dtype
    if dtypes.is_int(self.dtype) and self.dtype.scalar() != dtypes.weakint and (lo < self.dtype.min or hi > self.dtype.max):
      return self.dtype.min, self.dtype.max
    return lo, hi
  def _unclamped_min_max(self) -> tuple[ConstType, ConstType]:
    if self.op in GroupOp.Binary and not dtypes.is_float(self.dtype):
      (s0_vmin, s0_vmax), (s1_vmin, s1_vmax) = self.src[0]._min_max, self.src[1]._min_max
      if self.op is Ops.ADD: return s0_vmin + s1_vmin, s0_vmax + s1_vmax
      if self.op is Ops.SUB: return s0_vmin - s1_vmax, s0_vmax - s1_vmin
      if self.op is Ops.AND and dtypes.is_int(self.dtype) and s1_vmin == s1_vmax >= 0 and s0_vmin >= 0: return 0, min(s0_vmax, s1_vmax)
      if self.op is Ops.MUL:
        vals = (s0_vmin * s1_vmin, s0_vmin * s1_vmax, s0_vmax * s1_vmin, s0_vmax * s1_vmax)
        return min(vals), max(vals)
      if self.op is Ops.SHL and s1_vmin == s1_vmax and all_int((s0_vmin, s0_vmax, s1_vmin)) and 0 <= s1_vmin < 64:
        return s0_vmin << s1_vmin, s0_vmax << s1_vmin
      if self.op is Ops.SHR and s1_vmin == s1_vmax and all_int((s0_vmin, s0_vmax, s1_vmin)) and 0 <= s1_vmin < 64:
        return s0_vmin >> s1_vmin, s0_vmax >> s1_vmin
      if self.op is Ops.MOD:
        if s1_vmin > 0: return (0 if s0_vmin >= 0 else -(s1_vmax - 1)), (0 if s0_vmax <= 0 else s1_vmax - 1)
        if s1_vmax < 0: return (0 if s0_vmin >= 0 else -(-s1_vmin - 1)), (0 if s0_vmax <= 0 else -s1_vmin - 1)
        m = max(abs(s1_vmin), abs(s1_vmax)) - 1
        # the divisor may be 0, and x % 0 == x (the reference's value): the range must hold x's too
        return min(0 if s0_vmin >= 0 else -m, s0_vmin), max(0 if s0_vmax <= 0 else m, s0_vmax)
      if self.op is Ops.IDIV:
        assert isinstance(s0_vmin, int) and isinstance(s0_vmax, int) and isinstance(s1_vmin, int) and isinstance(s1_vmax, int)
        if s1_vmin == s1_vmax == 0: return self.dtype.min, self.dtype.max
        if s1_vmin > 0 or s1_vmax < 0:  # divisor doesn't contain 0: extremes are at the corners
          vals = [cdiv(a, b) for a in (s0_vmin, s0_vmax) for b in (s1_vmin, s1_vmax)]
          return min(vals), max(vals)
        m = max(abs(s0_vmin), abs(s0_vmax))
        return -m, m
      if self.op is Ops.MAX: return max(s0_vmin, s1_vmin), max(s0_vmax, s1_vmax)
      if self.op is Ops.CMPLT: return (s0_vmax < s1_vmin, s0_vmin < s1_vmax)
      if self.op is Ops.CMPNE: return ((s0_vmax < s1_vmin) or (s1_vmax < s0_vmin), not (s0_vmin == s0_vmax == s1_vmin == s1_vmax))
      if self.op is Ops.CMPEQ: return (s0_vmin == s0_vmax == s1_vmin == s1_vmax, not ((s0_vmax < s1_vmin) or (s1_vmax < s0_vmin)))
      if self.dtype == dtypes.bool:
        if self.op is Ops.OR: return s0_vmin or s1_vmin, s0_vmax or s1_vmax
        if self.op is Ops.AND: return s0_vmin and s1_vmin, s0_vmax and s1_vmax
    if self.op is Ops.NEG and dtypes.is_int(self.dtype): return -self.src[0].vmax, -self.src[0].vmin
    if self.op is Ops.WHERE and dtypes.is_int(self.dtype): return min(self.src[1].vmin, self.src[2].vmin), max(self.src[1].vmax, self.src[2].vmax)
    if self.op is Ops.WHERE and self.dtype == dtypes.bool:
      return min(self.src[1].vmin, self.src[2].vmin), max(self.src[1].vmax, self.src[2].vmax)
    if self.op is Ops.CONST and not isinstance(self.arg, tuple): return self.arg, self.arg
    if self.op in (Ops.BUFFER, Ops.PARAM) and self.arg.vmin_vmax is not None: return self.arg.vmin_vmax
    if self.op is Ops.BIND: return self.src[0]._min_max
    if self.op in {Ops.RANGE, Ops.SPECIAL}: return 0, (self.src[0] - 1).vmax
    if self.op is Ops.CAST and dtypes.is_int(self.dtype) and self.src[0].dtype in dtypes.ints + (dtypes.bool,):
      lo, hi = self.src[0]._min_max
      if self.dtype.min <= lo and hi <= self.dtype.max: return lo, hi
    if self.op is Ops.CAST and self.dtype == dtypes.bool: return bool(self.src[0].vmin) and self.src[0].vmin > 0 or self.src[0].vmax < 0, \
      bool(self.src[0].vmax) or bool(self.src[0].vmin)
    return self.dtype.min, self.dtype.max

  # *** constant folding helpers ***
  @property
  def is_const(self) -> bool: return self.op is Ops.CONST
  def const_arg(self) -> ConstType:
    if self.op is not Ops.CONST: raise RuntimeError(f"{self.op} is not a CONST")
    return self.arg
  def render(self, simplify: bool = True) -> str:
    from tg_core.uop.render import render_expr
    return render_expr(self.simplify() if simplify else self)

_OPAQUE_CALL_BODIES = {Ops.SINK, Ops.PROGRAM, Ops.LINEAR, Ops.COPY, Ops.CUSTOM_FUNCTION}
UOp._OPAQUE_CALL_BODIES = _OPAQUE_CALL_BODIES  # type: ignore[attr-defined]

class VariableRangeError(ValueError, AssertionError):
  """A Variable bound to a value outside its [min, max]. A ValueError (and an AssertionError, as tinygrad raises)."""

def cdiv(x: int, y: int) -> int:
  """C-style integer division: the quotient truncates toward zero (Python's // floors)."""
  return abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1) if y != 0 else 0
def cmod(x: int, y: int) -> int:
  """C-style remainder: x - cdiv(x, y)*y, with the sign of x (Python's % takes the sign of y)."""
  return x - cdiv(x, y) * y if y != 0 else 0

def _is_zero(x: sint) -> bool: return isinstance(x, int) and x == 0
Poly = tuple[int, dict[tuple["UOp", ...], int]]
def _poly(x: sint) -> Poly | None:
  """x as const + sum(coeff * monomial), a monomial being a product of leaf nodes (sorted by id): the canonical form of
  sums and products of Variables. None if x is not an int-valued size."""
  if isinstance(x, int): return x, {}
  if x.op is Ops.CONST: return (x.arg, {}) if isinstance(x.arg, int) else None
  if x.op in (Ops.ADD, Ops.MUL) and (p0 := _poly(x.src[0])) is not None and (p1 := _poly(x.src[1])) is not None:
    if x.op is Ops.ADD:
      terms = dict(p0[1])
      for t, c in p1[1].items(): terms[t] = terms.get(t, 0) + c
      return p0[0] + p1[0], terms
    # (a0 + sum a_i m_i) * (b0 + sum b_j n_j), distributed
    out: dict[tuple[UOp, ...], int] = {}
    for ta, ca in [((), p0[0]), *p0[1].items()]:
      for tb, cb in [((), p1[0]), *p1[1].items()]:
        if ca and cb: out[k] = out.get(k := tuple(sorted(ta + tb, key=id)), 0) + ca * cb
    return out.pop((), 0), out
  return 0, {(x,): 1}

def svmin(x: sint) -> ConstType: return x.vmin if isinstance(x, UOp) else x
def svmax(x: sint) -> ConstType: return x.vmax if isinstance(x, UOp) else x

def _same_factors(a: Sequence[sint], b: Sequence[sint]) -> bool:
  """Shapes with the same int product and the same symbolic dims: equal element counts."""
  return prod(s for s in a if isinstance(s, int)) == prod(s for s in b if isinstance(s, int)) and \
    sorted((s for s in a if isinstance(s, UOp)), key=id) == sorted((s for s in b if isinstance(s, UOp)), key=id)
def same_numel(a: Sequence[sint], b: Sequence[sint]) -> bool:
  """Shapes with provably equal element counts (the same factors, regrouped, or equal products)."""
  return _same_factors(a, b) or sint_eq(prod(a), prod(b))

def _poly_diff(a: sint, b: sint) -> Poly | None:
  if (la := _poly(a)) is None or (lb := _poly(b)) is None: return None
  terms = dict(la[1])
  for t, c in lb[1].items(): terms[t] = terms.get(t, 0) - c
  return la[0] - lb[0], {t: c for t, c in terms.items() if c}

def sint_diff(a: sint, b: sint) -> int | None:
  """a - b when it is a constant, found without the simplifier (sizes are polynomials in Variables); None if not."""
  return d[0] if (d := _poly_diff(a, b)) is not None and not d[1] else None

def sint_eq(a: sint, b: sint) -> bool:
  """Sizes provably equal. Polynomials in Variables compare by their canonical form; anything else asks the simplifier."""
  if isinstance(a, int) and isinstance(b, int): return a == b
  if a is b: return True
  if (d := _poly_diff(a, b)) is not None:
    if not d[1]: return d[0] == 0
    if all(t.op is Ops.BIND or t.is_variable for m in d[1] for t in m): return False  # the form over Variables is canonical
  return ssimplify(sint_to_uop(a) - b) == 0

# symbolic sizes are simplified as they are made: `(i+2) - i` is the int 2, so views of bound Variables keep concrete dims
# (a constant difference is found by the linear form first: running the simplifier on every new BIND's shapes is slow)
def _sadd(a: sint, b: sint) -> sint:
  if _is_zero(b): return a
  if _is_zero(a): return b
  return d if (d := sint_diff(a, -b if isinstance(b, int) else b * -1)) is not None else ssimplify(a + b)
def _ssub(a: sint, b: sint) -> sint: return a if _is_zero(b) else d if (d := sint_diff(a, b)) is not None else ssimplify(a - b)

def sint_to_uop(x: sint, dtype: DType = dtypes.weakint) -> UOp: return UOp.const(dtype, x) if isinstance(x, int) else x

def substitute_params(x: UOp, srcs: Sequence[UOp]) -> UOp:
  """Replace slot>=0 PARAMs in x by the call args they stand for (ALU/shape variables, slot -1, stay)."""
  subs = {p: srcs[p.arg.slot] for p in x.toposort() if p.op is Ops.PARAM and p.arg.slot >= 0 and p.arg.slot < len(srcs)}
  return x.substitute(subs) if subs else x

# *** python execution of ALU ops on constants (used by folding and by the PYTHON device) ***
def _safe_div(x: float, y: float) -> float:
  if y == 0: return math.copysign(math.inf, x) * math.copysign(1, y) if x != 0 and not math.isnan(x) else math.nan
  return x / y

def _exp2(x: float) -> float:
  try: return 2.0 ** x
  except OverflowError: return math.inf

python_alu: dict[Ops, Callable[..., Any]] = {
  Ops.LOG2: lambda x: math.log2(x) if x > 0 else -math.inf if x == 0 else math.nan,
  Ops.EXP2: _exp2, Ops.SQRT: lambda x: math.sqrt(x) if x >= 0 else math.nan,
  Ops.RECIPROCAL: lambda x: _safe_div(1.0, x),
  Ops.SIN: lambda x: math.sin(x) if not math.isinf(x) else math.nan,
  Ops.NEG: lambda x: (not x) if isinstance(x, bool) else -x, Ops.TRUNC: lambda x: x if isinstance(x, int) or not math.isfinite(x) else float(math.trunc(x)),
  Ops.ADD: lambda x, y: x + y, Ops.SUB: lambda x, y: x - y, Ops.MUL: lambda x, y: x * y,
  Ops.SHR: lambda x, y: x >> y, Ops.SHL: lambda x, y: x << y, Ops.MAX: lambda x, y: x if (x >= y or math.isnan(x) if isinstance(x, float) else x >= y) else y,
  Ops.CMPLT: lambda x, y: x < y, Ops.CMPNE: lambda x, y: x != y, Ops.CMPEQ: lambda x, y: x == y,
  Ops.XOR: lambda x, y: x ^ y, Ops.OR: lambda x, y: x | y, Ops.AND: lambda x, y: x & y,
  Ops.MOD: cmod, Ops.IDIV: cdiv, Ops.FDIV: _safe_div, Ops.POW: lambda x, y: x ** y,
  Ops.MULACC: lambda x, y, z: x * y + z, Ops.WHERE: lambda x, y, z: y if x else z, Ops.DP4A: lambda a, b, c: c + _dp4a_sum(a, b),
  Ops.DPBF16: lambda a, b, c: _f32(_f32(c + _bf16_bits(a & 0xFFFF) * _bf16_bits(b & 0xFFFF)) + _bf16_bits(a >> 16) * _bf16_bits(b >> 16))}

def _bf16_bits(v: int) -> float: return struct.unpack("<f", struct.pack("<I", (v & 0xFFFF) << 16))[0]
def _f32(x: float) -> float: return truncate_float(x, dtypes.float32)

def _dp4a_sum(a: int, b: int, unsigned_a: bool = False) -> int:
  """Ops.DP4A's sum of byte products: the 4 bytes of a as int8, times those of b as int8 saturated to -127..127; with
  `unsigned_a` (a uint32 a) a's bytes as uint8 times b's as int8, unsaturated."""
  def byte(v: int, k: int) -> int: return ((v >> 8 * k) & 255) - (256 if (v >> 8 * k) & 128 else 0)
  if unsigned_a: return sum(((a >> 8 * k) & 255) * byte(b, k) for k in range(4))
  return sum(byte(a, k) * max(byte(b, k), -127) for k in range(4))

def alu_value(u: UOp, operands: Sequence[ConstType]) -> ConstType:
  """exec_alu for the ALU node `u` on these operand values: a DP4A whose a is uint32 (unsigned bytes) told apart by its dtype."""
  if u.op is Ops.DP4A and u.src[0].dtype.scalar() == dtypes.uint32:
    return dtypes.as_const(int(operands[2]) + _dp4a_sum(int(operands[0]), int(operands[1]), True), u.dtype)
  return exec_alu(u.op, u.dtype, operands)

def exec_alu(op: Ops, dtype: DType, operands: Sequence[ConstType]) -> ConstType:
  """Evaluate one ALU op on Python constants with the IR's semantics, wrapping to dtype."""
  if dtype.count > 1: raise TypeError("exec_alu is scalar-only")
  if op is Ops.IDIV and operands[1] == 0 or op is Ops.MOD and operands[1] == 0: raise ZeroDivisionError(f"{op} by zero")
  ret = python_alu[op](*operands)
  return dtypes.as_const(ret, dtype) if dtype != dtypes.weakint else truncate_int(ret, dtype)

# *** resolving possibly-symbolic values ***
def resolve(x: UOp | bool | int, default: bool = True) -> bool:
  """A Python bool for a possibly-symbolic condition: its value when the value ranges decide it, else `default`."""
  if not isinstance(x, UOp): return bool(x)
  if x.dtype != dtypes.bool: raise ValueError(f"resolve needs a bool UOp, got {x.dtype}")
  if x.vmin == x.vmax: return bool(x.vmin)
  sx = x.simplify()
  return bool(sx.vmin) if sx.vmin == sx.vmax else default

def sym_infer(uop: UOp | int, var_vals: dict[UOp, int] | dict[str, int]) -> int:
  """Evaluate a symbolic expression with its Variables set (keys are Variable UOps or their names)."""
  if isinstance(uop, (int, float)): return uop
  vals: dict[str, int] = {(k.arg.name if isinstance(k, UOp) else k): v for k, v in var_vals.items()}
  cache: dict[UOp, Any] = {}
  def get(s: UOp) -> Any:
    if (v := cache[s]) is _MISSING: raise KeyError(f"no value for variable {s.arg.name!r}")
    return v
  for u in uop.toposort():
    if u.op is Ops.CONST: cache[u] = u.arg
    # a bound Variable takes the value given for its Variable, else its bound value
    elif u.op is Ops.BIND: cache[u] = vals.get(u.src[0].arg.name, u.src[1].arg)
    elif u.is_variable or (u.op is Ops.PARAM and u.arg.addrspace is AddrSpace.ALU): cache[u] = vals.get(u.arg.name, _MISSING)
    elif u.op is Ops.CAST: cache[u] = dtypes.as_const(get(u.src[0]), u.dtype)
    elif u.op in GroupOp.ALU: cache[u] = alu_value(u, [get(s) for s in u.src])
    else: raise RuntimeError(f"sym_infer can't evaluate {u.op}")
  return get(uop)

def smax(*lst: sint) -> sint:
  vals = lst[0] if len(lst) == 1 and isinstance(lst[0], (tuple, list)) else lst
  return functools.reduce(lambda a, b: b.maximum(a) if isinstance(b, UOp) else a.maximum(b) if isinstance(a, UOp) else max(a, b), vals)
def smin(*lst: sint) -> sint:
  vals = lst[0] if len(lst) == 1 and isinstance(lst[0], (tuple, list)) else lst
  return functools.reduce(lambda a, b: b.minimum(a) if isinstance(b, UOp) else a.minimum(b) if isinstance(a, UOp) else min(a, b), vals)
def ssimplify(x: sint) -> sint:
  """A simplified size: a Python int when it folds to a constant (as tinygrad's ssimplify)."""
  if not isinstance(x, UOp): return x
  return ret.arg if (ret := x.simplify()).op is Ops.CONST else ret

def Variable(name: str, min_val: ConstType, max_val: ConstType, dtype: DType = dtypes.weakint) -> UOp:
  return UOp.variable(name, min_val, max_val, dtype)

def identity_element(op: Ops, dt: DType) -> ConstType: return dtypes.as_const({Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: dt.min}[op], dt)

__all__ = ["UOp", "ParamArg", "CallInfo", "KernelInfo", "AxisType", "sint", "resolve", "sym_infer", "smax", "smin", "ssimplify",
           "Variable", "VariableRangeError", "sint_diff", "sint_eq", "same_numel", "svmin", "svmax", "identity_element", "exec_alu", "cdiv", "cmod",
           "UOpMetaClass"]

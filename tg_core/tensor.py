"""`Tensor`: the lazy, tinygrad-compatible front end. A Tensor wraps a UOp of the tensor graph; operations build
graph, and `realize()` schedules, compiles and runs it. More ops live in the mixins of `tg_core.frontend`."""
from __future__ import annotations
import math
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from tg_core.dtype import ConstType, DType, DTypeLike, _from_np_dtype, _to_np_dtype, _to_np_storage, dtypes, float_result_dtype, least_upper_dtype, \
  least_upper_float, strong_dtype, sum_acc_dtype, to_dtype
from tg_core.helpers import SPEC, SPLIT_REDUCEOP, all_int, argfix, prod
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp, identity_element, resolve, same_numel, sint, sint_diff, sint_eq, sint_to_uop, smax, svmax, svmin

from tg_core.frontend.elementwise import ElementwiseMixin
from tg_core.frontend.indexing import IndexingMixin
from tg_core.frontend.movement import MovementMixin
from tg_core.frontend.nn import NNMixin
from tg_core.frontend.random import RandomMixin
from tg_core.frontend.reduce import ReduceMixin

all_tensors: weakref.WeakSet[Tensor] = weakref.WeakSet()
# tensors that held an assign (AFTER) when last set: after a schedule every holder of a realized assign moves to its buffer,
# and scanning only these keeps realize independent of how many tensors are alive
after_holders: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()  # id -> tensor (Tensor.__eq__ is elementwise)

def canonicalize_device(device: str | tuple | list | None) -> str | tuple[str, ...]:
  from tg_core.device import Device
  if device is None: return Device.DEFAULT
  if isinstance(device, (tuple, list)): return tuple(Device.canonicalize(d) for d in device)
  return Device.canonicalize(device)

def _flatten_list(data: Any) -> tuple[list, tuple[int, ...]]:
  """Flatten nested lists/tuples, checking they are rectangular."""
  if not isinstance(data, (list, tuple)): return [data], ()
  if len(data) == 0: return [], (0,)
  subs = [_flatten_list(d) for d in data]
  shape0 = subs[0][1]
  if any(s[1] != shape0 for s in subs): raise ValueError(f"inhomogeneous shape in nested list: expected every element with shape {shape0}")
  return [x for s in subs for x in s[0]], (len(data),) + shape0

def _buffer_from_numpy(arr: np.ndarray, device: str | tuple[str, ...], dtype: DType) -> UOp:
  from tg_core.engine.realize import buffer_of
  if isinstance(device, tuple):  # data for a device tuple is replicated on each
    from tg_core.schedule.multi import make_multi
    return make_multi([_buffer_from_numpy(arr, d, dtype) for d in device], ())
  buf = UOp.new_buffer(device, int(arr.size), dtype)
  b = buffer_of(buf)
  st = np.ascontiguousarray(arr.astype(_to_np_storage(dtype), copy=False) if dtype not in (dtypes.bfloat16, *dtypes.fp8s) else arr)
  if st.size: b.copyin(memoryview(st.reshape(-1)).cast("B"))
  return buf.reshape(arr.shape) if arr.shape != (arr.size,) else buf

def _np_for_dtype(flat: list, dtype: DType) -> np.ndarray:
  from tg_core.dtype import float_to_bf16, float_to_fp8
  if dtype == dtypes.bfloat16:
    f = np.array([float_to_bf16(float(x)) for x in flat], dtype=np.float32)
    return (f.view(np.uint32) >> 16).astype(np.uint16)
  if dtype in dtypes.fp8s: return np.array([float_to_fp8(float(x), dtype) for x in flat], dtype=np.uint8)
  if dtypes.is_int(dtype):
    return np.array([dtypes.as_const(x, dtype) for x in flat], dtype=_to_np_storage(dtype))
  with np.errstate(over="ignore"): return np.array(flat, dtype=_to_np_storage(dtype))

# rows of A per matrix of B (A's dims but K, over B's batch) a bfloat16 matmul needs to take the pair dot product path
# (Tensor._dot_bf16_pairs): it copies B once, interleaving its rows in pairs, which fewer rows don't repay (a decode step's
# x @ W reads W once)
MIN_DPBF16_ROWS = 32

class Tensor(ElementwiseMixin, MovementMixin, ReduceMixin, NNMixin, RandomMixin, IndexingMixin):
  """A lazily evaluated multi-dimensional array, on one device (or sharded over several)."""
  __slots__ = ("uop", "requires_grad", "grad", "_ctx", "__weakref__")
  training: bool = False
  no_grad: bool = False

  def __init__(self, data: ConstType | UOp | bytes | list | tuple | np.ndarray | None, device: str | tuple | list | None = None,
               dtype: DTypeLike | None = None, requires_grad: bool | None = None):
    if dtype is not None: dtype = to_dtype(dtype)
    if device is None and isinstance(data, UOp) and data.device is not None: dev = data.device
    else: dev = canonicalize_device(device)
    self.grad: Tensor | None = None
    self.requires_grad: bool | None = requires_grad
    if isinstance(data, UOp):
      u = data
      # a bare constant without a device (a 0-d `const_like`, e.g. the zero gradient of round) takes the tensor's device
      if u.op is Ops.CONST and not u.src and isinstance(dev, str): u = UOp.const(u.dtype, u.arg, dev)
      if dtype is not None and u.dtype != dtype: u = u.cast(dtype)
    elif data is None: u = _buffer_from_numpy(np.zeros((0,), dtype=_to_np_storage(dtype or dtypes.default_float)), dev, dtype or dtypes.default_float)
    elif isinstance(data, (bool, int, float)):
      dt = dtype or strong_dtype(dtypes.from_py(data))
      u = UOp.const(dt, data, dev)
    elif isinstance(data, bytes):
      u = _buffer_from_numpy(np.frombuffer(data, dtype=np.uint8), dev, dtypes.uint8)
      if dtype is not None and dtype != dtypes.uint8: u = u.bitcast(dtype) if dtype.itemsize == 1 else u.cast(dtype)
    elif isinstance(data, (list, tuple)):
      flat, shape = _flatten_list(data)
      if dtype is None:
        if any(isinstance(x, Tensor) for x in flat): raise TypeError("can't build a Tensor from a list of Tensors; use Tensor.stack")
        dtype = strong_dtype(dtypes.from_py(flat)) if flat else dtypes.default_float
      u = _buffer_from_numpy(_np_for_dtype(flat, dtype).reshape(shape), dev, dtype)
    elif isinstance(data, np.ndarray):
      if data.dtype == np.object_: raise TypeError("numpy arrays of dtype object are not supported")
      dt = dtype or _from_np_dtype(data.dtype)
      arr = data.astype(_to_np_dtype(dt)) if _to_np_dtype(dt) is not None and data.dtype != _to_np_dtype(dt) else data
      if dt in (dtypes.bfloat16, *dtypes.fp8s): arr = _np_for_dtype(data.astype(np.float64).ravel().tolist(), dt).reshape(data.shape)
      u = _buffer_from_numpy(arr, dev, dt)
    else:
      raise TypeError(f"can't create a Tensor from {type(data).__name__}; use a number, list, tuple, bytes, numpy array or UOp")
    self.uop: UOp = u
    self._ctx = None
    all_tensors.add(self)
    if u.op is Ops.AFTER: after_holders[id(self)] = self

  # *** properties ***
  @property
  def shape(self) -> tuple[sint, ...]: return self.uop.shape
  @property
  def dtype(self) -> DType: return self.uop.dtype
  @property
  def device(self) -> str | tuple[str, ...]:
    d = self.uop.device
    if d is None: raise RuntimeError("tensor has no device")
    return d
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> sint: return prod(self.shape)
  def element_size(self) -> int: return self.dtype.itemsize
  def nbytes(self) -> int: return int(self.numel()) * self.element_size()
  def is_floating_point(self) -> bool: return dtypes.is_float(self.dtype)
  def size(self, dim: int | None = None) -> sint | tuple[sint, ...]: return self.shape if dim is None else self.shape[self._resolve_dim(dim)]
  def __len__(self) -> int:
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return int(self.shape[0])
  def __repr__(self) -> str:
    return f"<Tensor {self.uop.op if not self.is_realized() else 'realized'} on {self.uop.device} with grad {self.grad is not None}" + \
      f" shape={self.shape} dtype={self.dtype}>"
  def __hash__(self) -> int: return id(self)
  def __bool__(self) -> bool: return bool(self.item())
  def is_realized(self) -> bool:
    u = self.uop
    if u.op is Ops.UNSHARD: return all(Tensor(p).is_realized() for p in u.src[0].src)  # a multi-device tensor: all its parts
    while u.op in GroupOp.Movement: u = u.src[0]
    return u.op is Ops.BUFFER and not u.is_variable
  @property
  def T(self) -> Tensor: return self.transpose()
  @property
  def lazydata(self) -> UOp: return self.uop

  # *** realize ***
  def schedule_with_vars(self, *lst: Tensor) -> tuple[list, dict[str, int]]: return self._schedule(*lst)[:2]
  def _schedule(self, *lst: Tensor) -> tuple[list, dict[str, int], int]:
    """(items, Variable values, the first buffer number the scheduler itself created: those buffers are new)."""
    from tg_core.schedule.cache import create_schedule_cached
    from tg_core.function import resolve_calls
    from tg_core.schedule.variables import has_binds, rebind, unbind_graph, var_vals_of
    from tg_core.schedule.multi import has_multi, lift_becomes, multi_to_per_device
    sink = UOp.sink(*[t.uop for t in (self, *lst)])
    if SPEC:  # the spec tables load only when checked
      from tg_core.uop.spec import spec_tensor, verify_if_spec
      verify_if_spec(sink, spec_tensor, "tensor graph")
    topo: list[UOp] | None = list(sink.toposort())
    if any(u.op is Ops.CALL for u in topo) and (resolved := resolve_calls(sink)) is not sink:
      for t in list(all_tensors):
        if (nu := _replaced(sink, resolved, t.uop)) is not None:
          t.uop = nu
          if nu.op is Ops.AFTER: after_holders[id(t)] = t
      sink, topo = resolved, None
    if has_multi(topo if topo is not None else (topo := list(sink.toposort()))):  # multi-device values become per-device graphs
      (sink, multi_map), topo = multi_to_per_device(sink, topo), None
    else: multi_map = None
    var_vals: dict[str, int] = {}
    first_new = next(UOp.unique_num)
    if has_binds(topo if topo is not None else (topo := list(sink.toposort()))):
      # bound values are runtime arguments: schedule (and cache) the graph over the bare Variables, then bind the results again
      sink, unbound, binds = unbind_graph(sink, topo)
      items, ubecomes = create_schedule_cached(sink)
      old_of = {new: old for old, new in unbound.items()}  # nodes without a BIND below are their own unbound form
      becomes = {old_of.get(n, n): rebind(v, binds) for n, v in ubecomes.items()}
      var_vals = var_vals_of(binds)
    else: items, becomes = create_schedule_cached(sink, topo)
    if multi_map is not None: lift_becomes(multi_map, becomes)
    if becomes:
      # the realized tensors now hold their buffers. Other tensors with an identical (hash-consed) graph keep it: giving
      # them the same buffer would alias them, and a later assign to one would change the other. An assign (AFTER) is
      # unique to its target buffer, so every tensor holding it moves to the buffer.
      for t in (self, *lst): t.uop = becomes.get(t.uop, t.uop)
      for t in list(after_holders.values()):
        if t.uop.op is Ops.AFTER and (nu := becomes.get(t.uop)) is not None: t.uop = nu
    return items, var_vals, first_new
  def schedule(self, *lst: Tensor) -> list:
    """The kernels that realize these tensors, in order. The tensors now refer to their (not yet filled) buffers: run the
    items with `tg_core.engine.realize.run_schedule`."""
    return self.schedule_with_vars(*lst)[0]
  def realize(self, *lst: Tensor, do_update_stats: bool = True) -> Tensor:
    # a bare buffer or a reshape of one (a jitted function's inputs and outputs): nothing to schedule
    if not lst and (u := self.uop.src[0] if self.uop.op is Ops.RESHAPE else self.uop).op is Ops.BUFFER and not u.is_variable: return self
    from tg_core.engine.realize import run_schedule
    items, var_vals, first_new = self._schedule(*lst)
    # the buffers this schedule made are its intermediates, but for those the realized tensors now hold
    held = {_base_of(t.uop) for t in (self, *lst)}
    run_schedule(items, var_vals, {b for si in items for b in si.bufs if b.arg.slot >= first_new and b not in held})
    return self
  def contiguous(self, *args: Any, **kwargs: Any) -> Tensor: return self._apply_uop(lambda u: u.contiguous())
  def contiguous_backward(self) -> Tensor: return self._apply_uop(lambda u: u.contiguous_backward())
  def _flat_realized(self) -> Tensor:
    """This tensor, or a realized flat contiguous copy of it, on one device."""
    if isinstance(self.device, tuple): return self.to(self.device[0])._flat_realized()  # a multi-device tensor is read on its first device
    t = self if self.is_realized() and _is_flat_contiguous(self.uop) else self.contiguous()
    t.realize()
    return t if _is_flat_contiguous(t.uop) else t.contiguous().realize()
  def _buffer(self) -> Any:
    from tg_core.engine.realize import buffer_of
    return buffer_of(self._flat_realized().uop.base)
  def data(self) -> memoryview:
    if 0 in self.shape: return memoryview(bytearray(0)).cast(self.dtype.fmt or "B")
    if not all_int(self.shape): raise SymbolicShapeError(_no_symbolic_data(self.shape))
    buf = self._buffer()  # held while its memory is read
    mv = buf.as_buffer()
    if self.dtype.fmt is None: return mv
    return mv.cast(self.dtype.fmt, self.shape) if len(self.shape) else mv.cast(self.dtype.fmt)
  def numpy(self) -> np.ndarray:
    if not all_int(self.shape): raise SymbolicShapeError(_no_symbolic_data(self.shape))
    if self.dtype in (dtypes.bfloat16, *dtypes.fp8s): return self.cast(dtypes.float32).numpy()
    npdt = _to_np_dtype(self.dtype)
    if 0 in self.shape: return np.zeros(self.shape, dtype=npdt)
    buf = self._buffer()  # held while its memory is read
    return np.frombuffer(bytes(buf.as_buffer()), dtype=npdt).reshape(self.shape)
  def tolist(self) -> Any: return self.numpy().tolist()
  def item(self) -> ConstType:
    if self.numel() != 1: raise ValueError(f"a Tensor with {self.numel()} elements cannot be converted to a scalar")
    return self.numpy().reshape(-1)[0].item()
  def to(self, device: str | tuple | None) -> Tensor:
    device = canonicalize_device(device)
    if device == self.device: return self
    if isinstance(device, tuple) and isinstance(self.device, str): return self.shard(device)
    ret = Tensor(self.uop.copy_to_device(device), device, requires_grad=self.requires_grad)
    if self.grad is not None: ret.grad = self.grad.to(device)
    return ret
  def shard(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Tensor:
    """This tensor over several devices: replicated (axis None) or split along `axis` in ceil-divided slices, the last smaller.
    Ops on it run on every device; `.device` is the device tuple (see tg_core/schedule/multi.py)."""
    from tg_core.schedule.multi import MultiDeviceError, shard_uop
    if not isinstance(devices, (tuple, list)) or not devices: raise MultiDeviceError(f"shard needs a tuple of devices, got {devices!r}")
    if not isinstance(self.device, str): raise MultiDeviceError(f"can't shard a tensor that is already on {self.device}: use .to(devices)")
    devs = canonicalize_device(tuple(devices))
    assert isinstance(devs, tuple)
    return Tensor(shard_uop(self.uop, devs, None if axis is None else self._resolve_dim(axis)), devs, requires_grad=self.requires_grad)
  def shard_(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Tensor:
    self.uop = self.shard(devices, axis).uop
    return self
  def to_(self, device: str | None) -> Tensor:
    real = self.to(device)
    self.uop = real.uop
    return self
  def clone(self, device: str | None = None) -> Tensor:
    ret = Tensor(self.uop.copy_to_device(canonicalize_device(device)) if device is not None and canonicalize_device(device) != self.device
                 else self.uop.contiguous() if self.is_realized() else self.uop, requires_grad=self.requires_grad)
    return ret.contiguous() if ret.uop.op is not Ops.CONTIGUOUS else ret
  def detach(self) -> Tensor: return Tensor(self.uop.detach(), requires_grad=False)
  def replace(self, x: Tensor) -> Tensor:
    """Make this tensor refer to `x`'s data (the graph, not a copy); only the shapes must match (dtype and device may change)."""
    if x.shape != self.shape: raise ValueError(f"replace shape mismatch {self.shape} != {x.shape}: replace needs a tensor of the same shape")
    self.uop = x.uop
    if x.uop.op is Ops.AFTER: after_holders[id(self)] = self
    return self
  def assign(self, x: Tensor | ConstType | list | np.ndarray) -> Tensor:
    if not isinstance(x, Tensor): x = Tensor(x, device=self.device, dtype=self.dtype)
    if x.shape != self.shape: x = x.expand(self.shape) if len(x.shape) <= len(self.shape) else x
    if x.shape != self.shape: raise RuntimeError(f"assign shape mismatch {self.shape} != {x.shape}")
    if self.device != x.device: raise RuntimeError(f"assign device mismatch {self.device} != {x.device}")
    if x.dtype != self.dtype: x = x.cast(self.dtype)
    if not self.is_realized() and (self.uop.op is Ops.AFTER or isinstance(self.device, tuple)): self.realize()  # (multi: keeps its sharding)
    # any other unrealized target gets a fresh buffer of its own: realizing it in place would share the buffer with every tensor
    # built from the same hash-consed graph (another Tensor.zeros(3)), and the store would change those too
    target = self.uop if self.is_realized() else Tensor.empty(self.shape, dtype=self.dtype, device=self.device).uop
    self.uop = target.after(target.store(x.uop))
    after_holders[id(self)] = self
    return self

  def _apply_uop(self, fxn: Callable[..., UOp], *others: Tensor, **kwargs: Any) -> Tensor:
    ret = Tensor(fxn(self.uop, *[o.uop for o in others], **kwargs))
    if not Tensor.no_grad and (self.requires_grad or any(o.requires_grad for o in others)): ret.requires_grad = True
    return ret

  # *** creation ***
  @staticmethod
  def empty(*shape: Any, device: str | None = None, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
    shp = argfix(*shape)
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    dev = canonicalize_device(device)
    if isinstance(dev, tuple):  # replicated on each device
      from tg_core.schedule.multi import make_multi
      return Tensor(make_multi([Tensor.empty(*shp, device=d, dtype=dt).uop for d in dev], ()), **kwargs)
    # a symbolic shape gets a buffer of its largest size, viewed (shrunk) to the shape
    buf = UOp.new_buffer(dev, prod(svmax(s) for s in shp), dt)
    return Tensor(buf.view_as(shp) if shp != (buf.arg.size,) else buf, **kwargs)
  @staticmethod
  def full(shape: tuple[sint, ...] | int, fill_value: ConstType, dtype: DTypeLike | None = None, device: str | None = None, **kwargs: Any) -> Tensor:
    shp = argfix(shape)
    dt = to_dtype(dtype) if dtype is not None else strong_dtype(dtypes.from_py(fill_value))
    if any(not isinstance(s, UOp) and s < 0 for s in shp): raise ValueError(f"negative dimension in shape {shp}")
    return Tensor(UOp.const(dt, fill_value, canonicalize_device(device), shp), **kwargs)
  @staticmethod
  def zeros(*shape: Any, **kwargs: Any) -> Tensor: return Tensor.full(argfix(*shape), 0.0, **{"dtype": dtypes.default_float, **kwargs})
  @staticmethod
  def ones(*shape: Any, **kwargs: Any) -> Tensor: return Tensor.full(argfix(*shape), 1.0, **{"dtype": dtypes.default_float, **kwargs})
  @staticmethod
  def arange(start: int | float, stop: int | float | None = None, step: int | float = 1, **kwargs: Any) -> Tensor:
    if stop is None: stop, start = start, 0
    if any(isinstance(x, UOp) for x in (start, stop, step)):
      raise TypeError(f"arange needs concrete bounds, got {_sstr((start, stop, step))}: make arange(max) and slice it, arange(n)[:i]")
    if step == 0: raise ValueError("arange step must not be zero")
    dtype = to_dtype(kwargs.pop("dtype")) if "dtype" in kwargs else strong_dtype(dtypes.from_py([start, stop, step]))
    n = max(math.ceil((stop - start) / step), 0)
    # built on the host: a lazy arange needs folding of a windowed sum of ones, which the symbolic engine lacks yet
    if dtypes.is_int(dtype): arr = start + np.arange(n, dtype=np.int64) * step
    else: arr = start + np.arange(n, dtype=np.float64) * step
    return Tensor(arr.astype(_to_np_dtype(dtype)) if _to_np_dtype(dtype) is not None else arr, dtype=dtype, **kwargs)
  @staticmethod
  def linspace(start: int | float, stop: int | float, steps: int, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
    """`steps` evenly spaced values from `start` to `stop` inclusive. `Tensor.linspace(0, 1, 5)` -> [0, .25, .5, .75, 1].
    Like tinygrad, computed in the default float and cast (an int dtype truncates, and wraps below 0 for unsigned where torch
    steps in the integer domain); a negative `steps` or a bool dtype raise ValueError (torch: RuntimeError / NotImplementedError)."""
    if steps < 0: raise ValueError(f"number of steps must be non-negative, got {steps}")
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if dt == dtypes.bool: raise ValueError("linspace with bool dtype is not supported: use a numeric dtype")
    if steps == 1: return Tensor.full((1,), start, dtype=dt, **kwargs)
    return (start + Tensor.arange(steps, dtype=dtypes.default_float, **kwargs) * ((stop - start) / max(steps - 1, 1))).cast(dt)
  def full_like(self, fill_value: ConstType, **kwargs: Any) -> Tensor:
    return Tensor.full(self.shape, fill_value, dtype=kwargs.pop("dtype", self.dtype), device=kwargs.pop("device", self.device), **kwargs)
  def zeros_like(self, **kwargs: Any) -> Tensor: return self.full_like(0, **kwargs)
  def ones_like(self, **kwargs: Any) -> Tensor: return self.full_like(1, **kwargs)
  def empty_like(self, **kwargs: Any) -> Tensor:
    return Tensor.empty(self.shape, dtype=kwargs.pop("dtype", self.dtype), device=kwargs.pop("device", self.device), **kwargs)
  @staticmethod
  def eye(n: int, m: int | None = None, dtype: DTypeLike | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    if n < 0 or (m is not None and m < 0): raise ValueError(f"cannot have negative {n=}, {m=}")
    m = n if m is None else m
    ret = Tensor.arange(n, device=device).reshape(n, 1).eq(Tensor.arange(m, device=device).reshape(1, m))
    return ret.cast(to_dtype(dtype) if dtype is not None else dtypes.default_float).requires_grad_(requires_grad)
  def requires_grad_(self, requires_grad: bool | None = True) -> Tensor:
    self.requires_grad = requires_grad
    return self

  # *** movement ***
  def _resolve_dim(self, dim: int, *, extra: bool = False) -> int:
    total = self.ndim + int(extra)
    if not -max(1, total) <= dim <= max(1, total) - 1: raise IndexError(f"dim={dim} out of range [{-max(1, total)}, {max(1, total)-1}]")
    return dim + total if dim < 0 else dim
  def reshape(self, shape: Any, *args: Any) -> Tensor:
    new_shape = tuple(argfix(shape, *args))
    if (c := new_shape.count(-1)) > 1: raise RuntimeError(f"only one dimension can be inferred using -1, getting {new_shape}")
    if c:
      rest = prod([s for s in new_shape if s != -1])
      if rest == 0 or self.numel() % rest != 0: raise RuntimeError(f"shape '{new_shape}' is invalid for input of size {self.numel()}")
      new_shape = tuple(self.numel() // rest if s == -1 else s for s in new_shape)
    new_shape = tuple(self.shape[i] if s is None else s for i, s in enumerate(new_shape))
    if all_int(new_shape) and all_int(self.shape):
      if prod(new_shape) != self.numel(): raise RuntimeError(f"shape '{new_shape}' is invalid for input of size {self.numel()}")
    elif not same_numel(new_shape, self.shape):  # symbolic sizes must be provably equal, as in tinygrad
      raise ValueError(f"size mismatch, can't reshape {_sstr(self.shape)} -> {_sstr(new_shape)}: the element counts are not provably equal")
    return self if new_shape == self.shape else self._apply_uop(lambda u: u.reshape(new_shape))
  def view(self, shape: Any, *args: Any) -> Tensor:
    if isinstance(shape, DType) or isinstance(shape, str): return self.bitcast(to_dtype(shape))
    return self.reshape(shape, *args)
  def expand(self, shape: Any, *args: Any) -> Tensor:
    new_shape = tuple(argfix(shape, *args))
    if len(new_shape) < self.ndim: raise RuntimeError(f"expand: the number of sizes provided ({len(new_shape)}) must be >= the number of dims ({self.ndim})")
    base = (1,) * (len(new_shape) - self.ndim) + self.shape
    new_shape = tuple(b if s == -1 else s for s, b in zip(new_shape, base))
    for s, b in zip(new_shape, base):
      if b != s and b != 1: raise RuntimeError(f"expand: cannot expand shape {self.shape} to {new_shape}")
    t = self.reshape(base) if base != self.shape else self
    return t if new_shape == t.shape else t._apply_uop(lambda u: u.expand(new_shape))
  def permute(self, order: Any, *args: Any) -> Tensor:
    order_arg = tuple(self._resolve_dim(x) for x in argfix(order, *args))
    if sorted(order_arg) != list(range(self.ndim)): raise RuntimeError(f"order is not a valid permutation, getting {order_arg}")
    return self._apply_uop(lambda u: u.permute(order_arg))
  def flip(self, axis: Any, *args: Any) -> Tensor:
    axis_arg = tuple(self._resolve_dim(x) for x in argfix(axis, *args))
    if len(axis_arg) != len(set(axis_arg)): raise RuntimeError(f"dim can appear at most once, getting {axis_arg}")
    return self._apply_uop(lambda u: u.flip(tuple(i in axis_arg for i in range(self.ndim))))
  def shrink(self, arg: tuple[tuple[sint, sint] | None, ...]) -> Tensor:
    if len(arg) != self.ndim: raise ValueError(f"shrink arg {arg} must have {self.ndim} entries")
    full = tuple(x if x is not None else (0, s) for x, s in zip(arg, self.shape))
    for (b, e), s in zip(full, self.shape):
      if all_int((b, e, s)):
        if not 0 <= b <= e <= s: raise ValueError(f"invalid shrink {full} for shape {self.shape}")
      # symbolic: the bounds must stay inside the dim's largest size (its storage); smaller ends are read as in tinygrad
      elif svmin(b) < 0 or svmax(e) > svmax(s) or ((d := sint_diff(e, b)) is not None and d < 0) or (d is None and not resolve(sint_to_uop(b) <= e, True)):
        raise ValueError(f"invalid shrink {_sstr(full)} for shape {_sstr(self.shape)}: a bound can leave [0, {svmax(s)}] for some value of "
                         "its Variables; narrow the Variable's range")
    if all(b == 0 and e == s for (b, e), s in zip(full, self.shape)): return self
    return self._apply_uop(lambda u: u.shrink(full))
  def pad(self, padding: Sequence[sint] | Sequence[tuple[sint, sint] | None], mode: str = "constant", value: float = 0.0) -> Tensor:
    if mode not in {"constant", "reflect", "replicate", "circular"}: raise NotImplementedError(f"{mode=} is not supported")
    if (flat := all(isinstance(p, (int, UOp)) for p in padding)) and len(padding) % 2 != 0: raise ValueError("Flat padding must have even number of pads")
    pX = tuple(((0, 0),) * (self.ndim - len(padding) // 2) + tuple(zip(padding[-2::-2], padding[::-2]))) if flat else \
      tuple((0, 0) if p is None else tuple(p) for p in padding)  # type: ignore[misc]
    if len(pX) != self.ndim: raise ValueError(f"padding length is improper, {padding=} {self.ndim=}")
    X, pads = self, tuple((smax(pB, 0), smax(pA, 0)) for pB, pA in pX)
    if mode == "constant":
      def _constant(x: Tensor, px: tuple, v: float) -> Tensor:
        if all(b == 0 and a == 0 for b, a in px): return x
        padded = x._apply_uop(lambda u: u.pad(px))
        fill = Tensor(v, dtype=x.dtype, device=x.device) if dtypes.is_float(x.dtype) or v == int(v) else v  # v in x's dtype: int64 extremes
        return padded if v == 0 else padded + Tensor.ones_like(x)._apply_uop(lambda u: u.pad(px)).logical_not().where(fill, 0).cast(x.dtype) \
          if dtypes.is_float(x.dtype) or v == int(v) else padded
      # negative pads shrink first (like Python negative slices), then the non-negative pads are applied
      if any(resolve(pB < 0) or resolve(pA < 0) for pB, pA in pX):
        X = X.shrink(tuple((-smin0(pB), s + smin0(pA)) for (pB, pA), s in zip(pX, X.shape)))
      return _constant(X, pads, value)
    from tg_core.frontend.movement import pad_mode
    return pad_mode(self, pX, mode)
  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    order = list(range(self.ndim))
    d0, d1 = self._resolve_dim(dim0), self._resolve_dim(dim1)
    order[d0], order[d1] = order[d1], order[d0]
    return self.permute(order)
  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if self.ndim == 0: return self.reshape(1)
    s, e = self._resolve_dim(start_dim), self._resolve_dim(end_dim)
    if s > e: raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e+1]),) + self.shape[e+1:])
  def unflatten(self, dim: int, sizes: tuple[int, ...]) -> Tensor:
    d = self._resolve_dim(dim)
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d+1:])
  def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if self.ndim == 0:
      for d in dims:
        if d not in (-1, 0): raise IndexError(f"Dimension out of range (expected to be in range of [-1, 0], but got {d})")
      return self
    rd = {self._resolve_dim(d) for d in dims}
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in rd or s != 1))
  def unsqueeze(self, dim: int) -> Tensor:
    d = self._resolve_dim(dim, extra=True)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  # *** elementwise ***
  def _broadcasted(self, y: Tensor | ConstType | UOp, reverse: bool = False, match_dtype: bool = True) -> tuple[Tensor, Tensor]:
    x: Tensor = self
    if not isinstance(y, Tensor):
      if isinstance(y, UOp): y = Tensor(y, device=x.device)
      elif isinstance(y, (list, tuple, np.ndarray)): y = Tensor(y, device=x.device)
      elif isinstance(y, (bool, int, float)):
        # a Python constant takes the tensor's dtype unless it is of a higher kind (weak promotion, like torch)
        ydt = dtypes.from_py(y)
        dt = strong_dtype(least_upper_dtype(x.dtype, ydt)) if match_dtype else strong_dtype(ydt)
        if x.dtype == dtypes.bool and ydt == dtypes.weakint: dt = dtypes.default_int
        if not match_dtype or dt == x.dtype:  # the common case, built directly at x's shape (no broadcast step)
          c = Tensor(UOp.const(dt, y, x.device, x.shape), requires_grad=False)
          return (c, x) if reverse else (x, c)
        y = Tensor(UOp.const(dt, y, x.device), requires_grad=False)
      else: raise TypeError(f"unsupported operand type {type(y).__name__}")
    if match_dtype and x.dtype != y.dtype:
      out = strong_dtype(least_upper_dtype(x.dtype, y.dtype))
      x, y = x.cast(out), y.cast(out)
    if reverse: x, y = y, x
    out_shape = _broadcast_shape(x.shape, y.shape)
    return x._broadcast_to(out_shape), y._broadcast_to(out_shape)
  def _broadcast_to(self, new_shape: tuple[sint, ...]) -> Tensor:
    if self.shape == new_shape: return self
    if self.ndim > len(new_shape): raise BroadcastError(f"cannot broadcast tensor to fewer dimensions. shape={self.shape} to {new_shape=}")
    shape, _ = _align_left(self.shape, new_shape)
    if any(not (s == 1 or sint_eq(s, ns)) for s, ns in zip(shape, new_shape)): raise BroadcastError(f"cannot broadcast {self.shape} to {new_shape=}")
    # equal symbolic sizes written differently take new_shape's form (a reshape), so the shapes of the two sides are identical
    return self.reshape(tuple(ns if s is not ns and s != 1 else s for s, ns in zip(shape, new_shape))).expand(new_shape)
  def _binop(self, op: Ops, x: Tensor | ConstType, reverse: bool) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a._apply_uop(lambda u, v: u.alu(op, v), b)
  def add(self, x: Tensor | ConstType, reverse: bool = False) -> Tensor: return self._binop(Ops.ADD, x, reverse)
  def mul(self, x: Tensor | ConstType, reverse: bool = False) -> Tensor: return self._binop(Ops.MUL, x, reverse)
  def sub(self, x: Tensor | ConstType, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    if a.dtype == dtypes.bool: raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported.")
    return a + (-b)
  def neg(self) -> Tensor:
    if self.dtype == dtypes.bool: raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported.")
    return self * -1
  def div(self, x: Tensor | ConstType, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
    # true division by a Python int happens in float, like torch (the int must not wrap to the tensor's dtype: uint8 / -1 is -1.0)
    if rounding_mode is None and type(x) is int and not dtypes.is_float(self.dtype): x = float(x)
    numerator, denominator = self._broadcasted(x, reverse)
    if rounding_mode is None:
      d = least_upper_float(numerator.dtype)
      numerator, denominator = numerator.cast(strong_dtype(d)), denominator.cast(strong_dtype(d))
      return numerator * denominator.reciprocal()
    if rounding_mode == "trunc":
      if dtypes.is_int(numerator.dtype): return numerator._apply_uop(lambda u, v: u.alu(Ops.IDIV, v), denominator)
      return (numerator / denominator).trunc()
    if rounding_mode == "floor":
      if dtypes.is_int(numerator.dtype):
        q = numerator._apply_uop(lambda u, v: u.alu(Ops.IDIV, v), denominator)
        r = numerator._apply_uop(lambda u, v: u.alu(Ops.MOD, v), denominator)
        # C truncation -> floor: subtract one when the remainder is nonzero and the signs differ
        return q - ((r.ne(0)) & ((r < 0).ne(denominator < 0))).cast(q.dtype)
      return (numerator / denominator).floor()
    raise RuntimeError(f"{rounding_mode=} is not supported")
  def mod(self, x: Tensor | ConstType, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    if dtypes.is_int(a.dtype):
      r = a._apply_uop(lambda u, v: u.alu(Ops.MOD, v), b)
      return ((r.ne(0)) & ((r < 0).ne(b < 0))).where(r + b, r)
    return a - a.div(b, rounding_mode="floor") * b
  def fmod(self, x: Tensor | ConstType) -> Tensor:
    a, b = self._broadcasted(x)
    if dtypes.is_int(a.dtype): return a._apply_uop(lambda u, v: u.alu(Ops.MOD, v), b)
    return a - (a / b).trunc() * b
  def maximum(self, x: Tensor | ConstType) -> Tensor:
    a, b = self._broadcasted(x)
    if a.dtype == dtypes.bool: return a | b
    return a._apply_uop(lambda u, v: u.alu(Ops.MAX, v), b)
  def minimum(self, x: Tensor | ConstType) -> Tensor:
    a, b = self._broadcasted(x)
    if a.dtype == dtypes.bool: return a & b
    # ints: ~max(~a, ~b) (-x wraps at INT_MIN: -INT_MIN == INT_MIN would come out as the max)
    if dtypes.is_int(a.dtype): return ~((~a).maximum(~b))
    return -((-a).maximum(-b))
  def where(self: Tensor, x: Tensor | ConstType, y: Tensor | ConstType) -> Tensor:
    if isinstance(x, Tensor) and isinstance(y, Tensor): x, y = x._broadcasted(y)
    elif isinstance(x, Tensor): x, y = x._broadcasted(y)
    elif isinstance(y, Tensor): y, x = y._broadcasted(x)
    else:
      dt = strong_dtype(least_upper_dtype(dtypes.from_py(x), dtypes.from_py(y)))
      x, y = Tensor(x, device=self.device, dtype=dt), Tensor(y, device=self.device, dtype=dt)
    cond = self if self.dtype == dtypes.bool else self.cast(dtypes.bool)
    shape = _broadcast_shape(cond.shape, x.shape, y.shape)
    cond, x, y = cond._broadcast_to(shape), x._broadcast_to(shape), y._broadcast_to(shape)
    return cond._apply_uop(lambda c, a, b: UOp(Ops.WHERE, a.dtype, (c, a, b)), x, y)
  def dp4a(self, b: Tensor, acc: Tensor | int = 0, b_in_range: bool = False) -> Tensor:
    """acc + the dot product of the 4 bytes of each int32 element of self and b, as int8: sum_k int8(self_k) * max(int8(b_k), -127)
    (b's bytes saturate to a symmetric int8, what an int8 quantization produces). A uint32 self holds unsigned bytes:
    sum_k uint8(self_k) * int8(b_k), b not saturated (x86's vpdpbusd as it is: one instruction, no sign handling). One op
    (Ops.DP4A): a renderer with an integer dot-product instruction renders it natively, the others get shifts, multiplies and
    adds (codegen/dp4a.py). `b_in_range`: the caller promises no byte of b is -128 (b is a symmetric int8 quantization's
    output), so the saturation changes nothing and the kernel skips it (x86: a broadcast b is then read straight from memory
    by vpdpbusd). A byte -128 under the promise gives an unspecified result."""
    if self.dtype not in (dtypes.int32, dtypes.uint32) or b.dtype != dtypes.int32:
      raise TypeError(f"dp4a takes an int32 (or uint32: unsigned bytes) self and an int32 b, 4 packed bytes each: got {self.dtype} and {b.dtype}")
    c = acc if isinstance(acc, Tensor) else Tensor.full((), acc, dtype=dtypes.int32, device=self.device)
    if c.dtype != dtypes.int32: raise TypeError(f"dp4a accumulates in int32, got acc of {c.dtype}")
    shape = _broadcast_shape(self.shape, b.shape, c.shape)
    x, y, z = self._broadcast_to(shape), b._broadcast_to(shape), c._broadcast_to(shape)
    return x._apply_uop(lambda u, v, w: UOp(Ops.DP4A, dtypes.int32, (u, v, w), True if b_in_range else None), y, z).requires_grad_(None)
  def dpbf16(self, b: Tensor, acc: Tensor | float = 0.0) -> Tensor:
    """acc + the dot product of the two bfloat16 packed in each uint32 element of self and b (low and high 16 bits), in float32:
    acc + lo(self) * lo(b) + hi(self) * hi(b), the products exact. One op (Ops.DPBF16): a renderer with a bfloat16 pair
    dot-product instruction (x86's vdpbf16ps) renders it natively, the others get shifts, multiplies and adds (codegen/dpbf16.py)."""
    if self.dtype != dtypes.uint32 or b.dtype != dtypes.uint32:
      raise TypeError(f"dpbf16 takes uint32 operands, 2 bfloat16 each (lo | hi << 16 of their bits, bitcast to uint16): got {self.dtype} and {b.dtype}")
    c = acc if isinstance(acc, Tensor) else Tensor.full((), acc, dtype=dtypes.float32, device=self.device)
    if c.dtype != dtypes.float32: raise TypeError(f"dpbf16 accumulates in float32, got acc of {c.dtype}")
    shape = _broadcast_shape(self.shape, b.shape, c.shape)
    x, y, z = self._broadcast_to(shape), b._broadcast_to(shape), c._broadcast_to(shape)
    return x._apply_uop(lambda u, v, w: UOp(Ops.DPBF16, dtypes.float32, (u, v, w)), y, z).requires_grad_(None)
  def _cmp(self, op: Ops, x: Tensor | ConstType, reverse: bool) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a._apply_uop(lambda u, v: u.alu(op, v), b).requires_grad_(None)
  def __lt__(self, x: Tensor | ConstType) -> Tensor: return self._cmp(Ops.CMPLT, x, False)
  def __gt__(self, x: Tensor | ConstType) -> Tensor: return self._cmp(Ops.CMPLT, x, True)
  def __ge__(self, x: Tensor | ConstType) -> Tensor:
    a, b = self._broadcasted(x)
    return (a > b) | a.eq(b) if dtypes.is_float(a.dtype) else (a < b).logical_not()  # NaN >= y is False, like torch
  def __le__(self, x: Tensor | ConstType) -> Tensor:
    a, b = self._broadcasted(x)
    return (a < b) | a.eq(b) if dtypes.is_float(a.dtype) else (a > b).logical_not()  # NaN <= y is False, like torch
  def ne(self, x: Tensor | ConstType) -> Tensor: return self._cmp(Ops.CMPNE, x, False)
  def eq(self, x: Tensor | ConstType) -> Tensor: return self._cmp(Ops.CMPEQ, x, False)
  def __eq__(self, x: Any) -> Tensor: return self.eq(x)  # type: ignore[override]
  def __ne__(self, x: Any) -> Tensor: return self.ne(x)  # type: ignore[override]
  def logical_not(self) -> Tensor: return self.cast(dtypes.bool)._apply_uop(lambda u: u.alu(Ops.CMPNE, u.const_like(True)))
  def _bitwise(self, op: Ops, x: Tensor | ConstType, reverse: bool) -> Tensor:
    if self.dtype != dtypes.bool and not dtypes.is_int(self.dtype): raise NotImplementedError(f"{self.dtype} is not supported for bitwise ops: use bool or int")
    a, b = self._broadcasted(x, reverse)
    return a._apply_uop(lambda u, v: u.alu(op, v), b)
  def bitwise_and(self, x: Tensor | ConstType, reverse: bool = False) -> Tensor: return self._bitwise(Ops.AND, x, reverse)
  def bitwise_or(self, x: Tensor | ConstType, reverse: bool = False) -> Tensor: return self._bitwise(Ops.OR, x, reverse)
  def bitwise_xor(self, x: Tensor | ConstType, reverse: bool = False) -> Tensor: return self._bitwise(Ops.XOR, x, reverse)
  def bitwise_not(self) -> Tensor:
    if self.dtype != dtypes.bool and not dtypes.is_int(self.dtype): raise NotImplementedError(f"{self.dtype} is not supported for bitwise_not: use bool or int")
    return self.logical_not() if self.dtype == dtypes.bool else self ^ -1
  def lshift(self, x: int | Tensor) -> Tensor:
    _check_shift(self, x)
    a, b = self._broadcasted(x)
    return a._apply_uop(lambda u, v: u.alu(Ops.SHL, v), b)
  def rshift(self, x: int | Tensor) -> Tensor:
    _check_shift(self, x)
    a, b = self._broadcasted(x)
    return a._apply_uop(lambda u, v: u.alu(Ops.SHR, v), b)

  def cast(self, dtype: DTypeLike) -> Tensor:
    dt = to_dtype(dtype)
    return self if self.dtype == dt else self._apply_uop(lambda u: u.cast(dt))
  def bitcast(self, dtype: DTypeLike) -> Tensor:
    """The same bytes read as `dtype` (numpy's `view`): to a different element size the last dimension shrinks or grows by
    the size ratio, the elements' bytes taken in little-endian order (as every tg target stores them)."""
    dt = to_dtype(dtype)
    if self.dtype == dt: return self
    if dt.itemsize != self.dtype.itemsize:
      if self.ndim == 0: raise RuntimeError("bitcast to a different size is not supported for 0-d tensors")
      if not isinstance(self.shape[-1], int):
        raise RuntimeError(f"bitcast from {self.dtype} to {dt} changes the last dimension, which is symbolic ({self.shape[-1]}): bitcast a fixed-size slice")
      if (self.shape[-1] * self.dtype.itemsize) % dt.itemsize != 0: raise RuntimeError("the last dimension must divide evenly for bitcast")
      return self._bitcast_resize(dt)
    return self._apply_uop(lambda u: u.bitcast(dt))
  def _bitcast_resize(self, dt: DType) -> Tensor:
    """A bitcast to another element size, in unsigned words of both sizes: r narrow words shifted into (or out of) each wide
    word, the first in its low bits (the kernels see ordinary integer ops; a bitcast op only ever relabels same-size words)."""
    words = {u.itemsize: u for u in dtypes.uints}
    old_w, new_w, n = words[self.dtype.itemsize], words[dt.itemsize], self.shape[-1]
    src = self.bitcast(old_w)
    if dt.itemsize > self.dtype.itemsize:
      r = dt.itemsize // self.dtype.itemsize
      parts = src.reshape(*self.shape[:-1], n // r, r)
      out = parts[..., 0].cast(new_w)
      for i in range(1, r): out = out | (parts[..., i].cast(new_w) << (8 * self.dtype.itemsize * i))
    else:
      r = self.dtype.itemsize // dt.itemsize
      mask = (1 << (8 * dt.itemsize)) - 1
      out = Tensor.stack(*[((src >> (8 * dt.itemsize * i)) & mask).cast(new_w) for i in range(r)], dim=-1).reshape(*self.shape[:-1], n * r)
    return out.bitcast(dt)
  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def half(self) -> Tensor: return self.cast(dtypes.float16)
  def double(self) -> Tensor: return self.cast(dtypes.float64)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def long(self) -> Tensor: return self.cast(dtypes.int64)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)
  def bfloat16(self) -> Tensor: return self.cast(dtypes.bfloat16)

  def _as_float(self) -> Tensor:
    """The input of a float function: ints and bool cast to the default float (like torch), floats as they are."""
    return self.cast(float_result_dtype(self.dtype))
  def _float_unary(self, op: Ops) -> Tensor: return self._as_float()._apply_uop(lambda u: u.alu(op))
  def reciprocal(self) -> Tensor: return self._float_unary(Ops.RECIPROCAL)
  def sqrt(self) -> Tensor: return self._float_unary(Ops.SQRT)
  def sin(self) -> Tensor: return self._float_unary(Ops.SIN)
  def exp2(self) -> Tensor: return self._float_unary(Ops.EXP2)
  def log2(self) -> Tensor: return self._float_unary(Ops.LOG2)
  def exp(self) -> Tensor: return (self._as_float() * (1 / math.log(2))).exp2()
  def log(self) -> Tensor: return self.log2() * math.log(2)
  def trunc(self) -> Tensor: return self if not dtypes.is_float(self.dtype) else self._apply_uop(lambda u: u.alu(Ops.TRUNC))
  def floor(self) -> Tensor:
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (self < t).where(t - 1, t)
  def ceil(self) -> Tensor:
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (self > t).where(t + 1, t)
  def relu(self) -> Tensor: return (self <= 0).where(0, self) if self.dtype != dtypes.bool else self  # grad 0 at 0 and NaN kept, like torch
  def sigmoid(self) -> Tensor:
    if not dtypes.is_float(self.dtype): return self._as_float().sigmoid()
    # e = exp(-|x|) <= 1 never overflows: 1/(1+e) for x >= 0, e/(1+e) below, so the gradient stays finite for large |x|
    pos = self >= 0
    e = (pos.where(-self, self) * (1 / math.log(2))).exp2()
    return pos.where(1, e) * (1 + e).reciprocal()
  def abs(self) -> Tensor:
    # x * (1, -1, or x itself at +-0 and NaN): abs(+-inf) = inf, abs(NaN) = NaN, abs(-0.0) = 0.0 and a zero gradient at 0, like torch
    if dtypes.is_float(self.dtype): return self * (self > 0).where(1.0, (self < 0).where(-1.0, self))
    return (self < 0).where(-self, self) if not dtypes.is_unsigned(self.dtype) and self.dtype != dtypes.bool else self
  def sign(self) -> Tensor:
    if self.dtype == dtypes.bool: return self
    # torch: sign(NaN) = 0, sign(+-inf) = +-1. The x*x branch (taken only at x == 0) keeps x in the graph with a zero gradient
    zero = self.eq(0).where(self * self, self.full_like(0)) if dtypes.is_float(self.dtype) else self.full_like(0)
    return (self > 0).where(self.full_like(1), (self < 0).where(self.full_like(-1), zero))
  def square(self) -> Tensor: return self * self

  # *** reduce ***
  def _reduce(self, op: Ops, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    axis_ = tuple(range(self.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
    axis_ = tuple(self._resolve_dim(x) for x in axis_)
    if self.ndim == 0: axis_ = ()
    if len(set(axis_)) != len(axis_): raise RuntimeError(f"dim {axis_} has a dim that appears multiple times in the list of dims")
    if any(self.shape[a] == 0 for a in axis_) and op is not Ops.ADD and op is not Ops.MUL:
      # like torch: IndexError when a zero-size dim is named, RuntimeError for a full reduction
      raise (RuntimeError if axis is None else IndexError)(f"max/min of a tensor with a zero-size reduced dim is undefined; shape={self.shape}")
    if SPLIT_REDUCEOP and len(axis_) == self.ndim and all_int(self.shape) and isinstance(self.device, str) and (n := int(prod(self.shape))) >= 1 << 15 and \
       (d := _split_factor(n)) > 1:
      # a big full reduction runs in two stages: `d` partial reductions (parallel, contiguous), then one over the partials
      ret = self.reshape(d, n // d)._reduce(op, 1)._reduce(op, 0).reshape((1,) * self.ndim)
      return ret if keepdim else ret.reshape(())
    ret = self._apply_uop(lambda u: u.r(op, axis_)) if any(self.shape[a] != 1 for a in axis_) else self
    if any(self.shape[a] == 0 for a in axis_):
      ret = Tensor.full(tuple(1 if i in axis_ else s for i, s in enumerate(self.shape)), identity_element(op, self.dtype), dtype=self.dtype, device=self.device)
    return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axis_))
  def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DTypeLike | None = None) -> Tensor:
    acc = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
    ret = self.cast(acc)._reduce(Ops.ADD, axis, keepdim)
    # half-precision floats accumulate in float32 and return their own dtype (like torch)
    return ret.cast(self.dtype) if dtype is None and dtypes.is_float(self.dtype) and self.dtype.bitsize < 32 else ret
  def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DTypeLike | None = None) -> Tensor:
    acc = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
    return self.cast(acc)._reduce(Ops.MUL, axis, keepdim)
  def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    if self.dtype == dtypes.bool: return self.cast(dtypes.uint8).max(axis, keepdim).cast(dtypes.bool)
    return self._reduce(Ops.MAX, axis, keepdim)
  def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    if self.dtype == dtypes.bool: return self.logical_not().max(axis, keepdim).logical_not()
    if dtypes.is_int(self.dtype): return ~((~self).max(axis, keepdim))
    return -((-self).max(axis, keepdim))
  def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    out_dt = self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float
    numerator = self.cast(sum_acc_dtype(self.dtype)).sum(axis, keepdim)
    n = prod(self.shape) // prod(numerator.shape) if prod(numerator.shape) != 0 else 0 if 0 in self.shape else prod(self.shape)
    if 0 in self.shape: return Tensor.full(numerator.shape, math.nan, dtype=out_dt, device=self.device)
    return (numerator.cast(least_upper_float(numerator.dtype)) / n).cast(out_dt) if n != 0 else numerator.cast(out_dt)

  # *** linear algebra ***
  def dot(self, w: Tensor, dtype: DTypeLike | None = None) -> Tensor:
    x = self
    n1, n2 = x.ndim, w.ndim
    if n1 == 0 or n2 == 0: raise RuntimeError(f"both tensors need to be at least 1D, got {n1}D and {n2}D")
    if x.shape[-1] != w.shape[-min(n2, 2)]:
      raise RuntimeError(f"cannot dot {x.shape} and {w.shape}: size mismatch {x.shape[-1]} != {w.shape[-min(n2, 2)]}")
    if x.dtype != w.dtype:
      out = strong_dtype(least_upper_dtype(x.dtype, w.dtype))
      x, w = x.cast(out), w.cast(out)
    if (paired := x._dot_bf16_pairs(w, dtype)) is not None: return paired
    x = x.reshape(*x.shape[0:-1], *[1] * min(n1 - 1, n2 - 1, 1), x.shape[-1])
    w = w.reshape(*w.shape[0:-2], *[1] * min(n1 - 1, n2 - 1, 1), *w.shape[-min(n2, 2):]).transpose(-1, -min(n2, 2))
    return (x * w).sum(-1, dtype=dtype).cast(to_dtype(dtype) if dtype is not None else x.dtype if x.dtype != dtypes.bool else dtypes.bool)
  def _dot_bf16_pairs(self, w: Tensor, dtype: DTypeLike | None) -> Tensor | None:
    """A bfloat16 matmul on a device whose renderer has the bfloat16 pair dot product (caps.native_dpbf16), else None (the
    plain product-and-sum, bfloat16 emulated where the target lacks it). K is taken in pairs: A's rows as uint32 (a pair of
    neighbours, padded to an even K with a zero), B's rows interleaved pairwise per column into uint32 (for a stored B of even
    K joined inside the matmul kernel, where its packed panels' copy joins each pair once; else one copy of B), summed in
    float32 (Tensor.dpbf16, products exact),
    the float32 sum cast to bfloat16 in the matmul's store where one K block holds all of K (`heuristic.one_k_block`), else
    realized before its cast so the cache-blocked matmul can accumulate its K blocks in it. Not for:
    gradients (the packing isn't differentiable), multi-device tensors, vectors, and fewer than MIN_DPBF16_ROWS rows of A per
    matrix of B (a matvec `x @ W` would copy all of W to read it once)."""
    x = self
    if x.dtype != dtypes.bfloat16 or w.dtype != dtypes.bfloat16 or x.ndim < 2 or w.ndim < 2 or not isinstance(x.device, str): return None
    if dtype is not None and to_dtype(dtype) not in (dtypes.bfloat16, dtypes.float32): return None
    if not Tensor.no_grad and (x.requires_grad or w.requires_grad): return None
    if any(not isinstance(s, int) for s in (*x.shape, *w.shape)): return None
    # the rows of A each of B's matrices is read for (A's batch broadcast against B's)
    if prod(_broadcast_shape(x.shape[:-2], w.shape[:-2])) * x.shape[-2] < MIN_DPBF16_ROWS * prod(w.shape[:-2]): return None
    from tg_core.device import Device
    if not Device[x.device].renderer.caps.native_dpbf16: return None
    # B's pairs are joined in the matmul kernel (its packed panels' copy joins each once) where B's rows are a stored buffer's,
    # each a K pair's halves read at unit stride along N; else (an odd K's pad, a transposed, broadcast or computed B, whose
    # join would run at every reduce step) in a kernel of their own
    join_b = x.shape[-1] % 2 == 0 and _is_flat_contiguous(w.uop)
    if (k := x.shape[-1]) % 2:  # an odd K: a zero pair half, whose products add 0
      x, w = x.pad(((0, 0),) * (x.ndim - 1) + ((0, 1),)), w.pad(((0, 0),) * (w.ndim - 2) + ((0, 1), (0, 0)))
      k += 1
    def pairs(t: Tensor) -> Tensor:  # (..., 2) bfloat16 -> (...) uint32, the first of each pair in the low half
      lo, hi = (t[..., i].bitcast(dtypes.uint16).cast(dtypes.uint32) for i in (0, 1))
      return lo | (hi << 16)
    n = w.shape[-1]
    xa = pairs(x.reshape(*x.shape[:-1], k // 2, 2)).contiguous()  # (..., M, K/2)
    wb = pairs(w.reshape(*w.shape[:-2], k // 2, 2, n).transpose(-1, -2))  # (..., K/2, N): B[2i, j] and B[2i+1, j] in one uint32
    if not join_b: wb = wb.contiguous()
    xa = xa.reshape(*xa.shape[:-1], 1, k // 2)
    wb = wb.reshape(*wb.shape[:-2], 1, k // 2, n).transpose(-1, -2)
    ret = xa.dpbf16(wb).sum(-1, dtype=dtypes.float32)
    if dtype is not None and to_dtype(dtype) == dtypes.float32: return ret
    # cast in the matmul's own store where its cache-blocked plan sums all of K in one block; else the float32 sum is realized
    # first, for the plan to add its K blocks up in it, and cast in a kernel of its own
    from tg_core.codegen.opt.heuristic import one_k_block
    return ret.cast(dtypes.bfloat16) if one_k_block(Device[x.device].renderer.caps, k // 2, 4) else ret.contiguous().cast(dtypes.bfloat16)
  def matmul(self, x: Tensor, reverse: bool = False, dtype: DTypeLike | None = None) -> Tensor:
    return x.dot(self, dtype=dtype) if reverse else self.dot(x, dtype=dtype)

  # *** autograd ***
  def call(self, *lst: Tensor, fxn: Tensor | UOp, grad_fxn: Callable | None = None) -> Tensor:
    """Call the body `fxn` (an expression over PARAMs slotted 0..n-1) with (self, *lst) as its args."""
    body = fxn.uop if isinstance(fxn, Tensor) else fxn
    call = body.call(self.uop, *[t.uop for t in lst], grad_fxn=grad_fxn)
    ret = Tensor(call.returned_outputs[0], device=self.device)
    from tg_core.function import _param_subs
    _param_subs(call)  # argument shapes are checked here, at call time
    if any(t.requires_grad for t in (self, *lst)): ret.requires_grad = True
    return ret
  def gradient(self, *targets: Tensor, gradient: Tensor | None = None, materialize_grads: bool = False) -> list[Tensor]:
    from tg_core.gradient import compute_gradient
    if gradient is None and self.numel() != 1: raise RuntimeError("grad can be implicitly created only for scalar outputs")
    rg = gradient.uop if gradient is not None else UOp.const(self.dtype, 1.0, self.device, self.shape)
    target_uops = [t.uop for t in targets]
    grads = compute_gradient(self.uop, rg, set(target_uops))
    ret = []
    for t, tu in zip(targets, target_uops):
      if (g := grads.get(tu)) is None:
        if materialize_grads: ret.append(t.zeros_like())
        else: raise RuntimeError(f"{tu.op} {tu.shape} is not in the path to the output, it has no gradient")
      else: ret.append(Tensor(g, device=t.device))
    return ret
  def backward(self, gradient: Tensor | None = None) -> Tensor:
    targets = [t for t in _tensors_in_graph(self) if t.requires_grad]
    if not targets: return self
    grads = self.gradient(*targets, gradient=gradient, materialize_grads=True)
    for t, g in zip(targets, grads):
      if g.shape != t.shape: raise RuntimeError(f"grad shape must match tensor shape, {g.shape!r} != {t.shape!r}")
      t.grad = g if t.grad is None else (t.grad + g)
    return self

  # *** operators ***
  def __neg__(self) -> Tensor: return self.neg() if self.dtype != dtypes.bool else self.logical_not()
  def __add__(self, x: Any) -> Tensor: return self.add(x)
  def __sub__(self, x: Any) -> Tensor: return self.sub(x)
  def __mul__(self, x: Any) -> Tensor: return self.mul(x)
  def __pow__(self, x: Any) -> Tensor: return self.pow(x)
  def __truediv__(self, x: Any) -> Tensor: return self.div(x)
  def __matmul__(self, x: Any) -> Tensor: return self.matmul(x)
  def __floordiv__(self, x: Any) -> Tensor: return self.div(x, rounding_mode="floor")
  def __mod__(self, x: Any) -> Tensor: return self.mod(x)
  def __and__(self, x: Any) -> Tensor: return self.bitwise_and(x)
  def __or__(self, x: Any) -> Tensor: return self.bitwise_or(x)
  def __xor__(self, x: Any) -> Tensor: return self.bitwise_xor(x)
  def __lshift__(self, x: Any) -> Tensor: return self.lshift(x)
  def __rshift__(self, x: Any) -> Tensor: return self.rshift(x)
  def __invert__(self) -> Tensor: return self.bitwise_not()
  def __radd__(self, x: Any) -> Tensor: return self.add(x, True)
  def __rsub__(self, x: Any) -> Tensor: return self.sub(x, True)
  def __rmul__(self, x: Any) -> Tensor: return self.mul(x, True)
  def __rpow__(self, x: Any) -> Tensor: return self.pow(x, True)
  def __rtruediv__(self, x: Any) -> Tensor: return self.div(x, True)
  def __rmatmul__(self, x: Any) -> Tensor: return self.matmul(x, True)
  def __rfloordiv__(self, x: Any) -> Tensor: return self.div(x, True, rounding_mode="floor")
  def __rmod__(self, x: Any) -> Tensor: return self.mod(x, True)
  def __rand__(self, x: Any) -> Tensor: return self.bitwise_and(x, True)
  def __ror__(self, x: Any) -> Tensor: return self.bitwise_or(x, True)
  def __rxor__(self, x: Any) -> Tensor: return self.bitwise_xor(x, True)
  def __iadd__(self, x: Any) -> Tensor: return self.assign(self.add(x))
  def __isub__(self, x: Any) -> Tensor: return self.assign(self.sub(x))
  def __imul__(self, x: Any) -> Tensor: return self.assign(self.mul(x))
  def __ipow__(self, x: Any) -> Tensor: return self.assign(self.pow(x))
  def __itruediv__(self, x: Any) -> Tensor: return self.assign(self.div(x))
  def __imatmul__(self, x: Any) -> Tensor: return self.assign(self.matmul(x))
  def __iand__(self, x: Any) -> Tensor: return self.assign(self.bitwise_and(x))
  def __ior__(self, x: Any) -> Tensor: return self.assign(self.bitwise_or(x))
  def __ixor__(self, x: Any) -> Tensor: return self.assign(self.bitwise_xor(x))
  def __ilshift__(self, x: Any) -> Tensor: return self.assign(self.lshift(x))
  def __irshift__(self, x: Any) -> Tensor: return self.assign(self.rshift(x))

  def pow(self, x: Tensor | ConstType, reverse: bool = False) -> Tensor:
    base, exponent = self._broadcasted(x, reverse=reverse)
    if not dtypes.is_float(base.dtype) and not dtypes.is_float(exponent.dtype):  # ints and bools, like torch
      if not reverse and type(x) is int and x < 0: raise RuntimeError("Integers to negative integer powers are not allowed.")
      from tg_core.frontend.elementwise import int_pow
      return int_pow(base, exponent)
    from tg_core.frontend.elementwise import float_pow
    return float_pow(base, exponent)

def _check_shift(t: Tensor, x: Any) -> None:
  # NotImplementedError is torch's class and a RuntimeError (tinygrad's). A negative Python shift count raises ValueError like
  # tinygrad (torch gives 0); a tensor of shift counts can't be checked without running it
  if not dtypes.is_int(t.dtype): raise NotImplementedError(f"{t.dtype} is not supported for shifts: use an integer tensor")
  if isinstance(x, Tensor) and not dtypes.is_int(x.dtype): raise NotImplementedError(f"shift counts must be integers, got a {x.dtype} tensor")
  if isinstance(x, float) or not isinstance(x, (int, Tensor)): raise NotImplementedError(f"shift counts must be integers, got {x!r}")
  if isinstance(x, int) and x < 0: raise ValueError(f"negative shift count {x}")

def _split_factor(n: int) -> int:
  """The number of partial reductions for a full reduction of n elements: the largest divisor of n up to 256 (>= 16)."""
  return next((d for d in range(256, 15, -1) if n % d == 0), 1)

def _sstr(x: Any) -> str:
  """A shape (or shrink/pad arg) with its symbolic sizes written as expressions: (3, i=2)."""
  if isinstance(x, UOp): return x.render(simplify=False)
  if isinstance(x, tuple): return "(" + ", ".join(_sstr(a) for a in x) + ("," if len(x) == 1 else "") + ")"
  return repr(x)

class SymbolicShapeError(AssertionError, ValueError):
  """Data of a tensor whose shape is symbolic. An AssertionError like tinygrad's (and a ValueError)."""
def _no_symbolic_data(shape: tuple[sint, ...]) -> str:
  return f"no data if shape is symbolic, shape={_sstr(shape)}: shrink it to a concrete shape first, e.g. t[:n]"

class BroadcastError(RuntimeError, ValueError):
  """Shapes that don't broadcast. A RuntimeError like torch's and a ValueError like tinygrad's."""

def smin0(x: sint) -> sint: return x if not isinstance(x, int) else min(x, 0)

def _align_left(*shapes: tuple[sint, ...]) -> tuple[tuple[sint, ...], ...]:
  max_dim = max(len(shape) for shape in shapes)
  return tuple((1,) * (max_dim - len(shape)) + shape for shape in shapes)

def _broadcast_shape(*shapes: tuple[sint, ...]) -> tuple[sint, ...]:
  aligned = _align_left(*shapes)
  out = []
  for dims in zip(*aligned):
    nz = [d for d in dims if d != 1]
    if any(not sint_eq(d, nz[0]) for d in nz): raise BroadcastError(f"cannot broadcast shapes {shapes}: mismatch in dim sizes {dims}")
    out.append(nz[0] if nz else 1)
  return tuple(out)

def _replaced(old_sink: UOp, new_sink: UOp, u: UOp) -> UOp | None:
  for o, n in zip(old_sink.src, new_sink.src):
    if o is u and n is not u: return n
  return None

def _base_of(u: UOp) -> UOp:
  while u.op in GroupOp.Movement: u = u.src[0]
  return u

def _is_flat_contiguous(u: UOp) -> bool:
  return u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)

def _tensors_in_graph(t: Tensor) -> list[Tensor]:
  nodes = set(t.uop.toposort())
  return [x for x in list(all_tensors) if x.uop in nodes]

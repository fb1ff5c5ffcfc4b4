"""The device layer: buffers and allocators, the base classes a device plugin subclasses (Renderer, Compiler, Program,
Compiled), and the `Device` registry that maps device strings ("CPU", "CPU:1", "DISK:/tmp/x") to opened devices.

Nothing in this module knows about a particular device: devices register a factory with `Device.register`.
"""
from __future__ import annotations
import atexit
import contextlib
import dataclasses
import difflib
import functools
import hashlib
import operator
import os
import pathlib
import pickle
import sqlite3
import sys
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Generic, Protocol, Sequence, TypeVar

import numpy as np

from tg_core.dtype import DType, _to_np_storage, dtypes
from tg_core.helpers import CACHELEVEL, DEBUG, DEV, LRU, GlobalCounters
from tg_core.uop import Ops
from tg_core.uop.pattern import PatternMatcher

__all__ = ["BufferSpec", "Allocator", "LRUAllocator", "Buffer", "Renderer", "RendererCaps", "TensorCore", "RENDERER_CONTRACT", "Compiler",
           "Program", "Compiled", "Device", "DevTarget", "DeviceError", "DeviceNotFoundError", "DeviceUnavailableError",
           "DeviceAlreadyRegisteredError", "DevTargetError", "RendererNotFoundError", "ArchUnsupportedError", "InterfaceUnsupportedError",
           "did_you_mean", "canonicalize", "parse_dev", "cache_dir", "diskcache_get", "diskcache_put", "flat_mv"]

# *** errors ***

class DeviceError(Exception):
  """Base class of the device layer's errors."""

class DeviceNotFoundError(DeviceError, KeyError):
  """A device name that nothing registered. It is a KeyError, so `Device["X"]` behaves like a mapping lookup."""
  def __init__(self, message: str, name: str | None = None):
    super().__init__(message)
    self.message, self.name = message, name
  def __str__(self) -> str: return self.message  # KeyError would quote the message

class DeviceUnavailableError(DeviceError, RuntimeError):
  """A registered device whose factory failed (missing driver, no hardware, bad device string); the cause is chained."""

class DeviceAlreadyRegisteredError(DeviceError, ValueError):
  """Two registrations claimed the same device name."""

class DevTargetError(DeviceError, ValueError):
  """DEV names a renderer, arch or interface the device can't serve. The message names what it can serve."""
  def __init__(self, message: str, wanted: str, valid: Sequence[str]):
    super().__init__(message)
    self.wanted, self.valid = wanted, tuple(valid)

class RendererNotFoundError(DevTargetError):
  """DEV=DEVICE:RENDERER names a renderer the device doesn't have."""

class ArchUnsupportedError(DevTargetError):
  """DEV=DEVICE:RENDERER:arch names an arch the renderer can't target."""

class InterfaceUnsupportedError(DevTargetError):
  """DEV=iface+DEVICE names an interface the device doesn't declare."""

def did_you_mean(wanted: str, valid: Sequence[str]) -> str:
  """" (did you mean 'X'?)" for the closest valid name (case-insensitive), else ""."""
  by_upper = {v.upper(): v for v in valid}
  close = difflib.get_close_matches(wanted.upper(), list(by_upper), n=1, cutoff=0.5)
  return f" (did you mean {by_upper[close[0]]!r}?)" if close else ""

# *** buffer options ***

@dataclass(frozen=True)
class BufferSpec:
  """How a buffer is allocated. Hashable: the LRU cache keys on (size, options)."""
  image: Any = None              # an image dtype/shape for devices with texture memory (unused by core devices)
  uncached: bool = False         # device memory the CPU reads uncached
  cpu_access: bool = False       # memory the CPU can map directly
  host: bool = False             # host (pinned) memory of a device, used as a staging buffer
  nolru: bool = False            # never keep this buffer in the LRU cache once freed
  external_ptr: int | None = None  # memory owned by someone else: the allocator wraps it and never frees it

def flat_mv(mv: memoryview) -> memoryview:
  """A 1-d unsigned-byte view of a C-contiguous buffer."""
  if mv.nbytes == 0: return memoryview(bytearray(0))
  return mv if mv.ndim == 1 and mv.format == "B" else mv.cast("B", shape=(mv.nbytes,))

# *** allocators ***

OpaqueT = TypeVar("OpaqueT")

class Allocator(Generic[OpaqueT]):
  """Allocates device memory. Override `_alloc`/`_free` and either `_as_buffer` (host-visible memory: copies then come for free)
  or `_copyin`/`_copyout`. Optional: `_offset` (sub-buffers, needed for `Buffer.view`), `_transfer` (device to device copies).

  `dev` is the `Compiled` that owns the allocator; `Compiled.__init__` fills it in when it is None."""
  tracks_mem_used: ClassVar[bool] = True  # count allocations in GlobalCounters.mem_used (False for file-backed/external memory)

  def __init__(self, dev: Compiled | None = None):
    self.dev = dev
    self.default_buffer_spec = BufferSpec()

  # public entry points
  def alloc(self, size_bytes: int, options: BufferSpec | None = None) -> OpaqueT:
    size_bytes = _check_size(size_bytes, "allocation size")
    if options is not None and not isinstance(options, BufferSpec): raise TypeError(f"options must be a BufferSpec or None, got {options!r}")
    return self._alloc(size_bytes, options if options is not None else self.default_buffer_spec)
  def free(self, opaque: OpaqueT, size_bytes: int, options: BufferSpec | None = None) -> None:
    self._free(opaque, options if options is not None else self.default_buffer_spec)

  # capabilities, from which optional methods a subclass overrides
  def _overrides(self, name: str) -> bool: return getattr(type(self), name) is not getattr(Allocator, name)
  @property
  def supports_as_buffer(self) -> bool: return self._overrides("_as_buffer")
  @property
  def supports_offset(self) -> bool: return self._overrides("_offset")
  @property
  def supports_transfer(self) -> bool: return self._overrides("_transfer")

  # to override
  def _alloc(self, size: int, options: BufferSpec) -> OpaqueT: raise NotImplementedError(f"{type(self).__name__} can't allocate memory")
  def _free(self, opaque: OpaqueT, options: BufferSpec) -> None: pass
  def _copyin(self, dest: OpaqueT, src: memoryview) -> None:
    if not self.supports_as_buffer: raise NotImplementedError(f"{type(self).__name__} implements neither _copyin nor _as_buffer")
    self._as_buffer(dest)[:] = src
  def _copyout(self, dest: memoryview, src: OpaqueT) -> None:
    if not self.supports_as_buffer: raise NotImplementedError(f"{type(self).__name__} implements neither _copyout nor _as_buffer")
    dest[:] = self._as_buffer(src)
  def _as_buffer(self, src: OpaqueT) -> memoryview:
    """A zero-copy, flat byte view of host-visible memory (synchronize first if kernels may still write it)."""
    raise NotImplementedError(f"{type(self).__name__} has no host-visible memory")
  def _offset(self, buf: OpaqueT, size_bytes: int, offset_bytes: int) -> OpaqueT:
    """An opaque for `size_bytes` bytes starting `offset_bytes` into `buf`, sharing its memory."""
    raise NotImplementedError(f"{type(self).__name__} doesn't support sub-buffers")
  def _transfer(self, dest: OpaqueT, src: OpaqueT, sz: int, src_dev: Compiled, dest_dev: Compiled) -> None:
    """Copy `sz` bytes from `src` (on `src_dev`) to `dest` (on `dest_dev`), both allocated by allocators of this class."""
    raise NotImplementedError(f"{type(self).__name__} doesn't support device to device transfers")

class LRUAllocator(Allocator[OpaqueT]):
  """An allocator that keeps freed buffers, keyed by (size, options), and hands them out again.
  `LRU=0` turns the cache off; `BufferSpec(nolru=True)` and external memory are never cached."""
  def __init__(self, dev: Compiled | None = None):
    super().__init__(dev)
    self.cache: dict[tuple[int, BufferSpec | None], list[OpaqueT]] = defaultdict(list)
  def alloc(self, size_bytes: int, options: BufferSpec | None = None) -> OpaqueT:
    if len(c := self.cache.get((size_bytes, options), [])): return c.pop()
    try: return super().alloc(size_bytes, options)
    except MemoryError:
      self.free_cache()
      return super().alloc(size_bytes, options)
  def free(self, opaque: OpaqueT, size_bytes: int, options: BufferSpec | None = None) -> None:
    if LRU and (options is None or not (options.nolru or options.external_ptr is not None)): self.cache[(size_bytes, options)].append(opaque)
    else: super().free(opaque, size_bytes, options)
  def free_cache(self) -> None:
    """Really free every cached buffer."""
    for (_, options), opaques in self.cache.items():
      for opaque in opaques: super().free(opaque, 0, options)
    self.cache.clear()
  @property
  def cached_bytes(self) -> int: return sum(sz * len(v) for (sz, _), v in self.cache.items())

def _check_size(size: Any, what: str) -> int:
  if isinstance(size, bool) or not hasattr(type(size), "__index__"):
    raise TypeError(f"{what} must be a non-negative int, got {size!r} ({type(size).__name__})")
  size = operator.index(size)
  if size < 0: raise ValueError(f"{what} must be a non-negative int, got {size}")
  return size

# *** Buffer ***

class Buffer:
  """`size` elements of `dtype` on `device`. Memory is allocated on `allocate()` (or at once when `opaque`/`initial_value` is given).
  A buffer made with `base=` is a view: `size` elements starting `offset` bytes into the base's memory."""
  def __init__(self, device: str, size: int, dtype: DType, opaque: Any = None, options: BufferSpec | None = None,
               initial_value: bytes | None = None, base: Buffer | None = None, offset: int = 0):
    if not isinstance(device, str): raise TypeError(f"Buffer device must be a str, got {device!r} ({type(device).__name__})")
    if not isinstance(dtype, DType): raise TypeError(f"Buffer dtype must be a DType, got {dtype!r} ({type(dtype).__name__})")
    if dtype == dtypes.void or dtypes.is_weak(dtype): raise ValueError(f"Buffer dtype can't be {dtype}: it has no storage")
    if options is not None and not isinstance(options, BufferSpec): raise TypeError(f"Buffer options must be a BufferSpec or None, got {options!r}")
    self.device, self.size, self.dtype, self.options = canonicalize(device), _check_size(size, "Buffer size"), dtype, options
    self.offset = _check_size(offset, "Buffer offset")
    self._base: Buffer | None = None
    self._owned = False  # memory this Buffer allocated (and so frees and counts)
    self.allocated_views = 0
    if base is not None:
      if not isinstance(base, Buffer): raise TypeError(f"Buffer base must be a Buffer, got {type(base).__name__}")
      if base._base is not None: base, self.offset = base._base, base.offset + self.offset
      if base.device != self.device: raise ValueError(f"a view must be on its base's device: {self.device} != {base.device}")
      if self.offset + self.nbytes > base.nbytes:
        raise ValueError(f"view of {self.nbytes} bytes at offset {self.offset} doesn't fit in a base of {base.nbytes} bytes")
      if opaque is not None: raise ValueError("a view takes its memory from its base; don't pass opaque")
      self._base, self.options = base, base.options
    if initial_value is not None:
      if not isinstance(initial_value, (bytes, bytearray, memoryview)):
        raise TypeError(f"initial_value must be bytes, got {type(initial_value).__name__}")
      if (n := memoryview(initial_value).nbytes) != self.nbytes: raise ValueError(f"initial_value has {n} bytes, the buffer has {self.nbytes}")
    if opaque is not None or initial_value is not None: self.allocate(opaque)
    if initial_value is not None: self.copyin(memoryview(initial_value))

  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  @property
  def base(self) -> Buffer: return self._base if self._base is not None else self
  @property
  def is_view(self) -> bool: return self._base is not None
  @property
  def allocator(self) -> Allocator: return self._allocator if hasattr(self, "_allocator") else Device[self.device].allocator
  def is_allocated(self) -> bool: return hasattr(self, "_buf")
  def ensure_allocated(self) -> Buffer: return self if self.is_allocated() else self.allocate()

  def allocate(self, opaque: Any = None) -> Buffer:
    """Get memory: a sub-buffer of the base for a view, `opaque` when given (memory this buffer won't free), else from the allocator."""
    if self.is_allocated(): raise RuntimeError(f"{self!r} is already allocated")
    allocator = Device[self.device].allocator
    if self._base is not None:
      if opaque is not None: raise ValueError("a view takes its memory from its base; don't pass opaque")
      self._base.ensure_allocated()
      if not allocator.supports_offset:
        raise RuntimeError(f"device {self.device} doesn't support buffer views ({type(allocator).__name__} has no _offset)")
      self._buf = allocator._offset(self._base._buf, self.nbytes, self.offset)
      self._base.allocated_views += 1
    elif opaque is not None: self._buf = opaque
    else:
      self._buf = allocator.alloc(self.nbytes, self.options)
      self._owned = self.options is None or self.options.external_ptr is None
      if self._owned and allocator.tracks_mem_used: GlobalCounters.mem_used += self.nbytes
    self._allocator = allocator
    if DEBUG >= 7: print(f"buffer: allocate {self.nbytes} bytes on {self.device}")
    return self

  def deallocate(self) -> None:
    if not self.is_allocated(): raise RuntimeError(f"{self!r} is not allocated")
    if self.allocated_views: raise RuntimeError(f"{self!r} still has {self.allocated_views} allocated views; deallocate them first")
    if self._base is not None: self._base.allocated_views -= 1
    elif self._owned:
      if self._allocator.tracks_mem_used: GlobalCounters.mem_used -= self.nbytes
      self._allocator.free(self._buf, self.nbytes, self.options)
    self._owned = False
    del self._buf

  def __del__(self) -> None:
    if not hasattr(self, "_buf") or sys is None or sys.is_finalizing(): return
    with contextlib.suppress(Exception): self.deallocate()

  def _check_mv(self, mv: memoryview, what: str) -> memoryview:
    if not self.is_allocated(): raise RuntimeError(f"{what} on {self!r}, which is not allocated")
    mv = flat_mv(memoryview(mv))
    if mv.nbytes != self.nbytes: raise ValueError(f"{what}: size mismatch, the buffer has {self.nbytes} bytes, the host memory {mv.nbytes}")
    return mv
  def copyin(self, mv: memoryview) -> Buffer:
    """Copy host memory (anything with the buffer protocol, exactly `nbytes` long) into the buffer."""
    mv = self._check_mv(mv, "copyin")
    if mv.nbytes: self._allocator._copyin(self._buf, mv)
    return self
  def copyout(self, mv: memoryview) -> memoryview:
    """Copy the buffer into writable host memory of exactly `nbytes`; returns it as a flat byte memoryview."""
    mv = self._check_mv(mv, "copyout")
    if mv.readonly: raise ValueError("copyout needs writable host memory")
    if mv.nbytes: self._allocator._copyout(mv, self._buf)
    return mv
  def as_buffer(self, allow_zero_copy: bool = False, force_zero_copy: bool = False) -> memoryview:
    """The contents as a flat byte memoryview: a view of the device memory itself when allowed and possible, else a copy."""
    if not self.is_allocated(): raise RuntimeError(f"as_buffer on {self!r}, which is not allocated")
    if (allow_zero_copy or force_zero_copy) and self._allocator.supports_as_buffer and (self.options is None or self.options.image is None):
      return flat_mv(self._allocator._as_buffer(self._buf)) if self.nbytes else memoryview(b"")
    if force_zero_copy: raise RuntimeError(f"device {self.device} can't give a zero-copy view of its memory")
    return self.copyout(memoryview(bytearray(self.nbytes)))
  def numpy(self) -> np.ndarray:
    """A numpy copy of the contents; bfloat16 and fp8 come as their bit patterns (uint16, uint8). Vector dtypes have shape (size, count)."""
    ret = np.frombuffer(self.as_buffer(), dtype=_to_np_storage(self.dtype.scalar()))
    return ret.reshape(self.size, self.dtype.count) if self.dtype.count > 1 else ret

  def view(self, size: int, dtype: DType, offset: int) -> Buffer:
    """A buffer of `size` elements of `dtype` starting `offset` bytes into this one, sharing its memory (allocated at once when this one is)."""
    ret = Buffer(self.device, size, dtype, base=self, offset=offset)
    return ret.allocate() if self.is_allocated() else ret

  def copy_from(self, src: Buffer) -> Buffer:
    """Copy `src` (same byte size, any device) into this buffer: device to device when both allocators can, else through host memory."""
    if not isinstance(src, Buffer): raise TypeError(f"copy_from takes a Buffer, got {type(src).__name__}")
    if src.nbytes != self.nbytes: raise ValueError(f"copy_from: size mismatch, {src.nbytes} bytes into {self.nbytes}")
    self.ensure_allocated()
    if not src.is_allocated(): raise RuntimeError(f"copy_from: the source {src!r} is not allocated")
    if self.nbytes == 0: return self
    da, sa = self._allocator, src._allocator
    if type(da) is type(sa) and da.supports_transfer:
      da._transfer(self._buf, src._buf, self.nbytes, src_dev=Device[src.device], dest_dev=Device[self.device])
    else: self.copyin(src.as_buffer(allow_zero_copy=True))
    return self

  def __reduce__(self) -> tuple:
    if self._base is not None: return (Buffer, (self.device, self.size, self.dtype, None, None, None, self._base, self.offset))
    return (Buffer, (self.device, self.size, self.dtype, None, self.options, bytes(self.as_buffer()) if self.is_allocated() else None))
  def __repr__(self) -> str:
    extra = (f" offset:{self.offset}" if self._base is not None else "") + (f" {self.options}" if self.options is not None else "")
    return f"<buf real:{self.is_allocated()} device:{self.device} size:{self.size} dtype:{self.dtype}{extra}>"

# *** what a device plugin provides: Renderer (with its declared RendererCaps), Compiler, Program, Compiled ***

def _all_storage_dtypes() -> frozenset[DType]: return frozenset(dt for dt in dtypes.fields().values() if not dtypes.is_weak(dt))

@dataclass(frozen=True)
class TensorCore:
  """One matrix-multiply-accumulate instruction: D(M,N) = A(M,K) @ B(K,N) + C(M,N), executed by `threads` lanes together."""
  dims: tuple[int, int, int]  # (M, N, K)
  dtype_in: DType             # the dtype of A and B
  dtype_out: DType            # the dtype of C and D (the accumulator)
  threads: int = 32           # lanes (a warp / wave) that execute one instruction together
  def __post_init__(self) -> None:
    if len(self.dims) != 3 or not all(isinstance(d, int) and d > 0 for d in self.dims):
      raise ValueError(f"TensorCore dims must be 3 positive ints (M, N, K), got {self.dims}")
    if not isinstance(self.threads, int) or self.threads <= 0: raise ValueError(f"TensorCore threads must be a positive int, got {self.threads}")

@dataclass(frozen=True)
class RendererCaps:
  """Everything the core reads about a renderer's target: the one declared contract between codegen and a backend.
  Codegen reads these fields directly (there are no other, optional attributes); docs/backend-authors.md explains each
  field for backend authors. The record is hashable: the compile cache keys on it (see `cache_key`)."""
  # dtypes: what the target computes and stores natively. The small floats the core can emulate (float16, bfloat16, fp8;
  # codegen/dtype_emulation.py) are emulated when missing here; any other missing dtype is unsupported (tests skip it).
  native_dtypes: frozenset[DType] = field(default_factory=_all_storage_dtypes)
  # vectors: with vector_upcast, one UPCAST axis per loop nest is rendered as vector dtypes (codegen/vectorize.py) instead of
  # scalar copies; vector_width is the elements of a 32-bit dtype per SIMD register, the heuristic's upcast of elementwise kernels
  vector_upcast: bool = False
  vector_width: int = 4
  # launch: with has_grid the output loops become grid indices (SPECIAL gidx), at most len(global_max) dims of at most
  # global_max[i] each (leading loops merge into the first dim when there are more); without it a kernel is plain loops
  has_grid: bool = True
  global_max: tuple[int, ...] = (0x8FFFFFFF,) * 3
  # workgroups: LOCAL opts (lidx) only when has_local; at most local_max[i] threads per dim
  has_local: bool = True
  local_max: tuple[int, ...] = (0x8FFFFFFF,) * 3
  # bytes of memory shared by a workgroup (0: none)
  shared_max: int = 32768
  # matrix instructions the target has (empty: none)
  tensor_cores: tuple[TensorCore, ...] = ()
  # unary ops the target computes natively; codegen approximates the EXP2/LOG2/SIN missing here (codegen/transcendental.py)
  native_transcendentals: frozenset[Ops] = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL})
  # a REDUCE spanning at most this many elements (grid included) is left whole for the renderer to reduce natively
  # (the PYTHON interpreter runs it as one numpy reduction); 0: every REDUCE is lowered to a loop with a register accumulator
  native_reduce_limit: int = 0
  # whether the heuristic's optimizations apply when a kernel brings none (False: kernels run as written, unless BEAM)
  default_opts: bool = True
  # heuristic hints. big_reduce_tile: the register tile (inner, outer output axis) for big reduce kernels (>= 2^22
  # multiply-adds), for targets with many vector registers and one thread per core (CPUs: (16, 8)); None: 4x4 tiles.
  # transpose_tile: when loads are strided along the stores (a transpose), upcast an axis they are contiguous in by this
  # much so neighbouring steps share cache lines (0: off)
  big_reduce_tile: tuple[int, int] | None = None
  transpose_tile: int = 0
  # the archs the renderer can target (DEV=DEVICE:RENDERER:arch picks one, an arch not listed is an error) and the one it
  # targets now ("" when it takes no arch)
  archs: tuple[str, ...] = ()
  arch: str = ""
  # a last codegen pass: renderer-specific rewrite rules (a PatternMatcher, called with ctx=the renderer), None when unused
  extra_matcher: PatternMatcher | None = None

  def __post_init__(self) -> None:
    def bad(name: str, want: str) -> ValueError: return ValueError(f"RendererCaps.{name} must be {want}, got {getattr(self, name)!r}")
    if not all(isinstance(d, DType) for d in self.native_dtypes): raise bad("native_dtypes", "a frozenset of DType")
    if not all(isinstance(o, Ops) for o in self.native_transcendentals): raise bad("native_transcendentals", "a frozenset of Ops")
    for name in ("vector_width", "shared_max", "native_reduce_limit", "transpose_tile"):
      if not isinstance(getattr(self, name), int) or getattr(self, name) < 0: raise bad(name, "a non-negative int")
    if self.vector_width < 1: raise bad("vector_width", "at least 1")
    for name in ("global_max", "local_max"):
      if not (isinstance(v := getattr(self, name), tuple) and all(isinstance(x, int) and x > 0 for x in v)): raise bad(name, "a tuple of positive ints")
    if self.has_grid and not self.global_max: raise bad("global_max", "non-empty when has_grid")
    if self.has_local and not self.local_max: raise bad("local_max", "non-empty when has_local")
    if self.big_reduce_tile is not None and not (len(self.big_reduce_tile) == 2 and all(isinstance(x, int) and x > 1 for x in self.big_reduce_tile)):
      raise bad("big_reduce_tile", "None or two ints > 1")
    if not all(isinstance(t, TensorCore) for t in self.tensor_cores): raise bad("tensor_cores", "a tuple of TensorCore")
    if self.arch and self.arch not in self.archs: raise bad("arch", f"one of archs {self.archs}")
    if self.extra_matcher is not None and not isinstance(self.extra_matcher, PatternMatcher): raise bad("extra_matcher", "a PatternMatcher or None")

  def emulated_dtypes(self) -> frozenset[DType]:
    """The dtypes the core emulates for this target: the emulatable small floats it lacks."""
    from tg_core.codegen.dtype_emulation import EMULATABLE
    return frozenset(dt for dt in EMULATABLE if dt not in self.native_dtypes)

  def cache_key(self) -> str:
    """A string that is the same for equal records in every process (frozenset order and PatternMatcher identity don't
    enter): on-disk caches key on it. `extra_matcher` enters as present/absent; the renderer's class name keys the rest."""
    def norm(v: Any) -> Any:
      if isinstance(v, frozenset): return sorted(repr(x) for x in v)
      if isinstance(v, PatternMatcher): return "matcher"
      return v
    return repr([(f.name, norm(getattr(self, f.name))) for f in dataclasses.fields(self)])

# the attributes of a Renderer that the core and its plugins use; nothing else is read (the conformance kit's
# --tg-strict-renderer checks this: any other attribute read on the renderer object fails the run)
RENDERER_CONTRACT: frozenset[str] = frozenset({"device", "caps", "compiler", "render", "target_name", "select_arch"})

# attributes of the pre-1.1 contract, now fields of RendererCaps (or gone): a renderer that still sets one is refused
_LEGACY_ATTRS = {"supported_dtypes": "native_dtypes", "vector_upcast": "vector_upcast", "vector_width": "vector_width", "global_max": "global_max",
                 "local_max": "local_max", "has_local": "has_local", "has_shared": "shared_max (0 = none)", "shared_max": "shared_max",
                 "tensor_cores": "tensor_cores", "native_transcendentals": "native_transcendentals", "extra_matcher": "extra_matcher",
                 "vectorized_reduce_limit": "native_reduce_limit", "default_opts": "default_opts", "supports_float4": "vector_upcast",
                 "pre_matcher": "extra_matcher", "code_for_op": "(nothing: rendering is the renderer's own business)", "suffix": "(nothing)"}

class Renderer:
  """Turns a linearized kernel (a list of UOps) into source code. A subclass sets `caps` (a RendererCaps: everything the
  core reads about the target) and implements `render`. A renderer may carry its own `compiler` (e.g. PTX next to CUDA C on
  one device); it wins over the device's compiler. `device` is filled in by the Compiled that owns it."""
  device: str = ""
  caps: RendererCaps = RendererCaps()
  compiler: Compiler | None = None

  def __init_subclass__(cls, **kwargs: Any) -> None:
    super().__init_subclass__(**kwargs)
    if legacy := [k for k in _LEGACY_ATTRS if k in cls.__dict__]:
      raise TypeError(f"renderer {cls.__qualname__} sets {legacy}: since tg_core plugin API 1.1 these are fields of its RendererCaps "
                      f"(caps = RendererCaps({', '.join(f'{_LEGACY_ATTRS[k]}=...' for k in legacy)})); see docs/backend-authors.md")
    if not isinstance(cls.__dict__.get("caps", RendererCaps()), RendererCaps): raise TypeError(f"{cls.__qualname__}.caps must be a RendererCaps")

  def render(self, uops: list) -> str: raise NotImplementedError(f"{type(self).__name__} can't render kernels")
  def select_arch(self, arch: str) -> None:
    """Target `arch` (one of caps.archs, checked by the caller). A renderer whose caps depend on the arch (tensor cores,
    dtypes) overrides this to set them."""
    self.caps = dataclasses.replace(self.caps, arch=arch)
  @classmethod
  def target_name(cls) -> str:
    """The name used to pick this renderer (`DEV=CUDA:PTX`): the class name, upper case, without "RENDERER"."""
    return cls.__name__.upper().removesuffix("RENDERER") or cls.__name__.upper()
  def __repr__(self) -> str: return f"<{type(self).__name__} device={self.device!r}>"

def cache_dir() -> pathlib.Path:
  """Where on-disk caches live: $TG_CACHE_DIR, else $XDG_CACHE_HOME/tg, else ~/.cache/tg."""
  if d := os.environ.get("TG_CACHE_DIR"): return pathlib.Path(d).expanduser()
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return pathlib.Path(base) / "tg"

_db_lock = threading.Lock()
_db_conns: dict[tuple[int, str], sqlite3.Connection] = {}
_db_warned = False
_COMPILE_TABLE = "compile_v1"

def _db() -> sqlite3.Connection | None:
  """The cache database of this process (reopened after a fork or when the cache directory changes), None when unusable."""
  global _db_warned
  path = cache_dir() / "cache.db"
  key = (os.getpid(), str(path))
  if (conn := _db_conns.get(key)) is not None: return conn
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=30, check_same_thread=False)
    conn.execute(f"CREATE TABLE IF NOT EXISTS {_COMPILE_TABLE} (cachekey TEXT, src_hash TEXT, lib BLOB, PRIMARY KEY (cachekey, src_hash))")
    conn.execute("CREATE TABLE IF NOT EXISTS kv_v1 (tbl TEXT, key TEXT, val BLOB, PRIMARY KEY (tbl, key))")
    conn.commit()
  except (sqlite3.Error, OSError) as e:
    if not _db_warned and DEBUG >= 1: print(f"tg: disk cache at {path} unusable, continuing without it: {e}", file=sys.stderr)
    _db_warned = True
    return None
  _db_conns[key] = conn
  return conn

@atexit.register
def _db_close_all() -> None:
  with _db_lock:
    for conn in _db_conns.values():
      with contextlib.suppress(Exception): conn.close()
    _db_conns.clear()

def _db_run(fxn: Callable[[sqlite3.Connection], Any]) -> Any:
  with _db_lock:
    if (conn := _db()) is None: return None
    try: return fxn(conn)
    except sqlite3.Error as e:
      if DEBUG >= 1: print(f"tg: disk cache error, ignored: {e}", file=sys.stderr)
      return None

def diskcache_get(table: str, key: Any) -> Any:
  """A value stored with `diskcache_put` (pickled; keys compare by repr), or None. Off when CACHELEVEL=0."""
  if CACHELEVEL < 1: return None
  row = _db_run(lambda c: c.execute("SELECT val FROM kv_v1 WHERE tbl=? AND key=?", (table, repr(key))).fetchone())
  return pickle.loads(row[0]) if row is not None else None
def diskcache_put(table: str, key: Any, val: Any) -> Any:
  if CACHELEVEL < 1: return val
  def put(c: sqlite3.Connection) -> None:
    c.execute("INSERT OR REPLACE INTO kv_v1 (tbl, key, val) VALUES (?, ?, ?)", (table, repr(key), pickle.dumps(val))); c.commit()
  _db_run(put)
  return val

class Compiler:
  """Source code to a binary. The base class's `compile` is the identity (the source as UTF-8), enough for interpreters.
  `compile_cached` remembers results in memory and, when `cachekey` is set and CACHELEVEL>=1, on disk (see `cache_dir`).
  Put whatever changes the output (compiler version, target arch, flags) into `cachekey`."""
  def __init__(self, cachekey: str | None = None):
    self.cachekey = cachekey
    self._mem_cache: dict[str, bytes] = {}
  def compile(self, src: str) -> bytes: return src.encode()
  def compile_cached(self, src: str) -> bytes:
    if CACHELEVEL >= 1 and (lib := self._mem_cache.get(src)) is not None: return lib
    use_disk = self.cachekey is not None and CACHELEVEL >= 1
    h = hashlib.sha256(src.encode()).hexdigest()
    lib = None
    if use_disk:
      row = _db_run(lambda c: c.execute(f"SELECT lib FROM {_COMPILE_TABLE} WHERE cachekey=? AND src_hash=?", (self.cachekey, h)).fetchone())
      lib = bytes(row[0]) if row is not None else None
    if lib is None:
      lib = self.compile(src)
      if not isinstance(lib, (bytes, bytearray)): raise TypeError(f"{type(self).__name__}.compile must return bytes, got {type(lib).__name__}")
      lib = bytes(lib)
      if use_disk:
        def put(c: sqlite3.Connection) -> None:
          c.execute(f"INSERT OR REPLACE INTO {_COMPILE_TABLE} (cachekey, src_hash, lib) VALUES (?, ?, ?)", (self.cachekey, h, lib)); c.commit()
        _db_run(put)
    if CACHELEVEL >= 1: self._mem_cache[src] = lib
    return lib
  def disassemble(self, lib: bytes) -> str | None:
    """Human-readable machine code, when the compiler can produce it."""
    return None

class Program(Protocol):
  """A loaded kernel. `__call__` runs it; with `wait=True` it blocks and returns the run time in seconds."""
  def __init__(self, device: Any, name: str, lib: bytes, **kwargs: Any) -> None: ...
  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None: ...

def _no_runtime(device: str) -> type:
  class NoRuntime:
    def __init__(self, *args: Any, **kwargs: Any):
      raise RuntimeError(f"device {device} can't run kernels: it has no runtime. Copy the data to a compute device first")
  return NoRuntime

class Compiled:
  """An opened device: its allocator, renderers (the first is the default), compiler, program runtime and optional graph (batched runner).
  `renderers` may hold Renderer classes (instantiated on first use) or instances. With `compiler=None` the base (identity) Compiler is used;
  with `runtime=None` running a program raises a clear error."""
  def __init__(self, device: str, allocator: Allocator, renderers: Sequence[type[Renderer] | Renderer] | None = None,
               compiler: Compiler | None = None, runtime: type[Program] | None = None, graph: Any = None):
    if not isinstance(allocator, Allocator): raise TypeError(f"allocator must be an Allocator, got {type(allocator).__name__}")
    self.device, self.allocator, self.graph = device, allocator, graph
    if allocator.dev is None: allocator.dev = self
    self.renderers: list[type[Renderer] | Renderer] = list(renderers) if renderers else [Renderer]
    self._renderer_idx = 0
    self._renderer_instances: dict[int, Renderer] = {}
    self._compiler = compiler if compiler is not None else Compiler()
    self.can_run = runtime is not None
    self.runtime: type[Program] = runtime if runtime is not None else _no_runtime(device)

  @property
  def renderer(self) -> Renderer:
    i = self._renderer_idx
    if (r := self._renderer_instances.get(i)) is None:
      r = self.renderers[i]() if not isinstance(self.renderers[i], Renderer) else self.renderers[i]  # type: ignore[operator,assignment]
      if not isinstance(r, Renderer): raise TypeError(f"device {self.device}: renderers must be Renderer classes or instances, got {r!r}")
      if not r.device: r.device = self.device.split(":")[0]
      self._renderer_instances[i] = r
    return r
  @property
  def compiler(self) -> Compiler: return self.renderer.compiler if self.renderer.compiler is not None else self._compiler
  def renderer_names(self) -> list[str]:
    return [r.target_name() for r in self.renderers]
  def select_renderer(self, name: str | None, arch: str | None = None) -> Renderer:
    """Make the renderer called `name` (see `Renderer.target_name`; the device name prefix is optional; None: the first) the
    current one, targeting `arch` when given. A renderer or arch the device can't serve raises a DevTargetError naming what it can."""
    if name is None: self._renderer_idx = 0
    else:
      want, dev = name.upper(), self.device.split(":")[0].upper()
      names = self.renderer_names()
      cands = [i for i, n in enumerate(names) if n in (want, dev + want) or n.removeprefix(dev) == want]
      if not cands:
        raise RendererNotFoundError(f"device {self.device} has no renderer {name!r}; it has {', '.join(names)}{did_you_mean(name, names)}. "
                                    f"Pick one with DEV={dev}:<RENDERER>, or install the plugin that provides {name!r}", name, names)
      self._renderer_idx = cands[0]
    ren = self.renderer
    if arch is not None:
      if arch not in (archs := ren.caps.archs):
        what = f"it can target {', '.join(archs)}{did_you_mean(arch, archs)}" if archs else "it takes no arch (leave the :arch part out of DEV)"
        raise ArchUnsupportedError(f"renderer {ren.target_name()} of device {self.device} can't target arch {arch!r}: {what}", arch, archs)
      ren.select_arch(arch)
    return ren
  def use_renderer(self, ren: Renderer) -> Renderer:
    """Make the instance `ren` the current renderer (in place of the current one), e.g. a wrapper that checks it."""
    if not isinstance(ren, Renderer): raise TypeError(f"use_renderer takes a Renderer, got {type(ren).__name__}")
    if not ren.device: ren.device = self.device.split(":")[0]
    self.renderers[self._renderer_idx] = self._renderer_instances[self._renderer_idx] = ren
    return ren

  # features this device does not support (name -> reason); the conformance kit skips their tests with the reason
  unsupported: ClassVar[dict[str, str]] = {}
  def synchronize(self) -> None:
    """Wait for all work queued on the device."""
  def finalize(self) -> None:
    """Release device resources; called at exit for every opened device."""
  def __repr__(self) -> str: return f"<{type(self).__name__} {self.device}>"

# *** device strings and the registry ***

@functools.lru_cache(maxsize=4096)
def canonicalize(device: str) -> str:
  """"cpu" -> "CPU", "CPU:0" -> "CPU", "disk:/Path" -> "DISK:/Path" (only the name before the first ':' is upper-cased)."""
  if not isinstance(device, str): raise TypeError(f"a device must be a str, got {device!r} ({type(device).__name__})")
  name, sep, rest = device.partition(":")
  ret = name.upper() + sep + rest
  return ret[:-2] if ret.endswith(":0") else ret

@dataclass(frozen=True)
class DevTarget:
  """A parsed DEV value: `[iface[:indices]+]DEVICE[:RENDERER[:arch]]`."""
  device: str
  renderer: str | None = None
  arch: str | None = None
  iface: str | None = None
  raw: str = dataclasses.field(default="", compare=False)

def parse_dev(dev: str) -> DevTarget:
  """Parse DEV ("AMD", "AMD:LLVM:gfx1100", "MOCK+AMD", "CUDA:PTX:sm_90"). The device and renderer are upper-cased, arch is kept as is."""
  if not isinstance(dev, str) or not dev.strip(): raise ValueError(f"DEV must be a non-empty string, got {dev!r}")
  iface, _, rest = dev.strip().rpartition("+")
  parts = rest.split(":", 2)
  if not parts[0]: raise ValueError(f"DEV={dev!r} names no device; the grammar is [iface[:indices]+]DEVICE[:RENDERER[:arch]]")
  return DevTarget(device=parts[0].upper(), renderer=parts[1].upper() if len(parts) > 1 and parts[1] else None,
                   arch=parts[2] if len(parts) > 2 and parts[2] else None, iface=iface or None, raw=dev)

@dataclass
class _DeviceEntry:
  name: str
  factory: Callable[[str], Compiled]
  priority: int
  probe: Callable[[], bool] | None
  auto: bool
  origin: str | None
  order: int
  interfaces: tuple[str, ...] = ()

class _Device:
  """The registry of devices. `Device["CPU:1"]` opens (once) and returns a `Compiled`; `Device.DEFAULT` is the device used when none is named."""
  def __init__(self) -> None:
    self._entries: dict[str, _DeviceEntry] = {}
    self._opened: dict[str, Compiled] = {}
    self._lock = threading.RLock()
    self._default_override: str | None = None
    self._auto_default: str | None = None
    self._order = 0

  def register(self, name: str, factory: Callable[[str], Compiled], priority: int = 0, probe: Callable[[], bool] | None = None,
               auto: bool = True, origin: str | None = None, replace: bool = False, interfaces: Sequence[str] = ()) -> None:
    """Register device `name` ("CPU"). `factory(device_string)` opens it ("CPU:1"). When DEV is unset, `Device.DEFAULT` is the
    highest-priority `auto` device whose `probe()` returns True (no probe: always True). `origin` names who registered it.
    `interfaces` are the `iface` names DEV may put before it (`DEV=MOCK+AMD`); any other is an error."""
    if not isinstance(name, str) or not name or ":" in name or "+" in name or name != name.upper():
      raise ValueError(f"a device name must be a non-empty upper-case string without ':' or '+', got {name!r}")
    if not callable(factory): raise TypeError(f"factory for {name} must be callable, got {factory!r}")
    with self._lock:
      if (old := self._entries.get(name)) is not None and not replace:
        raise DeviceAlreadyRegisteredError(f"device {name} is registered twice: by {old.origin or 'an unnamed registrant'} "
                                           f"and by {origin or 'an unnamed registrant'}")
      self._order += 1
      self._entries[name] = _DeviceEntry(name, factory, priority, probe, auto, origin, self._order, tuple(i.upper() for i in interfaces))
      for k in [k for k in self._opened if k.split(":")[0] == name]: del self._opened[k]
      self._auto_default = None
  def unregister(self, name: str) -> None:
    with self._lock:
      self._entries.pop(name, None)
      for k in [k for k in self._opened if k.split(":")[0] == name]: del self._opened[k]
      self._auto_default = None
  def registered(self) -> list[str]:
    """Every registered device name, highest priority first."""
    _plugins_loaded()
    return [e.name for e in sorted(self._entries.values(), key=lambda e: (-e.priority, e.order))]
  def __contains__(self, device: str) -> bool:
    _plugins_loaded()
    return canonicalize(device).split(":")[0] in self._entries
  @staticmethod
  def canonicalize(device: str) -> str: return canonicalize(device)

  def _not_found(self, name: str, context: str = "") -> DeviceNotFoundError:
    known = self.registered()
    from tg_core.plugins.discovery import device_not_found
    return device_not_found(name, known, context)  # type: ignore[return-value]

  def _dev_target(self, name: str) -> DevTarget | None:
    """DEV's first entry when it names device `name`, its interface checked against the ones the device declares."""
    if not DEV.value or (tgt := parse_dev(DEV.value.split(";")[0].partition("@")[0])).device != name: return None
    if tgt.iface is not None:
      iface, valid = tgt.iface.split(":")[0].upper(), self._entries[name].interfaces
      if iface not in valid:
        what = f"it has {', '.join(valid)}{did_you_mean(iface, valid)}" if valid else "it declares none (leave the 'iface+' part out of DEV)"
        raise InterfaceUnsupportedError(f"DEV={DEV.value!r}: device {name} has no interface {iface!r}: {what}", iface, valid)
    return tgt

  def __getitem__(self, device: str) -> Compiled:
    dev = canonicalize(device)
    if (ret := self._opened.get(dev)) is not None: return ret
    _plugins_loaded()
    with self._lock:
      if (ret := self._opened.get(dev)) is not None: return ret
      name = dev.split(":")[0]
      if (entry := self._entries.get(name)) is None: raise self._not_found(name)
      try:
        ret = entry.factory(dev)
        if not isinstance(ret, Compiled): raise TypeError(f"the factory of device {name} returned {type(ret).__name__}, not a Compiled")
        if (tgt := self._dev_target(name)) is not None and (tgt.renderer is not None or tgt.arch is not None):
          try: ret.select_renderer(tgt.renderer, tgt.arch)
          except DevTargetError as e: raise type(e)(f"DEV={DEV.value!r}: {e}", e.wanted, e.valid) from None
      except DeviceError: raise
      except Exception as e:
        raise DeviceUnavailableError(f"device {dev} failed to open{f' (registered by {entry.origin})' if entry.origin else ''}: "
                                     f"{type(e).__name__}: {e}") from e
      if DEBUG >= 2: print(f"opened device {dev} from pid:{os.getpid()}")
      self._opened[dev] = ret
      return ret

  def _probe(self, e: _DeviceEntry) -> bool:
    if e.probe is None: return True
    try: return bool(e.probe())
    except Exception as ex:
      if DEBUG >= 2: print(f"device {e.name}: probe failed: {type(ex).__name__}: {ex}")
      return False
  def get_available_devices(self, include_special: bool = False) -> list[str]:
    """Registered devices whose probe passes, highest priority first. Devices registered with `auto=False` (NULL, DISK, NPY)
    are listed only with `include_special=True`."""
    return [n for n in self.registered() if (include_special or self._entries[n].auto) and self._probe(self._entries[n])]

  @property
  def target(self) -> DevTarget | None:
    """DEV parsed (device, renderer, arch, iface), or None when DEV is unset."""
    return parse_dev(DEV.value) if DEV.value else None
  @property
  def DEFAULT(self) -> str:
    """The device name (e.g. "CPU") used when none is given: `Device.DEFAULT = ...` if set, else DEV's device part, else the
    highest-priority registered device that probes OK. An explicit DEV naming an unknown device is an error, never a fallback."""
    if self._default_override is not None: return self._default_override
    _plugins_loaded()
    if DEV.value:
      name = parse_dev(DEV.value.split(";")[0].partition("@")[0]).device
      if name not in self._entries: raise self._not_found(name, f" (from DEV={DEV.value!r})")
      if "+" in DEV.value: self._dev_target(name)  # a bad interface fails here, before any tensor is made
      return name
    with self._lock:
      if self._auto_default is None:
        cands = [n for n in self.registered() if self._entries[n].auto]
        if not (ok := [n for n in cands if self._probe(self._entries[n])]):
          raise DeviceNotFoundError(f"no device available: probed {cands if cands else 'nothing (none registered)'}; "
                                    f"set DEV or install a device plugin")
        self._auto_default = ok[0]
        if DEBUG >= 1: print(f"tg: using device {ok[0]} (auto-selected from {cands}; set DEV to choose)")
      return self._auto_default
  @DEFAULT.setter
  def DEFAULT(self, device: str | None) -> None:
    if device is None: self._default_override = None; return
    name = canonicalize(device).split(":")[0]
    if name not in self._entries: raise self._not_found(name)
    self._default_override = canonicalize(device)

  def _finalize_all(self) -> None:
    for d in list(self._opened.values()):
      with contextlib.suppress(Exception): d.finalize()

Device = _Device()
atexit.register(Device._finalize_all)

def _plugins_loaded() -> None:
  """Discover plugins (the core's own devices included) on first use of the registry, not at import."""
  from tg_core.plugins.discovery import registry
  registry.ensure_loaded()

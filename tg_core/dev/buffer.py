"""Buffers and allocators: `BufferSpec` (allocation options), `Allocator` / `LRUAllocator` (device memory), `Buffer`."""
from __future__ import annotations
import contextlib
import operator
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import numpy as np

from tg_core.dtype import DType, _to_np_storage, dtypes
from tg_core.helpers import DEBUG, LRU, GlobalCounters
from tg_core.dev.target import canonicalize

if TYPE_CHECKING:
  from tg_core.dev.compiled import Compiled

def _device(name: str) -> Compiled:
  from tg_core.dev.registry import Device  # the registry opens devices (and imports this module)
  return Device[name]

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
  def allocator(self) -> Allocator: return self._allocator if hasattr(self, "_allocator") else _device(self.device).allocator
  def is_allocated(self) -> bool: return hasattr(self, "_buf")
  def ensure_allocated(self) -> Buffer: return self if self.is_allocated() else self.allocate()

  def allocate(self, opaque: Any = None) -> Buffer:
    """Get memory: a sub-buffer of the base for a view, `opaque` when given (memory this buffer won't free), else from the allocator."""
    if self.is_allocated(): raise RuntimeError(f"{self!r} is already allocated")
    allocator = _device(self.device).allocator
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
      if self._owned and allocator.tracks_mem_used:
        GlobalCounters.mem_used += self.nbytes
        GlobalCounters.mem_peak = max(GlobalCounters.mem_peak, GlobalCounters.mem_used)
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
      da._transfer(self._buf, src._buf, self.nbytes, src_dev=_device(src.device), dest_dev=_device(self.device))
    else: self.copyin(src.as_buffer(allow_zero_copy=True))
    return self

  def __reduce__(self) -> tuple:
    if self._base is not None: return (Buffer, (self.device, self.size, self.dtype, None, None, None, self._base, self.offset))
    return (Buffer, (self.device, self.size, self.dtype, None, self.options, bytes(self.as_buffer()) if self.is_allocated() else None))
  def __repr__(self) -> str:
    extra = (f" offset:{self.offset}" if self._base is not None else "") + (f" {self.options}" if self.options is not None else "")
    return f"<buf real:{self.is_allocated()} device:{self.device} size:{self.size} dtype:{self.dtype}{extra}>"

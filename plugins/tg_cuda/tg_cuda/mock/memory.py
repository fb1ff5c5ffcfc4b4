"""Device memory of the mock GPU: one growable byte arena; device pointers are `GLOBAL_BASE + offset`.
Generic addresses of the shared and local windows lie in ranges of their own, as on a GPU."""
from __future__ import annotations

import numpy as np

from tg_cuda.mock.errors import PTXRuntimeError

GLOBAL_BASE = 1 << 36         # device pointers; 0 stays an invalid (null) address
SHARED_GENERIC = 1 << 48      # generic address of shared offset 0 (cvta.shared)
LOCAL_GENERIC = 1 << 49       # generic address of local offset 0 (cvta.local)
WINDOW = 1 << 32
ALLOC_ALIGN = 256             # cuMemAlloc returns 256-byte aligned pointers


class DeviceMemory:
  """First-fit allocator over a numpy byte arena (grown by doubling). `buf` is re-read after every allocation."""
  def __init__(self, initial: int = 1 << 20, limit: int = 1 << 34):
    self.buf = np.zeros(initial, np.uint8)
    self.limit = limit
    self.allocs: dict[int, int] = {}       # offset -> reserved size (a multiple of ALLOC_ALIGN)
    self.requested: dict[int, int] = {}    # offset -> the size asked for: accesses past it are illegal
    self.free: list[tuple[int, int]] = []  # (offset, size), freed blocks
    self.top = ALLOC_ALIGN                 # never hand out offset 0
    self._bounds: tuple[np.ndarray, np.ndarray] | None = None

  def bounds(self) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the live allocations as sorted arena offsets, for the interpreter's bounds checks."""
    if self._bounds is None:
      starts = np.array(sorted(self.allocs), np.int64)
      self._bounds = (starts, starts + np.array([self.requested[s] for s in starts.tolist()], np.int64))
    return self._bounds

  def alloc(self, nbytes: int) -> int:
    ptr = self._reserve(max(ALLOC_ALIGN, (nbytes + ALLOC_ALIGN - 1) // ALLOC_ALIGN * ALLOC_ALIGN))
    self.requested[ptr - GLOBAL_BASE] = nbytes
    return ptr

  def _reserve(self, size: int) -> int:
    for i, (off, sz) in enumerate(self.free):
      if sz >= size:
        if sz == size: self.free.pop(i)
        else: self.free[i] = (off + size, sz - size)
        self.allocs[off] = size
        self._bounds = None
        self.buf[off:off + size] = 0
        return GLOBAL_BASE + off
    off = self.top
    if off + size > self.limit: raise MemoryError(f"mock device memory: {size} bytes do not fit in the {self.limit}-byte limit")
    if off + size > len(self.buf):
      new = np.zeros(max(len(self.buf) * 2, off + size), np.uint8)
      new[:len(self.buf)] = self.buf
      self.buf = new
    self.top = off + size
    self.allocs[off] = size
    self._bounds = None
    return GLOBAL_BASE + off

  def release(self, ptr: int) -> None:
    off = ptr - GLOBAL_BASE
    size = self.allocs.pop(off, None)
    if size is None: raise ValueError(f"cuMemFree of {ptr:#x}, which is not an allocation")
    del self.requested[off]
    self._bounds = None
    self.free.append((off, size))

  def offset(self, ptr: int, nbytes: int) -> int:
    """The arena offset of [ptr, ptr+nbytes), which must lie inside one allocation (host copies check this)."""
    off = ptr - GLOBAL_BASE
    starts, ends = self.bounds()
    j = int(np.searchsorted(starts, off, "right")) - 1
    if j >= 0 and off + nbytes <= int(ends[j]): return off
    raise PTXRuntimeError(f"illegal address: {nbytes} bytes at {ptr:#x} are not inside one device allocation")

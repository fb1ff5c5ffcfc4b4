"""Host memory for the CPU device: page-aligned anonymous mmaps. Kernels get raw addresses; Python sees the same memory
through zero-copy memoryviews (`_as_buffer`), and views (`_offset`) share their base's memory.

Buffers of at least `HUGE_PAGE` bytes start on a huge-page boundary and ask for transparent huge pages (Linux, THP in
`madvise` mode or `always`): a matvec that walks weight rows touches a new 4 KiB page every row, and the page walks halved
its bandwidth (1x4096x4096 fp32 matvec, measured in one run: 1.3 -> 2.9 GB/s for x@W, 9 -> 16 GB/s for x@W.T). numpy does
the same for its large arrays."""
from __future__ import annotations
import ctypes
import mmap
from typing import Any

from tg_core.device import BufferSpec, Compiled, LRUAllocator

HUGE_PAGE = 2 << 20
# the advice is Linux-only (mmap has no MADV_HUGEPAGE elsewhere): without it buffers are plain pages
_MADV_HUGEPAGE: int | None = mmap.MADV_HUGEPAGE if hasattr(mmap, "MADV_HUGEPAGE") else None
_MADV_NOHUGEPAGE: int | None = getattr(mmap, "MADV_NOHUGEPAGE", None)

class CPUBuffer:
  """The opaque of a CPU buffer: its address, size and a flat byte memoryview of it. `owner` keeps the memory alive: a view's
  (`_offset`) is its base, and its memoryview is sliced from the base's when first asked for (kernels need only the address,
  and a capture makes thousands of views)."""
  __slots__ = ("addr", "size", "_mv", "owner", "_off", "_mm", "_carr")
  def __init__(self, addr: int, size: int, mv: memoryview | None, owner: CPUBuffer | None = None, off: int = 0):
    self.addr, self.size, self._mv, self.owner, self._off = addr, size, mv, owner, off
    self._mm: mmap.mmap | None = None
    self._carr: Any = None
  @property
  def mv(self) -> memoryview:
    if self._mv is None:
      assert self.owner is not None, "a CPUBuffer without a memoryview is a view"
      self._mv = self.owner.mv[self._off:self._off + self.size]
    return self._mv
  def __repr__(self) -> str: return f"<CPUBuffer 0x{self.addr:x} {self.size} bytes>"

class CPUAllocator(LRUAllocator[CPUBuffer]):
  def _alloc(self, size: int, options: BufferSpec) -> CPUBuffer:
    if options.external_ptr is not None:
      carr = (ctypes.c_uint8 * max(size, 1)).from_address(options.external_ptr)
      ret = CPUBuffer(options.external_ptr, size, memoryview(carr).cast("B")[:size])
      ret._carr = carr
      return ret
    huge = size >= HUGE_PAGE and _MADV_HUGEPAGE is not None
    # a huge buffer maps one huge page more (address space only: untouched pages cost nothing) to start on a boundary
    try: mm = mmap.mmap(-1, max(size, 1) + (HUGE_PAGE if huge else 0), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError as e: raise MemoryError(f"CPU: can't allocate {size} bytes: {e}") from e
    off = 0
    if huge:
      base = ctypes.addressof(ctypes.c_uint8.from_buffer(mm))
      off = -base % HUGE_PAGE
      # only the buffer's whole huge pages: a huge page over its last partial one would make up to 2 MiB past its end resident
      whole = size // HUGE_PAGE * HUGE_PAGE
      try:
        mm.madvise(_MADV_HUGEPAGE, off, whole)
        if _MADV_NOHUGEPAGE is not None: mm.madvise(_MADV_NOHUGEPAGE, off + whole, len(mm) - off - whole)  # THP "always" mode
      except OSError: pass  # THP disabled ("never"): plain pages, same results
    # one byte's ctypes object holds the mapping's export (mm can't close under a kernel) and gives the address; an array type
    # per buffer size would stay in ctypes' type cache for good
    carr = ctypes.c_uint8.from_buffer(mm, off)
    ret = CPUBuffer(ctypes.addressof(carr), size, memoryview(mm)[off:off + size])
    ret._mm, ret._carr = mm, carr
    return ret

  def _free(self, opaque: CPUBuffer, options: BufferSpec) -> None:
    mm = opaque._mm
    if mm is None: return
    if opaque._mv is not None: opaque._mv.release()
    opaque._carr, opaque._mm = None, None
    try: mm.close()
    except BufferError: pass  # someone still holds a zero-copy view: the mapping goes when they let go of it

  def _as_buffer(self, src: CPUBuffer) -> memoryview: return src.mv
  def _copyin(self, dest: CPUBuffer, src: memoryview) -> None: dest.mv[:] = src
  def _copyout(self, dest: memoryview, src: CPUBuffer) -> None: dest[:] = src.mv
  def _offset(self, buf: CPUBuffer, size_bytes: int, offset_bytes: int) -> CPUBuffer:
    return CPUBuffer(buf.addr + offset_bytes, size_bytes, None, owner=buf, off=offset_bytes)
  def _transfer(self, dest: CPUBuffer, src: CPUBuffer, sz: int, src_dev: Compiled, dest_dev: Compiled) -> None:
    ctypes.memmove(dest.addr, src.addr, sz)

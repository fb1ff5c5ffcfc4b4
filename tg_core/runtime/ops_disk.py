"""DISK: a file as device memory. `DISK:/path/to/file` opens (creating or extending it as needed) and mmaps the file; a buffer is a
window of the file starting at byte 0, and views (`Buffer.view`, `_offset`) are windows further in, which is how tensors are read
out of a safetensors file without copying. DISK memory is host-visible, so copies to another device need no staging.
DISK can't run kernels: copy the data to a compute device first."""
from __future__ import annotations
import mmap
import os
from dataclasses import dataclass

from tg_core.device import Allocator, BufferSpec, Compiled

@dataclass(eq=False)
class DiskBuffer:
  """`size` bytes at `offset` of the mapping `mm` (None for an empty buffer)."""
  mm: mmap.mmap | None
  size: int
  offset: int = 0
  def view(self) -> memoryview:
    if self.mm is None or self.size == 0: return memoryview(bytearray(0))
    return memoryview(self.mm)[self.offset:self.offset + self.size]

class DiskAllocator(Allocator[DiskBuffer]):
  tracks_mem_used = False  # file-backed: not device memory
  def __init__(self, dev: DiskDevice):
    super().__init__(dev)
    self.disk = dev
  def _alloc(self, size: int, options: BufferSpec) -> DiskBuffer: return self.disk.map(size)
  def _free(self, opaque: DiskBuffer, options: BufferSpec) -> None: pass  # the mapping goes away when the last view of it does
  def _as_buffer(self, src: DiskBuffer) -> memoryview: return src.view()
  def _copyin(self, dest: DiskBuffer, src: memoryview) -> None:
    if dest.mm is not None and not self.disk.writable: raise PermissionError(f"{self.disk.device}: the file is read-only")
    dest.view()[:] = src
  def _copyout(self, dest: memoryview, src: DiskBuffer) -> None: dest[:] = src.view()
  def _offset(self, buf: DiskBuffer, size_bytes: int, offset_bytes: int) -> DiskBuffer:
    if offset_bytes + size_bytes > buf.size: raise ValueError(f"window of {size_bytes} bytes at {offset_bytes} is past the {buf.size}-byte buffer")
    return DiskBuffer(buf.mm, size_bytes, buf.offset + offset_bytes)

class DiskDevice(Compiled):
  def __init__(self, device: str):
    name, _, path = device.partition(":")
    if not path: raise ValueError(f"{device!r}: a DISK device names a file, e.g. DISK:/path/to/file")
    self.path = os.path.expanduser(path[7:] if path.startswith("file://") else path)
    self.writable = True
    super().__init__(device, DiskAllocator(self))  # base Renderer and Compiler, no runtime: running a kernel here is an error

  def map(self, size: int) -> DiskBuffer:
    """Map the first `size` bytes of the file, creating the file or growing it (with zeros) when it is shorter."""
    try: fd, self.writable = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666), True
    except PermissionError:
      fd, self.writable = os.open(self.path, os.O_RDONLY), False
    try:
      if (cur := os.fstat(fd).st_size) < size:
        if not self.writable: raise PermissionError(f"{self.device}: the read-only file has {cur} bytes, {size} were asked for")
        os.ftruncate(fd, size)
      if size == 0: return DiskBuffer(None, 0)
      return DiskBuffer(mmap.mmap(fd, size, access=mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ), size)
    finally: os.close(fd)  # the mapping keeps its own reference to the file

"""The emulator's flat device memory: allocations addressed by 64-bit pointers, accessed a whole wave of lanes at a time."""
from __future__ import annotations
import bisect
import numpy as np
from tg_amd.emu.errors import AMDEmuMemoryFault

class Memory:
  """Device allocations as numpy byte arrays. Addresses start high (above 4 GiB) so kernels' 64-bit pointer math is exercised."""
  def __init__(self, base: int = 0x7f00_0000_0000):
    self._next = base
    self._bases: list[int] = []
    self._bufs: list[np.ndarray] = []

  def alloc(self, size: int, align: int = 256) -> int:
    if size <= 0: raise ValueError(f"allocation size must be positive, got {size}")
    addr = -(-self._next // align) * align
    self._next = addr + size + 4096  # a guard gap: running off the end of one buffer faults instead of reading the next
    self._bases.append(addr); self._bufs.append(np.zeros(size, np.uint8))
    return addr

  def alloc_at(self, addr: int, size: int) -> np.ndarray:
    """An allocation at a fixed address (the mock KFD's GPU VA, chosen by the driver); returns its backing bytes, which host
    mappings of it share. Overlapping an existing allocation raises."""
    if size <= 0: raise ValueError(f"allocation size must be positive, got {size}")
    i = bisect.bisect_right(self._bases, addr)
    if (i > 0 and self._bases[i - 1] + len(self._bufs[i - 1]) > addr) or (i < len(self._bases) and self._bases[i] < addr + size):
      raise ValueError(f"allocation 0x{addr:x}+{size} overlaps an existing one")
    self._bases.insert(i, addr); self._bufs.insert(i, buf := np.zeros(size, np.uint8))
    return buf

  def alloc_bytes(self, data: bytes | np.ndarray, align: int = 256) -> int:
    raw = np.frombuffer(bytes(data), np.uint8) if isinstance(data, bytes | bytearray) else np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    addr = self.alloc(max(len(raw), 1), align)
    self.write(addr, raw)
    return addr

  def _find(self, addr: int, size: int) -> tuple[np.ndarray, int]:
    i = bisect.bisect_right(self._bases, addr) - 1
    if i >= 0:
      off = addr - self._bases[i]
      if off + size <= len(self._bufs[i]): return self._bufs[i], off
    raise AMDEmuMemoryFault(f"memory fault: {size} bytes at 0x{addr:x} are outside every allocation; check the kernel's indexing and buffer sizes")

  def write(self, addr: int, data: bytes | np.ndarray) -> None:
    raw = np.frombuffer(bytes(data), np.uint8) if isinstance(data, bytes | bytearray) else np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    buf, off = self._find(addr, len(raw))
    buf[off:off + len(raw)] = raw

  def read(self, addr: int, size: int) -> bytes:
    buf, off = self._find(addr, size)
    return buf[off:off + size].tobytes()

  def view(self, addr: int, dtype: np.dtype | type, count: int) -> np.ndarray:
    """A live numpy view of `count` elements at `addr` (writes through)."""
    n = np.dtype(dtype).itemsize * count
    buf, off = self._find(addr, n)
    return buf[off:off + n].view(dtype)

  def _lanes(self, addrs: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = int(addrs.min()), int(addrs.max())
    i = bisect.bisect_right(self._bases, lo) - 1
    if i >= 0 and hi + size - self._bases[i] <= len(self._bufs[i]):  # the common case: every lane in one allocation
      return self._bufs[i], (addrs - np.uint64(self._bases[i])).astype(np.int64)
    for a in addrs.tolist(): self._find(a, size)  # names the faulting lane's address
    raise AMDEmuMemoryFault(f"memory fault: one wave's accesses 0x{lo:x}..0x{hi + size:x} span several allocations; the emulator requires one per instruction")

  def gather(self, addrs: np.ndarray, size: int) -> np.ndarray:
    """Bytes [addr, addr+size) for each lane: uint8 array (lanes, size)."""
    buf, off = self._lanes(addrs, size)
    return buf[off[:, None] + np.arange(size)]

  def scatter(self, addrs: np.ndarray, data: np.ndarray) -> None:
    """Store data (lanes, size) uint8; lanes are written in order, so the highest lane wins a conflict (as on hardware, unspecified)."""
    buf, off = self._lanes(addrs, data.shape[1])
    buf[off[:, None] + np.arange(data.shape[1])] = data

  def free(self, addr: int) -> None:
    i = bisect.bisect_left(self._bases, addr)
    if i == len(self._bases) or self._bases[i] != addr: raise ValueError(f"free of 0x{addr:x}, which is not the start of an allocation")
    del self._bases[i], self._bufs[i]

  def map_code(self, image: bytes) -> int:
    """The address of a code object's image in this memory (mapped once), so s_getpc-relative data loads work."""
    images = self.__dict__.setdefault("_images", {})
    if image not in images: images[image] = self.alloc_bytes(image, 256)
    return images[image]

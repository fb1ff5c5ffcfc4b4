"""NPY: an existing numpy array as a read-only buffer, `Buffer("NPY", arr.size, dtype, opaque=arr)`. Reading it is zero-copy for
C-contiguous arrays. NPY can't allocate memory, be written to, or run kernels."""
from __future__ import annotations

import numpy as np

from tg_core.device import Allocator, BufferSpec, Compiled

def _bytes_of(arr: np.ndarray) -> np.ndarray:
  """The array's bytes as a flat uint8 array (a view when the array is C-contiguous, else a contiguous copy)."""
  return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)

class NpyAllocator(Allocator[np.ndarray]):
  tracks_mem_used = False  # the memory belongs to numpy
  def _alloc(self, size: int, options: BufferSpec) -> np.ndarray:
    raise RuntimeError("NPY buffers wrap an existing numpy array: create them with Buffer('NPY', arr.size, dtype, opaque=arr)")
  def _as_buffer(self, src: np.ndarray) -> memoryview: return memoryview(_bytes_of(src)).toreadonly()
  def _copyin(self, dest: np.ndarray, src: memoryview) -> None: raise PermissionError("NPY buffers are read-only")
  def _copyout(self, dest: memoryview, src: np.ndarray) -> None: dest[:] = self._as_buffer(src)
  def _offset(self, buf: np.ndarray, size_bytes: int, offset_bytes: int) -> np.ndarray:
    return _bytes_of(buf)[offset_bytes:offset_bytes + size_bytes]

class NpyDevice(Compiled):
  def __init__(self, device: str): super().__init__(device, NpyAllocator())

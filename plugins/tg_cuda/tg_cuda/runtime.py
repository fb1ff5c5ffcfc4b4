"""The CUDA runtime over the driver API: device memory (cuMemAlloc and copies), programs (cuModuleLoadData of NVRTC's PTX,
cuLaunchKernel) and events for kernel timing. Written once against libcuda's functions, called by name through the seam
`tg_cuda.mock.driver.load_driver`: the same code drives libcuda.so (DEV=CUDA) and MockCUDA, the PTX interpreter
(DEV=MOCK+CUDA). Every argument is passed as an explicit ctypes value (64-bit pointers, size_t sizes) because a CDLL
without argtypes would pass Python ints as 32-bit C ints."""
from __future__ import annotations
import ctypes
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tg_core.device import BufferSpec, Compiled, LRUAllocator

if TYPE_CHECKING:
  from tg_cuda.device import CUDADevice

class CUDAError(RuntimeError):
  """A driver call returned an error code: the message names the call and the code."""

def check(drv: Any, rc: int, what: str) -> None:
  if rc == 0: return
  name = ctypes.c_char_p()
  drv.cuGetErrorName(rc, ctypes.byref(name))
  raise CUDAError(f"CUDA: {what} failed: {name.value.decode() if name.value else 'unknown error'} ({rc})")

@dataclass
class CUDABuffer:
  """Device memory: its address, size, and the allocation it is a view of (None: it owns the memory)."""
  ptr: int
  size: int
  base: CUDABuffer | None = None

def _host_addr(mv: memoryview) -> int:
  """The address of a (possibly read-only) host buffer, without a copy."""
  return int(np.frombuffer(mv, dtype=np.uint8).ctypes.data) if mv.nbytes else 0

class CUDAAllocator(LRUAllocator[CUDABuffer]):
  def __init__(self, dev: CUDADevice):
    super().__init__(dev)
    self.cdev = dev
  def _alloc(self, size: int, options: BufferSpec) -> CUDABuffer:
    d = self.cdev
    d.make_current()
    ptr = ctypes.c_uint64()
    rc = d.drv.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(max(size, 16)))  # a gated load reads element 0 of even an empty buffer
    if rc == 2: raise MemoryError(f"{d.device}: out of device memory allocating {size} bytes")
    check(d.drv, rc, f"cuMemAlloc({size})")
    return CUDABuffer(ptr.value, size)
  def _free(self, opaque: CUDABuffer, options: BufferSpec) -> None:
    if opaque.base is None:
      self.cdev.make_current()
      check(self.cdev.drv, self.cdev.drv.cuMemFree_v2(ctypes.c_uint64(opaque.ptr)), "cuMemFree")
  def _copyin(self, dest: CUDABuffer, src: memoryview) -> None:
    src = src.cast("B") if src.format != "B" or src.ndim != 1 else src
    if not src.nbytes: return
    self.cdev.make_current()
    check(self.cdev.drv, self.cdev.drv.cuMemcpyHtoD_v2(ctypes.c_uint64(dest.ptr), ctypes.c_void_p(_host_addr(src)), ctypes.c_size_t(src.nbytes)),
          "cuMemcpyHtoD")
  def _copyout(self, dest: memoryview, src: CUDABuffer) -> None:
    if not dest.nbytes: return
    self.cdev.make_current()
    host = (ctypes.c_char * dest.nbytes).from_buffer(dest)
    check(self.cdev.drv, self.cdev.drv.cuMemcpyDtoH_v2(host, ctypes.c_uint64(src.ptr), ctypes.c_size_t(dest.nbytes)), "cuMemcpyDtoH")
  def _offset(self, buf: CUDABuffer, size_bytes: int, offset_bytes: int) -> CUDABuffer:
    return CUDABuffer(buf.ptr + offset_bytes, size_bytes, buf.base if buf.base is not None else buf)
  def _transfer(self, dest: CUDABuffer, src: CUDABuffer, sz: int, src_dev: Compiled, dest_dev: Compiled) -> None:
    sd, dd = self._cuda(src_dev), self._cuda(dest_dev)
    if sd.drv is dd.drv and sd.ctx == dd.ctx:  # one GPU (its logical instances share the primary context)
      dd.make_current()
      check(dd.drv, dd.drv.cuMemcpyDtoD_v2(ctypes.c_uint64(dest.ptr), ctypes.c_uint64(src.ptr), ctypes.c_size_t(sz)), "cuMemcpyDtoD")
      return
    tmp = memoryview(bytearray(sz))  # different GPUs: through the host
    sd.allocator._copyout(tmp, src)
    dd.allocator._copyin(dest, tmp)
  @staticmethod
  def _cuda(dev: Compiled) -> CUDADevice:
    from tg_cuda.device import CUDADevice
    if not isinstance(dev, CUDADevice): raise TypeError(f"a CUDA transfer needs CUDA devices, got {dev!r}")
    return dev

CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 5, 6, 0
_MAXNTID = re.compile(r"\.maxntid\s+(\d+)\s*,\s*(\d+)\s*,\s*(\d+)")

class CUDAProgram:
  """One kernel: the PTX module loaded into the device's context. `__call__` launches it; `wait=True` returns its time (s)."""
  def __init__(self, device: str, name: str, lib: bytes, **kwargs: Any):
    from tg_core.device import Device
    self.dev: CUDADevice = Device[device]  # type: ignore[assignment]
    self.name, self.lib = name, lib
    d = self.dev
    d.make_current()
    self.module, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
    image = lib if lib.startswith(b"\x7fELF") or lib.endswith(b"\0") else lib + b"\0"
    self._image = ctypes.c_char_p(image)  # the driver may read it until the module is loaded
    # the driver JIT-compiles the PTX for the GPU: its error log goes into the exception (e.g. a PTX ISA newer than the driver)
    log = ctypes.create_string_buffer(8192)
    opts = (ctypes.c_int * 2)(CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
    vals = (ctypes.c_void_p * 2)(ctypes.addressof(log), len(log))
    rc = d.drv.cuModuleLoadDataEx(ctypes.byref(self.module), self._image, ctypes.c_uint(2), opts, vals)
    if rc != 0 and log.value: raise CUDAError(f"CUDA: cuModuleLoadDataEx({name}) failed ({rc}): {log.value.decode(errors='replace')}")
    check(d.drv, rc, f"cuModuleLoadDataEx({name})")
    check(d.drv, d.drv.cuModuleGetFunction(ctypes.byref(self.fn), self.module, name.encode()), f"cuModuleGetFunction({name})")
    # a kernel without LOCAL dims declares its block size in __launch_bounds__ (see tg_cuda.renderer): .maxntid in PTX, the
    # function's max threads per block in a cubin
    if lib.startswith(b"\x7fELF"):
      n = ctypes.c_int()
      check(d.drv, d.drv.cuFuncGetAttribute(ctypes.byref(n), CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, self.fn), "cuFuncGetAttribute")
      self.flat_block = n.value
    else:
      text = image[:4096 * 16].decode(errors="replace")
      m = re.search(rf"\.entry\s+{re.escape(name)}\b.*?\{{", text, re.S)
      mm = _MAXNTID.search(m.group(0)) if m else None
      self.flat_block = int(mm.group(1)) if mm else 1

  def launch_dims(self, global_size: tuple[int, ...], local_size: tuple[int, ...]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    g = (tuple(global_size) + (1, 1, 1))[:3]
    loc = (tuple(local_size) + (1, 1, 1))[:3]
    if math.prod(loc) == 1:  # no LOCAL dims: gidx0 is spread over blocks of flat_block threads
      b = max(1, min(self.flat_block, g[0]))
      return (math.ceil(g[0] / b), g[1], g[2]), (b, 1, 1)
    return (g[0], g[1], g[2]), (loc[0], loc[1], loc[2])

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    d = self.dev
    d.make_current()
    args = [ctypes.c_int32(v) for v in vals] + [ctypes.c_uint64(b.ptr) for b in bufs]  # the renderer's order (tg_cuda.renderer)
    params = (ctypes.c_void_p * max(len(args), 1))(*[ctypes.addressof(a) for a in args])
    grid, block = self.launch_dims(global_size, local_size)
    if wait: check(d.drv, d.drv.cuEventRecord(d.ev_start, None), "cuEventRecord")
    check(d.drv, d.drv.cuLaunchKernel(self.fn, *[ctypes.c_uint(x) for x in grid + block], ctypes.c_uint(0), None, params, None),
          f"cuLaunchKernel({self.name}, grid={grid}, block={block})")
    if not wait: return None
    check(d.drv, d.drv.cuEventRecord(d.ev_end, None), "cuEventRecord")
    check(d.drv, d.drv.cuEventSynchronize(d.ev_end), "cuEventSynchronize")
    ms = ctypes.c_float()
    check(d.drv, d.drv.cuEventElapsedTime(ctypes.byref(ms), d.ev_start, d.ev_end), "cuEventElapsedTime")
    return ms.value / 1e3

  def __del__(self) -> None:
    try:
      if self.module.value: self.dev.drv.cuModuleUnload(self.module)
    except Exception: pass

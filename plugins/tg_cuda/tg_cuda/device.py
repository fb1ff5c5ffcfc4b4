"""The CUDA device: NVIDIA GPUs through the driver API (libcuda.so), or with DEV=MOCK+CUDA the PTX interpreter behind
MockCUDA (tg_cuda.mock). Both run the same runtime code (tg_cuda.runtime); only the driver object differs."""
from __future__ import annotations
import ctypes
import functools
from typing import Any

from tg_core.device import Compiled, Device, DeviceUnavailableError
from tg_cuda.mock.driver import MockCUDA, load_driver
from tg_cuda.renderer import ARCHS, CUDARenderer
from tg_cuda.renderer_ptx import PTXRenderer
from tg_cuda.runtime import CUDAAllocator, CUDAProgram, check

MOCK_ARCH = (8, 0)  # the mock GPU's compute capability: sm_80, the oldest arch with everything the renderers emit

@functools.cache
def driver(iface: str) -> Any:
  """One driver per interface and process (as libcuda is): "" -> libcuda.so.1, "MOCK" -> a MockCUDA (sm_80), initialized."""
  drv = MockCUDA(arch=MOCK_ARCH) if iface == "MOCK" else load_driver(iface)
  check(drv, drv.cuInit(0), "cuInit")
  return drv

def interface() -> str:
  """The interface DEV names for CUDA ("MOCK" for DEV=MOCK+CUDA), "" for the real driver."""
  tgt = Device.target
  return tgt.iface.split(":")[0].upper() if tgt is not None and tgt.device == "CUDA" and tgt.iface else ""

def probe() -> bool:
  """Cheap: is the NVIDIA driver library loadable (no GPU is opened)."""
  try: ctypes.CDLL("libcuda.so.1")
  except OSError: return False
  return True

class CUDADevice(Compiled):
  """CUDA, CUDA:1, ...: GPU n (modulo the GPUs present: CUDA:1 on a one-GPU machine is a second logical device on the same
  GPU, sharing its primary context, as CPU:1 is the same host)."""
  MOCK_UNSUPPORTED = {"large_buffers": "MOCK+CUDA keeps device memory in host RAM and interprets kernels: a 1 GiB kernel is too slow"}

  def __init__(self, device: str):
    self.iface = interface()
    try: self.drv = driver(self.iface)
    except DeviceUnavailableError as e:
      raise DeviceUnavailableError(f"{device}: libcuda.so.1, the NVIDIA driver, cannot be loaded ({e.__cause__ or e}). Install the NVIDIA driver, "
                                   f"or run without a GPU: DEV=MOCK+CUDA (the PTX interpreter) or DEV=NULL:CUDA:sm_90 (compile only)") from e
    self.unsupported = dict(self.MOCK_UNSUPPORTED) if self.iface == "MOCK" else {}  # type: ignore[misc]
    count = ctypes.c_int()
    check(self.drv, self.drv.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    if count.value < 1: raise DeviceUnavailableError(f"{device}: the CUDA driver reports no GPU")
    ordinal = int(device.split(":")[1]) if ":" in device else 0
    self.cu_device = ctypes.c_int()
    check(self.drv, self.drv.cuDeviceGet(ctypes.byref(self.cu_device), ordinal % count.value), "cuDeviceGet")
    self.ctx = ctypes.c_void_p()
    check(self.drv, self.drv.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), self.cu_device), "cuDevicePrimaryCtxRetain")
    self.ctx = self.ctx.value
    major, minor = ctypes.c_int(), ctypes.c_int()
    check(self.drv, self.drv.cuDeviceComputeCapability(ctypes.byref(major), ctypes.byref(minor), self.cu_device), "cuDeviceComputeCapability")
    self.arch = f"sm_{major.value}{minor.value}"
    self.make_current()
    self.ev_start, self.ev_end = ctypes.c_void_p(), ctypes.c_void_p()
    for ev in (self.ev_start, self.ev_end): check(self.drv, self.drv.cuEventCreate(ctypes.byref(ev), 0), "cuEventCreate")
    ren = CUDARenderer(cubin=self.iface != "MOCK")  # the interpreter runs PTX; a GPU gets a cubin made for it
    if self.arch not in ARCHS: raise DeviceUnavailableError(f"{device}: GPU arch {self.arch} is not one tg_cuda targets ({', '.join(ARCHS)})")
    ren.select_arch(self.arch)
    ptx = PTXRenderer(check=False)  # DEV=CUDA:PTX: the driver JIT-compiles the renderer's PTX (MOCK+CUDA: the interpreter runs it)
    ptx.select_arch(self.arch)
    super().__init__(device, CUDAAllocator(self), [ren, ptx], None, CUDAProgram)

  def make_current(self) -> None: check(self.drv, self.drv.cuCtxSetCurrent(ctypes.c_void_p(self.ctx)), "cuCtxSetCurrent")
  def synchronize(self) -> None:
    self.make_current()
    check(self.drv, self.drv.cuCtxSynchronize(), "cuCtxSynchronize")

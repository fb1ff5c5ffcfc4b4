"""The manifest of tg-cuda: imports only tg_core.plugins. The device (ctypes, the driver) loads when CUDA is first opened."""
from tg_core.plugins import DeviceSpec, RendererSpec, hookimpl

tg_api = (1, 1)

@hookimpl
def tg_devices() -> list[DeviceSpec]:
  return [DeviceSpec("CUDA", "tg_cuda.device:CUDADevice", priority=20, interfaces=("MOCK",), probe="tg_cuda.device:probe",
                     description="NVIDIA GPUs: CUDA C via NVRTC, the driver API (libcuda.so); CUDA:PTX: PTX rendered directly; MOCK+CUDA: the PTX interpreter")]

@hookimpl
def tg_renderers() -> list[RendererSpec]:
  # NULL:CUDA:sm_XX renders and compiles every kernel for that arch without a GPU
  return [RendererSpec("CUDA", ("NULL",), "tg_cuda.renderer:CUDARenderer", description="CUDA C compiled to PTX by NVRTC"),
          RendererSpec("PTX", ("NULL",), "tg_cuda.renderer_ptx:PTXRenderer", description="PTX rendered directly, checked by ptxas")]

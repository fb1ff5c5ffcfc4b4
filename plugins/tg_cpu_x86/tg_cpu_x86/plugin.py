"""The manifest of tg-cpu-x86: imports only tg_core.plugins. The device (llvmlite, ctypes) loads when CPU is first opened."""
from tg_core.plugins import DeviceSpec, RendererSpec, hookimpl

tg_api = (1, 2)

@hookimpl
def tg_devices() -> list[DeviceSpec]:
  return [DeviceSpec("CPU", "tg_cpu_x86.device:CPUDevice", priority=10, description="host CPU: LLVM IR via llvmlite, multi-core")]

@hookimpl
def tg_renderers() -> list[RendererSpec]:
  return [RendererSpec("LLVM", ("CPU",), "tg_cpu_x86.renderer:LLVMRenderer", description="LLVM IR compiled in-process by llvmlite")]

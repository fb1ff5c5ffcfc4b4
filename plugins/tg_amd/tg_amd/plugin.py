"""The manifest of tg-amd: imports only tg_core.plugins. The device (the KFD driver, llvmlite) loads when AMD is first opened."""
from tg_core.plugins import DeviceSpec, RendererSpec, hookimpl

tg_api = (1, 2)

@hookimpl
def tg_devices() -> list[DeviceSpec]:
  return [DeviceSpec("AMD", "tg_amd.device:AMDDevice", priority=20, interfaces=("MOCKKFD",), probe="tg_amd.device:probe",
                     description="AMD GPUs: AMDGPU LLVM IR via llvmlite, the KFD driver (/dev/kfd); MOCKKFD+AMD: the mock KFD and ISA emulator")]

@hookimpl
def tg_renderers() -> list[RendererSpec]:
  # NULL:LLVM:gfxNNNN renders and compiles every kernel for that arch without a GPU
  return [RendererSpec("LLVM", ("NULL",), "tg_amd.renderer:AMDGPURenderer", description="AMDGPU LLVM IR compiled to a code object by llvmlite")]

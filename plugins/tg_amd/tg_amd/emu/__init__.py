"""An emulator that executes real AMDGPU code objects (gfx11 / RDNA3, wave32) on numpy: the mock KFD's compute engine."""
from tg_amd.emu.errors import AMDCodeObjectError, AMDEmuError, AMDEmuMemoryFault, AMDEmuUnsupportedError
from tg_amd.emu.elf import CodeObject, KernelDescriptor, KernelInfo, read_code_object
from tg_amd.emu.memory import Memory
from tg_amd.emu.dispatch import build_kernargs, run_kernel

__all__ = ["AMDCodeObjectError", "AMDEmuError", "AMDEmuMemoryFault", "AMDEmuUnsupportedError", "CodeObject", "KernelDescriptor", "KernelInfo",
           "read_code_object", "Memory", "build_kernargs", "run_kernel"]

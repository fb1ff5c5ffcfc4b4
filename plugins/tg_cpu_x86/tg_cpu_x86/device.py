"""The CPU device: host memory, the LLVM IR renderer, llvmlite's in-process compiler and a multi-core runtime."""
from __future__ import annotations
import functools

from tg_core.device import Compiled
from tg_cpu_x86.allocator import CPUAllocator
from tg_cpu_x86.compiler import LLVMCompiler
from tg_cpu_x86.renderer import LLVMRenderer
from tg_cpu_x86.runtime import CPUProgram

@functools.cache
def _compiler() -> LLVMCompiler: return LLVMCompiler()

class CPUDevice(Compiled):
  """CPU, CPU:1, ...: every instance is the same host; different instances are separate devices to the scheduler."""
  def __init__(self, device: str):
    super().__init__(device, CPUAllocator(), [LLVMRenderer], _compiler(), CPUProgram)

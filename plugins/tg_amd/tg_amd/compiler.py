"""AMDGPU LLVM IR -> an ELF code object (bytes), in process with llvmlite's LLVM (it has the AMDGPU target: no ROCm, no
system LLVM). The object is relocatable (ET_REL, what llvmlite emits); `tg_amd.kfd.driver.AMDProgram` and the emulator lay
out its sections and apply its relocations, so no linker is needed. `cachekey` names the LLVM version, the arch and the
optimization level, so `Compiler.compile_cached` (tg_core's on-disk cache) never hands an object built for another target."""
from __future__ import annotations
import functools
import threading
from typing import Any

import llvmlite
import llvmlite.binding as llvm

from tg_core.device import Compiler
from tg_core.helpers import getenv
from tg_amd.renderer import TRIPLE

_lock = threading.Lock()

class AMDCompileError(RuntimeError):
  """LLVM rejected a kernel's IR: the message has LLVM's error and the arch."""

@functools.cache
def _init_llvm() -> None:
  llvm.initialize_all_targets()
  llvm.initialize_all_asmprinters()

@functools.cache
def target_machine(arch: str, opt: int) -> Any:
  _init_llvm()
  return llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=arch, features="", opt=opt, reloc="pic", codemodel="default")

class AMDCompiler(Compiler):
  """IR -> code object for `arch` (gfx1100, gfx942, ...) at O`opt` (TG_AMD_OPT, default 3)."""
  def __init__(self, arch: str, opt: int | None = None):
    self.arch, self.opt = arch, int(getenv("TG_AMD_OPT", 3)) if opt is None else opt
    llvm_ver = ".".join(map(str, llvm.llvm_version_info))
    super().__init__(cachekey=f"tg_amd-llvm{llvm_ver}-llvmlite{llvmlite.__version__}-{TRIPLE}-{arch}-O{self.opt}")

  def optimize(self, src: str) -> Any:
    tm = target_machine(self.arch, self.opt)
    try:
      mod = llvm.parse_assembly(src)
      mod.verify()
    except RuntimeError as e: raise AMDCompileError(f"AMD {self.arch}: LLVM rejected the kernel's IR: {e}") from e
    pto = llvm.create_pipeline_tuning_options(speed_level=self.opt)
    pb = llvm.create_pass_builder(tm, pto)
    if self.opt > 0: pb.getModulePassManager().run(mod, pb)
    else:
      mpm = llvm.create_new_module_pass_manager()
      mpm.add_always_inliner_pass()
      mpm.run(mod, pb)
    return mod

  def compile(self, src: str) -> bytes:
    with _lock: return bytes(target_machine(self.arch, self.opt).emit_object(self.optimize(src)))

  def to_asm(self, src: str) -> str:
    with _lock: return str(target_machine(self.arch, self.opt).emit_assembly(self.optimize(src)))

  def disassemble(self, lib: bytes) -> str | None:
    try:
      import subprocess
      import tempfile
      with tempfile.NamedTemporaryFile(suffix=".o") as f:
        f.write(lib); f.flush()  # noqa: E702
        return subprocess.run(["llvm-objdump-19", "-d", f"--mcpu={self.arch}", f.name], capture_output=True, text=True, check=True).stdout
    except Exception: return None

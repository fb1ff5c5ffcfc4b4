"""The AMDGPU renderer: tg_core's LLVM IR renderer (tg_core.renderer.llvmir) with the amdgcn conventions. This module only
writes text; the compiler (tg_amd.compiler) turns it into a code object with llvmlite.

- calling convention `amdgpu_kernel`: one `ptr addrspace(1)` per buffer slot (unused slots too: the runtime passes every
  buffer by slot), then the variables as i32 sorted by name. The kernarg layout is read back from the code object's
  metadata by `tg_amd.kfd.driver.AMDProgram`.
- address spaces: global memory 1, LDS (workgroup-shared BUFFERs) 3, registers (allocas) 5.
- ids: `llvm.amdgcn.workgroup.id.*` / `llvm.amdgcn.workitem.id.*`. A kernel without LOCAL dims runs gidx0 in workgroups
  of FLAT_BLOCK work-items (gidx0 = workgroup.id.x * FLAT_BLOCK + workitem.id.x, past the end returns), as CUDA's.
- barrier: a workgroup release fence, `s_barrier`, an acquire fence (so LDS writes before it are seen after it).
- wave size: wave32 on gfx10+ (RDNA), wave64 on gfx9 (GCN/CDNA: gfx90a, gfx942, gfx950): LLVM's default for the arch."""
from __future__ import annotations
import dataclasses
import math
import re
from typing import TYPE_CHECKING

from tg_core.device import RendererCaps
from tg_core.dtype import AddrSpace, dtypes
from tg_core.renderer.llvmir import _INT_BITS, LLVMIRRenderer, LLVMKernelWriter, ltype
from tg_core.uop import Ops
from tg_core.uop.ops import UOp

if TYPE_CHECKING:
  from tg_core.dev.compiled import Compiler

FLAT_BLOCK = 256  # work-items per workgroup of a kernel without LOCAL dims
MAX_BLOCK = 1024  # the most work-items in a workgroup on every arch here
# the archs llvmlite's LLVM targets that run HSA compute kernels (compile-only for all; the emulator runs gfx11 and gfx942)
ARCHS = ("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1200", "gfx1201",  # RDNA3, RDNA3.5, RDNA4: wave32
         "gfx1030", "gfx1031", "gfx1032",                                                         # RDNA2: wave32
         "gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950")                              # GCN5, CDNA1-4: wave64
DATALAYOUT = ("e-m:e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32-p8:128:128:128:48-p9:192:256:256:32-"
              "i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9")
TRIPLE = "amdgcn-amd-amdhsa"

def wave_size(arch: str) -> int:
  """Lanes per wave: 64 on gfx9 (GCN, CDNA), 32 on gfx10+ (RDNA)."""
  if not re.fullmatch(r"gfx[0-9a-f]+", arch): raise ValueError(f"{arch!r} is not an AMDGPU arch name (gfxNNNN)")
  return 64 if arch.startswith("gfx9") else 32

def kernel_symbol(name: str) -> str:
  """The code object's symbol for a kernel: its name made a plain identifier (the runtime looks it up by this)."""
  return re.sub(r"[^A-Za-z0-9_]", "_", name) or "kernel"

class _AMDKernelWriter(LLVMKernelWriter):
  addrspaces = {AddrSpace.GLOBAL: 1, AddrSpace.LOCAL: 3, AddrSpace.REG: 5}

  def __init__(self, renderer: LLVMIRRenderer, uops: list[UOp]):
    super().__init__(renderer, uops)
    lidx = [u for u in uops if u.op is Ops.SPECIAL and u.arg.startswith("lidx")]
    self.has_local = bool(lidx)
    self.block = math.prod(int(u.src[0].arg) for u in lidx) if lidx else FLAT_BLOCK
    if self.block > MAX_BLOCK: raise ValueError(f"kernel {self.name}: a workgroup of {self.block} work-items; AMDGPU allows at most {MAX_BLOCK}")
    self.attributes = (f'attributes #0 = {{ nounwind "amdgpu-flat-work-group-size"="1,{self.block}" }}', "attributes #1 = { alwaysinline nounwind }")

  def special(self, u: UOp) -> str:
    dim, t = int(u.arg[-1]), ltype(u.dtype)
    xyz = "xyz"[dim]
    if u.arg.startswith("lidx"): v = self.intrinsic(f"llvm.amdgcn.workitem.id.{xyz}", "i32", [])
    elif not self.has_local and dim == 0:
      wg, wi = self.intrinsic("llvm.amdgcn.workgroup.id.x", "i32", []), self.intrinsic("llvm.amdgcn.workitem.id.x", "i32", [])
      v = self.emit(f"add nuw i32 {self.emit(f'mul nuw i32 {wg}, {FLAT_BLOCK}')}, {wi}")
    else: v = self.intrinsic(f"llvm.amdgcn.workgroup.id.{xyz}", "i32", [])
    if t != "i32": v = self.emit(f"zext i32 {v} to {t}")
    if not self.has_local and u.arg == "gidx0":  # the last workgroup runs past the end: those work-items return
      inb, run, done = self.emit(f"icmp ult {t} {v}, {self.r[u.src[0]]}"), self.newlabel("inb"), self.newlabel("oob")
      self.stmt(f"br i1 {inb}, label %{run}, label %{done}")
      self.label(done)
      self.stmt("ret void")
      self.label(run)
    return v

  def barrier(self) -> None:
    self.decls.add("declare void @llvm.amdgcn.s.barrier()")
    self.stmt('fence syncscope("workgroup") release')
    self.stmt("call void @llvm.amdgcn.s.barrier()")
    self.stmt('fence syncscope("workgroup") acquire')

  def module(self, body: list[str], params: list[tuple[int, UOp]], nvars: int) -> list[str]:
    slots = dict(params)
    args = [f"ptr addrspace(1) noalias %buf{s}" if s in slots else f"ptr addrspace(1) %unused{s}" for s in range(max(slots) + 1 if slots else 0)]
    args += [f"i32 %var{i}" for i in range(nvars)]
    return [f"; tg kernel {self.name}", f'target datalayout = "{DATALAYOUT}"', f'target triple = "{TRIPLE}"', "",
            f"define amdgpu_kernel void @{kernel_symbol(self.name)}({', '.join(args)}) #0 {{", *body, "}"]

class AMDGPURenderer(LLVMIRRenderer):
  """LLVM IR for AMDGPU (`DEV=AMD:LLVM:gfxNNNN`); `select_arch` picks the target and its compiler."""
  device = "AMD"
  writer = _AMDKernelWriter
  # fp8 is emulated by the core; EXP2/LOG2/SIN come from the core's approximations (the hardware's v_exp/v_log/v_sin are
  # approximate); SQRT and RECIPROCAL are correctly rounded (LLVM expands them without fast-math flags). Upcast axes stay
  # scalar (no LLVM vectors): a GPU's parallelism is its lanes.
  caps = RendererCaps(native_dtypes=frozenset({dtypes.bool, *_INT_BITS, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64}),
                      vector_upcast=False, has_grid=True, global_max=(0x7FFFFFFF, 65535, 65535), has_local=True, local_max=(MAX_BLOCK, MAX_BLOCK, 64),
                      shared_max=65536, native_transcendentals=frozenset({Ops.SQRT, Ops.RECIPROCAL}), archs=ARCHS, arch="gfx1100")

  def __init__(self, arch: str = "gfx1100"):
    self.compiler: Compiler | None = None
    self.select_arch(arch)

  @classmethod
  def target_name(cls) -> str: return "LLVM"

  def select_arch(self, arch: str) -> None:
    from tg_amd.compiler import AMDCompiler  # llvmlite loads only when a kernel is compiled
    self.caps = dataclasses.replace(self.caps, arch=arch)
    self.compiler = AMDCompiler(arch)

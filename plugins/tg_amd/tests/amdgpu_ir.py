"""Test helpers: compile hand-written LLVM IR to AMDGPU code objects with llvmlite, and write tinygrad-style kernels."""
from __future__ import annotations
import functools
import llvmlite.binding as llvm

@functools.cache
def _target_machine(arch: str) -> llvm.TargetMachine:
  llvm.initialize_all_targets(); llvm.initialize_all_asmprinters()
  return llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(cpu=arch, features="", opt=2, reloc="pic", codemodel="default")

def compile_ir(ir: str, arch: str = "gfx1100") -> bytes:
  """An ELF relocatable code object (ET_REL): what llvmlite emits in process; the emulator loads it without a linker."""
  mod = llvm.parse_assembly('target triple = "amdgcn-amd-amdhsa"\n' + ir)
  mod.verify()
  return _target_machine(arch).emit_object(mod)

def assembly(ir: str, arch: str = "gfx1100") -> str:
  return _target_machine(arch).emit_assembly(llvm.parse_assembly('target triple = "amdgcn-amd-amdhsa"\n' + ir))

DECLS = """
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare void @llvm.amdgcn.s.barrier()
"""

def elementwise(name: str, in_tys: list[str], out_ty: str, body: str, block: int = 64) -> str:
  """out[i] = f(in0[i], in1[i], ...) with i = workgroup.id.x * block + workitem.id.x; `body` computes %r from %x0, %x1..."""
  params = ", ".join(["ptr addrspace(1) noalias %out"] + [f"ptr addrspace(1) noalias %in{j}" for j in range(len(in_tys))])
  loads = "\n".join(f"  %p{j} = getelementptr {t}, ptr addrspace(1) %in{j}, i32 %i\n  %x{j} = load {t}, ptr addrspace(1) %p{j}"
                    for j, t in enumerate(in_tys))
  return f"""{DECLS}
define amdgpu_kernel void @{name}({params}) {{
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %gid = call i32 @llvm.amdgcn.workgroup.id.x()
  %g = mul i32 %gid, {block}
  %i = add i32 %g, %tid
{loads}
{body}
  %po = getelementptr {out_ty}, ptr addrspace(1) %out, i32 %i
  store {out_ty} %r, ptr addrspace(1) %po
  ret void
}}
"""

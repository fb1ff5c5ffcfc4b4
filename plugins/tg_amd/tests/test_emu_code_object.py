"""The code-object reader and the emulator's refusals: metadata, descriptors, linked objects, bad input, unknown instructions."""
from __future__ import annotations
import shutil
import struct
import subprocess
import numpy as np
import pytest
from amdgpu_ir import compile_ir, elementwise
from tg_amd.emu import AMDCodeObjectError, AMDEmuUnsupportedError, Memory, read_code_object, run_kernel
from tg_amd.emu.msgpack import unpackb

ADD = elementwise("add", ["float", "float"], "float", "  %r = fadd float %x0, %x1")

def test_descriptor_and_metadata():
  co = read_code_object(compile_ir(ADD))
  assert co.arch == "gfx1100"
  k = co.kernel("add")
  assert k.wavefront_size == 32 and k.descriptor.wavefront_size32
  explicit = [(a[".name"], a[".offset"], a[".size"], a[".value_kind"]) for a in k.args if not a[".value_kind"].startswith("hidden_")]
  assert explicit == [("out", 0, 8, "global_buffer"), ("in0", 8, 8, "global_buffer"), ("in1", 16, 8, "global_buffer")]
  assert k.descriptor.kernarg_size == k.metadata[".kernarg_segment_size"] >= 24
  assert ("kernarg_segment_ptr", 2) in k.descriptor.user_sgprs
  assert k.descriptor.workgroup_id_enabled[0] and k.descriptor.float_denorm_mode_32 == 3
  assert co.image[k.entry:k.entry + 4] != b"\0\0\0\0" and k.code_size > 0

def test_lds_size_in_descriptor():
  from test_emu_kernels import LDS_REDUCE
  k = read_code_object(compile_ir(LDS_REDUCE)).kernel("reduce")
  assert k.descriptor.group_segment_fixed_size == 256 * 4 == k.metadata[".group_segment_fixed_size"]

def test_msgpack_reader():
  # hand-encoded: {"a": [1, -1, 300, 1.5, True, None], "bb": "x" * 40, "c": {-40: b"\x01\x02"}}
  doc = (b"\x83\xa1a\x96\x01\xff\xcd\x01\x2c\xcb" + struct.pack(">d", 1.5) + b"\xc3\xc0" + b"\xa2bb\xd9\x28" + b"x" * 40 +
         b"\xa1c\x81\xd0\xd8\xc4\x02\x01\x02")
  assert unpackb(doc) == {"a": [1, -1, 300, 1.5, True, None], "bb": "x" * 40, "c": {-40: b"\x01\x02"}}
  with pytest.raises(AMDCodeObjectError, match="truncated"): unpackb(doc[:-3])

@pytest.mark.parametrize("data,match", [(b"not an elf at all", "bad magic"), (b"\x7fELF\x01\x01" + b"\0" * 60, "ELF64 little endian")])
def test_bad_code_object(data, match):
  with pytest.raises(AMDCodeObjectError, match=match): read_code_object(data)

def test_x86_object_is_refused():
  import llvmlite.binding as llvm
  llvm.initialize_native_target(); llvm.initialize_native_asmprinter()
  tm = llvm.Target.from_default_triple().create_target_machine()
  obj = tm.emit_object(llvm.parse_assembly("define void @f() { ret void }"))
  with pytest.raises(AMDCodeObjectError, match="EM_AMDGPU"): read_code_object(obj)

def test_unknown_kernel_name():
  with pytest.raises(AMDCodeObjectError, match="no kernel 'nope'.*add"): read_code_object(compile_ir(ADD)).kernel("nope")

@pytest.mark.skipif(shutil.which("ld.lld-19") is None, reason="ld.lld-19 is not installed (Debian package lld-19)")
def test_linked_shared_object_runs_like_the_relocatable(tmp_path):
  (tmp_path / "k.o").write_bytes(compile_ir(ADD))
  subprocess.run(["ld.lld-19", "-shared", str(tmp_path / "k.o"), "-o", str(tmp_path / "k.so")], check=True)
  so = (tmp_path / "k.so").read_bytes()
  assert struct.unpack_from("<H", so, 16)[0] == 3  # ET_DYN
  a, b = np.arange(64, dtype=np.float32), np.full(64, 0.25, np.float32)
  m = Memory(); pa, pb, po = m.alloc_bytes(a), m.alloc_bytes(b), m.alloc(256)
  run_kernel(so, "add", struct.pack("<QQQ", po, pa, pb), (1, 1, 1), (64, 1, 1), m)
  np.testing.assert_array_equal(m.view(po, np.float32, 64), a + b)

ATOMIC = """declare i32 @llvm.amdgcn.workitem.id.x()
define amdgpu_kernel void @atom(ptr addrspace(1) %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  %old = atomicrmw add ptr addrspace(1) %p, i32 5 seq_cst
  ret void
}"""

@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_global_atomics(arch):
  # every lane adds 5 to its own slot and 1 to slot 0 (32 lanes on one address), returning the old values; then cmpxchg and max
  ir = """declare i32 @llvm.amdgcn.workitem.id.x()
define amdgpu_kernel void @atom(ptr addrspace(1) %out, ptr addrspace(1) %old) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  %a = atomicrmw add ptr addrspace(1) %p, i32 5 monotonic
  %z = atomicrmw add ptr addrspace(1) %out, i32 1 monotonic
  %q = getelementptr i32, ptr addrspace(1) %old, i32 %tid
  store i32 %a, ptr addrspace(1) %q
  %c = cmpxchg ptr addrspace(1) %p, i32 105, i32 -9 monotonic monotonic
  %m = atomicrmw max ptr addrspace(1) %p, i32 %tid monotonic
  ret void
}"""
  m = Memory(); init = np.arange(32, dtype=np.int32) * 10 + 100
  po, pold = m.alloc_bytes(init), m.alloc(128)
  run_kernel(compile_ir(ir, arch), "atom", struct.pack("<QQ", po, pold), (1, 1, 1), (32, 1, 1), m)
  after_add = init + 5; after_add[0] += 32
  np.testing.assert_array_equal(m.view(pold, np.int32, 32)[1:], init[1:])  # lane 0's old value depends on the order of the two adds
  want = np.where(after_add == 105, -9, after_add)
  np.testing.assert_array_equal(m.view(po, np.int32, 32), np.maximum(want, np.arange(32)))

def test_unsupported_instruction_names_mnemonic_and_encoding():
  # reading a hardware register (s_getreg_b32, HW_REG_MODE) has no emulation: decoded, not executed; the error names it and its
  # encoding, and nothing is written
  ir = """declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.s.getreg(i32)
define amdgpu_kernel void @getreg(ptr addrspace(1) %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  %mode = call i32 @llvm.amdgcn.s.getreg(i32 63489)
  store i32 %mode, ptr addrspace(1) %p
  ret void
}"""
  m = Memory(); po = m.alloc_bytes(np.zeros(32, np.int32))
  with pytest.raises(AMDEmuUnsupportedError, match=r"s_getreg_b32 .*encoding [0-9A-F]{8}"):
    run_kernel(compile_ir(ir), "getreg", struct.pack("<Q", po), (1, 1, 1), (32, 1, 1), m)
  np.testing.assert_array_equal(m.view(po, np.int32, 32), 0)

def test_atomic_fence_cache_invalidations_run():
  # a seq_cst atomic brings buffer_gl0_inv/buffer_gl1_inv (MUBUF); they decode and are no-ops, the atomic itself is refused above
  co = read_code_object(compile_ir(ATOMIC))
  from tg_amd.emu.decoder import decode
  k = co.kernel("atom")
  names = [i.name for i in decode(co.image, k.entry, k.entry + k.code_size)]
  assert "buffer_gl0_inv" in names and "buffer_gl1_inv" in names

def test_undecodable_encoding_is_refused_at_load():
  co = bytearray(compile_ir(ADD))
  obj = read_code_object(bytes(co))
  k = obj.kernel("add")
  text_off = bytes(co).index(obj.image[k.entry:k.entry + 16])  # the .text bytes in the file
  co[text_off:text_off + 4] = struct.pack("<I", 0xF0000000)  # MIMG encoding: not decoded
  with pytest.raises(AMDEmuUnsupportedError, match="F0000000"):
    run_kernel(bytes(co), "add", b"\0" * 24, (1, 1, 1), (32, 1, 1), Memory())

def test_other_archs_are_refused_with_a_clear_error():
  with pytest.raises(AMDEmuUnsupportedError, match=r"gfx1030 code object; the emulator runs gfx11 \(RDNA3\) and gfx942"):
    run_kernel(compile_ir(ADD, "gfx1030"), "add", b"\0" * 24, (1, 1, 1), (32, 1, 1), Memory())

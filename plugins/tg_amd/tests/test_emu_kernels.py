"""Kernels with control flow, LDS, barriers, scratch and 2-D ids, compiled for gfx1100 and run on the emulator (references: numpy)."""
from __future__ import annotations
import struct
import numpy as np
import pytest
from amdgpu_ir import DECLS, compile_ir, elementwise
from tg_amd.emu import AMDEmuMemoryFault, Memory, run_kernel

def test_loop_sum_rows():
  # out[i] = sum_k in[i*K + k]: a counted loop with a phi, per work-item
  K = 37
  ir = DECLS + f"""
define amdgpu_kernel void @rows(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %in) {{
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %gid = call i32 @llvm.amdgcn.workgroup.id.x()
  %g = mul i32 %gid, 32
  %i = add i32 %g, %tid
  %base = mul i32 %i, {K}
  br label %loop
loop:
  %k = phi i32 [ 0, %entry ], [ %k1, %loop ]
  %acc = phi float [ 0.0, %entry ], [ %acc1, %loop ]
  %idx = add i32 %base, %k
  %p = getelementptr float, ptr addrspace(1) %in, i32 %idx
  %x = load float, ptr addrspace(1) %p
  %acc1 = fadd float %acc, %x
  %k1 = add i32 %k, 1
  %done = icmp eq i32 %k1, {K}
  br i1 %done, label %exit, label %loop
exit:
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %acc1, ptr addrspace(1) %po
  ret void
}}"""
  x = np.random.default_rng(0).standard_normal((64, K)).astype(np.float32)
  m = Memory(); pin, pout = m.alloc_bytes(x), m.alloc(64 * 4)
  run_kernel(compile_ir(ir), "rows", struct.pack("<QQ", pout, pin), (2, 1, 1), (32, 1, 1), m)
  want = np.zeros(64, np.float32)
  for k in range(K): want += x[:, k]  # the same sequential f32 order as the kernel
  np.testing.assert_array_equal(m.view(pout, np.float32, 64), want)

def test_data_dependent_loop_trip_counts():
  # each lane loops a different number of times (divergent loop exit under EXEC): out[i] = number of Collatz steps of in[i]
  ir = DECLS + """
define amdgpu_kernel void @collatz(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %in) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr i32, ptr addrspace(1) %in, i32 %tid
  %n0 = load i32, ptr addrspace(1) %p
  %start = icmp ule i32 %n0, 1
  br i1 %start, label %exit, label %loop
loop:
  %n = phi i32 [ %n0, %entry ], [ %n1, %loop ]
  %c = phi i32 [ 0, %entry ], [ %c1, %loop ]
  %odd = and i32 %n, 1
  %isodd = icmp ne i32 %odd, 0
  %t3 = mul i32 %n, 3
  %t31 = add i32 %t3, 1
  %h = lshr i32 %n, 1
  %n1 = select i1 %isodd, i32 %t31, i32 %h
  %c1 = add i32 %c, 1
  %fin = icmp ule i32 %n1, 1
  br i1 %fin, label %exit, label %loop
exit:
  %r = phi i32 [ 0, %entry ], [ %c1, %loop ]
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %r, ptr addrspace(1) %po
  ret void
}"""
  x = np.arange(1, 65, dtype=np.int32) * 7 % 97 + 1
  m = Memory(); pin, pout = m.alloc_bytes(x), m.alloc(64 * 4)
  run_kernel(compile_ir(ir), "collatz", struct.pack("<QQ", pout, pin), (1, 1, 1), (64, 1, 1), m)
  def steps(n: int) -> int:
    c = 0
    while n > 1: n = 3 * n + 1 if n & 1 else n // 2; c += 1
    return c
  np.testing.assert_array_equal(m.view(pout, np.int32, 64), [steps(int(n)) for n in x])

LDS_REDUCE = DECLS + """
@lds = internal addrspace(3) global [256 x float] undef, align 4
define amdgpu_kernel void @reduce(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %in) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %gid = call i32 @llvm.amdgcn.workgroup.id.x()
  %g = mul i32 %gid, 256
  %i = add i32 %g, %tid
  %p = getelementptr float, ptr addrspace(1) %in, i32 %i
  %x = load float, ptr addrspace(1) %p
  %l = getelementptr [256 x float], ptr addrspace(3) @lds, i32 0, i32 %tid
  store float %x, ptr addrspace(3) %l
  call void @llvm.amdgcn.s.barrier()
  br label %loop
loop:
  %s = phi i32 [ 128, %entry ], [ %s1, %next ]
  %active = icmp ult i32 %tid, %s
  br i1 %active, label %add, label %next
add:
  %o = add i32 %tid, %s
  %lo = getelementptr [256 x float], ptr addrspace(3) @lds, i32 0, i32 %o
  %a = load float, ptr addrspace(3) %l
  %b = load float, ptr addrspace(3) %lo
  %c = fadd float %a, %b
  store float %c, ptr addrspace(3) %l
  br label %next
next:
  call void @llvm.amdgcn.s.barrier()
  %s1 = lshr i32 %s, 1
  %more = icmp ne i32 %s1, 0
  br i1 %more, label %loop, label %done
done:
  %first = icmp eq i32 %tid, 0
  br i1 %first, label %write, label %end
write:
  %r = load float, ptr addrspace(3) getelementptr ([256 x float], ptr addrspace(3) @lds, i32 0, i32 0)
  %po = getelementptr float, ptr addrspace(1) %out, i32 %gid
  store float %r, ptr addrspace(1) %po
  br label %end
end:
  ret void
}"""

def test_lds_tree_reduction_across_8_waves():
  x = np.random.default_rng(1).standard_normal((3, 256)).astype(np.float32)
  m = Memory(); pin, pout = m.alloc_bytes(x), m.alloc(3 * 4)
  st = run_kernel(compile_ir(LDS_REDUCE), "reduce", struct.pack("<QQ", pout, pin), (3, 1, 1), (256, 1, 1), m)
  assert st.waves == 3 * 8
  want = x.copy()
  s = 128
  while s:  # the kernel's own pairwise order, in f32
    want[:, :s] = want[:, :s] + want[:, s:2 * s]; s //= 2
  np.testing.assert_array_equal(m.view(pout, np.float32, 3), want[:, 0])
  np.testing.assert_allclose(m.view(pout, np.float32, 3), x.astype(np.float64).sum(1), rtol=1e-5)

def test_2d_ids_and_i64_index():
  # out[y*W + x] = in[x*H + y] (a transpose) with ids from workitem x/y and workgroup x/y, 64-bit index math
  W, H = 48, 20
  ir = """
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workitem.id.y()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.workgroup.id.y()
define amdgpu_kernel void @tr(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %in) {
  %tx = call i32 @llvm.amdgcn.workitem.id.x()
  %ty = call i32 @llvm.amdgcn.workitem.id.y()
  %bx = call i32 @llvm.amdgcn.workgroup.id.x()
  %by = call i32 @llvm.amdgcn.workgroup.id.y()
  %x0 = mul i32 %bx, 16
  %x = add i32 %x0, %tx
  %y0 = mul i32 %by, 4
  %y = add i32 %y0, %ty
  %x64 = zext i32 %x to i64
  %y64 = zext i32 %y to i64
  %src0 = mul i64 %x64, """ + str(H) + """
  %src = add i64 %src0, %y64
  %dst0 = mul i64 %y64, """ + str(W) + """
  %dst = add i64 %dst0, %x64
  %ps = getelementptr i32, ptr addrspace(1) %in, i64 %src
  %v = load i32, ptr addrspace(1) %ps
  %pd = getelementptr i32, ptr addrspace(1) %out, i64 %dst
  store i32 %v, ptr addrspace(1) %pd
  ret void
}"""
  a = np.arange(W * H, dtype=np.int32).reshape(W, H)
  m = Memory(); pin, pout = m.alloc_bytes(a), m.alloc(W * H * 4)
  run_kernel(compile_ir(ir), "tr", struct.pack("<QQ", pout, pin), (W // 16, H // 4, 1), (16, 4, 1), m)
  np.testing.assert_array_equal(m.view(pout, np.int32, W * H).reshape(H, W), a.T)

def test_private_array_dynamic_index_uses_scratch():
  ir = DECLS + """
define amdgpu_kernel void @priv(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %in) {
entry:
  %arr = alloca [16 x i32], align 4, addrspace(5)
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  br label %fill
fill:
  %k = phi i32 [ 0, %entry ], [ %k1, %fill ]
  %pk = getelementptr [16 x i32], ptr addrspace(5) %arr, i32 0, i32 %k
  %v = mul i32 %k, %tid
  store volatile i32 %v, ptr addrspace(5) %pk
  %k1 = add i32 %k, 1
  %d = icmp eq i32 %k1, 16
  br i1 %d, label %read, label %fill
read:
  %p = getelementptr i32, ptr addrspace(1) %in, i32 %tid
  %j = load i32, ptr addrspace(1) %p
  %pj = getelementptr [16 x i32], ptr addrspace(5) %arr, i32 0, i32 %j
  %r = load volatile i32, ptr addrspace(5) %pj
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %r, ptr addrspace(1) %po
  ret void
}"""
  j = (np.arange(32, dtype=np.int32) * 5) % 16
  m = Memory(); pin, pout = m.alloc_bytes(j), m.alloc(32 * 4)
  run_kernel(compile_ir(ir), "priv", struct.pack("<QQ", pout, pin), (1, 1, 1), (32, 1, 1), m)
  np.testing.assert_array_equal(m.view(pout, np.int32, 32), j * np.arange(32))

def test_partial_last_wave_keeps_inactive_lanes_untouched():
  # 40 work-items: the second wave has 8 live lanes; memory past element 40 must stay as it was
  ir = elementwise("k", ["float"], "float", "  %r = fmul float %x0, 3.0", block=40)
  x = np.arange(64, dtype=np.float32)
  m = Memory(); pin = m.alloc_bytes(x); pout = m.alloc_bytes(np.full(64, -7, np.float32))
  run_kernel(compile_ir(ir), "k", struct.pack("<QQ", pout, pin), (1, 1, 1), (40, 1, 1), m)
  got = m.view(pout, np.float32, 64)
  np.testing.assert_array_equal(got[:40], x[:40] * 3); np.testing.assert_array_equal(got[40:], -7)

def test_out_of_bounds_store_faults():
  ir = elementwise("k", ["float"], "float", "  %r = fadd float %x0, 1.0")
  m = Memory(); pin = m.alloc_bytes(np.zeros(128, np.float32)); pout = m.alloc(64 * 4)
  with pytest.raises(AMDEmuMemoryFault, match="outside every allocation"):
    run_kernel(compile_ir(ir), "k", struct.pack("<QQ", pout, pin), (2, 1, 1), (64, 1, 1), m)

def test_tiled_matmul_through_lds():
  # C = A @ B, 16x16 tiles staged in LDS, one barrier per stage: the shape of a tinygrad LOCAL-opt matmul
  N, T = 32, 16
  ir = f"""
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workitem.id.y()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.workgroup.id.y()
declare void @llvm.amdgcn.s.barrier()
@ta = internal addrspace(3) global [{T * T} x float] undef, align 4
@tb = internal addrspace(3) global [{T * T} x float] undef, align 4
define amdgpu_kernel void @mm(ptr addrspace(1) noalias %c, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b) {{
entry:
  %tx = call i32 @llvm.amdgcn.workitem.id.x()
  %ty = call i32 @llvm.amdgcn.workitem.id.y()
  %bx = call i32 @llvm.amdgcn.workgroup.id.x()
  %by = call i32 @llvm.amdgcn.workgroup.id.y()
  %col0 = mul i32 %bx, {T}
  %col = add i32 %col0, %tx
  %row0 = mul i32 %by, {T}
  %row = add i32 %row0, %ty
  %lt0 = mul i32 %ty, {T}
  %lt = add i32 %lt0, %tx
  %pla = getelementptr [{T * T} x float], ptr addrspace(3) @ta, i32 0, i32 %lt
  %plb = getelementptr [{T * T} x float], ptr addrspace(3) @tb, i32 0, i32 %lt
  br label %tile
tile:
  %t = phi i32 [ 0, %entry ], [ %t1, %tile_end ]
  %acc = phi float [ 0.0, %entry ], [ %acc2, %tile_end ]
  %ka = add i32 %t, %tx
  %ia0 = mul i32 %row, {N}
  %ia = add i32 %ia0, %ka
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %ia
  %va = load float, ptr addrspace(1) %pa
  store float %va, ptr addrspace(3) %pla
  %kb = add i32 %t, %ty
  %ib0 = mul i32 %kb, {N}
  %ib = add i32 %ib0, %col
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %ib
  %vb = load float, ptr addrspace(1) %pb
  store float %vb, ptr addrspace(3) %plb
  call void @llvm.amdgcn.s.barrier()
  br label %inner
inner:
  %k = phi i32 [ 0, %tile ], [ %k1, %inner ]
  %acc1 = phi float [ %acc, %tile ], [ %acc3, %inner ]
  %ia_l0 = mul i32 %ty, {T}
  %ia_l = add i32 %ia_l0, %k
  %ib_l0 = mul i32 %k, {T}
  %ib_l = add i32 %ib_l0, %tx
  %qa = getelementptr [{T * T} x float], ptr addrspace(3) @ta, i32 0, i32 %ia_l
  %qb = getelementptr [{T * T} x float], ptr addrspace(3) @tb, i32 0, i32 %ib_l
  %x = load float, ptr addrspace(3) %qa
  %y = load float, ptr addrspace(3) %qb
  %acc3 = call float @llvm.fma.f32(float %x, float %y, float %acc1)
  %k1 = add i32 %k, 1
  %kd = icmp eq i32 %k1, {T}
  br i1 %kd, label %tile_end, label %inner
tile_end:
  %acc2 = phi float [ %acc3, %inner ]
  call void @llvm.amdgcn.s.barrier()
  %t1 = add i32 %t, {T}
  %td = icmp eq i32 %t1, {N}
  br i1 %td, label %exit, label %tile
exit:
  %ic0 = mul i32 %row, {N}
  %ic = add i32 %ic0, %col
  %pc = getelementptr float, ptr addrspace(1) %c, i32 %ic
  store float %acc2, ptr addrspace(1) %pc
  ret void
}}
declare float @llvm.fma.f32(float, float, float)
"""
  rng = np.random.default_rng(3)
  a, b = rng.integers(-8, 8, (N, N)).astype(np.float32), rng.integers(-8, 8, (N, N)).astype(np.float32)  # integers: exact in any order
  m = Memory(); pa, pb, pc = m.alloc_bytes(a), m.alloc_bytes(b), m.alloc(N * N * 4)
  st = run_kernel(compile_ir(ir), "mm", struct.pack("<QQQ", pc, pa, pb), (N // T, N // T, 1), (T, T, 1), m)
  assert st.waves == 4 * 8
  np.testing.assert_array_equal(m.view(pc, np.float32, N * N).reshape(N, N), a @ b)

def test_small_int_types_and_bool_select():
  # out[i] = (u8[i] > 100) ? i8[i] * 3 : u16[i] >> 2, as int32 — byte/short loads, sign/zero extension, a bool select
  ir = DECLS + """
define amdgpu_kernel void @k(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %pu8, ptr addrspace(1) noalias %pi8,
                             ptr addrspace(1) noalias %pu16) {
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %p0 = getelementptr i8, ptr addrspace(1) %pu8, i32 %i
  %p1 = getelementptr i8, ptr addrspace(1) %pi8, i32 %i
  %p2 = getelementptr i16, ptr addrspace(1) %pu16, i32 %i
  %u8 = load i8, ptr addrspace(1) %p0
  %i8 = load i8, ptr addrspace(1) %p1
  %u16 = load i16, ptr addrspace(1) %p2
  %c = icmp ugt i8 %u8, 100
  %s = sext i8 %i8 to i32
  %m = mul i32 %s, 3
  %z = zext i16 %u16 to i32
  %h = lshr i32 %z, 2
  %r = select i1 %c, i32 %m, i32 %h
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %r, ptr addrspace(1) %po
  ret void
}"""
  rng = np.random.default_rng(4)
  u8, i8, u16 = rng.integers(0, 256, 64).astype(np.uint8), rng.integers(-128, 128, 64).astype(np.int8), rng.integers(0, 65536, 64).astype(np.uint16)
  m = Memory(); po = m.alloc(256)
  run_kernel(compile_ir(ir), "k", struct.pack("<QQQQ", po, m.alloc_bytes(u8), m.alloc_bytes(i8), m.alloc_bytes(u16)), (1, 1, 1), (64, 1, 1), m)
  np.testing.assert_array_equal(m.view(po, np.int32, 64), np.where(u8 > 100, i8.astype(np.int32) * 3, u16.astype(np.int32) >> 2))

def test_max_reduce_with_nan_and_unsigned_compare_loop():
  # out[i] = max over 8 values with maxnum (a NaN is skipped), tinygrad's MAX reduce; then a float -> bool -> float
  ir = DECLS + """
define amdgpu_kernel void @k(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %in) {
entry:
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %b = mul i32 %i, 8
  br label %loop
loop:
  %k = phi i32 [ 0, %entry ], [ %k1, %loop ]
  %acc = phi float [ 0xFFF0000000000000, %entry ], [ %acc1, %loop ]
  %j = add i32 %b, %k
  %p = getelementptr float, ptr addrspace(1) %in, i32 %j
  %x = load float, ptr addrspace(1) %p
  %acc1 = call float @llvm.maxnum.f32(float %acc, float %x)
  %k1 = add i32 %k, 1
  %d = icmp ult i32 %k1, 8
  br i1 %d, label %loop, label %exit
exit:
  %pos = fcmp ogt float %acc1, 0.0
  %f = uitofp i1 %pos to float
  %r = fadd float %acc1, %f
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %r, ptr addrspace(1) %po
  ret void
}
declare float @llvm.maxnum.f32(float, float)"""
  x = np.random.default_rng(5).standard_normal((32, 8)).astype(np.float32)
  x[3, 2] = np.nan; x[7, :] = -np.inf; x[9, :] = np.nan
  m = Memory(); po = m.alloc(128)
  run_kernel(compile_ir(ir), "k", struct.pack("<QQ", po, m.alloc_bytes(x)), (1, 1, 1), (32, 1, 1), m)
  mx = np.fmax.reduce(np.concatenate([np.full((32, 1), -np.inf, np.float32), x], axis=1), axis=1)  # the loop starts from -inf
  want = mx + (mx > 0).astype(np.float32)
  got = m.view(po, np.float32, 32)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want)); np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])

def test_kernel_that_never_ends_raises_instead_of_hanging():
  ir = DECLS + """
define amdgpu_kernel void @spin(ptr addrspace(1) %out, i32 %n) {
entry:
  br label %loop
loop:
  %k = phi i32 [ 0, %entry ], [ %k1, %loop ]
  %k1 = add i32 %k, 1
  %d = icmp eq i32 %k1, %n
  br i1 %d, label %exit, label %loop
exit:
  store i32 %k1, ptr addrspace(1) %out
  ret void
}"""
  from tg_amd.emu import AMDEmuError
  m = Memory(); po = m.alloc(4)
  run_kernel(compile_ir(ir), "spin", struct.pack("<QI", po, 1000), (1, 1, 1), (32, 1, 1), m)
  assert m.view(po, np.int32, 1)[0] == 1000
  with pytest.raises(AMDEmuError, match="exceeded 5000 wave-instructions"):  # n = 0: the counter wraps only after 2**32 steps
    run_kernel(compile_ir(ir), "spin", struct.pack("<QI", po, 0), (1, 1, 1), (32, 1, 1), m, max_instructions=5000)

def test_hidden_kernargs_block_count_and_group_size():
  # out[0] = hidden_block_count_x, out[1] = hidden_group_size_x, read through llvm.amdgcn.implicitarg.ptr (after the explicit args)
  ir = """
declare ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
define amdgpu_kernel void @hid(ptr addrspace(1) %out) {
  %p = call ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
  %bc = load i32, ptr addrspace(4) %p
  %pg = getelementptr i8, ptr addrspace(4) %p, i64 12
  %gs = load i16, ptr addrspace(4) %pg
  %gs32 = zext i16 %gs to i32
  store i32 %bc, ptr addrspace(1) %out
  %o1 = getelementptr i32, ptr addrspace(1) %out, i32 1
  store i32 %gs32, ptr addrspace(1) %o1
  ret void
}"""
  m = Memory(); po = m.alloc(8)
  run_kernel(compile_ir(ir), "hid", struct.pack("<Q", po), (5, 1, 1), (96, 1, 1), m)
  np.testing.assert_array_equal(m.view(po, np.int32, 2), [5, 96])

@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_generic_pointers_use_flat_instructions(arch):
  # addrspace(0) pointers: flat_load/flat_store (global memory through the flat aperture)
  ir = DECLS + """
define amdgpu_kernel void @k(ptr noalias %out, ptr noalias %in) {
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr i32, ptr %in, i32 %i
  %x = load i32, ptr %p
  %r = mul i32 %x, -3
  %po = getelementptr i32, ptr %out, i32 %i
  store i32 %r, ptr %po
  ret void
}"""
  x = np.arange(64, dtype=np.int32) - 20
  m = Memory(); pin, pout = m.alloc_bytes(x), m.alloc(256)
  run_kernel(compile_ir(ir, arch), "k", struct.pack("<QQ", pout, pin), (1, 1, 1), (64, 1, 1), m)
  np.testing.assert_array_equal(m.view(pout, np.int32, 64), x * -3)

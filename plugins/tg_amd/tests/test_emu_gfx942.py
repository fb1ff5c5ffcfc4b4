"""gfx942 (CDNA3, wave64, GCN encodings): a smaller set of the gfx1100 kernels, same numpy references."""
from __future__ import annotations
import struct
import numpy as np
import pytest
from amdgpu_ir import compile_ir, elementwise
from test_emu_elementwise import EXACT_F32_BIN, f32_edge, run_ew, same_bits
from test_emu_kernels import LDS_REDUCE
from tg_amd.emu import Memory, read_code_object, run_kernel

N = 128
ARCH = "gfx942"

def test_wave64_descriptor():
  k = read_code_object(compile_ir(elementwise("k", ["float"], "float", "  %r = fadd float %x0, 1.0"), ARCH)).kernel("k")
  assert k.wavefront_size == 64 and not k.descriptor.wavefront_size32

@pytest.mark.parametrize("op", EXACT_F32_BIN)
def test_f32_binary(op):
  a, b = f32_edge(N, 1), f32_edge(N, 2)
  got = run_ew(elementwise("k", ["float", "float"], "float", f"  %r = {op} float %x0, %x1"), "k", [a, b], np.float32, ARCH)
  with np.errstate(all="ignore"): same_bits(got, EXACT_F32_BIN[op](a, b))

@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("op", ["add", "mul", "sdiv", "lshr", "xor"])
def test_int(op, bits):
  t, ut = np.dtype(f"i{bits // 8}"), np.dtype(f"u{bits // 8}")
  rng = np.random.default_rng(3)
  a, b = rng.integers(-1000, 1000, N).astype(t), rng.integers(1, 50, N).astype(t)
  if op == "lshr": b %= bits  # a shift by the width or more is poison
  lt = f"i{bits}"
  got = run_ew(elementwise("k", [lt, lt], lt, f"  %r = {op} {lt} %x0, %x1"), "k", [a, b], t, ARCH)
  want = {"add": a + b, "mul": a * b, "sdiv": np.trunc(a / b).astype(t), "lshr": (a.view(ut) >> b.view(ut)).view(t), "xor": a ^ b}[op]
  np.testing.assert_array_equal(got, want)

@pytest.mark.parametrize("op", ["fadd", "fmul"])
def test_f16(op):
  a, b = f32_edge(N, 4).astype(np.float16), f32_edge(N, 5).astype(np.float16)
  got = run_ew(elementwise("k", ["half", "half"], "half", f"  %r = {op} half %x0, %x1"), "k", [a, b], np.float16, ARCH)
  with np.errstate(all="ignore"): same_bits(got, EXACT_F32_BIN[op](a.astype(np.float32), b.astype(np.float32)).astype(np.float16))

def test_conversions_and_select():
  a = f32_edge(N, 6)
  body = "  %c = fcmp olt float %x0, 0.0\n  %n = fneg float %x0\n  %s = select i1 %c, float %n, float %x0\n  %d = fpext float %s to double\n" \
         "  %m = fmul double %d, 3.0\n  %r = fptrunc double %m to float"
  got = run_ew(elementwise("k", ["float"], "float", body), "k", [a], np.float32, ARCH)
  with np.errstate(all="ignore"): same_bits(got, (np.where(a < 0, -a, a).astype(np.float64) * 3).astype(np.float32))  # -0 stays -0

def test_lds_reduction_wave64():
  x = np.random.default_rng(7).standard_normal((2, 256)).astype(np.float32)
  m = Memory(); pin, pout = m.alloc_bytes(x), m.alloc(2 * 4)
  st = run_kernel(compile_ir(LDS_REDUCE, ARCH), "reduce", struct.pack("<QQ", pout, pin), (2, 1, 1), (256, 1, 1), m)
  assert st.waves == 2 * 4
  want = x.copy(); s = 128
  while s: want[:, :s] = want[:, :s] + want[:, s:2 * s]; s //= 2
  np.testing.assert_array_equal(m.view(pout, np.float32, 2), want[:, 0])

def test_float4_vectors_use_packed_f32():
  # <4 x float> arithmetic: gfx942 lowers it to v_pk_mul_f32 / v_pk_add_f32 on register pairs, with dwordx4 memory ops
  a, b = f32_edge(N * 4, 8), f32_edge(N * 4, 9)
  ir = elementwise("k", ["<4 x float>", "<4 x float>"], "<4 x float>", "  %m = fmul <4 x float> %x0, %x1\n  %r = fadd <4 x float> %m, %x0")
  got = run_ew(ir, "k", [a.view(np.uint64).view(np.complex128), b.view(np.uint64).view(np.complex128)], np.complex128, ARCH)
  with np.errstate(all="ignore"): same_bits(got.view(np.float32), a * b + a)

"""Elementwise kernels compiled from LLVM IR for gfx1100, run on the emulator, compared with numpy."""
from __future__ import annotations
import struct
import numpy as np
import pytest
from amdgpu_ir import compile_ir, elementwise
from tg_amd.emu import Memory, run_kernel

N, BLOCK = 128, 64

def run_ew(ir: str, name: str, inputs: list[np.ndarray], out_dtype: np.dtype, arch: str = "gfx1100") -> np.ndarray:
  co = compile_ir(ir, arch)
  m = Memory()
  ptrs = [m.alloc_bytes(x) for x in inputs]
  out = m.alloc(np.dtype(out_dtype).itemsize * len(inputs[0]))
  run_kernel(co, name, struct.pack(f"<{1 + len(ptrs)}Q", out, *ptrs), (len(inputs[0]) // BLOCK, 1, 1), (BLOCK, 1, 1), m)
  return m.view(out, out_dtype, len(inputs[0])).copy()

def f32_edge(n: int, seed: int) -> np.ndarray:
  rng = np.random.default_rng(seed)
  special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754942e-38, 3.4028235e38, -3.4028235e38, 0.5, 2.5, -2.5,
                      1e30, -1e-30, 16777217.0, 0.1, 100.0], np.float32)
  x = (rng.standard_normal(n) * 10 ** rng.uniform(-3, 3, n)).astype(np.float32)
  x[:len(special)] = special
  return rng.permutation(x)

def same_bits(got: np.ndarray, want: np.ndarray) -> None:
  """Exact equality, NaN == NaN (any payload), -0 != +0."""
  nan = np.isnan(want)
  assert np.array_equal(np.isnan(got), nan), f"NaN lanes differ: got {got[nan != np.isnan(got)]}"
  bad = ~nan & (got.view(f"u{got.itemsize}") != want.view(f"u{want.itemsize}"))
  assert not bad.any(), f"{bad.sum()} lanes differ; first: got {got[bad][:4]} want {want[bad][:4]} for lanes {np.flatnonzero(bad)[:4]}"

EXACT_F32_BIN = {"fadd": np.add, "fsub": np.subtract, "fmul": np.multiply, "fdiv": np.divide}
@pytest.mark.parametrize("op", EXACT_F32_BIN)
def test_f32_binary_exact(op):
  a, b = f32_edge(N, 1), f32_edge(N, 2)
  got = run_ew(elementwise("k", ["float", "float"], "float", f"  %r = {op} float %x0, %x1"), "k", [a, b], np.float32)
  with np.errstate(all="ignore"): same_bits(got, EXACT_F32_BIN[op](a, b))

def test_f32_fma_and_sqrt_exact():
  a, b, c = f32_edge(N, 3), f32_edge(N, 4), f32_edge(N, 5)
  ir = elementwise("k", ["float", "float", "float"], "float", "  %f = call float @llvm.fma.f32(float %x0, float %x1, float %x2)\n"
                   "  %s = call float @llvm.sqrt.f32(float %f)\n  %r = fadd float %s, %x2") + "declare float @llvm.fma.f32(float, float, float)\n" \
       "declare float @llvm.sqrt.f32(float)\n"
  got = run_ew(ir, "k", [a, b, c], np.float32)
  with np.errstate(all="ignore"):
    f = (a.astype(np.float64) * b + c).astype(np.float32)  # exact product in f64, one rounding: fma for these inputs
    same_bits(got, np.sqrt(f) + c)

@pytest.mark.parametrize("fn,ref", [("minnum", np.fmin), ("maxnum", np.fmax), ("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc),
                                    ("rint", np.rint), ("fabs", np.abs)])
def test_f32_intrinsics(fn, ref):
  a, b = f32_edge(N, 6), f32_edge(N, 7)
  binary = fn in ("minnum", "maxnum")
  args = "float %x0, float %x1" if binary else "float %x0"
  ir = elementwise("k", ["float"] * (2 if binary else 1), "float", f"  %r = call float @llvm.{fn}.f32({args})") + \
       f"declare float @llvm.{fn}.f32({'float, float' if binary else 'float'})\n"
  got = run_ew(ir, "k", [a, b] if binary else [a], np.float32)
  want = ref(a, b) if binary else ref(a)
  if binary:  # IEEE minNum/maxNum leave the order of -0 and +0 open
    zeros = (a == 0) & (b == 0)
    got, want = got[~zeros], want[~zeros]
  same_bits(got, want)

@pytest.mark.parametrize("fn,ref,ulps", [("exp2", np.exp2, 1), ("log2", np.log2, 1), ("sin", np.sin, 2), ("cos", np.cos, 2), ("exp", np.exp, 2),
                                         ("log", np.log, 2)])
def test_f32_transcendental(fn, ref, ulps):
  a = np.abs(f32_edge(N, 8)) if fn.startswith("log") else np.clip(f32_edge(N, 8), -80, 80)
  if fn in ("sin", "cos"): a = np.clip(a, -100, 100)
  ir = elementwise("k", ["float"], "float", f"  %r = call float @llvm.{fn}.f32(float %x0)") + f"declare float @llvm.{fn}.f32(float)\n"
  got = run_ew(ir, "k", [a], np.float32)
  want = ref(a.astype(np.float64)).astype(np.float32)
  if fn in ("sin", "cos"):  # llvm lowers sin(x) to v_sin(x * 1/(2pi)) with the product rounded to f32: the reference rounds it the same way
    want = ref(2 * np.pi * (a * np.float32(1 / (2 * np.pi))).astype(np.float64)).astype(np.float32)
  fin = np.isfinite(want)
  same_bits(got[~fin], want[~fin])
  # llvm lowers these intrinsics to the ISA's approximations (v_exp/v_log/v_sin) plus range reduction: compare in ulps of the reference
  ulp = np.spacing(np.abs(want[fin]))
  err = np.abs(got[fin].astype(np.float64) - want[fin]) / ulp
  assert err.max() <= ulps, f"max error {err.max()} ulp at {a[fin][np.argmax(err)]}"

@pytest.mark.parametrize("conv,src,dst", [("fptosi", "float", "i32"), ("fptoui", "float", "i32"), ("sitofp", "i32", "float"),
                                          ("uitofp", "i32", "float"), ("fpext", "half", "float"), ("fptrunc", "float", "half"),
                                          ("fpext", "float", "double"), ("fptrunc", "double", "float"), ("sitofp", "i64", "double"),
                                          ("fptosi", "double", "i64"), ("sitofp", "i64", "float"), ("uitofp", "i64", "float")])
def test_conversions(conv, src, dst):
  np_t = {"float": np.float32, "half": np.float16, "double": np.float64, "i32": np.int32, "i64": np.int64}
  rng = np.random.default_rng(9)
  if src in ("i32", "i64"):
    x = rng.integers(np.iinfo(np_t[src]).min, np.iinfo(np_t[src]).max, N, dtype=np_t[src]); x[:4] = [0, -1, 1, np.iinfo(np_t[src]).min]
  else:
    x = f32_edge(N, 10).astype(np_t[src])
    if conv.startswith("fpto"):  # fptosi/fptoui of out-of-range or NaN is poison in LLVM: keep to representable values
      x = np.where(np.isfinite(x), np.clip(x, -2e9, 2e9) if conv == "fptosi" else np.clip(np.abs(x), 0, 4e9), 1.5).astype(np_t[src])
  if conv == "uitofp":
    x = x.view(np.uint32 if src == "i32" else np.uint64)
  ir = elementwise("k", [src], dst, f"  %r = {conv} {src} %x0 to {dst}")
  got = run_ew(ir, "k", [x], np_t[dst])
  if conv == "fptoui": want = x.astype(np.float64).astype(np.uint32).view(np.int32)
  else: want = x.astype(np_t[dst])
  same_bits(got, want) if got.dtype.kind == "f" else np.testing.assert_array_equal(got, want)

INT_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
@pytest.mark.parametrize("bits", [32, 64, 16])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "and", "or", "xor", "shl", "ashr", "lshr", "sdiv", "udiv", "srem", "urem", "smax", "umin"])
def test_int_ops(op, bits):
  t, ut = np.dtype(f"i{bits // 8}"), np.dtype(f"u{bits // 8}")
  rng = np.random.default_rng(11)
  a = rng.integers(np.iinfo(t).min, np.iinfo(t).max, N, dtype=t, endpoint=True)
  b = rng.integers(np.iinfo(t).min, np.iinfo(t).max, N, dtype=t, endpoint=True)
  a[:6] = [0, -1, np.iinfo(t).min, np.iinfo(t).max, 7, -7]
  if op in ("shl", "ashr", "lshr"): b = (b.view(ut) % bits).astype(t)
  if op in ("sdiv", "udiv", "srem", "urem"):
    b[b == 0] = 3; b[:2] = [1, -1]
    if op in ("sdiv", "srem"): b[(a == np.iinfo(t).min) & (b == -1)] = 5  # INT_MIN / -1 is UB
  lt = f"i{bits}"
  body = f"  %r = call {lt} @llvm.{op}.{lt}({lt} %x0, {lt} %x1)" if op in ("smax", "umin") else f"  %r = {op} {lt} %x0, %x1"
  ir = elementwise("k", [lt, lt], lt, body) + (f"declare {lt} @llvm.{op}.{lt}({lt}, {lt})\n" if op in ("smax", "umin") else "")
  got = run_ew(ir, "k", [a, b], t)
  ua, ub = a.view(ut), b.view(ut)
  with np.errstate(all="ignore"):
    want = {"shl": lambda: (ua << ub).view(t), "ashr": lambda: a >> b, "lshr": lambda: (ua >> ub).view(t),
            "sdiv": lambda: (np.abs(a.astype(object)) // np.abs(b.astype(object)) * np.sign(a.astype(object)) * np.sign(b.astype(object))),
            "srem": lambda: a.astype(object) - (np.abs(a.astype(object)) // np.abs(b.astype(object)) * np.sign(a.astype(object)) *
                                                np.sign(b.astype(object))) * b.astype(object),
            "udiv": lambda: (ua // ub).view(t), "urem": lambda: (ua % ub).view(t), "smax": lambda: np.maximum(a, b),
            "umin": lambda: np.minimum(ua, ub).view(t)}.get(op, lambda: INT_OPS[op](a, b))()
  want = np.array([int(x) & ((1 << bits) - 1) for x in np.asarray(want).tolist()], np.uint64).astype(ut).view(t)
  np.testing.assert_array_equal(got, want)

@pytest.mark.parametrize("op", ["fadd", "fmul", "fsub", "fdiv"])
def test_f16(op):
  a, b = f32_edge(N, 12).astype(np.float16), f32_edge(N, 13).astype(np.float16)
  got = run_ew(elementwise("k", ["half", "half"], "half", f"  %r = {op} half %x0, %x1"), "k", [a, b], np.float16)
  with np.errstate(all="ignore"): same_bits(got, EXACT_F32_BIN[op](a.astype(np.float32), b.astype(np.float32)).astype(np.float16))

def test_f16_vector_packed():
  a, b = f32_edge(N * 2, 14).astype(np.float16), f32_edge(N * 2, 15).astype(np.float16)
  ir = elementwise("k", ["<2 x half>", "<2 x half>"], "<2 x half>", "  %m = fmul <2 x half> %x0, %x1\n  %r = fadd <2 x half> %m, %x0")
  got = run_ew(ir, "k", [a.view(np.uint32), b.view(np.uint32)], np.uint32).view(np.float16)
  with np.errstate(all="ignore"): same_bits(got, (a * b) + a)

def test_bf16_roundtrip():
  # bf16 has no gfx11 arithmetic: LLVM widens to f32 and rounds back with integer ops
  a, b = f32_edge(N, 16), f32_edge(N, 17)
  ta, tb = (a.view(np.uint32) >> 16).astype(np.uint16), (b.view(np.uint32) >> 16).astype(np.uint16)
  got = run_ew(elementwise("k", ["bfloat", "bfloat"], "bfloat", "  %r = fadd bfloat %x0, %x1"), "k", [ta, tb], np.uint16)
  fa, fb = (ta.astype(np.uint32) << 16).view(np.float32), (tb.astype(np.uint32) << 16).view(np.float32)
  s = (fa + fb).view(np.uint32).astype(np.uint64)
  want = ((s + 0x7fff + (s >> 16 & 1)) >> 16).astype(np.uint16)  # round to nearest even
  nan = np.isnan(fa + fb)
  np.testing.assert_array_equal(np.isnan((got.astype(np.uint32) << 16).view(np.float32)), nan)
  np.testing.assert_array_equal(got[~nan], want[~nan])

def test_f64_arith():
  a, b = f32_edge(N, 18).astype(np.float64) * np.pi, f32_edge(N, 19).astype(np.float64)
  ir = elementwise("k", ["double", "double"], "double", "  %m = fmul double %x0, %x1\n  %d = fdiv double %m, %x1\n  %r = fadd double %d, %x0")
  got = run_ew(ir, "k", [a, b], np.float64)
  with np.errstate(all="ignore"): same_bits(got, (a * b) / b + a)

def test_select_compare_divergent_if_else():
  a, b = f32_edge(N, 20), f32_edge(N, 21)
  body = """  %c = fcmp olt float %x0, %x1
  br i1 %c, label %then, label %else
then:
  %t = fmul float %x0, 2.0
  br label %join
else:
  %e = fsub float %x1, %x0
  %e2 = call float @llvm.sqrt.f32(float %e)
  br label %join
join:
  %r = phi float [ %t, %then ], [ %e2, %else ]"""
  got = run_ew(elementwise("k", ["float", "float"], "float", body) + "declare float @llvm.sqrt.f32(float)\n", "k", [a, b], np.float32)
  with np.errstate(all="ignore"): same_bits(got, np.where(a < b, a * 2, np.sqrt(b - a)))

def test_f16_mixed_precision_fma_and_f16_math():
  # f16 inputs widened into an f32 fma (LLVM's v_fma_mix territory), plus f16 sqrt/exp2/max rounded back to half
  a, b = f32_edge(N, 22).astype(np.float16), f32_edge(N, 23).astype(np.float16)
  c = f32_edge(N, 24)
  body = """  %ea = fpext half %x0 to float
  %eb = fpext half %x1 to float
  %f = call float @llvm.fma.f32(float %ea, float %eb, float %x2)
  %h = fptrunc float %f to half
  %s = call half @llvm.sqrt.f16(half %h)
  %e = call half @llvm.exp2.f16(half %x0)
  %m = call half @llvm.maxnum.f16(half %s, half %e)
  %r = fpext half %m to float"""
  ir = elementwise("k", ["half", "half", "float"], "float", body) + "declare float @llvm.fma.f32(float, float, float)\n" \
       "declare half @llvm.sqrt.f16(half)\ndeclare half @llvm.exp2.f16(half)\ndeclare half @llvm.maxnum.f16(half, half)\n"
  got = run_ew(ir, "k", [a, b, c], np.float32)
  with np.errstate(all="ignore"):
    f = (a.astype(np.float64) * b.astype(np.float64) + c).astype(np.float32).astype(np.float16)
    s = np.sqrt(f.astype(np.float32)).astype(np.float16)
    e = np.exp2(a.astype(np.float64)).astype(np.float16)
    want = np.fmax(s, e).astype(np.float32)
  same_bits(got, want)

def test_float4_vectors_dual_issue():
  # <4 x float> arithmetic with b128 memory ops: gfx1100 pairs the lanes' ops into VOPD (v_dual_mul_f32 :: v_dual_add_f32 ...)
  a, b = f32_edge(N * 4, 25), f32_edge(N * 4, 26)
  ir = elementwise("k", ["<4 x float>", "<4 x float>"], "<4 x float>", "  %m = fmul <4 x float> %x0, %x1\n  %r = fsub <4 x float> %m, %x1")
  got = run_ew(ir, "k", [a.view(np.complex128), b.view(np.complex128)], np.complex128)
  with np.errstate(all="ignore"): same_bits(got.view(np.float32), a * b - b)

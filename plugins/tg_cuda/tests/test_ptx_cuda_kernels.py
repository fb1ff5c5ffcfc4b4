"""CUDA C kernels (tests/kernels.cu) compiled to PTX by NVRTC, run on MockCUDA through the driver API, checked
against numpy / torch CPU."""
import ctypes
import os

import numpy as np
import pytest
import torch
from cuda_testutil import MockGPU, cuda_to_ptx

from tg_cuda.mock.errors import PTXRuntimeError, PTXUnsupportedError

u64, i32 = ctypes.c_uint64, ctypes.c_int32


@pytest.fixture(scope="module")
def ptx() -> str:
  with open(os.path.join(os.path.dirname(__file__), "kernels.cu")) as f: return cuda_to_ptx(f.read(), "sm_80")


@pytest.fixture(scope="module")
def gpu(ptx):
  g = MockGPU()
  g.ptx = ptx
  return g


def fn(gpu, name): return gpu.function(gpu.ptx, name)


def test_elementwise_float4(gpu):
  rng = np.random.default_rng(0)
  n4 = 300
  a, b = rng.standard_normal((n4, 4)).astype(np.float32), rng.standard_normal((n4, 4)).astype(np.float32)
  pa, pb, po = gpu.upload(a), gpu.upload(b), gpu.empty(a.nbytes)
  gpu.launch(fn(gpu, "ew"), (3, 1, 1), (128, 1, 1), u64(pa), u64(pb), u64(po), i32(n4))
  out = gpu.download(po, (n4, 4), np.float32)
  a64, b64 = a.astype(np.float64), b.astype(np.float64)
  np.testing.assert_array_equal(out[:, 0], (a64[:, 0] * b64[:, 0] + 1.0).astype(np.float32))   # fmaf: one rounding
  np.testing.assert_array_equal(out[:, 1], a[:, 1] * b[:, 1] - a[:, 2])   # NVRTC keeps mul.f32 + sub.f32 here
  np.testing.assert_array_equal(out[:, 2], a[:, 2] / b[:, 2])   # div.rn.f32 is IEEE division
  np.testing.assert_array_equal(out[:, 3], np.maximum(a[:, 3], b[:, 3]))


def test_libdevice_math(gpu):
  # expf/logf/sinf/... are long software sequences (fma.rm/rp, cvt.rni, local-memory Payne-Hanek for large sinf args)
  x = np.concatenate([np.linspace(-20, 20, 301), [1e-30, 3.0e5, -7.5e6, 1e30, np.inf, -np.inf, np.nan, 0.0, -0.0]]).astype(np.float32)
  n = len(x)
  px, po = gpu.upload(x), gpu.empty(n * 8 * 4)
  gpu.launch(fn(gpu, "math"), ((n + 127) // 128, 1, 1), (128, 1, 1), u64(px), u64(po), i32(n))
  out = gpu.download(po, (n, 8), np.float32)
  t = torch.from_numpy(x).double()
  refs = [torch.exp(t), torch.log(t.abs()), torch.sin(t), torch.cos(t), torch.sqrt(t.abs()), torch.tanh(t), 1 / t, t.abs() ** 0.37]
  # CUDA's documented max ulp errors: expf 2, logf 1, sinf/cosf 2, sqrtf 0, tanhf 2, 1/x 0, powf 4 (one ulp <= 2^-23 relative)
  for j, (ref, ulps) in enumerate(zip(refs, [2, 1, 2, 2, 0, 2, 0, 4])):
    ref = ref.float().numpy()
    np.testing.assert_allclose(out[:, j], ref, rtol=max(ulps, 0.5) * 2.0**-23, atol=1e-37, err_msg=f"column {j}")


def test_fast_math_approx(gpu):
  x = np.concatenate([np.linspace(-3, 3, 97), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1.0]]).astype(np.float32)
  n = len(x)
  px, po = gpu.upload(x), gpu.empty(n * 6 * 4)
  gpu.launch(fn(gpu, "fastmath"), (1, 1, 1), (128, 1, 1), u64(px), u64(po), i32(n))
  out = gpu.download(po, (n, 6), np.float32)
  with np.errstate(all="ignore"):
    x64 = x.astype(np.float64)
    refs = [np.exp2(x64), np.log2(x64), np.sin(x64), np.cos(x64), 1 / np.sqrt(x64), 1 / x64]
  for j, ref in enumerate(refs):
    # ex2/lg2/sin/cos/rsqrt/rcp .approx: PTX bounds are ~2 ulp (ex2, rcp) up to 2^-20.9 absolute (sin/cos); NaN/inf must match
    np.testing.assert_allclose(out[:, j], ref.astype(np.float32), rtol=2.5e-7, atol=1e-6 if j in (2, 3) else 0, err_msg=f"column {j}")


def test_shared_memory_reduction(gpu):
  rng = np.random.default_rng(1)
  n = 5000
  a = rng.standard_normal(n).astype(np.float32)
  pa, po = gpu.upload(a), gpu.empty(4 * 4)
  gpu.launch(fn(gpu, "reduce"), (4, 1, 1), (256, 1, 1), u64(pa), u64(po), i32(n))
  out = gpu.download(po, (4,), np.float32)
  np.testing.assert_allclose(out.sum(), a.astype(np.float64).sum(), rtol=1e-5)
  # each block's partial sum: its grid-strided slice
  for b in range(4):
    idx = np.concatenate([np.arange(s, min(n, s + 256)) for s in range(b * 256, n, 1024)])
    np.testing.assert_allclose(out[b], a[idx].astype(np.float64).sum(), rtol=1e-5, atol=1e-5)


def test_warp_shuffle_and_ballot(gpu):
  rng = np.random.default_rng(2)
  a = rng.random(128).astype(np.float32)
  pa, po = gpu.upload(a), gpu.empty(8 * 4)
  gpu.launch(fn(gpu, "warpsum"), (2, 1, 1), (64, 1, 1), u64(pa), u64(po))
  out = gpu.download(po, (4, 2), np.float32)
  np.testing.assert_allclose(out[:, 0], a.reshape(4, 32).sum(1), rtol=1e-6)
  ballot = ((a.reshape(4, 32) > 0.5) * (1 << np.arange(32, dtype=np.uint64))).sum(1).astype(np.uint32)
  np.testing.assert_array_equal(out[:, 1].view(np.uint32), ballot)


def test_divergent_loops(gpu):
  # data-dependent trip counts and a branch inside the loop: every lane follows its own path
  rng = np.random.default_rng(3)
  a = rng.integers(1, 3000, 200).astype(np.uint32)
  pa, po = gpu.upload(a), gpu.empty(a.nbytes)
  gpu.launch(fn(gpu, "collatz"), (4, 1, 1), (64, 1, 1), u64(pa), u64(po), i32(len(a)))

  def steps(x):
    c = 0
    while x != 1: x = 3 * x + 1 if x & 1 else x >> 1; c += 1
    return c
  np.testing.assert_array_equal(gpu.download(po, a.shape, np.uint32), [steps(int(x)) for x in a])


def test_global_atomics(gpu):
  rng = np.random.default_rng(4)
  n = 300
  a = rng.integers(-1000, 1000, n).astype(np.int32)
  pa, ph, pm, pc, pf = gpu.upload(a), gpu.empty(16 * 4), gpu.upload(np.array([-(2**31)], np.int32)), gpu.empty((n + 64) * 4), gpu.empty(4)
  gpu.launch(fn(gpu, "atomics"), (3, 1, 1), (128, 1, 1), u64(pa), u64(ph), u64(pm), u64(pc), u64(pf), i32(n))
  np.testing.assert_array_equal(gpu.download(ph, (16,), np.int32), np.bincount(a & 15, minlength=16))
  assert gpu.download(pm, (1,), np.int32)[0] == a.max()
  assert gpu.download(pf, (1,), np.float32)[0] == (a & 7).sum()
  cas = gpu.download(pc, (n + 64,), np.uint32)
  old, slots = cas[:n], cas[n:]
  for s in range(64):
    lanes = np.arange(s, n, 64)
    winners = lanes[old[lanes] == 0]
    assert len(winners) == 1 and slots[s] == winners[0] + 1      # exactly one CAS succeeded per slot
    assert (old[lanes[lanes != winners[0]]] == winners[0] + 1).all()   # the others saw the winner's value


def test_shared_atomics(gpu):
  rng = np.random.default_rng(5)
  a = rng.integers(0, 1000, 4 * 96).astype(np.int32)
  pa, po = gpu.upload(a), gpu.empty(4 * 8 * 4)
  gpu.launch(fn(gpu, "shared_atomics"), (4, 1, 1), (96, 1, 1), u64(pa), u64(po))
  np.testing.assert_array_equal(gpu.download(po, (4, 8), np.int32), [np.bincount(a[b * 96:(b + 1) * 96] & 7, minlength=8) for b in range(4)])


def _trunc_div(x, y): return np.where((x < 0) ^ (y < 0), -(np.abs(x) // np.abs(y)), np.abs(x) // np.abs(y))


def test_integer_ops(gpu):
  rng = np.random.default_rng(6)
  n = 128
  a = np.concatenate([[2**31 - 1, -(2**31), 7, -7, 0], rng.integers(-(2**31), 2**31, n - 5)]).astype(np.int32)
  b = np.concatenate([[3, 7, -2, 2, 5], rng.integers(-(2**31), 2**31, n - 5)]).astype(np.int32)
  b[b == 0] = 1
  la = rng.integers(-(2**63), 2**63, n, dtype=np.int64)
  lb = rng.integers(-(2**40), 2**40, n, dtype=np.int64)
  lb[lb == 0] = 3
  pa, pb, po, pla, plb, plo = gpu.upload(a), gpu.upload(b), gpu.empty(n * 40), gpu.upload(la), gpu.upload(lb), gpu.empty(n * 32)
  gpu.launch(fn(gpu, "intops"), (1, 1, 1), (128, 1, 1), u64(pa), u64(pb), u64(po), u64(pla), u64(plb), u64(plo), i32(n))
  out, lout = gpu.download(po, (n, 10), np.int32), gpu.download(plo, (n, 4), np.int64)
  x, y = a.astype(np.int64), b.astype(np.int64)
  ux, uy = a.view(np.uint32).astype(np.uint64), b.view(np.uint32).astype(np.uint64)
  q = _trunc_div(x, y)
  np.testing.assert_array_equal(out[:, 0], q.astype(np.int32))
  np.testing.assert_array_equal(out[:, 1], (x - q * y).astype(np.int32))
  np.testing.assert_array_equal(out[:, 2].view(np.uint32), (ux // uy).astype(np.uint32))
  np.testing.assert_array_equal(out[:, 3].view(np.uint32), (ux % uy).astype(np.uint32))
  np.testing.assert_array_equal(out[:, 4], ((x * y) >> 32).astype(np.int32))
  np.testing.assert_array_equal(out[:, 5].view(np.uint32), ((ux * uy) >> np.uint64(32)).astype(np.uint32))
  np.testing.assert_array_equal(out[:, 6], [bin(int(v)).count("1") for v in ux])
  np.testing.assert_array_equal(out[:, 7], [32 - int(v).bit_length() for v in ux])
  np.testing.assert_array_equal(out[:, 8].view(np.uint32), [int(f"{int(v):032b}"[::-1], 2) for v in ux])
  for i in range(n):   # __byte_perm(x, y, s): byte k of the result = byte ((s >> 4k) & 7) of {y:x}
    s, pool = 0x5140 + (i & 7), int(ux[i]) | (int(uy[i]) << 32)
    assert int(out[i, 9].view(np.uint32)) == sum(((pool >> (8 * ((s >> (4 * k)) & 7))) & 0xFF) << (8 * k) for k in range(4)), i
  for i in range(n):
    p, qq = int(la[i]), int(lb[i])
    tq = abs(p) // abs(qq) * (1 if (p < 0) == (qq < 0) else -1)
    assert int(lout[i, 0]) == tq and int(lout[i, 1]) == p - tq * qq, i
    assert int(lout[i, 2]) == np.int64(np.uint64((p & (2**64 - 1)) >> (i & 63))), i
    assert int(lout[i, 3]) == (p * qq) >> 64, i


def test_float_to_int_saturates(gpu):
  x = np.array([0.5, -0.5, 1.5, 2.5, -2.5, 3e9, -3e9, 1e20, -1e20, np.inf, -np.inf, np.nan, 2147483520.0, -0.0, 7.99], np.float32)
  n = len(x)
  px, po, pu, pl = gpu.upload(x), gpu.empty(n * 12), gpu.empty(n * 4), gpu.empty(n * 8)
  gpu.launch(fn(gpu, "f2i"), (1, 1, 1), (32, 1, 1), u64(px), u64(po), u64(pu), u64(pl), i32(n))
  out, uo, lo = gpu.download(po, (n, 3), np.int32), gpu.download(pu, (n,), np.uint32), gpu.download(pl, (n,), np.int64)
  # PTX cvt float->int: round as asked, clamp to the destination range, NaN -> 0
  x64 = np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=1e300, neginf=-1e300)
  for col, rnd in ((0, np.trunc), (1, np.rint), (2, np.floor)):
    np.testing.assert_array_equal(out[:, col], np.clip(rnd(x64), -(2**31), 2**31 - 1).astype(np.int64), err_msg=str(col))
  np.testing.assert_array_equal(uo, np.clip(np.trunc(x64), 0, 2**32 - 1).astype(np.uint64))
  np.testing.assert_array_equal(lo, [max(-(2**63), min(2**63 - 1, int(v))) for v in np.trunc(x64)])


def test_half_and_bfloat16(gpu):
  x = np.concatenate([np.linspace(-70000, 70000, 41),
                      [1e-8, -3e-6, 6.1e-5, 65504, 65520, 65519.9, np.inf, -np.inf, np.nan, 1.0009765625, 3.3895e38]]).astype(np.float32)
  x = np.concatenate([x, np.random.default_rng(7).standard_normal(64).astype(np.float32)])
  n = len(x)
  px, ph, pb, pk, p2 = gpu.upload(x), gpu.empty(n * 2), gpu.empty(n * 2), gpu.empty(n * 12), gpu.empty(n * 4)
  gpu.launch(fn(gpu, "halfs"), (1, 1, 1), (128, 1, 1), u64(px), u64(ph), u64(pb), u64(pk), u64(p2), i32(n))
  h, bf = gpu.download(ph, (n,), np.uint16), gpu.download(pb, (n,), np.uint16)
  back, h2 = gpu.download(pk, (n, 3), np.float32), gpu.download(p2, (n,), np.uint32)
  xh = x.astype(np.float16)
  np.testing.assert_array_equal(h.view(np.float16), xh)
  tb = torch.from_numpy(x).to(torch.bfloat16)
  np.testing.assert_array_equal(bf[~np.isnan(x)], tb.view(torch.int16).numpy().view(np.uint16)[~np.isnan(x)])
  assert (bf[np.isnan(x)] & 0x7FFF > 0x7F80).all()
  np.testing.assert_array_equal(back[:, 0], xh.astype(np.float32))
  np.testing.assert_array_equal(back[:, 1], tb.float().numpy())
  fma_ref = (xh.astype(np.float64) ** 2 + 0.5).astype(np.float16)   # one rounding of the exact x*x+0.5
  np.testing.assert_array_equal(back[:, 2], fma_ref.astype(np.float32))
  lo, hi = (h2 & 0xFFFF).astype(np.uint16).view(np.float16), (h2 >> 16).astype(np.uint16).view(np.float16)
  p = np.stack([xh, (-x).astype(np.float16)], 1)
  ref = ((p + p) * p).astype(np.float16)
  np.testing.assert_array_equal(lo, ref[:, 0])
  np.testing.assert_array_equal(hi, ref[:, 1])


def test_transpose_2d_block_shared(gpu):
  rows, cols = 37, 50
  a = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
  pa, po = gpu.upload(a), gpu.empty(a.nbytes)
  gpu.launch(fn(gpu, "transpose"), ((cols + 15) // 16, (rows + 15) // 16, 1), (16, 16, 1), u64(pa), u64(po), i32(rows), i32(cols))
  np.testing.assert_array_equal(gpu.download(po, (cols, rows), np.float32), a.T)


def test_dynamic_shared_memory(gpu):
  a = np.arange(3 * 96, dtype=np.float32)
  pa, po = gpu.upload(a), gpu.empty(a.nbytes)
  gpu.launch(fn(gpu, "dynsmem"), (3, 1, 1), (96, 1, 1), u64(pa), u64(po), shared=96 * 4)
  np.testing.assert_array_equal(gpu.download(po, (3, 96), np.float32), a.reshape(3, 96)[:, ::-1])


def test_local_memory_dynamic_index(gpu):
  rng = np.random.default_rng(8)
  n = 70
  a = rng.standard_normal((n, 16)).astype(np.float32)
  idx = rng.integers(0, 256, n).astype(np.int32)
  pa, pi, po = gpu.upload(a), gpu.upload(idx), gpu.empty(n * 4)
  assert "__local_depot" in gpu.ptx.split(".entry localmem")[1].split(".entry")[0]
  gpu.launch(fn(gpu, "localmem"), (1, 1, 1), (96, 1, 1), u64(pa), u64(pi), u64(po), i32(n))
  arr = a * np.arange(1, 17, dtype=np.float32)
  arr[np.arange(n), idx & 15] += np.float32(100)
  np.testing.assert_array_equal(gpu.download(po, (n,), np.float32), arr[np.arange(n), (idx >> 4) & 15])


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_mma_sync_m16n8k16(gpu, dtype):
  rng = np.random.default_rng(9)
  M, N, K = 32, 24, 48
  A, B, C = rng.standard_normal((M, K)), rng.standard_normal((K, N)), rng.standard_normal((M, N)).astype(np.float32)
  if dtype == "f16":
    Ah, Bh = A.astype(np.float16), B.astype(np.float16)
    Av, Bv, Ar, Br = Ah.view(np.uint16), Bh.view(np.uint16), Ah.astype(np.float64), Bh.astype(np.float64)
  else:
    At, Bt = torch.from_numpy(A).to(torch.bfloat16), torch.from_numpy(B).to(torch.bfloat16)
    Av, Bv = At.view(torch.int16).numpy().view(np.uint16), Bt.view(torch.int16).numpy().view(np.uint16)
    Ar, Br = At.double().numpy(), Bt.double().numpy()
  pa, pb, pc, pd = gpu.upload(Av), gpu.upload(Bv), gpu.upload(C), gpu.empty(M * N * 4)
  assert f"mma.sync.aligned.m16n8k16.row.col.f32.{dtype}.{dtype}.f32" in gpu.ptx
  gpu.launch(fn(gpu, f"mma_{dtype}"), (N // 8, M // 16, 1), (32, 1, 1), u64(pa), u64(pb), u64(pc), u64(pd), i32(M), i32(N), i32(K))
  np.testing.assert_allclose(gpu.download(pd, (M, N), np.float32), Ar @ Br + C, rtol=1e-5, atol=1e-5)


def test_illegal_address_is_reported(gpu):
  p = gpu.empty(64)
  with pytest.raises(PTXRuntimeError, match=r"illegal address .*st\.global"):
    gpu.launch(fn(gpu, "illegal"), (1, 1, 1), (32, 1, 1), u64(p))


def test_mma_m16n8k8_f16_accumulate(gpu):
  rng = np.random.default_rng(10)
  A, B, C = (rng.standard_normal(s).astype(np.float16) for s in ((16, 8), (8, 8), (16, 8)))
  pa, pb, pc, pd = gpu.upload(A), gpu.upload(B), gpu.upload(C), gpu.empty(16 * 8 * 2)
  assert "mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16" in gpu.ptx
  gpu.launch(fn(gpu, "mma_k8_f16acc"), (1, 1, 1), (32, 1, 1), u64(pa), u64(pb), u64(pc), u64(pd))
  ref = A.astype(np.float64) @ B.astype(np.float64) + C.astype(np.float64)
  np.testing.assert_allclose(gpu.download(pd, (16, 8), np.float16).astype(np.float64), ref, rtol=1e-3, atol=1e-3)


def test_tinygrad_style_register_tiled_matmul(gpu):
  rng = np.random.default_rng(11)
  a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
  pa, pb, po = gpu.upload(a), gpu.upload(b), gpu.empty(64 * 64 * 4)
  gpu.launch(fn(gpu, "r_4_4_4_4_16"), (4, 4, 1), (4, 4, 1), u64(po), u64(pa), u64(pb))
  np.testing.assert_allclose(gpu.download(po, (64, 64), np.float32), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_tinygrad_style_half_elementwise(gpu):
  rng = np.random.default_rng(12)
  x = rng.standard_normal(77).astype(np.float16)
  y = rng.standard_normal(77).astype(np.float32)
  x[3], y[5], x[7] = np.nan, np.nan, np.inf
  px, py, po = gpu.upload(x), gpu.upload(y), gpu.empty(96 * 2)
  gpu.launch(fn(gpu, "E_77"), (3, 1, 1), (32, 1, 1), u64(po), u64(px), u64(py))
  m = np.where(np.isnan(x) | np.isnan(y), np.nan, np.maximum(x.astype(np.float32), y)).astype(np.float64)
  e = np.exp2(m * 1.4426950408889634)
  with np.errstate(all="ignore"): ref = (e / (e + 1)).astype(np.float16)
  got = gpu.download(po, (96,), np.float16)
  np.testing.assert_allclose(got[:77].astype(np.float32), ref.astype(np.float32), rtol=2e-3, equal_nan=True)
  assert (got[77:] == 0).all()   # the predicated store wrote nothing past n


FAST_SRC = """extern "C" __global__ void fm(const float* a, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = a[i];
  out[i * 6 + 0] = expf(x); out[i * 6 + 1] = logf(x); out[i * 6 + 2] = sinf(x); out[i * 6 + 3] = x / a[(i + 1) % n];
  out[i * 6 + 4] = sqrtf(x); out[i * 6 + 5] = tanhf(x);
}
extern "C" __global__ void asserts(const int* a) { if (a[threadIdx.x] < 0) __trap(); }
"""


def test_use_fast_math_approximations():
  ptx = cuda_to_ptx(FAST_SRC, "sm_80", fast_math=True)
  assert "ex2.approx.ftz.f32" in ptx and "sin.approx.ftz.f32" in ptx and "div.approx.ftz.f32" in ptx
  g = MockGPU()
  x = np.linspace(0.05, 3.0, 90).astype(np.float32)
  n = len(x)
  px, po = g.upload(x), g.empty(n * 24)
  g.launch(g.function(ptx, "fm"), (1, 1, 1), (96, 1, 1), u64(px), u64(po), i32(n))
  out = g.download(po, (n, 6), np.float32)
  x64 = x.astype(np.float64)
  refs = [np.exp(x64), np.log(x64), np.sin(x64), x64 / np.roll(x64, -1), np.sqrt(x64), np.tanh(x64)]
  for j, ref in enumerate(refs):   # fast-math results: a few ulp (expf via ex2.approx of a rounded product)
    np.testing.assert_allclose(out[:, j], ref, rtol=2e-6, atol=1e-6, err_msg=str(j))


def test_trap_raises_when_executed():
  ptx = cuda_to_ptx(FAST_SRC, "sm_80")
  g = MockGPU()
  fn_ = g.function(ptx, "asserts")
  ok, bad = g.upload(np.arange(32, dtype=np.int32)), g.upload(np.arange(32, dtype=np.int32) - 5)
  g.launch(fn_, (1, 1, 1), (32, 1, 1), u64(ok))
  with pytest.raises(PTXRuntimeError, match="trap"):
    g.launch(fn_, (1, 1, 1), (32, 1, 1), u64(bad))


def test_ldmatrix_feeds_mma(gpu):
  rng = np.random.default_rng(13)
  A, B = rng.standard_normal((16, 16)).astype(np.float16), rng.standard_normal((16, 8)).astype(np.float16)
  pa, pb, pd = gpu.upload(A), gpu.upload(B), gpu.empty(16 * 8 * 4)
  assert "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in gpu.ptx
  gpu.launch(fn(gpu, "ldmatrix_mma"), (1, 1, 1), (32, 1, 1), u64(pa), u64(pb), u64(pd))
  np.testing.assert_allclose(gpu.download(pd, (16, 8), np.float32), A.astype(np.float64) @ B.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_f64_math_inlines_calls(gpu):
  assert "call.uni" in gpu.ptx and "madc.hi.cc.u32" in gpu.ptx   # .func slow paths with carry chains
  x = np.array([0.5, -2.0, 3.0, 1e5, 1e10, -1e15, 1e22, 1e300, 123456.789, 7.0, np.inf, np.nan, 0.0, -0.0, 2.0 ** -1070, 33.3], np.float64)
  n = len(x)
  px, po = gpu.upload(x), gpu.empty(n * 24)
  gpu.launch(fn(gpu, "f64math"), (1, 1, 1), (32, 1, 1), u64(px), u64(po), i32(n))
  out = gpu.download(po, (n, 3), np.float64)
  t = torch.from_numpy(x)
  # CUDA's double sin/cos/pow: at most 2 ulp
  for j, ref in enumerate([torch.sin(t), torch.cos(t), t.abs() ** 0.75]):
    np.testing.assert_allclose(out[:, j], ref.numpy(), rtol=2 * 2.0 ** -52, atol=1e-300, err_msg=str(j))


def test_warp_reduce_and_activemask(gpu):
  a = np.random.default_rng(14).integers(-1000, 1000, 64).astype(np.int32)
  pa, po = gpu.upload(a), gpu.empty(64 * 12)
  gpu.launch(fn(gpu, "warp_misc"), (1, 1, 1), (64, 1, 1), u64(pa), u64(po))
  out = gpu.download(po, (2, 32, 3), np.int32)
  w = a.reshape(2, 32)
  np.testing.assert_array_equal(out[:, :, 0], np.repeat(w.sum(1, keepdims=True), 32, 1))
  np.testing.assert_array_equal(out[:, :, 1].view(np.uint32), np.repeat(w.view(np.uint32).max(1, keepdims=True), 32, 1))
  odd = (w & 1).astype(bool)
  mask = (odd * (1 << np.arange(32, dtype=np.uint64))).sum(1).astype(np.uint32)
  np.testing.assert_array_equal(out[:, :, 2].view(np.uint32), np.where(odd, mask[:, None], 0))


def test_call_without_body_raises_naming_it():
  ptx = cuda_to_ptx('extern "C" __global__ void hello(int x) { printf("%d\\n", x); }\n', "sm_80")
  g = MockGPU()
  with pytest.raises(PTXUnsupportedError, match=r"call of vprintf, declared without a body"):
    g.function(ptx, "hello")


def test_cp_async_to_shared(gpu):
  a = np.arange(64 * 4, dtype=np.float32).reshape(64, 4) + 1
  pa, po = gpu.upload(a), gpu.empty(a.nbytes)
  gpu.launch(fn(gpu, "cp_async"), (1, 1, 1), (64, 1, 1), u64(pa), u64(po))
  tile = a.copy()
  tile[63, 2:] = 0   # src-size 8 of 16: the rest zero-filled
  np.testing.assert_array_equal(gpu.download(po, (64, 4), np.float32), np.roll(tile, -1, axis=0))


@pytest.mark.parametrize("flag", ["-lineinfo", "-G"])
def test_debug_info_ptx_runs_the_same(flag):
  # .loc / .file lines carry no ';' and -G adds .section blocks: none of it may swallow an instruction
  with open(os.path.join(os.path.dirname(__file__), "kernels.cu")) as f: ptx = cuda_to_ptx(f.read(), "sm_80", extra=(flag,))
  assert ".loc" in ptx
  g = MockGPU()
  rng = np.random.default_rng(15)
  a = rng.integers(1, 500, 64).astype(np.uint32)
  pa, po = g.upload(a), g.empty(a.nbytes)
  g.launch(g.function(ptx, "collatz"), (1, 1, 1), (64, 1, 1), u64(pa), u64(po), i32(len(a)))

  def steps(x):
    c = 0
    while x != 1: x = 3 * x + 1 if x & 1 else x >> 1; c += 1
    return c
  np.testing.assert_array_equal(g.download(po, a.shape, np.uint32), [steps(int(x)) for x in a])
  x = rng.standard_normal(300).astype(np.float32)
  px, pr = g.upload(x), g.empty(4 * 4)
  g.launch(g.function(ptx, "reduce"), (4, 1, 1), (256, 1, 1), u64(px), u64(pr), i32(len(x)))
  np.testing.assert_allclose(g.download(pr, (4,), np.float32).sum(), x.astype(np.float64).sum(), rtol=1e-5)


def test_mma_m16n8k8_tf32(gpu):
  rng = np.random.default_rng(16)
  # operands with at most 11 significant bits are exact in tf32, so the product is checked against plain f64 numpy
  A = (rng.integers(-1024, 1024, (16, 8)) / 64).astype(np.float32)
  B = (rng.integers(-1024, 1024, (8, 8)) / 32).astype(np.float32)
  C = rng.standard_normal((16, 8)).astype(np.float32)
  # cvt.rna.tf32.f32 cases (round to 10 mantissa bits, ties away from zero): a tie, below half, a negative tie, above a tie
  A[0, :4] = [1 + 2.0 ** -11, 1 + 2.0 ** -12, -(1 + 3 * 2.0 ** -11), 1 + 2.0 ** -10 + 2.0 ** -12]
  want_rounded = np.array([1 + 2.0 ** -10, 1.0, -(1 + 2.0 ** -9), 1 + 2.0 ** -10], np.float32)
  pa, pb, pc, pd, pr = gpu.upload(A), gpu.upload(B), gpu.upload(C), gpu.empty(16 * 8 * 4), gpu.empty(32 * 4)
  assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in gpu.ptx
  gpu.launch(fn(gpu, "mma_tf32"), (1, 1, 1), (32, 1, 1), u64(pa), u64(pb), u64(pc), u64(pd), u64(pr))
  rounded = gpu.download(pr, (32,), np.uint32).view(np.float32)
  np.testing.assert_array_equal(rounded[:4], want_rounded)
  np.testing.assert_array_equal(rounded[4:], A.ravel()[4:32])   # exact in tf32: unchanged
  Ar = A.astype(np.float64)
  Ar[0, :4] = want_rounded
  np.testing.assert_allclose(gpu.download(pd, (16, 8), np.float32), Ar @ B.astype(np.float64) + C, rtol=1e-6, atol=1e-5)

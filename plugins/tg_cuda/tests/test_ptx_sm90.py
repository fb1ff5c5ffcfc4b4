"""sm_90 code NVRTC emits for native bf16 arithmetic, half2 intrinsics and fp8 conversions, against torch CPU."""
import ctypes
import os

import numpy as np
import pytest
import torch
from cuda_testutil import MockGPU, cuda_to_ptx

u64, i32 = ctypes.c_uint64, ctypes.c_int32


@pytest.fixture(scope="module")
def gpu():
  with open(os.path.join(os.path.dirname(__file__), "kernels_sm90.cu")) as f: ptx = cuda_to_ptx(f.read(), "sm_90")
  g = MockGPU()
  g.ptx = ptx
  return g


def _bf16(x: np.ndarray) -> torch.Tensor: return torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)


def _bits(t: torch.Tensor) -> np.ndarray: return t.view(torch.int16).numpy().view(np.uint16)


def test_bf16_arithmetic(gpu):
  assert "fma.rn.bf16" in gpu.ptx
  rng = np.random.default_rng(0)
  n = 100
  a, b = _bf16(rng.standard_normal(n) * 100), _bf16(rng.standard_normal(n))
  pa, pb, po = gpu.upload(_bits(a)), gpu.upload(_bits(b)), gpu.empty(n * 8)
  gpu.launch(gpu.function(gpu.ptx, "bf16_ops"), (1, 1, 1), (128, 1, 1), u64(pa), u64(pb), u64(po), i32(n))
  out = gpu.download(po, (n, 4), np.uint16)
  A, B = a.double(), b.double()
  # each op rounds once from the exact result (bf16 products are exact in f64)
  refs = [(A * B + (A + B).to(torch.bfloat16).double()).to(torch.bfloat16), torch.maximum(a, b), (A * B).to(torch.bfloat16), (A - B).to(torch.bfloat16)]
  for j, r in enumerate(refs): np.testing.assert_array_equal(out[:, j], _bits(r), err_msg=str(j))


def test_half2_intrinsics(gpu):
  rng = np.random.default_rng(1)
  n = 64
  x = (rng.standard_normal((n, 2)) * 30).astype(np.float16)
  px, po = gpu.upload(x), gpu.empty(n * 12)
  gpu.launch(gpu.function(gpu.ptx, "half2_ops"), (1, 1, 1), (64, 1, 1), u64(px), u64(po), i32(n))
  out = gpu.download(po, (n, 3, 2), np.float16)
  X = x.astype(np.float64)
  np.testing.assert_array_equal(out[:, 0], (X * X + (X + X).astype(np.float16).astype(np.float64)).astype(np.float16))
  np.testing.assert_array_equal(out[:, 1], np.maximum(x, -x))
  np.testing.assert_array_equal(out[:, 2], (X * np.abs(X)).astype(np.float16))


def test_fp8_conversions(gpu):
  f = np.concatenate([np.linspace(-500, 500, 201), [1e-3, 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -11, 448, 449, 464, 1e9, -1e9, np.inf, -np.inf, np.nan,
                                                     57344, 61440, 0.0, -0.0]]).astype(np.float32)
  n = len(f)
  pf, po, pc = gpu.upload(f), gpu.empty(n * 8), gpu.empty(n * 2)
  gpu.launch(gpu.function(gpu.ptx, "fp8_ops"), ((n + 127) // 128, 1, 1), (128, 1, 1), u64(pf), u64(po), u64(pc), i32(n))
  out, codes = gpu.download(po, (n, 2), np.float32), gpu.download(pc, (n, 2), np.uint8)
  fin = ~np.isnan(f)
  for j, (dt, mx) in enumerate(((torch.float8_e4m3fn, 448.0), (torch.float8_e5m2, 57344.0))):
    # .satfinite: clamp to the largest finite value, then round to nearest even (torch's cast, which has no saturation)
    ref = torch.from_numpy(np.clip(f, -mx, mx)).to(dt)
    np.testing.assert_array_equal(codes[fin, j], ref.view(torch.uint8).numpy()[fin], err_msg=str(dt))
    np.testing.assert_array_equal(out[fin, j], ref.float().numpy()[fin], err_msg=str(dt))
    assert np.isnan(out[~fin, j]).all()

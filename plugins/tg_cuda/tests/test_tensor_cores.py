"""Tensor cores: the core's TC opt on the CUDA renderers' mma.sync m16n8k16 (fp16/bf16 in, fp32 accumulate, sm_80+).

The matmuls run on DEV=MOCK+CUDA (NVRTC's PTX of the CUDA C renderer's inline mma) and MOCK+CUDA:PTX (the PTX renderer's),
both executed by the PTX interpreter, whose mma.sync places fragment elements as the PTX ISA says (tg_cuda/mock/ptx_interp.py),
and are compared with torch's fp32 matmul of the same (fp16/bf16-exact) inputs. Tolerance: the products are exact and
accumulate in fp32 (error ~ K * 2^-24 * sum|a*b|, below 1e-4 here), so the error is the output's rounding: half an ulp of
fp16 (rtol 2^-11) or bf16 (2^-8), fp32 outputs rtol 1e-5; atol 1e-4 for results near 0. ptxas (the [test] extra's
nvidia-cuda-nvcc) assembles the PTX renderer's mma for sm_80 and sm_90, NVRTC compiles the CUDA C one to cubins for both."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tg_core.codegen import get_program
from tg_core.codegen.opt import KernelOptError, Opt, OptOps, apply_opt
from tg_core.device import Device, RendererCaps
from tg_core.dtype import DType, dtypes
from tg_core.helpers import Context
from tg_core.schedule import create_schedule
from tg_core.tensor import Tensor
from tg_core.uop.ops import UOp
from tg_cuda import compiler as nvrtc
from tg_cuda.compiler import check_ptx, find_ptxas
from tg_cuda.renderer import CUDARenderer
from tg_cuda.renderer_ptx import PTXRenderer

try:
  nvrtc.load_nvrtc()
  HAS_NVRTC = True
except nvrtc.NVRTCNotFoundError: HAS_NVRTC = False
needs_nvrtc = pytest.mark.skipif(not HAS_NVRTC, reason="NVRTC is not installed (pip install tg-cuda[nvrtc])")
needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas is not installed (`pip install nvidia-cuda-nvcc`, the [test] extra)")

# (DEV, the device instance the test opens under it)
DEVS = {"MOCK+CUDA": "CUDA:7", "MOCK+CUDA:PTX": "CUDA:8"}

@pytest.fixture(scope="module", params=list(DEVS), ids=["cuda_c", "ptx"])
def dev(request) -> str:
  if request.param == "MOCK+CUDA" and not HAS_NVRTC: pytest.skip("NVRTC is not installed (pip install tg-cuda[nvrtc])")
  with Context(DEV=request.param):
    d = Device[DEVS[request.param]]
  assert d.iface == "MOCK"
  return DEVS[request.param]

_TOL = {dtypes.float16: 2**-11, dtypes.bfloat16: 2**-8, dtypes.float32: 1e-5}

def _inputs(shape_a: tuple[int, ...], shape_b: tuple[int, ...], dt: DType) -> tuple[np.ndarray, np.ndarray]:
  """Random operands exactly representable in `dt` (as float32 arrays)."""
  rng = np.random.default_rng(sum(shape_a) * 31 + sum(shape_b))
  tdt = torch.float16 if dt == dtypes.float16 else torch.bfloat16
  return tuple(torch.from_numpy(rng.standard_normal(s).astype(np.float32)).to(tdt).float().numpy() for s in (shape_a, shape_b))  # type: ignore[return-value]

def _matmul(a: np.ndarray, b: np.ndarray, dt: DType, dev: str, widen: bool) -> Tensor:
  ta, tb = (Tensor(x, device=dev).cast(dt) for x in (a, b))
  return ta.float() @ tb.float() if widen else ta @ tb

def _program_src(t: Tensor) -> str:
  items, _ = create_schedule(UOp.sink(t.uop))
  return get_program(items[-1].ast, Device[t.device].renderer).src

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("shapes", [((32, 48), (48, 16)), ((16, 16), (16, 8)), ((2, 32, 32), (2, 32, 24))], ids=["32x16x48", "16x8x16", "batched"])
@pytest.mark.parametrize("widen", [False, True], ids=["lowp_out", "fp32_out"])
def test_tc_matmul_matches_torch(dev, dt, shapes, widen):
  """a @ b (fp16/bf16 out, the accumulator rounded once) and a.float() @ b.float() (fp32 out): the heuristic puts both on mma.sync."""
  a, b = _inputs(*shapes, dt)
  c = _matmul(a, b, dt, dev, widen)
  assert "mma.sync.aligned.m16n8k16.row.col.f32." + ("f16" if dt == dtypes.float16 else "bf16") in _program_src(c)
  ref = torch.from_numpy(a) @ torch.from_numpy(b)
  out_dt = dtypes.float32 if widen else dt
  want = ref.to(torch.float16 if out_dt == dtypes.float16 else torch.bfloat16 if out_dt == dtypes.bfloat16 else torch.float32).float().numpy()
  got = c.cast(dtypes.float32).numpy()
  np.testing.assert_allclose(got, ref.numpy(), rtol=_TOL[out_dt], atol=1e-4)
  assert np.abs(got - want).max() <= np.abs(want).max() * 2 * _TOL[out_dt]  # at most one rounding step from torch's rounded result

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("shapes", [((20, 24), (24, 12)), ((16, 20), (20, 8)), ((17, 33), (33, 9)), ((2, 19, 18), (2, 18, 10))],
                         ids=["m20n12k24", "k20", "odd", "batched_odd"])
def test_tc_matmul_odd_sizes(dev, dt, shapes):
  """Sizes that don't divide into 16x8x16 tiles: padded (elements past them are 0, outputs past them not stored), still on mma."""
  a, b = _inputs(*shapes, dt)
  c = _matmul(a, b, dt, dev, True) + 1.0  # an epilogue: its accesses of the padding must be gated off too
  assert "mma.sync" in _program_src(c)
  np.testing.assert_allclose(c.numpy(), (torch.from_numpy(a) @ torch.from_numpy(b)).numpy() + 1.0, rtol=_TOL[dtypes.float32], atol=1e-4)

def test_tc_not_for_a_matvec(dev):
  """A dimension smaller than its tile (a matvec: one row of 16) stays off the tensor cores."""
  a, b = _inputs((1, 64), (64, 32), dtypes.float16)
  c = _matmul(a, b, dtypes.float16, dev, True)
  assert "mma.sync" not in _program_src(c)
  np.testing.assert_allclose(c.numpy(), torch.from_numpy(a) @ torch.from_numpy(b), rtol=_TOL[dtypes.float32], atol=1e-4)

def _matmul_ast(dt: DType) -> UOp:
  # built on PYTHON, whose renderer declares no bfloat16 pair dot product: on a CPU with one (AVX512_BF16) a bf16 matmul is
  # scheduled as pair packing + DPBF16 instead of the product-and-sum the tensor cores take
  a, b = (Tensor.empty(32, 32, dtype=dt, device="PYTHON") for _ in range(2))
  items, _ = create_schedule(UOp.sink((a @ b).uop))
  return items[-1].ast

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=["fp16", "bf16"])
def test_tc_kernels_assemble(arch, dt):
  """The PTX renderer's mma kernel assembles with ptxas, the CUDA C renderer's compiles with NVRTC to a cubin, for sm_80 and sm_90."""
  ptx = PTXRenderer(check=True)
  ptx.select_arch(arch)
  src = get_program(_matmul_ast(dt), ptx).src
  assert "mma.sync.aligned.m16n8k16" in src
  if find_ptxas() is not None: check_ptx(src, arch)
  if HAS_NVRTC:
    cu = CUDARenderer(cubin=True)
    cu.select_arch(arch)
    csrc = get_program(_matmul_ast(dt), cu).src
    assert "mma.sync.aligned.m16n8k16" in csrc
    assert cu.compiler.compile(csrc)
  if find_ptxas() is None and not HAS_NVRTC: pytest.skip("neither ptxas nor NVRTC is installed (the [test] extra)")

def test_no_tensor_cores_before_sm_80():
  ren = PTXRenderer(check=False)
  ren.select_arch("sm_75")
  assert ren.caps.tensor_cores == ()
  assert "mma" not in get_program(_matmul_ast(dtypes.float16), ren).src

def test_tc_opt_errors():
  ast = _matmul_ast(dtypes.float16)
  with pytest.raises(KernelOptError, match="tensor cores"): apply_opt(ast, Opt(OptOps.TC, None, 0), RendererCaps())
  caps = PTXRenderer.caps
  with pytest.raises(KernelOptError, match="tensor cores"): apply_opt(ast, Opt(OptOps.TC, None, 5), caps)
  # a float32 matmul is no sum of fp16 products
  with pytest.raises(KernelOptError, match="products"): apply_opt(_matmul_ast(dtypes.float32), Opt(OptOps.TC, None, 0), caps)
  # TC goes first: after an UPCAST the ranges are no longer the matmul's
  up = apply_opt(ast, Opt(OptOps.UPCAST, 0, 2))
  with pytest.raises(KernelOptError, match="first"): apply_opt(up, Opt(OptOps.TC, None, 0), caps)

def test_fragment_layout_is_checked():
  """A TensorCore layout must place every element of each tile exactly once (here A's element bits 1 and 2 both step 8 rows)."""
  from tg_core.device import TensorCore
  from tg_cuda.renderer import MMA_LAYOUT
  assert TensorCore((16, 8, 16), dtypes.float16, dtypes.float32, 32, MMA_LAYOUT).fragment_size(0) == 8
  lanes, _ = MMA_LAYOUT[0]
  with pytest.raises(ValueError, match="exactly once"):
    TensorCore((16, 8, 16), dtypes.float16, dtypes.float32, 32, ((lanes, ((0, 1), (8, 0), (8, 0))), *MMA_LAYOUT[1:]))
  with pytest.raises(ValueError, match="lane bits"): TensorCore((16, 8, 16), dtypes.float16, dtypes.float32, 16, MMA_LAYOUT)

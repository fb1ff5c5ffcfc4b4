"""Ops.DPBF16 (Tensor.dpbf16) and the bfloat16 matmul that takes K in pairs through it where the renderer declares
caps.native_dpbf16 (tg_cpu_x86 on AVX512_BF16 hosts: vdpbf16ps). References are numpy (float64 sums of the exact bfloat16
products) and torch's float32 matmul of the same bfloat16 values; nothing here compares with numbers tg produced."""
from __future__ import annotations
import contextlib
import dataclasses
from typing import Iterator

import numpy as np
import pytest

from tg_core import Tensor, dtypes
from tg_core.codegen.dpbf16 import dpbf16_expanded, rewrite_dpbf16
from tg_core.device import Device
from tg_core.uop import Ops
from tg_core.dtype import AddrSpace
from tg_core.uop.ops import ParamArg, UOp, exec_alu

def _bf16(x: np.ndarray) -> np.ndarray:
  """float32 values rounded to bfloat16 (nearest even), as float32."""
  u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
  return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)

def _bits(x: np.ndarray) -> np.ndarray: return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint32)

def _pairs(lo: np.ndarray, hi: np.ndarray) -> np.ndarray: return (_bits(lo) | (_bits(hi) << 16)).astype(np.uint32)

def _dot_ref(a_lo: np.ndarray, a_hi: np.ndarray, b_lo: np.ndarray, b_hi: np.ndarray, c: np.ndarray) -> np.ndarray:
  return c.astype(np.float64) + a_lo.astype(np.float64) * b_lo + a_hi.astype(np.float64) * b_hi

@contextlib.contextmanager
def _native_dpbf16(dev: str, on: bool) -> Iterator[None]:
  """The device's renderer with caps.native_dpbf16 set to `on` (a renderer without the feature, or one declaring it)."""
  ren = Device[dev].renderer
  old = ren.caps
  ren.caps = dataclasses.replace(old, native_dpbf16=on)
  try: yield
  finally: ren.caps = old

@pytest.fixture(params=["PYTHON", "CPU", "CPU-lowered"])
def dev(request: pytest.FixtureRequest) -> Iterator[str]:
  """PYTHON (codegen's lowering, interpreted), CPU (vdpbf16ps where the host has AVX512_BF16, else the lowering) and CPU with
  the cap cleared (the lowering, compiled)."""
  name = request.param.split("-")[0]
  try: Device[name]
  except Exception as e: pytest.skip(f"{name} unavailable: {e}")
  if request.param.endswith("lowered"):
    with _native_dpbf16(name, False): yield name
  else: yield name

@pytest.mark.parametrize("n", [1, 3, 16, 37, 64])
def test_dpbf16_matches_numpy(dev: str, n: int) -> None:
  rng = np.random.default_rng(n)
  v = [_bf16(rng.standard_normal(n).astype(np.float32) * 8) for _ in range(4)]
  v[0][:1] = np.float32(3.0e38)  # a product past float32's range: inf, as the exact product overflows
  c = rng.standard_normal(n).astype(np.float32)
  a, b = _pairs(v[0], v[1]), _pairs(v[2], v[3])
  got = Tensor(a, device=dev).dpbf16(Tensor(b, device=dev), Tensor(c, device=dev)).numpy()
  want = _dot_ref(v[0], v[1], v[2], v[3], c)
  fin = np.abs(want) < 2.0 ** 128
  assert np.isinf(got[~fin]).all() and (np.sign(got[~fin]) == np.sign(want[~fin])).all()
  # the products are exact: only the two float32 additions round, each by at most half an ulp of its operands' magnitude
  mag = np.abs(c) + np.abs(v[0].astype(np.float64) * v[2]) + np.abs(v[1].astype(np.float64) * v[3])
  assert (np.abs(got[fin] - want[fin]) <= mag[fin] * 2 ** -23).all()

def test_dpbf16_sum_is_a_bf16_matmul_row(dev: str) -> None:
  """A float32 reduce of dpbf16 steps (the matmul's inner loop), the accumulator folded into the op."""
  rng = np.random.default_rng(1)
  x, w = _bf16(rng.standard_normal((8, 40)).astype(np.float32)), _bf16(rng.standard_normal((40, 24)).astype(np.float32))
  xa, wb = _pairs(x[:, 0::2], x[:, 1::2]), _pairs(w[0::2], w[1::2])  # (8, 20), (20, 24)
  got = Tensor(xa, device=dev).reshape(8, 1, 20).dpbf16(Tensor(wb, device=dev).T.reshape(1, 24, 20)).sum(-1).numpy()
  want = x.astype(np.float64) @ w.astype(np.float64)
  np.testing.assert_allclose(got, want, rtol=0, atol=40 * 2 ** -23 * (np.abs(x) @ np.abs(w)).max())

def test_dpbf16_const_folds_with_the_op_value() -> None:
  a, b = (1.5, -2.0), (0.25, 3.0)
  pa, pb = int(_pairs(np.float32([a[0]]), np.float32([a[1]]))[0]), int(_pairs(np.float32([b[0]]), np.float32([b[1]]))[0])
  assert exec_alu(Ops.DPBF16, dtypes.float32, [pa, pb, 1.0]) == 1.0 + 1.5 * 0.25 - 2.0 * 3.0
  # a product past float32's range is inf, as numpy's float32 arithmetic gives (the fold rounded it to float32 by packing it,
  # which raised OverflowError)
  big = np.float32(3.0e38)
  pbig = int(_pairs(np.float32([big]), np.float32([1.0]))[0])
  with np.errstate(over="ignore"): want = np.float32(0.0) + np.float32(big) * np.float32(big) + np.float32(1.0)
  assert exec_alu(Ops.DPBF16, dtypes.float32, [pbig, pbig, 0.0]) == want == np.inf

def test_dpbf16_lowering_and_accumulator_fold() -> None:
  a, b = UOp.const(dtypes.uint32, 0x3F80_4000), UOp.const(dtypes.uint32, 0x4000_3F80)  # pairs (2, 1) and (1, 2)
  acc = UOp(Ops.PARAM, dtypes.float32, arg=ParamArg(0, dtypes.float32, None, None, None, "acc", AddrSpace.ALU))
  d = UOp(Ops.DPBF16, dtypes.float32, (a, b, UOp.const(dtypes.float32, 0.0)))
  assert (d + acc).op is Ops.ADD
  folded = rewrite_dpbf16(UOp.sink(d + acc), native=True)
  assert [u.src[2] for u in folded.toposort() if u.op is Ops.DPBF16] == [acc]
  lowered = rewrite_dpbf16(UOp.sink(d + acc), native=False)
  assert not any(u.op is Ops.DPBF16 for u in lowered.toposort())
  assert not any(u.op is Ops.DPBF16 for u in dpbf16_expanded(a, b, acc).toposort())

def test_dpbf16_rejects_other_dtypes() -> None:
  with pytest.raises(TypeError, match="uint32"): Tensor([1.0]).dpbf16(Tensor([1], dtype=dtypes.uint32))
  with pytest.raises(TypeError, match="float32"):
    Tensor([1], dtype=dtypes.uint32).dpbf16(Tensor([1], dtype=dtypes.uint32), Tensor([1], dtype=dtypes.int32))

# *** the bfloat16 matmul ***

def _matmul_case(shape_a: tuple[int, ...], shape_b: tuple[int, ...], seed: int) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  return _bf16(rng.standard_normal(shape_a).astype(np.float32)), _bf16(rng.standard_normal(shape_b).astype(np.float32))

def _check_bf16_result(got: np.ndarray, a: np.ndarray, b: np.ndarray, exact_products: bool) -> None:
  """got (bfloat16 values as float32) against torch's float32 matmul of the same bfloat16 values: float32 accumulation
  in another order (at most K ulps of float32 of sum |a||b|) and one rounding to bfloat16 (half an ulp: 2^-9 relative).
  Without exact products (the emulated path rounds each product to bfloat16, as tinygrad does) the products are rounded
  in the reference too."""
  torch = pytest.importorskip("torch")
  k = a.shape[-1]
  if exact_products: ref = (torch.from_numpy(a) @ torch.from_numpy(b)).numpy()
  else:
    prods = _bf16(np.ascontiguousarray(a[..., :, :, None] * b[..., None, :, :], dtype=np.float32))  # each product as bfloat16
    ref = torch.from_numpy(prods).sum(-2).numpy()
  bound = (np.abs(a) @ np.abs(b)).astype(np.float64) * k * 2 ** -23
  err = np.abs(got.astype(np.float64) - ref) - np.abs(ref) * 2 ** -8
  assert (err <= bound).all(), f"max excess {float((err - bound).max())}"

SHAPES = [((64, 64), (64, 64)), ((40, 17), (17, 45)), ((33, 1), (1, 7)), ((130, 255), (255, 97)), ((3, 48, 35), (3, 35, 50)),
          ((2, 1, 64, 30), (5, 30, 19)), ((256, 256), (256, 256))]

@pytest.mark.parametrize("stored", [False, True])
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_bf16_matmul_pairs(sa: tuple[int, ...], sb: tuple[int, ...], stored: bool) -> None:
  """On CPU with the pair dot product (the host's AVX512_BF16, else declared on the renderer for the test: codegen then lowers
  DPBF16): odd K (a zero pad), sizes no tile divides, batched and broadcast batches; bfloat16 out, products exact. `stored`:
  the operands realized first (a stored B of even K has its pairs joined in the matmul kernel, a computed one copied)."""
  a, b = _matmul_case(sa, sb, sum(sa) + sum(sb))
  with _native_dpbf16("CPU", Device["CPU"].renderer.caps.native_dpbf16 or True):
    ta, tb = Tensor(a, device="CPU").cast(dtypes.bfloat16), Tensor(b, device="CPU").cast(dtypes.bfloat16)
    if stored: ta, tb = ta.realize(), tb.realize()
    out = ta @ tb
    assert out.dtype == dtypes.bfloat16 and out.shape == np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])
    assert any(u.op is Ops.DPBF16 for u in out.uop.toposort())
    got = out.float().numpy()
  _check_bf16_result(got, a, b, exact_products=True)

def test_bf16_matmul_transposed_operands_and_float32_out() -> None:
  """A.T @ B.T with float32 out (matmul's dtype): the sums aren't rounded to bfloat16, only the float32 accumulation differs."""
  a, b = _matmul_case((57, 96), (70, 57), 3)
  with _native_dpbf16("CPU", True):
    out = Tensor(a, device="CPU").cast(dtypes.bfloat16).T.matmul(Tensor(b, device="CPU").cast(dtypes.bfloat16).T, dtype=dtypes.float32)
    assert out.dtype == dtypes.float32 and any(u.op is Ops.DPBF16 for u in out.uop.toposort())
    got = out.numpy()
  want = a.T.astype(np.float64) @ b.T.astype(np.float64)
  np.testing.assert_allclose(got, want, rtol=0, atol=float((np.abs(a.T) @ np.abs(b.T)).max()) * 57 * 2 ** -23)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_bf16_matmul_fallback_without_the_feature(device: str) -> None:
  """A renderer without caps.native_dpbf16 (the PYTHON reference; CPU with the cap cleared, as on an AVX2 host) keeps the
  plain product-and-sum: bfloat16 products (emulated on CPU), float32 accumulation."""
  try: Device[device]
  except Exception as e: pytest.skip(f"{device} unavailable: {e}")
  a, b = _matmul_case((40, 33), (33, 24), 5)
  with _native_dpbf16(device, False):
    out = Tensor(a, device=device).cast(dtypes.bfloat16) @ Tensor(b, device=device).cast(dtypes.bfloat16)
    assert out.dtype == dtypes.bfloat16 and not any(u.op is Ops.DPBF16 for u in out.uop.toposort())
    got = out.float().numpy()
  _check_bf16_result(got, a, b, exact_products=False)

def test_bf16_matmul_keeps_the_plain_path_for_grads_and_matvecs() -> None:
  with _native_dpbf16("CPU", True):
    a = Tensor(np.ones((64, 8), np.float32), device="CPU").cast(dtypes.bfloat16)
    w = Tensor(np.ones((8, 4), np.float32), device="CPU").cast(dtypes.bfloat16)
    assert not any(u.op is Ops.DPBF16 for u in (a[:1] @ w).uop.toposort())  # one row: B's copy wouldn't pay
    assert not any(u.op is Ops.DPBF16 for u in (a.reshape(64, 1, 8) @ w.expand(64, 8, 4)).uop.toposort())  # one row per B
    assert any(u.op is Ops.DPBF16 for u in (a.reshape(64, 1, 8) @ w).uop.toposort())  # 64 rows share one B
    assert not any(u.op is Ops.DPBF16 for u in (a @ w.requires_grad_()).uop.toposort())
    assert any(u.op is Ops.DPBF16 for u in (a @ w.detach()).uop.toposort())

@pytest.mark.parametrize("l1", [16 << 10, 4 << 10])
def test_bf16_matmul_packed_panels_join_b_pairs(l1: int) -> None:
  """A matmul big enough for packed panels (caches declared small, so a small one is) of a stored B: B's K-row pairs are
  joined in the matmul kernel's panel copy (PACK of a value of two loads), not in a kernel of their own; columns no tile
  divides. Where the register tile's rows of A over all of K fit the L1 the matmul stores the bfloat16 result itself (one K
  block); else it stores its float32 sum in K blocks and a kernel of its own casts it. Values against torch."""
  from tg_core.codegen.opt import OptOps, hand_coded_optimizations
  from tg_core.engine.realize import run_schedule
  a, b = _matmul_case((192, 512), (512, 300), 11)
  ren = Device["CPU"].renderer
  old = ren.caps
  ren.caps = dataclasses.replace(old, native_dpbf16=old.native_dpbf16 or True, cache_sizes=(l1, 256 << 10, 4 << 20),
                                 big_reduce_tile=old.big_reduce_tile or (16, 6))
  try:
    out = Tensor(a, device="CPU").cast(dtypes.bfloat16).realize() @ Tensor(b, device="CPU").cast(dtypes.bfloat16).realize()
    sched = out.schedule()
    items = [si for si in sched if si.ast.op is Ops.SINK]
    mm = [si for si in items if any(u.op is Ops.DPBF16 for u in si.ast.toposort())]
    fused = ren.caps.big_reduce_tile[1] * 256 * 4 <= l1  # the tile's rows of A's 256 K pairs (uint32)
    assert len(mm) == 1 and len(items) == (2 if fused else 3), "A's pairs, the matmul (B's pairs joined in it)[, the bfloat16 cast]"
    stores = [u for u in mm[0].ast.toposort() if u.op is Ops.STORE]
    assert [u.src[1].dtype for u in stores] == [dtypes.bfloat16 if fused else dtypes.float32]
    opts = [o.op for o in hand_coded_optimizations(mm[0].ast, ren.caps)]
    assert OptOps.PACK in opts and (OptOps.KBLOCK in opts) is not fused
    run_schedule(sched)
    got = out.float().numpy()
  finally: ren.caps = old
  _check_bf16_result(got, a, b, exact_products=True)

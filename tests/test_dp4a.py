"""Ops.DP4A (Tensor.dp4a): c + the sum over the 4 bytes of int32 a and b of int8(a_k) * max(int8(b_k), -127), against numpy on
every renderer: the PYTHON interpreter and CPU run codegen's generic lowering or (CPU with AVX2) vpmaddubsw/vpmaddwd."""
from __future__ import annotations
import numpy as np
import pytest

from tg_core import Tensor, dtypes
from tg_core.device import Device
from tg_core.codegen.dp4a import lower_dp4a
from tg_core.uop import Ops
from tg_core.uop.ops import exec_alu

def _ref(a: np.ndarray, b: np.ndarray, c: np.ndarray | int) -> np.ndarray:
  ab = a.view(np.int8).reshape(*a.shape, 4).astype(np.int64)
  bb = np.maximum(b.view(np.int8).reshape(*b.shape, 4).astype(np.int64), -127)
  return (c + (ab * bb).sum(-1)).astype(np.int32)

def _words(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
  w = rng.integers(0, 256, (*shape, 4), dtype=np.uint8)
  flat = w.reshape(-1)
  n = min(64, flat.size)
  flat[:n] = np.tile(np.array([0x80, 0x81, 0x7f, 0xff], dtype=np.uint8), 16)[:n]  # the extremes: -128, -127, 127, -1
  return w.view(np.int32).reshape(shape)

@pytest.fixture(params=["PYTHON", "CPU"])
def dev(request: pytest.FixtureRequest) -> str:
  try: Device[request.param]
  except Exception as e: pytest.skip(f"{request.param} unavailable: {e}")
  return request.param

@pytest.mark.parametrize("shape", [(1,), (3,), (8,), (4, 37), (16, 64)])
def test_dp4a_matches_numpy(dev: str, shape: tuple[int, ...]) -> None:
  rng = np.random.default_rng(sum(shape))
  a, b, c = _words(rng, shape), _words(rng, shape)[..., ::-1].copy(), rng.integers(-1 << 20, 1 << 20, shape).astype(np.int32)
  got = Tensor(a, device=dev).dp4a(Tensor(b, device=dev), Tensor(c, device=dev)).numpy()
  np.testing.assert_array_equal(got, _ref(a, b, c))

def _ref_unsigned(a: np.ndarray, b: np.ndarray, c: np.ndarray | int) -> np.ndarray:
  ab = a.view(np.uint8).reshape(*a.shape, 4).astype(np.int64)
  bb = b.view(np.int8).reshape(*b.shape, 4).astype(np.int64)  # not saturated
  return ((c + (ab * bb).sum(-1) + 2**31) % 2**32 - 2**31).astype(np.int32)

@pytest.mark.parametrize("shape", [(1,), (8,), (4, 37), (16, 64)])
def test_dp4a_unsigned_a_matches_numpy(dev: str, shape: tuple[int, ...]) -> None:
  """A uint32 a: its bytes unsigned (0..255), b's signed and not saturated (-128 stays -128)."""
  rng = np.random.default_rng(100 + sum(shape))
  a, b, c = _words(rng, shape), _words(rng, shape)[..., ::-1].copy(), rng.integers(-1 << 20, 1 << 20, shape).astype(np.int32)
  got = Tensor(a.view(np.uint32), device=dev).dp4a(Tensor(b, device=dev), Tensor(c, device=dev)).numpy()
  np.testing.assert_array_equal(got, _ref_unsigned(a, b, c))

def test_dp4a_unsigned_a_const_folds() -> None:
  from tg_core.uop.ops import UOp, alu_value
  a, b = 0x80FF7F01, int(np.array([0x80807F02], dtype=np.uint32).view(np.int32)[0])
  u = UOp(Ops.DP4A, dtypes.int32, (UOp.const(dtypes.uint32, a), UOp.const(dtypes.int32, b), UOp.const(dtypes.int32, 5)))
  want = _ref_unsigned(np.array([a], dtype=np.uint32), np.array([b], dtype=np.int32), 5)[0]
  assert alu_value(u, [a, b, 5]) == int(want) == 5 + 0x01 * 2 + 0x7f * 0x7f + 0xff * -128 + 0x80 * -128
  assert u.simplify().op is Ops.CONST and u.simplify().arg == int(want)

def test_dp4a_sum_reduce(dev: str) -> None:
  """An int32 reduce of dp4a steps (the integer matvec's inner loop), rows in the vector lanes."""
  rng = np.random.default_rng(7)
  a, b = _words(rng, (32, 24)), _words(rng, (24,))
  got = Tensor(a, device=dev).dp4a(Tensor(b, device=dev)).sum(-1, dtype=dtypes.int32).numpy()
  np.testing.assert_array_equal(got, _ref(a, np.broadcast_to(b, a.shape).copy(), 0).astype(np.int64).sum(-1).astype(np.int32))

def test_dp4a_const_folds_with_the_op_value() -> None:
  a, b = np.array([0x80FF7F01], dtype=np.uint32).view(np.int32), np.array([0x80807F02], dtype=np.uint32).view(np.int32)
  assert exec_alu(Ops.DP4A, dtypes.int32, [int(a[0]), int(b[0]), 5]) == int(_ref(a, b, 5)[0])

def test_dp4a_lowering_leaves_no_dp4a() -> None:
  t = Tensor([1, 2], dtype=dtypes.int32).dp4a(Tensor([3, 4], dtype=dtypes.int32))
  assert any(u.op is Ops.DP4A for u in t.uop.toposort())
  assert not any(u.op is Ops.DP4A for u in lower_dp4a(t.uop).toposort())

def test_dp4a_rejects_other_dtypes() -> None:
  with pytest.raises(TypeError, match="int32"): Tensor([1.0]).dp4a(Tensor([1], dtype=dtypes.int32))
  with pytest.raises(TypeError, match="int32"): Tensor([1], dtype=dtypes.int32).dp4a(Tensor([1], dtype=dtypes.uint32))
  with pytest.raises(TypeError, match="int32"): Tensor([1], dtype=dtypes.int32).dp4a(Tensor([1], dtype=dtypes.int32), Tensor([1], dtype=dtypes.int64))

def test_dp4a_b_in_range_matches_numpy(dev: str) -> None:
  """b_in_range (the caller promises no byte of b is -128, as an int8 quantization's output): the same value, the saturation skipped."""
  rng = np.random.default_rng(11)
  a, b = _words(rng, (16, 64)), rng.integers(-127, 128, (16, 64, 4)).astype(np.int8).view(np.int32).reshape(16, 64)
  c = rng.integers(-1 << 20, 1 << 20, (16, 64)).astype(np.int32)
  t = Tensor(a, device=dev).dp4a(Tensor(b, device=dev), Tensor(c, device=dev), b_in_range=True)
  assert any(u.op is Ops.DP4A and u.arg is True for u in t.uop.toposort())
  np.testing.assert_array_equal(t.numpy(), _ref(a, b, c))
  assert not any(u.op is Ops.DP4A for u in lower_dp4a(t.uop).toposort())

def test_dp4a_chain_sum_reduce(dev: str) -> None:
  """Two parts summed in one reduce step through the accumulator (a quantized block's nibble halves), as tg_gguf's prefill does."""
  rng = np.random.default_rng(12)
  a0, a1, b0, b1 = _words(rng, (32, 24)), _words(rng, (32, 24)), _words(rng, (24,)), _words(rng, (24,))
  ta0, ta1, tb0, tb1 = (Tensor(v, device=dev) for v in (a0, a1, b0, b1))
  got = ta1.dp4a(tb1, acc=ta0.dp4a(tb0)).sum(-1, dtype=dtypes.int32).numpy()
  want = _ref(a0, np.broadcast_to(b0, a0.shape).copy(), 0).astype(np.int64) + _ref(a1, np.broadcast_to(b1, a1.shape).copy(), 0)
  np.testing.assert_array_equal(got, want.sum(-1).astype(np.int32))

def test_dp4a_accumulator_folds_through_a_chain() -> None:
  """x + DP4A(a1, b1, DP4A(a0, b0, 0)) -> DP4A(a1, b1, DP4A(a0, b0, x)): the reduce's accumulator enters the first step; a chain
  that starts from a nonzero c keeps its add."""
  from tg_core.codegen.dp4a import fold_dp4a
  from tg_core.uop.ops import UOp
  a0, b0, a1, b1, x = (UOp.variable(n, 0, 9, dtypes.int32) for n in ("a0", "b0", "a1", "b1", "x"))
  zero = UOp.const(dtypes.int32, 0)
  chain = UOp(Ops.DP4A, dtypes.int32, (a1, b1, UOp(Ops.DP4A, dtypes.int32, (a0, b0, zero))))
  folded = fold_dp4a(x + chain)
  assert folded.op is Ops.DP4A and folded.src[2].op is Ops.DP4A and folded.src[2].src[2] is x
  other = UOp(Ops.DP4A, dtypes.int32, (a1, b1, UOp(Ops.DP4A, dtypes.int32, (a0, b0, UOp.const(dtypes.int32, 3)))))
  assert fold_dp4a(x + other).op is Ops.ADD

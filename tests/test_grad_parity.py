"""Gradients vs torch at the edges: pow (0, negative, fractional and +-inf exponents, negative bases: torch's NaN pattern), prod
with zeros, acosh, cummax/cummin, comparison ops (no gradient, no crash) and integer minimum/maximum at the dtype's extremes."""
from __future__ import annotations
import math

import numpy as np
import pytest

from helpers import TG_TO_TORCH, helper_test_op, torch
from tg_core.dtype import dtypes
from tg_core.tensor import Tensor

BASES = [-3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0]

@pytest.mark.parametrize("e", [0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, -0.5, 1.5, 2.5, -1.5, math.inf, -math.inf])
def test_pow_const_exponent(e: float) -> None:
  helper_test_op(None, lambda x: x ** e, vals=[np.array(BASES, np.float32)])

@pytest.mark.parametrize("e", [0, 1, 2, 3])
def test_pow_int_exponent(e: int) -> None:
  helper_test_op(None, lambda x: x ** e, vals=[np.array(BASES, np.float32)])

def test_pow_tensor_exponent() -> None:
  # every base with every exponent, both gradients
  b = np.repeat(np.array(BASES, np.float32), 9)
  e = np.tile(np.array([0.0, 1.0, 2.0, -1.0, 0.5, -0.5, 3.0, math.inf, -math.inf], np.float32), len(BASES))
  helper_test_op(None, lambda x, y: x ** y, vals=[b, e])

@pytest.mark.parametrize("b", [0.0, 0.5, 1.0, 2.0, -2.0])
def test_rpow(b: float) -> None:
  # a Python base: the gradient goes to the exponent (log of a negative base is NaN, of 0 is -inf / 0)
  helper_test_op(None, lambda x: b ** x, vals=[np.array([-2.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0], np.float32)])

def test_pow_random() -> None:
  helper_test_op([(3, 5), (3, 5)], lambda x, y: x.abs() ** y, low=-2, high=2)
  helper_test_op([(4, 1), (1, 6)], lambda x, y: x ** y, low=0.1, high=2)

def test_pow_half() -> None:
  helper_test_op(None, lambda x: x ** 2.5, vals=[np.array([0.0, 0.5, 1.5, 3.0], np.float16)], atol=1e-3, grad_atol=1e-2)

def test_pow_no_grad_same_forward() -> None:
  # the forward without autograd is the same decomposition (no custom-gradient call)
  x = np.array(BASES, np.float32)
  np.testing.assert_allclose(Tensor(x).pow(2.5).numpy(), torch.tensor(x).pow(2.5).numpy(), rtol=1e-6, equal_nan=True)
  np.testing.assert_allclose(Tensor(x).pow(-math.inf).numpy(), torch.tensor(x).pow(-math.inf).numpy(), rtol=1e-6, equal_nan=True)

@pytest.mark.parametrize("vals", [[1.0, 2.0, 3.0, 4.0], [1.0, 0.0, 3.0, 4.0], [0.0, 2.0, 0.0, 4.0], [0.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 2.5, -3.0]])
def test_prod_grad_with_zeros(vals: list) -> None:
  helper_test_op(None, lambda x: x.prod(), vals=[np.array(vals, np.float32)])
  helper_test_op(None, lambda x: x.reshape(2, 2).prod(1), vals=[np.array(vals, np.float32)])
  helper_test_op(None, lambda x: x.reshape(2, 2).prod(0, keepdim=True), vals=[np.array(vals, np.float32)])

def test_prod_grad_random() -> None:
  helper_test_op([(3, 4, 5)], lambda x: x.prod(1))
  helper_test_op([(2, 3)], lambda x: x.prod())

def test_acosh_grad() -> None:
  helper_test_op(None, lambda x: x.acosh(), vals=[np.array([1.0, 1.0001, 1.5, 2.0, 10.0, 1e3, 1e5, 3e7], np.float32)], grad_rtol=2e-3)
  helper_test_op([(4, 5)], lambda x: x.acosh(), low=1.01, high=20)
  # below 1: NaN value and NaN gradient, like torch
  helper_test_op(None, lambda x: x.acosh(), vals=[np.array([0.5, -2.0, 0.99], np.float32)])

@pytest.mark.parametrize("op", ["cummax", "cummin"])
@pytest.mark.parametrize("vals", [[1.0, 3.0, 2.0, 3.0, 5.0, 0.0], [2.0, 2.0, 2.0, 2.0, 2.0, 2.0], [5.0, 4.0, 3.0, 2.0, 1.0, 0.0],
                                  [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]])
def test_cummax_cummin_grad(op: str, vals: list) -> None:
  helper_test_op(None, lambda x: getattr(x, op)(0)[0], vals=[np.array(vals, np.float32)])
  helper_test_op(None, lambda x: getattr(x, op)(1)[0], vals=[np.array(vals, np.float32).reshape(2, 3)])

@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_cummax_cummin_grad_random(op: str) -> None:
  helper_test_op([(3, 7)], lambda x: getattr(x, op)(1)[0])
  helper_test_op([(5, 2, 3)], lambda x: getattr(x, op)(0)[0])

@pytest.mark.parametrize("fn", [lambda x, y: x < y, lambda x, y: x > y, lambda x, y: x <= y, lambda x, y: x >= y, lambda x, y: x == y, lambda x, y: x != y])
def test_comparison_no_grad(fn: object) -> None:
  helper_test_op([(3, 4), (3, 4)], fn)  # type: ignore[arg-type]
  # a comparison in a differentiable graph: no gradient through it, no crash
  helper_test_op([(3, 4), (3, 4)], lambda x, y: fn(x, y).float() * x + y)  # type: ignore[operator]
  helper_test_op([(3, 4), (3, 4)], lambda x, y: torch.where(fn(x, y), x, y) if isinstance(x, torch.Tensor) else fn(x, y).where(x, y))  # type: ignore[operator]

def test_comparison_result_has_no_grad() -> None:
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  c = x < 2
  assert not c.requires_grad
  (c.float().sum() + x.sum()).backward()
  assert x.grad is not None
  np.testing.assert_equal(x.grad.numpy(), [1.0, 1.0, 1.0])

INT_DTYPES = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64]

@pytest.mark.parametrize("dt", INT_DTYPES, ids=str)
@pytest.mark.parametrize("op", ["minimum", "maximum"])
def test_minimum_maximum_int_extremes(dt: object, op: str) -> None:
  lo, hi = dtypes.min(dt), dtypes.max(dt)  # type: ignore[arg-type]
  a = [lo, hi, 0, lo, hi, lo + 1, 1]
  b = [hi, lo, lo, lo, hi, lo, hi]
  tdt = TG_TO_TORCH[dt]
  if dt in (dtypes.uint16, dtypes.uint32, dtypes.uint64):  # torch's CPU minimum/maximum lack these: compare with numpy
    from tg_core.dtype import _to_np_dtype
    npdt = _to_np_dtype(dt)  # type: ignore[arg-type]
    ref = getattr(np, op)(np.array(a, npdt), np.array(b, npdt))
  else: ref = getattr(torch, op)(torch.tensor(a, dtype=tdt), torch.tensor(b, dtype=tdt)).numpy()
  ret = getattr(Tensor(a, dtype=dt), op)(Tensor(b, dtype=dt))
  assert ret.dtype == dt
  np.testing.assert_equal(ret.numpy(), ref)

@pytest.mark.parametrize("dt", INT_DTYPES, ids=str)
def test_min_max_reduce_int_extremes(dt: object) -> None:
  lo, hi = dtypes.min(dt), dtypes.max(dt)  # type: ignore[arg-type]
  t = Tensor([hi, lo, 0, hi], dtype=dt)
  assert t.min().item() == lo and t.max().item() == hi
  assert Tensor([lo, lo], dtype=dt).max().item() == lo and Tensor([hi, hi], dtype=dt).min().item() == hi

def test_minimum_maximum_grad() -> None:
  # ties split the gradient in half, like torch
  helper_test_op(None, lambda x, y: x.minimum(y), vals=[np.array([1.0, 2.0, 3.0, -1.0], np.float32), np.array([1.0, 3.0, 2.0, -1.0], np.float32)])
  helper_test_op(None, lambda x, y: x.maximum(y), vals=[np.array([1.0, 2.0, 3.0, -1.0], np.float32), np.array([1.0, 3.0, 2.0, -1.0], np.float32)])

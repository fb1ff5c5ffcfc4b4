"""Elementwise ops against torch: unary math and activations (forward, gradient, NaN/inf), integer pow, division and modulo
sign rules, comparisons and where with NaN, and dtype promotion of binary ops (tensor-tensor for every dtype pair, tensor-scalar)."""
from __future__ import annotations
import itertools
import math

import numpy as np
import pytest
from helpers import TORCH_TO_TG, compare, helper_test_exception, helper_test_op, torch

from tg_core.dtype import dtypes
from tg_core.tensor import Tensor

F = torch.nn.functional
nan, inf = math.nan, math.inf

def f32(*rows) -> list[np.ndarray]: return [np.array(r, dtype=np.float32) for r in rows]

def tg_from_torch(t) -> Tensor:
  """The same data as a tg Tensor of the same dtype (bfloat16 goes through float32, which holds it exactly)."""
  return Tensor(t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy(), dtype=TORCH_TO_TG[t.dtype])

# *** unary math and activations: name -> (torch fxn, tg fxn, low, high) ***
UNARY = {
  "sin": (torch.sin, Tensor.sin, -5, 5), "cos": (torch.cos, Tensor.cos, -5, 5), "tan": (torch.tan, Tensor.tan, -1.4, 1.4),
  "asin": (torch.asin, Tensor.asin, -0.99, 0.99), "acos": (torch.acos, Tensor.acos, -0.99, 0.99), "atan": (torch.atan, Tensor.atan, -5, 5),
  "sinh": (torch.sinh, Tensor.sinh, -5, 5), "cosh": (torch.cosh, Tensor.cosh, -5, 5), "tanh": (torch.tanh, Tensor.tanh, -5, 5),
  "asinh": (torch.asinh, Tensor.asinh, -5, 5), "acosh": (torch.acosh, Tensor.acosh, 1.01, 8), "atanh": (torch.atanh, Tensor.atanh, -0.95, 0.95),
  "erf": (torch.erf, Tensor.erf, -3, 3), "sigmoid": (torch.sigmoid, Tensor.sigmoid, -6, 6),
  "gelu": (lambda x: F.gelu(x, approximate="tanh"), Tensor.gelu, -4, 4), "gelu_none": (F.gelu, lambda x: x.gelu("none"), -4, 4),
  "quick_gelu": (lambda x: x * torch.sigmoid(1.702 * x), Tensor.quick_gelu, -4, 4),
  "elu": (F.elu, Tensor.elu, -4, 4), "celu": (F.celu, Tensor.celu, -4, 4), "selu": (F.selu, Tensor.selu, -4, 4),
  "softplus": (F.softplus, Tensor.softplus, -25, 25), "softsign": (F.softsign, Tensor.softsign, -4, 4), "mish": (F.mish, Tensor.mish, -5, 5),
  "hardsigmoid": (F.hardsigmoid, Tensor.hardsigmoid, -5, 5), "hardswish": (F.hardswish, Tensor.hardswish, -5, 5),
  "hardtanh": (F.hardtanh, Tensor.hardtanh, -2, 2), "leaky_relu": (F.leaky_relu, Tensor.leaky_relu, -3, 3),
  "logsigmoid": (F.logsigmoid, Tensor.logsigmoid, -25, 25), "relu6": (F.relu6, Tensor.relu6, -3, 9), "relu": (torch.relu, Tensor.relu, -3, 3),
  "silu": (F.silu, Tensor.silu, -5, 5), "swish": (F.silu, Tensor.swish, -5, 5),
  "round": (torch.round, Tensor.round, -5, 5), "rsqrt": (torch.rsqrt, Tensor.rsqrt, 0.1, 5),
  "reciprocal": (torch.reciprocal, Tensor.reciprocal, 0.5, 5),
  "log10": (torch.log10, Tensor.log10, 0.01, 100), "log": (torch.log, Tensor.log, 0.01, 100), "exp": (torch.exp, Tensor.exp, -5, 5),
  "abs": (torch.abs, Tensor.abs, -3, 3), "sign": (torch.sign, Tensor.sign, -3, 3), "square": (torch.square, Tensor.square, -3, 3),
}
# the same values for every op; each op's out-of-domain results (NaN) must match too
EDGE = [nan, inf, -inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3.0, -3.0, 6.0, 1e-6, -1e-6, 30.0, -30.0, 100.0, -100.0, 1e30, -1e30]
# torch's own gelu(inf) with approximate="none" is NaN (inf * 0.5 * (1 + 1) in its vectorized kernel); we give inf
EDGE_SKIP = {"gelu_none": [inf]}

@pytest.mark.parametrize("shape", [(), (13,), (2, 3, 5)])
@pytest.mark.parametrize("op", list(UNARY))
def test_unary_float32(op, shape):
  tf, gf, lo, hi = UNARY[op]
  helper_test_op([shape], tf, gf, low=lo, high=hi)

@pytest.mark.parametrize("op", list(UNARY))
def test_unary_float16(op):
  tf, gf, lo, hi = UNARY[op]
  # float16 has a 2**-11 relative rounding step: the tolerances are one or two of those
  helper_test_op([(4, 7)], tf, gf, low=lo, high=hi, dtype=np.float16, atol=2e-3, rtol=2e-3, grad_atol=2e-3, grad_rtol=1e-2)

@pytest.mark.parametrize("op", list(UNARY))
def test_unary_edge_values(op):
  tf, gf, _, _ = UNARY[op]
  vals = [v for v in EDGE if not any(v == s or (math.isnan(v) and math.isnan(s)) for s in EDGE_SKIP.get(op, []))]
  helper_test_op(None, tf, gf, vals=f32(vals), forward_only=True)

# gradients at kinks and at values where an unused branch of a piecewise formula would overflow
GRAD_EDGE = [0.0, 1.0, -1.0, 3.0, -3.0, 6.0, 0.2, -0.2, 0.25, 0.5, -0.5, 20.0, -20.0, 60.0, -60.0, 100.0, -100.0]
@pytest.mark.parametrize("op", [op for op in UNARY if op not in ("asin", "acos", "atanh", "acosh", "rsqrt", "log10", "log", "reciprocal",
                                                                  "exp", "sinh", "cosh", "tan")])
def test_unary_grad_edge_values(op):
  tf, gf, _, _ = UNARY[op]
  helper_test_op(None, tf, gf, vals=f32(GRAD_EDGE))

@pytest.mark.parametrize("op", ["asin", "acos", "atanh"])
def test_unit_domain_grad_edge_values(op):
  tf, gf, _, _ = UNARY[op]
  helper_test_op(None, tf, gf, vals=f32([0.0, 0.1, -0.1, 0.25, -0.25, 0.5, -0.5, 0.9, -0.9, 0.999, -0.999]))

def test_unary_size0():
  for op in ("tanh", "erf", "gelu", "asin", "round", "isinf"):
    fx = (lambda x: x.isinf()) if op == "isinf" else UNARY[op][0]
    gx = (lambda x: x.isinf()) if op == "isinf" else UNARY[op][1]
    helper_test_op([(0, 3)], fx, gx)

def test_unary_float64():
  for op in ("tanh", "erf", "asinh", "atan", "cos", "gelu", "mish", "logsigmoid"):
    tf, gf, lo, hi = UNARY[op]
    helper_test_op([(2, 9)], tf, gf, low=lo, high=hi, dtype=np.float64)

# torch returns the default float for these on integer and bool inputs
INT_OK = ["sin", "cos", "tan", "atan", "sinh", "cosh", "tanh", "asinh", "erf", "sigmoid", "rsqrt", "log10", "round", "abs", "sign",
          "square", "exp", "reciprocal", "hardtanh", "relu6", "relu"]
@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.int64, np.uint8])
@pytest.mark.parametrize("op", INT_OK)
def test_unary_int(op, dtype):
  tf, gf, _, _ = UNARY[op]
  if dtype == np.uint8 and op == "hardtanh": pytest.skip("torch: hardtanh with negative limits on an unsigned type raises")
  low = 0 if dtype == np.uint8 else -4
  helper_test_op([(11,)], tf, gf, low=low, high=5, dtype=dtype)

@pytest.mark.parametrize("op", ["sin", "cos", "tanh", "erf", "sigmoid", "exp", "sign", "atan", "log10"])
def test_unary_bool(op):
  tf, gf, _, _ = UNARY[op]
  helper_test_op(None, tf, gf, vals=[np.array([True, False, True])])

def test_unary_bfloat16():
  x = torch.tensor([-3.0, -1.5, -0.3, 0.0, 0.25, 0.7, 2.0, 4.5], dtype=torch.bfloat16)
  for op in ("tanh", "sigmoid", "erf", "gelu", "cos", "atan", "asinh", "softplus", "mish", "round"):
    tf, gf, _, _ = UNARY[op]
    compare(op, gf(tg_from_torch(x)), tf(x), atol=1e-2, rtol=1e-2)

# *** parametrized activations ***
def test_elu_alpha(): helper_test_op([(3, 7)], lambda x: F.elu(x, alpha=0.3), lambda x: x.elu(alpha=0.3))
def test_celu_alpha(): helper_test_op([(3, 7)], lambda x: F.celu(x, alpha=0.4), lambda x: x.celu(alpha=0.4))
def test_selu_params(): helper_test_op([(3, 7)], lambda x: 1.3 * F.elu(x, alpha=1.1), lambda x: x.selu(alpha=1.1, gamma=1.3))
def test_leaky_relu_slope(): helper_test_op([(3, 7)], lambda x: F.leaky_relu(x, 0.42), lambda x: x.leaky_relu(neg_slope=0.42))
def test_softplus_beta(): helper_test_op([(3, 7)], lambda x: F.softplus(x, beta=3.0), lambda x: x.softplus(beta=3.0), low=-12, high=12)
def test_hardtanh_bounds(): helper_test_op([(3, 7)], lambda x: F.hardtanh(x, -0.5, 1.5), lambda x: x.hardtanh(-0.5, 1.5), low=-3, high=3)
def test_hardtanh_bounds_grad(): helper_test_op(None, lambda x: F.hardtanh(x, -0.5, 1.5), lambda x: x.hardtanh(-0.5, 1.5), vals=f32([-0.5, 1.5, 0.]))
def test_hardsigmoid_params():
  helper_test_op([(3, 7)], lambda x: torch.clamp(0.3 * x + 0.4, 0, 1), lambda x: x.hardsigmoid(alpha=0.3, beta=0.4), low=-4, high=4)
def test_gelu_bad_approximate():
  helper_test_exception([(3,)], lambda x: F.gelu(x, approximate="bad"), lambda x: x.gelu(approximate="bad"), RuntimeError)

# *** binary float ops ***
def test_lerp_scalar_weights():
  for w in (0.0, 0.3, 0.5, 0.7, 1.0, 1.5, -0.5):
    helper_test_op([(3, 5), (3, 5)], lambda a, b, w=w: torch.lerp(a, b, w), lambda a, b, w=w: a.lerp(b, w))
def test_lerp_tensor_weight():
  helper_test_op([(3, 5), (3, 5), (3, 5)], torch.lerp, Tensor.lerp, low=-1, high=2)
def test_lerp_broadcast():
  helper_test_op([(4, 1), (1, 6), (6,)], torch.lerp, Tensor.lerp, low=0, high=1)
def test_lerp_exact_endpoints():
  helper_test_op(None, lambda a, b: torch.lerp(a, b, 1.0), lambda a, b: a.lerp(b, 1.0), vals=f32([1e8, -3.0, 0.1], [1.0, 7.3, 1e-8]))

@pytest.mark.parametrize("bounds", [(-1, 1), (-0.5, None), (None, 0.5), (1.0, -1.0), (0, 0)])
def test_clamp(bounds):
  helper_test_op([(5, 6)], lambda x: torch.clamp(x, *bounds), lambda x: x.clamp(*bounds))
  helper_test_op([(5, 6)], lambda x: torch.clip(x, *bounds), lambda x: x.clip(*bounds))

def test_clamp_tensor_bounds():
  helper_test_op([(4, 5), (4, 5), (5,)], lambda x, lo, hi: torch.clamp(x, lo, hi + 1), lambda x, lo, hi: x.clamp(lo, hi + 1))
def test_clamp_bounds_grad():
  # torch's clamp passes the gradient at the bounds (inclusive), unlike hardtanh
  helper_test_op(None, lambda x: x.clamp(-1.0, 2.0), vals=f32([-1.0, 2.0, 0.0, -3.0, 3.0]))
def test_clamp_nan(): helper_test_op(None, lambda x: x.clamp(-1.0, 1.0), vals=f32([nan, inf, -inf, 0.5]), forward_only=True)
def test_clamp_int():
  helper_test_op([(9,)], lambda x: x.clamp(-2, 3), dtype=np.int32, low=-6, high=6)
  helper_test_op([(9,)], lambda x: x.clamp(min=-1.5), lambda x: x.clamp(-1.5), dtype=np.int32, low=-6, high=6)
def test_clamp_none():
  helper_test_exception([(3,)], lambda x: torch.clamp(x), lambda x: x.clamp(), RuntimeError)

def test_copysign():
  helper_test_op([(4, 5), (4, 5)], torch.copysign, Tensor.copysign)
  mags, signs = [1.0, 2.0, -3.0, 0.0, -0.0, inf, nan, 4.0], [-0.0, 0.0, 0.0, -1.0, -2.0, -1.0, -1.0, inf]
  helper_test_op(None, torch.copysign, Tensor.copysign, vals=f32(mags, signs), forward_only=True)
  helper_test_op([(4, 5)], lambda x: torch.copysign(x, -2.0), lambda x: x.copysign(-2.0))
def test_copysign_int_float():
  helper_test_op(None, torch.copysign, Tensor.copysign, vals=[np.array([1, -2, 3], dtype=np.int32), np.array([-1.0, 1.0, -0.0], dtype=np.float32)])

def test_logaddexp():
  helper_test_op([(4, 5), (4, 5)], torch.logaddexp, Tensor.logaddexp, low=-30, high=30)
  helper_test_op([(4, 1), (5,)], torch.logaddexp, Tensor.logaddexp)
def test_logaddexp_edge():
  a = [inf, inf, -inf, -inf, 1.0, nan, 100.0, 0.0, 2.0]
  b = [inf, -inf, -inf, 1.0, inf, 1.0, -100.0, 0.0, 2.0]
  helper_test_op(None, torch.logaddexp, Tensor.logaddexp, vals=f32(a, b), forward_only=True)
  helper_test_op(None, torch.logaddexp, Tensor.logaddexp, vals=f32([100.0, 0.0, 2.0, -50.0], [-100.0, 0.0, 2.0, 50.0]))

@pytest.mark.parametrize("fxn", [torch.maximum, torch.minimum])
def test_maximum_minimum_nan(fxn):
  tg = Tensor.maximum if fxn is torch.maximum else Tensor.minimum
  helper_test_op(None, fxn, tg, vals=f32([nan, 1.0, nan, inf, -inf, 2.0], [1.0, nan, nan, -inf, 3.0, 2.0]), forward_only=True)
  helper_test_op(None, fxn, tg, vals=f32([1.0, 2.0, 3.0, -1.0], [1.0, -2.0, 4.0, -1.0]))  # ties split the gradient like torch
  helper_test_op([(5,), (5,)], fxn, tg, dtype=np.int32, low=-9, high=9)

# *** classification ***
CLASSIFY_VALS = [nan, inf, -inf, 0.0, -0.0, 1.0, -1e30, 65504.0]
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_isinf_isnan_isfinite(dtype):
  with np.errstate(over="ignore"): v = [np.array(CLASSIFY_VALS).astype(dtype)]  # -1e30 is -inf in float16
  for tf, gf in [(torch.isinf, Tensor.isinf), (torch.isnan, Tensor.isnan), (torch.isfinite, Tensor.isfinite),
                 (torch.isposinf, lambda x: x.isinf(detect_negative=False)), (torch.isneginf, lambda x: x.isinf(detect_positive=False)),
                 (lambda x: torch.zeros_like(x, dtype=torch.bool), lambda x: x.isinf(False, False))]:
    helper_test_op(None, tf, gf, vals=v, forward_only=True)

@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_])
def test_isinf_isnan_isfinite_ints(dtype):
  v = [np.array([0, 1, 1, 0], dtype=dtype)]
  for tf, gf in [(torch.isinf, Tensor.isinf), (torch.isnan, Tensor.isnan), (torch.isfinite, Tensor.isfinite)]:
    helper_test_op(None, tf, gf, vals=v, forward_only=True)

def test_isclose():
  a = [1.0, 1.0, 1e-7, 1e-9, nan, nan, inf, inf, -inf, 1e10, 100.0]
  b = [1.0 + 1e-6, 1.1, 0.0, 0.0, nan, 1.0, inf, -inf, 1.0, 1.00001e10, 100.01]
  for kw in ({}, {"equal_nan": True}, {"rtol": 1e-3}, {"atol": 0.05}, {"rtol": 0, "atol": 0}):
    helper_test_op(None, lambda x, y, kw=kw: torch.isclose(x, y, **kw), lambda x, y, kw=kw: x.isclose(y, **kw), vals=f32(a, b), forward_only=True)
  helper_test_op(None, torch.isclose, Tensor.isclose, vals=[np.array([1, 2, 3, 100000], dtype=np.int32), np.array([1, 3, 3, 100001], dtype=np.int32)])
  helper_test_op(None, lambda x, y: torch.isclose(x, y, atol=1), lambda x, y: x.isclose(y, atol=1),
                 vals=[np.array([1, 2, 3, -5], dtype=np.int64), np.array([1, 3, 5, -4], dtype=np.int64)])

def test_allclose():
  for a, b, kw in [([1.0, 2.0], [1.0, 2.0 + 1e-6], {}), ([1.0, 2.0], [1.0, 2.1], {}), ([nan], [nan], {}), ([nan], [nan], {"equal_nan": True}),
                   ([inf, 1.0], [inf, 1.0], {}), ([1.0], [1.5], {"atol": 0.6}), ([], [], {})]:
    ta, tb = torch.tensor(a), torch.tensor(b)
    ret = Tensor(a, dtype=dtypes.float32).allclose(Tensor(b, dtype=dtypes.float32), **kw)
    assert type(ret) is bool and ret == torch.allclose(ta, tb, **kw), (a, b, kw)

# *** round ***
def test_round_half_to_even():
  vals = [0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, -3.5, 0.49999997, -0.49999997, 2.4999998, 8388609.0, 16777216.0, 1e30, -0.4, 0.0, -0.0,
          nan, inf, -inf]
  helper_test_op(None, torch.round, Tensor.round, vals=f32(vals))
  helper_test_op(None, torch.round, Tensor.round, vals=[np.array([0.5, 1.5, 2.5, -2.5, 1023.5, 2047.0, 0.4998], dtype=np.float16)])
def test_round_int():
  helper_test_op([(9,)], torch.round, Tensor.round, dtype=np.int32, low=-100, high=100)

# *** integer pow ***
INT_DTYPES = [np.int8, np.uint8, np.int16, np.int32, np.int64]
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_int_pow_table(dtype):
  lo = 0 if dtype == np.uint8 else -5
  base, exp = np.array(list(itertools.product(range(lo, 6), range(0, 10)))).T
  helper_test_op(None, torch.pow, Tensor.pow, vals=[base.astype(dtype), exp.astype(dtype)])

@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_int_pow_negative_exponent(dtype):
  base, exp = np.array(list(itertools.product(range(-3, 4), range(-4, 1)))).T
  helper_test_op(None, torch.pow, Tensor.pow, vals=[base.astype(dtype), exp.astype(dtype)])

def test_int_pow_overflow_wraps():
  helper_test_op(None, torch.pow, Tensor.pow, vals=[np.array([3, 7, -3, 2, 255], dtype=np.int64), np.array([40, 25, 41, 63, 9], dtype=np.int64)])
  helper_test_op(None, torch.pow, Tensor.pow, vals=[np.array([3, 7, 2, 255], dtype=np.uint8), np.array([5, 3, 8, 2], dtype=np.uint8)])
  helper_test_op(None, torch.pow, Tensor.pow, vals=[np.array([3, -7, 2, -128], dtype=np.int8), np.array([5, 3, 7, 1], dtype=np.int8)])

@pytest.mark.parametrize("e", [0, 1, 2, 3, 7, 10])
def test_int_pow_scalar(e):
  helper_test_op([(11,)], lambda x, e=e: x ** e, dtype=np.int32, low=-7, high=8)
  helper_test_op([(11,)], lambda x, e=e: e ** x, dtype=np.int32, low=-3, high=8)

def test_int_pow_negative_scalar_raises():
  helper_test_exception(None, lambda x: x ** -1, lambda x: x ** -1, RuntimeError, vals=[np.array([1, 2, 3], dtype=np.int32)])
  helper_test_exception(None, lambda x: x.pow(-2), lambda x: x.pow(-2), RuntimeError, vals=[np.array([1, 2, 3], dtype=np.int64)])

def test_int_pow_mixed():
  # int8 ** int32 -> int32
  helper_test_op(None, torch.pow, Tensor.pow, vals=[np.array([2, 3, -4], dtype=np.int8), np.array([3, 2, 2], dtype=np.int32)])
  helper_test_op(None, lambda x: x ** 2.5, vals=[np.array([1, 4, 9], dtype=np.int32)])  # int ** float -> float
  helper_test_op(None, lambda x: x ** True, vals=[np.array([1, 4, -9], dtype=np.int16)])

def test_bool_pow():
  # torch has no bool ** bool tensor kernel, but a bool tensor ** Python bool stays bool
  helper_test_op(None, lambda x: x ** True, vals=[np.array([True, False])])
  helper_test_op(None, lambda x: x ** False, vals=[np.array([True, False])])
  ret = Tensor([True, True, False, False]) ** Tensor([True, False, True, False])
  assert ret.dtype == dtypes.bool and ret.tolist() == [True, True, False, True]

def test_float_pow():
  helper_test_op([(3, 5), (3, 5)], torch.pow, Tensor.pow, low=0.1, high=3)
  bases, exps = [-2.0, -2.0, -8.0, 0.0, 0.0, 2.0, nan], [2.0, 3.0, 1 / 3, 0.0, -1.0, 0.5, 0.0]
  helper_test_op(None, torch.pow, Tensor.pow, vals=f32(bases, exps), forward_only=True)

# *** division and modulo: sign rules ***
A_INT = [7, -7, 7, -7, 6, -6, 0, 1, -1, 5, -5, 100, -100]
B_INT = [2, 2, -2, -2, 3, -3, 5, -1, 1, 7, -7, 3, 7]
DIV_OPS = {
  "floordiv": (lambda a, b: a // b), "mod": (lambda a, b: a % b), "fmod": (lambda a, b: a.fmod(b)),
  "trunc": (lambda a, b: a.div(b, rounding_mode="trunc")), "floor": (lambda a, b: a.div(b, rounding_mode="floor")), "truediv": (lambda a, b: a / b),
}
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64])
@pytest.mark.parametrize("op", list(DIV_OPS))
def test_div_mod_signs(op, dtype):
  vals = [np.array(A_INT, dtype=dtype), np.array(B_INT, dtype=dtype)]
  tol = {"atol": 2e-3, "rtol": 2e-3, "grad_atol": 2e-3, "grad_rtol": 5e-3} if dtype == np.float16 else {}  # float16 steps are 2**-11
  helper_test_op(None, DIV_OPS[op], vals=vals, forward_only=op in ("floordiv", "mod", "fmod", "trunc", "floor"), **tol)

@pytest.mark.parametrize("op", list(DIV_OPS))
def test_div_mod_uint8(op):
  helper_test_op(None, DIV_OPS[op], vals=[np.array([7, 200, 0, 255, 9], dtype=np.uint8), np.array([2, 7, 3, 16, 9], dtype=np.uint8)])

@pytest.mark.parametrize("op", list(DIV_OPS))
@pytest.mark.parametrize("scalar", [3, -3, 2.5, -2.5])
def test_div_mod_scalar(op, scalar):
  helper_test_op(None, lambda a, s=scalar: DIV_OPS[op](a, s), vals=[np.array(A_INT, dtype=np.int32)], forward_only=True)
  helper_test_op(None, lambda a, s=scalar: DIV_OPS[op](a, s), vals=f32([7.5, -7.5, 3.0, -3.0, 0.0, 1.25]), forward_only=True)
  if op in ("floordiv", "mod", "truediv"):
    helper_test_op(None, lambda a, s=scalar: DIV_OPS[op](s, a), vals=[np.array(B_INT, dtype=np.int32)], forward_only=True)

def test_div_mod_fractional_floats():
  a, b = [5.5, -5.5, 5.5, -5.5, 0.75, -0.75, 1e-3], [2.0, 2.0, -2.0, -2.0, 0.5, 0.25, 3.0]
  for op in DIV_OPS: helper_test_op(None, DIV_OPS[op], vals=f32(a, b), forward_only=op != "truediv")

def test_float_div_by_zero():
  a, b = [1.0, -1.0, 0.0, inf, nan, 2.0], [0.0, 0.0, 0.0, 0.0, 0.0, -0.0]
  helper_test_op(None, lambda x, y: x / y, vals=f32(a, b), forward_only=True)
  helper_test_op(None, lambda x, y: x % y, vals=f32(a, b), forward_only=True)
  helper_test_op(None, lambda x, y: x.fmod(y), vals=f32(a, b), forward_only=True)

def test_int_true_div_by_out_of_range_scalar():
  # torch divides by the Python int in float; it must not wrap to the tensor's dtype first
  helper_test_op(None, lambda x: x / -1, vals=[np.array([1, 200, 0], dtype=np.uint8)])
  helper_test_op(None, lambda x: x / 300, vals=[np.array([1, -3, 127], dtype=np.int8)])
  helper_test_op(None, lambda x: 300 / x, vals=[np.array([1, -3, 127], dtype=np.int8)])

def test_div_grad():
  helper_test_op([(4, 5), (4, 5)], lambda a, b: a / b, low=0.5, high=3)
  helper_test_op([(4, 5), (5,)], lambda a, b: a % b, low=0.5, high=3)
  helper_test_op([(4, 5), (5,)], lambda a, b: a.fmod(b), low=0.5, high=3)

# *** comparisons and where with NaN ***
CMP = {"lt": lambda a, b: a < b, "gt": lambda a, b: a > b, "le": lambda a, b: a <= b, "ge": lambda a, b: a >= b,
       "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}
CMP_A = [nan, 1.0, 2.0, -1.0, inf, -inf, 0.0, -0.0, nan, inf]
CMP_B = [1.0, nan, 2.0, 0.0, inf, 1.0, -0.0, 0.0, nan, -inf]
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("op", list(CMP))
def test_compare_nan(op, dtype):
  helper_test_op(None, CMP[op], vals=[np.array(CMP_A, dtype=dtype), np.array(CMP_B, dtype=dtype)])
  helper_test_op(None, lambda a: CMP[op](a, 1.0), vals=[np.array(CMP_A, dtype=dtype)])
  helper_test_op(None, lambda a: CMP[op](a, nan), vals=[np.array(CMP_A, dtype=dtype)])
  helper_test_op(None, lambda a: CMP[op](1.0, a), vals=[np.array(CMP_A, dtype=dtype)])

@pytest.mark.parametrize("op", list(CMP))
def test_compare_int_float_mixed(op):
  helper_test_op(None, CMP[op], vals=[np.array([1, 2, 3, -4, 0], dtype=np.int32), np.array([1.5, 2.0, nan, -4.0, -0.0], dtype=np.float32)])
  helper_test_op(None, lambda a: CMP[op](a, 2), vals=[np.array([1, 2, 3, -4], dtype=np.int8)])
  helper_test_op(None, lambda a: CMP[op](a, 2.5), vals=[np.array([1, 2, 3, -4], dtype=np.int8)])

WHERE_X = [nan, 1.0, 2.0, -1.0]
@pytest.mark.parametrize("cond", ["lt", "ge", "le", "gt", "ne", "eq", "isnan"])
def test_where_nan_condition(cond):
  c = (lambda x: x != x) if cond == "isnan" else (lambda x, op=CMP[cond]: op(x, 1))
  vals = f32(WHERE_X, [10.0, 20.0, 30.0, 40.0], [-1, -2, -3, -4])
  helper_test_op(None, lambda x, a, b: torch.where(c(x), a, b), lambda x, a, b: c(x).where(a, b), vals=vals)
  helper_test_op(None, lambda x: torch.where(c(x), x, 3.0), lambda x: c(x).where(x, 3.0), vals=f32(WHERE_X))
  helper_test_op(None, lambda x: torch.where(c(x), 2.5, x), lambda x: c(x).where(2.5, x), vals=f32(WHERE_X))

def test_where_float_condition():
  # a float condition is true where it is nonzero (NaN included)
  vals = f32([nan, 0.0, -0.0, 2.0], [1, 2, 3, 4], [5, 6, 7, 8])
  helper_test_op(None, lambda x, a, b: torch.where(x != 0, a, b), lambda x, a, b: x.where(a, b), vals=vals)

def test_where_grad():
  helper_test_op([(3, 4), (3, 4), (3, 4)], lambda c, a, b: torch.where(c > 0, a, b), lambda c, a, b: (c > 0).where(a, b))

# *** dtype promotion: every pair, tensor (op) tensor ***
PROMO_DTYPES = [torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
                torch.float16, torch.bfloat16, torch.float32, torch.float64]
PROMO_OPS = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "truediv": lambda a, b: a / b, "maximum": lambda a, b: a.maximum(b),
             "lt": lambda a, b: a < b, "eq": lambda a, b: a == b, "where": lambda a, b: (a != 0).where(a, b)}

def _promo_inputs(dt):
  if dt == torch.bool: return torch.tensor([True, False, True, True])
  if dt == torch.uint8: return torch.tensor([1, 2, 200, 7], dtype=dt)
  if dt.is_floating_point: return torch.tensor([1.5, -2.0, 3.25, 0.0], dtype=dt)
  return torch.tensor([1, -2, 5, 7], dtype=dt)

@pytest.mark.parametrize("da,db", list(itertools.product(PROMO_DTYPES, PROMO_DTYPES)), ids=lambda d: str(d).replace("torch.", ""))
def test_binary_promotion(da, db):
  ta, tb = _promo_inputs(da), _promo_inputs(db).flip(0)
  ga, gb = tg_from_torch(ta), tg_from_torch(tb)
  for name, fxn in PROMO_OPS.items():
    tfxn = (lambda a, b: torch.where(a != 0, a, b)) if name == "where" else (lambda a, b: torch.maximum(a, b)) if name == "maximum" else fxn
    # float16 / bfloat16 results: torch computes in float32 and rounds once, tg rounds operands of mixed precision first
    tol = 1e-2 if torch.float16 in (da, db) or torch.bfloat16 in (da, db) else 1e-6
    compare(f"{name} {da} {db}", fxn(ga, gb), tfxn(ta, tb), atol=tol, rtol=tol)
  if da == db == torch.bool:
    helper_test_exception(None, lambda a, b: a - b, lambda a, b: a - b, RuntimeError, vals=[np.array([True, False]), np.array([False, False])])
  elif torch.bool not in (da, db): compare(f"sub {da} {db}", ga - gb, ta - tb, atol=1e-2, rtol=1e-2)

# *** dtype promotion: tensor (op) Python scalar ***
SCALARS = [True, 3, -2, 2.5]
SCALAR_OPS = {"add": lambda a, s: a + s, "radd": lambda a, s: s + a, "mul": lambda a, s: a * s, "truediv": lambda a, s: a / s,
              "rtruediv": lambda a, s: s / a, "lt": lambda a, s: a < s, "ge": lambda a, s: a >= s, "eq": lambda a, s: a == s,
              "maximum": lambda a, s: a.maximum(s), "where": lambda a, s: (a != 0).where(a, s)}

@pytest.mark.parametrize("scalar", SCALARS, ids=repr)
@pytest.mark.parametrize("dt", PROMO_DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_scalar_promotion(dt, scalar):
  ta = _promo_inputs(dt) if dt == torch.bool else _promo_inputs(dt).abs() + 1  # nonzero: r-division stays finite
  ga = tg_from_torch(ta)
  for name, fxn in SCALAR_OPS.items():
    tfxn = {"maximum": lambda a, s: torch.maximum(a, torch.tensor(s)), "where": lambda a, s: torch.where(a != 0, a, s)}.get(name, fxn)
    if name == "maximum" and type(scalar) is not bool: tfxn = lambda a, s: torch.clamp(a, min=s)  # noqa: E731 (torch.maximum wants a tensor)
    out, ref = fxn(ga, scalar), tfxn(ta, scalar)
    if dt == torch.bool and type(scalar) is int and ref.dtype == torch.int64:
      # tinygrad's default int is int32, so bool (op) int is int32 where torch gives int64
      assert out.dtype == dtypes.int32, f"{name}: {out.dtype}"
      ref = ref.to(torch.int32)
    tol = 1e-2 if dt in (torch.float16, torch.bfloat16) else 1e-6
    compare(f"{name} {dt} {scalar!r}", out, ref, atol=tol, rtol=tol)

def test_default_int_is_int32():
  # tinygrad's documented difference from torch: Python ints make int32 tensors
  assert Tensor([1, 2]).dtype == dtypes.int32 and (Tensor([True]) + 1).dtype == dtypes.int32
  assert (Tensor([1.0]) + 1).dtype == dtypes.float32 and (Tensor([1, 2], dtype=dtypes.int8) + 1).dtype == dtypes.int8

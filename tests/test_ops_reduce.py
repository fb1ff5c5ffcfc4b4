"""Reduce ops vs torch CPU: sum/prod/max/min/mean, arg reductions, any/all, scans, softmax family, moments, sort/topk, einsum.
tg index outputs are int32 (tinygrad's default int), so torch's int64 results are compared after `.int()`; integer sums and
scans follow tinygrad's accumulate dtype (int32 for small ints and bool), so torch's results are cast to it."""
import math

import numpy as np
import pytest

from helpers import helper_test_exception, helper_test_op, torch
from tg_core.dtype import dtypes
from tg_core.tensor import Tensor

NAN, INF = math.nan, math.inf

# *** sum / prod / max / min / mean ***
AXES = [((), None), ((7,), None), ((7,), 0), ((7,), -1), ((3, 5), None), ((3, 5), 0), ((3, 5), 1), ((3, 5), -2), ((2, 3, 5), (0, 2)),
        ((2, 3, 5), (-1, -3)), ((1, 7, 1), 1), ((2, 3, 5), (0, 1, 2)), ((), 0), ((), -1)]

@pytest.mark.parametrize("shape,axis", AXES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum(shape, axis, keepdim):
  if axis is None: helper_test_op([shape], lambda x: x.sum() if not keepdim else x.sum(tuple(range(x.ndim)), keepdim=True),
                                  lambda x: x.sum(keepdim=keepdim))
  else: helper_test_op([shape], lambda x: x.sum(axis, keepdim=keepdim))

@pytest.mark.parametrize("shape,axis", AXES[:12])
def test_max_min_mean_prod(shape, axis):
  for fn in ("max", "min", "mean", "prod"):
    if fn == "prod" and isinstance(axis, tuple): continue  # torch.prod takes a single dim
    tfn = (lambda x, fn=fn: getattr(x, fn)()) if axis is None else \
      (lambda x, fn=fn: getattr(torch, {"max": "amax", "min": "amin"}.get(fn, fn))(x, axis))
    helper_test_op([shape], tfn, (lambda x, fn=fn: getattr(x, fn)()) if axis is None else (lambda x, fn=fn: getattr(x, fn)(axis)),
                   low=0.5, high=2)

def test_max_min_keepdim():
  helper_test_op([(3, 4, 5)], lambda x: torch.amax(x, (0, 2), keepdim=True), lambda x: x.max((0, 2), keepdim=True))
  helper_test_op([(3, 4, 5)], lambda x: torch.amin(x, -1, keepdim=True), lambda x: x.min(-1, keepdim=True))
  helper_test_op([(3, 4, 5)], lambda x: x.mean((1, 2), keepdim=True))

def test_max_ties_gradient():
  # the gradient is split evenly between tied maxima (torch amax)
  helper_test_op(None, lambda x: torch.amax(x, 1), lambda x: x.max(1), vals=[[[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]])
  helper_test_op(None, lambda x: torch.amin(x, 0), lambda x: x.min(0), vals=[[[1.0, 3.0, 0.5], [1.0, 2.0, 0.5]]])

@pytest.mark.parametrize("fn", ["max", "min"])
def test_max_min_nan_propagates(fn):
  vals = [[[1.0, NAN, 3.0], [-1.0, 2.0, 0.0], [NAN, NAN, 1.0]]]
  helper_test_op(None, lambda x: getattr(torch, "a" + fn)(x, 1), lambda x: getattr(x, fn)(1), vals=vals, forward_only=True)
  helper_test_op(None, lambda x: getattr(x, fn)(), vals=vals, forward_only=True)

@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int32, np.int64, np.bool_])
def test_sum_int_dtype(dt):
  # tinygrad: small ints and bool sum to int32 (uint8 to uint32), wider ints keep their dtype; torch: int64
  out = {np.int8: torch.int32, np.uint8: torch.uint32, np.int32: torch.int32, np.int64: torch.int64, np.bool_: torch.int32}[dt]
  helper_test_op([(3, 7)], lambda x: x.sum(1).to(out), lambda x: x.sum(1), dtype=dt, low=0, high=100)
  helper_test_op([(3, 7)], lambda x: x.sum().to(out), lambda x: x.sum(), dtype=dt, low=0, high=100)

def test_sum_dtype_arg():
  helper_test_op([(3, 5)], lambda x: x.sum(1, dtype=torch.float64), lambda x: x.sum(1, dtype=dtypes.float64))
  helper_test_op([(3, 5)], lambda x: x.sum(dtype=torch.int32), lambda x: x.sum(dtype=dtypes.int32), dtype=np.int8, low=-100, high=100)
  helper_test_op([(4, 3)], lambda x: x.sum(0), dtype=np.float16, atol=1e-2)

def test_max_int_bool():
  helper_test_op([(3, 5)], lambda x: torch.amax(x, 1), lambda x: x.max(1), dtype=np.int32, low=-100, high=100)
  helper_test_op([(3, 5)], lambda x: torch.amin(x, 0), lambda x: x.min(0), dtype=np.uint8, low=0, high=255)
  helper_test_op([(3, 5)], lambda x: torch.amax(x, 1), lambda x: x.max(1), dtype=np.bool_)
  helper_test_op([(3, 5)], lambda x: torch.amin(x, 1), lambda x: x.min(1), dtype=np.bool_)
  helper_test_op([(3, 5)], lambda x: x.min(), dtype=np.int64, low=-2**40, high=2**40)

def test_mean_int():
  # tinygrad: the mean of ints is a default float (torch raises)
  helper_test_op([(3, 5)], lambda x: x.float().mean(1), lambda x: x.mean(1), dtype=np.int32, low=-10, high=10)

def test_empty_reductions():
  helper_test_op([(0,)], lambda x: x.sum())
  helper_test_op([(3, 0)], lambda x: x.sum(1))
  helper_test_op([(3, 0)], lambda x: x.sum(0))
  helper_test_op([(3, 0)], lambda x: x.prod(1), forward_only=True)
  helper_test_op([(0, 3)], lambda x: torch.amax(x, 1), lambda x: x.max(1), forward_only=True)
  helper_test_op([(0, 3)], lambda x: x.mean(0), forward_only=True)

def test_empty_max_raises():
  helper_test_exception([(0,)], lambda x: x.max(), lambda x: x.max(), expected=RuntimeError)
  helper_test_exception([(0, 3)], lambda x: x.max(0), lambda x: x.max(0), expected=IndexError)
  helper_test_exception([(0, 3)], lambda x: torch.amin(x, 0), lambda x: x.min(0), expected=IndexError)

def test_reduce_bad_dims():
  helper_test_exception([(3, 4)], lambda x: x.sum(2), lambda x: x.sum(2), expected=IndexError)
  helper_test_exception([(3, 4)], lambda x: x.sum(-3), lambda x: x.sum(-3), expected=IndexError)
  helper_test_exception([(3, 4)], lambda x: torch.amax(x, (0, 5)), lambda x: x.max((0, 5)), expected=IndexError)
  helper_test_exception([()], lambda x: x.sum(1), lambda x: x.sum(1), expected=IndexError)
  helper_test_exception([(3, 4)], lambda x: x.sum((0, 0)), lambda x: x.sum((0, 0)), expected=RuntimeError)
  helper_test_exception([(3, 4)], lambda x: x.sum((1, -1)), lambda x: x.sum((1, -1)), expected=RuntimeError)

# *** argmax / argmin ***
@pytest.mark.parametrize("shape,axis", [((7,), None), ((7,), 0), ((3, 5), 1), ((3, 5), 0), ((3, 5), -1), ((2, 3, 5), 1), ((2, 3, 5), -3),
                                        ((1, 1), None), ((13,), 0)])
@pytest.mark.parametrize("fn", ["argmax", "argmin"])
def test_argmax_argmin(shape, axis, fn):
  helper_test_op([shape], lambda x: getattr(x, fn)(axis).int(), lambda x: getattr(x, fn)(axis))
  helper_test_op([shape], lambda x: getattr(x, fn)(axis, keepdim=True).int(), lambda x: getattr(x, fn)(axis, keepdim=True))

@pytest.mark.parametrize("fn", ["argmax", "argmin"])
def test_argmax_ties_first_index(fn):
  vals = [[[1.0, 3.0, 3.0, -1.0, -1.0], [2.0, 2.0, 2.0, 2.0, 2.0], [-1.0, 0.0, -1.0, 3.0, 3.0]]]
  for axis in (None, 0, 1):
    helper_test_op(None, lambda x, axis=axis: getattr(x, fn)(axis).int(), lambda x, axis=axis: getattr(x, fn)(axis), vals=vals)
  helper_test_op(None, lambda x: getattr(x, fn)(1).int(), lambda x: getattr(x, fn)(1), vals=[[[5, 1, 5, 1], [0, 0, 0, 0]]])

@pytest.mark.parametrize("fn", ["argmax", "argmin"])
def test_argmax_nan(fn):
  vals = [[[1.0, NAN, 3.0, NAN], [0.0, 1.0, 2.0, -1.0], [NAN, 0.0, 0.0, 0.0]]]
  helper_test_op(None, lambda x: getattr(x, fn)(1).int(), lambda x: getattr(x, fn)(1), vals=vals)
  helper_test_op(None, lambda x: getattr(x, fn)().int(), lambda x: getattr(x, fn)(), vals=vals)

@pytest.mark.parametrize("dt", [np.int32, np.uint8, np.int64, np.bool_, np.int8])
def test_argmax_int_dtypes(dt):
  # torch has no bool argmax; tg's matches torch on the same data as uint8
  def t(x: torch.Tensor) -> torch.Tensor: return x.to(torch.uint8) if x.dtype == torch.bool else x
  helper_test_op([(4, 6)], lambda x: t(x).argmax(1).int(), lambda x: x.argmax(1), dtype=dt, low=-5 if dt not in (np.uint8,) else 0, high=5)
  helper_test_op([(4, 6)], lambda x: t(x).argmin(0).int(), lambda x: x.argmin(0), dtype=dt, low=-5 if dt not in (np.uint8,) else 0, high=5)

def test_argmax_0d_and_errors():
  helper_test_op([()], lambda x: x.argmax().int(), lambda x: x.argmax())
  helper_test_op([()], lambda x: x.argmax(0).int(), lambda x: x.argmax(0))
  helper_test_op([()], lambda x: x.argmin(-1).int(), lambda x: x.argmin(-1))
  helper_test_exception([()], lambda x: x.argmax(1), lambda x: x.argmax(1), expected=IndexError)
  helper_test_exception([(3, 4)], lambda x: x.argmax(2), lambda x: x.argmax(2), expected=IndexError)
  helper_test_exception([(3, 4)], lambda x: x.argmin(-3), lambda x: x.argmin(-3), expected=IndexError)
  helper_test_exception([(0,)], lambda x: x.argmax(), lambda x: x.argmax(), expected=IndexError)
  helper_test_exception([(0, 3)], lambda x: x.argmax(0), lambda x: x.argmax(0), expected=IndexError)
  helper_test_op([(0, 3)], lambda x: x.argmax(1).int(), lambda x: x.argmax(1))

# *** any / all ***
@pytest.mark.parametrize("shape,axis", [((7,), None), ((3, 5), 1), ((3, 5), 0), ((2, 3, 4), (0, 2)), ((2, 3, 4), -1), ((), None), ((0,), None),
                                        ((3, 0), 1), ((3, 0), 0)])
def test_any_all(shape, axis):
  for dt in (np.bool_, np.float32, np.int32):
    if shape == () and dt == np.bool_: continue  # prepare_inputs makes a numpy scalar for 0-d bool; covered with vals below
    kw = {} if axis is None else {"dim": axis}
    helper_test_op([shape], lambda x, kw=kw: x.any(**kw), lambda x, kw=kw: x.any(axis), dtype=dt, low=0, high=2)
    helper_test_op([shape], lambda x, kw=kw: x.all(**kw), lambda x, kw=kw: x.all(axis), dtype=dt, low=0, high=2)

def test_any_all_keepdim_nan():
  helper_test_op([(3, 4)], lambda x: x.any(1, keepdim=True), lambda x: x.any(1, keepdim=True), dtype=np.bool_)
  helper_test_op([(3, 4)], lambda x: x.all(0, keepdim=True), lambda x: x.all(0, keepdim=True), dtype=np.bool_)
  helper_test_op(None, lambda x: x.all(1), vals=[[[NAN, 1.0], [0.0, NAN], [0.0, 0.0]]])
  helper_test_op(None, lambda x: x.any(1), vals=[[[NAN, 0.0], [0.0, 0.0], [-0.0, 1.0]]])
  helper_test_op(None, lambda x: x.any(), vals=[np.array(True)])
  helper_test_op(None, lambda x: x.all(0), vals=[np.array(False)])
  helper_test_exception([(3, 4)], lambda x: x.any(2), lambda x: x.any(2), expected=IndexError)

# *** scans ***
SCAN = [((7,), 0), ((7,), -1), ((3, 5), 0), ((3, 5), 1), ((3, 5), -1), ((2, 3, 4), 1), ((1,), 0), ((4, 1), 1), ((2, 13), 1)]

@pytest.mark.parametrize("shape,axis", SCAN)
def test_cumsum(shape, axis): helper_test_op([shape], lambda x: x.cumsum(axis))

@pytest.mark.parametrize("shape,axis", SCAN)
def test_cumprod(shape, axis): helper_test_op([shape], lambda x: x.cumprod(axis), low=0.5, high=1.5)

@pytest.mark.parametrize("shape,axis", SCAN)
@pytest.mark.parametrize("fn", ["cummax", "cummin"])
def test_cummax_cummin(shape, axis, fn):
  helper_test_op([shape], lambda x: getattr(x, fn)(axis)[0])
  helper_test_op([shape], lambda x: getattr(x, fn)(axis)[1].int(), lambda x: getattr(x, fn)(axis)[1])

@pytest.mark.parametrize("shape,axis", SCAN)
def test_logcumsumexp(shape, axis): helper_test_op([shape], lambda x: x.logcumsumexp(axis))

def test_scans_0d_and_empty():
  for fn in ("cumsum", "cumprod", "logcumsumexp"):
    helper_test_op([()], lambda x, fn=fn: getattr(x, fn)(0))
    helper_test_op([(0,)], lambda x, fn=fn: getattr(x, fn)(0))
    helper_test_op([(3, 0)], lambda x, fn=fn: getattr(x, fn)(1))
    helper_test_op([(0, 3)], lambda x, fn=fn: getattr(x, fn)(-1))
  helper_test_op([()], lambda x: x.cummax(0)[0])
  helper_test_op([()], lambda x: x.cummin(-1)[1].int(), lambda x: x.cummin(-1)[1])
  helper_test_op([(0, 3)], lambda x: x.cummax(0)[1].int(), lambda x: x.cummax(0)[1])

def test_scan_bad_dims():
  for fn in ("cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"):
    helper_test_exception([(3, 4)], lambda x, fn=fn: getattr(x, fn)(2), lambda x, fn=fn: getattr(x, fn)(2), expected=IndexError)
    helper_test_exception([()], lambda x, fn=fn: getattr(x, fn)(1), lambda x, fn=fn: getattr(x, fn)(1), expected=IndexError)

def test_cumsum_long_split():
  # more than 512 elements: the two-stage (blocked) scan
  helper_test_op([(600,)], lambda x: x.cumsum(0), atol=1e-4)
  helper_test_op([(2, 1031)], lambda x: x.cumsum(1), atol=1e-4, forward_only=True)
  helper_test_op([(530, 2)], lambda x: x.cummax(0)[0], forward_only=True)
  helper_test_op([(530,)], lambda x: x.cumprod(0), low=0.99, high=1.01, forward_only=True)

@pytest.mark.parametrize("dt", [np.int32, np.int8, np.bool_, np.int64, np.uint8])
def test_cumsum_int_dtypes(dt):
  # tinygrad: accumulate in sum's dtype (int32 for small ints and bool, uint32 for uint8); torch: int64
  out = {np.int8: torch.int32, np.uint8: torch.uint32, np.int32: torch.int32, np.int64: torch.int64, np.bool_: torch.int32}[dt]
  helper_test_op([(3, 6)], lambda x: x.cumsum(1).to(out), lambda x: x.cumsum(1), dtype=dt, low=0, high=20)

def test_cumprod_cummax_int():
  helper_test_op([(3, 6)], lambda x: x.cumprod(1).int(), lambda x: x.cumprod(1), dtype=np.int32, low=-3, high=4)  # tinygrad: int32
  helper_test_op([(3, 6)], lambda x: x.cummax(1)[0], dtype=np.int64, low=-2**40, high=2**40)
  helper_test_op([(3, 6)], lambda x: x.cummin(0)[0], dtype=np.int64, low=-2**40, high=2**40)
  helper_test_op([(3, 6)], lambda x: x.cummin(1)[0], dtype=np.uint8, low=0, high=255)
  helper_test_op([(3, 6)], lambda x: x.cummax(1)[0], dtype=np.bool_)
  helper_test_op([(3, 6)], lambda x: x.cummin(1)[1].int(), lambda x: x.cummin(1)[1], dtype=np.bool_)

def test_cummax_ties_and_nan():
  vals = [[[1.0, 3.0, 3.0, 2.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0, 2.0, 2.0], [1.0, NAN, 3.0, NAN, 0.0, 5.0]]]
  for fn in ("cummax", "cummin"):
    helper_test_op(None, lambda x, fn=fn: getattr(x, fn)(1)[0], vals=vals, forward_only=True)
    helper_test_op(None, lambda x, fn=fn: getattr(x, fn)(1)[1].int(), lambda x, fn=fn: getattr(x, fn)(1)[1], vals=vals)
  helper_test_op(None, lambda x: x.cumsum(1), vals=vals, forward_only=True)
  # with ties the gradient goes to the element at the returned index (not split), like torch
  for fn in ("cummax", "cummin"):
    helper_test_op(None, lambda x, fn=fn: getattr(x, fn)(1)[0], vals=[vals[0][:2]])
    helper_test_op(None, lambda x, fn=fn: getattr(x, fn)(0)[0], vals=[[[1.0, 2.0], [1.0, 2.0], [0.5, 2.0]]])

def test_logcumsumexp_extremes():
  helper_test_op(None, lambda x: x.logcumsumexp(1), vals=[[[1000.0, 1001.0, -1000.0, 999.0], [-1000.0, -999.0, -1001.0, -998.0]]])
  helper_test_op(None, lambda x: x.logcumsumexp(0), vals=[[-INF, -INF, 1.0, -INF]], forward_only=True)
  helper_test_op(None, lambda x: x.logcumsumexp(0), vals=[[1.0, INF, 2.0]], forward_only=True)

# *** softmax family ***
SOFT = [((7,), -1), ((3, 5), -1), ((3, 5), 0), ((2, 3, 5), 1), ((2, 3, 5), -3), ((1, 1), -1), ((), -1), ((), 0)]

@pytest.mark.parametrize("shape,axis", SOFT)
@pytest.mark.parametrize("fn", ["softmax", "log_softmax", "softmin"])
def test_softmax_family(shape, axis, fn):
  helper_test_op([shape], lambda x: getattr(torch.nn.functional, fn)(x, dim=axis), lambda x: getattr(x, fn)(axis))

def test_softmax_stable_and_dtype():
  vals = [[[1000.0, 1001.0, 999.0], [-1000.0, -1001.0, -1002.0], [-INF, 0.0, 1.0]]]
  for fn in ("softmax", "log_softmax", "softmin"):
    helper_test_op(None, lambda x, fn=fn: getattr(torch.nn.functional, fn)(x, dim=1), lambda x, fn=fn: getattr(x, fn)(1), vals=vals,
                   forward_only=True)
  helper_test_op([(3, 5)], lambda x: x.softmax(1, dtype=torch.float64), lambda x: x.softmax(1, dtype=dtypes.float64))
  helper_test_op([(3, 5)], lambda x: x.log_softmax(0, dtype=torch.float64), lambda x: x.log_softmax(0, dtype=dtypes.float64))
  helper_test_op([(3, 0)], lambda x: x.softmax(0))
  helper_test_op([(3, 0)], lambda x: x.log_softmax(1))
  helper_test_exception([(3, 4)], lambda x: x.softmax(2), lambda x: x.softmax(2), expected=IndexError)

@pytest.mark.parametrize("shape,axis", [((7,), 0), ((3, 5), 1), ((3, 5), -2), ((2, 3, 5), (0, 2)), ((2, 3, 5), (0, 1, 2)), ((), 0), ((1, 4, 1), 1)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_logsumexp(shape, axis, keepdim):
  helper_test_op([shape], lambda x: torch.logsumexp(x, axis, keepdim=keepdim), lambda x: x.logsumexp(axis, keepdim=keepdim))

def test_logsumexp_extremes():
  helper_test_op(None, lambda x: torch.logsumexp(x, 1), lambda x: x.logsumexp(1),
                 vals=[[[1000.0, 1000.0, 0.0], [-1000.0, -1000.5, -2000.0], [-INF, -INF, -INF], [INF, 1.0, 0.0], [NAN, 1.0, 0.0]]],
                 forward_only=True)
  helper_test_op([(2, 3, 4)], lambda x: torch.logsumexp(x, (0, 1, 2)), lambda x: x.logsumexp())
  helper_test_op([(0,)], lambda x: torch.logsumexp(x, 0), lambda x: x.logsumexp(0), forward_only=True)
  helper_test_op([(3, 0)], lambda x: torch.logsumexp(x, 1), lambda x: x.logsumexp(1), forward_only=True)
  helper_test_op(None, lambda x: torch.logsumexp(x.float(), 1), lambda x: x.logsumexp(1), vals=[[[1, 2, 3], [0, 0, 0]]])
  helper_test_exception([(3, 4)], lambda x: torch.logsumexp(x, 2), lambda x: x.logsumexp(2), expected=IndexError)

# *** var / std ***
MOM = [((7,), None), ((3, 5), 1), ((3, 5), 0), ((3, 5), -1), ((2, 3, 5), (0, 2)), ((2, 3, 5), (-1, 1)), ((2, 3, 5), None), ((1, 5), 0)]

@pytest.mark.parametrize("shape,axis", MOM)
@pytest.mark.parametrize("fn", ["var", "std"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_var_std(shape, axis, fn, keepdim):
  helper_test_op([shape], lambda x: getattr(x, fn)(axis, keepdim=keepdim), lambda x: getattr(x, fn)(axis, keepdim=keepdim),
                 forward_only=(shape == (1, 5)))

@pytest.mark.parametrize("correction", [0, 2, 0.5])
def test_var_std_correction(correction):
  helper_test_op([(3, 6)], lambda x: x.var(1, correction=correction), lambda x: x.var(1, correction=correction))
  helper_test_op([(3, 6)], lambda x: x.std(0, correction=correction, keepdim=True), lambda x: x.std(0, correction=correction, keepdim=True))

def test_var_std_degenerate():
  # N - correction <= 0: divides by 0 (nan/inf), like torch
  import warnings
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    helper_test_op([(1, 5)], lambda x: x.var(0), lambda x: x.var(0), forward_only=True)
    helper_test_op([(3, 2)], lambda x: x.std(1, correction=3), lambda x: x.std(1, correction=3), forward_only=True)
    helper_test_op([()], lambda x: x.var(), lambda x: x.var(), forward_only=True)
    helper_test_op([()], lambda x: x.std(correction=0), lambda x: x.std(correction=0), forward_only=True)

@pytest.mark.parametrize("shape,axis", [((7,), None), ((3, 5), 1), ((2, 3, 5), (0, 2)), ((2, 3, 5), -2)])
def test_var_mean_std_mean(shape, axis):
  for fn in ("var_mean", "std_mean"):
    for i in (0, 1):
      helper_test_op([shape], lambda x, fn=fn, i=i: getattr(torch, fn)(x, axis, keepdim=True)[i],
                     lambda x, fn=fn, i=i: getattr(x, fn)(axis, keepdim=True)[i])
  helper_test_op([shape], lambda x: torch.var_mean(x, axis, correction=0)[0], lambda x: x.var_mean(axis, correction=0)[0])

def test_var_bad_dim():
  helper_test_exception([(3, 4)], lambda x: x.var(2), lambda x: x.var(2), expected=IndexError)
  helper_test_exception([(3, 4)], lambda x: x.std((0, -3)), lambda x: x.std((0, -3)), expected=IndexError)

# *** sort / argsort / topk ***
SORT = [((7,), -1), ((8,), 0), ((3, 5), 1), ((3, 5), 0), ((2, 5, 3), 1), ((2, 3, 4), -1), ((2, 3, 4), -3), ((1, 17), 1), ((4, 2), 1)]

@pytest.mark.parametrize("shape,dim", SORT)
@pytest.mark.parametrize("descending", [False, True])
def test_sort(shape, dim, descending):
  helper_test_op([shape], lambda x: x.sort(dim, descending=descending)[0])
  helper_test_op([shape], lambda x: x.sort(dim, descending=descending)[1].int(), lambda x: x.sort(dim, descending=descending)[1])

@pytest.mark.parametrize("descending", [False, True])
def test_sort_ties_stable(descending):
  vals = [[[3.0, 1.0, 3.0, 2.0, 1.0, 3.0, 0.0], [5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0], [-1.0, 2.0, -1.0, 2.0, -1.0, 2.0, -1.0]]]
  helper_test_op(None, lambda x: torch.sort(x, dim=1, descending=descending, stable=True)[1].int(), lambda x: x.sort(1, descending=descending)[1],
                 vals=vals)
  helper_test_op(None, lambda x: torch.sort(x, dim=1, descending=descending, stable=True)[0], lambda x: x.sort(1, descending=descending)[0],
                 vals=vals, forward_only=True)
  helper_test_op(None, lambda x: torch.argsort(x, dim=0, descending=descending, stable=True).int(), lambda x: x.argsort(0, descending=descending),
                 vals=vals)

def _sorted(desc: bool, i: int):
  """(torch fxn, tg fxn) for output i of a sort along dim 1; torch's stable sort, indices as int32."""
  def tfn(x): return torch.sort(x, dim=1, descending=desc, stable=True)[i].int() if i else torch.sort(x, dim=1, descending=desc, stable=True)[0]
  return tfn, lambda x: x.sort(1, descending=desc)[i]

def test_sort_nan_inf():
  # NaN sorts as the largest value, like torch
  vals = [[[3.0, NAN, 1.0, INF, -INF, NAN, 2.0, 1.0, 0.0], [NAN, NAN, NAN, -1.0, NAN, 0.0, 1.0, INF, INF]]]
  for desc in (False, True):
    helper_test_op(None, *_sorted(desc, 0), vals=vals, forward_only=True)
    helper_test_op(None, *_sorted(desc, 1), vals=vals)
  vals = [[[3.0, NAN, 1.0, 5.0, 2.0]]]
  helper_test_op(None, lambda x: x.topk(3, 1)[1].int(), lambda x: x.topk(3, 1)[1], vals=vals)
  helper_test_op(None, lambda x: x.topk(2, 1, largest=False)[1].int(), lambda x: x.topk(2, 1, largest=False)[1], vals=vals)

def test_sort_ties_gradient():
  # each output's gradient goes to exactly one input, as torch routes it through the indices
  vals = [[[2.0, 1.0, 2.0, 0.5, 1.0], [3.0, 3.0, 3.0, 3.0, 3.0]]]
  for desc in (False, True):
    tfn, tgfn = _sorted(desc, 0)
    helper_test_op(None, lambda x, tfn=tfn: tfn(x) * torch.arange(5.0), lambda x, tgfn=tgfn: tgfn(x) * Tensor.arange(5).float(), vals=vals)

@pytest.mark.parametrize("dt", [np.int32, np.int8, np.uint8, np.int64, np.bool_])
def test_sort_int_dtypes(dt):
  lo, hi = (0, 255) if dt == np.uint8 else (-2**40, 2**40) if dt == np.int64 else (-100, 100)
  for desc in (False, True):
    for i in (0, 1): helper_test_op([(3, 6)], *_sorted(desc, i), dtype=dt, low=lo, high=hi)

def test_sort_edge_shapes():
  helper_test_op([()], lambda x: x.sort()[0])
  helper_test_op([()], lambda x: x.sort(0)[1].int(), lambda x: x.sort(0)[1])
  helper_test_op([(1,)], lambda x: x.sort()[1].int(), lambda x: x.sort()[1])
  helper_test_op([(0,)], lambda x: x.sort()[0])
  helper_test_op([(3, 0)], lambda x: x.sort(1)[1].int(), lambda x: x.sort(1)[1])
  helper_test_op([(5, 1)], lambda x: x.sort(0, descending=True)[1].int(), lambda x: x.sort(0, descending=True)[1])
  helper_test_exception([(3, 4)], lambda x: x.sort(2), lambda x: x.sort(2), expected=IndexError)
  helper_test_exception([()], lambda x: x.sort(1), lambda x: x.sort(1), expected=IndexError)
  helper_test_exception([(3, 4)], lambda x: x.argsort(-3), lambda x: x.argsort(-3), expected=IndexError)

def test_sort_random_many():
  # a bigger network (n=37 -> 64 wide, 6 stages), checked against a stable torch sort on data with many ties
  rng = np.random.default_rng(1)
  a = rng.integers(-5, 5, size=(4, 37)).astype(np.float32)
  for desc in (False, True):
    v, i = Tensor(a).sort(1, descending=desc)
    tv, ti = torch.sort(torch.tensor(a), dim=1, descending=desc, stable=True)
    np.testing.assert_equal(v.numpy(), tv.numpy())
    np.testing.assert_equal(i.numpy(), ti.numpy())
    assert i.dtype == dtypes.int32

@pytest.mark.parametrize("shape,k,dim", [((7,), 3, -1), ((3, 5), 1, 1), ((3, 5), 5, 1), ((3, 5), 2, 0), ((2, 5, 3), 4, 1), ((4,), 0, 0)])
@pytest.mark.parametrize("largest", [True, False])
def test_topk(shape, k, dim, largest):
  helper_test_op([shape], lambda x: x.topk(k, dim, largest=largest)[0])
  helper_test_op([shape], lambda x: x.topk(k, dim, largest=largest)[1].int(), lambda x: x.topk(k, dim, largest=largest)[1])

def test_topk_errors():
  # tinygrad raises ValueError for k out of range (torch: RuntimeError)
  for k in (6, -1):
    with pytest.raises(RuntimeError): torch.ones(3, 5).topk(k)
    with pytest.raises(ValueError): Tensor.ones(3, 5).topk(k)
  helper_test_exception([(3, 4)], lambda x: x.topk(1, 2), lambda x: x.topk(1, 2), expected=IndexError)
  with pytest.raises(NotImplementedError): Tensor.ones(3, 5).topk(2, sorted_=False)

# *** einsum ***
EINSUM = [
  ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij->ji", [(3, 5)]), ("ij->", [(3, 5)]),
  ("ij", [(3, 5)]), ("ji", [(3, 5)]), ("i,i->", [(7,), (7,)]), ("i,j->ij", [(3,), (5,)]), ("ij,ij->ij", [(3, 5), (3, 5)]), ("ii->i", [(4, 4)]),
  ("ii", [(4, 4)]), ("ii->", [(5, 5)]), ("iji->j", [(3, 2, 3)]), ("bii->bi", [(2, 3, 3)]), ("ij,j->i", [(3, 5), (5,)]),
  ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]), ("...ij->...ji", [(2, 2, 3, 4)]),
  ("i...->...", [(3, 4, 5)]), ("...i,...i", [(2, 3), (3,)]), ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]), ("i,->i", [(3,), ()]),
  (",->", [(), ()]), ("ijk->kij", [(2, 3, 5)]), ("ij,kj->ik", [(3, 1), (4, 5)]), ("a b , b c -> a c", [(2, 3), (3, 2)]),
  ("Ab,bC->CA", [(2, 3), (3, 4)]),
]

@pytest.mark.parametrize("formula,shapes", EINSUM)
def test_einsum(formula, shapes):
  helper_test_op(shapes, lambda *xs: torch.einsum(formula, *xs), lambda *xs: Tensor.einsum(formula, *xs))

def test_einsum_list_operands_and_dtype():
  helper_test_op([(3, 4), (4, 2)], lambda a, b: torch.einsum("ij,jk->ik", [a, b]), lambda a, b: Tensor.einsum("ij,jk->ik", [a, b]))
  helper_test_op([(3, 4), (4, 2)], lambda a, b: torch.einsum("ij,jk->ik", a, b), lambda a, b: Tensor.einsum("ij,jk->ik", a, b),
                 dtype=np.int32, low=-5, high=5)
  helper_test_op([(3, 4)], lambda a: torch.einsum("ij->i", a.double()), lambda a: Tensor.einsum("ij->i", a, dtype=dtypes.float64))

def test_einsum_errors():
  helper_test_exception([(2, 3), (4, 5)], lambda a, b: torch.einsum("ij,jk->ik", a, b), lambda a, b: Tensor.einsum("ij,jk->ik", a, b),
                        expected=RuntimeError)
  helper_test_exception([(2, 3)], lambda a: torch.einsum("ijk->i", a), lambda a: Tensor.einsum("ijk->i", a), expected=RuntimeError)
  helper_test_exception([(2, 3)], lambda a: torch.einsum("ij->k", a), lambda a: Tensor.einsum("ij->k", a), expected=RuntimeError)
  helper_test_exception([(2, 3)], lambda a: torch.einsum("ij->ii", a), lambda a: Tensor.einsum("ij->ii", a), expected=RuntimeError)
  helper_test_exception([(2, 3)], lambda a: torch.einsum("ii->i", a), lambda a: Tensor.einsum("ii->i", a), expected=RuntimeError)
  # operand count mismatch: tinygrad raises ValueError (torch: RuntimeError)
  with pytest.raises(RuntimeError): torch.einsum("ij,jk->ik", torch.ones(2, 3))
  with pytest.raises(ValueError): Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3))

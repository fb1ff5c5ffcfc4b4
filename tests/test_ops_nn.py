"""nn ops (tg_core/frontend/nn.py) against torch.nn.functional: forward values, dtypes, shapes, gradients, exception classes."""
from __future__ import annotations
from typing import Any

import numpy as np
import pytest

from helpers import helper_test_exception, helper_test_op, torch
from tg_core.dtype import dtypes
from tg_core.tensor import Tensor

F = torch.nn.functional

def _rng(seed: int = 0) -> np.random.Generator: return np.random.default_rng(seed)
def _randn(*shape: int, seed: int = 0) -> np.ndarray: return _rng(seed).uniform(-2, 2, size=shape).astype(np.float32)
def _labels(n: int, *shape: int, seed: int = 1) -> np.ndarray: return _rng(seed).integers(0, n, size=shape).astype(np.int64)

# *** linear / sequential / norms ***

def test_linear_bias():
  helper_test_op([(3, 5), (5, 4), (4,)], lambda x, w, b: F.linear(x, w.T, b), lambda x, w, b: x.linear(w, b))
def test_linear_no_bias_batched():
  helper_test_op([(2, 3, 5), (5, 7)], lambda x, w: F.linear(x, w.T), lambda x, w: x.linear(w))
def test_linear_1d_weight():
  # tinygrad: a 1-D weight is an elementwise scale
  helper_test_op([(3, 5), (5,), (5,)], lambda x, w, b: x * w + b, lambda x, w, b: x.linear(w, b))
def test_linear_dtype():
  helper_test_op([(3, 4), (4, 2)], lambda x, w: F.linear(x.double(), w.double().T), lambda x, w: x.linear(w, dtype=dtypes.float64))
def test_linear_mismatch():
  helper_test_exception([(2, 3), (5, 4)], lambda x, w: F.linear(x, w.T), lambda x, w: x.linear(w), RuntimeError)

def test_sequential():
  helper_test_op([(3, 4), (4, 5)], lambda x, w: torch.relu(x @ w) * 2, lambda x, w: x.sequential([lambda t: t @ w, Tensor.relu, lambda t: t * 2]))

@pytest.mark.parametrize("shape,axis", [((3, 7), -1), ((2, 3, 5), (-2, -1)), ((2, 3, 5), -1), ((4, 1), -1)])
def test_layernorm(shape, axis):
  ns = shape[-2:] if isinstance(axis, tuple) else shape[-1:]
  helper_test_op([shape], lambda x: F.layer_norm(x, ns), lambda x: x.layernorm(axis))
def test_layernorm_eps():
  helper_test_op([(3, 6)], lambda x: F.layer_norm(x, (6,), eps=1e-2), lambda x: x.layernorm(eps=1e-2), low=-0.1, high=0.1)

@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 5)])
def test_batchnorm(shape):
  c, eps = shape[1], 1e-5
  # torch can't differentiate running stats: they are detached there (their grads are then not compared)
  def tf(x, w, b, m, v): return F.batch_norm(x, m.detach(), v.detach().abs() + 0.5, w, b, training=False, eps=eps)
  def tgf(x, w, b, m, v): return x.batchnorm(w, b, m, (v.abs() + 0.5 + eps).sqrt().reciprocal())
  helper_test_op([shape, (c,), (c,), (c,), (c,)], tf, tgf)
def test_batchnorm_no_affine():
  helper_test_op([(2, 3, 4), (3,), (3,)], lambda x, m, v: F.batch_norm(x, m.detach(), v.detach().abs() + 0.5, training=False, eps=1e-5),
                 lambda x, m, v: x.batchnorm(None, None, m, (v.abs() + 0.5 + 1e-5).sqrt().reciprocal()))

# *** dropout ***

def test_dropout_eval_is_identity():
  helper_test_op([(3, 5)], lambda x: F.dropout(x, 0.5, training=False), lambda x: x.dropout(0.5))
def test_dropout_p0_training():
  prev, Tensor.training = Tensor.training, True
  try: helper_test_op([(3, 5)], lambda x: F.dropout(x, 0.0, training=True), lambda x: x.dropout(0.0))
  finally: Tensor.training = prev
def test_dropout_p1_training():
  prev, Tensor.training = Tensor.training, True
  try: helper_test_op([(3, 5)], lambda x: F.dropout(x, 1.0, training=True), lambda x: x.dropout(1.0))
  finally: Tensor.training = prev
@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_dropout_bad_p(p):
  helper_test_exception([(3,)], lambda x: F.dropout(x, p), lambda x: x.dropout(p), ValueError)

@pytest.mark.xfail(not hasattr(Tensor, "rand_like"), reason="Tensor.rand_like comes from the random mixin", strict=False)
def test_dropout_training_random():
  x = _randn(64, 32)
  prev, Tensor.training = Tensor.training, True
  try: out = Tensor(x).dropout(0.25).numpy()
  finally: Tensor.training = prev
  kept = out != 0
  np.testing.assert_allclose(out[kept], x[kept] / 0.75, rtol=1e-6)
  assert 0.6 < kept.mean() < 0.9

# *** conv2d / N-d conv ***

CONV_CASES: list[tuple[tuple, tuple, dict[str, Any]]] = [
  ((1, 1, 5, 5), (1, 1, 3, 3), {}),
  ((2, 3, 7, 11), (4, 3, 3, 2), {"stride": 2}),
  ((2, 3, 9, 8), (5, 3, 3, 3), {"stride": (2, 3), "dilation": (2, 1)}),
  ((1, 6, 7, 8), (9, 2, 3, 3), {"groups": 3}),
  ((2, 4, 6, 7), (4, 1, 3, 2), {"groups": 4, "padding": 1}),
  ((1, 2, 7, 9), (3, 2, 3, 3), {"padding": (2, 1)}),
  ((1, 2, 7, 9), (3, 2, 2, 3), {"padding": "valid"}),
  ((1, 2, 6, 7), (3, 2, 2, 4), {"padding": "same"}),
  ((1, 2, 9, 10), (2, 2, 3, 3), {"padding": 2, "stride": 3, "dilation": 2}),
  ((3, 2, 5, 5), (4, 2, 1, 1), {}),
  ((1, 2, 4, 5), (3, 2, 4, 5), {}),
  ((1, 4, 8, 9), (6, 2, 3, 3), {"groups": 2, "stride": (1, 2), "dilation": (2, 2), "padding": (1, 0)}),
]
@pytest.mark.parametrize("xs,ws,kw", CONV_CASES)
@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_conv2d(xs, ws, kw):
  helper_test_op([xs, ws], lambda x, w: F.conv2d(x, w, **kw), lambda x, w: x.conv2d(w, **kw))

def test_conv2d_bias():
  helper_test_op([(2, 3, 5, 4), (4, 3, 3, 3), (4,)], lambda x, w, b: F.conv2d(x, w, b, padding=1), lambda x, w, b: x.conv2d(w, b, padding=1))

def test_conv2d_flat_padding():
  # tinygrad's flat (left, right, top, bottom) padding == F.pad then conv
  helper_test_op([(1, 2, 5, 6), (3, 2, 3, 3)], lambda x, w: F.conv2d(F.pad(x, (1, 2, 0, 1)), w), lambda x, w: x.conv2d(w, padding=(1, 2, 0, 1)))

def test_conv2d_same_dilated_nonsquare_vs_module():
  """padding='same' with dilation=(2,3) and a (3,5) kernel on 28x31, against torch.nn.Conv2d (asymmetric split like torch)."""
  conv = torch.nn.Conv2d(2, 3, (3, 5), padding="same", dilation=(2, 3), bias=False)
  def tf(x, w): return torch.func.functional_call(conv, {"weight": w}, (x,))
  helper_test_op([(1, 2, 28, 31), (3, 2, 3, 5)], tf, lambda x, w: x.conv2d(w, padding="same", dilation=(2, 3)))

def test_conv2d_same_even_kernel_dilation():
  helper_test_op([(1, 1, 5, 6), (2, 1, 2, 4)], lambda x, w: F.conv2d(x, w, padding="same", dilation=(3, 1)),
                 lambda x, w: x.conv2d(w, padding="same", dilation=(3, 1)))

def test_conv2d_float64():
  helper_test_op([(1, 2, 5, 5), (2, 2, 3, 3)], lambda x, w: F.conv2d(x, w, stride=2), lambda x, w: x.conv2d(w, stride=2), dtype=np.float64)

def test_conv2d_acc_dtype():
  helper_test_op([(1, 2, 5, 5), (2, 2, 3, 3)], lambda x, w: F.conv2d(x.double(), w.double()), lambda x, w: x.conv2d(w, dtype=dtypes.float64),
                 forward_only=True)

@pytest.mark.parametrize("xs,ws,kw", [
  ((2, 3, 11), (4, 3, 3), {"stride": 2, "padding": 1}),
  ((1, 2, 13), (2, 2, 4), {"dilation": 3}),
  ((1, 4, 9), (6, 2, 3), {"groups": 2, "padding": "same"}),
])
def test_conv1d(xs, ws, kw):
  helper_test_op([xs, ws], lambda x, w: F.conv1d(x, w, **kw), lambda x, w: x.conv2d(w, **kw))

@pytest.mark.parametrize("xs,ws,kw", [
  ((1, 2, 4, 5, 6), (3, 2, 2, 3, 2), {"stride": (1, 2, 1), "padding": 1}),
  ((1, 2, 5, 4, 5), (2, 1, 3, 2, 3), {"groups": 2, "dilation": (1, 2, 2)}),
])
def test_conv3d(xs, ws, kw):
  helper_test_op([xs, ws], lambda x, w: F.conv3d(x, w, **kw), lambda x, w: x.conv2d(w, **kw))

@pytest.mark.parametrize("xs,ws,kw", [
  ((1, 3, 5, 5), (2, 2, 3, 3), {}),                           # channel mismatch
  ((1, 4, 5, 5), (3, 2, 3, 3), {"groups": 2}),               # cout not divisible by groups
  ((1, 3, 5, 5), (2, 3, 7, 7), {}),                           # kernel larger than input
  ((1, 3, 5, 5), (2, 3, 3), {}),                              # weight ndim mismatch
  ((1, 3, 5, 5), (2, 3, 3, 3), {"padding": "same", "stride": 2}),
  ((1, 3, 5, 5), (2, 3, 3, 3), {"padding": "full"}),
])
def test_conv2d_exceptions(xs, ws, kw):
  helper_test_exception([xs, ws], lambda x, w: F.conv2d(x, w, **kw), lambda x, w: x.conv2d(w, **kw), RuntimeError)

def test_conv2d_same_strided_valueerror_like_module():
  with pytest.raises(ValueError): torch.nn.Conv2d(3, 2, 3, padding="same", stride=2)
  with pytest.raises(ValueError): Tensor(_randn(1, 3, 5, 5)).conv2d(Tensor(_randn(2, 3, 3, 3)), padding="same", stride=2)
  with pytest.raises(ValueError): torch.nn.Conv2d(3, 2, 3, padding="full")
  with pytest.raises(ValueError): Tensor(_randn(1, 3, 5, 5)).conv2d(Tensor(_randn(2, 3, 3, 3)), padding="full")

def test_conv2d_bias_mismatch():
  helper_test_exception([(1, 3, 5, 5), (2, 3, 3, 3), (3,)], lambda x, w, b: F.conv2d(x, w, b), lambda x, w, b: x.conv2d(w, b), RuntimeError)

# *** conv_transpose2d ***

CONVT_CASES: list[tuple[tuple, tuple, dict[str, Any]]] = [
  ((1, 2, 4, 5), (2, 3, 3, 3), {}),
  ((2, 2, 3, 4), (2, 3, 3, 2), {"stride": 2}),
  ((1, 2, 3, 5), (2, 2, 3, 3), {"stride": (2, 3), "output_padding": (1, 2)}),
  ((1, 4, 5, 4), (4, 3, 3, 3), {"groups": 2, "stride": 2, "padding": 1, "output_padding": 1}),
  ((1, 2, 4, 4), (2, 2, 3, 2), {"dilation": 2, "padding": (1, 0)}),
  ((1, 2, 5, 5), (2, 1, 3, 3), {"stride": 2, "padding": 3}),   # padding > dilation*(k-1): crops
  ((1, 3, 3, 4), (3, 2, 2, 3), {"stride": (3, 2), "dilation": (2, 1), "output_padding": (1, 0)}),
]
@pytest.mark.parametrize("xs,ws,kw", CONVT_CASES)
def test_conv_transpose2d(xs, ws, kw):
  helper_test_op([xs, ws], lambda x, w: F.conv_transpose2d(x, w, **kw), lambda x, w: x.conv_transpose2d(w, **kw))

def test_conv_transpose2d_bias():
  helper_test_op([(1, 2, 3, 3), (2, 4, 2, 2), (4,)], lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2),
                 lambda x, w, b: x.conv_transpose2d(w, b, stride=2))
def test_conv_transpose1d():
  helper_test_op([(2, 3, 7), (3, 2, 3)], lambda x, w: F.conv_transpose1d(x, w, stride=3, padding=1, output_padding=2),
                 lambda x, w: x.conv_transpose2d(w, stride=3, padding=1, output_padding=2))
def test_conv_transpose3d():
  helper_test_op([(1, 2, 3, 2, 3), (2, 2, 2, 2, 2)], lambda x, w: F.conv_transpose3d(x, w, stride=(2, 1, 2)),
                 lambda x, w: x.conv_transpose2d(w, stride=(2, 1, 2)))
@pytest.mark.parametrize("xs,ws,kw", [((1, 3, 5, 5), (2, 2, 3, 3), {}), ((1, 4, 5, 5), (4, 2, 3, 3), {"stride": 2, "output_padding": 2})])
def test_conv_transpose2d_exceptions(xs, ws, kw):
  helper_test_exception([xs, ws], lambda x, w: F.conv_transpose2d(x, w, **kw), lambda x, w: x.conv_transpose2d(w, **kw), RuntimeError)

# *** pooling ***

AVG_CASES: list[tuple[tuple, dict[str, Any]]] = [
  ((1, 2, 7, 9), {"kernel_size": 2}),
  ((2, 1, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1}),
  ((1, 2, 7, 8), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
  ((1, 1, 8, 7), {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 1), "ceil_mode": True}),
  ((1, 2, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}),
  ((1, 1, 8, 9), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False}),
  ((1, 1, 5, 6), {"kernel_size": (2, 3), "stride": 1}),
  ((1, 1, 6, 6), {"kernel_size": 2, "stride": 3, "ceil_mode": True}),
]
@pytest.mark.parametrize("xs,kw", AVG_CASES)
def test_avg_pool2d(xs, kw):
  tgkw = dict(kw, kernel_size=(kw["kernel_size"],) * 2 if isinstance(kw["kernel_size"], int) else kw["kernel_size"])
  helper_test_op([xs], lambda x: F.avg_pool2d(x, **kw), lambda x: x.avg_pool2d(**tgkw))
def test_avg_pool1d():
  helper_test_op([(2, 3, 11)], lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True), lambda x: x.avg_pool2d((3,), 2, padding=1, ceil_mode=True))
def test_avg_pool3d():
  helper_test_op([(1, 2, 5, 4, 5)], lambda x: F.avg_pool3d(x, (2, 2, 3), (1, 2, 2)), lambda x: x.avg_pool2d((2, 2, 3), (1, 2, 2)))

MAX_CASES: list[tuple[tuple, dict[str, Any]]] = [
  ((1, 2, 7, 9), {"kernel_size": 2}),
  ((2, 1, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1}),
  ((1, 2, 7, 8), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
  ((1, 1, 9, 9), {"kernel_size": 3, "stride": 1, "dilation": 2}),
  ((1, 1, 10, 9), {"kernel_size": 3, "stride": 2, "dilation": 2, "padding": 1, "ceil_mode": True}),
  ((1, 2, 6, 7), {"kernel_size": (2, 3), "stride": (1, 2), "padding": (1, 0)}),
  ((1, 1, 6, 6), {"kernel_size": 2, "stride": 3, "ceil_mode": True}),
]
@pytest.mark.parametrize("xs,kw", MAX_CASES)
def test_max_pool2d(xs, kw):
  tgkw = dict(kw, kernel_size=(kw["kernel_size"],) * 2 if isinstance(kw["kernel_size"], int) else kw["kernel_size"])
  helper_test_op([xs], lambda x: F.max_pool2d(x, **kw), lambda x: x.max_pool2d(**tgkw))
def test_max_pool1d():
  helper_test_op([(2, 2, 10)], lambda x: F.max_pool1d(x, 3, 2, 1, ceil_mode=True), lambda x: x.max_pool2d((3,), 2, padding=1, ceil_mode=True))
def test_max_pool3d():
  helper_test_op([(1, 1, 4, 5, 5)], lambda x: F.max_pool3d(x, 2, (1, 2, 2)), lambda x: x.max_pool2d((2, 2, 2), (1, 2, 2)))
def test_max_pool2d_int():
  helper_test_op([(1, 2, 5, 6)], lambda x: F.max_pool2d(x.float(), 2, padding=1).int(), lambda x: x.max_pool2d((2, 2), padding=1),
                 dtype=np.int32, low=-50, high=50)

@pytest.mark.parametrize("xs,kw", [((1, 2, 6, 7), {"kernel_size": 2}),
                                   ((2, 1, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
                                   ((1, 1, 9, 8), {"kernel_size": 3, "stride": 1, "dilation": 2})])
def test_max_pool2d_return_indices(xs, kw):
  tgkw = dict(kw, kernel_size=(kw["kernel_size"],) * 2)
  # NOTE: like tinygrad, the indices are int32 (torch: int64)
  helper_test_op([xs], lambda x: F.max_pool2d(x, return_indices=True, **kw)[1], lambda x: x.max_pool2d(return_indices=True, **tgkw)[1],
                 forward_only=True, check_dtype=False)
  helper_test_op([xs], lambda x: F.max_pool2d(x, return_indices=True, **kw)[0], lambda x: x.max_pool2d(return_indices=True, **tgkw)[0])
def test_max_pool2d_indices_ties():
  x = np.array([[[[1, 3, 3, 0], [3, 2, 1, 1], [0, 0, 5, 5], [0, 0, 5, 5]]]], dtype=np.float32)
  _, ti = F.max_pool2d(torch.tensor(x), 2, return_indices=True)
  _, gi = Tensor(x).max_pool2d(return_indices=True)
  np.testing.assert_equal(gi.numpy(), ti.numpy())

@pytest.mark.parametrize("fxn", ["max", "avg"])
@pytest.mark.parametrize("kw", [{"kernel_size": 2, "padding": 2}, {"kernel_size": 7}, {"kernel_size": 3, "padding": -1}])
def test_pool_exceptions(fxn, kw):
  tf = F.max_pool2d if fxn == "max" else F.avg_pool2d
  tgkw = dict(kw, kernel_size=(kw["kernel_size"],) * 2)
  helper_test_exception([(1, 2, 5, 5)], lambda x: tf(x, **kw), lambda x: getattr(x, f"{fxn}_pool2d")(**tgkw), RuntimeError)

@pytest.mark.parametrize("xs,kw,out", [((1, 2, 6, 8), {"kernel_size": 2}, None), ((2, 1, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1}, None),
                                       ((1, 1, 5, 7), {"kernel_size": 2}, (5, 7))])
def test_max_unpool2d(xs, kw, out):
  x = _randn(*xs)
  tv, ti = F.max_pool2d(torch.tensor(x), return_indices=True, **kw)
  tk = dict(kw, kernel_size=(kw["kernel_size"],) * 2)
  def tf(v): return F.max_unpool2d(v, ti, output_size=out, **kw)
  def tgf(v): return v.max_unpool2d(Tensor(ti.numpy().astype(np.int32)), output_size=out, **tk)
  helper_test_op(None, tf, tgf, vals=[tv.numpy()])
def test_max_unpool2d_bad_output_size():
  idx = np.array([[[[0, 1], [2, 3]]]])
  helper_test_exception(None, lambda v: F.max_unpool2d(v, torch.tensor(idx), 2, output_size=(9, 9)),
                        lambda v: v.max_unpool2d(Tensor(idx.astype(np.int32)), (2, 2), output_size=(9, 9)), ValueError, vals=[_randn(1, 1, 2, 2)])

# *** interpolate ***

TORCH_LINEAR = {1: "linear", 2: "bilinear", 3: "trilinear"}
INTERP_CASES: list[tuple[tuple, tuple, str, bool]] = [
  ((1, 2, 5), (9,), "linear", False),
  ((1, 2, 5), (3,), "linear", True),
  ((1, 1, 4, 5), (7, 3), "linear", False),
  ((2, 1, 4, 5), (7, 9), "linear", True),
  ((1, 1, 3, 4, 3), (5, 2, 4), "linear", False),
  ((1, 2, 5, 6), (1, 1), "linear", True),
  ((1, 2, 7), (1,), "linear", True),
  ((1, 2, 5, 6), (1, 1), "linear", False),
  ((1, 2, 4, 5), (8, 11), "nearest", False),
  ((1, 2, 9, 7), (4, 3), "nearest", False),
  ((1, 2, 5), (12,), "nearest-exact", False),
  ((1, 2, 6, 7), (4, 10), "nearest-exact", False),
]
@pytest.mark.parametrize("xs,size,mode,ac", INTERP_CASES)
def test_interpolate(xs, size, mode, ac):
  tmode = TORCH_LINEAR[len(size)] if mode == "linear" else mode
  tkw = {"align_corners": ac} if mode == "linear" else {}
  helper_test_op([xs], lambda x: F.interpolate(x, size=size, mode=tmode, **tkw), lambda x: x.interpolate(size, mode=mode, align_corners=ac))
def test_interpolate_nearest_uint8():
  helper_test_op([(1, 1, 3, 4)], lambda x: F.interpolate(x, size=(5, 7), mode="nearest"), lambda x: x.interpolate((5, 7), mode="nearest"),
                 dtype=np.uint8, low=0, high=255)
def test_interpolate_nearest_align_corners_raises():
  helper_test_exception([(1, 1, 3, 4)], lambda x: F.interpolate(x, size=(5, 7), mode="nearest", align_corners=True),
                        lambda x: x.interpolate((5, 7), mode="nearest", align_corners=True), ValueError)
def test_interpolate_bad_mode_raises():
  helper_test_exception([(1, 1, 3, 4)], lambda x: F.interpolate(x, size=(5, 7), mode="area2"), lambda x: x.interpolate((5, 7), mode="area2"),
                        NotImplementedError)

# *** losses ***

REDUCTIONS = ["mean", "sum", "none"]

@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_crossentropy(reduction):
  y = _rng(3).uniform(0, 1, size=(3, 5)).astype(np.float32)
  helper_test_op([(3, 5)], lambda x: F.binary_cross_entropy(x, torch.tensor(y), reduction=reduction),
                 lambda x: x.binary_crossentropy(Tensor(y), reduction=reduction), low=0.05, high=0.95)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_crossentropy_logits(reduction):
  helper_test_op([(4, 3), (4, 3)], lambda x, y: F.binary_cross_entropy_with_logits(x, y.sigmoid(), reduction=reduction),
                 lambda x, y: x.binary_crossentropy_logits(y.sigmoid(), reduction=reduction), low=-8, high=8)
def test_binary_crossentropy_logits_pos_weight():
  helper_test_op([(4, 3), (4, 3), (3,)], lambda x, y, pw: F.binary_cross_entropy_with_logits(x, y.sigmoid(), pos_weight=pw.detach().abs()),
                 lambda x, y, pw: x.binary_crossentropy_logits(y.sigmoid(), pos_weight=pw.abs()))
def test_binary_crossentropy_exceptions():
  helper_test_exception([(3, 4), (3, 5)], lambda x, y: F.binary_cross_entropy(x.sigmoid(), y.sigmoid()),
                        lambda x, y: x.sigmoid().binary_crossentropy(y.sigmoid()), ValueError)
  helper_test_exception([(3, 4), (3, 5)], lambda x, y: F.binary_cross_entropy_with_logits(x, y.sigmoid()),
                        lambda x, y: x.binary_crossentropy_logits(y.sigmoid()), ValueError)
  helper_test_exception([(3, 4), (3, 4)], lambda x, y: F.binary_cross_entropy_with_logits(x, y.sigmoid(), reduction="avg"),
                        lambda x, y: x.binary_crossentropy_logits(y.sigmoid(), reduction="avg"), ValueError)

@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("ls", [0.0, 0.2])
def test_cross_entropy_class_indices(reduction, ls):
  helper_test_op(None, lambda x, y: F.cross_entropy(x, y, reduction=reduction, label_smoothing=ls),
                 lambda x, y: x.cross_entropy(y, reduction=reduction, label_smoothing=ls), vals=[_randn(5, 7), _labels(7, 5)])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_probabilities(reduction):
  p = _rng(4).random((4, 6)).astype(np.float32)
  p /= p.sum(1, keepdims=True)
  helper_test_op([(4, 6)], lambda x: F.cross_entropy(x, torch.tensor(p), reduction=reduction, label_smoothing=0.1),
                 lambda x: x.cross_entropy(Tensor(p), reduction=reduction, label_smoothing=0.1))
def test_cross_entropy_kdim():
  helper_test_op(None, lambda x, y: F.cross_entropy(x, y, reduction="mean"), lambda x, y: x.cross_entropy(y),
                 vals=[_randn(2, 4, 3, 5), _labels(4, 2, 3, 5)])
def test_cross_entropy_1d():
  helper_test_op(None, lambda x, y: F.cross_entropy(x, y), lambda x, y: x.cross_entropy(y), vals=[_randn(6), np.array(4, dtype=np.int64)])
def test_cross_entropy_int32_target():
  helper_test_op(None, lambda x, y: F.cross_entropy(x, y.long()), lambda x, y: x.cross_entropy(y),
                 vals=[_randn(3, 4), _labels(4, 3).astype(np.int32)])
@pytest.mark.parametrize("x,y,kw,exc", [
  ((3, 4), (2,), {}, ValueError), ((3, 4), (3,), {"label_smoothing": 1.5}, RuntimeError), ((3, 4), (3,), {"reduction": "avg"}, ValueError)])
def test_cross_entropy_exceptions(x, y, kw, exc):
  helper_test_exception(None, lambda a, b: F.cross_entropy(a, b, **kw), lambda a, b: a.cross_entropy(b, **kw), exc, vals=[_randn(*x), _labels(4, *y)])

@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss(reduction):
  helper_test_op(None, lambda x, y: F.nll_loss(F.log_softmax(x, 1), y, reduction=reduction),
                 lambda x, y: x.log_softmax(1).nll_loss(y, reduction=reduction), vals=[_randn(5, 4), _labels(4, 5)])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss_weight_ignore_index(reduction):
  y = np.array([0, 2, 1, 2, 3, 2], dtype=np.int64)
  w = np.array([0.5, 2.0, 1.5, 0.25], dtype=np.float32)
  helper_test_op(None, lambda x: F.nll_loss(x, torch.tensor(y), weight=torch.tensor(w), ignore_index=2, reduction=reduction),
                 lambda x: x.nll_loss(Tensor(y), weight=Tensor(w), ignore_index=2, reduction=reduction), vals=[_randn(6, 4)])
def test_nll_loss_weight_mean():
  w = np.array([0.5, 2.0, 1.5], dtype=np.float32)
  helper_test_op(None, lambda x, y: F.nll_loss(x, y, weight=torch.tensor(w)), lambda x, y: x.nll_loss(y, weight=Tensor(w)),
                 vals=[_randn(7, 3), _labels(3, 7)])
def test_nll_loss_ignore_index_negative():
  y = np.array([1, -100, 0, 2], dtype=np.int64)
  helper_test_op(None, lambda x: F.nll_loss(x, torch.tensor(y), ignore_index=-100), lambda x: x.nll_loss(Tensor(y), ignore_index=-100),
                 vals=[_randn(4, 3)])
def test_nll_loss_kdim():
  helper_test_op(None, lambda x, y: F.nll_loss(x, y, reduction="sum"), lambda x, y: x.nll_loss(y, reduction="sum"),
                 vals=[_randn(2, 3, 4), _labels(3, 2, 4)])
def test_nll_loss_1d():
  helper_test_op(None, lambda x, y: F.nll_loss(x, y), lambda x, y: x.nll_loss(y), vals=[_randn(5), np.array(3, dtype=np.int64)])
@pytest.mark.parametrize("x,y,kw,exc", [((3, 4), (2,), {}, ValueError), ((3, 4), (3,), {"reduction": "avg"}, ValueError)])
def test_nll_loss_exceptions(x, y, kw, exc):
  helper_test_exception(None, lambda a, b: F.nll_loss(a, b, **kw), lambda a, b: a.nll_loss(b, **kw), exc, vals=[_randn(*x), _labels(4, *y)])
def test_nll_loss_bad_weight():
  helper_test_exception(None, lambda a, b: F.nll_loss(a, b, weight=torch.ones(3)), lambda a, b: a.nll_loss(b, weight=Tensor.ones(3)), RuntimeError,
                        vals=[_randn(3, 4), _labels(4, 3)])

@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_sparse_categorical_crossentropy(reduction):
  helper_test_op(None, lambda x, y: F.cross_entropy(x, y, reduction=reduction),
                 lambda x, y: x.sparse_categorical_crossentropy(y, reduction=reduction), vals=[_randn(6, 5), _labels(5, 6)])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_sparse_categorical_crossentropy_ignore_smoothing(reduction):
  y = np.array([0, 3, 1, 3, 2, 4], dtype=np.int64)
  helper_test_op(None, lambda x: F.cross_entropy(x, torch.tensor(y), ignore_index=3, label_smoothing=0.3, reduction=reduction),
                 lambda x: x.sparse_categorical_crossentropy(Tensor(y), ignore_index=3, label_smoothing=0.3, reduction=reduction),
                 vals=[_randn(6, 5)])
def test_sparse_categorical_crossentropy_3d():
  # NOTE: classes on the last axis (tinygrad), torch wants them on dim 1
  helper_test_op(None, lambda x, y: F.cross_entropy(x.permute(0, 2, 1), y), lambda x, y: x.sparse_categorical_crossentropy(y),
                 vals=[_randn(2, 3, 4), _labels(4, 2, 3)])

# *** attention ***

def test_sdpa():
  helper_test_op([(2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 7)], F.scaled_dot_product_attention, lambda q, k, v: q.scaled_dot_product_attention(k, v))
def test_sdpa_bool_mask():
  m = _rng(5).random((4, 6)) > 0.3
  m[:, 0] = True
  helper_test_op([(2, 4, 5), (2, 6, 5), (2, 6, 3)], lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(m)),
                 lambda q, k, v: q.scaled_dot_product_attention(k, v, attn_mask=Tensor(m)))
def test_sdpa_float_mask():
  helper_test_op([(1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4), (3, 5)], lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                 lambda q, k, v, m: q.scaled_dot_product_attention(k, v, attn_mask=m))
@pytest.mark.parametrize("L,S", [(4, 4), (3, 5)])
def test_sdpa_causal(L, S):
  helper_test_op([(2, 2, L, 4), (2, 2, S, 4), (2, 2, S, 3)], lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                 lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True))
def test_sdpa_scale_gqa():
  helper_test_op([(1, 4, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)], lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3, enable_gqa=True),
                 lambda q, k, v: q.scaled_dot_product_attention(k, v, scale=0.3, enable_gqa=True))
def test_sdpa_causal_and_mask_raises():
  helper_test_exception([(2, 3, 4), (2, 3, 4), (2, 3, 4)],
                        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(3, 3, dtype=torch.bool), is_causal=True),
                        lambda q, k, v: q.scaled_dot_product_attention(k, v, attn_mask=Tensor.ones(3, 3, dtype=dtypes.bool), is_causal=True),
                        RuntimeError)

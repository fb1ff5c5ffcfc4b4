"""Front-end parity with tinygrad's Tensor API, vs torch: pad modes, linspace, normalize, replace, nonzero/masked_select with
`size`, reductions and scans with a dtype by name, arange dtypes, stack/cat of a sequence, scatter with a tensor src,
bilinear interpolation of uint8, max_unpool2d with inf, sigmoid at extreme inputs, bad shifts and bad one_hot input."""
from __future__ import annotations
import math

import numpy as np
import pytest

from helpers import TG_TO_TORCH, helper_test_exception, helper_test_op, torch
from tg_core.dtype import dtypes
from tg_core.tensor import Tensor

F = torch.nn.functional

# *** pad modes ***

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pads", [((1, 2, 5), (2, 1)), ((1, 3, 4, 5), (1, 2, 3, 0)), ((2, 1, 3, 3, 4), (1, 1, 2, 0, 0, 2)), ((1, 1, 7), (0, 3)),
                                        ((1, 2, 4, 4), (3, 3, 3, 3))])
def test_pad_modes(mode: str, shape: tuple, pads: tuple) -> None:
  helper_test_op([shape], lambda x: F.pad(x, pads, mode=mode), lambda x: x.pad(pads, mode=mode))

@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_modes_negative(mode: str) -> None:
  helper_test_op([(1, 2, 6)], lambda x: F.pad(x, (-1, 2), mode=mode), lambda x: x.pad((-1, 2), mode=mode))

def test_pad_mode_errors() -> None:
  helper_test_exception([(1, 2, 3)], lambda x: F.pad(x, (3, 0), mode="reflect"), lambda x: x.pad((3, 0), mode="reflect"), (RuntimeError, ValueError))
  with pytest.raises(ValueError, match="wrapping"): Tensor.ones(1, 2, 3).pad((4, 0), mode="circular")
  with pytest.raises(NotImplementedError): Tensor.ones(1, 2, 3).pad((1, 0), mode="symmetric")

# *** creation ***

@pytest.mark.parametrize("start,stop,steps", [(0, 1, 5), (-1, 1, 7), (3, 10, 1), (3, 10, 0), (5, -5, 11), (0.5, 2.25, 4), (1e-3, 1e3, 13)])
def test_linspace(start: float, stop: float, steps: int) -> None:
  helper_test_op([], lambda: torch.linspace(start, stop, steps), lambda: Tensor.linspace(start, stop, steps), forward_only=True)

@pytest.mark.parametrize("dt", ["int32", "int64", "float16", "float64", dtypes.int16])
def test_linspace_dtype(dt: object) -> None:
  tdt = getattr(torch, dt) if isinstance(dt, str) else TG_TO_TORCH[dt]  # type: ignore[index]
  helper_test_op([], lambda: torch.linspace(0, 10, 5, dtype=tdt), lambda: Tensor.linspace(0, 10, 5, dtype=dt), forward_only=True)  # type: ignore[arg-type]
  helper_test_op([], lambda: torch.linspace(1, 20, 4, dtype=tdt), lambda: Tensor.linspace(1, 20, 4, dtype=dt), forward_only=True)  # type: ignore[arg-type]

def test_linspace_errors() -> None:
  # tinygrad's ValueError (torch: RuntimeError for the steps, NotImplementedError for bool)
  with pytest.raises(ValueError): Tensor.linspace(0, 1, -1)
  with pytest.raises(ValueError): Tensor.linspace(0, 1, 3, dtype=dtypes.bool)
  with pytest.raises(RuntimeError): torch.linspace(0, 1, -1)

@pytest.mark.parametrize("args,kwargs", [((5,), {}), ((5.0,), {}), ((0, 5, 0.5), {}), ((1, 5, 2), {}), ((-3, 3), {}), ((0, 1, 0.1), {}),
                                         ((5,), {"dtype": "int16"}), ((5,), {"dtype": "float64"}), ((0, 10, 3), {"dtype": "float16"}),
                                         ((10, 0, -3), {}), ((2.5,), {}), ((5,), {"dtype": dtypes.uint8})])
def test_arange_dtypes(args: tuple, kwargs: dict) -> None:
  # the result dtype follows torch's rules, except that ints are int32 (tinygrad's default int; torch: int64)
  tk = {k: getattr(torch, v) if isinstance(v, str) else TG_TO_TORCH[v] for k, v in kwargs.items()}
  t = torch.arange(*args, **tk)
  g = Tensor.arange(*args, **kwargs)
  expected = dtypes.int32 if t.dtype == torch.int64 and "dtype" not in kwargs else {v: k for k, v in TG_TO_TORCH.items()}[t.dtype]
  assert g.dtype == expected, f"{g.dtype} != {expected}"
  np.testing.assert_allclose(g.numpy().astype(np.float64), t.numpy().astype(np.float64), rtol=1e-6)

# *** normalize / replace ***

@pytest.mark.parametrize("p,dim", [(2.0, 1), (1.0, 0), (3.0, -1), (math.inf, 1), (0.5, 1)])
def test_normalize(p: float, dim: int) -> None:
  helper_test_op([(3, 4)], lambda x: F.normalize(x, p=p, dim=dim), lambda x: x.normalize(p=p, dim=dim), low=0.1, high=2)
  helper_test_op([(2, 3, 5)], lambda x: F.normalize(x, p=p, dim=dim), lambda x: x.normalize(p=p, dim=dim))

def test_normalize_zero_rows() -> None:
  # an all-zero row gives zeros and a finite gradient (the eps branch), like torch
  vals = [np.array([[0.0, 0.0, 0.0], [3.0, 4.0, 0.0]], np.float32)]
  helper_test_op(None, lambda x: F.normalize(x, dim=1), lambda x: x.normalize(dim=1), vals=vals)
  helper_test_op(None, lambda x: F.normalize(x, p=1, dim=1), lambda x: x.normalize(p=1, dim=1), vals=vals)
  helper_test_op(None, lambda x: F.normalize(x, p=3, dim=1), lambda x: x.normalize(p=3, dim=1), vals=vals)

def test_replace() -> None:
  a = Tensor([1.0, 2.0, 3.0])
  b = Tensor([4, 5, 6])
  assert a.replace(b) is a
  assert a.dtype == dtypes.int32
  np.testing.assert_equal(a.numpy(), [4, 5, 6])
  with pytest.raises(ValueError, match="shape"): a.replace(Tensor([1.0, 2.0]))
  # replace keeps the graph (lazy), not a copy
  c = Tensor([1.0, 2.0]) * 2
  d = Tensor([0.0, 0.0]).replace(c)
  assert d.uop is c.uop

# *** nonzero / masked_select with size ***

def _nonzero_static(x: torch.Tensor, size: int, fill_value: int) -> torch.Tensor: return torch.nonzero_static(x, size=size, fill_value=fill_value)

@pytest.mark.parametrize("vals", [[0, 1, 0, 2, 3], [[0, 1], [3, 0], [5, 6]], [[[1, 0], [0, 0]], [[0, 2], [3, 0]]], [0, 0, 0], [4]])
@pytest.mark.parametrize("size", [0, 1, 3, 8])
@pytest.mark.parametrize("fill_value", [0, -1, 7])
def test_nonzero_size(vals: list, size: int, fill_value: int) -> None:
  # torch.nonzero_static is nonzero with a size; tg's indices are int32 (tinygrad), torch's int64
  ref = _nonzero_static(torch.tensor(vals), size, fill_value).numpy()
  ret = Tensor(vals).nonzero(size=size, fill_value=fill_value)
  assert ret.dtype == dtypes.int32
  np.testing.assert_equal(ret.numpy(), ref)

def test_nonzero_size_default_fill_and_float() -> None:
  # the default fill is 0, as tinygrad (torch.nonzero_static: -1)
  np.testing.assert_equal(Tensor([0.0, 2.5, 0.0, -1.0]).nonzero(size=4).numpy(), _nonzero_static(torch.tensor([0.0, 2.5, 0.0, -1.0]), 4, 0).numpy())
  np.testing.assert_equal(Tensor([0.0, 2.5]).nonzero().numpy(), torch.tensor([0.0, 2.5]).nonzero().numpy())
  with pytest.raises(ValueError): Tensor([1, 2]).nonzero(size=-1)

def _masked_select_size(x: torch.Tensor, m: torch.Tensor, size: int, fill: float) -> torch.Tensor:
  sel = torch.masked_select(x, m)[:size]
  return torch.cat([sel, torch.full((size - sel.numel(),), fill, dtype=x.dtype)])

@pytest.mark.parametrize("shape,mshape", [((5,), (5,)), ((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1), (2, 3))])
@pytest.mark.parametrize("size", [0, 2, 5, 14])
def test_masked_select_size(shape: tuple, mshape: tuple, size: int) -> None:
  rng = np.random.default_rng(size)
  x = rng.uniform(-3, 3, shape).astype(np.float32)
  m = rng.random(mshape) > 0.5
  tx, tm = torch.tensor(x), torch.tensor(m)
  if shape != mshape: tx = tx.expand(torch.broadcast_shapes(shape, mshape))
  for fill in (0.0, -9.5):
    ref = _masked_select_size(tx, tm, size, fill)
    ret = Tensor(x).masked_select(Tensor(m), size=size, fill_value=fill)
    assert ret.dtype == dtypes.float32 and ret.shape == (size,)
    np.testing.assert_equal(ret.numpy(), ref.numpy())
  np.testing.assert_equal(Tensor(x).masked_select(Tensor(m)).numpy(), torch.masked_select(tx, tm).numpy())

def test_masked_select_size_int_and_grad() -> None:
  np.testing.assert_equal(Tensor([1, 2, 3]).masked_select(Tensor([True, False, True]), size=3, fill_value=9).numpy(), [1, 3, 9])
  helper_test_op([(6,)], lambda x: _masked_select_size(x, torch.tensor([True, False, True, True, False, True]), 5, 0.0),
                 lambda x: x.masked_select(Tensor([True, False, True, True, False, True]), size=5))

# *** dtypes by name ***

@pytest.mark.parametrize("op", ["sum", "prod", "cumsum", "cumprod"])
@pytest.mark.parametrize("dt", ["int64", "float32", "float64", "float16", "int16"])
def test_reduce_dtype_by_name(op: str, dt: str) -> None:
  kw = {"dim": 0} if op.startswith("cum") else {}
  helper_test_op(None, lambda x: getattr(x, op)(dtype=getattr(torch, dt), **kw), lambda x: getattr(x, op)(0, dtype=dt) if kw else getattr(x, op)(dtype=dt),
                 vals=[np.array([1, 2, 3, 4], np.int32)])
  helper_test_op([(3, 4)], lambda x: getattr(x, op)(dtype=getattr(torch, dt), **kw), lambda x: getattr(x, op)(0, dtype=dt) if kw else getattr(x, op)(dtype=dt),
                 low=-1, high=1.5, forward_only=dt.startswith("int"), atol=1e-2 if dt == "float16" else 1e-6)

def test_reduce_dtype_bad_name() -> None:
  with pytest.raises(TypeError, match="unknown dtype"): Tensor([1, 2]).sum(dtype="int33")
  with pytest.raises(TypeError, match="unknown dtype"): Tensor([1, 2]).cumsum(0, dtype="floaty")

# *** stack / cat of a sequence ***

def test_stack_cat_of_sequence() -> None:
  helper_test_op([(2, 3), (2, 3), (2, 3)], lambda a, b, c: torch.stack((a, b, c)), lambda a, b, c: Tensor.stack((a, b, c)))
  helper_test_op([(2, 3), (2, 3)], lambda a, b: torch.stack([a, b], 1), lambda a, b: Tensor.stack([a, b], dim=1))
  helper_test_op([(2, 3), (4, 3)], lambda a, b: torch.cat((a, b)), lambda a, b: Tensor.cat((a, b)))
  helper_test_op([(2, 3), (2, 1)], lambda a, b: torch.cat([a, b], -1), lambda a, b: Tensor.cat([a, b], dim=-1))
  helper_test_op([(2, 3)], lambda a: torch.stack((a,)), lambda a: Tensor.stack((a,)))

# *** scatter with a tensor src ***

@pytest.mark.parametrize("shape,dim,idx,src_shape", [((3, 4), 0, [[0, 1, 2, 0]], (1, 4)), ((3, 4), 1, [[3, 0], [1, 2], [0, 3]], (3, 2)),
                                                     ((4, 3), -2, [[3, 2, 1], [0, 0, 2]], (2, 3)), ((5,), 0, [4, 0, 2], (3,))])
def test_scatter_tensor_src(shape: tuple, dim: int, idx: list, src_shape: tuple) -> None:
  helper_test_op([shape, src_shape], lambda x, s: x.scatter(dim, torch.tensor(idx), s), lambda x, s: x.scatter(dim, Tensor(idx), s))

def test_scatter_tensor_src_duplicates() -> None:
  # a repeated index: the last src value wins, as torch on CPU. The gradient goes to the winner only (tinygrad; torch gives every
  # duplicate the gradient of the position), so only the forward is compared
  helper_test_op([(3, 4), (3, 2)], lambda x, s: x.scatter(1, torch.tensor([[3, 3], [1, 2], [0, 0]]), s),
                 lambda x, s: x.scatter(1, Tensor([[3, 3], [1, 2], [0, 0]]), s), forward_only=True)

def test_scatter_tensor_src_int() -> None:
  helper_test_op([(3, 3), (2, 3)], lambda x, s: x.scatter(0, torch.tensor([[2, 0, 1], [1, 1, 0]]), s),
                 lambda x, s: x.scatter(0, Tensor([[2, 0, 1], [1, 1, 0]]), s), dtype=np.int32, low=-5, high=5)

# *** interpolate bilinear on uint8 ***

@pytest.mark.parametrize("shape,size", [((1, 1, 4, 4), (6, 6)), ((2, 3, 5, 7), (3, 11)), ((1, 2, 8, 3), (1, 9)), ((1, 1, 3, 5), (3, 2)),
                                        ((1, 1, 6, 6), (6, 6))])
@pytest.mark.parametrize("align_corners", [False, True])
def test_interpolate_bilinear_uint8(shape: tuple, size: tuple, align_corners: bool) -> None:
  helper_test_op([shape], lambda x: F.interpolate(x, size, mode="bilinear", align_corners=align_corners),
                 lambda x: x.interpolate(size, mode="bilinear", align_corners=align_corners), dtype=np.uint8, low=0, high=256, atol=0, rtol=0)

@pytest.mark.parametrize("align_corners", [False, True])
def test_interpolate_bilinear_trilinear_float(align_corners: bool) -> None:
  helper_test_op([(2, 3, 4, 5)], lambda x: F.interpolate(x, (7, 3), mode="bilinear", align_corners=align_corners),
                 lambda x: x.interpolate((7, 3), mode="bilinear", align_corners=align_corners))
  helper_test_op([(1, 2, 3, 4, 2)], lambda x: F.interpolate(x, (2, 5, 3), mode="trilinear", align_corners=align_corners),
                 lambda x: x.interpolate((2, 5, 3), mode="trilinear", align_corners=align_corners))

def test_interpolate_bilinear_bad_rank() -> None:
  helper_test_exception([(1, 4, 4)], lambda x: F.interpolate(x, (3, 3), mode="bilinear"), lambda x: x.interpolate((3, 3), mode="bilinear"), ValueError)

# *** max_unpool2d with inf ***

def test_max_unpool2d_inf() -> None:
  vals = [np.array([[[[1.0, math.inf, 0.0, -1.0], [-math.inf, 2.0, 3.0, -math.inf], [5.0, -math.inf, math.inf, math.inf],
                      [0.0, 1.0, -math.inf, 2.0]]]], np.float32)]
  def torch_fn(x: torch.Tensor) -> torch.Tensor: return F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2)
  def tg_fn(x: Tensor) -> Tensor: return Tensor.max_unpool2d(*x.max_pool2d(2, return_indices=True), 2)
  helper_test_op(None, torch_fn, tg_fn, vals=vals, forward_only=True)
  # the gradient with the infs replaced by distinct finite values (no ties: tg splits a tie's gradient, torch picks one)
  helper_test_op(None, torch_fn, tg_fn, vals=[np.where(np.isinf(vals[0]), 10.0 + np.arange(16).reshape(vals[0].shape), vals[0]).astype(np.float32)])

def test_max_unpool2d_inf_overlapping() -> None:
  vals = [np.array([[[[1.0, math.inf, 0.0], [-1.0, 2.0, -math.inf], [4.0, 3.0, 5.0]]]], np.float32)]
  helper_test_op(None, lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, 1, return_indices=True), 2, 1, output_size=(3, 3)),
                 lambda x: Tensor.max_unpool2d(*x.max_pool2d(2, 1, return_indices=True), 2, 1, output_size=(3, 3)), vals=vals, forward_only=True)

# *** sigmoid at extreme inputs ***

def test_sigmoid_extremes() -> None:
  x = np.array([-1e30, -1000.0, -200.0, -104.0, -88.7, -50.0, -20.0, 0.0, 20.0, 50.0, 88.7, 104.0, 1000.0, 1e30, -math.inf, math.inf], np.float32)
  # (grad_atol: beyond x = 17 torch's y * (1 - y) rounds to 0 where tg's e^-x / (1 + e^-x)^2 keeps the tiny true value; in float64
  # torch's 1 - y cancels to ~1e-7 relative error at x = 20, hence the float64 grad_rtol)
  helper_test_op(None, lambda t: t.sigmoid(), vals=[x], atol=0, rtol=1e-5, grad_atol=1e-9, grad_rtol=1e-5)
  helper_test_op(None, lambda t: t.sigmoid(), vals=[x.astype(np.float16)], atol=1e-3, grad_atol=1e-3)
  helper_test_op(None, lambda t: t.sigmoid(), vals=[x.astype(np.float64)], atol=0, rtol=1e-12, grad_atol=1e-18, grad_rtol=1e-7)
  helper_test_op(None, lambda t: t.sigmoid(), vals=[np.array([math.nan], np.float32)])

# *** shifts ***

@pytest.mark.parametrize("op", ["__lshift__", "__rshift__"])
def test_shift_by_float_raises(op: str) -> None:
  # torch: NotImplementedError; tinygrad: RuntimeError. tg raises NotImplementedError, which is both
  helper_test_exception(None, lambda x: getattr(x, op)(1.5), lambda x: getattr(x, op)(1.5), NotImplementedError, vals=[np.array([1, 2], np.int32)])
  helper_test_exception(None, lambda x: getattr(x, op)(1), lambda x: getattr(x, op)(1), NotImplementedError, vals=[np.array([1.0, 2.0], np.float32)])
  with pytest.raises(RuntimeError): getattr(Tensor([1, 2]), op)(Tensor([1.0, 2.0]))
  with pytest.raises(RuntimeError): getattr(Tensor([1, 2]), op)("1")

@pytest.mark.parametrize("op", ["__lshift__", "__rshift__"])
def test_shift_by_negative_raises(op: str) -> None:
  # like tinygrad (and Python's ints): ValueError. torch returns 0 instead
  with pytest.raises(ValueError, match="negative shift"): getattr(Tensor([1, 2]), op)(-1)
  with pytest.raises(ValueError): getattr(1, op)(-1)

@pytest.mark.parametrize("op", ["__lshift__", "__rshift__"])
@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int32, np.int64])
def test_shift_valid(op: str, dt: type) -> None:
  helper_test_op(None, lambda x: getattr(x, op)(3), vals=[np.array([0, 1, 5, 17, 100], dt)])
  helper_test_op(None, lambda x, y: getattr(x, op)(y), vals=[np.array([1, 5, 17, 100], dt), np.array([0, 1, 2, 3], dt)])

# *** one_hot ***

def test_one_hot_bad_input() -> None:
  # a float index: RuntimeError in torch, tinygrad and tg
  helper_test_exception(None, lambda x: F.one_hot(x, 3), lambda x: x.one_hot(3), RuntimeError, vals=[np.array([0.0, 1.0], np.float32)])
  helper_test_exception(None, lambda x: F.one_hot(x, 3), lambda x: x.one_hot(3), RuntimeError, vals=[np.array([True, False])])
  # a negative num_classes (other than torch's -1, "infer"): ValueError like tinygrad (torch: RuntimeError)
  with pytest.raises(ValueError, match="non-negative"): Tensor([0, 1]).one_hot(-2)

def test_one_hot_valid_and_out_of_range() -> None:
  helper_test_op(None, lambda x: F.one_hot(x, 5), lambda x: x.one_hot(5), vals=[np.array([0, 4, 2, 2], np.int64)], check_dtype=False)
  helper_test_op(None, lambda x: F.one_hot(x), lambda x: x.one_hot(), vals=[np.array([[0, 3], [1, 1]], np.int64)], check_dtype=False)
  # out-of-range classes give an all-zero row (tinygrad, lazy); torch raises
  np.testing.assert_equal(Tensor([1, 5, -1]).one_hot(3).numpy(), [[0, 1, 0], [0, 0, 0], [0, 0, 0]])
  with pytest.raises(RuntimeError): F.one_hot(torch.tensor([1, 5]), 3)

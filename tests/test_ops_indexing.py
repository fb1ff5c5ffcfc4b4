"""Indexing vs torch: __getitem__ (ints, slices with any step, None, Ellipsis, integer tensors of any dtype), __setitem__,
gather, scatter, scatter_reduce, masked_fill, masked_select, nonzero, one_hot. Forward values, dtypes and gradients.
Where tg follows tinygrad instead of torch (uint8 index tensors are indices, out-of-bounds index tensors read 0,
one_hot/nonzero are int32, bool masks in getitem raise) the torch side is written to compute the tinygrad result."""
from __future__ import annotations
from typing import Any

import numpy as np
import pytest

from helpers import helper_test_exception, helper_test_op
from tg_core.dtype import dtypes
from tg_core.tensor import Tensor

torch = pytest.importorskip("torch")

def _np_dt(name: str) -> Any: return {"int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8,
                                      "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64}[name]

# *** getitem: basic ***

@pytest.mark.parametrize("idx", [0, -1, 2, (1, 2), (-2, -1), (0, slice(None), 3), (slice(1, 3),), (slice(None, None, 2),), (slice(-3, None), 1),
                                 (slice(1, -1), slice(None, 3), slice(2, None)), (slice(-100, 100),), (slice(5, 1),), (slice(3, 3),),
                                 (slice(None), slice(None), slice(None, None, 3)), (slice(0, 10, 4), slice(1, 3, 2)), (Ellipsis, 1),
                                 (1, Ellipsis), (None, 1), (slice(None), None, 0, None), (Ellipsis, None), (None, Ellipsis, None),
                                 (2, Ellipsis, -1, None), (slice(1, None), Ellipsis, slice(None, None, 2))])
def test_getitem_basic(idx: Any) -> None:
  helper_test_op([(3, 4, 5)], lambda x: x[idx], lambda x: x[idx])

# torch has no negative steps: its side indexes with the equivalent index tensor
@pytest.mark.parametrize("sl", [slice(None, None, -1), slice(None, None, -2), slice(5, 1, -1), slice(-2, None, -3), slice(1, 5, -1),
                                slice(100, -100, -4), slice(6, None, -7), slice(0, None, -1)])
def test_getitem_negative_step(sl: slice) -> None:
  idx = list(range(7))[sl]
  helper_test_op([(7, 3)], lambda x: x[torch.tensor(idx, dtype=torch.int64)], lambda x: x[sl])
  helper_test_op([(2, 7)], lambda x: x[:, torch.tensor(idx, dtype=torch.int64)], lambda x: x[:, sl])

def test_getitem_negative_step_2d() -> None:
  helper_test_op([(4, 6)], lambda x: x.flip(0, 1)[:, ::2], lambda x: x[::-1, ::-2])
  helper_test_op([(4, 6)], lambda x: x[1:3].flip(0)[:, 1::3], lambda x: x[2:0:-1, 1::3])

def test_getitem_0d_and_empty() -> None:
  helper_test_op([()], lambda x: x[()], lambda x: x[()])
  helper_test_op([()], lambda x: x[None], lambda x: x[None])
  helper_test_op([()], lambda x: x[...], lambda x: x[...])
  helper_test_op([()], lambda x: x[None, ..., None], lambda x: x[None, ..., None])
  helper_test_op([(0, 3)], lambda x: x[:, 1], lambda x: x[:, 1])
  helper_test_op([(0, 3)], lambda x: x[1:, ::2], lambda x: x[1:, ::2])
  helper_test_op([(4, 3)], lambda x: x[2:2], lambda x: x[2:2])
  helper_test_op([(4, 0)], lambda x: x[-1], lambda x: x[-1])

def test_getitem_dtypes() -> None:
  for npdt in (np.int32, np.int8, np.uint8, np.int64, np.float16, np.bool_):
    vals = [(np.arange(12) % 3).astype(npdt).reshape(3, 4)]
    helper_test_op(None, lambda x: x[1:, ::2], lambda x: x[1:, ::2], vals=vals)
    helper_test_op(None, lambda x: x[torch.tensor([2, 0, 2])], lambda x: x[Tensor([2, 0, 2])], vals=vals)

def test_getitem_errors() -> None:
  helper_test_exception([(3, 4)], lambda x: x[3], lambda x: x[3], IndexError)
  helper_test_exception([(3, 4)], lambda x: x[-4], lambda x: x[-4], IndexError)
  helper_test_exception([(3, 4)], lambda x: x[0, 4], lambda x: x[0, 4], IndexError)
  helper_test_exception([(3, 4)], lambda x: x[0, 0, 0], lambda x: x[0, 0, 0], IndexError)
  helper_test_exception([()], lambda x: x[0], lambda x: x[0], IndexError)
  helper_test_exception([(0,)], lambda x: x[0], lambda x: x[0], IndexError)
  helper_test_exception([(3, 4)], lambda x: x[1.5], lambda x: x[1.5], IndexError)
  helper_test_exception([(3, 4)], lambda x: x[::0], lambda x: x[::0], ValueError)
  helper_test_exception([(3, 4)], lambda x: x[torch.tensor([0.0])], lambda x: x[Tensor([0.0])], IndexError)
  helper_test_exception([(3, 4)], lambda x: x[torch.tensor([0, 1]), torch.tensor([0, 1, 2])], lambda x: x[Tensor([0, 1]), Tensor([0, 1, 2])],
                        IndexError)
  # tinygrad-only rules: one ellipsis at most, no bool masks
  with pytest.raises(IndexError): Tensor.ones(2, 3)[..., ...]
  with pytest.raises(IndexError): Tensor.ones(2, 3)[Tensor([True, False])]
  with pytest.raises(IndexError): Tensor.ones(2, 3)[True]
  with pytest.raises(IndexError): Tensor.ones(2, 3)[[0.5]]
  with pytest.raises(IndexError): Tensor.ones(2, 3)["a"]

# *** getitem: tensor (fancy) indexing ***

def test_getitem_uint8_index() -> None:
  # the brief's example: tinygrad treats a uint8 tensor as indices (torch would treat it as a mask)
  np.testing.assert_equal(Tensor([10, 20, 30, 40])[Tensor([1, 2, 3, 0], dtype=dtypes.uint8)].numpy(), [20, 30, 40, 10])
  vals = [np.array([10, 20, 30, 40])]
  helper_test_op(None, lambda x: x[torch.tensor([1, 2, 3, 0])], lambda x: x[Tensor([1, 2, 3, 0], dtype=dtypes.uint8)], vals=vals)

@pytest.mark.parametrize("dt", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"])
def test_getitem_index_dtypes(dt: str) -> None:
  idx = np.array([[4, 0], [2, 2]], dtype=_np_dt(dt))
  helper_test_op([(5, 3)], lambda x: x[torch.tensor(idx.astype(np.int64))], lambda x: x[Tensor(idx)])
  helper_test_op([(3, 5)], lambda x: x[:, torch.tensor(idx.astype(np.int64))], lambda x: x[:, Tensor(idx)])

def test_getitem_index_wide_dim() -> None:
  # index values beyond the index dtype's range of `idx + size` (int8 with a 300-long dim)
  idx = np.array([-1, -128, 5, 127], dtype=np.int8)
  helper_test_op([(300,)], lambda x: x[torch.tensor(idx.astype(np.int64))], lambda x: x[Tensor(idx)])
  uidx = np.array([255, 0, 299 - 256], dtype=np.uint8)
  helper_test_op([(300,)], lambda x: x[torch.tensor(uidx.astype(np.int64))], lambda x: x[Tensor(uidx)])

def _t(v: Any) -> Any: return torch.tensor(v, dtype=torch.int64)

@pytest.mark.parametrize("tg_fxn,torch_fxn", [
  (lambda x: x[Tensor([0, 2, -1])], lambda x: x[_t([0, 2, -1])]),
  (lambda x: x[Tensor([[1, 0], [2, -3]])], lambda x: x[_t([[1, 0], [2, -3]])]),
  (lambda x: x[:, Tensor([3, 0, 0, 1])], lambda x: x[:, _t([3, 0, 0, 1])]),
  (lambda x: x[Tensor([0, 1]), Tensor([2, 3])], lambda x: x[_t([0, 1]), _t([2, 3])]),
  (lambda x: x[Tensor([[0], [2]]), Tensor([1, 3, 0])], lambda x: x[_t([[0], [2]]), _t([1, 3, 0])]),
  (lambda x: x[Tensor([0, 2]), 1:3, Tensor([1, 4])], lambda x: x[_t([0, 2]), 1:3, _t([1, 4])]),
  (lambda x: x[..., Tensor([4, -5])], lambda x: x[..., _t([4, -5])]),
  (lambda x: x[Tensor([1, 0]), None, Tensor([0, 0])], lambda x: x[_t([1, 0]), None, _t([0, 0])]),
  (lambda x: x[None, Tensor([2, 1]), ::2], lambda x: x[None, _t([2, 1]), ::2]),
  (lambda x: x[1, Tensor([0, 3, 3]), 1:], lambda x: x[1, _t([0, 3, 3]), 1:]),
  (lambda x: x[Tensor([0, 2]), 1, Tensor([4, 4])], lambda x: x[_t([0, 2]), 1, _t([4, 4])]),
  (lambda x: x[:, Tensor([[0, 3], [1, 2]]), Tensor([2])], lambda x: x[:, _t([[0, 3], [1, 2]]), _t([2])]),
  (lambda x: x[Tensor(2)], lambda x: x[_t(2)]),
  # a 0-d index tensor stays an (advanced) tensor index, as in tinygrad; torch would turn it into an int
  (lambda x: x[Tensor(1), :, Tensor([[0, 1]])], lambda x: x[_t([[1]]), :, _t([[0, 1]])]),
  (lambda x: x[Tensor([], dtype=dtypes.int32)], lambda x: x[_t([])]),
  (lambda x: x[:, Tensor(np.zeros((0, 2), np.int32))], lambda x: x[:, _t(np.zeros((0, 2), np.int64))]),
  (lambda x: x[Tensor([1, 1, 1, 0]), ::-1, 2], lambda x: x.flip(1)[_t([1, 1, 1, 0]), :, 2]),
  (lambda x: x[2:0:-1, Tensor([0, 2])], lambda x: x[1:3, _t([0, 2])].flip(0)),
  (lambda x: x[::2, Tensor([3]), ::-2], lambda x: x[::2, _t([3])].flip(-1)[..., ::2])])
def test_getitem_tensor(tg_fxn: Any, torch_fxn: Any) -> None:
  helper_test_op([(3, 4, 5)], torch_fxn, tg_fxn)

def test_getitem_lists() -> None:
  helper_test_op([(4, 3)], lambda x: x[[0, 3, -1]], lambda x: x[[0, 3, -1]])
  helper_test_op([(4, 3)], lambda x: x[torch.tensor([[0, 1], [3, 3]])], lambda x: x[[[0, 1], [3, 3]]])
  helper_test_op([(4, 3)], lambda x: x[[1, 2], [0, 2]], lambda x: x[[1, 2], [0, 2]])
  helper_test_op([(4, 3)], lambda x: x[:, [2, 2]], lambda x: x[:, [2, 2]])
  helper_test_op([(4, 3)], lambda x: x[(0, 1), ], lambda x: x[(0, 1), ])

def test_getitem_duplicate_indices_grad() -> None:
  # repeated indices accumulate gradient
  helper_test_op([(5,)], lambda x: x[torch.tensor([1, 1, 1, 4, 0, 4])], lambda x: x[Tensor([1, 1, 1, 4, 0, 4])])
  helper_test_op([(3, 4)], lambda x: x[torch.tensor([[2, 2], [0, 2]]), torch.tensor([3, 3])], lambda x: x[Tensor([[2, 2], [0, 2]]), Tensor([3, 3])])

def test_getitem_out_of_bounds_tensor_reads_zero() -> None:
  # tinygrad semantics (torch raises): out-of-range index tensor values select nothing and read 0
  np.testing.assert_equal(Tensor([1, 2, 3])[Tensor([4, 3, 2, -4])].numpy(), [0, 0, 3, 0])
  np.testing.assert_equal(Tensor([[1, 2], [3, 4]])[Tensor([0, 5]), Tensor([1, 1])].numpy(), [2, 0])

def test_getitem_is_lazy() -> None:
  t = Tensor([[1.0, 2.0], [3.0, 4.0]])
  out = t[Tensor([1, 0])][:, ::-1]
  assert out.uop.op.name != "BUFFER"
  np.testing.assert_equal(out.numpy(), [[4.0, 3.0], [2.0, 1.0]])

# *** setitem ***

def _setitem_case(shape: tuple, idx_fn: Any, val_fn: Any, dtype: Any = np.float32) -> None:
  base = (np.arange(int(np.prod(shape))) % 7 - 3).astype(dtype).reshape(shape)
  tt = torch.tensor(base)
  tt[idx_fn(lambda v: torch.tensor(v, dtype=torch.int64))] = val_fn(torch.tensor)
  t = Tensor(base)
  t[idx_fn(Tensor)] = val_fn(lambda v: Tensor(np.asarray(v, dtype=dtype)))
  assert t.dtype == Tensor(base).dtype
  np.testing.assert_equal(t.numpy(), tt.numpy())

@pytest.mark.parametrize("idx_fn,val_fn", [
  (lambda T: 1, lambda T: 9.0), (lambda T: -1, lambda T: T(np.array([1.0, 2, 3, 4], dtype=np.float32))), (lambda T: (slice(1, 3), 2), lambda T: 5.0),
  (lambda T: (slice(None), slice(None, None, 2)), lambda T: T(np.array([[7.0], [8.0], [9.0]], dtype=np.float32))),
  (lambda T: (Ellipsis, -1), lambda T: 0.5),
  (lambda T: (0, slice(1, None)), lambda T: T(np.array([1.0, 2.0, 3.0], dtype=np.float32))), (lambda T: (slice(5, 9),), lambda T: 1.0),
  (lambda T: (None, 2), lambda T: T(np.array([[4.0, 3, 2, 1]], dtype=np.float32))), (lambda T: (slice(None), slice(None)), lambda T: -1.0),
  (lambda T: T([0, 2]), lambda T: 4.0), (lambda T: (T([2, 0]), T([3, 1])), lambda T: T(np.array([5.0, 6.0], dtype=np.float32))),
  (lambda T: (slice(None), T([1, -1])), lambda T: T(np.array([1.0, 2.0], dtype=np.float32))), (lambda T: (slice(1, None), T([0, 0])), lambda T: 3.0),
  (lambda T: (T([[0], [2]]), T([1, 2])), lambda T: T(np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32))),
  (lambda T: (1, T([3, 0])), lambda T: 8.0)])
def test_setitem(idx_fn: Any, val_fn: Any) -> None:
  _setitem_case((3, 4), idx_fn, val_fn)

def test_setitem_negative_step_and_ints() -> None:
  base = np.arange(10, dtype=np.int32)
  t = Tensor(base)
  t[::-3] = Tensor(np.array([100, 200, 300, 400], dtype=np.int32))
  exp = base.copy()
  exp[::-3] = [100, 200, 300, 400]
  np.testing.assert_equal(t.numpy(), exp)
  _setitem_case((2, 5), lambda T: (slice(None), slice(None, None, 2)), lambda T: 7, dtype=np.int32)
  _setitem_case((2, 5), lambda T: (T([1, 1]), T([4, 0])), lambda T: T(np.array([7, 8], dtype=np.int8)), dtype=np.int8)
  _setitem_case((4,), lambda T: T([1, 3]), lambda T: True, dtype=np.bool_)

def test_setitem_duplicates_last_wins() -> None:
  t = Tensor.zeros(4, 5).contiguous().realize()
  t[Tensor([1, 1, 2]), Tensor([0, 0, 3])] = Tensor([1.0, 2.0, 3.0])
  tt = torch.zeros(4, 5)
  tt[torch.tensor([1, 1, 2]), torch.tensor([0, 0, 3])] = torch.tensor([1.0, 2.0, 3.0])
  np.testing.assert_equal(t.numpy(), tt.numpy())

def test_setitem_lazy_and_views() -> None:
  # an unrealized tensor (a const or a computation) is realized, then assigned
  t = Tensor.zeros(2, 3)
  t[1] = 4.0
  np.testing.assert_equal(t.numpy(), [[0, 0, 0], [4, 4, 4]])
  u = Tensor([1.0, 2.0, 3.0]) * 2
  u[0] = 0.0
  np.testing.assert_equal(u.numpy(), [0, 4, 6])
  # a view of a realized tensor writes through to it
  a = Tensor([[1.0, 2.0], [3.0, 4.0]]).realize()
  b = a[1]
  b[0] = 9.0
  np.testing.assert_equal(a.numpy(), [[1, 2], [9, 4]])
  # v reading the buffer being written (overlap) is materialized first
  c = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
  c[1:] = c[:-1]
  np.testing.assert_equal(c.numpy(), [1, 1, 2, 3])
  d = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
  d[::-1] = d
  np.testing.assert_equal(d.numpy(), [4, 3, 2, 1])
  # index tensors computed from the target are materialized before the write
  e = Tensor([3.0, 9.0, 1.0, 4.0]).realize()
  e[(e > 3).where(Tensor([0, 1, 2, 3]), 0).max()] = -1.0
  np.testing.assert_equal(e.numpy(), [3, 9, 1, -1])
  # in-place ops keep working after setitem
  c += 1
  np.testing.assert_equal(c.numpy(), [2, 2, 3, 4])

def test_setitem_errors() -> None:
  t = Tensor.zeros(2, 3).contiguous().realize()
  with pytest.raises(RuntimeError): t[0] = Tensor([1, 2, 3])  # dtype mismatch (tinygrad)
  with pytest.raises(RuntimeError): t[0] = Tensor([1.0, 2.0])  # shape mismatch (torch RuntimeError too)
  with pytest.raises(RuntimeError): t[Tensor([0, 1])] = Tensor([1.0, 2.0])
  with pytest.raises(IndexError): t[2] = 1.0
  with pytest.raises(NotImplementedError): Tensor.zeros(3, requires_grad=True)[0] = 1.0
  with pytest.raises(RuntimeError): (Tensor([1.0, 2.0]) + 1)[1:][0] = 5.0  # unrealized view of a lazy tensor
  tt = torch.zeros(2, 3)
  with pytest.raises(RuntimeError): tt[0] = torch.ones(2)
  with pytest.raises(RuntimeError): tt[torch.tensor([0, 1])] = torch.ones(2)
  with pytest.raises(TypeError): del t[0]

# *** gather ***

@pytest.mark.parametrize("shape,dim,idx", [((3, 4), 0, [[0, 2, 1, 0], [2, 2, 0, 1]]), ((3, 4), 1, [[3, 0], [1, 1], [2, 0]]), ((3, 4), -1, [[0], [3]]),
                                           ((2, 3, 4), -2, [[[0, 1], [2, 2]], [[1, 0], [0, 0]]]), ((2, 3, 4), 2, [[[3, 3, 3, 3, 0]]]),
                                           ((5,), 0, [4, 4, 0]), ((3, 4), 0, np.zeros((0, 4), dtype=np.int64)), ((), 0, 0)])
def test_gather(shape: tuple, dim: int, idx: Any) -> None:
  idx = np.asarray(idx, dtype=np.int64)
  helper_test_op([shape], lambda x: x.gather(dim, torch.tensor(idx)), lambda x: x.gather(dim, Tensor(idx)))
  helper_test_op([shape], lambda x: x.gather(dim, torch.tensor(idx)), lambda x: x.gather(dim, Tensor(idx.astype(np.uint8))))

def test_gather_int_and_errors() -> None:
  vals = [np.arange(12, dtype=np.int32).reshape(3, 4)]
  helper_test_op(None, lambda x: x.gather(1, torch.tensor([[1], [0], [3]])), lambda x: x.gather(1, Tensor([[1], [0], [3]])), vals=vals)
  bools = [np.array([[True, False], [False, True]])]
  helper_test_op(None, lambda x: x.gather(0, torch.tensor([[1, 0]])), lambda x: x.gather(0, Tensor([[1, 0]])), vals=bools)
  helper_test_exception([(3, 4)], lambda x: x.gather(1, torch.tensor([0])), lambda x: x.gather(1, Tensor([0])), RuntimeError)
  helper_test_exception([(3, 4)], lambda x: x.gather(1, torch.tensor([[0.0]])), lambda x: x.gather(1, Tensor([[0.0]])), RuntimeError)
  helper_test_exception([(3, 4)], lambda x: x.gather(2, torch.tensor([[0]])), lambda x: x.gather(2, Tensor([[0]])), IndexError)
  helper_test_exception([(3, 4)], lambda x: x.gather(1, torch.zeros(4, 1, dtype=torch.int64)),
                        lambda x: x.gather(1, Tensor.zeros(4, 1, dtype=dtypes.int32)), RuntimeError)

# *** scatter / scatter_reduce ***

@pytest.mark.parametrize("shape,dim,idx,src_shape", [((3, 5), 0, [[0, 1, 2, 0, 1]], (2, 5)), ((3, 5), 1, [[0, 1, 2], [4, 3, 0]], (2, 5)),
                                                     ((3, 5), -1, [[4], [0], [2]], (3, 1)),
                                                     ((2, 3, 4), -2, [[[2, 0, 1, 0]], [[1, 2, 0, 2]]], (2, 3, 4)), ((4,), 0, [3, 1], (3,))])
def test_scatter(shape: tuple, dim: int, idx: Any, src_shape: tuple) -> None:
  idx = np.asarray(idx, dtype=np.int64)
  # torch's src gradient needs src.shape == index.shape; a larger src is checked forward only
  helper_test_op([shape, idx.shape], lambda x, s: x.scatter(dim, torch.tensor(idx), s), lambda x, s: x.scatter(dim, Tensor(idx), s))
  helper_test_op([shape, src_shape], lambda x, s: x.scatter(dim, torch.tensor(idx), s), lambda x, s: x.scatter(dim, Tensor(idx), s),
                 forward_only=True)
  helper_test_op([shape], lambda x: x.scatter(dim, torch.tensor(idx), 2.5), lambda x: x.scatter(dim, Tensor(idx.astype(np.int32)), 2.5))
  for r in ("add", "multiply"):
    helper_test_op([shape], lambda x, r=r: x.scatter(dim, torch.tensor(idx), 1.5, reduce=r),
                   lambda x, r=r: x.scatter(dim, Tensor(idx), 1.5, reduce=r),
                   forward_only=True)
    helper_test_op([shape, src_shape], lambda x, s, r=r: x.scatter(dim, torch.tensor(idx), s, reduce=r),
                   lambda x, s, r=r: x.scatter(dim, Tensor(idx), s, reduce=r), forward_only=True)

def test_scatter_duplicates_and_dtypes() -> None:
  # duplicate indices: the last one wins (torch CPU); forward only, torch's gradient gives every duplicate a share
  helper_test_op([(5,), (5,)], lambda x, s: x.scatter(0, torch.tensor([1, 1, 1, 3, 3]), s), lambda x, s: x.scatter(0, Tensor([1, 1, 1, 3, 3]), s),
                 forward_only=True)
  vals = [np.arange(6, dtype=np.int32).reshape(2, 3), np.array([[10, 20, 30]], dtype=np.int32)]
  helper_test_op(None, lambda x, s: x.scatter(1, torch.tensor([[2, 0, 1]]), s), lambda x, s: x.scatter(1, Tensor([[2, 0, 1]]), s), vals=vals)
  bools = [np.zeros((2, 2), np.bool_)]
  helper_test_op(None, lambda x: x.scatter(0, torch.tensor([[1, 0]]), True), lambda x: x.scatter(0, Tensor([[1, 0]]), True), vals=bools)
  helper_test_op(None, lambda x: x.scatter(0, torch.tensor([[1]]), 7, reduce="add"), lambda x: x.scatter(0, Tensor([[1]]), 7, reduce="add"),
                 vals=vals[:1])

def test_scatter_errors() -> None:
  helper_test_exception([(3, 4), (3, 4)], lambda x, s: x.scatter(0, torch.tensor([0]), s), lambda x, s: x.scatter(0, Tensor([0]), s), RuntimeError)
  helper_test_exception([(3, 4), (1, 1)], lambda x, s: x.scatter(0, torch.tensor([[0, 1]]), s), lambda x, s: x.scatter(0, Tensor([[0, 1]]), s),
                        RuntimeError)
  helper_test_exception([(3, 4), (3, 4)], lambda x, s: x.scatter(2, torch.tensor([[0]]), s), lambda x, s: x.scatter(2, Tensor([[0]]), s), IndexError)
  helper_test_exception([(3, 4)], lambda x: x.scatter(0, torch.tensor([[0]]), x.int()), lambda x: x.scatter(0, Tensor([[0]]), x.int()), RuntimeError)
  helper_test_exception([(3, 4), (3, 4)], lambda x, s: x.scatter_reduce(0, torch.tensor([[0]]), s, "maximum"),
                        lambda x, s: x.scatter_reduce(0, Tensor([[0]]), s, "maximum"), RuntimeError)

@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce: str, include_self: bool) -> None:
  idx = torch.tensor([[0, 1, 0, 2], [0, 0, 1, 2]])
  helper_test_op([(4, 4), (2, 4)], lambda x, s: x.scatter_reduce(0, idx, s, reduce, include_self=include_self),
                 lambda x, s: x.scatter_reduce(0, Tensor(idx.numpy()), s, reduce, include_self=include_self), low=0.5, high=2)
  idx2 = torch.tensor([[3, 3], [0, 2], [1, 1]])
  helper_test_op([(3, 4), (3, 2)], lambda x, s: x.scatter_reduce(-1, idx2, s, reduce, include_self=include_self),
                 lambda x, s: x.scatter_reduce(-1, Tensor(idx2.numpy().astype(np.uint8)), s, reduce, include_self=include_self), low=0.5, high=2)
  vals = [np.array([[1, -5, 7, 2]], dtype=np.int32), np.array([[2, -2, 4, 9, 3]], dtype=np.int32)]
  iidx = torch.tensor([[0, 0, 1, 3, 0]])
  helper_test_op(None, lambda x, s: x.scatter_reduce(1, iidx, s, reduce, include_self=include_self),
                 lambda x, s: x.scatter_reduce(1, Tensor(iidx.numpy()), s, reduce, include_self=include_self), vals=vals)

# *** masks ***

def test_masked_fill() -> None:
  m = np.array([[True, False, True], [False, False, True]])
  helper_test_op([(2, 3)], lambda x: x.masked_fill(torch.tensor(m), -7.0), lambda x: x.masked_fill(Tensor(m), -7.0))
  helper_test_op([(2, 3)], lambda x: x.masked_fill(torch.tensor(m[0]), float("-inf")), lambda x: x.masked_fill(Tensor(m[0]), float("-inf")))
  ints = [np.arange(6, dtype=np.int32).reshape(2, 3)]
  helper_test_op(None, lambda x: x.masked_fill(torch.tensor(m), 2.7), lambda x: x.masked_fill(Tensor(m), 2.7), vals=ints)
  helper_test_op([(2, 3), ()], lambda x, v: x.masked_fill(torch.tensor(m), v), lambda x, v: x.masked_fill(Tensor(m), v))
  helper_test_exception([(2, 3)], lambda x: x.masked_fill(torch.tensor([1, 0, 1]), 0.0), lambda x: x.masked_fill(Tensor([1, 0, 1]), 0.0),
                        RuntimeError)

def test_masked_select() -> None:
  m = np.array([[True, False, True], [False, False, True]])
  helper_test_op([(2, 3)], lambda x: x.masked_select(torch.tensor(m)), lambda x: x.masked_select(Tensor(m)))
  helper_test_op([(2, 3)], lambda x: x.masked_select(torch.tensor(m[1])), lambda x: x.masked_select(Tensor(m[1])))
  helper_test_op([(3,)], lambda x: x.masked_select(torch.tensor(m)), lambda x: x.masked_select(Tensor(m)))
  helper_test_op([(2, 3)], lambda x: x.masked_select(torch.zeros(2, 3, dtype=torch.bool)),
                 lambda x: x.masked_select(Tensor.zeros(2, 3, dtype=dtypes.bool)))
  helper_test_op(None, lambda x: x.masked_select(x > 2), lambda x: x.masked_select(x > 2), vals=[np.arange(6, dtype=np.int16).reshape(3, 2)])
  helper_test_exception([(2, 3)], lambda x: x.masked_select(torch.ones(2, 3)), lambda x: x.masked_select(Tensor.ones(2, 3)), RuntimeError)

def test_nonzero() -> None:
  for arr in (np.array([1, 0, 2, 0, 3]), np.array([[1.0, 0.0], [0.0, -2.0]]), np.zeros((2, 3)), np.array([[True, False, True]]), np.array(5),
              np.array(0)):
    # tinygrad returns int32 indices (torch: int64)
    helper_test_op(None, lambda x: x.nonzero().int(), lambda x: x.nonzero(), vals=[arr], forward_only=True)

def test_one_hot() -> None:
  # tinygrad returns int32 (torch: int64)
  for vals, n in (([0, 1, 3, 3, 4], 5), ([[2, 0], [1, 1]], 3), ([1, 2], -1), (np.zeros((0,), np.int64), 4), (2, 4)):
    arr = np.asarray(vals, dtype=np.int64)
    helper_test_op(None, lambda x, n=n: torch.nn.functional.one_hot(x, n).int(), lambda x, n=n: x.one_hot(n), vals=[arr])
  helper_test_op(None, lambda x: torch.nn.functional.one_hot(x.long(), 3).int(), lambda x: x.one_hot(3), vals=[np.array([2, 0], dtype=np.uint8)])
  with pytest.raises(RuntimeError): Tensor([0.5]).one_hot(2)

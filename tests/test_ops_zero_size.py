"""Zero-size tensors through the ops, vs torch: movement with a 0 in the shape, scans along a zero axis, tril/triu, unfold,
matmul with a zero dim, reductions (identity results) and empty slices."""
from __future__ import annotations
from typing import Any, Callable

import numpy as np
import pytest

from helpers import helper_test_exception, helper_test_op, torch
from tg_core.tensor import Tensor

@pytest.mark.parametrize("shape,new", [((0,), (0, 3)), ((2, 0), (0,)), ((0, 3), (3, 0)), ((0, 3), (-1, 3)), ((4, 0, 2), (0, 4, 2)), ((0,), (1, 0, 1))])
def test_reshape(shape: tuple, new: tuple) -> None:
  helper_test_op([shape], lambda x: x.reshape(new))

def test_reshape_infer_zero_raises() -> None:
  # -1 next to a 0 can be anything: both refuse
  helper_test_exception([(0, 3)], lambda x: x.reshape(-1, 0), lambda x: x.reshape(-1, 0), RuntimeError)

@pytest.mark.parametrize("shape,new", [((1, 3), (0, 3)), ((0, 1), (0, 5)), ((1,), (2, 0, 1)), ((0, 1), (2, 0, 4))])
def test_expand(shape: tuple, new: tuple) -> None:
  helper_test_op([shape], lambda x: x.expand(new))

@pytest.mark.parametrize("shapes,dim", [([(0, 3), (2, 3)], 0), ([(2, 0), (2, 0)], 1), ([(2, 0), (2, 3), (2, 0)], 1), ([(0, 3), (0, 3)], 1),
                                        ([(0,), (4,)], 0)])
def test_cat(shapes: list, dim: int) -> None:
  helper_test_op(shapes, lambda *xs: torch.cat(xs, dim), lambda *xs: Tensor.cat(*xs, dim=dim))

@pytest.mark.parametrize("shape,dim", [((0,), 0), ((0, 3), 1), ((2, 0), -1), ((0, 0), 2)])
def test_stack(shape: tuple, dim: int) -> None:
  helper_test_op([shape, shape], lambda a, b: torch.stack((a, b), dim), lambda a, b: Tensor.stack(a, b, dim=dim))

@pytest.mark.parametrize("shape,axis", [((0,), 0), ((0, 3), 0), ((3, 0), 1), ((3, 0), 0), ((2, 0, 3), 2)])
@pytest.mark.parametrize("op", ["cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"])
def test_scans(shape: tuple, axis: int, op: str) -> None:
  if op in ("cummax", "cummin"):
    helper_test_op([shape], lambda x: getattr(x, op)(axis)[0], lambda x: getattr(x, op)(axis)[0])
    # indices: int32 in tg (tinygrad's default int), int64 in torch
    helper_test_op([shape], lambda x: getattr(x, op)(axis)[1], lambda x: getattr(x, op)(axis)[1], forward_only=True, check_dtype=False)
  else: helper_test_op([shape], lambda x: getattr(x, op)(axis))

@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0), (2, 0, 4)])
@pytest.mark.parametrize("diagonal", [-1, 0, 2])
def test_tril_triu(shape: tuple, diagonal: int) -> None:
  helper_test_op([shape], lambda x: x.tril(diagonal))
  helper_test_op([shape], lambda x: x.triu(diagonal))

@pytest.mark.parametrize("shape,dim,size,step", [((0, 5), 1, 2, 1), ((0, 5), 0, 0, 1), ((3, 0), 0, 2, 1), ((5,), 0, 0, 2), ((2, 0, 3), 2, 3, 1)])
def test_unfold(shape: tuple, dim: int, size: int, step: int) -> None:
  helper_test_op([shape], lambda x: x.unfold(dim, size, step))

@pytest.mark.parametrize("a,b", [((2, 0), (0, 3)), ((0, 2), (2, 3)), ((2, 3), (3, 0)), ((0, 0), (0, 0)), ((0,), (0,)), ((0,), (0, 3)),
                                 ((4, 0), (0,)), ((1, 2, 0), (3, 0, 5)), ((0, 2, 3), (3, 4))])
def test_matmul(a: tuple, b: tuple) -> None:
  helper_test_op([a, b], lambda x, y: x @ y)

@pytest.mark.parametrize("shape,axis", [((0,), None), ((0, 3), 0), ((0, 3), None), ((3, 0), 1), ((3, 0), (0, 1)), ((2, 0, 3), (0, 1)),
                                        ((0, 3), -1)])
@pytest.mark.parametrize("op", ["sum", "prod", "mean", "logsumexp", "std", "var"])
def test_reductions_identity(shape: tuple, axis: Any, op: str) -> None:
  if op == "logsumexp" and axis is None: pytest.skip(reason="torch.logsumexp needs a dim")
  if op in ("std", "var"):  # torch warns about the degrees of freedom; both give NaN
    with pytest.warns(UserWarning): helper_test_op([shape], lambda x: getattr(x, op)(axis) if axis is not None else getattr(x, op)())
    return
  if op == "prod" and isinstance(axis, tuple):  # torch.prod takes one dim: reduce them one at a time
    helper_test_op([shape], lambda x: x.prod(axis[1]).prod(axis[0]), lambda x: x.prod(axis))
    return
  helper_test_op([shape], lambda x: getattr(x, op)(axis) if axis is not None else getattr(x, op)())

@pytest.mark.parametrize("shape,axis", [((0, 3), 1), ((3, 0), 0), ((2, 0, 3), 2)])
@pytest.mark.parametrize("op", ["max", "min", "amax", "amin"])
def test_max_min_nonzero_axis(shape: tuple, axis: int, op: str) -> None:
  tf = (lambda x: getattr(x, op)(axis)[0]) if op in ("max", "min") else (lambda x: getattr(x, op)(axis))
  helper_test_op([shape], tf, lambda x: getattr(x, op.lstrip("a"))(axis))

@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_zero_axis_raises(op: str) -> None:
  helper_test_exception([(0, 3)], lambda x: getattr(x, op)(0), lambda x: getattr(x, op)(0), IndexError)
  helper_test_exception([(0, 3)], lambda x: getattr(x, op)(), lambda x: getattr(x, op)(), RuntimeError)

@pytest.mark.parametrize("op", ["any", "all"])
@pytest.mark.parametrize("shape,axis", [((0,), None), ((0, 3), 0), ((3, 0), 1)])
def test_any_all(op: str, shape: tuple, axis: Any) -> None:
  helper_test_op([shape], lambda x: getattr(x, op)(axis) if axis is not None else getattr(x, op)(), dtype=bool)

@pytest.mark.parametrize("idx", [slice(3, 1), slice(10, 20), slice(-20, -10), slice(4, 1, 2), slice(5, None), slice(None, -5),
                                 slice(-10, 20), slice(0, 0)])
def test_empty_and_oob_slices(idx: slice) -> None:
  helper_test_op([(5,)], lambda x: x[idx])
  helper_test_op([(3, 5)], lambda x: x[:, idx])
  helper_test_op([(5, 2)], lambda x: x[idx, 1:])

@pytest.mark.parametrize("idx", [slice(1, 4, -1), slice(7, -7, -1), slice(-20, -10, -2), slice(None, None, -2)])
def test_empty_and_oob_negative_step_slices(idx: slice) -> None:
  # torch has no negative steps: the reference is numpy's slicing
  a = np.arange(10, dtype=np.float32).reshape(5, 2)
  np.testing.assert_equal(Tensor(a)[idx].numpy(), a[idx])
  np.testing.assert_equal(Tensor(a)[:, idx].numpy(), a[:, idx])

def test_slices_of_zero_size() -> None:
  helper_test_op([(0, 3)], lambda x: x[1:, :2])
  helper_test_op([(0, 3)], lambda x: x.flip(0), lambda x: x[::-1])
  helper_test_op([(3, 0)], lambda x: x[1:2])

@pytest.mark.parametrize("fn", [lambda x: x + 1, lambda x: x.exp(), lambda x: x.relu(), lambda x: x.softmax(-1), lambda x: x.sort(-1)[0],
                                lambda x: x.flip(0), lambda x: x.permute(1, 0),
                                lambda x: torch.nn.functional.pad(x, (1, 1)) if isinstance(x, torch.Tensor) else x.pad((1, 1)),
                                lambda x: x.repeat(2, 3),
                                lambda x: x.flatten(), lambda x: x.transpose(0, 1) * 2])
@pytest.mark.parametrize("shape", [(0, 3), (3, 0)])
def test_elementwise_and_movement(fn: Callable, shape: tuple) -> None:
  helper_test_op([shape], fn)

@pytest.mark.parametrize("shape", [(0, 3), (3, 0)])
def test_where(shape: tuple) -> None:
  helper_test_op([shape], lambda x: torch.where(x > 0, x, 1.0), lambda x: (x > 0).where(x, 1.0))

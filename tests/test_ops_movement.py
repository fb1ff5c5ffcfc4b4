"""Movement ops vs torch: pad (all modes), cat/stack/split/chunk, repeat, roll, tril/triu, diag/diagonal, meshgrid, unfold,
rearrange, and the core view ops (reshape/expand/permute/flip/shrink/...). Forward values, dtypes and gradients."""
from __future__ import annotations
from typing import Any, Callable, Sequence

import numpy as np
import pytest

from helpers import compare, helper_test_exception, helper_test_op, prepare_inputs
from tg_core.dtype import dtypes
from tg_core.tensor import Tensor

torch = pytest.importorskip("torch")
F = torch.nn.functional

def helper_test_multi(shapes: Sequence[tuple[int, ...]] | None, torch_fxn: Callable, tg_fxn: Callable, vals: Sequence[Any] | None = None,
                      dtype: Any = None, forward_only: bool = False) -> None:
  """Like helper_test_op for functions returning several tensors: compare each output, then the gradient of the sum of their squares."""
  ts, tgs = prepare_inputs(shapes, vals, -2, 2, dtype, not forward_only)
  outs, rets = list(torch_fxn(*ts)), list(tg_fxn(*tgs))
  assert len(outs) == len(rets), f"got {len(rets)} outputs, torch {len(outs)}"
  for i, (r, o) in enumerate(zip(rets, outs)): compare(f"output {i}", r, o, 1e-6, 1e-3)
  if forward_only or not any(t.requires_grad for t in ts): return
  sum(o.float().square().sum() for o in outs).backward()
  loss = rets[0].float().square().sum()
  for r in rets[1:]: loss = loss + r.float().square().sum()
  grads = [t for t in tgs if t.requires_grad]
  for i, (tt, g) in enumerate(zip([t for t in ts if t.requires_grad], loss.gradient(*grads, materialize_grads=True))):
    if tt.grad is not None: compare(f"grad {i}", g, tt.grad, 1e-4, 1e-3, check_dtype=False)

# *** pad ***

@pytest.mark.parametrize("shape,pads,value", [
  ((3,), (1, 2), 0.0), ((2, 5), (0, 3, 2, 0), 1.5), ((2, 3, 4), (1, 1, 1, 1, 1, 1), -2.0), ((3, 4), (-1, 2), 0.0), ((3, 4), (2, -3, -1, 1), 7.0),
  ((4, 5), (-1, -1, -1, -1), 0.0), ((3, 3), (-3, 0), 0.0), ((2, 3), (0, 0), 0.0), ((0, 3), (1, 1), 0.0), ((3, 7), (-2, -5), 3.0),
  ((2, 4), (1, 1), float("-inf"))])
def test_pad_constant(shape: tuple, pads: tuple, value: float) -> None:
  helper_test_op([shape], lambda x: F.pad(x, pads, value=value), lambda x: x.pad(pads, value=value))

def test_pad_grouped_and_int() -> None:
  helper_test_op([(3, 4)], lambda x: F.pad(x, (1, 2, 0, -1)), lambda x: x.pad(((0, -1), (1, 2))))
  helper_test_op([(3, 4)], lambda x: F.pad(x, (0, 0, 2, 1)), lambda x: x.pad(((2, 1), None)))
  ints = [np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32)]
  helper_test_op([(2, 3)], lambda x: F.pad(x, (1, 1), value=5), lambda x: x.pad((1, 1), value=5), vals=ints)

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pads", [((2, 5), (2, 1)), ((1, 3, 4), (0, 3)), ((2, 3, 4), (1, 2, 2, 1)), ((1, 2, 3, 5), (2, 2, 0, 1)),
                                        ((2, 4), (3, 0))])
def test_pad_modes(mode: str, shape: tuple, pads: tuple) -> None:
  helper_test_op([shape], lambda x: F.pad(x, pads, mode=mode), lambda x: x.pad(pads, mode=mode))

@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_modes_negative(mode: str) -> None:
  helper_test_op([(2, 3, 6)], lambda x: F.pad(x, (-1, 2), mode=mode), lambda x: x.pad((-1, 2), mode=mode))
  helper_test_op([(2, 3, 6)], lambda x: F.pad(x, (2, -3), mode=mode), lambda x: x.pad((2, -3), mode=mode))

def test_pad_errors() -> None:
  with pytest.raises(ValueError): Tensor.ones(2, 3).pad((3, 0), mode="reflect")
  with pytest.raises(ValueError): Tensor.ones(2, 3).pad((4, 0), mode="circular")
  with pytest.raises(NotImplementedError): Tensor.ones(2, 3).pad((1, 0), mode="wrap")
  with pytest.raises(ValueError): Tensor.ones(2, 3).pad((1, 0, 1))

def test_pad_to_shrink_to() -> None:
  helper_test_op([(2, 3)], lambda x: F.pad(x, (0, 2, 0, 1)), lambda x: x.pad_to(3, 5))
  helper_test_op([(4, 5)], lambda x: x[:2, :3], lambda x: x.shrink_to(2, 3))
  helper_test_op([(4, 5)], lambda x: x[:, :3], lambda x: x.shrink_to((None, 3)))

# *** cat / stack ***

@pytest.mark.parametrize("shapes,dim", [
  ([(2, 3), (4, 3)], 0), ([(2, 3), (2, 5), (2, 1)], 1), ([(2, 3, 4), (2, 3, 4)], -1), ([(3,), (5,), (1,), (2,)], 0), ([(2, 0), (2, 3)], 1),
  ([(0, 3), (0, 3)], 0), ([(1, 2, 3), (4, 2, 3)], -3), ([(7,)], 0)])
def test_cat(shapes: list, dim: int) -> None:
  helper_test_op(shapes, lambda *xs: torch.cat(xs, dim=dim), lambda *xs: Tensor.cat(*xs, dim=dim))

def test_cat_instance_and_dtypes() -> None:
  helper_test_op([(2, 2), (3, 2)], lambda a, b: torch.cat([a, b]), lambda a, b: a.cat(b))
  ints = np.array([[1, 2]], dtype=np.int32)
  helper_test_op(None, lambda a, b: torch.cat([a, b]), lambda a, b: a.cat(b), vals=[ints, np.array([[0.5, 1.5]], dtype=np.float32)],
                 forward_only=True)
  helper_test_op(None, lambda a, b: torch.cat([a, b], 1), lambda a, b: a.cat(b, dim=1), vals=[ints, np.array([[True, False]])])
  helper_test_op(None, lambda a, b: torch.cat([a, b]), lambda a, b: a.cat(b), vals=[np.array([True, False]), np.array([False])])
  helper_test_op(None, lambda a, b: torch.cat([a, b]), lambda a, b: a.cat(b), vals=[np.array([1, -2], dtype=np.int8), np.array([3], dtype=np.int64)])

def test_cat_errors() -> None:
  helper_test_exception([(2, 3), (3, 2)], lambda a, b: torch.cat([a, b]), lambda a, b: a.cat(b), RuntimeError)
  helper_test_exception([(2, 3), (3,)], lambda a, b: torch.cat([a, b]), lambda a, b: a.cat(b), RuntimeError)
  helper_test_exception([(), ()], lambda a, b: torch.cat([a, b]), lambda a, b: a.cat(b), RuntimeError)
  helper_test_exception([(2, 3), (2, 3)], lambda a, b: torch.cat([a, b], 2), lambda a, b: a.cat(b, dim=2), IndexError)
  helper_test_exception([(2, 3), (2, 3)], lambda a, b: torch.stack([a, b], 3), lambda a, b: a.stack(b, dim=3), IndexError)
  helper_test_exception([(2, 3), (3, 2)], lambda a, b: torch.stack([a, b]), lambda a, b: a.stack(b), RuntimeError)

@pytest.mark.parametrize("shapes,dim", [([(2, 3), (2, 3)], 0), ([(2, 3), (2, 3), (2, 3)], 2), ([(3,), (3,)], -1), ([(), (), ()], 0),
                                        ([(2, 3)] * 2, -2), ([(0, 2)] * 2, 1)])
def test_stack(shapes: list, dim: int) -> None:
  helper_test_op(shapes, lambda *xs: torch.stack(xs, dim=dim), lambda *xs: Tensor.stack(*xs, dim=dim))

# *** split / chunk ***

@pytest.mark.parametrize("shape,sizes,dim", [((5, 2), 2, 0), ((5, 2), [1, 4], 0), ((3, 7), 3, -1), ((3, 7), [2, 0, 5], 1), ((4,), 4, 0),
                                             ((4,), 10, 0), ((6, 3), [6], 0)])
def test_split(shape: tuple, sizes: Any, dim: int) -> None:
  helper_test_multi([shape], lambda x: x.split(sizes, dim), lambda x: x.split(sizes, dim))

@pytest.mark.parametrize("n,chunks", [(11, 6), (12, 6), (13, 6), (5, 1), (3, 5), (7, 3)])
def test_chunk(n: int, chunks: int) -> None:
  helper_test_multi([(n, 2)], lambda x: x.chunk(chunks), lambda x: x.chunk(chunks))
  helper_test_multi([(2, n)], lambda x: x.chunk(chunks, -1), lambda x: x.chunk(chunks, -1))

def test_split_errors() -> None:
  helper_test_exception([(5,)], lambda x: x.split([2, 2]), lambda x: x.split([2, 2]), RuntimeError)
  helper_test_exception([(5,)], lambda x: x.chunk(0), lambda x: x.chunk(0), RuntimeError)
  helper_test_exception([(5,)], lambda x: x.split(2, 1), lambda x: x.split(2, 1), IndexError)

# *** repeat / roll ***

@pytest.mark.parametrize("shape,reps", [((3,), (4, 2)), ((2, 3), (1, 1)), ((2, 3), (2, 3)), ((2, 1, 3), (1, 4, 1)), ((), (3,)), ((2, 3), (2, 1, 2)),
                                        ((2, 3), (0, 2))])
def test_repeat(shape: tuple, reps: tuple) -> None:
  helper_test_op([shape], lambda x: x.repeat(*reps), lambda x: x.repeat(*reps))

def test_repeat_errors() -> None:
  helper_test_exception([(2, 3)], lambda x: x.repeat(2), lambda x: x.repeat(2), RuntimeError)
  helper_test_exception([(2, 3)], lambda x: x.repeat(2, -1), lambda x: x.repeat(2, -1), RuntimeError)

@pytest.mark.parametrize("shape,reps,dim", [((3,), 2, None), ((2, 3), 3, 0), ((2, 3), 2, -1), ((2, 3, 2), 1, 1), ((2, 3), 2, None), ((2, 3), 0, 1)])
def test_repeat_interleave(shape: tuple, reps: int, dim: int | None) -> None:
  helper_test_op([shape], lambda x: x.repeat_interleave(reps, dim), lambda x: x.repeat_interleave(reps, dim))

@pytest.mark.parametrize("shape,shifts,dims", [((5,), 1, 0), ((5,), -2, 0), ((5,), 7, None), ((3, 4), 1, None), ((3, 4), (1, -1), (0, 1)),
                                               ((3, 4), 5, -1), ((2, 3, 4), (2, 1), (-1, 0)), ((4,), 0, 0), ((3, 4), (1, 2), (1, 1)), ((0, 3), 1, 1)])
def test_roll(shape: tuple, shifts: Any, dims: Any) -> None:
  helper_test_op([shape], lambda x: x.roll(shifts, dims), lambda x: x.roll(shifts, dims))

def test_roll_errors() -> None:
  helper_test_exception([(3, 4)], lambda x: x.roll((1, 2), 0), lambda x: x.roll((1, 2), 0), RuntimeError)
  helper_test_exception([(3, 4)], lambda x: x.roll(1, 2), lambda x: x.roll(1, 2), IndexError)

# *** triangles, diagonals, meshgrid ***

@pytest.mark.parametrize("fn", ["tril", "triu"])
@pytest.mark.parametrize("shape,diagonal", [((3, 3), 0), ((3, 5), 1), ((5, 3), -1), ((2, 4, 4), 2), ((4, 3), -4), ((3, 4), 10), ((0, 3), 0)])
def test_tri(fn: str, shape: tuple, diagonal: int) -> None:
  helper_test_op([shape], lambda x: getattr(x, fn)(diagonal), lambda x: getattr(x, fn)(diagonal))

def test_tri_int_and_errors() -> None:
  vals = [np.arange(12, dtype=np.int32).reshape(3, 4)]
  helper_test_op(None, lambda x: x.tril(), lambda x: x.tril(), vals=vals)
  helper_test_op(None, lambda x: x.triu(1), lambda x: x.triu(1), vals=[np.ones((3, 3), dtype=np.bool_)])
  helper_test_exception([(3,)], lambda x: x.tril(), lambda x: x.tril(), RuntimeError)

@pytest.mark.parametrize("shape,k", [((3,), 0), ((4,), 1), ((4,), -2), ((1,), 0), ((3, 3), 0), ((3, 5), 1), ((4, 2), -1), ((0,), 0)])
def test_diag(shape: tuple, k: int) -> None:
  helper_test_op([shape], lambda x: torch.diag(x, k), lambda x: x.diag(k))

@pytest.mark.parametrize("shape,offset,d1,d2", [((3, 3), 0, 0, 1), ((3, 4), 1, 0, 1), ((4, 3), -1, 0, 1), ((2, 3, 4), 0, 1, 2), ((2, 3, 4), 2, -1, 0),
                                                ((3, 4), 5, 0, 1), ((3, 4), -3, 0, 1), ((2, 3, 4), -1, 2, 1), ((5, 2, 5), 1, 0, 2)])
def test_diagonal(shape: tuple, offset: int, d1: int, d2: int) -> None:
  helper_test_op([shape], lambda x: x.diagonal(offset, d1, d2), lambda x: x.diagonal(offset, d1, d2))

def test_diagonal_errors() -> None:
  helper_test_exception([(3, 3)], lambda x: x.diagonal(0, 1, 1), lambda x: x.diagonal(0, 1, 1), RuntimeError)
  with pytest.raises(ValueError): Tensor.ones(2, 2, 2).diag()

@pytest.mark.parametrize("indexing", ["ij", "xy"])
@pytest.mark.parametrize("shapes", [[(3,), (4,)], [(2,), (3,), (4,)], [(), (3,)], [(5,)]])
def test_meshgrid(indexing: str, shapes: list) -> None:
  helper_test_multi(shapes, lambda *xs: torch.meshgrid(*xs, indexing=indexing), lambda *xs: Tensor.meshgrid(*xs, indexing=indexing))

# *** unfold ***

@pytest.mark.parametrize("shape,dim,size,step", [((8,), 0, 2, 2), ((7,), 0, 3, 1), ((3, 3, 3), -1, 2, 3), ((2, 9), 1, 4, 2), ((5, 2), 0, 5, 1),
                                                 ((4, 6, 2), 1, 1, 4), ((6,), 0, 0, 2), ((10,), 0, 3, 7), ((2, 3, 4), 0, 2, 1)])
def test_unfold(shape: tuple, dim: int, size: int, step: int) -> None:
  helper_test_op([shape], lambda x: x.unfold(dim, size, step), lambda x: x.unfold(dim, size, step))

def test_unfold_errors() -> None:
  helper_test_exception([(4,)], lambda x: x.unfold(0, 5, 1), lambda x: x.unfold(0, 5, 1), RuntimeError)
  helper_test_exception([(4,)], lambda x: x.unfold(0, 2, 0), lambda x: x.unfold(0, 2, 0), RuntimeError)
  helper_test_exception([(4,)], lambda x: x.unfold(1, 2, 1), lambda x: x.unfold(1, 2, 1), IndexError)

# *** core view ops ***

@pytest.mark.parametrize("shape,new", [((2, 3), (3, 2)), ((2, 3), (-1,)), ((2, 3, 4), (4, -1)), ((6,), (1, 6, 1)), ((), (1, 1)), ((1,), ()),
                                       ((0, 3), (3, 0)), ((0, 3), (-1, 3))])
def test_reshape(shape: tuple, new: tuple) -> None:
  helper_test_op([shape], lambda x: x.reshape(new), lambda x: x.reshape(new))

def test_reshape_errors() -> None:
  helper_test_exception([(2, 3)], lambda x: x.reshape(4, 2), lambda x: x.reshape(4, 2), RuntimeError)
  helper_test_exception([(2, 3)], lambda x: x.reshape(-1, -1), lambda x: x.reshape(-1, -1), RuntimeError)
  helper_test_exception([(2, 3)], lambda x: x.reshape(-1, 4), lambda x: x.reshape(-1, 4), RuntimeError)

@pytest.mark.parametrize("shape,new", [((3, 1), (3, 4)), ((1,), (2, 3, 1)), ((), (2, 2)), ((2, 1, 3), (-1, 5, -1)), ((1, 3), (0, 3))])
def test_expand(shape: tuple, new: tuple) -> None:
  helper_test_op([shape], lambda x: x.expand(new), lambda x: x.expand(new))

def test_expand_errors() -> None:
  helper_test_exception([(3, 2)], lambda x: x.expand(3, 4), lambda x: x.expand(3, 4), RuntimeError)
  helper_test_exception([(3, 2)], lambda x: x.expand(2), lambda x: x.expand(2), RuntimeError)

@pytest.mark.parametrize("shape,order", [((2, 3, 4), (2, 0, 1)), ((2, 3), (1, 0)), ((2, 3, 4), (-1, 0, -2)), ((), ()), ((1, 2, 1, 3), (3, 1, 2, 0))])
def test_permute(shape: tuple, order: tuple) -> None:
  helper_test_op([shape], lambda x: x.permute(order), lambda x: x.permute(order))

def test_permute_errors() -> None:
  helper_test_exception([(2, 3)], lambda x: x.permute(0, 0), lambda x: x.permute(0, 0), RuntimeError)
  helper_test_exception([(2, 3)], lambda x: x.permute(0, 2), lambda x: x.permute(0, 2), IndexError)

def test_transpose_T_flatten_unflatten() -> None:
  helper_test_op([(2, 3, 4)], lambda x: x.transpose(0, 2), lambda x: x.transpose(0, 2))
  helper_test_op([(2, 3, 4)], lambda x: x.transpose(-1, -2), lambda x: x.transpose(-1, -2))
  helper_test_op([(2, 3)], lambda x: x.T, lambda x: x.T)
  helper_test_op([(2, 3, 4)], lambda x: x.flatten(), lambda x: x.flatten())
  helper_test_op([(2, 3, 4, 5)], lambda x: x.flatten(1, 2), lambda x: x.flatten(1, 2))
  helper_test_op([(2, 3, 4)], lambda x: x.flatten(-2), lambda x: x.flatten(-2))
  helper_test_op([()], lambda x: x.flatten(), lambda x: x.flatten())
  helper_test_op([(2, 12)], lambda x: x.unflatten(1, (3, 4)), lambda x: x.unflatten(1, (3, 4)))
  helper_test_op([(2, 12)], lambda x: x.unflatten(-1, (-1, 2)), lambda x: x.unflatten(-1, (-1, 2)))
  helper_test_exception([(2, 3)], lambda x: x.transpose(0, 2), lambda x: x.transpose(0, 2), IndexError)
  helper_test_exception([(2, 3, 4)], lambda x: x.flatten(2, 1), lambda x: x.flatten(2, 1), RuntimeError)
  helper_test_exception([(2, 6)], lambda x: x.unflatten(1, (4, 2)), lambda x: x.unflatten(1, (4, 2)), RuntimeError)

@pytest.mark.parametrize("shape,dim", [((1, 3, 1), None), ((1, 3, 1), 0), ((1, 3, 1), -1), ((1, 3, 1), 1), ((), 0), ((), None), ((2, 1, 1), (1, 2))])
def test_squeeze(shape: tuple, dim: Any) -> None:
  helper_test_op([shape], lambda x: x.squeeze() if dim is None else x.squeeze(dim), lambda x: x.squeeze(dim))

@pytest.mark.parametrize("shape,dim", [((2, 3), 0), ((2, 3), 2), ((2, 3), -1), ((2, 3), -3), ((), 0), ((), -1)])
def test_unsqueeze(shape: tuple, dim: int) -> None:
  helper_test_op([shape], lambda x: x.unsqueeze(dim), lambda x: x.unsqueeze(dim))

def test_squeeze_unsqueeze_errors() -> None:
  helper_test_exception([(2, 3)], lambda x: x.unsqueeze(3), lambda x: x.unsqueeze(3), IndexError)
  helper_test_exception([(2, 3)], lambda x: x.squeeze(2), lambda x: x.squeeze(2), IndexError)

@pytest.mark.parametrize("shape,axis", [((3,), (0,)), ((2, 3), (1,)), ((2, 3, 4), (0, 2)), ((2, 3), (-1, -2)), ((0, 2), (0,))])
def test_flip(shape: tuple, axis: tuple) -> None:
  helper_test_op([shape], lambda x: x.flip(axis), lambda x: x.flip(axis))

def test_flip_errors() -> None:
  helper_test_exception([(2, 3)], lambda x: x.flip((0, 0)), lambda x: x.flip((0, 0)), RuntimeError)
  helper_test_exception([(2, 3)], lambda x: x.flip(2), lambda x: x.flip(2), IndexError)

def test_shrink() -> None:
  helper_test_op([(4, 5)], lambda x: x[1:3, 0:5], lambda x: x.shrink(((1, 3), None)))
  helper_test_op([(4, 5, 2)], lambda x: x[0:0, 2:5, 1:2], lambda x: x.shrink(((0, 0), (2, 5), (1, 2))))
  with pytest.raises(ValueError): Tensor.ones(3).shrink(((1, 4),))
  with pytest.raises(ValueError): Tensor.ones(3).shrink(((2, 1),))

def test_int_and_bool_views() -> None:
  vals = [np.arange(12, dtype=np.int32).reshape(3, 4)]
  helper_test_op(None, lambda x: x.permute(1, 0).flip(0).reshape(2, 6)[:, 1:], lambda x: x.permute(1, 0).flip(0).reshape(2, 6)[:, 1:], vals=vals)
  helper_test_op(None, lambda x: x.expand(2, 3, 4).roll(1, 2), lambda x: x.expand(2, 3, 4).roll(1, 2), vals=[np.array([[True], [False], [True]])])

# *** rearrange ***

def test_rearrange() -> None:
  helper_test_op([(2, 3, 4, 5)], lambda x: x.permute(0, 2, 3, 1).reshape(2, 60), lambda x: x.rearrange("b c h w -> b (h w c)"))
  helper_test_op([(6, 4)], lambda x: x.reshape(2, 3, 4).permute(1, 0, 2), lambda x: x.rearrange("(a b) c -> b a c", a=2))
  helper_test_op([(2, 3, 4)], lambda x: x.permute(2, 0, 1).unsqueeze(1), lambda x: x.rearrange("... c -> c 1 ..."))
  helper_test_op([(2, 1, 4)], lambda x: x.reshape(2, 4), lambda x: x.rearrange("a 1 c -> a c"))
  with pytest.raises(ValueError): Tensor.ones(2, 3).rearrange("a b -> a c")
  with pytest.raises(ValueError): Tensor.ones(2, 3).rearrange("a b")

def test_movement_dtype_preserving() -> None:
  t = Tensor.arange(6, dtype=dtypes.int16)
  for out in (t.repeat(2), t.roll(1), t.unfold(0, 2, 2), t.reshape(2, 3).tril(), t.pad((1, 1), mode="reflect"), Tensor.stack(t, t), t.diag()):
    assert out.dtype == dtypes.int16
  np.testing.assert_equal(t.pad((2, 1), mode="reflect").numpy(), [2, 1, 0, 1, 2, 3, 4, 5, 4])

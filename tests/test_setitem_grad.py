"""setitem with autograd vs torch: backward through `t[idx] = v` and `t[idx] += v`, overlapping writes, a tensor used before it is
written, detach of a written tensor, and the errors for aliased, leaf and unrealized-view targets."""
from __future__ import annotations
from typing import Any, Callable

import numpy as np
import pytest

from helpers import compare, torch
from tg_core.tensor import Tensor

def _run(T: Callable, body: Callable, xs: list[np.ndarray]) -> tuple[Any, list[Any]]:
  ins = [T(x.copy(), requires_grad=True) for x in xs]
  out = body(T, *ins)
  (out * out).sum().backward()
  return out, [i.grad for i in ins]

def check(body: Callable, *shapes: tuple[int, ...], seed: int = 0) -> None:
  """Run `body(T, *inputs)` (it writes into a tensor and returns it) with torch and tg; compare the result and the input gradients."""
  rng = np.random.default_rng(seed)
  xs = [rng.uniform(-2, 2, s).astype(np.float32) for s in shapes]
  t_out, t_grads = _run(torch.tensor, body, xs)
  g_out, g_grads = _run(Tensor, body, xs)
  compare("forward", g_out, t_out, 1e-6, 1e-5)
  for i, (tg_g, t_g) in enumerate(zip(g_grads, t_grads)):
    assert (tg_g is None) == (t_g is None), f"grad {i}: tg {tg_g} torch {t_g}"
    if t_g is not None: compare(f"grad {i}", tg_g, t_g, 1e-5, 1e-5)

def _w(t: Any, idx: Any, v: Any) -> Any:
  t[idx] = v
  return t

def test_assign_slice() -> None:
  check(lambda T, x, v: _w(x * 2, slice(1, 3), v), (5,), (2,))
  check(lambda T, x, v: _w(x * 1, (slice(None), 1), v), (3, 4), (3,))
  check(lambda T, x, v: _w(x + 0, (1, slice(None, None, 2)), v), (3, 5), (3,))
  check(lambda T, x, v: _w(x.sin(), (Ellipsis, 0), v), (2, 3, 4), (2, 3))  # (torch saves exp's output: it refuses writes into it)

def test_assign_broadcast_and_scalar() -> None:
  check(lambda T, x, v: _w(x * 3, slice(0, 2), v), (4, 3), (3,))  # v broadcast over the rows
  check(lambda T, x, v: _w(x * 3, (0, 0), v[0]), (2, 2), (1,))
  check(lambda T, x: _w(x * 3, slice(1, None), 7.0), (4,))  # a Python value: the kept elements still get their gradient

def test_assign_int_and_tensor_index() -> None:
  check(lambda T, x, v: _w(x * 1, 2, v), (4, 3), (3,))
  check(lambda T, x, v: _w(x * 1, T([0, 3]), v), (5,), (2,))
  check(lambda T, x, v: _w(x * 1, (T([0, 2]), T([1, 0])), v), (3, 3), (2,))

def test_iadd_sub_mul() -> None:
  def iadd(T: Any, x: Any, v: Any) -> Any:
    t = x * 2
    t[1:3] += v
    return t
  def isub(T: Any, x: Any, v: Any) -> Any:
    t = x * 1
    t[:, 0] -= v
    return t
  def imul(T: Any, x: Any, v: Any) -> Any:
    t = x + 1
    t[0] *= v
    return t
  check(iadd, (5,), (2,))
  check(isub, (3, 2), (3,))
  check(imul, (2, 3), (3,))

def test_overlapping_writes() -> None:
  def body(T: Any, x: Any, v: Any) -> Any:
    t = x * 1
    t[0:3] = v[:3]
    t[2:5] = v[1:] * 2  # overwrites t[2] again: only the second write's value gets its gradient
    return t
  check(body, (6,), (4,))
  def body2(T: Any, x: Any, v: Any, w: Any) -> Any:
    t = x * 1
    t[:, 1:] = v
    t[1] = w
    t[1:, 2] += w[0]
    return t
  check(body2, (3, 4), (3, 3), (4,))

def test_used_before_written() -> None:
  def body(T: Any, x: Any, v: Any) -> Any:
    t = x * 2
    y = t * 3 + 1  # reads the old t
    t[1] = v[0]
    return t + y
  check(body, (4,), (1,))

def test_detach_of_written() -> None:
  def body(T: Any, x: Any, v: Any) -> Any:
    t = x * 1
    t[0] = v[0]
    d = t.detach()  # holds the written values, no gradient through it
    return t * d
  check(body, (3,), (1,))

def test_written_then_reduced() -> None:
  def body(T: Any, x: Any, v: Any) -> Any:
    t = x.reshape(2, 3) * 1
    t[:, 1] = v.exp()
    return t.softmax(-1)
  check(body, (6,), (2,))

def test_duplicate_tensor_index_grad() -> None:
  # one advanced write with a repeated index: the last value wins (torch on CPU too). Like tinygrad, only the winning value
  # gets the gradient; torch gives every duplicate the gradient of the position. The reference is the winner-only gradient.
  x = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
  v = Tensor([7.0, 8.0], requires_grad=True)
  t = x * 1
  t[Tensor([0, 0])] = v
  (t * t).sum().backward()
  np.testing.assert_equal(t.numpy(), [8.0, 2.0, 3.0, 4.0])
  assert x.grad is not None and v.grad is not None
  np.testing.assert_equal(x.grad.numpy(), [0.0, 4.0, 6.0, 8.0])
  np.testing.assert_equal(v.grad.numpy(), [0.0, 16.0])

def test_no_grad_write_into_realized_buffer_keeps_working() -> None:
  t = Tensor.zeros(4).contiguous().realize()
  v = Tensor([1.0, 2.0], requires_grad=True)
  with_grad = Tensor.no_grad
  Tensor.no_grad = True
  try: t[1:3] = v
  finally: Tensor.no_grad = with_grad
  np.testing.assert_equal(t.numpy(), [0.0, 1.0, 2.0, 0.0])

def test_grad_write_into_realized_buffer() -> None:
  # a realized (non-leaf: requires_grad unset) target and a v that requires grad: the write replaces t's graph
  t = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
  v = Tensor([5.0, 6.0], requires_grad=True)
  t[::2] = v
  (t * t).sum().backward()
  np.testing.assert_equal(t.numpy(), [5.0, 2.0, 6.0, 4.0])
  assert v.grad is not None
  np.testing.assert_equal(v.grad.numpy(), [10.0, 12.0])

def test_leaf_target_raises() -> None:
  # torch: RuntimeError. tg raises NotImplementedError, tinygrad's class, which is a RuntimeError
  for T in (torch.tensor, Tensor):
    x = T([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(RuntimeError): x[0] = 5.0
    with pytest.raises(RuntimeError): x[1:] = T([1.0, 2.0])
  with pytest.raises(NotImplementedError): Tensor.ones(3, requires_grad=True)[1:][0] = 2.0

def test_live_view_target_raises() -> None:
  # a live view of the target would keep the old values where torch's would see the write: refused, like tinygrad
  x = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
  t = x * 1
  view = t[0:2]
  with pytest.raises(RuntimeError, match="other uses"): t[0] = 5.0
  del view
  t[0] = 5.0
  np.testing.assert_equal(t.numpy(), [5.0, 2.0, 3.0, 4.0])

def test_unrealized_view_target_raises() -> None:
  x = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
  with pytest.raises(RuntimeError, match="unrealized view"): (x * 2)[1:][0] = 5.0

def test_dtype_mismatch_raises() -> None:
  x = Tensor([1.0, 2.0], requires_grad=True)
  t = x * 1
  with pytest.raises(RuntimeError, match="dtype"): t[0] = Tensor([1], dtype="int32")[0]

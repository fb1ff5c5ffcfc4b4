"""Value-producing calls (`@function`, `Tensor.call`) and TinyJit capture/replay, checked against numpy."""
from __future__ import annotations
import numpy as np
import pytest

from tg_core import GlobalCounters, Tensor, TinyJit, dtypes, function
from tg_core.uop import Ops
from tg_core.uop.ops import UOp

rng = np.random.default_rng(3)
def rnd(*s: int) -> np.ndarray: return rng.standard_normal(s).astype(np.float32)

def test_function_value_and_structure():
  @function
  def f(x: Tensor, y: Tensor) -> Tensor: return x * y + 1
  a, b = rnd(3, 4), rnd(3, 4)
  out = f(Tensor(a), Tensor(b))
  assert out.uop.op is Ops.AFTER and out.uop.src[1].op is Ops.CALL and out.uop.src[1].num_returned == 1
  assert out.uop.src[1].arg.name.endswith("f")
  np.testing.assert_allclose(out.numpy(), a * b + 1, rtol=1e-6)

def test_function_same_body_for_same_shapes():
  @function
  def f(x: Tensor) -> Tensor: return x.exp()
  c1, c2 = f(Tensor(rnd(4, 8))).uop.src[1], f(Tensor(rnd(4, 8))).uop.src[1]
  assert c1.src[0] is c2.src[0]

def test_function_tuple_return():
  @function
  def f(x: Tensor) -> tuple[Tensor, Tensor]: return x.sum(), x * 2
  a = rnd(5)
  s, d = f(Tensor(a))
  np.testing.assert_allclose(s.numpy(), a.sum(), rtol=1e-5)
  np.testing.assert_allclose(d.numpy(), a * 2)

def test_function_gradient_by_inlining():
  @function
  def f(x: Tensor, y: Tensor) -> Tensor: return (x * y).sum()
  a, b = rnd(3), rnd(3)
  ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
  f(ta, tb).backward()
  np.testing.assert_allclose(ta.grad.numpy(), b, rtol=1e-6)
  np.testing.assert_allclose(tb.grad.numpy(), a, rtol=1e-6)

def test_function_custom_grad_fxn():
  def grad(g: UOp, call: UOp) -> tuple: return (g * 3, None)
  @function(grad_fxn=grad)
  def f(x: Tensor, y: Tensor) -> Tensor: return x + y
  a = rnd(4)
  ta, tb = Tensor(a, requires_grad=True), Tensor(a, requires_grad=True)
  f(ta, tb).sum().backward()
  np.testing.assert_allclose(ta.grad.numpy(), np.full(4, 3.0))

def test_function_implicit_buffer_error():
  w = Tensor(rnd(3))
  @function
  def f(x: Tensor) -> Tensor: return x + w
  with pytest.raises(RuntimeError, match="implicit buffer"): f(Tensor(rnd(3)))
  g = function(lambda x: x + w, allow_implicit=True)
  np.testing.assert_allclose(g(Tensor(np.ones(3, np.float32))).numpy(), 1 + w.numpy())

def test_function_bad_return():
  @function
  def f(x: Tensor) -> int: return 3
  with pytest.raises(RuntimeError, match="not supported"): f(Tensor(rnd(2)))

def test_call_scalar_param_shape_mismatch():
  with pytest.raises(TypeError, match="shape mismatch: expected scalar"):
    Tensor.call(Tensor.ones(2), fxn=UOp.param(0, dtypes.float, ()) * 2).realize()

def test_call_gemm():
  M, K, N = 4, 8, 4
  a, b = rnd(M, K), rnd(K, N)
  body = (UOp.param(0, dtypes.float, (M, K)).reshape((M, K, 1)).expand((M, K, N)) *
          UOp.param(1, dtypes.float, (K, N)).reshape((1, K, N)).expand((M, K, N))).r(Ops.ADD, (1,)).reshape((M, N))
  out = Tensor(a).call(Tensor(b), fxn=body)
  np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-5, atol=1e-5)

def test_jit_replays_with_new_inputs():
  @TinyJit
  def f(x: Tensor, y: Tensor) -> Tensor: return (x + y).relu() * 2
  for i in range(5):
    a, b = rnd(4, 4), rnd(4, 4)
    GlobalCounters.reset()
    out = f(Tensor(a), Tensor(b))
    np.testing.assert_allclose(out.numpy(), np.maximum(a + b, 0) * 2, rtol=1e-6)
    if i >= 2: assert f.captured is not None and len(f.captured) == 1

def test_jit_replays_on_staged_inputs():
  # the same input tensors (their buffers refilled in place) and the same bound Variable, call after call, then a new binding
  from tg_core import Variable
  from tg_core.engine.realize import buffer_of
  @TinyJit
  def f(x: Tensor, v: Tensor, i: UOp) -> Tensor: return (x * 2 + v[:i].sum()).realize()
  x, v = Tensor(rnd(4)).realize(), Tensor(rnd(8)).realize()
  i3 = Variable("i", 1, 8).bind(3)
  for step in range(7):
    a, b = rnd(4), rnd(8)
    buffer_of(x.uop.base).copyin(memoryview(a).cast("B"))
    buffer_of(v.uop.base).copyin(memoryview(b).cast("B"))
    i = i3 if step < 5 else Variable("i", 1, 8).bind(step)
    np.testing.assert_allclose(f(x, v, i).numpy(), a * 2 + b[:3 if step < 5 else step].sum(), rtol=1e-5, atol=1e-6)
  y = Tensor(rnd(4)).realize()  # another input tensor after the staged ones: its own buffer is read
  np.testing.assert_allclose(f(y, v, i3).numpy(), y.numpy() * 2 + v.numpy()[:3].sum(), rtol=1e-5, atol=1e-6)

def test_jit_capture_first_replays_from_the_second_call():
  # capture_first: call 1 records the kernels (and computes the result), every later call replays them on its own inputs and binding
  from tg_core import Variable
  w = Tensor(rnd(8)).realize()
  f = TinyJit(lambda x, i: (x * w[:i].sum() + 1).realize(), capture_first=True)
  for step in range(4):
    a, n = rnd(4), 2 + step
    out = f(Tensor(a), Variable("i", 1, 8).bind(n))
    assert f.captured is not None and len(f.captured) >= 1  # captured at call 1 already
    np.testing.assert_allclose(out.numpy(), a * w.numpy()[:n].sum() + 1, rtol=1e-5, atol=1e-6)
  assert f.cnt == 5
  with pytest.raises(RuntimeError, match="captured with"): f(Tensor(rnd(5)), Variable("i", 1, 8).bind(2))

def test_jit_shape_change_errors():
  @TinyJit
  def f(x: Tensor) -> Tensor: return x * 2
  for _ in range(3): f(Tensor(rnd(3)))
  with pytest.raises(RuntimeError, match="captured with"): f(Tensor(rnd(4)))

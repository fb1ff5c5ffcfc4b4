"""The schedule cache reuses a schedule for graphs of the same structure over other buffers. Values must stay those of
numpy, buffers must never alias, and graphs that differ only in which buffers they share must not share a schedule."""
import numpy as np

from tg_core import Tensor
from tg_core.schedule import cache

def _hits() -> int: return cache.stats["hits"]

def test_same_structure_hits_and_values():
  rng = np.random.default_rng(0)
  arrs = [rng.standard_normal(6).astype(np.float32) for _ in range(4)]
  h0 = _hits()
  for a in arrs: np.testing.assert_allclose((Tensor(a) * 2 + 1).numpy(), a * 2 + 1, rtol=1e-6)
  assert _hits() - h0 >= 3

def test_outputs_are_fresh_buffers():
  x = Tensor(np.arange(4, dtype=np.float32)).realize()
  r1, r2 = (x + 1).realize(), (x + 1).realize()
  r1.assign(r1 * 10).realize()
  np.testing.assert_equal(r1.numpy(), (np.arange(4) + 1) * 10)
  np.testing.assert_equal(r2.numpy(), np.arange(4) + 1)

def test_shared_buffer_is_structure():
  x = Tensor(np.full(5, 3, np.float32)).realize()
  y = Tensor(np.full(5, 4, np.float32)).realize()
  np.testing.assert_equal((x * x).numpy(), np.full(5, 9))
  np.testing.assert_equal((x * y).numpy(), np.full(5, 12))  # one buffer twice is not two buffers
  np.testing.assert_equal((y * y).numpy(), np.full(5, 16))

def test_assign_loop():
  a = Tensor(np.zeros(3, np.float32)).realize()
  b = Tensor(np.ones(3, np.float32)).realize()
  for _ in range(4):
    a.assign(a + 1).realize()
    b.assign(b * 2).realize()
  np.testing.assert_equal(a.numpy(), np.full(3, 4))
  np.testing.assert_equal(b.numpy(), np.full(3, 16))

def test_write_hazard_repeated():
  ref = np.arange(6, dtype=np.float32)
  a = Tensor(ref.copy()).realize()
  for _ in range(3):
    a.assign(a.flip(0) + 1).realize()
    ref = ref[::-1] + 1
    np.testing.assert_equal(a.numpy(), ref)

def test_other_dtype_or_size_misses():
  x = Tensor(np.arange(4, dtype=np.float32)).realize()
  y = Tensor(np.arange(4, dtype=np.int32)).realize()
  z = Tensor(np.arange(7, dtype=np.float32)).realize()
  np.testing.assert_equal((x + 1).numpy(), np.arange(4) + 1)
  np.testing.assert_equal((y + 1).numpy(), np.arange(4) + 1)
  assert (y + 1).numpy().dtype == np.int32
  np.testing.assert_equal((z.reshape(7) + 1).numpy(), np.arange(7) + 1)

def test_training_steps_match_numpy():
  # the same step graph over new buffers each iteration: an SGD step on a least-squares loss
  rng = np.random.default_rng(1)
  X, Y = rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((8, 1)).astype(np.float32)
  w_np = np.zeros((3, 1), np.float32)
  w = Tensor(w_np.copy(), requires_grad=True)
  for _ in range(3):
    loss = ((Tensor(X) @ w - Tensor(Y)) ** 2).mean()
    (g,) = loss.gradient(w)
    w.assign(w - 0.1 * g).realize()
    w_np = w_np - 0.1 * (2 / 8) * X.T @ (X @ w_np - Y)
  np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-5, atol=1e-6)

"""Kernel counts for typical graphs: fusion works and stays working. Values are checked against numpy."""
from __future__ import annotations
import numpy as np
import pytest

from tg_core.device import Device
from tg_core.engine.realize import run_schedule
from tg_core.tensor import Tensor
from tg_core.uop import Ops

def check_schedule(t: Tensor | list[Tensor], n: int) -> list:
  ts = t if isinstance(t, list) else [t]
  items = ts[0].schedule(*ts[1:])
  kernels = [si for si in items if si.ast.op is Ops.SINK]
  assert len(kernels) == n, f"expected {n} kernels, got {len(kernels)}: {[si.ast.arg.name for si in kernels]}"
  run_schedule(items)
  return items

rng = np.random.default_rng(0)
def rnd(*shape: int) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)

def test_add_sum_one_kernel():
  a, b = rnd(8, 8), rnd(8, 8)
  t = (Tensor(a) + Tensor(b)).sum()
  check_schedule(t, 1)
  np.testing.assert_allclose(t.numpy(), (a + b).sum(), rtol=1e-5)

def test_elementwise_chain_one_kernel():
  a, b, c = rnd(5, 7), rnd(5, 7), rnd(5, 7)
  t = (Tensor(a) + Tensor(b)) * Tensor(c) - Tensor(a).exp()
  check_schedule(t, 1)
  np.testing.assert_allclose(t.numpy(), (a + b) * c - np.exp(a), rtol=1e-5, atol=1e-6)

def test_softmax_at_most_three():
  a = rnd(4, 10)
  x = Tensor(a)
  m = x - x.max(1, keepdim=True)
  e = m.exp()
  t = e / e.sum(1, keepdim=True)
  items = t.schedule()
  assert len(items) <= 3
  run_schedule(items)
  ref = np.exp(a - a.max(1, keepdims=True)); ref /= ref.sum(1, keepdims=True)
  np.testing.assert_allclose(t.numpy(), ref, rtol=1e-5, atol=1e-6)

def test_matmul_one_kernel():
  a, b = rnd(6, 5), rnd(5, 7)
  t = Tensor(a) @ Tensor(b)
  check_schedule(t, 1)
  np.testing.assert_allclose(t.numpy(), a @ b, rtol=1e-5, atol=1e-5)

def test_linear_bias_relu_one_kernel():
  a, w, bias = rnd(3, 4), rnd(4, 5), rnd(5)
  t = (Tensor(a) @ Tensor(w) + Tensor(bias)).relu()
  check_schedule(t, 1)
  np.testing.assert_allclose(t.numpy(), np.maximum(a @ w + bias, 0), rtol=1e-5, atol=1e-5)

def test_reduce_then_expand_two_kernels():
  a = rnd(4, 6)
  x = Tensor(a)
  t = (x.sum(1, keepdim=True) + x).sum()
  check_schedule(t, 2)
  np.testing.assert_allclose(t.numpy(), (a.sum(1, keepdims=True) + a).sum(), rtol=1e-5)

def test_contiguous_splits():
  a = rnd(4, 4)
  t = Tensor(a).permute(1, 0).contiguous() + 1
  check_schedule(t, 2)
  np.testing.assert_allclose(t.numpy(), a.T + 1, rtol=1e-6)

def test_permute_contiguous_one_kernel():
  a = rnd(3, 5)
  t = Tensor(a).permute(1, 0).contiguous()
  check_schedule(t, 1)
  np.testing.assert_allclose(t.numpy(), a.T)

def test_pad_add_one_kernel():
  a, b = rnd(3, 3), rnd(5, 4)
  t = Tensor(a).pad(((1, 1), (0, 1))) + Tensor(b)
  check_schedule(t, 1)
  np.testing.assert_allclose(t.numpy(), np.pad(a, ((1, 1), (0, 1))) + b, rtol=1e-6)

def test_two_outputs_two_kernels():
  a = rnd(4, 4)
  x = Tensor(a)
  t1, t2 = x.max(), x.sum()
  check_schedule([t1, t2], 2)
  np.testing.assert_allclose(t1.numpy(), a.max())
  np.testing.assert_allclose(t2.numpy(), a.sum(), rtol=1e-5)

def test_reduce_of_reduce_two_kernels():
  # the inner reduction is its own kernel: fused, it would run serially inside every step of the outer one
  a = rnd(5, 6)
  t = Tensor(a).sum(1).max(0)
  check_schedule(t, 2)
  np.testing.assert_allclose(t.numpy(), a.sum(1).max(0), rtol=1e-5)

def test_nested_reduce_with_output_rows_one_kernel():
  # per row and group: a scale times the group's sum, summed over groups (a quantized matvec's factored form). On a CPU the
  # group sums fuse (each is used once: nothing recomputed); the rows still split across cores
  w, d, x = rnd(16, 6, 8), rnd(16, 6), rnd(6, 8)
  t = ((Tensor(x) * Tensor(w)).sum(-1) * Tensor(d)).sum(-1)
  check_schedule(t, 1 if not Device[Device.DEFAULT].renderer.caps.has_grid else 2)
  np.testing.assert_allclose(t.numpy(), ((x * w).sum(-1) * d).sum(-1), rtol=1e-5, atol=1e-5)

def test_expand_buffer_one_kernel():
  a, b = rnd(4), rnd(4, 4)
  t = Tensor(a).reshape(4, 1).expand(4, 4) + Tensor(b)
  check_schedule(t, 1)
  np.testing.assert_allclose(t.numpy(), a.reshape(4, 1) + b, rtol=1e-6)

def test_mean_one_kernel():
  a = rnd(7, 3)
  t = Tensor(a).mean(0)
  check_schedule(t, 1)
  np.testing.assert_allclose(t.numpy(), a.mean(0), rtol=1e-5)

# row statistics fuse into their consumer on a device whose output axes are loops (the CPU): hoisted out of them, each runs
# once per row (on a grid device it would run once per thread: realized apart there)
def test_variance_one_kernel():
  # the mean is a scalar: the outer reduction's kernel computes it once, hoisted above its loop
  a = rnd(9)
  x = Tensor(a, device="CPU")
  t = (x - x.mean()).square().mean()
  check_schedule(t, 1)
  np.testing.assert_allclose(t.numpy(), a.var(), rtol=1e-5)

def test_softmax_one_kernel():
  # row max and row sum broadcast along the trailing axis: one kernel, each statistic hoisted out of the inner loops
  a = rnd(3, 3, 1, 37)
  t = Tensor(a, device="CPU").softmax(-1)
  check_schedule(t, 1)
  ref = np.exp(a - a.max(-1, keepdims=True))
  np.testing.assert_allclose(t.numpy(), ref / ref.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)

def test_rms_norm_into_matvec_one_kernel():
  x, w, W = rnd(1, 64), rnd(64), rnd(48, 64)
  xt = Tensor(x, device="CPU")
  t = (xt * (xt.square().mean(-1, keepdim=True) + 1e-5).rsqrt() * Tensor(w, device="CPU")) @ Tensor(W, device="CPU").T
  check_schedule(t, 1)
  ref = (x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w) @ W.T
  np.testing.assert_allclose(t.numpy(), ref, rtol=1e-4, atol=1e-4)

def test_rows_norm_one_kernel():
  x, w = rnd(6, 40), rnd(40)
  xt = Tensor(x, device="CPU")
  t = xt * (xt.square().mean(-1, keepdim=True) + 1e-5).rsqrt() * Tensor(w, device="CPU")
  check_schedule(t, 1)
  np.testing.assert_allclose(t.numpy(), x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w, rtol=1e-5, atol=1e-6)

@pytest.mark.parametrize("build, ref", [
  # broadcast along a leading axis: the consumer's outer loop
  (lambda x: x - x.mean(0, keepdim=True), lambda a: a - a.mean(0, keepdims=True)),
  # a permute moves the broadcast axis outward
  (lambda x: (x - x.max(1, keepdim=True)).permute(1, 0) * 2, lambda a: (a - a.max(1, keepdims=True)).T * 2),
  # a reshape merges the row axis into the broadcast one
  (lambda x: (x.sum(1, keepdim=True) + x).reshape(-1) * 2, lambda a: (a.sum(1, keepdims=True) + a).reshape(-1) * 2),
], ids=["leading", "permuted", "merged"])
def test_reduce_broadcast_outward_two_kernels(build, ref):
  # fused, each of these would recompute the whole reduction for every element of the broadcast axis
  a = rnd(5, 7)
  t = build(Tensor(a, device="CPU"))
  check_schedule(t, 2)
  np.testing.assert_allclose(t.numpy(), ref(a), rtol=1e-5, atol=1e-6)

def test_assign_one_kernel():
  a = rnd(4)
  x = Tensor(a).realize()
  x.assign(x * 2 + 1)
  check_schedule(x, 1)
  np.testing.assert_allclose(x.numpy(), a * 2 + 1, rtol=1e-6)

def test_const_sum_one_kernel():
  t = Tensor.ones(4, 5).sum()
  check_schedule(t, 1)
  assert t.item() == 20

def test_reduce_used_twice_is_realized_once():
  a = rnd(6, 4)
  x = Tensor(a)
  s = x.sum(1)
  t = s * 2 + s.exp()
  # s is used by two consumers: computed once (2 kernels), not recomputed inside the consumer
  check_schedule(t, 2)
  ref = a.sum(1)
  np.testing.assert_allclose(t.numpy(), ref * 2 + np.exp(ref), rtol=1e-5)

def test_copy_is_not_a_kernel():
  a = rnd(4)
  t = Tensor(a).to("PYTHON:1")
  items = t.schedule()
  assert [si.ast.op for si in items] == [Ops.COPY]
  run_schedule(items)
  np.testing.assert_allclose(t.numpy(), a)
  assert t.device == "PYTHON:1"

def test_backward_kernel_count():
  a = rnd(4, 4)
  w = Tensor(a, requires_grad=True)
  (w * w).sum().backward()
  assert w.grad is not None
  check_schedule(w.grad, 1)
  np.testing.assert_allclose(w.grad.numpy(), 2 * a, rtol=1e-6)

@pytest.mark.parametrize("n", [1, 2, 3])
def test_realize_many_elementwise(n: int):
  a = rnd(3)
  ts = [Tensor(a) * (i + 1) for i in range(n)]
  check_schedule(ts, n)
  for i, t in enumerate(ts): np.testing.assert_allclose(t.numpy(), a * (i + 1), rtol=1e-6)

def test_assign_swap_reads_old_values():
  a, b = Tensor([1.0, 2.0, 3.0]).realize(), Tensor([4.0, 5.0, 6.0]).realize()
  a_old = Tensor(a.uop)
  a.assign(b)
  b.assign(a_old)
  Tensor.realize(a, b)
  assert a.tolist() == [4.0, 5.0, 6.0] and b.tolist() == [1.0, 2.0, 3.0]

def test_assign_from_other_view_of_itself():
  c = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
  c.assign(c.flip(0))
  assert c.realize().tolist() == [4.0, 3.0, 2.0, 1.0]

def test_identical_graphs_do_not_alias_after_realize():
  x, y = Tensor.zeros(3), Tensor.zeros(3)
  x.realize(); y.realize()  # noqa: E702
  x[0] = 1
  assert x.tolist() == [1.0, 0.0, 0.0] and y.tolist() == [0.0, 0.0, 0.0]

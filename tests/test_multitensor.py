"""Multi-device tensors in one process (tg_core/schedule/multi.py) vs numpy/torch: shard/replicate on every axis, every op family,
matmul sharded on K (ALLREDUCE) and on M/N, uneven shards, MLP gradients, both ALLREDUCE strategies, TinyJit data-parallel replay.
The device family comes from DEV (run with DEV=CPU: CPU:0..3, and DEV=PYTHON: PYTHON:0..1)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tg_core import Device, Tensor, TinyJit
from tg_core.helpers import Context
from tg_core.nn.optim import SGD
from tg_core.schedule.multi import MultiDeviceError, shard_sizes
from tg_core.uop import Ops

FAM = Device.DEFAULT
N = 4 if FAM == "CPU" else 2
DEVS = tuple(Device.canonicalize(f"{FAM}:{i}") for i in range(N))  # "CPU:0" is "CPU"
SHARDINGS = [None, 0, 1]  # replicated, split on axis 0, split on axis 1

rng = np.random.default_rng(0)
def rand(*shape: int) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)
def close(t: Tensor, ref: np.ndarray | torch.Tensor, atol: float = 1e-5) -> None:
  np.testing.assert_allclose(t.numpy(), ref.detach().numpy() if isinstance(ref, torch.Tensor) else ref, atol=atol, rtol=1e-5)
def parts_of(t: Tensor) -> tuple:
  assert t.uop.op is Ops.UNSHARD
  return t.uop.src[0].src

# *** devices ***

def test_device_instances_are_separate() -> None:
  assert Device.canonicalize(f"{FAM}:0") == FAM
  d0, d1 = Device[DEVS[0]], Device[DEVS[1]]
  assert d0 is not d1 and d0.allocator is not d1.allocator
  a = rand(5)
  t = Tensor(a, device=DEVS[1])
  u = t.to(DEVS[0])
  assert t.device == DEVS[1] and u.device == FAM
  np.testing.assert_array_equal((u + 1).numpy(), a + 1)

# *** shard / to ***

@pytest.mark.parametrize("axis", SHARDINGS)
def test_shard_roundtrip(axis: int | None) -> None:
  a = rand(7, 6)
  t = Tensor(a).shard(DEVS, axis)
  assert t.device == DEVS and t.shape == (7, 6)
  if axis is not None:
    assert [int(p.shape[axis]) for p in parts_of(t.realize())] == shard_sizes(a.shape[axis], N)
    assert shard_sizes(7, 4) == [2, 2, 2, 1]
  np.testing.assert_array_equal(t.numpy(), a)
  np.testing.assert_array_equal(t.to(DEVS[-1]).numpy(), a)

def test_shard_in_place_and_to_tuple() -> None:
  a = rand(4, 4)
  t = Tensor(a)
  assert t.shard_(DEVS, 1) is t and t.device == DEVS
  np.testing.assert_array_equal(t.numpy(), a)
  r = Tensor(a).to(DEVS)  # a tuple is a replicated copy
  assert r.device == DEVS and r.uop.arg == ()
  np.testing.assert_array_equal(r.numpy(), a)
  moved = t.to(tuple(reversed(DEVS)))  # between device tuples, part by part
  assert moved.device == tuple(reversed(DEVS))
  np.testing.assert_array_equal(moved.numpy(), a)

def test_uneven_and_empty_shards() -> None:
  a = rand(N + 1, 3)  # CPU: 5 over 4 -> 2, 2, 1, 0
  for axis in (0, 1):
    t = Tensor(a).shard(DEVS, axis)
    close(t * 2 + 1, a * 2 + 1)
    close(t.sum(axis), a.sum(axis))
    close(t.sum(1 - axis), a.sum(1 - axis))
    close(t.max(axis), a.max(axis))

# *** op families on every sharding ***

@pytest.mark.parametrize("axis", SHARDINGS)
def test_elementwise(axis: int | None) -> None:
  a, b, c = rand(6, 5), rand(6, 5), rand(6, 5)
  ta, tb, tc = (Tensor(x).shard(DEVS, axis) for x in (a, b, c))
  close(ta + tb * 2, a + b * 2)
  close((ta - 1).exp() / (tb.abs() + 1), np.exp(a - 1) / (np.abs(b) + 1), atol=1e-4)
  close((ta > tb).where(ta, tc), np.where(a > b, a, c))
  close(ta.relu().sqrt(), np.sqrt(np.maximum(a, 0)))
  close(ta.cast("int32"), a.astype(np.int32))
  close(ta.maximum(tb), np.maximum(a, b))

@pytest.mark.parametrize("axes", [(0, 1), (1, 0), (0, None), (None, 1)])
def test_elementwise_resharding(axes: tuple) -> None:
  # operands split differently: the result follows the first sharded one, the others are resharded
  a, b = rand(6, 5), rand(6, 5)
  out = Tensor(a).shard(DEVS, axes[0]) * Tensor(b).shard(DEVS, axes[1]) + 3
  want = next((x for x in axes if x is not None), None)
  assert out.realize().uop.arg == (() if want is None else (want,))
  close(out, a * b + 3)

@pytest.mark.parametrize("axis", SHARDINGS)
def test_reduce(axis: int | None) -> None:
  a = rand(6, 5)
  t = Tensor(a).shard(DEVS, axis)
  close(t.sum(0), a.sum(0))
  close(t.sum(1, keepdim=True), a.sum(1, keepdims=True))
  close(t.sum(), a.sum(), atol=1e-4)
  close(t.max(0), a.max(0))
  close(t.min(1), a.min(1))
  close(t.mean(), a.mean())
  close(t.prod(0), a.prod(0), atol=1e-4)
  close(t.softmax(1), torch.tensor(a).softmax(1))
  close(t.std(0), torch.tensor(a).std(0), atol=1e-4)

def test_reduce_over_sharded_axis_is_allreduce() -> None:
  t = Tensor(rand(8, 4)).shard(DEVS, 0).realize()
  out = t.sum(0)
  assert out.realize().uop.arg == ()  # replicated
  assert all(p.device == d for p, d in zip(parts_of(out), DEVS))

@pytest.mark.parametrize("axis", SHARDINGS)
def test_movement(axis: int | None) -> None:
  a = rand(4, 6)
  t = Tensor(a).shard(DEVS, axis)
  close(t.permute(1, 0), a.T)
  for shape in [(4, 1, 6), (1, 4, 6), (4, 6, 1)] + ([(24,), (2, 2, 6)] if axis is None else [(24,)] if axis == 0 else []):
    close(t.reshape(shape), a.reshape(shape))
  close(t.reshape(4, 6, 1).expand(4, 6, 3), np.broadcast_to(a.reshape(4, 6, 1), (4, 6, 3)))
  close(t.pad(((1, 2), (0, 3))), np.pad(a, ((1, 2), (0, 3))))
  close(t[1:3, 2:5], a[1:3, 2:5])
  close(t.flip(0), a[::-1])
  close(t.flip(1), a[:, ::-1])
  close(t.cat(t, dim=0), np.concatenate([a, a], 0))

def test_reshape_across_shards_is_refused() -> None:
  # 8 rows over 4 devices: parts of 2 rows can't become parts of the (2, 16) view's first axis
  t = Tensor(rand(8, 4)).shard(("CPU", "CPU:1", "CPU:2", "CPU:3") if FAM == "CPU" else DEVS, 0)
  if N == 4:
    with pytest.raises(MultiDeviceError, match="splits the sharded axis"): t.reshape(2, 16).realize()
  close(t.reshape(32), t.numpy().reshape(32))  # whole rows: fine

# *** matmul ***

@pytest.mark.parametrize("case", ["K", "M", "N", "replicated"])
def test_matmul(case: str) -> None:
  a, b = rand(6, 8), rand(8, 5)
  x_axis, w_axis = {"K": (1, 0), "M": (0, None), "N": (None, 1), "replicated": (None, None)}[case]
  out = Tensor(a).shard(DEVS, x_axis) @ Tensor(b).shard(DEVS, w_axis)
  close(out, a @ b, atol=1e-4)
  assert out.realize().uop.arg == {"K": (), "M": (0,), "N": (1,), "replicated": ()}[case]

def test_conv_data_parallel() -> None:
  # a batch split over the devices, replicated weights: conv2d, pooling, cross-entropy and the weight gradient (an ALLREDUCE)
  x, w, y = rand(2 * N, 2, 6, 6), rand(3, 2, 3, 3), rng.integers(0, 3, 2 * N).astype(np.int32)
  tw = Tensor(w).shard(DEVS)
  tw.requires_grad = True
  logits = Tensor(x).shard(DEVS, 0).conv2d(tw, padding=1).relu().max_pool2d(2).mean((2, 3))
  loss = logits.sparse_categorical_crossentropy(Tensor(y).shard(DEVS, 0))
  loss.backward()
  rw = torch.tensor(w, requires_grad=True)
  rlogits = torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(torch.tensor(x), rw, padding=1).relu(), 2).mean((2, 3))
  rloss = torch.nn.functional.cross_entropy(rlogits, torch.tensor(y).long())
  rloss.backward()
  close(logits, rlogits, atol=1e-4)
  close(loss, rloss, atol=1e-5)
  assert tw.grad is not None
  close(tw.grad, rw.grad, atol=1e-4)

# *** gradients ***

def test_mlp_gradients_sharded_on_hidden_axis() -> None:
  x, w1, b1, w2 = rand(6, 5), rand(5, 8), rand(8), rand(8, 3)
  t1 = Tensor(w1).shard(DEVS, 1)
  tb1 = Tensor(b1).shard(DEVS, 0)
  t2 = Tensor(w2).shard(DEVS, 0)
  for t in (t1, tb1, t2): t.requires_grad = True
  loss = ((Tensor(x).shard(DEVS) @ t1 + tb1).relu() @ t2).square().mean()
  loss.backward()
  r1, rb1, r2 = (torch.tensor(v, requires_grad=True) for v in (w1, b1, w2))
  rloss = ((torch.tensor(x) @ r1 + rb1).relu() @ r2).square().mean()
  rloss.backward()
  close(loss, rloss)
  for t, r in ((t1, r1), (tb1, rb1), (t2, r2)):
    assert t.grad is not None and t.grad.device == DEVS
    close(t.grad, r.grad, atol=1e-4)

def test_gradient_through_shard() -> None:
  x, w = rand(4, 6), rand(6, 3)
  tw = Tensor(w, requires_grad=True)
  (Tensor(x).shard(DEVS, 0) @ tw.shard(DEVS)).sum().backward()
  rw = torch.tensor(w, requires_grad=True)
  (torch.tensor(x) @ rw).sum().backward()
  assert tw.grad is not None and tw.grad.device == FAM
  close(tw.grad, rw.grad, atol=1e-4)

def test_function_over_sharded_args() -> None:
  from tg_core import function
  @function
  def layer(x: Tensor, w: Tensor) -> Tensor: return (x @ w).relu()
  a, w = rand(6, 4), rand(4, 3)
  out = layer(Tensor(a).shard(DEVS, 0), Tensor(w).shard(DEVS))
  assert out.device == DEVS
  close(out, np.maximum(a @ w, 0), atol=1e-5)

# *** ALLREDUCE strategies ***

@pytest.mark.parametrize("ring", [0, 2])
def test_allreduce_strategies(ring: int) -> None:
  a = rand(N * 3, 7)
  t = Tensor(a).shard(DEVS, 0).realize()
  with Context(ALLREDUCE_RING=ring):
    out = t.sum(0)
    copies = sum(1 for si in out.schedule() if si.ast.op is Ops.COPY)
  # all-to-all copies every partial to every other device; the ring moves n chunks n-1 hops twice (reduce-scatter, all-gather)
  assert copies == (N * (N - 1) if ring == 0 else 2 * N * (N - 1))
  from tg_core.engine.realize import run_schedule
  with Context(ALLREDUCE_RING=ring):
    out = t.sum(0)
    run_schedule(out.schedule())
  for p in parts_of(out): np.testing.assert_allclose(Tensor(p).numpy(), a.sum(0), atol=1e-5)
  with Context(ALLREDUCE_RING=ring): close(t.max(0), a.max(0))

# *** assign / TinyJit data-parallel step ***

def test_assign_sharded() -> None:
  a, b = rand(6, 4), rand(6, 4)
  t = Tensor(a).shard(DEVS, 0).realize()
  t.assign(t + Tensor(b).shard(DEVS, 1)).realize()
  assert t.device == DEVS and t.uop.arg == (0,)
  close(t, a + b)

def _dp_setup(w0: np.ndarray) -> tuple[Tensor, SGD]:
  w = Tensor(w0).shard(DEVS).realize()
  w.requires_grad = True
  return w, SGD([w], lr=0.1)

def _dp_step(w: Tensor, opt: SGD, x: Tensor, y: Tensor) -> Tensor:
  Tensor.training = True
  try:
    opt.zero_grad()
    loss = ((x @ w - y) ** 2).mean()
    loss.backward()
    opt.step()
  finally: Tensor.training = False
  return loss.realize()

def test_jit_data_parallel_step_replays() -> None:
  w0 = rand(4, 3)
  batches = [(rand(2 * N, 4), rand(2 * N, 3)) for _ in range(5)]
  w, opt = _dp_setup(w0)
  ref = [_dp_step(w, opt, Tensor(x).shard(DEVS, 0), Tensor(y).shard(DEVS, 0)).item() for x, y in batches]
  w_ref = w.numpy()
  w, opt = _dp_setup(w0)
  step = TinyJit(lambda x, y: _dp_step(w, opt, x, y))
  got = [step(Tensor(x).shard(DEVS, 0), Tensor(y).shard(DEVS, 0)).item() for x, y in batches]
  assert step.captured is not None and any(isinstance(r, str) for r, _, _ in step.captured)  # the allreduce copies were captured
  np.testing.assert_allclose(got, ref, rtol=1e-6)
  np.testing.assert_allclose(w.numpy(), w_ref, rtol=1e-6)
  # and the replicated weights equal a single-device run over the whole batch
  ws = Tensor(w0).realize()
  ws.requires_grad = True
  opt1 = SGD([ws], lr=0.1)
  for x, y in batches: _dp_step(ws, opt1, Tensor(x), Tensor(y))
  np.testing.assert_allclose(w.numpy(), ws.numpy(), atol=1e-5)

# *** bad input ***

def test_errors() -> None:
  t = Tensor(rand(4, 4)).shard(DEVS, 0)
  with pytest.raises(MultiDeviceError, match="mixes a tensor"): (t + Tensor(rand(4, 4))).realize()
  with pytest.raises(MultiDeviceError, match="already on"): t.shard(DEVS)
  with pytest.raises(MultiDeviceError, match="distinct"): Tensor(rand(4)).shard((DEVS[0], DEVS[0]))
  with pytest.raises(MultiDeviceError, match="expands the sharded axis"): Tensor(rand(1, 4)).shard(DEVS, 0).expand(3, 4).realize()
  with pytest.raises(MultiDeviceError, match="tuple of devices"): Tensor(rand(4)).shard(DEVS[0])  # type: ignore[arg-type]

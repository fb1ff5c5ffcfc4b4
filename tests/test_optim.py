"""Optimizers: several steps of SGD/Adam/AdamW against torch.optim on the same params, data and loss; LAMB and classic SGD against
numpy references of tinygrad's formulas; the Optimizer API (lr tensor, zero_grad, schedule_step, buffers, groups, errors)."""
from __future__ import annotations
from typing import Callable

import numpy as np
import pytest

from helpers import torch
from tg_core.dtype import dtypes
from tg_core.nn.optim import LAMB, SGD, Adam, AdamW, Optimizer, OptimizerGroup
from tg_core.tensor import Tensor

RNG = np.random.default_rng(0)
W1, W2, B1 = RNG.standard_normal((4, 3)).astype(np.float32), RNG.standard_normal((3, 2)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
X = RNG.standard_normal((5, 4)).astype(np.float32)

@pytest.fixture(autouse=True)
def _training():
  old = Tensor.training
  Tensor.training = True
  yield
  Tensor.training = old

def tg_loss(x, w1, b1, w2): return ((x @ w1 + b1).relu() @ w2).square().mean()

def run_tg(make_opt: Callable, steps: int) -> list[np.ndarray]:
  ps = [Tensor(W1.copy(), requires_grad=True), Tensor(B1.copy(), requires_grad=True), Tensor(W2.copy(), requires_grad=True)]
  opt = make_opt(ps)
  for _ in range(steps):
    opt.zero_grad()
    tg_loss(Tensor(X), *ps).backward()
    opt.step()
  return [p.numpy() for p in ps]

def run_torch(make_opt: Callable, steps: int) -> list[np.ndarray]:
  ps = [torch.tensor(W1.copy(), requires_grad=True), torch.tensor(B1.copy(), requires_grad=True), torch.tensor(W2.copy(), requires_grad=True)]
  opt = make_opt(ps)
  for _ in range(steps):
    opt.zero_grad()
    tg_loss(torch.tensor(X), *ps).backward()
    opt.step()
  return [p.detach().numpy() for p in ps]

def check(tg_opt: Callable, torch_opt: Callable, steps: int = 4, atol: float = 1e-5) -> None:
  for i, (a, b) in enumerate(zip(run_tg(tg_opt, steps), run_torch(torch_opt, steps))):
    np.testing.assert_allclose(a, b, atol=atol, rtol=1e-5, err_msg=f"param {i}")

# *** against torch.optim ***

@pytest.mark.parametrize("kw", [dict(lr=0.1), dict(lr=0.05, momentum=0.9), dict(lr=0.05, momentum=0.9, nesterov=True), dict(lr=0.1, weight_decay=0.1),
                                dict(lr=0.05, momentum=0.5, weight_decay=0.01),
                                dict(lr=0.02, momentum=0.8, weight_decay=0.05, nesterov=True)], ids=str)
def test_sgd_vs_torch(kw):
  check(lambda p: SGD(p, **kw), lambda p: torch.optim.SGD(p, **kw))

@pytest.mark.parametrize("kw", [dict(lr=0.01), dict(lr=0.1, b1=0.8, b2=0.99), dict(lr=0.003, eps=1e-6), dict(lr=0.05, b1=0.0)], ids=str)
def test_adam_vs_torch(kw):
  tkw = {"lr": kw["lr"], "betas": (kw.get("b1", 0.9), kw.get("b2", 0.999)), "eps": kw.get("eps", 1e-8)}
  check(lambda p: Adam(p, **kw), lambda p: torch.optim.Adam(p, **tkw))

@pytest.mark.parametrize("kw", [dict(lr=0.01), dict(lr=0.1, weight_decay=0.1), dict(lr=0.02, b1=0.85, b2=0.95, weight_decay=0.0),
                                dict(lr=0.05, weight_decay=1.0)], ids=str)
def test_adamw_vs_torch(kw):
  tkw = {"lr": kw["lr"], "betas": (kw.get("b1", 0.9), kw.get("b2", 0.999)), "weight_decay": kw.get("weight_decay", 0.01)}
  check(lambda p: AdamW(p, **kw), lambda p: torch.optim.AdamW(p, **tkw))

def test_adam_many_steps():
  check(lambda p: Adam(p, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01), steps=10)

def test_sgd_lr_change_vs_torch():
  # changing lr between steps, through the lr tensor
  ps_tg = [Tensor(W1.copy(), requires_grad=True), Tensor(B1.copy(), requires_grad=True), Tensor(W2.copy(), requires_grad=True)]
  ps_t = [torch.tensor(W1.copy(), requires_grad=True), torch.tensor(B1.copy(), requires_grad=True), torch.tensor(W2.copy(), requires_grad=True)]
  o_tg, o_t = SGD(ps_tg, lr=0.1, momentum=0.9), torch.optim.SGD(ps_t, lr=0.1, momentum=0.9)
  for lr in [0.1, 0.05, 0.2]:
    o_tg.lr.assign(Tensor(lr, dtype=o_tg.lr.dtype))
    for g in o_t.param_groups: g["lr"] = lr
    o_tg.zero_grad(); o_t.zero_grad()  # noqa: E702
    tg_loss(Tensor(X), *ps_tg).backward(); tg_loss(torch.tensor(X), *ps_t).backward()  # noqa: E702
    o_tg.step(); o_t.step()  # noqa: E702
  for a, b in zip(ps_tg, ps_t): np.testing.assert_allclose(a.numpy(), b.detach().numpy(), atol=1e-5, rtol=1e-5)

# *** against numpy references of tinygrad's formulas ***

def np_grads(w1, b1, w2):
  t = [torch.tensor(v, requires_grad=True) for v in (w1, b1, w2)]
  tg_loss(torch.tensor(X), *t).backward()
  return [v.grad.numpy().astype(np.float64) for v in t]

def test_sgd_classic_vs_numpy():
  lr, mom, wd, steps = 0.05, 0.9, 0.01, 3
  ps = [W1.astype(np.float64), B1.astype(np.float64), W2.astype(np.float64)]
  bufs = [np.zeros_like(p) for p in ps]
  for _ in range(steps):
    gs = np_grads(*[p.astype(np.float32) for p in ps])
    for i, (p, g) in enumerate(zip(ps, gs)):
      bufs[i] = mom * bufs[i] + lr * (g + wd * p)  # classic: the learning rate goes in before the momentum
      ps[i] = p - bufs[i]
  for a, b in zip(run_tg(lambda p: SGD(p, lr=lr, momentum=mom, weight_decay=wd, classic=True), steps), ps):
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)

@pytest.mark.parametrize("wd,adam", [(0.0, False), (0.01, False), (0.1, True)])
def test_lamb_vs_numpy(wd, adam):
  lr, b1, b2, eps, steps = 0.02, 0.9, 0.999, 1e-6, 3
  ps = [W1.astype(np.float64), B1.astype(np.float64), W2.astype(np.float64)]
  m, v = [np.zeros_like(p) for p in ps], [np.zeros_like(p) for p in ps]
  for t in range(1, steps + 1):
    gs = np_grads(*[p.astype(np.float32) for p in ps])
    for i, (p, g) in enumerate(zip(ps, gs)):
      m[i] = b1 * m[i] + (1 - b1) * g
      v[i] = b2 * v[i] + (1 - b2) * g * g
      up = (m[i] / (1 - b1 ** t)) / (np.sqrt(v[i] / (1 - b2 ** t)) + eps) + wd * p
      r1, r2 = np.sqrt((p * p).sum()), np.sqrt((up * up).sum())
      r = 1.0 if adam else ((r1 / r2 if r2 > 0 else 1.0) if r1 > 0 else 1.0)
      ps[i] = p - lr * r * up
  for a, b in zip(run_tg(lambda p: LAMB(p, lr=lr, b1=b1, b2=b2, eps=eps, weight_decay=wd, adam=adam), steps), ps):
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)

# *** API ***

def test_zero_grad_and_grads():
  p = Tensor([1.0, 2.0], requires_grad=True)
  opt = SGD([p], lr=0.5)
  (p * p).sum().backward()
  assert p.grad is not None
  opt.step()
  assert p.numpy().tolist() == [0.0, 0.0]
  opt.zero_grad()
  assert p.grad is None

def test_step_without_training_raises():
  Tensor.training = False
  p = Tensor([1.0], requires_grad=True)
  opt = SGD([p])
  (p * 2).sum().backward()
  with pytest.raises(RuntimeError): opt.step()

def test_step_without_grad_raises():
  p = Tensor([1.0], requires_grad=True)
  with pytest.raises(RuntimeError): Adam([p]).step()

def test_no_params_raises():
  with pytest.raises(ValueError): SGD([])
  with pytest.raises(ValueError): Adam([Tensor([1.0], requires_grad=False)])

def test_requires_grad_none_becomes_true_and_buffers():
  a, b = Tensor([1.0]), Tensor([2.0], requires_grad=False)
  opt = SGD([a, b, a])
  assert a.requires_grad is True and opt.params == [a] and opt.buffers == [b]

def test_lr_is_tensor():
  opt = Adam([Tensor([1.0], requires_grad=True)], lr=0.25)
  assert isinstance(opt.lr, Tensor) and opt.lr.dtype == dtypes.float32 and opt.lr.item() == 0.25

def test_schedule_step_is_lazy():
  p = Tensor([1.0, 2.0], requires_grad=True).realize()
  opt = SGD([p], lr=0.5)
  (p * p).sum().backward()
  out = opt.schedule_step()
  assert p in out and not p.is_realized()
  Tensor.realize(*out)
  assert p.numpy().tolist() == [0.0, 0.0]

def test_optimizer_state_is_independent():
  # the moments of same-shaped params (and b1_t/b2_t) are separate buffers
  a, b = Tensor([1.0, 1.0], requires_grad=True), Tensor([1.0, 1.0], requires_grad=True)
  opt = Adam([a, b], lr=0.1)
  (a * 3 + b).sum().backward()
  opt.step()
  assert opt.m[0].numpy().tolist() == pytest.approx([0.3, 0.3]) and opt.m[1].numpy().tolist() == pytest.approx([0.1, 0.1])
  assert opt.b1_t.item() == pytest.approx(0.9) and opt.b2_t.item() == pytest.approx(0.999)

def test_optimizer_group_vs_torch():
  def mk_tg(p): return OptimizerGroup(SGD(p[:2], lr=0.1, momentum=0.9), Adam(p[2:], lr=0.01))
  def mk_t(p): return _TorchGroup(torch.optim.SGD(p[:2], lr=0.1, momentum=0.9), torch.optim.Adam(p[2:], lr=0.01))
  check(mk_tg, mk_t, steps=3)
  g = mk_tg([Tensor([1.0], requires_grad=True), Tensor([1.0], requires_grad=True), Tensor([1.0], requires_grad=True)])
  assert isinstance(g[0], Optimizer) and len(g.params) == 3

class _TorchGroup:
  def __init__(self, *opts): self.opts = opts
  def zero_grad(self):
    for o in self.opts: o.zero_grad()
  def step(self):
    for o in self.opts: o.step()

def test_float16_param():
  p = Tensor([1.0, -2.0], dtype=dtypes.float16, requires_grad=True)
  opt = Adam([p], lr=0.1)
  (p.float() * p.float()).sum().backward()
  opt.step()
  assert p.dtype == dtypes.float16 and opt.m[0].dtype == dtypes.float32
  np.testing.assert_allclose(p.numpy().astype(np.float32), [0.9, -1.9], atol=1e-3)

def test_params_updated_from_each_other():
  # each param's gradient is the other param: the update must read the values from before the step
  a, b = Tensor([[1.0, 2.0]], requires_grad=True), Tensor([[3.0], [4.0]], requires_grad=True)
  (a @ b).sum().backward()
  SGD([a, b], lr=1.0).step()
  assert a.numpy().tolist() == [[-2.0, -2.0]] and b.numpy().tolist() == [[2.0], [2.0]]

# *** the core behaviour the optimizers rely on ***

def test_assign_to_unrealized_doesnt_alias():
  # Tensor.zeros(3) twice is one hash-consed graph; assigning one must not change the other
  a, b = Tensor.zeros(3), Tensor.zeros(3)
  a.assign(a + 1)
  c, d = Tensor.ones(2).contiguous(), Tensor.ones(2).contiguous()
  c += 1
  c += 1
  assert a.numpy().tolist() == [1, 1, 1] and b.numpy().tolist() == [0, 0, 0]
  assert c.numpy().tolist() == [3, 3] and d.numpy().tolist() == [1, 1]

def test_gradient_of_assigned_tensor():
  # an assigned (not yet realized) tensor is a leaf for autograd
  x = Tensor.zeros(3).contiguous()
  x.requires_grad = True
  x.assign(x + 2)
  (x * x).sum().backward()
  assert x.grad is not None and x.grad.numpy().tolist() == [4, 4, 4] and x.numpy().tolist() == [2, 2, 2]

def test_core_assign_write_after_read():
  # swap two buffers through assign: b's kernel must read a before a's kernel overwrites it
  a, b = Tensor([1.0, 2.0]).realize(), Tensor([3.0, 4.0]).realize()
  old_a = Tensor(a.uop)  # a's buffer as it is before the assign
  a.assign(b * 1.0)
  b.assign(old_a * 1.0)
  Tensor.realize(a, b)
  assert a.numpy().tolist() == [3.0, 4.0] and b.numpy().tolist() == [1.0, 2.0]

def test_train_nn_model_vs_torch():
  from tg_core import nn
  from tg_core.nn.state import get_parameters
  tl1, tl2 = torch.nn.Linear(4, 6), torch.nn.Linear(6, 2)
  l1, l2 = nn.Linear(4, 6), nn.Linear(6, 2)
  for g, t in [(l1, tl1), (l2, tl2)]: g.weight, g.bias = Tensor(t.weight.detach().numpy().copy()), Tensor(t.bias.detach().numpy().copy())
  opt, topt = AdamW(get_parameters([l1, l2]), lr=0.01), torch.optim.AdamW(list(tl1.parameters()) + list(tl2.parameters()), lr=0.01)
  y = RNG.standard_normal((5, 2)).astype(np.float32)
  for _ in range(3):
    opt.zero_grad(); topt.zero_grad()  # noqa: E702
    (l2(l1(Tensor(X)).relu()) - Tensor(y)).square().mean().backward()
    (tl2(tl1(torch.tensor(X)).relu()) - torch.tensor(y)).square().mean().backward()
    opt.step(); topt.step()  # noqa: E702
  for g, t in [(l1.weight, tl1.weight), (l1.bias, tl1.bias), (l2.weight, tl2.weight), (l2.bias, tl2.bias)]:
    np.testing.assert_allclose(g.numpy(), t.detach().numpy(), atol=1e-5, rtol=1e-5)

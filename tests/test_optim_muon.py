"""nn.optim.Muon: several steps against a float64 numpy implementation of the published algorithm (Keller Jordan's Muon, as
torch.optim.Muon writes it) and against torch.optim.Muon itself (which runs Newton-Schulz in bfloat16); Tensor.newton_schulz."""
from __future__ import annotations
import math

import numpy as np
import pytest

from helpers import torch
from tg_core.nn.optim import Muon
from tg_core.tensor import Tensor

NS = (3.4445, -4.775, 2.0315)

@pytest.fixture(autouse=True)
def _training():
  old = Tensor.training
  Tensor.training = True
  yield
  Tensor.training = old

def np_newton_schulz(g: np.ndarray, steps: int, coef: tuple, eps: float) -> np.ndarray:
  x = g.T if g.shape[0] > g.shape[1] else g
  x = x / max(np.linalg.norm(x), eps)
  a, b, c = coef
  for _ in range(steps):
    gram = x @ x.T
    x = a * x + (b * gram + c * gram @ gram) @ x
  return x.T if g.shape[0] > g.shape[1] else x

def np_muon(params: list[np.ndarray], grad_fn, steps: int, lr: float, momentum: float, wd: float, nesterov: bool, ns_steps: int,
            adjust: bool) -> list[np.ndarray]:
  """The published algorithm in float64: EMA momentum, Nesterov lerp, NS orthogonalization, decoupled weight decay."""
  ps = [p.astype(np.float64) for p in params]
  bufs = [np.zeros_like(p) for p in ps]
  for _ in range(steps):
    grads = grad_fn(ps)
    for i, (p, g) in enumerate(zip(ps, grads)):
      bufs[i] = bufs[i] + (1 - momentum) * (g - bufs[i])
      u = g + momentum * (bufs[i] - g) if nesterov else bufs[i]
      u = np_newton_schulz(u.reshape(u.shape[0], -1), ns_steps, NS, 1e-7).reshape(u.shape)
      ratio = math.sqrt(max(1.0, p.shape[0] / int(np.prod(p.shape[1:])))) if adjust else 1.0
      ps[i] = p * (1 - lr * wd) - lr * ratio * u
  return ps

RNG = np.random.default_rng(0)
W1, W2 = RNG.standard_normal((4, 6)).astype(np.float32), RNG.standard_normal((6, 3)).astype(np.float32)
X = RNG.standard_normal((5, 4)).astype(np.float32)

def np_grads(ps: list[np.ndarray]) -> list[np.ndarray]:
  """Gradients of mean(((X @ w1).relu() @ w2)**2) for w1, w2."""
  x = X.astype(np.float64)
  h = x @ ps[0]
  r = np.maximum(h, 0)
  y = r @ ps[1]
  dy = 2 * y / y.size
  dr = dy @ ps[1].T
  return [x.T @ (dr * (h > 0)), r.T @ dy]

def run_tg(steps: int, **kw: object) -> list[np.ndarray]:
  ps = [Tensor(W1.copy(), requires_grad=True), Tensor(W2.copy(), requires_grad=True)]
  opt = Muon(ps, **kw)  # type: ignore[arg-type]
  for _ in range(steps):
    opt.zero_grad()
    ((Tensor(X) @ ps[0]).relu() @ ps[1]).square().mean().backward()
    opt.step()
  return [p.numpy() for p in ps]

@pytest.mark.parametrize("nesterov,momentum,wd", [(True, 0.95, 0.1), (False, 0.9, 0.0), (True, 0.0, 0.01)])
def test_muon_vs_published_algorithm(nesterov: bool, momentum: float, wd: float) -> None:
  lr, steps = 0.02, 3
  ref = np_muon([W1, W2], np_grads, steps, lr, momentum, wd, nesterov, 5, adjust=True)
  got = run_tg(steps, lr=lr, momentum=momentum, weight_decay=wd, nesterov=nesterov, adjust_lr_fn="original")
  for g, r in zip(got, ref): np.testing.assert_allclose(g, r, atol=1e-5, rtol=1e-5)

def test_muon_default_lr_ratio_is_tinygrads() -> None:
  # tinygrad's Muon doesn't scale lr by the shape: the same as adjust_lr_fn="original" only where rows <= cols
  lr, steps = 0.02, 2
  ref = np_muon([W1, W2], np_grads, steps, lr, 0.95, 0.1, True, 5, adjust=False)
  got = run_tg(steps, lr=lr)
  for g, r in zip(got, ref): np.testing.assert_allclose(g, r, atol=1e-5, rtol=1e-5)

def test_muon_vs_torch() -> None:
  # torch.optim.Muon runs Newton-Schulz in bfloat16 (8-bit mantissa): 5 iterations of 3 rounded matmuls leave its update within ~3%
  # of the exact one, so the params agree to lr * ratio * 3e-2 per step (ratio: the lr scale, up to sqrt(2) here); the float64
  # reference above checks tg to 1e-5
  lr, steps = 0.02, 3
  ps = [torch.tensor(W1.copy(), requires_grad=True), torch.tensor(W2.copy(), requires_grad=True)]
  opt = torch.optim.Muon(ps, lr=lr, weight_decay=0.1, momentum=0.95, nesterov=True)
  for _ in range(steps):
    opt.zero_grad()
    ((torch.tensor(X) @ ps[0]).relu() @ ps[1]).square().mean().backward()
    opt.step()
  got = run_tg(steps, lr=lr, weight_decay=0.1, momentum=0.95, nesterov=True, adjust_lr_fn="original")
  tol = steps * lr * math.sqrt(2) * 3e-2
  for g, t in zip(got, ps): np.testing.assert_allclose(g, t.detach().numpy(), atol=tol, rtol=0)
  ref = np_muon([W1, W2], np_grads, steps, lr, 0.95, 0.1, True, 5, adjust=True)
  for r, t in zip(ref, ps): np.testing.assert_allclose(r, t.detach().numpy(), atol=tol, rtol=0)

def test_muon_non_2d_params() -> None:
  # like tinygrad, a param of any rank is orthogonalized as (shape[0], -1); torch.optim.Muon refuses them
  b = Tensor(np.array([0.5, -1.0, 2.0], np.float32), requires_grad=True)
  k = Tensor(RNG.standard_normal((2, 3, 2)).astype(np.float32), requires_grad=True)
  opt = Muon([b, k], lr=0.1, momentum=0.0, weight_decay=0.0)
  opt.zero_grad()
  ((b * 2).sum() + (k * k).sum()).backward()
  opt.step()
  gb = np.full(3, 2.0)
  np.testing.assert_allclose(b.numpy(), np.array([0.5, -1.0, 2.0]) - 0.1 * np_newton_schulz(gb.reshape(3, 1), 5, NS, 1e-7).reshape(3), atol=1e-5)
  with pytest.raises(ValueError): torch.optim.Muon([torch.zeros(3, requires_grad=True)])

def test_muon_errors() -> None:
  p = [Tensor.zeros(2, 2, requires_grad=True)]
  with pytest.raises(ValueError, match="momentum"): Muon(p, momentum=-1)
  with pytest.raises(ValueError, match="weight_decay"): Muon(p, weight_decay=-0.1)
  with pytest.raises(ValueError, match="Adjust learning rate"): Muon(p, adjust_lr_fn="nope")
  with pytest.raises(ValueError, match="Adjust learning rate"): torch.optim.Muon([torch.zeros(2, 2, requires_grad=True)], adjust_lr_fn="nope")

@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (2, 4, 4), (1, 6)])
def test_newton_schulz(shape: tuple) -> None:
  g = RNG.standard_normal(shape).astype(np.float32)
  got = Tensor(g).newton_schulz(5, NS).numpy()
  # tinygrad divides by (norm + eps) where torch clamps the norm at eps: the same for a norm far above eps
  ref = np.stack([np_newton_schulz(m.astype(np.float64), 5, NS, 1e-7) for m in g.reshape(-1, *shape[-2:])]).reshape(shape)
  np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-5)
  with pytest.raises(ValueError): Tensor(g.reshape(-1)).newton_schulz(5, NS)

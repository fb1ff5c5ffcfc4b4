"""Optimizers with tinygrad's formulas: SGD (= LARS without the trust ratio), Adam/AdamW (= LAMB without the trust ratio), LAMB.
An optimizer updates its params in place (assign); `step()` realizes the update, `schedule_step()` only builds it."""
from __future__ import annotations
import math

from tg_core.dtype import dtypes, least_upper_dtype
from tg_core.helpers import dedup, prod
from tg_core.tensor import Tensor

__all__ = ["Optimizer", "OptimizerGroup", "SGD", "LARS", "Muon", "Adam", "AdamW", "LAMB"]

class Optimizer:
  """Base class: holds the trainable `params` (requires_grad), the other tensors to realize with them (`buffers`) and `lr`
  (a 0-d Tensor of at least float32, so it can be changed in place with `opt.lr.assign(...)`)."""
  def __init__(self, params: list[Tensor], lr: float, fused: bool = False):
    # a tensor put into an optimizer that hasn't said whether it wants gradients does
    for x in params:
      if x.requires_grad is None: x.requires_grad = True
    self.params: list[Tensor] = dedup([x for x in params if x.requires_grad])
    if len(self.params) == 0: raise ValueError("optimizer must have at least one param")
    self.device = self.params[0].device
    self.buffers: list[Tensor] = dedup([x for x in params if not x.requires_grad])  # realized along with the params
    self.lr = Tensor([lr], requires_grad=False, device=self.device, dtype=least_upper_dtype(dtypes.default_float, dtypes.float32)).reshape(())
    self.fused = fused  # accepted for tinygrad compatibility; every param is updated separately

  def zero_grad(self) -> None:
    """Drop the gradients of all params."""
    for param in self.params: param.grad = None

  def step(self) -> None:
    """Do one optimization step: build it and realize the params and optimizer state."""
    Tensor.realize(*self.schedule_step())

  def schedule_step(self) -> list[Tensor]:
    """Assign the updated values to the params and state; returns the tensors to realize (the step isn't run yet)."""
    if not Tensor.training:
      raise RuntimeError(f"Tensor.training={Tensor.training}, Tensor.training must be enabled to use the optimizer. "
                         "Consider setting Tensor.training=True before calling Optimizer.step().")
    for i, p in enumerate(self.params):
      if p.grad is None: raise RuntimeError(f"param {i} (shape {p.shape}) has no gradient; call backward() first")
    grads = [p.grad for p in self.params]
    new_params, state = self._step(self.params, grads)  # type: ignore[arg-type]
    # the scheduler doesn't order a kernel that reads a buffer before the kernel that assigns that buffer (write after read), and
    # a param's update reads the other params through its gradient: so compute every new value (and the optimizer state) into a
    # buffer of its own first, then assign the params from those
    new_vals = [n.detach().cast(p.dtype).contiguous() for p, n in zip(self.params, new_params)]
    Tensor.realize(*new_vals, *state)
    for p, n in zip(self.params, new_vals): p.assign(n)
    return self.params + self.buffers + state

  def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """(new param values, optimizer state tensors to realize); subclasses implement it."""
    raise NotImplementedError("an Optimizer subclass implements _step")

  def _new_optim_param(self) -> list[Tensor]:
    """Zero state tensors shaped like the params (float32, or float64 for float64 params)."""
    return [Tensor.zeros(*t.shape, dtype=least_upper_dtype(t.dtype, dtypes.float32), device=t.device, requires_grad=False).contiguous()
            for t in self.params]

class OptimizerGroup(Optimizer):
  """Several optimizers stepped together: `OptimizerGroup(SGD(a), Adam(b)).step()`."""
  def __init__(self, *optimizers: Optimizer):  # pylint: disable=super-init-not-called
    self.optimizers = optimizers
    self.params = [p for o in optimizers for p in o.params]
    self.buffers = [b for o in optimizers for b in o.buffers]
  def __getitem__(self, i: int) -> Optimizer: return self.optimizers[i]
  def zero_grad(self) -> None:
    for o in self.optimizers: o.zero_grad()
  def schedule_step(self) -> list[Tensor]: return [x for o in self.optimizers for x in o.schedule_step()]

def SGD(params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False, classic: bool = False,
        fused: bool = False) -> LARS:
  """Stochastic gradient descent, torch's formula by default: buf = momentum*buf + (g + wd*p); p -= lr*buf (or lr*(g + momentum*buf) with
  nesterov). `classic=True` applies the learning rate before the momentum (buf = momentum*buf + lr*g)."""
  return LARS(params, lr, momentum, weight_decay, nesterov, classic=classic, tcoef=0.0, fused=fused)

class LARS(Optimizer):
  """Layer-wise adaptive rate scaling: SGD with momentum whose step is scaled by the trust ratio tcoef*|p|/(|g| + wd*|p|)."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.9, weight_decay: float = 1e-4, nesterov: bool = False,
               classic: bool = True, tcoef: float = 0.001, fused: bool = False):
    super().__init__(params, lr, fused)
    self.momentum, self.wd, self.nesterov, self.classic, self.tcoef = momentum, weight_decay, nesterov, classic, tcoef
    self.b = self._new_optim_param() if self.momentum else []

  def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    ret = []
    for i, (t, g) in enumerate(zip(params, grads)):
      r: Tensor | float
      if self.tcoef != 0:
        r1 = t.detach().square().sum().sqrt()
        r2 = g.square().sum().sqrt()
        r = (r1 > 0).where((r2 > 0).where(self.tcoef * r1 / (r2 + self.wd * r1), 1.0), 1.0)
      else: r = 1.0
      if self.wd > 0: g = g + self.wd * t.detach()
      # classic momentum applies the learning rate before the momentum
      if self.classic: g = g * r * self.lr
      if self.momentum:
        self.b[i].assign(self.momentum * self.b[i] + g)  # b is zero on the first step, so no special case is needed
        g = (g + self.momentum * self.b[i]) if self.nesterov else self.b[i]
      if not self.classic: g = g * r * self.lr
      ret.append(t.detach() - g)
    return ret, self.b

class Muon(Optimizer):
  """SGD with momentum whose update is orthogonalized by Newton-Schulz iterations (https://kellerjordan.github.io/posts/muon/), with
  decoupled weight decay, tinygrad's formula: b = momentum*b + g; u = g + momentum*b (nesterov) or b; p = p*(1 - lr*wd) - lr*ratio*NS(u),
  NS over u reshaped to (shape[0], -1). torch.optim.Muon keeps b as an EMA (its u is (1-momentum) times this one, which NS's
  normalization cancels), runs NS in bfloat16 and only takes 2-D params. `adjust_lr_fn` scales lr by torch's ratio: None (tinygrad,
  1), "original" (sqrt(max(1, rows/cols)), torch's default) or "match_rms_adamw" (0.2*sqrt(max(rows, cols)))."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.95, weight_decay: float = 0.1, ns_steps: int = 5,
               ns_coefficients: tuple[float, ...] = (3.4445, -4.775, 2.0315), nesterov: bool = True, fused: bool = False, eps: float = 1e-7,
               adjust_lr_fn: str | None = None):
    if momentum < 0: raise ValueError(f"Invalid momentum value: {momentum}, it must be >= 0")
    if weight_decay < 0: raise ValueError(f"Invalid weight_decay value: {weight_decay}, it must be >= 0")
    if adjust_lr_fn not in (None, "original", "match_rms_adamw"):
      raise ValueError(f"Adjust learning rate function {adjust_lr_fn!r} is not supported: use None, 'original' or 'match_rms_adamw'")
    super().__init__(params, lr, fused)
    self.momentum, self.wd, self.ns_steps, self.ns_coefficients, self.nesterov = momentum, weight_decay, ns_steps, tuple(ns_coefficients), nesterov
    self.eps, self.adjust_lr_fn = eps, adjust_lr_fn
    self.b = self._new_optim_param() if self.momentum else []

  def _lr_ratio(self, shape: tuple) -> float:
    rows, cols = (int(shape[0]), int(prod(shape[1:]))) if len(shape) else (1, 1)
    if self.adjust_lr_fn == "original": return math.sqrt(max(1.0, rows / cols))
    if self.adjust_lr_fn == "match_rms_adamw": return 0.2 * math.sqrt(max(rows, cols))
    return 1.0

  def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    ret = []
    for i, (t, g) in enumerate(zip(params, grads)):
      if self.momentum:
        self.b[i].assign(self.momentum * self.b[i] + g)  # b is zero on the first step
        g = (g + self.momentum * self.b[i]) if self.nesterov else self.b[i]
      g = g.reshape(g.shape[0] if g.ndim else 1, -1).newton_schulz(self.ns_steps, self.ns_coefficients, self.eps).reshape(g.shape)
      ret.append(t.detach() * (1 - self.lr * self.wd) - g * (self.lr * self._lr_ratio(t.shape)))
    return ret, self.b

def AdamW(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01,
          fused: bool = False) -> LAMB:
  """Adam with decoupled weight decay: p -= lr*(m_hat/(sqrt(v_hat)+eps) + wd*p)."""
  return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True, fused=fused)

def Adam(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, fused: bool = False) -> LAMB:
  """Adam: p -= lr*m_hat/(sqrt(v_hat)+eps) with bias-corrected moments."""
  return LAMB(params, lr, b1, b2, eps, 0.0, adam=True, fused=fused)

class LAMB(Optimizer):
  """LAMB (<https://arxiv.org/abs/1904.00962>): the Adam update plus weight decay, scaled by the trust ratio |p|/|update|.
  With `adam=True` the trust ratio is 1 (Adam/AdamW)."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6, weight_decay: float = 0.0,
               adam: bool = False, fused: bool = False):
    super().__init__(params, lr, fused)
    self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
    self.b1_t, self.b2_t = (Tensor.ones((), dtype=dtypes.float32, device=self.device, requires_grad=False).contiguous() for _ in [b1, b2])
    self.m = self._new_optim_param()
    self.v = self._new_optim_param()

  def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    ret = []
    self.b1_t *= self.b1
    self.b2_t *= self.b2
    for i, (t, g) in enumerate(zip(params, grads)):
      if g.device != self.m[i].device: g = g.contiguous().to(self.m[i].device)
      self.m[i].assign(self.b1 * self.m[i] + (1.0 - self.b1) * g)
      self.v[i].assign(self.b2 * self.v[i] + (1.0 - self.b2) * (g * g))
      m_hat = self.m[i] / (1.0 - self.b1_t)
      v_hat = self.v[i] / (1.0 - self.b2_t)
      up = (m_hat / (v_hat.sqrt() + self.eps)).cast(t.dtype) + self.wd * t.detach()
      r: Tensor | float
      if not self.adam:
        r1 = t.detach().square().sum().sqrt()
        r2 = up.square().sum().sqrt()
        r = (r1 > 0).where((r2 > 0).where(r1 / r2, 1.0), 1.0)
      else: r = 1.0
      ret.append(t.detach() - self.lr * r * up)
    return ret, [self.b1_t, self.b2_t] + self.m + self.v

"""tg_core.nn layers against torch.nn: same weights (copied from torch), same input; forward values and the gradients of the
input and every parameter. Also initialization bounds, running-stat updates, errors and the layers' tinygrad signatures."""
from __future__ import annotations
import math
from typing import Any

import numpy as np
import pytest

from helpers import compare, torch
from tg_core import nn
from tg_core.dtype import dtypes
from tg_core.nn.state import get_state_dict
from tg_core.tensor import Tensor

def needs(*methods: str) -> pytest.MarkDecorator:
  missing = [m for m in methods if not hasattr(Tensor, m)]
  return pytest.mark.xfail(bool(missing), reason=f"functional op(s) {missing} not written yet", strict=False)

@pytest.fixture(autouse=True)
def _reset_training():
  Tensor.manual_seed(0)
  old = Tensor.training
  yield
  Tensor.training = old

def copy_params(tg_mod: Any, torch_mod: Any, names: list[str]) -> None:
  for n in names:
    tp = getattr(torch_mod, n)
    setattr(tg_mod, n, None if tp is None else Tensor(tp.detach().numpy().copy(), requires_grad=isinstance(tp, torch.nn.Parameter)))

def check_module(tg_mod: Any, torch_mod: Any, shape: tuple[int, ...], names: list[str], atol: float = 1e-5, rtol: float = 1e-4,
                 x_np: np.ndarray | None = None, grad_atol: float = 1e-5) -> None:
  """Copy `names` from torch_mod to tg_mod, run both on the same input, compare output and grads of input and params."""
  copy_params(tg_mod, torch_mod, names)
  if x_np is None: x_np = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
  is_float = np.issubdtype(x_np.dtype, np.floating)
  tx = torch.tensor(x_np, requires_grad=is_float)
  gx = Tensor(x_np, requires_grad=is_float)
  torch_mod.zero_grad()
  out_t, out_g = torch_mod(tx), tg_mod(gx)
  compare("forward", out_g, out_t, atol, rtol)
  (out_t.square().mean()).backward()
  targets = ([("input", gx, tx)] if is_float else []) + \
    [(n, getattr(tg_mod, n), getattr(torch_mod, n)) for n in names if isinstance(getattr(torch_mod, n), torch.nn.Parameter)]
  grads = out_g.square().mean().gradient(*[t[1] for t in targets], materialize_grads=True)
  for (n, _, tt), g in zip(targets, grads): compare(f"grad {n}", g, tt.grad, grad_atol, rtol, check_dtype=False)

# *** Linear ***

@pytest.mark.parametrize("shape,in_f,out_f,bias", [((4, 3), 3, 5, True), ((2, 7, 3), 3, 1, False), ((3,), 3, 4, True), ((0, 3), 3, 2, True),
                                                   ((5, 13), 13, 11, True)])
def test_linear(shape, in_f, out_f, bias):
  check_module(nn.Linear(in_f, out_f, bias=bias), torch.nn.Linear(in_f, out_f, bias=bias), shape, ["weight", "bias"])

def test_linear_init():
  lin = nn.Linear(50, 30)
  assert lin.weight.shape == (30, 50) and lin.bias is not None and lin.bias.shape == (30,)
  w, b = lin.weight.numpy(), lin.bias.numpy()
  bound = 1 / math.sqrt(50)
  assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound and np.abs(b).max() <= bound
  assert abs(w.std() - bound / math.sqrt(3)) < 0.1 * bound
  assert nn.Linear(3, 4, bias=False).bias is None

# *** convolutions ***

CONV2D_CASES = [
  dict(cin=3, cout=4, k=3), dict(cin=2, cout=3, k=(2, 3), stride=2), dict(cin=2, cout=2, k=3, padding=1), dict(cin=4, cout=6, k=3, groups=2),
  dict(cin=2, cout=3, k=3, dilation=2), dict(cin=2, cout=3, k=(3, 2), padding=(1, 0), stride=(1, 2)), dict(cin=3, cout=3, k=1, bias=False),
  dict(cin=2, cout=2, k=3, padding="same"), dict(cin=2, cout=3, k=(3, 4), padding="same"),
  dict(cin=2, cout=2, k=(3, 5), padding="same", dilation=(1, 2)),
  dict(cin=2, cout=2, k=(2, 3), padding="same", dilation=(3, 1)), dict(cin=4, cout=4, k=3, groups=4, padding=1),
]

@needs("conv2d")
@pytest.mark.parametrize("case", CONV2D_CASES, ids=str)
def test_conv2d(case):
  c = dict(case)
  cin, cout, k = c.pop("cin"), c.pop("cout"), c.pop("k")
  check_module(nn.Conv2d(cin, cout, k, **c), torch.nn.Conv2d(cin, cout, k, **c), (2, cin, 6, 7), ["weight", "bias"], atol=1e-5)

@needs("conv2d")
@pytest.mark.parametrize("case", [dict(cin=2, cout=3, k=3), dict(cin=2, cout=4, k=2, stride=2, padding=1), dict(cin=4, cout=2, k=3, groups=2),
                                  dict(cin=2, cout=2, k=4, padding="same", dilation=2),
                                  dict(cin=1, cout=1, k=5, padding="same", bias=False)], ids=str)
def test_conv1d(case):
  c = dict(case)
  cin, cout, k = c.pop("cin"), c.pop("cout"), c.pop("k")
  check_module(nn.Conv1d(cin, cout, k, **c), torch.nn.Conv1d(cin, cout, k, **c), (2, cin, 11), ["weight", "bias"])

@needs("conv2d")
def test_conv3d_via_conv2d():
  tg, tt = nn.Conv2d(2, 3, (2, 3, 2), padding="same"), torch.nn.Conv3d(2, 3, (2, 3, 2), padding="same")
  check_module(tg, tt, (1, 2, 4, 5, 3), ["weight", "bias"])

@needs("conv_transpose2d")
@pytest.mark.parametrize("case", [dict(cin=3, cout=2, k=3), dict(cin=2, cout=3, k=3, stride=2),
                                  dict(cin=2, cout=2, k=3, stride=2, padding=1, output_padding=1),
                                  dict(cin=4, cout=2, k=(2, 3), groups=2), dict(cin=2, cout=2, k=3, dilation=2, bias=False)], ids=str)
def test_conv_transpose2d(case):
  c = dict(case)
  cin, cout, k = c.pop("cin"), c.pop("cout"), c.pop("k")
  tg = nn.ConvTranspose2d(cin, cout, k, **c)
  assert tg.weight.shape == (cin, cout // c.get("groups", 1), *((k, k) if isinstance(k, int) else k))
  check_module(tg, torch.nn.ConvTranspose2d(cin, cout, k, **c), (1, cin, 3, 4), ["weight", "bias"])

@needs("conv_transpose2d")
def test_conv_transpose1d():
  check_module(nn.ConvTranspose1d(2, 3, 3, stride=2), torch.nn.ConvTranspose1d(2, 3, 3, stride=2), (2, 2, 7), ["weight", "bias"])

def test_conv_init_and_shapes():
  c = nn.Conv2d(4, 8, 3, groups=2)
  assert c.weight.shape == (8, 2, 3, 3) and c.bias is not None and c.bias.shape == (8,)
  bound = 1 / math.sqrt(4 * 9)  # tinygrad: 1/sqrt(in_channels * prod(kernel_size))
  w = c.weight.numpy()
  assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
  assert nn.Conv1d(2, 3, 5).weight.shape == (3, 2, 5)
  assert nn.Conv2d(2, 3, (2, 4), bias=False).bias is None

def test_conv_same_padding_values():
  # flat padding lists the last axis first, pairing each axis with its own dilation
  assert nn.Conv2d(1, 1, (3, 5), padding="same", dilation=(1, 2)).padding == (4, 4, 1, 1)
  assert nn.Conv2d(1, 1, (2, 4), padding="same", dilation=(3, 1)).padding == (1, 2, 1, 2)
  assert nn.Conv1d(1, 1, 4, padding="same").padding == (1, 2)

@pytest.mark.parametrize("kwargs", [dict(padding="same", stride=2), dict(padding="full")], ids=str)
def test_conv_bad_padding(kwargs):
  with pytest.raises(ValueError): torch.nn.Conv2d(2, 2, 3, **kwargs)
  with pytest.raises(ValueError): nn.Conv2d(2, 2, 3, **kwargs)

# *** normalization ***

@needs("batchnorm")
@pytest.mark.parametrize("shape", [(4, 3), (3, 3, 5), (2, 3, 4, 5), (2, 3, 2, 3, 2)])
def test_batchnorm_train(shape):
  Tensor.training = True
  tt = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d, 5: torch.nn.BatchNorm3d}[len(shape)](3).train()
  with torch.no_grad(): tt.weight.uniform_(0.5, 1.5); tt.bias.uniform_(-1, 1)  # noqa: E702
  tg = nn.BatchNorm(3)
  check_module(tg, tt, shape, ["weight", "bias"], atol=1e-5)
  compare("running_mean", tg.running_mean, tt.running_mean, 1e-6, 1e-5)
  compare("running_var", tg.running_var, tt.running_var, 1e-6, 1e-5)
  assert tg.num_batches_tracked.item() == tt.num_batches_tracked.item() == 1

@needs("batchnorm")
def test_batchnorm_running_stats_several_steps_then_eval():
  Tensor.training = True
  tt, tg = torch.nn.BatchNorm2d(4, momentum=0.3, eps=1e-3), nn.BatchNorm2d(4, momentum=0.3, eps=1e-3)
  rng = np.random.default_rng(1)
  for i in range(3):
    x = (rng.standard_normal((3, 4, 2, 3)) * (i + 1) + i).astype(np.float32)
    out_t, out_g = tt(torch.tensor(x)), tg(Tensor(x))
    compare(f"step {i}", out_g, out_t, 1e-5, 1e-4)
  compare("running_mean", tg.running_mean, tt.running_mean, 1e-5, 1e-5)
  compare("running_var", tg.running_var, tt.running_var, 1e-5, 1e-5)
  assert tg.num_batches_tracked.item() == 3
  Tensor.training = False
  tt.eval()
  x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
  compare("eval", tg(Tensor(x)), tt(torch.tensor(x)), 1e-5, 1e-4)
  compare("running_mean unchanged", tg.running_mean, tt.running_mean, 1e-5, 1e-5)

@needs("batchnorm")
@pytest.mark.parametrize("affine,track", [(False, True), (True, False), (False, False)])
def test_batchnorm_options(affine, track):
  Tensor.training = True
  tt = torch.nn.BatchNorm2d(3, affine=affine, track_running_stats=track)
  tg = nn.BatchNorm2d(3, affine=affine, track_running_stats=track)
  assert (tg.weight is None) == (not affine) and hasattr(tg, "running_mean") == track
  check_module(tg, tt, (2, 3, 4, 3), ["weight", "bias"] if affine else [])
  Tensor.training = False
  tt.eval()
  check_module(tg, tt, (2, 3, 4, 3), ["weight", "bias"] if affine else [])

@needs("batchnorm")
def test_batchnorm_eval_uses_running_stats():
  Tensor.training = False
  tt = torch.nn.BatchNorm2d(2).eval()
  with torch.no_grad():
    tt.running_mean.copy_(torch.tensor([0.5, -1.0])); tt.running_var.copy_(torch.tensor([2.0, 0.25]))  # noqa: E702
  tg = nn.BatchNorm2d(2)
  tg.running_mean, tg.running_var = Tensor([0.5, -1.0]), Tensor([2.0, 0.25])
  check_module(tg, tt, (2, 2, 3, 3), ["weight", "bias"])

def test_batchnorm_bad_input():
  Tensor.training = True
  with pytest.raises(ValueError): torch.nn.BatchNorm1d(3).train()(torch.zeros(1, 3))
  with pytest.raises(ValueError): nn.BatchNorm(3)(Tensor.zeros(1, 3))
  with pytest.raises(ValueError): nn.BatchNorm(3)(Tensor.zeros(3))

def test_batchnorm_state_dict_names():
  assert set(get_state_dict(nn.BatchNorm2d(3)).keys()) == {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}
  bn = nn.BatchNorm(3)
  assert bn.num_batches_tracked.dtype == dtypes.int64 and bn.running_var.numpy().tolist() == [1, 1, 1]
  assert nn.BatchNorm1d is nn.BatchNorm2d is nn.BatchNorm3d is nn.BatchNorm

@needs("layernorm")
@pytest.mark.parametrize("shape,norm,affine", [((2, 5), 5, True), ((3, 4, 6), (4, 6), True), ((2, 3, 7), 7, False), ((4, 1), 1, True),
                                               ((2, 2, 3, 3), (2, 3, 3), True)])
def test_layernorm(shape, norm, affine):
  tt = torch.nn.LayerNorm(norm, elementwise_affine=affine, eps=1e-5)
  if affine:
    with torch.no_grad(): tt.weight.uniform_(0.5, 1.5); tt.bias.uniform_(-1, 1)  # noqa: E702
  check_module(nn.LayerNorm(norm, elementwise_affine=affine), tt, shape, ["weight", "bias"] if affine else [])

@needs("layernorm")
def test_layernorm_bad_shape():
  with pytest.raises(RuntimeError): torch.nn.LayerNorm(4)(torch.zeros(2, 5))
  with pytest.raises(RuntimeError): nn.LayerNorm(4)(Tensor.zeros(2, 5))

@needs("layernorm")
def test_layernorm2d():
  tt = torch.nn.LayerNorm(3)
  with torch.no_grad(): tt.weight.uniform_(0.5, 1.5); tt.bias.uniform_(-1, 1)  # noqa: E702
  class TorchLN2d(torch.nn.Module):
    def __init__(self): super().__init__(); self.ln = tt  # noqa: E702
    def forward(self, x): return self.ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
  ref = TorchLN2d()
  ref.weight, ref.bias = tt.weight, tt.bias
  check_module(nn.LayerNorm2d(3), ref, (2, 3, 4, 5), ["weight", "bias"])

@pytest.mark.parametrize("shape,affine,eps", [((2, 6), True, 1e-6), ((3, 2, 5), False, 1e-5), ((4, 1), True, 1e-6)])
def test_rmsnorm(shape, affine, eps):
  tt = torch.nn.RMSNorm(shape[-1], eps=eps, elementwise_affine=affine)
  if affine:
    with torch.no_grad(): tt.weight.uniform_(0.5, 1.5)
  check_module(nn.RMSNorm(shape[-1], eps=eps, elementwise_affine=affine), tt, shape, ["weight"] if affine else [])

def test_rmsnorm_dtype():
  # normalized in float32 and cast back; the float32 weight then promotes (like tinygrad and torch's type promotion)
  x = Tensor([[1.0, 2.0, 3.0]], dtype=dtypes.float16)
  assert nn.RMSNorm(3, elementwise_affine=False)(x).dtype == dtypes.float16
  out = nn.RMSNorm(3)(x)
  assert out.dtype == dtypes.float32
  ref = torch.nn.RMSNorm(3, eps=1e-6)(torch.tensor([[1.0, 2.0, 3.0]])).detach().numpy()
  np.testing.assert_allclose(out.numpy(), ref, atol=2e-3, rtol=2e-3)

@needs("layernorm")
@pytest.mark.parametrize("groups,channels,shape,affine", [(2, 4, (2, 4, 3, 3), True), (1, 3, (2, 3, 5), True), (3, 3, (1, 3, 2, 2), False),
                                                          (2, 6, (3, 6, 4), True)])
def test_groupnorm(groups, channels, shape, affine):
  tt = torch.nn.GroupNorm(groups, channels, affine=affine)
  if affine:
    with torch.no_grad(): tt.weight.uniform_(0.5, 1.5); tt.bias.uniform_(-1, 1)  # noqa: E702
  check_module(nn.GroupNorm(groups, channels, affine=affine), tt, shape, ["weight", "bias"] if affine else [])

def test_groupnorm_bad_groups():
  with pytest.raises(ValueError): torch.nn.GroupNorm(3, 4)
  with pytest.raises(ValueError): nn.GroupNorm(3, 4)

@needs("layernorm")
@pytest.mark.parametrize("shape,affine", [((2, 3, 4, 5), True), ((2, 4, 6), True), ((1, 2, 3, 3), False)])
def test_instancenorm(shape, affine):
  tt = (torch.nn.InstanceNorm2d if len(shape) == 4 else torch.nn.InstanceNorm1d)(shape[1], affine=affine)
  if affine:
    with torch.no_grad(): tt.weight.uniform_(0.5, 1.5); tt.bias.uniform_(-1, 1)  # noqa: E702
  check_module(nn.InstanceNorm(shape[1], affine=affine), tt, shape, ["weight", "bias"] if affine else [])

# *** Embedding / LSTMCell ***

@pytest.mark.parametrize("idx_shape,vocab,dim", [((5,), 10, 4), ((2, 3), 7, 3), ((), 5, 2), ((4, 1), 3, 6)])
def test_embedding(idx_shape, vocab, dim):
  idx = np.random.default_rng(2).integers(0, vocab, size=idx_shape).astype(np.int32)
  check_module(nn.Embedding(vocab, dim), torch.nn.Embedding(vocab, dim), idx_shape, ["weight"], x_np=idx)

def test_embedding_repeated_index_grad():
  idx = np.array([1, 1, 3, 1], dtype=np.int64)
  check_module(nn.Embedding(4, 3), torch.nn.Embedding(4, 3), idx.shape, ["weight"], x_np=idx)

def test_embedding_init_and_errors():
  e = nn.Embedding(20, 30)
  bound = math.sqrt(6 / (20 + 30))  # glorot uniform, like tinygrad
  assert e.weight.shape == (20, 30) and np.abs(e.weight.numpy()).max() <= bound
  with pytest.raises(TypeError): e(Tensor([1.0, 2.0]))

@pytest.mark.parametrize("bias,with_state", [(True, True), (True, False), (False, True)])
def test_lstmcell(bias, with_state):
  tt = torch.nn.LSTMCell(3, 4, bias=bias)
  if bias:
    with torch.no_grad(): tt.bias_ih.uniform_(-0.5, 0.5); tt.bias_hh.uniform_(-0.5, 0.5)  # noqa: E702
  tg = nn.LSTMCell(3, 4, bias=bias)
  names = ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
  copy_params(tg, tt, names)
  rng = np.random.default_rng(3)
  x, h, c = (rng.standard_normal(s).astype(np.float32) for s in [(2, 3), (2, 4), (2, 4)])
  hc_t = (torch.tensor(h), torch.tensor(c)) if with_state else None
  hc_g = (Tensor(h), Tensor(c)) if with_state else None
  h1_t, c1_t = tt(torch.tensor(x), hc_t)
  h1_g, c1_g = tg(Tensor(x), hc_g)
  # a second step from the first one's state, and the weight gradients through both (built before anything is realized:
  # realizing the CONTIGUOUS outputs swaps their graphs for buffers)
  h2_t, c2_t = tt(torch.tensor(x) * 2, (h1_t, c1_t))
  h2_g, c2_g = tg(Tensor(x) * 2, (h1_g, c1_g))
  (h2_t.square().sum() + c2_t.sum()).backward()
  params = [n for n in names if getattr(tt, n) is not None]
  grads = (h2_g.square().sum() + c2_g.sum()).gradient(*[getattr(tg, n) for n in params])
  compare("h", h1_g, h1_t, 1e-5, 1e-4)
  compare("c", c1_g, c1_t, 1e-5, 1e-4)
  compare("h2", h2_g, h2_t, 1e-5, 1e-4)
  compare("c2", c2_g, c2_t, 1e-5, 1e-4)
  for n, g in zip(params, grads): compare(f"grad {n}", g, getattr(tt, n).grad, 1e-5, 1e-4, check_dtype=False)

def test_lstmcell_init():
  cell = nn.LSTMCell(5, 6)
  assert cell.weight_ih.shape == (24, 5) and cell.weight_hh.shape == (24, 6) and cell.bias_ih is not None and cell.bias_ih.shape == (24,)
  assert np.abs(cell.weight_hh.numpy()).max() <= 1 / math.sqrt(6)
  assert nn.LSTMCell(2, 3, bias=False).bias_hh is None

# *** parameters are independent tensors ***

def test_same_shaped_params_dont_alias():
  # two layers' Tensor.ones(4) are the same graph; realizing and updating one must not touch the other
  a, b = nn.LayerNorm(4), nn.LayerNorm(4)
  for t in [a.weight, a.bias, b.weight, b.bias]: t.realize()  # type: ignore[union-attr]
  a.weight.assign(a.weight * 3).realize()  # type: ignore[union-attr]
  assert a.weight.numpy().tolist() == [3.0] * 4 and b.weight.numpy().tolist() == [1.0] * 4  # type: ignore[union-attr]

def test_state_dict_of_layers():
  class Net:
    def __init__(self): self.l1, self.convs, self.norm = nn.Linear(2, 3), [nn.Conv2d(1, 2, 3)], {"ln": nn.LayerNorm(3)}
  assert sorted(get_state_dict(Net()).keys()) == ["convs.0.bias", "convs.0.weight", "l1.bias", "l1.weight", "norm.ln.bias", "norm.ln.weight"]

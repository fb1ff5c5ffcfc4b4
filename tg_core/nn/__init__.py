"""Neural network layers with tinygrad's signatures and initialization. Layers are plain objects holding Tensors; the
functional ops (`Tensor.conv2d`, `Tensor.layernorm`, `Tensor.batchnorm`, ...) do the work. See `tg_core.nn.optim` and
`tg_core.nn.state` for optimizers and (de)serialization."""
from __future__ import annotations
import math

from tg_core.dtype import dtypes
from tg_core.helpers import flatten, make_tuple, prod
from tg_core.tensor import Tensor

__all__ = ["BatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "Embedding",
           "GroupNorm", "InstanceNorm", "LSTMCell", "LayerNorm", "LayerNorm2d", "Linear", "RMSNorm"]

def _rsqrt(x: Tensor) -> Tensor: return x.sqrt().reciprocal()
def _own(t: Tensor) -> Tensor:
  """`t` in a buffer of its own: identical constant graphs are one (hash-consed) UOp, and two layers' `Tensor.ones(4)` realized
  separately would otherwise share a buffer, so an in-place update of one would change the other."""
  return Tensor.empty(t.shape, dtype=t.dtype, device=t.device, requires_grad=t.requires_grad).assign(t)
def _channel_shape(x: Tensor) -> tuple[int, ...]: return (1, -1, *[1] * (x.ndim - 2))

class BatchNorm:
  """Batch normalization over dim 1 (any rank, so it serves as BatchNorm1d/2d/3d).

  In training mode it normalizes with the batch statistics and, with `track_running_stats`, updates `running_mean`,
  `running_var` (unbiased) and `num_batches_tracked` in place (assign); in eval mode it uses the running statistics."""
  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True, momentum: float = 0.1):
    self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
    self.weight: Tensor | None = _own(Tensor.ones(sz)) if affine else None
    self.bias: Tensor | None = _own(Tensor.zeros(sz)) if affine else None
    self.num_batches_tracked = _own(Tensor.zeros((), dtype=dtypes.int64, requires_grad=False))
    if track_running_stats:
      self.running_mean, self.running_var = _own(Tensor.zeros(sz, requires_grad=False)), _own(Tensor.ones(sz, requires_grad=False))

  def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
    """(mean, variance) per channel: the running ones in eval mode, else the (biased) batch ones."""
    if self.track_running_stats and not Tensor.training: return self.running_mean, self.running_var
    reduce_axes = tuple(i for i in range(x.ndim) if i != 1)
    batch_mean = x.mean(axis=reduce_axes)
    y = x - batch_mean.detach().reshape(_channel_shape(x))  # d(var)/d(mean) = 0
    batch_var = (y * y).mean(axis=reduce_axes)
    return batch_mean, batch_var

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2: raise ValueError(f"BatchNorm expects at least 2D input (N, C, ...), got shape {x.shape}")
    if Tensor.training and x.numel() // x.shape[1] <= 1:
      raise ValueError(f"Expected more than 1 value per channel when training, got input size {x.shape}")  # like torch
    batch_mean, batch_var = self.calc_stats(x)
    if self.track_running_stats and Tensor.training:
      n = x.numel() // x.shape[1]
      self.running_mean.assign((1 - self.momentum) * self.running_mean + self.momentum * batch_mean.detach())
      self.running_var.assign((1 - self.momentum) * self.running_var + self.momentum * (n / max(n - 1, 1)) * batch_var.detach())
      self.num_batches_tracked += 1
    return x.batchnorm(self.weight, self.bias, batch_mean, _rsqrt(batch_var + self.eps))  # type: ignore[attr-defined]
BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm

class Conv2d:
  """N-d convolution (the kernel_size's length sets the rank); weight and bias are uniform in +-1/sqrt(in_channels*prod(kernel_size)).
  `padding='same'` pads d*(k-1) per axis, the extra one on the right, like torch."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] = 1,
               padding: int | tuple[int, ...] | str = 0, dilation: int | tuple[int, ...] = 1, groups: int = 1, bias: bool = True):
    self.kernel_size = make_tuple(kernel_size, 2)
    if isinstance(padding, str):
      if padding.lower() != "same": raise ValueError(f"Invalid padding string {padding!r}, only 'same' is supported")
      if any(s != 1 for s in make_tuple(stride, len(self.kernel_size))): raise ValueError("padding='same' is not supported for strided convolutions")
      # flat padding lists the last axis first, so both the dilations and the kernel sizes are reversed
      dil = make_tuple(dilation, len(self.kernel_size))
      padding = tuple(flatten([(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for d, k in zip(dil[::-1], self.kernel_size[::-1])]))
    self.stride, self.dilation, self.groups, self.padding = stride, dilation, groups, padding
    scale = 1 / math.sqrt(in_channels * prod(self.kernel_size))
    self.weight = Tensor.uniform(out_channels, in_channels // groups, *self.kernel_size, low=-scale, high=scale)
    self.bias: Tensor | None = Tensor.uniform(out_channels, low=-scale, high=scale) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding)  # type: ignore[attr-defined]

def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int | str = 0, dilation: int = 1, groups: int = 1,
           bias: bool = True) -> Conv2d:
  """1-d convolution: a Conv2d with a 1-element kernel_size."""
  return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias)

class ConvTranspose2d(Conv2d):
  """N-d transposed convolution; the weight has shape (in_channels, out_channels//groups, *kernel_size)."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] = 1,
               padding: int | tuple[int, ...] = 0, output_padding: int | tuple[int, ...] = 0, dilation: int | tuple[int, ...] = 1, groups: int = 1,
               bias: bool = True):
    super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
    scale = 1 / math.sqrt(in_channels * prod(self.kernel_size))
    self.weight = Tensor.uniform(in_channels, out_channels // groups, *self.kernel_size, low=-scale, high=scale)
    self.output_padding = output_padding

  def __call__(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding,  # type: ignore[attr-defined]
                              self.output_padding)

def ConvTranspose1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0, output_padding: int = 0,
                    dilation: int = 1, groups: int = 1, bias: bool = True) -> ConvTranspose2d:
  """1-d transposed convolution: a ConvTranspose2d with a 1-element kernel_size."""
  return ConvTranspose2d(in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation, groups, bias)

class Linear:
  """y = x @ weight.T + bias; weight and bias are uniform in +-1/sqrt(in_features)."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    bound = 1 / math.sqrt(in_features)
    self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound)
    self.bias: Tensor | None = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    ret = x.matmul(self.weight.T)
    return ret + self.bias if self.bias is not None else ret

class GroupNorm:
  """Normalize over groups of channels (and all spatial dims), then an optional per-channel affine."""
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    if num_channels % num_groups != 0: raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight: Tensor | None = _own(Tensor.ones(num_channels)) if affine else None
    self.bias: Tensor | None = _own(Tensor.zeros(num_channels)) if affine else None

  def __call__(self, x: Tensor) -> Tensor:
    x = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)  # type: ignore[attr-defined]
    if self.weight is None or self.bias is None: return x
    return x * self.weight.reshape(_channel_shape(x)) + self.bias.reshape(_channel_shape(x))

class InstanceNorm(GroupNorm):
  """Normalize each channel of each sample over its spatial dims, then an optional per-channel affine: a GroupNorm with
  one group per channel."""
  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
    super().__init__(num_features, num_features, eps, affine)
    self.num_features = num_features

class LayerNorm:
  """Normalize over the last len(normalized_shape) dims, then an optional elementwise affine."""
  def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True):
    self.normalized_shape: tuple[int, ...] = make_tuple(normalized_shape, 1)
    self.axis, self.eps, self.elementwise_affine = tuple(-1 - i for i in range(len(self.normalized_shape))), eps, elementwise_affine
    self.weight: Tensor | None = _own(Tensor.ones(*self.normalized_shape)) if elementwise_affine else None
    self.bias: Tensor | None = _own(Tensor.zeros(*self.normalized_shape)) if elementwise_affine else None

  def __call__(self, x: Tensor) -> Tensor:
    if self.normalized_shape != tuple(x.shape[-len(self.normalized_shape):]):
      raise RuntimeError(f"last dimensions of {x.shape} must match {self.normalized_shape}")
    x = x.layernorm(eps=self.eps, axis=self.axis)  # type: ignore[attr-defined]
    if self.weight is None or self.bias is None: return x
    return x * self.weight + self.bias

class LayerNorm2d(LayerNorm):
  """LayerNorm over the channels of an NCHW tensor."""
  def __call__(self, x: Tensor) -> Tensor: return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

class RMSNorm:
  """x / sqrt(mean(x**2, -1) + eps) (computed in float32 or wider), times an optional weight."""
  def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
    self.eps = eps
    self.weight: Tensor | None = _own(Tensor.ones(dim)) if elementwise_affine else None

  def _norm(self, x: Tensor) -> Tensor: return x * _rsqrt(x.square().mean(-1, keepdim=True) + self.eps)

  def __call__(self, x: Tensor) -> Tensor:
    x = self._norm(x if x.dtype == dtypes.float64 else x.float()).cast(x.dtype)
    return x if self.weight is None else x * self.weight

class Embedding:
  """A lookup table of `vocab_size` rows of `embed_size` (glorot uniform init); index with an integer tensor."""
  def __init__(self, vocab_size: int, embed_size: int):
    self.vocab_sz, self.embed_sz, self.weight = vocab_size, embed_size, Tensor.glorot_uniform(vocab_size, embed_size)

  def __call__(self, idx: Tensor) -> Tensor:
    if not dtypes.is_int(idx.dtype): raise TypeError(f"Expected integer dtype for index in embedding, got {idx.dtype}")
    # one-hot times the table, summed: differentiable with respect to the weight
    arange = Tensor.arange(self.vocab_sz, requires_grad=False, device=self.weight.device).reshape(self.vocab_sz, 1)
    big_shp = tuple(idx.shape) + (self.vocab_sz, self.embed_sz)
    arange, idx, vals = arange.expand(big_shp), idx.reshape(tuple(idx.shape) + (1, 1)).expand(big_shp), self.weight.expand(big_shp)
    return (arange == idx).where(vals, 0).sum(-2, dtype=vals.dtype)

class LSTMCell:
  """One LSTM step: `h, c = cell(x, (h, c))`, gates in torch's (input, forget, cell, output) order."""
  def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
    stdv = 1.0 / math.sqrt(hidden_size)
    self.weight_ih = Tensor.uniform(hidden_size * 4, input_size, low=-stdv, high=stdv)
    self.weight_hh = Tensor.uniform(hidden_size * 4, hidden_size, low=-stdv, high=stdv)
    self.bias_ih: Tensor | None = _own(Tensor.zeros(hidden_size * 4)) if bias else None
    self.bias_hh: Tensor | None = _own(Tensor.zeros(hidden_size * 4)) if bias else None

  def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    hidden = self.weight_hh.shape[1]
    if hc is None: hc = (Tensor.zeros(x.shape[0], hidden, dtype=x.dtype, device=x.device),) * 2
    gates = x.matmul(self.weight_ih.T) + hc[0].matmul(self.weight_hh.T)
    if self.bias_ih is not None: gates = gates + self.bias_ih
    if self.bias_hh is not None: gates = gates + self.bias_hh
    i, f, g, o = (gates.shrink(((0, gates.shape[0]), (k * hidden, (k + 1) * hidden))) for k in range(4))
    tanh = lambda t: 2 * (2 * t).sigmoid() - 1
    i, f, g, o = i.sigmoid(), f.sigmoid(), tanh(g), o.sigmoid()
    new_c = f * hc[1] + i * g
    new_h = o * tanh(new_c)
    return new_h.contiguous(), new_c.contiguous()

from tg_core.nn import optim, state  # noqa: E402,F401  (tinygrad's nn exposes its optim and state modules)

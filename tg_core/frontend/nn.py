"""Tensor methods: nn ops, built from Tensor's core primitives (tg_core/tensor.py) and the other frontend mixins."""
from __future__ import annotations
import functools
import math
from typing import TYPE_CHECKING, Callable, Literal, Sequence

import numpy as np

from tg_core.dtype import DTypeLike, dtypes, least_upper_dtype, to_dtype
from tg_core.helpers import ceildiv, flatten, make_tuple, prod

if TYPE_CHECKING:
  from tg_core.tensor import Tensor

ReductionStr = Literal["mean", "sum", "none"]

def _lerp_uint8(lo: Tensor, hi: Tensor, n_in: int, n_out: int, scale: float, align_corners: bool, reshape: list, expand: list) -> Tensor:
  """One linear pass over uint8 like torch's CPU kernel: int16 fixed-point weights (precision from the largest weight), rounded to uint8."""
  from tg_core.tensor import Tensor
  arr = np.arange(n_out, dtype=np.float64)
  index = np.clip(scale * arr if align_corners else scale * (arr + 0.5) - 0.5, 0, n_in - 1)
  w1 = index - np.floor(index)
  w0 = 1 - w1
  prec = next(p for p in range(22) if int(0.5 + max(w0.max(), w1.max()) * (1 << (p + 1))) >= (1 << 15) or p == 21)
  q0, q1 = (Tensor(np.floor(0.5 + w * (1 << prec)).astype(np.int32), device=lo.device).reshape(reshape).expand(expand) for w in (w0, w1))
  acc = lo.cast(dtypes.int32) * q0 + hi.cast(dtypes.int32) * q1 + (1 << (prec - 1))
  return (acc >> prec).maximum(0).minimum(255).cast(dtypes.uint8)

class ConvPaddingError(ValueError, RuntimeError):
  """Bad string padding for a convolution. torch.nn.functional raises RuntimeError here and torch.nn.ConvNd raises ValueError; this is both."""

def _flat_to_grouped(padding: Sequence[int]) -> tuple[tuple[int, int], ...]:
  """`(left, right, top, bottom, ...)` -> `(..., (top, bottom), (left, right))`"""
  return tuple(zip(padding[-2::-2], padding[::-2]))

def _resolve_pool_pads(padding: int | Sequence[int], dims: int) -> list[int]:
  """int, per-dim `(pH, pW)` or flat `(left, right, top, bottom)` padding -> flat padding, last dim first."""
  if isinstance(padding, int): return [padding] * 2 * dims
  if len(padding) == 2 * dims: return list(padding)
  if len(padding) == dims: return [p for p in padding for _ in range(2)][::-1]
  raise ValueError(f"padding must be an int or a sequence of length {dims} or {2*dims}, but got {padding=} for {dims=}")

def _check_reduction(reduction: str) -> None:
  if reduction not in ("mean", "sum", "none"): raise ValueError(f"{reduction} is not a valid value for reduction")

class NNMixin:
  __slots__ = ()

  # *** private helpers ***
  # NOTE: one-hot masks use IndexingMixin._one_hot_along_dim (bool, any dim); the public one_hot is int32 on a new last dim

  def _do_reduction(self: Tensor, reduction: ReductionStr = "mean") -> Tensor:
    _check_reduction(reduction)
    if reduction == "none": return self
    return self.sum() if reduction == "sum" else self.mean()

  # *** functional nn ***

  def sequential(self: Tensor, ll: list[Callable[[Tensor], Tensor]]) -> Tensor:
    """Apply the functions in `ll` in order. `t.sequential([lambda x: x*2, Tensor.relu])`"""
    return functools.reduce(lambda x, f: f(x), ll, self)

  def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None, dtype: DTypeLike | None = None) -> Tensor:
    """`self @ weight + bias`. NOTE: like tinygrad, weight is (in, out), i.e. torch's weight transposed."""
    if dtype is not None:
      dt = to_dtype(dtype)
      return self.cast(dt).linear(weight.cast(dt), bias.cast(dt) if bias is not None else bias)
    x = self.mul(weight) if weight.ndim == 1 else self.dot(weight)
    return x.add(bias) if bias is not None else x

  def newton_schulz(self: Tensor, steps: int, params: tuple[float, ...], eps: float = 1e-7) -> Tensor:
    """`steps` Newton-Schulz iterations of the odd polynomial X <- sum_i params[i] * (X X^T)^i X over the last two dims, starting from
    X = self / (||self||_F + eps) (tinygrad's; Muon orthogonalizes its update with it). `g.newton_schulz(5, (3.4445, -4.775, 2.0315))`"""
    if self.ndim < 2: raise ValueError(f"newton_schulz needs a tensor of at least 2 dims, got shape {self.shape}")
    if self.shape[-2] > self.shape[-1]: return self.transpose(-2, -1).newton_schulz(steps, params, eps).transpose(-2, -1)
    G = self / (self.square().sum(axis=(-2, -1), keepdim=True).sqrt() + eps)
    for _ in range(steps):
      gram, term = G @ G.transpose(-2, -1), G
      terms = []
      for i, p in enumerate(params):
        if i: term = gram @ term
        terms.append(p * term)
      G = functools.reduce(lambda a, b: a + b, terms)
    return G

  def normalize(self: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """x / max(||x||_p, eps) along `dim` (torch.nn.functional.normalize). `Tensor([[3., 4.]]).normalize()` -> [[.6, .8]]."""
    x = self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)
    if p == math.inf: den = x.abs().max(dim, keepdim=True)
    elif p == 0: den = x.ne(0).sum(dim, keepdim=True).cast(x.dtype)
    else:
      s = x.abs().pow(p).sum(dim, keepdim=True) if p != 2 else (x * x).sum(dim, keepdim=True)
      # an all-zero slice takes the eps branch: the root of a safe 1 there keeps its (unused) infinite derivative out of the gradient
      zero = s.eq(0)
      root = zero.where(1, s)
      den = zero.where(0, root.sqrt() if p == 2 else root.pow(1 / p))
    return x / den.maximum(eps)

  def layernorm(self: Tensor, axis: int | tuple[int, ...] = -1, eps: float = 1e-5) -> Tensor:
    """Normalize to zero mean, unit variance over `axis` (no affine). `t.layernorm()`"""
    y = self - self.mean(axis, keepdim=True)
    return y.mul((y * y).mean(axis, keepdim=True).add(eps).sqrt().reciprocal())

  def batchnorm(self: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor, axis: int | tuple[int, ...] = 1) -> Tensor:
    """`(x - mean) * weight * invstd + bias`, with the parameters laid along `axis`."""
    axis_ = tuple(self._resolve_dim(a) for a in ((axis,) if isinstance(axis, int) else axis))
    shape = tuple(s if ax in axis_ else 1 for ax, s in enumerate(self.shape))
    x = self - mean.reshape(shape)
    if weight is not None: x = x * weight.reshape(shape)
    ret = x.mul(invstd.reshape(shape) if invstd.ndim == len(axis_) else invstd)
    return (ret + bias.reshape(shape)) if bias is not None else ret

  def dropout(self: Tensor, p: float = 0.5) -> Tensor:
    """Zero elements with probability `p` and scale the rest by 1/(1-p), only while `Tensor.training`."""
    from tg_core.tensor import Tensor
    if not 0 <= p <= 1: raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not Tensor.training or p == 0: return self
    if p == 1: return self.zeros_like()
    return (self.rand_like(dtype=dtypes.default_float) >= p).contiguous().where(self, 0) / (1.0 - p)  # type: ignore[attr-defined]

  # *** sliding windows ***

  def _pool(self: Tensor, k_: tuple[int, ...], stride: int | tuple[int, ...] = 1, dilation: int | tuple[int, ...] = 1) -> Tensor:
    """Sliding windows over the last len(k_) dims: (..., *i_) -> (..., *o_, *k_), built from pad/reshape/shrink/permute."""
    if self.ndim < len(k_): raise RuntimeError(f"can't pool {self.shape} with {k_}")
    s_, d_ = make_tuple(stride, len(k_)), make_tuple(dilation, len(k_))
    if not len(k_) == len(s_) == len(d_): raise RuntimeError(f"stride/dilation mismatch kernel:{k_} stride:{s_} dilation:{d_}")
    noop, i_ = [None] * (self.ndim - len(k_)), self.shape[-len(k_):] if k_ else ()
    if any(d * (k - 1) + 1 > i for k, d, i in zip(k_, d_, i_)):
      raise RuntimeError(f"kernel size {k_} (dilation {d_}) can't be greater than the (padded) input size {tuple(i_)}")
    o_ = [ceildiv(i - d * (k - 1), s) for i, d, k, s in zip(i_, d_, k_, s_)]
    if any(k > s for k, s in zip(k_, s_)) or any(d != 1 for d in d_):
      # input size scaling factor to make sure shrink for stride is possible
      f_ = [1 + int(o * s > (i - d * (k - 1))) for o, s, i, d, k in zip(o_, s_, i_, d_, k_)]
      # repeats such that we don't need padding
      x = self.repeat([1] * len(noop) + [ceildiv(k * (i * f + d), i) for k, i, d, f in zip(k_, i_, d_, f_)])
      # handle dilation
      x = x.shrink(tuple(noop + [(0, k * (i * f + d)) for k, i, d, f in zip(k_, i_, d_, f_)]))
      x = x.reshape(tuple(x.shape[:len(noop)]) + tuple(flatten((k, i * f + d) for k, i, d, f in zip(k_, i_, d_, f_))))
      # handle stride
      x = x.shrink(tuple(noop + flatten(((0, k), (0, o * s)) for k, o, s in zip(k_, o_, s_))))
      x = x.reshape(tuple(x.shape[:len(noop)]) + tuple(flatten((k, o, s) for k, o, s in zip(k_, o_, s_))))
      x = x.shrink(tuple(noop + flatten(((0, k), (0, o), (0, 1)) for k, o in zip(k_, o_))))
      x = x.reshape(tuple(x.shape[:len(noop)]) + tuple(flatten((k, o) for k, o in zip(k_, o_))))
      # permute to move reduce to the end
      return x.permute(*range(len(noop)), *[len(noop) + i * 2 + 1 for i in range(len(i_))], *[len(noop) + i * 2 for i in range(len(i_))])
    # non-overlapping windows: pad to a multiple of the stride, reshape and shrink
    x = self.pad((None,) * len(noop) + tuple((0, max(0, o * s - i)) for i, o, s in zip(i_, o_, s_)))
    x = x.shrink(tuple(noop + [(0, o * s) for o, s in zip(o_, s_)]))
    x = x.reshape(tuple(x.shape[:len(noop)]) + tuple(flatten((o, s) for o, s in zip(o_, s_))))
    x = x.shrink(tuple(noop + flatten(((0, o), (0, k)) for o, k in zip(o_, k_))))
    return x.permute(*range(len(noop)), *[len(noop) + i * 2 for i in range(len(i_))], *[len(noop) + i * 2 + 1 for i in range(len(i_))])

  def _apply_ceil_mode(self: Tensor, pads: Sequence[int], k_: tuple[int, ...], s_: int | tuple[int, ...], d_: int | tuple[int, ...]) -> list[int]:
    """Extra end padding so `_pool` produces ceil-mode output sizes (a window may not start in the end padding, like torch)."""
    (d_, s_), i_ = (make_tuple(x, len(k_)) for x in (d_, s_)), self.shape[-len(k_):]
    grouped_pads = list(_flat_to_grouped(pads))
    # https://arxiv.org/pdf/1603.07285 section 5.1, relationship 15.
    o_ = [ceildiv(i + pB + pA - (d * (k - 1) + 1), s) + 1 for i, d, k, s, (pB, pA) in zip(i_, d_, k_, s_, grouped_pads)]
    for dim, (o, i, s, k, d, (pB, pA)) in enumerate(zip(o_, i_, s_, k_, d_, grouped_pads)):
      # last_window_start + full_kernel - padded_input, less one stride when the last window would start in the end padding
      grouped_pads[dim] = (pB, pA + s * (o - 1) + (d * (k - 1) + 1) - (i + pB + pA) - max(s * (o - 1) - (pB + i - 1), 0))
    return flatten(reversed(grouped_pads))

  def _pool_args(self: Tensor, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] | None, dilation: int | tuple[int, ...],
                 padding: int | tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], list[int]]:
    k_ = make_tuple(kernel_size, 2)
    s_ = make_tuple(stride if stride is not None else k_, len(k_))
    d_ = make_tuple(dilation, len(k_))
    if self.ndim < len(k_): raise RuntimeError(f"expected an input with at least {len(k_)} dims, got {self.shape}")
    if any(x <= 0 for x in (*k_, *s_, *d_)): raise RuntimeError(f"kernel_size, stride and dilation must be > 0, got {k_=} {s_=} {d_=}")
    pads = _resolve_pool_pads(padding, len(k_))
    if any(p < 0 or p > (d * (k - 1) + 1) // 2 for (pB, pA), k, d in zip(_flat_to_grouped(pads), k_, d_) for p in (pB, pA)):
      raise RuntimeError(f"pad should be at most half of effective kernel size, but got {padding=}, kernel_size={k_} and dilation={d_}")
    return k_, s_, d_, pads

  def avg_pool2d(self: Tensor, kernel_size: int | tuple[int, ...] = (2, 2), stride: int | tuple[int, ...] | None = None,
                 dilation: int | tuple[int, ...] = 1, padding: int | tuple[int, ...] = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> Tensor:
    """Average pooling over the last len(kernel_size) dims (any number of dims). `t.avg_pool2d((2, 2))`"""
    k_, s_, d_, reg_pads = self._pool_args(kernel_size, stride, dilation, padding)
    axis = tuple(range(-len(k_), 0))
    def pool(x: Tensor, padding_: Sequence[int]) -> Tensor: return x.pad(padding_)._pool(k_, s_, d_)
    pads = self._apply_ceil_mode(reg_pads, k_, s_, d_) if ceil_mode else reg_pads
    if not count_include_pad: return pool(self, pads).sum(axis) / pool(self.ones_like(), pads).sum(axis)
    if not ceil_mode: return pool(self, pads).mean(axis)
    # ceil mode counts the regular padding but not the extra ceil padding
    return pool(self, pads).sum(axis) / pool(self.pad(reg_pads).ones_like(),
                                             tuple(cp - rp for cp, rp in zip(pads, reg_pads))).sum(axis)

  def max_pool2d(self: Tensor, kernel_size: int | tuple[int, ...] = (2, 2), stride: int | tuple[int, ...] | None = None,
                 dilation: int | tuple[int, ...] = 1, padding: int | tuple[int, ...] = 0, ceil_mode: bool = False,
                 return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Max pooling over the last len(kernel_size) dims; `return_indices=True` also gives the flat spatial argmax.
    NOTE: like tinygrad, the indices are int32 (torch: int64)."""
    from tg_core.tensor import Tensor
    k_, s_, d_, pads = self._pool_args(kernel_size, stride, dilation, padding)
    axis = tuple(range(-len(k_), 0))
    if ceil_mode: pads = self._apply_ceil_mode(pads, k_, s_, d_)
    pooled = self.pad(pads, value=dtypes.min(self.dtype))._pool(k_, s_, d_)
    if not return_indices: return pooled.max(axis)
    spatial_sz = int(prod(spatial_shape := self.shape[-len(k_):]))
    idx = Tensor.arange(spatial_sz, 0, -1, device=self.device).reshape(spatial_shape)
    m = pooled == pooled.max(axis, keepdim=True)
    idx = m * idx.pad(pads, value=dtypes.min(idx.dtype))._pool(k_, s_, d_)
    return pooled.max(axis), spatial_sz - idx.max(axis)

  def max_unpool2d(self: Tensor, indices: Tensor, kernel_size: int | tuple[int, ...] = (2, 2), stride: int | tuple[int, ...] | None = None,
                   dilation: int | tuple[int, ...] = 1, padding: int | tuple[int, ...] = 0, output_size: Sequence[int] | None = None) -> Tensor:
    """Partial inverse of max_pool2d: scatter the values to their `indices` (flat spatial), zeros elsewhere."""
    bs, c, *spatial_shape = self.shape
    k_, d_, s_ = (make_tuple(x, len(spatial_shape)) for x in (kernel_size, dilation, stride if stride is not None else kernel_size))
    p_ = _flat_to_grouped(_resolve_pool_pads(padding, len(spatial_shape)))
    # https://arxiv.org/pdf/1603.07285 inverse of relationship 15 in section 5.1.
    default_size = tuple((i - 1) * s - (pB + pA) + (d * (k - 1) + 1) for i, k, d, s, (pB, pA) in zip(spatial_shape, k_, d_, s_, p_))
    if output_size is None: output_size = default_size
    else:
      output_size = tuple(output_size)[-len(spatial_shape):]
      if len(output_size) != len(spatial_shape): raise ValueError(f"output_size must have {len(spatial_shape)} elements, got {output_size}")
      for i, (o, ds, s) in enumerate(zip(output_size, default_size, s_)):
        if not ds - s <= o <= ds + s: raise ValueError(f'invalid output_size "{output_size}" (dim {i} must be between {ds - s} and {ds + s})')
    if indices.shape != self.shape: raise RuntimeError(f"expected indices of shape {self.shape}, got {indices.shape}")
    mask = indices.reshape(bs, c, 1, -1)._one_hot_along_dim(prod(output_size), 2)
    ret = mask.where(self.reshape(bs, c, 1, -1), 0).sum(3, dtype=self.dtype)
    # overlapping windows can send one position (with one value) twice: average the forward, while each source keeps the full
    # gradient like torch (which gathers grad_output at the indices)
    cnt = mask.sum(3, dtype=dtypes.int32)
    # (only where a position is hit twice, and the plain average for +-inf there: inf - (inf - inf) would be NaN)
    avg = (ret / cnt.maximum(1)).cast(self.dtype)
    ret = (cnt > 1).where(ret.isfinite().where(ret - (ret - avg).detach(), avg), ret)
    return ret.reshape(bs, c, *output_size)

  # *** convolutions ***

  def conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | tuple[int, ...] = 1,
             dilation: int | tuple[int, ...] = 1, padding: int | tuple[int, ...] | str = 0, dtype: DTypeLike | None = None) -> Tensor:
    """Convolution over the trailing dims of (N, Cin, *spatial) with weight (Cout, Cin/groups, *kernel): 1d, 2d, 3d, ...
    padding: int, per-dim tuple, flat `(left, right, top, bottom, ...)` tuple, 'valid' or 'same' (torch's split: extra pad at the end)."""
    if weight.ndim != self.ndim or self.ndim < 3:
      raise RuntimeError(f"expected a {weight.ndim}-D input (batched) for a {weight.ndim}-D weight {weight.shape}, got input of shape {self.shape}")
    (bs, cin_), (cout, cin), HW = self.shape[:2], weight.shape[:2], weight.shape[2:]
    if groups <= 0: raise RuntimeError(f"non-positive groups is not supported, got {groups}")
    if cout % groups != 0:
      raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but got {weight.shape}")
    if groups * cin != cin_:
      raise RuntimeError(f"Given groups={groups}, weight of size {weight.shape}, expected input{self.shape} to have {groups*cin} channels, "
                         f"but got {cin_}")
    s_, d_ = make_tuple(stride, len(HW)), make_tuple(dilation, len(HW))
    if len(s_) != len(HW) or len(d_) != len(HW): raise RuntimeError(f"stride {stride} / dilation {dilation} must have {len(HW)} values")
    if any(s <= 0 for s in s_) or any(d <= 0 for d in d_): raise RuntimeError(f"stride and dilation must be positive, got {s_=} {d_=}")
    if bias is not None and bias.shape != (cout,): raise RuntimeError(f"expected bias of shape ({cout},), got {bias.shape}")
    if isinstance(padding, str):
      if padding not in ("same", "valid"): raise ConvPaddingError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
      if padding == "valid": padding_ = [0] * 2 * len(HW)
      else:
        if any(s != 1 for s in s_): raise ConvPaddingError("padding='same' is not supported for strided convolutions")
        # total d*(k-1) per dim, the odd one extra on the end side (like torch)
        padding_ = flatten((d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in reversed(list(zip(HW, d_))))
    else: padding_ = _resolve_pool_pads(padding, len(HW))
    # conv is a pooling op (with padding): (bs, groups*cin, *oyx, *HW)
    x = self.pad(padding_)._pool(HW, s_, d_)
    rcout, oyx = cout // groups, x.shape[2:-len(HW)]
    x = x.reshape(bs, groups, cin, 1, *oyx, *HW).expand(bs, groups, cin, rcout, *oyx, *HW)
    x = x.permute(0, 1, 3, *[4 + i for i in range(len(oyx))], 2, *[4 + len(oyx) + i for i in range(len(HW))])
    # conv! broadcasted to (bs, groups, rcout, *oyx, cin, *HW)
    ret = (x * weight.reshape(1, groups, rcout, *[1] * len(oyx), cin, *HW)).sum([-1 - i for i in range(1 + len(oyx))], keepdim=True, dtype=dtype)
    ret = ret.reshape(bs, cout, *oyx)
    return ret if bias is None else ret.add(bias.reshape(1, -1, *[1] * len(HW)))

  def conv_transpose2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | tuple[int, ...] = 1,
                       dilation: int | tuple[int, ...] = 1, padding: int | tuple[int, ...] = 0, output_padding: int | tuple[int, ...] = 0) -> Tensor:
    """Transposed convolution of (N, Cin, *spatial) with weight (Cin, Cout/groups, *kernel), any number of spatial dims."""
    if weight.ndim != self.ndim or self.ndim < 3:
      raise RuntimeError(f"expected a {weight.ndim}-D input (batched) for a {weight.ndim}-D weight {weight.shape}, got input of shape {self.shape}")
    if groups <= 0 or weight.shape[0] % groups != 0: raise RuntimeError(f"weight dim 0 ({weight.shape[0]}) must be divisible by groups={groups}")
    if self.shape[1] != weight.shape[0]:
      raise RuntimeError(f"Given transposed=1, weight of size {weight.shape}, expected input{self.shape} to have {weight.shape[0]} channels")
    HW = weight.shape[2:]
    stride_, dilation_, output_padding_ = [make_tuple(x, len(HW)) for x in (stride, dilation, output_padding)]
    if any(op >= s and op >= d for op, s, d in zip(output_padding_, stride_, dilation_)):
      raise RuntimeError(f"output padding must be smaller than either stride or dilation, got {output_padding_=} {stride_=} {dilation_=}")
    x, w = self, weight.unflatten(0, (groups, -1)).transpose(1, 2).flip(*range(3, weight.ndim + 1))
    padding_ = _flat_to_grouped(_resolve_pool_pads(padding, len(HW)))
    if any(s > 1 for s in stride_):
      # handle strides: (k) -> reshape -> (k,1) -> pad -> (k,s) -> reshape -> (k*s) -> shrink (k-(s-1))
      sp = x.shape[2:]
      x = x.reshape(*x.shape[:2], *flatten((k, 1) for k in sp))
      x = x.pad(((0, 0), (0, 0), *flatten(((0, 0), (0, s - 1)) for s in stride_)))
      x = x.reshape(*x.shape[:2], *[k * s for k, s in zip(sp, stride_)])
      x = x.shrink(((0, x.shape[0]), (0, x.shape[1]), *[(0, k * s - (s - 1)) for k, s in zip(sp, stride_)]))
    padding_ = flatten((((k - 1) * d - pB, (k - 1) * d - pA + op)
                        for k, d, (pB, pA), op in reversed(list(zip(HW, dilation_, padding_, output_padding_)))))
    return x.conv2d(w.flatten(end_dim=1), groups=groups, bias=bias, dilation=dilation_, padding=padding_)

  # *** resampling ***

  def interpolate(self: Tensor, size: tuple[int, ...], mode: str = "linear", align_corners: bool = False) -> Tensor:
    """Resize the last len(size) dims with "linear" (bi/trilinear for 2/3 dims; "bilinear"/"trilinear" name those, as torch),
    "nearest" or "nearest-exact". uint8 rounds after each dim, as torch. `t.interpolate((4, 6), mode="linear", align_corners=True)`"""
    from tg_core.tensor import Tensor
    if not isinstance(size, (tuple, list)) or not all(isinstance(s, int) for s in size) or not 0 < len(size) <= self.ndim:
      raise ValueError(f"invalid {size=} for an input of shape {self.shape}")
    if any(s <= 0 for s in size): raise ValueError(f"output size must be positive, got {size}")
    if mode in ("bilinear", "trilinear"):
      if len(size) != (n := 2 if mode == "bilinear" else 3) or self.ndim != n + 2:
        raise ValueError(f"{mode} interpolation needs a {n + 2}-D input and {n} output sizes, got input shape {self.shape} and {size=}")
      mode = "linear"
    if mode not in ("linear", "nearest", "nearest-exact"):
      raise NotImplementedError(f"only linear (bilinear, trilinear), nearest and nearest-exact are supported, got {mode=}")
    if align_corners and mode != "linear": raise ValueError("align_corners option can only be set with the interpolating mode linear")
    x, expand = self, list(self.shape)
    for i in range(-1, -len(size) - 1, -1):
      # align_corners to size 1 uses max(size-1, 1): the single output sits on the first input
      scale = (self.shape[i] - int(align_corners)) / max(size[i] - int(align_corners), 1)
      arr, reshape = Tensor.arange(size[i], dtype=dtypes.float32, device=self.device), [1] * self.ndim
      reshape[i] = expand[i] = size[i]
      if mode == "linear":
        index = (scale * arr if align_corners else (scale * (arr + 0.5)) - 0.5).maximum(0).minimum(self.shape[i] - 1)
        low, high, perc = [y.reshape(reshape).expand(expand) for y in (index.floor().cast(dtypes.int32), index.ceil().cast(dtypes.int32),
                                                                         index - index.floor())]
        lo, hi = x.gather(i, low), x.gather(i, high)
        if self.dtype == dtypes.uint8 and size[i] != self.shape[i]: x = _lerp_uint8(lo, hi, self.shape[i], size[i], scale, align_corners, reshape, expand)
        elif self.dtype == dtypes.uint8: x = lo
        else:
          if not dtypes.is_float(lo.dtype): lo, hi = lo.cast(dtypes.float32), hi.cast(dtypes.float32)  # hi - lo must not wrap
          x = lo + (hi - lo) * perc
      else:
        index = (scale * (arr + 0.5) if mode == "nearest-exact" else scale * arr).cast(dtypes.int32).minimum(self.shape[i] - 1)
        x = x.gather(i, index.reshape(reshape).expand(expand))
    return x.cast(self.dtype)

  # *** losses ***

  def binary_crossentropy(self: Tensor, Y: Tensor, reduction: ReductionStr = "mean") -> Tensor:
    """BCE between probabilities `self` and targets `Y`."""
    _check_reduction(reduction)
    if Y.shape != self.shape: raise ValueError(f"Using a target size ({Y.shape}) that is different to the input size ({self.shape}) is deprecated")
    return (-Y * self.log() - (1 - Y) * (1 - self).log())._do_reduction(reduction)

  def binary_crossentropy_logits(self: Tensor, Y: Tensor, reduction: ReductionStr = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """BCE on logits `self` (numerically stable), with optional `pos_weight`."""
    _check_reduction(reduction)
    if Y.shape != self.shape: raise ValueError(f"Target size ({Y.shape}) must be the same as input size ({self.shape})")
    log_p, log_1_minus_p = self.logsigmoid(), (-self).logsigmoid()
    return (-((1 if pos_weight is None else pos_weight) * Y * log_p + (1 - Y) * log_1_minus_p))._do_reduction(reduction)

  def sparse_categorical_crossentropy(self: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,
                                      reduction: ReductionStr = "mean") -> Tensor:
    """Cross entropy of logits `self` (classes on the LAST axis, like tinygrad) and class indices `Y`; `ignore_index` entries count 0."""
    if not 0.0 <= label_smoothing <= 1.0: raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    _check_reduction(reduction)
    if Y.shape != self.shape[:-1]: raise ValueError(f"expected target of shape {self.shape[:-1]}, got {Y.shape}")
    log_probs = self.log_softmax(-1)
    loss_mask = Y.ne(ignore_index) if ignore_index != -1 else Y.ones_like(dtype=dtypes.bool)
    y = Y.unsqueeze(-1)._one_hot_along_dim(self.shape[-1], dim=-1) * loss_mask.unsqueeze(-1)
    smoothing = label_smoothing * (log_probs.mean(-1) * loss_mask)
    unreduced = (1 - label_smoothing) * (log_probs * y).sum(-1) + smoothing
    # NOTE: because of ignore_index, the mean divides by the number of counted targets
    return -unreduced.sum() / loss_mask.sum() if reduction == "mean" else -unreduced._do_reduction(reduction)

  def cross_entropy(self: Tensor, Y: Tensor, reduction: ReductionStr = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy of logits `self` (classes on dim 1, or 0 for 1-D input) and class indices or class probabilities `Y`."""
    if not 0.0 <= label_smoothing <= 1.0: raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    _check_reduction(reduction)
    if self.ndim == 0: raise RuntimeError("cross_entropy expects an input of at least 1 dim")
    classes_dim = 0 if self.ndim == 1 else 1
    if self.shape != Y.shape:
      expected = self.shape[:classes_dim] + self.shape[classes_dim + 1:]
      if self.ndim > 1 and Y.ndim > 0 and Y.shape[0] != self.shape[0]:
        raise ValueError(f"Expected input batch_size ({self.shape[0]}) to match target batch_size ({Y.shape[0]}).")
      if Y.shape != expected or not dtypes.is_int(Y.dtype): raise RuntimeError(f"shape mismatch: input {self.shape} vs target {Y.shape}")
      Y = Y.unsqueeze(classes_dim)._one_hot_along_dim(self.shape[classes_dim], dim=classes_dim)
    elif not dtypes.is_float(Y.dtype): raise RuntimeError(f"expected class-probability targets to be floating point, got {Y.dtype}")
    Y = (1 - label_smoothing) * Y + label_smoothing / int(Y.shape[classes_dim])
    return -self.log_softmax(classes_dim).mul(Y).sum(classes_dim)._do_reduction(reduction)

  def nll_loss(self: Tensor, Y: Tensor, weight: Tensor | None = None, ignore_index: int | None = None, reduction: ReductionStr = "mean") -> Tensor:
    """Negative log likelihood of log-probabilities `self` (classes on dim 1, or 0 for 1-D input) at class indices `Y`."""
    _check_reduction(reduction)
    if self.ndim == 0: raise ValueError("nll_loss expects an input of at least 1 dim")
    classes_dim = 0 if self.ndim == 1 else 1
    if self.ndim > 1 and (Y.ndim == 0 or Y.shape[0] != self.shape[0]):
      raise ValueError(f"Expected input batch_size ({self.shape[0]}) to match target batch_size ({Y.shape[0] if Y.ndim else 0}).")
    if Y.shape != self.shape[:classes_dim] + self.shape[classes_dim + 1:]:
      raise RuntimeError(f"shape mismatch: input {self.shape} vs target {Y.shape}")
    if not dtypes.is_int(Y.dtype): raise RuntimeError(f"expected an integer target, got {Y.dtype}")
    nc = self.shape[classes_dim]
    if weight is not None and weight.shape != (nc,): raise RuntimeError(f"weight tensor should be defined either for all {nc} classes or no classes")
    onehot = Y.unsqueeze(classes_dim)._one_hot_along_dim(nc, dim=classes_dim)
    w = Y.ones_like(dtype=self.dtype) if weight is None else \
      onehot.where(weight.reshape(nc, *[1] * (self.ndim - classes_dim - 1)), 0).sum(classes_dim, dtype=weight.dtype)
    masked_weight = w if ignore_index is None else w * Y.ne(ignore_index)
    nll = -onehot.where(self, 0).sum(classes_dim, dtype=self.dtype) * masked_weight
    return nll.sum() / masked_weight.sum() if reduction == "mean" else nll._do_reduction(reduction)

  # *** attention ***

  def scaled_dot_product_attention(self: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                   is_causal: bool = False, enable_gqa: bool = False, scale: float | None = None) -> Tensor:
    """softmax(q @ k^T / sqrt(d) + mask) @ v; bool masks keep True, float masks are added; `is_causal` masks the future."""
    from tg_core.tensor import Tensor
    if self.ndim < 2 or key.ndim < 2 or value.ndim < 2: raise RuntimeError("query, key and value must have at least 2 dims")
    if enable_gqa:
      def rep(t: Tensor) -> Tensor:
        r = self.shape[-3] // t.shape[-3]
        return t.unsqueeze(-3).expand(*t.shape[:-2], r, *t.shape[-2:]).reshape(*t.shape[:-3], t.shape[-3] * r, *t.shape[-2:]) if r != 1 else t
      key, value = rep(key), rep(value)
    qk = self.matmul(key.transpose(-2, -1), dtype=least_upper_dtype(self.dtype, key.dtype, dtypes.float32))
    qk = qk * (scale if scale is not None else 1 / math.sqrt(self.shape[-1]))
    if is_causal:
      if attn_mask is not None: raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
      L, S = qk.shape[-2:]
      attn_mask = Tensor.arange(L, device=self.device).reshape(L, 1) >= Tensor.arange(S, device=self.device).reshape(1, S)
    if attn_mask is not None:
      if attn_mask.dtype == dtypes.bool: attn_mask = attn_mask.where(0.0, -math.inf)
      qk = qk + attn_mask
    return qk.cast(self.dtype).softmax(-1).dropout(dropout_p) @ value

"""The op table: ONNX op name -> a function of (inputs..., attributes as keywords) built from tg_core.Tensor methods.

An entry is a function, or {since_version: function} where an op's semantics changed between opsets. Inputs an op
needs as Python values (Reshape's shape, Slice's starts, ...) are listed in PY_CONST_INPUTS: the runner passes them as
lists from the host-folded constants. Attributes and inputs that moved between opsets share one keyword (e.g. `axes`)."""
from __future__ import annotations
import functools
import math
from typing import Any, Callable, Sequence

import numpy as np

from tg_core import Tensor, dtypes
from tg_core.dtype import DType
from tg_onnx.errors import OnnxNodeError, OnnxUnsupportedOpError
from tg_onnx.runner import ONNX_DTYPES, onnx_dtype, to_tensor

Op = Callable[..., Any]
OPS: dict[str, Op | dict[int, Op]] = {}
ML_OPS: dict[str, Op | dict[int, Op]] = {}
PREVIEW_OPS: dict[str, Op | dict[int, Op]] = {}
TRAINING_OPS: dict[str, Op | dict[int, Op]] = {}
TABLES = {"ai.onnx": OPS, "ai.onnx.ml": ML_OPS, "ai.onnx.preview": PREVIEW_OPS, "ai.onnx.preview.training": TRAINING_OPS}

# input positions an op reads as Python values
PY_CONST_INPUTS: dict[str, tuple[int, ...]] = {
  "Reshape": (1,), "Expand": (1,), "Slice": (1, 2, 3, 4), "Tile": (1,), "ConstantOfShape": (0,), "Unsqueeze": (1,),
  "Squeeze": (1,), "Split": (1,), "Pad": (1, 2, 3), "Resize": (1, 2, 3), "Upsample": (1,), "TopK": (1,), "OneHot": (1,), "CenterCropPad": (1,),
  "NonMaxSuppression": (2, 3, 4), "Trilu": (1,), "MaxUnpool": (2,), "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,),
  "ReduceProd": (1,), "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,), "ReduceLogSumExp": (1,), "ReduceSumSquare": (1,),
  "CumSum": (1,), "CumProd": (1,), "BlackmanWindow": (0,), "HannWindow": (0,), "HammingWindow": (0,), "DFT": (1, 2), "STFT": (1, 3),
  "MelWeightMatrix": (0, 1, 2, 3, 4), "Col2Im": (1, 2), "AffineGrid": (1,), "SequenceAt": (1,), "SequenceInsert": (2,), "SequenceErase": (1,),
  "SplitToSequence": (1,), "Compress": (1,), "ReverseSequence": (1,), "EyeLike": (), "Einsum": (), "ConstantFill": (0,),
}

def register(name: str, table: dict | None = None, since: int | None = None, ctx: bool = False) -> Callable[[Op], Op]:
  def deco(fn: Op) -> Op:
    if ctx: fn.needs_ctx = True  # type: ignore[attr-defined]
    t = OPS if table is None else table
    if since is None: t[name] = fn
    else:
      entry = t.setdefault(name, {})
      assert isinstance(entry, dict)
      entry[since] = fn
    return fn
  return deco

def lookup(domain: str, op: str, opset: int) -> Op | None:
  entry = TABLES.get(domain, {}).get(op)
  if entry is None or callable(entry): return entry
  versions = [v for v in entry if v <= opset]
  return entry[max(versions)] if versions else entry[min(entry)]

# *** helpers ***

def _axis(axis: int, ndim: int) -> int:
  if not -max(ndim, 1) <= axis < max(ndim, 1): raise OnnxNodeError(f"axis {axis} is out of range for a tensor of rank {ndim}")
  return axis + ndim if axis < 0 else axis

def _axes(axes: Sequence[int] | int | None, ndim: int) -> list[int]:
  if axes is None: return []
  return sorted({_axis(a, ndim) for a in ([axes] if isinstance(axes, int) else axes)})

def _const(value: Any, like: Tensor) -> Tensor: return Tensor(value, dtype=like.dtype, device=like.device)

def _bcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
  n = max(len(s) for s in shapes)
  padded = [(1,) * (n - len(s)) + tuple(s) for s in shapes]
  out = []
  for dims in zip(*padded):
    big = {d for d in dims if d != 1}
    if len(big) > 1: raise OnnxNodeError(f"shapes {shapes} are not broadcastable")
    out.append(big.pop() if big else (0 if 0 in dims else 1))
  return tuple(out)

def _pads_onnx_to_tg(pads: Sequence[int], nspatial: int) -> list[int]:
  """ONNX pads (begin_0..begin_n, end_0..end_n) -> the flat (left, right, top, bottom) order conv2d/pad take (last dim first)."""
  return [p for i in reversed(range(nspatial)) for p in (pads[i], pads[i + nspatial])]

def _auto_pad(in_shape: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int], auto_pad: str) -> list[int]:
  if auto_pad == "VALID": return [0] * (2 * len(kernel))
  pads_b, pads_e = [], []
  for i, k, s, d in zip(in_shape, kernel, strides, dilations):
    total = max((math.ceil(i / s) - 1) * s + (k - 1) * d + 1 - i, 0)
    small, big = total // 2, total - total // 2
    pads_b.append(small if auto_pad == "SAME_UPPER" else big)
    pads_e.append(big if auto_pad == "SAME_UPPER" else small)
  return pads_b + pads_e

def _conv_pads(x: Tensor, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int], pads: Sequence[int] | None, auto_pad: str) -> list[int]:
  if auto_pad not in ("NOTSET", ""): return _auto_pad(x.shape[2:], kernel, strides, dilations, auto_pad)
  return list(pads) if pads is not None else [0] * (2 * len(kernel))

# *** elementwise ***

def _unary(name: str, fn: Callable[[Tensor], Tensor]) -> None: OPS[name] = lambda x: fn(x)
for _n, _f in {"Abs": Tensor.abs, "Acos": Tensor.acos, "Acosh": Tensor.acosh, "Asin": Tensor.asin, "Asinh": Tensor.asinh, "Atan": Tensor.atan,
               "Atanh": Tensor.atanh, "Ceil": Tensor.ceil, "Cos": Tensor.cos, "Cosh": Tensor.cosh, "Erf": Tensor.erf, "Exp": Tensor.exp,
               "Floor": Tensor.floor, "Log": Tensor.log, "Neg": Tensor.neg, "Reciprocal": Tensor.reciprocal, "Relu": Tensor.relu,
               "Sigmoid": Tensor.sigmoid, "Sin": Tensor.sin, "Sinh": Tensor.sinh, "Sqrt": Tensor.sqrt, "Tan": Tensor.tan, "Tanh": Tensor.tanh,
               "Softsign": Tensor.softsign, "Mish": Tensor.mish, "Round": Tensor.round, "IsNaN": Tensor.isnan, "Sign": Tensor.sign,
               "Not": Tensor.logical_not, "BitwiseNot": Tensor.bitwise_not}.items(): _unary(_n, _f)

def _float_unary(fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
  return lambda x: fn(x) if dtypes.is_float(x.dtype) else fn(x.float()).cast(x.dtype)
OPS["Softplus"] = lambda x: x.softplus()
OPS["Identity"] = lambda x: x
OPS["Elu"] = lambda x, alpha=1.0: x.elu(alpha)
OPS["Celu"] = lambda x, alpha=1.0: x.celu(alpha)
OPS["Selu"] = lambda x, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875: x.selu(alpha, gamma)
OPS["LeakyRelu"] = lambda x, alpha=0.01: x.leaky_relu(alpha)
OPS["HardSigmoid"] = lambda x, alpha=0.2, beta=0.5: (x * alpha + beta).clip(0, 1)
OPS["HardSwish"] = lambda x: x * (x * (1 / 6) + 0.5).clip(0, 1)
OPS["ThresholdedRelu"] = lambda x, alpha=1.0: (x > alpha).where(x, 0)
OPS["Shrink"] = lambda x, bias=0.0, lambd=0.5: (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)).cast(x.dtype)
OPS["Swish"] = lambda x, alpha=1.0: x * (x * alpha).sigmoid()
def _prelu(x: Tensor, slope: Tensor) -> Tensor:
  if slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1] and slope.shape[0] != x.shape[-1]:  # opset < 7: per channel
    slope = slope.reshape(-1, *[1] * (x.ndim - 2))
  return (x < 0).where(x * slope, x).cast(x.dtype)
OPS["PRelu"] = _prelu
OPS["IsInf"] = lambda x, detect_negative=1, detect_positive=1: x.isinf(bool(detect_positive), bool(detect_negative))
OPS["Gelu"] = lambda x, approximate="none": x.gelu() if approximate == "tanh" else x * 0.5 * (1 + (x * (1 / math.sqrt(2))).erf())

def _binop(fn: Callable[[Tensor, Tensor], Tensor]) -> Op:
  def op(a: Tensor, b: Tensor, broadcast: int = 1, axis: int | None = None) -> Tensor:
    if axis is not None and b.ndim < a.ndim:  # opset < 7 broadcast with an axis: align b at `axis`
      b = b.reshape(*b.shape, *[1] * (a.ndim - _axis(axis, a.ndim) - b.ndim))
    return fn(a, b)
  return op
OPS["Add"] = _binop(lambda a, b: (a + b).cast(a.dtype))
OPS["Sub"] = _binop(lambda a, b: (a - b).cast(a.dtype))
OPS["Mul"] = _binop(lambda a, b: (a * b).cast(a.dtype))
def _div(a: Tensor, b: Tensor) -> Tensor:
  return a.div(b, rounding_mode="trunc") if dtypes.is_int(a.dtype) else (a / b).cast(a.dtype)
OPS["Div"] = _binop(_div)
def _pow(a: Tensor, b: Tensor, ctx: Any = None) -> Tensor:
  if dtypes.is_int(a.dtype) and dtypes.is_int(b.dtype): return a.pow(b).cast(a.dtype)
  # a constant exponent of 2 (x**2 in a norm or a magnitude) is a multiply: exact, and cheap where a kernel recomputes it
  if dtypes.is_float(a.dtype) and ctx is not None and (e := ctx.const(1)) is not None and e.size == 1 and e.ndim <= a.ndim and float(e.reshape(-1)[0]) == 2.0:
    return (a * a).cast(a.dtype)
  return a.cast(dtypes.float64 if a.dtype == dtypes.float64 or b.dtype == dtypes.float64 else
                (a.dtype if dtypes.is_float(a.dtype) else dtypes.float32)).pow(b.cast(dtypes.float64 if b.dtype == dtypes.float64 else
                                                                                  (b.dtype if dtypes.is_float(b.dtype) else dtypes.float32))).cast(a.dtype)
@register("Pow", ctx=True)
def _pow_op(a: Tensor, b: Tensor, broadcast: int = 1, axis: int | None = None, ctx: Any = None) -> Tensor:
  return _binop(functools.partial(_pow, ctx=ctx))(a, b, broadcast, axis)
OPS["Equal"] = _binop(lambda a, b: a == b)
OPS["Less"] = _binop(lambda a, b: a < b)
OPS["LessOrEqual"] = _binop(lambda a, b: a <= b)
OPS["Greater"] = _binop(lambda a, b: a > b)
OPS["GreaterOrEqual"] = _binop(lambda a, b: a >= b)
OPS["And"] = _binop(lambda a, b: a.bitwise_and(b))
OPS["Or"] = _binop(lambda a, b: a.bitwise_or(b))
OPS["Xor"] = _binop(lambda a, b: a.bitwise_xor(b))
OPS["BitwiseAnd"] = _binop(lambda a, b: a.bitwise_and(b))
OPS["BitwiseOr"] = _binop(lambda a, b: a.bitwise_or(b))
OPS["BitwiseXor"] = _binop(lambda a, b: a.bitwise_xor(b))
OPS["BitShift"] = lambda x, y, direction: x.lshift(y) if direction == "LEFT" else x.rshift(y)
def _mod(a: Tensor, b: Tensor, fmod: int = 0) -> Tensor:
  if fmod: return a.fmod(b) if dtypes.is_float(a.dtype) else (a - a.div(b, rounding_mode="trunc") * b).cast(a.dtype)
  if dtypes.is_float(a.dtype):  # numpy's mod: the remainder takes the divisor's sign; x mod inf keeps x when the signs agree
    r = a.fmod(b)
    r = ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)
    return (b.isinf() & ~a.isinf()).where(((a == 0) | ((a < 0) == (b < 0))).where(a, b), r).cast(a.dtype)
  return a.mod(b)
OPS["Mod"] = _mod
OPS["Where"] = lambda c, x, y: c.where(x, y).cast(x.dtype)
def _variadic(fn: Callable[[Tensor, Tensor], Tensor]) -> Op: return lambda *xs: functools.reduce(fn, xs)
OPS["Max"] = _variadic(lambda a, b: a.maximum(b))
OPS["Min"] = _variadic(lambda a, b: a.minimum(b))
OPS["Sum"] = _variadic(lambda a, b: a + b)
OPS["Mean"] = lambda *xs: (functools.reduce(lambda a, b: a + b, xs) / len(xs)).cast(xs[0].dtype)

def _clip(x: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
  if min is not None: x = x.maximum(min.cast(x.dtype) if isinstance(min, Tensor) else _const(min, x))
  if max is not None: x = x.minimum(max.cast(x.dtype) if isinstance(max, Tensor) else _const(max, x))
  return x
OPS["Clip"] = _clip

def _cast(x: Tensor, to: int, saturate: int = 1, round_mode: str = "up") -> Tensor:
  dt = onnx_dtype(to)
  if dt == x.dtype: return x
  if dt in dtypes.fp8s and not saturate and dtypes.is_float(x.dtype):  # out of range: NaN for e4m3fn (no inf), inf for e5m2
    over = 464.0 if dt == dtypes.fp8e4m3 else 61440.0
    x = (x.abs() >= over).where(math.nan if dt == dtypes.fp8e4m3 else x.sign() * math.inf, x)
  if dt in dtypes.fp8s and saturate and dtypes.is_float(x.dtype):
    lim = 448.0 if dt == dtypes.fp8e4m3 else 57344.0
    x = x.isinf().where(x.sign() * lim, x.clip(-lim, lim)) if dt == dtypes.fp8e4m3 else (x.abs() < math.inf).where(x.clip(-lim, lim), x.clip(-lim, lim))
  return x.cast(dt)
OPS["Cast"] = _cast
OPS["CastLike"] = lambda x, like, saturate=1, round_mode="up": _cast(x, next(k for k, v in ONNX_DTYPES.items() if v == like.dtype), saturate)
def _bitcast(x: Tensor, to: int) -> Tensor:
  dt = onnx_dtype(to)
  if dt.itemsize != x.dtype.itemsize: raise OnnxUnsupportedOpError(f"BitCast between element sizes {x.dtype.itemsize} and {dt.itemsize}")
  return x.bitcast(dt)
OPS["BitCast"] = _bitcast

# *** reductions ***

def _reduce(fn: Callable[[Tensor, list[int]], Tensor]) -> Op:
  def op(x: Tensor, axes: Any = None, keepdims: int = 1, noop_with_empty_axes: int = 0) -> Tensor:
    if isinstance(axes, int): axes = [axes]
    if not axes:
      if noop_with_empty_axes: return x
      axes = list(range(x.ndim))
    ax = _axes(axes, x.ndim)
    ret = fn(x, ax) if ax else x
    return ret.reshape(tuple(1 if i in ax else s for i, s in enumerate(x.shape)) if keepdims else tuple(s for i, s in enumerate(x.shape) if i not in ax))
  return op

def _sum_keep(x: Tensor, ax: list[int]) -> Tensor: return x.sum(ax, dtype=x.dtype)
def _minmax(x: Tensor, ax: list[int], is_max: bool) -> Tensor:
  if any(x.shape[a] == 0 for a in ax):
    return Tensor.full(tuple(s for i, s in enumerate(x.shape) if i not in ax), dtypes.min(x.dtype) if is_max else dtypes.max(x.dtype), dtype=x.dtype,
                       device=x.device)
  if x.dtype == dtypes.bool: return (x.max(ax) if is_max else x.min(ax)).cast(dtypes.bool)
  return x.max(ax) if is_max else x.min(ax)
OPS["ReduceSum"] = _reduce(_sum_keep)
OPS["ReduceMean"] = _reduce(lambda x, ax: x.mean(ax).cast(x.dtype))
OPS["ReduceMax"] = _reduce(lambda x, ax: _minmax(x, ax, True))
OPS["ReduceMin"] = _reduce(lambda x, ax: _minmax(x, ax, False))
OPS["ReduceProd"] = _reduce(lambda x, ax: x.prod(ax, dtype=x.dtype))
OPS["ReduceL1"] = _reduce(lambda x, ax: x.abs().sum(ax, dtype=x.dtype))
OPS["ReduceL2"] = _reduce(lambda x, ax: x.square().sum(ax).sqrt().cast(x.dtype))
OPS["ReduceSumSquare"] = _reduce(lambda x, ax: x.square().sum(ax, dtype=x.dtype))
OPS["ReduceLogSum"] = _reduce(lambda x, ax: x.sum(ax).log().cast(x.dtype))
OPS["ReduceLogSumExp"] = _reduce(lambda x, ax: x.logsumexp(ax).cast(x.dtype) if all(x.shape[a] for a in ax) else x.sum(ax).log())

def _arg(is_max: bool) -> Op:
  def op(x: Tensor, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Tensor:
    ax = _axis(axis, x.ndim)
    if select_last_index:
      ret = x.flip(ax).argmax(ax, keepdim=bool(keepdims)) if is_max else x.flip(ax).argmin(ax, keepdim=bool(keepdims))
      return (x.shape[ax] - 1 - ret).cast(dtypes.int64)
    return (x.argmax(ax, keepdim=bool(keepdims)) if is_max else x.argmin(ax, keepdim=bool(keepdims))).cast(dtypes.int64)
  return op
OPS["ArgMax"], OPS["ArgMin"] = _arg(True), _arg(False)

def _cum(is_sum: bool) -> Op:
  def op(x: Tensor, axis: Any, exclusive: int = 0, reverse: int = 0) -> Tensor:
    ax = _axis(int(axis if not isinstance(axis, list) else axis[0]), x.ndim)
    if reverse: x = x.flip(ax)
    if exclusive:
      x = x.pad(tuple((1, 0) if i == ax else None for i in range(x.ndim)), value=0 if is_sum else 1).shrink(
        tuple((0, x.shape[ax]) if i == ax else None for i in range(x.ndim)))
    ret = (x.cumsum(ax) if is_sum else x.cumprod(ax)).cast(x.dtype)
    return ret.flip(ax) if reverse else ret
  return op
OPS["CumSum"], OPS["CumProd"] = _cum(True), _cum(False)

def _softmax_old(fn: Callable[[Tensor, int], Tensor]) -> Op:
  def op(x: Tensor, axis: int = 1) -> Tensor:
    ax = _axis(axis, x.ndim)
    flat = x.reshape(int(np.prod(x.shape[:ax])), -1) if x.numel() else x
    return fn(flat, 1).reshape(x.shape) if x.numel() else x
  return op
OPS["Softmax"] = {1: _softmax_old(lambda x, a: x.softmax(a)), 13: lambda x, axis=-1: x.softmax(axis)}
OPS["LogSoftmax"] = {1: _softmax_old(lambda x, a: x.log_softmax(a)), 13: lambda x, axis=-1: x.log_softmax(axis)}
def _hardmax(x: Tensor, axis: int) -> Tensor:
  return x.argmax(axis, keepdim=True)._one_hot_along_dim(x.shape[axis], axis).cast(x.dtype) if x.ndim else x.ones_like()
OPS["Hardmax"] = {1: _softmax_old(_hardmax), 13: lambda x, axis=-1: _hardmax(x, _axis(axis, x.ndim))}

# *** shapes and movement ***

OPS["Shape"] = lambda x, start=0, end=None: Tensor(np.array(x.shape[slice(start, end)], dtype=np.int64), device=x.device)
OPS["Size"] = lambda x: Tensor(np.array(int(np.prod(x.shape)), dtype=np.int64), device=x.device)
def _reshape(x: Tensor, shape: Any = None, allowzero: int = 0) -> Tensor:
  shape = [int(s) for s in shape]
  new = [x.shape[i] if s == 0 and not allowzero else s for i, s in enumerate(shape)]
  if -1 in new:
    known = int(np.prod([s for s in new if s != -1]))
    new[new.index(-1)] = int(np.prod(x.shape)) // known if known else 0
  return x.reshape(new)
OPS["Reshape"] = _reshape
def _flatten(x: Tensor, axis: int = 1) -> Tensor:
  ax = axis + x.ndim if axis < 0 else axis
  return x.reshape(int(np.prod(x.shape[:ax])), int(np.prod(x.shape[ax:])))
OPS["Flatten"] = _flatten
def _expand(x: Tensor, shape: Any) -> Tensor: return x.expand(_bcast_shapes(x.shape, tuple(int(s) for s in shape)))
OPS["Expand"] = _expand
def _squeeze(x: Tensor, axes: Any = None) -> Tensor:
  ax = _axes(axes, x.ndim) if axes is not None else [i for i, s in enumerate(x.shape) if s == 1]
  return x.reshape([s for i, s in enumerate(x.shape) if i not in ax])
OPS["Squeeze"] = _squeeze
def _unsqueeze(x: Tensor, axes: Any) -> Tensor:
  if not isinstance(axes, list): axes = [axes]
  n = x.ndim + len(axes)
  ax = _axes(axes, n)
  it = iter(x.shape)
  return x.reshape([1 if i in ax else next(it) for i in range(n)])
OPS["Unsqueeze"] = _unsqueeze
OPS["Transpose"] = lambda x, perm=None: x.permute(perm if perm is not None else list(range(x.ndim))[::-1])
def _concat(*xs: Tensor, axis: int) -> Tensor:
  ax = _axis(axis, xs[0].ndim)
  xs_ = [x for x in xs if x.shape[ax] != 0] or [xs[0]]
  return xs_[0].cat(*xs_[1:], dim=ax) if len(xs_) > 1 else xs_[0]
OPS["Concat"] = _concat
def _split(x: Tensor, split: Any = None, axis: int = 0, num_outputs: int | None = None, ctx: Any = None) -> tuple[Tensor, ...]:
  ax = _axis(axis, x.ndim)
  n = num_outputs if num_outputs is not None else len(ctx.node.output)
  if split is None:
    size = math.ceil(x.shape[ax] / n)
    split = [size] * (x.shape[ax] // size) + ([x.shape[ax] % size] if x.shape[ax] % size else [])
    if num_outputs is None: split = [x.shape[ax] // n] * n
  out, start = [], 0
  for s in split:
    out.append(x.shrink(tuple((start, start + s) if i == ax else None for i in range(x.ndim))))
    start += s
  return tuple(out)
register("Split", ctx=True)(_split)
def _slice(x: Tensor, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> Tensor:
  axes = list(range(len(starts))) if axes is None else [_axis(a, x.ndim) for a in axes]
  steps = [1] * len(starts) if steps is None else steps
  sl: list[slice] = [slice(None)] * x.ndim
  for st, en, ax, sp in zip(starts, ends, axes, steps):
    sl[ax] = slice(*slice(int(st), int(en), int(sp)).indices(x.shape[ax]))
  return _slice_view(x, sl)
def _slice_view(x: Tensor, sl: list[slice]) -> Tensor:
  for ax, s in enumerate(sl):
    start, stop, step = s.start or 0, s.stop if s.stop is not None else x.shape[ax], s.step or 1
    if step > 0: stop = max(stop, start)
    else:
      if stop >= start: x = x.shrink(tuple((0, 0) if i == ax else None for i in range(x.ndim)))
      else:
        x = x.shrink(tuple((stop + 1, start + 1) if i == ax else None for i in range(x.ndim))).flip(ax)
        n = start - stop
        if -step != 1: x = _stride(x, ax, -step, n)
      continue
    x = x.shrink(tuple((start, stop) if i == ax else None for i in range(x.ndim)))
    if step != 1: x = _stride(x, ax, step, stop - start)
  return x
def _stride(x: Tensor, ax: int, step: int, n: int) -> Tensor:
  out = math.ceil(n / step)
  x = x.pad(tuple((0, out * step - n) if i == ax else None for i in range(x.ndim)))
  x = x.reshape(*x.shape[:ax], out, step, *x.shape[ax + 1:])
  return x.shrink(tuple((0, 1) if i == ax + 1 else None for i in range(x.ndim))).reshape(*x.shape[:ax], out, *x.shape[ax + 2:])
OPS["Slice"] = {1: lambda x, starts, ends, axes=None: _slice(x, starts, ends, axes), 10: _slice}
def _tile(x: Tensor, repeats: Any) -> Tensor: return x.repeat([int(r) for r in repeats]) if x.ndim else x
OPS["Tile"] = _tile
def _range(start: Tensor, limit: Tensor, delta: Tensor, ctx: Any) -> Tensor:
  s, l, d = (ctx.host(i).reshape(-1)[:1] for i in range(3))
  return to_tensor(np.arange(s[0], l[0], d[0]).astype(s.dtype), ctx.device)
register("Range", ctx=True)(_range)
def _gather(x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
  ax = _axis(axis, x.ndim)
  idx = (indices < 0).where(indices + x.shape[ax], indices).cast(dtypes.int32)
  return x[(slice(None),) * ax + (idx,)]
OPS["Gather"] = _gather
def _gather_elements(x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
  ax = _axis(axis, x.ndim)
  return x.gather(ax, (indices < 0).where(indices + x.shape[ax], indices))
OPS["GatherElements"] = _gather_elements
def _gather_nd(x: Tensor, indices: Tensor, batch_dims: int = 0) -> Tensor:
  b, k = batch_dims, indices.shape[-1]
  idx = (indices < 0).where(indices + Tensor(np.array(x.shape[b:b + k], dtype=np.int64), device=x.device), indices)
  bshape = x.shape[:b]
  nb = int(np.prod(bshape))
  xf = x.reshape(nb, *x.shape[b:])
  inner = idx.shape[b:-1]
  idxf = idx.reshape(nb, -1, k)
  strides = [int(np.prod(x.shape[b + i + 1:b + k])) for i in range(k)]
  flat_idx = (idxf * Tensor(np.array(strides, dtype=np.int64), device=x.device)).sum(-1) if k else idxf.sum(-1)
  xg = xf.reshape(nb, int(np.prod(x.shape[b:b + k])), *x.shape[b + k:])
  bidx = Tensor.arange(nb, device=x.device).reshape(nb, 1).expand(nb, flat_idx.shape[1])
  out = xg[bidx, flat_idx.cast(dtypes.int32)]
  return out.reshape(*bshape, *inner, *x.shape[b + k:])
OPS["GatherND"] = _gather_nd

def _scatter_elements(x: Tensor, indices: Tensor, updates: Tensor, axis: int = 0, reduction: str = "none") -> Tensor:
  ax = _axis(axis, x.ndim)
  idx = (indices < 0).where(indices + x.shape[ax], indices)
  if reduction == "none": return x.scatter(ax, idx, updates)
  red = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[reduction]
  return x.scatter_reduce(ax, idx, updates, red)  # type: ignore[arg-type]
OPS["ScatterElements"] = _scatter_elements
OPS["Scatter"] = _scatter_elements
def _scatter_nd(x: Tensor, indices: Tensor, updates: Tensor, reduction: str = "none") -> Tensor:
  k = indices.shape[-1]
  strides = [int(np.prod(x.shape[i + 1:k])) for i in range(k)]
  flat = (indices * Tensor(np.array(strides, dtype=np.int64), device=x.device)).sum(-1).reshape(-1)
  rest = x.shape[k:]
  xf = x.reshape(int(np.prod(x.shape[:k])), *rest)
  uf = updates.reshape(-1, *rest)
  n = flat.shape[0]
  # one-hot over the flattened index: (n, positions), then combine updates into each position
  oh = flat.reshape(n, 1)._one_hot_along_dim(xf.shape[0], 1).reshape(n, xf.shape[0], *[1] * len(rest))
  upd = uf.reshape(n, 1, *rest)
  hit = oh.sum(0).cast(dtypes.bool)
  if reduction == "none":
    # later updates win, like the reference's sequential loop
    last = (oh * Tensor.arange(1, n + 1, device=x.device).reshape(n, *[1] * (oh.ndim - 1))).max(0)
    sel = (oh * Tensor.arange(1, n + 1, device=x.device).reshape(n, *[1] * (oh.ndim - 1))) == last
    val = (sel & oh.cast(dtypes.bool)).where(upd, 0).sum(0, dtype=x.dtype)
    return hit.where(val, xf).reshape(x.shape)
  if reduction == "add": return (xf + oh.cast(dtypes.bool).where(upd, 0).sum(0, dtype=x.dtype)).reshape(x.shape)
  if reduction == "mul": return (xf * oh.cast(dtypes.bool).where(upd, 1).prod(0, dtype=x.dtype)).reshape(x.shape)
  if reduction == "max": return hit.where(xf.maximum(oh.cast(dtypes.bool).where(upd, dtypes.min(x.dtype)).max(0)), xf).reshape(x.shape)
  if reduction == "min": return hit.where(xf.minimum(oh.cast(dtypes.bool).where(upd, dtypes.max(x.dtype)).min(0)), xf).reshape(x.shape)
  raise OnnxUnsupportedOpError(f"ScatterND reduction {reduction!r}")
OPS["ScatterND"] = _scatter_nd

def _pad(x: Tensor, pads: Any = None, constant_value: Any = None, axes: Any = None, mode: str = "constant", paddings: Any = None, value: float = 0.0) -> Tensor:
  pads = pads if pads is not None else paddings
  if constant_value is None: constant_value = value
  elif isinstance(constant_value, list): constant_value = constant_value[0] if constant_value else 0
  ax = list(range(x.ndim)) if axes is None else [_axis(a, x.ndim) for a in axes]
  full = [(0, 0)] * x.ndim
  for i, a in enumerate(ax): full[a] = (int(pads[i]), int(pads[i + len(ax)]))
  tmode = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}[mode]
  if tmode == "constant": return x.pad(full, value=constant_value)
  return x.pad(full, mode=tmode)
OPS["Pad"] = {1: lambda x, pads=None, mode="constant", value=0.0, paddings=None: _pad(x, pads, value, None, mode, paddings), 11: _pad}

def _constant(value: Any = None, value_float: Any = None, value_floats: Any = None, value_int: Any = None, value_ints: Any = None,
              value_string: Any = None, value_strings: Any = None, sparse_value: Any = None, ctx: Any = None) -> Tensor:
  if value is not None: return to_tensor(value, ctx.device)
  if sparse_value is not None: return to_tensor(sparse_value, ctx.device)
  if value_float is not None: return to_tensor(np.array(value_float, dtype=np.float32), ctx.device)
  if value_floats is not None: return to_tensor(np.array(value_floats, dtype=np.float32), ctx.device)
  if value_int is not None: return to_tensor(np.array(value_int, dtype=np.int64), ctx.device)
  if value_ints is not None: return to_tensor(np.array(value_ints, dtype=np.int64), ctx.device)
  raise OnnxUnsupportedOpError("Constant with a string value (tg has no string tensors)")
register("Constant", ctx=True)(_constant)
def _constant_of_shape(shape: Any, value: Any = None, ctx: Any = None) -> Tensor:
  v = np.zeros(1, np.float32) if value is None else value
  return to_tensor(np.full([int(s) for s in shape], v.reshape(-1)[0], dtype=v.dtype), ctx.device) if int(np.prod(shape)) <= 1 << 16 else \
    Tensor.full(tuple(int(s) for s in shape), v.reshape(-1)[0].item(), dtype=to_tensor(v.reshape(-1)[:1], ctx.device).dtype, device=ctx.device)
register("ConstantOfShape", ctx=True)(_constant_of_shape)
def _eyelike(x: Tensor, dtype: int | None = None, k: int = 0) -> Tensor:
  dt = onnx_dtype(dtype) if dtype is not None else x.dtype
  n, m = x.shape
  r, c = Tensor.arange(n, device=x.device).reshape(n, 1), Tensor.arange(m, device=x.device).reshape(1, m)
  return (c - r == k).cast(dt)
OPS["EyeLike"] = _eyelike
def _trilu(x: Tensor, k: Any = None, upper: int = 1) -> Tensor:
  kk = int(k) if k is not None else 0
  return x.triu(kk) if upper else x.tril(kk)
OPS["Trilu"] = _trilu
def _onehot(indices: Tensor, depth: Any, values: Tensor, axis: int = -1) -> Tensor:
  d = int(depth[0] if isinstance(depth, list) else depth)
  ax = _axis(axis, indices.ndim + 1)
  idx = indices.cast(dtypes.int64)
  idx = (idx < 0).where(idx + d, idx)
  idx = idx.unsqueeze(ax)
  rng = Tensor.arange(d, device=indices.device).cast(dtypes.int64).reshape(*[d if i == ax else 1 for i in range(indices.ndim + 1)])
  return (idx == rng).where(values[1], values[0])
OPS["OneHot"] = _onehot
def _depth_to_space(x: Tensor, blocksize: int, mode: str = "DCR") -> Tensor:
  b, c, h, w = x.shape
  if mode == "DCR": return x.reshape(b, blocksize, blocksize, c // blocksize ** 2, h, w).permute(0, 3, 4, 1, 5, 2).reshape(b, -1, h * blocksize, w * blocksize)
  return x.reshape(b, c // blocksize ** 2, blocksize, blocksize, h, w).permute(0, 1, 4, 2, 5, 3).reshape(b, -1, h * blocksize, w * blocksize)
OPS["DepthToSpace"] = _depth_to_space
def _space_to_depth(x: Tensor, blocksize: int, mode: str = "DCR") -> Tensor:
  b, c, h, w = x.shape
  if mode == "CRD": return x.reshape(b, c, h // blocksize, blocksize, w // blocksize, blocksize).permute(0, 1, 3, 5, 2, 4).reshape(
    b, -1, h // blocksize, w // blocksize)
  return x.reshape(b, c, h // blocksize, blocksize, w // blocksize, blocksize).permute(0, 3, 5, 1, 2, 4).reshape(b, -1, h // blocksize, w // blocksize)
OPS["SpaceToDepth"] = _space_to_depth
def _nonzero(x: Tensor) -> Tensor:
  arr = x.numpy()
  return Tensor(np.array(np.nonzero(arr), dtype=np.int64).reshape(arr.ndim, -1), device=x.device)
OPS["NonZero"] = _nonzero
def _compress(x: Tensor, condition: Any, axis: int | None = None) -> Tensor:
  cond = np.asarray(condition, dtype=bool).reshape(-1)
  if axis is None: x, ax = x.reshape(-1), 0
  else: ax = _axis(axis, x.ndim)
  keep = np.nonzero(cond[:x.shape[ax]])[0]
  return x[(slice(None),) * ax + (Tensor(keep.astype(np.int32), device=x.device),)]
OPS["Compress"] = _compress
def _reverse_sequence(x: Tensor, sequence_lens: Any, batch_axis: int = 1, time_axis: int = 0) -> Tensor:
  T = x.shape[time_axis]
  lens = Tensor(np.array(sequence_lens, dtype=np.int64), device=x.device)
  t = Tensor.arange(T, device=x.device).cast(dtypes.int64)
  shp = [1] * x.ndim
  shp[time_axis], shp_b = T, [1] * x.ndim
  shp_b[batch_axis] = x.shape[batch_axis]
  tt, ll = t.reshape(shp), lens.reshape(shp_b)
  src = (tt < ll).where(ll - 1 - tt, tt)
  return x.gather(time_axis, src.expand(x.shape))
OPS["ReverseSequence"] = _reverse_sequence
def _center_crop_pad(x: Tensor, shape: Any, axes: Any = None) -> Tensor:
  ax = list(range(x.ndim)) if axes is None else [_axis(a, x.ndim) for a in axes]
  for a, s in zip(ax, shape):
    cur = x.shape[a]
    if cur > s:
      b = (cur - s) // 2
      x = x.shrink(tuple((b, b + s) if i == a else None for i in range(x.ndim)))
    elif cur < s:
      b = (s - cur) // 2
      x = x.pad(tuple((b, s - cur - b) if i == a else None for i in range(x.ndim)))
  return x
OPS["CenterCropPad"] = _center_crop_pad
def _unique(x: Tensor, axis: int | None = None, sorted: int = 1) -> tuple[Tensor, ...]:  # noqa: A002
  from tg_onnx.runner import to_numpy
  arr = to_numpy(x)
  if axis is None:
    flat = arr.reshape(-1)
    y, idx, inv, cnt = np.unique(flat, return_index=True, return_inverse=True, return_counts=True)
    if not sorted:
      order = np.argsort(idx)
      y, idx, cnt = y[order], idx[order], cnt[order]
      inv = np.argsort(order)[inv]
  else:
    ax = _axis(axis, arr.ndim)
    y, idx, inv, cnt = np.unique(arr, axis=ax, return_index=True, return_inverse=True, return_counts=True)
    if not sorted:
      order = np.argsort(idx)
      y, idx, cnt = np.take(y, order, axis=ax), idx[order], cnt[order]
      inv = np.argsort(order)[inv.reshape(-1)]
  d = x.device
  return (to_tensor(np.ascontiguousarray(y), d), to_tensor(idx.astype(np.int64), d), to_tensor(inv.reshape(-1).astype(np.int64), d),
          to_tensor(cnt.astype(np.int64), d))
OPS["Unique"] = _unique

# *** matmul, conv, pooling, normalization ***

def _operand(t: Tensor, reuse: Any) -> Tensor:
  """A matmul or conv operand whose elements are each read `reuse` times: realized first when it is still a computation, so its
  producers (the previous layer's bias, normalization, activation) run once, as that layer's epilogue, not `reuse` times."""
  return t if (isinstance(reuse, int) and reuse <= 1) or t.is_realized() else t.contiguous()
def _matmul(a: Tensor, b: Tensor) -> Tensor:
  if a.ndim == 1 and b.ndim == 1: return (a * b).sum(dtype=a.dtype)
  return _operand(a, b.shape[-1] if b.ndim > 1 else 1).matmul(_operand(b, a.shape[-2] if a.ndim > 1 else 1)).cast(a.dtype)
OPS["MatMul"] = _matmul
def _gemm(a: Tensor, b: Tensor, c: Tensor | None = None, alpha: float = 1.0, beta: float = 1.0, transA: int = 0, transB: int = 0,
          broadcast: int = 0) -> Tensor:
  a, b = (a.T if transA else a), (b.T if transB else b)
  ret = _operand(a, b.shape[-1]).matmul(_operand(b, a.shape[-2]))
  if alpha != 1.0: ret = ret * alpha
  if c is not None: ret = ret + (c * beta if beta != 1.0 else c)
  return ret.cast(a.dtype)
OPS["Gemm"] = _gemm
OPS["Einsum"] = lambda *xs, equation: Tensor.einsum(equation.replace(" ", ""), *xs).cast(xs[0].dtype)
OPS["Det"] = lambda x: to_tensor(np.linalg.det(x.numpy()).astype(x.numpy().dtype), x.device)

def _conv(x: Tensor, w: Tensor, b: Tensor | None = None, auto_pad: str = "NOTSET", dilations: Any = None, group: int = 1, kernel_shape: Any = None,
          pads: Any = None, strides: Any = None) -> Tensor:
  ns = w.ndim - 2
  kernel = w.shape[2:]
  strides_ = strides or [1] * ns
  dil = dilations or [1] * ns
  p = _conv_pads(x, kernel, strides_, dil, pads, auto_pad)
  x = _operand(x, math.prod(w.shape[2:]) * (w.shape[0] // group))  # each input element meets every tap of every output channel of its group
  return x.conv2d(w, b, groups=group, stride=tuple(strides_), dilation=tuple(dil), padding=_pads_onnx_to_tg(p, ns))
OPS["Conv"] = _conv
def _conv_transpose(x: Tensor, w: Tensor, b: Tensor | None = None, auto_pad: str = "NOTSET", dilations: Any = None, group: int = 1,
                    kernel_shape: Any = None, output_padding: Any = None, output_shape: Any = None, pads: Any = None, strides: Any = None) -> Tensor:
  ns = w.ndim - 2
  kernel = w.shape[2:]
  s = strides or [1] * ns
  d = dilations or [1] * ns
  op = output_padding or [0] * ns
  in_sp = x.shape[2:]
  full_len = [st * (i - 1) + o + ((k - 1) * dd + 1) for st, i, o, k, dd in zip(s, in_sp, op, kernel, d)]
  if pads is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):  # the onnx reference's split of the total padding
    out = output_shape[-ns:] if output_shape is not None else [i * st for i, st in zip(in_sp, s)]
    total = [f - t for f, t in zip(full_len, out)]
    pb = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]
    p = pb + [t - b_ for t, b_ in zip(total, pb)]
  elif pads is None and output_shape is not None:  # explicit output shape, no pads: the result starts at 0 and is cut/padded at the end
    p = [0] * ns + [f - t for f, t in zip(full_len, output_shape[-ns:])]
  else: p = list(pads) if pads is not None else [0] * (2 * ns)
  # tg's conv_transpose2d takes symmetric-per-dim padding via flat pads; negative total pads grow the output
  pb, pe = p[:ns], p[ns:]
  if group == 1 and list(kernel) == list(s) and all(dd == 1 for dd in d): ret = _conv_transpose_tiles(x, w)
  else: ret = x.conv_transpose2d(w, None, groups=group, stride=tuple(s), dilation=tuple(d), padding=0, output_padding=0)
  full = [(-a, -e + o) for a, e, o in zip(pb, pe, op)]
  ret = ret.pad(((0, 0), (0, 0), *full))
  return ret if b is None else ret + b.reshape(1, -1, *[1] * ns)
OPS["ConvTranspose"] = _conv_transpose
def _conv_transpose_tiles(x: Tensor, w: Tensor) -> Tensor:
  """ConvTranspose whose kernel equals its stride (no dilation, one group): each input pixel writes its own kernel-sized output tile,
  x[n, :, i, j] @ w[:, co, a, b] at (i * k + a, j * k + b): one reduce over the input channels. The general path convolves a
  zero-stuffed input, where (k / s)^ns of the taps multiply zeros (PP-OCR det's 2x2 stride-2 upsampling: 4x the work)."""
  ns, (n, cin), sp, (cout, *kernel) = w.ndim - 2, x.shape[:2], x.shape[2:], w.shape[1:]
  prod = x.reshape(n, cin, *[1] * (1 + ns), *sp) * w.reshape(1, cin, cout, *kernel, *[1] * ns)
  tiles = prod.sum(1, dtype=x.dtype)  # (n, cout, *kernel, *spatial)
  return tiles.permute(0, 1, *[i for k in range(ns) for i in (2 + ns + k, 2 + k)]).reshape(n, cout, *[i * k for i, k in zip(sp, kernel)])

def _pool_common(x: Tensor, kernel_shape: Sequence[int], strides: Any, dilations: Any, pads: Any, auto_pad: str) -> tuple:
  ns = len(kernel_shape)
  s = strides or [1] * ns
  d = dilations or [1] * ns
  p = _conv_pads(x, kernel_shape, s, d, pads, auto_pad)
  return ns, s, d, p

def _ceil_extra(x: Tensor, kernel: Sequence[int], s: Sequence[int], d: Sequence[int], p: list[int], ceil_mode: int) -> list[int]:
  """End padding so the output size is ONNX's: floor or ceil of (i + pads - dk) / s + 1; a ceil window must start inside input or begin pad."""
  ns = len(kernel)
  extra = []
  for i, (sz, k, st, dd) in enumerate(zip(x.shape[2:], kernel, s, d)):
    dk = (k - 1) * dd + 1
    tot = sz + p[i] + p[i + ns]
    o = (math.ceil if ceil_mode else math.floor)((tot - dk) / st) + 1
    if ceil_mode and (o - 1) * st >= sz + p[i]: o -= 1
    extra.append(max((o - 1) * st + dk - tot, 0))
  return extra

def _pool(x: Tensor, kernel_shape: Any, strides: Any, dilations: Any, pads: Any, auto_pad: str, ceil_mode: int, fill: Any,
          reduce: Callable[[Tensor, tuple[int, ...]], Tensor]) -> tuple[Tensor, list[int], list[int]]:
  ns, s, d, p = _pool_common(x, kernel_shape, strides, dilations, pads, auto_pad)
  extra = _ceil_extra(x, kernel_shape, s, d, p, ceil_mode)
  padded = x.pad(((0, 0), (0, 0), *[(p[i], p[i + ns] + extra[i]) for i in range(ns)]), value=fill)
  win = padded._pool(tuple(kernel_shape), tuple(s), tuple(d))
  return reduce(win, tuple(range(-ns, 0))), p, extra

def _maxpool(x: Tensor, kernel_shape: Any, auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: Any = None, pads: Any = None,
             storage_order: int = 0, strides: Any = None) -> tuple[Tensor, Tensor]:
  fill = dtypes.min(x.dtype)
  ret, p, extra = _pool(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, fill, lambda w, ax: w.max(ax))
  ns = len(kernel_shape)
  sp = x.shape[2:]
  # indices: flat index over (N, C, *spatial) of the max, like onnxruntime (row-major, or column-major with storage_order=1)
  if storage_order:
    strides_sp = [int(np.prod(sp[:i])) for i in range(ns)]
  else: strides_sp = [int(np.prod(sp[i + 1:])) for i in range(ns)]
  pos = sum(Tensor.arange(n, device=x.device).reshape(*[n if j == i else 1 for j in range(ns)]) * st for i, (n, st) in enumerate(zip(sp, strides_sp)))
  pos = pos.reshape(1, 1, *sp).expand(x.shape)  # type: ignore[union-attr]
  posw = pos.pad(((0, 0), (0, 0), *[(p[i], p[i + ns] + extra[i]) for i in range(ns)]), value=-1)._pool(tuple(kernel_shape), tuple(strides or [1] * ns),
                                                                                                     tuple(dilations or [1] * ns))
  xw = x.pad(((0, 0), (0, 0), *[(p[i], p[i + ns] + extra[i]) for i in range(ns)]), value=fill)._pool(tuple(kernel_shape), tuple(strides or [1] * ns),
                                                                                                   tuple(dilations or [1] * ns))
  ax = tuple(range(-ns, 0))
  big = int(np.prod(x.shape)) + 1
  first = (xw == ret.reshape(*ret.shape, *[1] * ns)).where(posw, big).min(ax)
  nc = Tensor.arange(x.shape[0] * x.shape[1], device=x.device).reshape(x.shape[0], x.shape[1], *[1] * ns) * int(np.prod(sp))
  return ret, (first + nc).cast(dtypes.int64)
OPS["MaxPool"] = _maxpool
def _avgpool(x: Tensor, kernel_shape: Any, auto_pad: str = "NOTSET", ceil_mode: int = 0, count_include_pad: int = 0, dilations: Any = None,
             pads: Any = None, strides: Any = None) -> Tensor:
  ns = len(kernel_shape)
  total, p, extra = _pool(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, 0, lambda w, ax: w.sum(ax))
  if count_include_pad:
    ones = x.ones_like().pad(((0, 0), (0, 0), *[(p[i], p[i + ns]) for i in range(ns)]), value=1.0)
    cnt = ones.pad(((0, 0), (0, 0), *[(0, e) for e in extra]))._pool(tuple(kernel_shape), tuple(strides or [1] * ns), tuple(dilations or [1] * ns)).sum(
      tuple(range(-ns, 0)))
  else: cnt, _, _ = _pool(x.ones_like(), kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, 0, lambda w, ax: w.sum(ax))
  return (total / cnt).cast(x.dtype)
OPS["AveragePool"] = _avgpool
def _lppool(x: Tensor, kernel_shape: Any, auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: Any = None, pads: Any = None, p: int = 2,
            strides: Any = None) -> Tensor:
  ret, _, _ = _pool(x.abs().pow(p), kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, 0, lambda w, ax: w.sum(ax))
  return ret.pow(1.0 / p).cast(x.dtype)
OPS["LpPool"] = _lppool
OPS["GlobalAveragePool"] = lambda x: x.mean(tuple(range(2, x.ndim)), keepdim=True).cast(x.dtype)
OPS["GlobalMaxPool"] = lambda x: x.max(tuple(range(2, x.ndim)), keepdim=True)
OPS["GlobalLpPool"] = lambda x, p=2: x.abs().pow(p).sum(tuple(range(2, x.ndim)), keepdim=True).pow(1.0 / p)
def _max_unpool(x: Tensor, indices: Tensor, output_shape: Any = None, kernel_shape: Any = None, pads: Any = None, strides: Any = None) -> Tensor:
  ns = len(kernel_shape)
  s = strides or [1] * ns
  p = pads or [0] * (2 * ns)
  if output_shape is None:
    output_shape = [*x.shape[:2], *[(i - 1) * st - (p[j] + p[j + ns]) + k for j, (i, st, k) in enumerate(zip(x.shape[2:], s, kernel_shape))]]
  total = int(np.prod(output_shape))
  flat = indices.reshape(-1)
  oh = flat.reshape(-1, 1)._one_hot_along_dim(total, 1)
  return oh.where(x.reshape(-1, 1), 0).sum(0, dtype=x.dtype).reshape(*[int(o) for o in output_shape])
OPS["MaxUnpool"] = _max_unpool

def _batchnorm(x: Tensor, scale: Tensor, b: Tensor, mean: Tensor, var: Tensor, epsilon: float = 1e-5, momentum: float = 0.9, training_mode: int = 0,
               spatial: int = 1, is_test: int = 0, consumed_inputs: Any = None) -> Any:
  shp = (1, -1, *[1] * (x.ndim - 2))
  if training_mode:
    ax = tuple(i for i in range(x.ndim) if i != 1)
    bm, bv = x.mean(ax), x.var(ax, correction=0)
    y = (x - bm.reshape(shp)) * (bv.reshape(shp) + epsilon).rsqrt() * scale.reshape(shp) + b.reshape(shp)
    return y.cast(x.dtype), (mean * momentum + bm * (1 - momentum)).cast(mean.dtype), (var * momentum + bv * (1 - momentum)).cast(var.dtype)
  return ((x - mean.reshape(shp)) * (var.reshape(shp) + epsilon).rsqrt() * scale.reshape(shp) + b.reshape(shp)).cast(x.dtype)
OPS["BatchNormalization"] = _batchnorm
def _instancenorm(x: Tensor, scale: Tensor, b: Tensor, epsilon: float = 1e-5) -> Tensor:
  ax = tuple(range(2, x.ndim))
  shp = (1, -1, *[1] * (x.ndim - 2))
  m, v = x.mean(ax, keepdim=True), x.var(ax, keepdim=True, correction=0)
  return ((x - m) * (v + epsilon).rsqrt() * scale.reshape(shp) + b.reshape(shp)).cast(x.dtype)
OPS["InstanceNormalization"] = _instancenorm
def _layernorm(x: Tensor, scale: Tensor, b: Tensor | None = None, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1) -> tuple[Tensor, ...]:
  ax = tuple(range(_axis(axis, x.ndim), x.ndim))
  xf = x.cast(dtypes.float32) if stash_type == 1 and x.dtype != dtypes.float64 else x
  m = xf.mean(ax, keepdim=True)
  inv = ((xf - m).square().mean(ax, keepdim=True) + epsilon).rsqrt()
  y = ((xf - m) * inv).cast(x.dtype) * scale
  if b is not None: y = y + b
  return y.cast(x.dtype), m, inv
OPS["LayerNormalization"] = _layernorm
def _groupnorm(x: Tensor, scale: Tensor, bias: Tensor, num_groups: int, epsilon: float = 1e-5, stash_type: int = 1, ctx: Any = None) -> Tensor:
  n, c = x.shape[:2]
  xg = x.reshape(n, num_groups, -1).cast(dtypes.float32 if x.dtype != dtypes.float64 else x.dtype)
  m, v = xg.mean(-1, keepdim=True), xg.var(-1, keepdim=True, correction=0)
  y = ((xg - m) * (v + epsilon).rsqrt()).reshape(x.shape).cast(x.dtype)
  shp = (1, -1, *[1] * (x.ndim - 2))
  if ctx.opset < 21:  # opset 18: scale and bias are per group
    scale, bias = scale.repeat_interleave(c // num_groups), bias.repeat_interleave(c // num_groups)
  return (y * scale.reshape(shp) + bias.reshape(shp)).cast(x.dtype)
register("GroupNormalization", ctx=True)(_groupnorm)
def _rmsnorm(x: Tensor, scale: Tensor, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1) -> Tensor:
  ax = tuple(range(_axis(axis, x.ndim), x.ndim))
  xf = x.cast(dtypes.float32) if stash_type == 1 and x.dtype != dtypes.float64 else x
  return ((xf * (xf.square().mean(ax, keepdim=True) + epsilon).rsqrt()).cast(x.dtype) * scale).cast(x.dtype)
OPS["RMSNormalization"] = _rmsnorm
def _lrn(x: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> Tensor:
  c = x.shape[1]
  sq = x.square().reshape(x.shape[0], 1, c, -1)
  pad_b, pad_a = (size - 1) // 2, size - 1 - (size - 1) // 2
  s = sq.pad(((0, 0), (0, 0), (pad_b, pad_a), (0, 0)))._pool((size, 1), 1).sum((-2, -1)).reshape(x.shape)
  return (x / (bias + alpha / size * s).pow(beta)).cast(x.dtype)
OPS["LRN"] = _lrn
def _mvn(x: Tensor, axes: Any = None) -> Tensor:
  ax = tuple(_axes(axes if axes is not None else [0, 2, 3], x.ndim))
  m = x.mean(ax, keepdim=True)
  return ((x - m) / ((x - m).square().mean(ax, keepdim=True).sqrt() + 1e-9)).cast(x.dtype)
OPS["MeanVarianceNormalization"] = _mvn
def _lpnorm(x: Tensor, axis: int = -1, p: int = 2) -> Tensor:
  n = x.abs().sum(axis, keepdim=True) if p == 1 else x.square().sum(axis, keepdim=True).sqrt()
  return (x / n).cast(x.dtype)
OPS["LpNormalization"] = _lpnorm
def _dropout(x: Tensor, ratio: Any = 0.5, training_mode: Any = None, seed: int | None = None, is_test: int = 0) -> tuple[Tensor, Tensor]:
  train = training_mode is not None and bool(training_mode.numpy()) if isinstance(training_mode, Tensor) else bool(training_mode)
  r = float(ratio.numpy()) if isinstance(ratio, Tensor) else float(ratio)
  if not train or r == 0: return x, x.ones_like().cast(dtypes.bool)
  if seed is not None: Tensor.manual_seed(seed)
  mask = Tensor.rand(*x.shape, device=x.device) >= r
  return (mask.where(x, 0) / (1 - r)).cast(x.dtype), mask
OPS["Dropout"] = _dropout

# *** losses ***

def _nll(x: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int | None = None, reduction: str = "mean") -> Tensor:
  c = x.shape[1]
  t = target
  if ignore_index is not None: t = (target == ignore_index).where(0, target)
  oh = t.unsqueeze(1)._one_hot_along_dim(c, 1)
  picked = -(oh.where(x, 0).sum(1))
  w = weight[t] if weight is not None else picked.ones_like()
  if ignore_index is not None: w = (target == ignore_index).where(0, w)
  loss = picked * w
  if reduction == "none": return loss.cast(x.dtype)
  if reduction == "sum": return loss.sum().cast(x.dtype)
  return (loss.sum() / w.sum()).cast(x.dtype)
OPS["NegativeLogLikelihoodLoss"] = _nll
def _sce(scores: Tensor, labels: Tensor, weights: Tensor | None = None, ignore_index: int | None = None, reduction: str = "mean") -> tuple[Tensor, Tensor]:
  lp = scores.log_softmax(1)
  return _nll(lp, labels, weights, ignore_index, reduction), lp
OPS["SoftmaxCrossEntropyLoss"] = _sce

# *** sort, select ***

def _topk(x: Tensor, k: Any, axis: int = -1, largest: int = 1, sorted: int = 1) -> tuple[Tensor, Tensor]:  # noqa: A002
  kk = int(k[0] if isinstance(k, list) else k)
  ax = _axis(axis, x.ndim)
  # stable: among equal values the lower index comes first, like onnxruntime
  from tg_onnx.runner import to_numpy
  arr = to_numpy(x)
  key = arr.astype(np.uint8) if arr.dtype == bool else arr
  if largest: key = (key.max() - key) if np.issubdtype(key.dtype, np.unsignedinteger) else -key.astype(np.float64 if key.dtype.itemsize < 8 else key.dtype)
  idx = np.argsort(key, axis=ax, kind="stable")
  idx = np.take(idx, np.arange(kk), axis=ax)
  vals = np.take_along_axis(arr, idx, axis=ax)
  return to_tensor(np.ascontiguousarray(vals), x.device), to_tensor(idx.astype(np.int64), x.device)
OPS["TopK"] = {1: lambda x, k, axis=-1: _topk(x, k, axis), 10: _topk}

# *** resize ***

def _resize(x: Tensor, roi: Any = None, scales: Any = None, sizes: Any = None, antialias: int = 0, axes: Any = None,
            coordinate_transformation_mode: str = "half_pixel", cubic_coeff_a: float = -0.75, exclude_outside: int = 0,
            extrapolation_value: float = 0.0, keep_aspect_ratio_policy: str = "stretch", mode: str = "nearest",
            nearest_mode: str = "round_prefer_floor") -> Tensor:
  if antialias: raise OnnxUnsupportedOpError("Resize with antialias=1")
  n = x.ndim
  ax = list(range(n)) if axes is None else [_axis(a, n) for a in axes]
  sc = [1.0] * n
  out = list(x.shape)
  if sizes:
    if keep_aspect_ratio_policy != "stretch":
      ratios = [sizes[i] / x.shape[a] for i, a in enumerate(ax)]
      r = min(ratios) if keep_aspect_ratio_policy == "not_larger" else max(ratios)
      for a in ax: sc[a], out[a] = r, int(x.shape[a] * r + 0.5)
    else:
      for i, a in enumerate(ax): out[a], sc[a] = int(sizes[i]), sizes[i] / x.shape[a]
  elif scales:
    for i, a in enumerate(ax): sc[a], out[a] = float(scales[i]), int(math.floor(x.shape[a] * float(scales[i])))
  roi_full = [0.0] * n + [1.0] * n
  if roi and coordinate_transformation_mode == "tf_crop_and_resize":
    for i, a in enumerate(ax): roi_full[a], roi_full[a + n] = roi[i], roi[i + len(ax)]
  for a in range(n):
    if out[a] == x.shape[a] and sc[a] == 1.0 and coordinate_transformation_mode != "tf_crop_and_resize": continue
    x = _resize_axis(x, a, out[a], sc[a], roi_full[a], roi_full[a + n], mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
                     exclude_outside, extrapolation_value)
  return x

def _src_coords(out_len: int, in_len: int, scale: float, r0: float, r1: float, ctm: str) -> np.ndarray:
  o = np.arange(out_len, dtype=np.float64)
  if ctm == "half_pixel": return (o + 0.5) / scale - 0.5
  if ctm == "half_pixel_symmetric":
    adj = out_len / (scale * in_len)
    center = in_len / 2
    offset = center * (1 - adj)
    return offset + (o + 0.5) / scale - 0.5
  if ctm == "pytorch_half_pixel": return (o + 0.5) / scale - 0.5 if out_len > 1 else np.zeros_like(o)
  if ctm == "align_corners": return o * (in_len - 1) / (out_len - 1) if out_len > 1 else np.zeros_like(o)
  if ctm == "asymmetric": return o / scale
  if ctm == "tf_half_pixel_for_nn": return (o + 0.5) / scale
  if ctm == "tf_crop_and_resize":
    return r0 * (in_len - 1) + o * (r1 - r0) * (in_len - 1) / (out_len - 1) if out_len > 1 else np.full_like(o, 0.5 * (r0 + r1) * (in_len - 1))
  raise OnnxUnsupportedOpError(f"Resize coordinate_transformation_mode {ctm!r}")

def _resize_axis(x: Tensor, a: int, out_len: int, scale: float, r0: float, r1: float, mode: str, ctm: str, nearest_mode: str, cubic_a: float,
                 exclude_outside: int, extrapolation_value: float) -> Tensor:
  """Resampling along one axis as a (out_len, in_len) weight matrix built on the host and applied with a matmul."""
  in_len = x.shape[a]
  src = _src_coords(out_len, in_len, scale, r0, r1, ctm)
  w = np.zeros((out_len, in_len), dtype=np.float64)
  if mode == "nearest":
    if nearest_mode == "round_prefer_floor": idx = np.where(src - np.floor(src) == 0.5, np.floor(src), np.round(src))
    elif nearest_mode == "round_prefer_ceil": idx = np.where(src - np.floor(src) == 0.5, np.ceil(src), np.round(src))
    elif nearest_mode == "floor": idx = np.floor(src)
    else: idx = np.ceil(src)
    idx = np.clip(idx, 0, in_len - 1).astype(np.int64)
    w[np.arange(out_len), idx] = 1
  elif mode == "linear":
    s = np.clip(src, 0, in_len - 1) if ctm != "tf_crop_and_resize" else src
    lo = np.floor(s).astype(np.int64)
    frac = s - lo
    for o in range(out_len):
      l0, l1 = np.clip(lo[o], 0, in_len - 1), np.clip(lo[o] + 1, 0, in_len - 1)
      w[o, l0] += 1 - frac[o]
      w[o, l1] += frac[o]
  elif mode == "cubic":
    lo = np.floor(src).astype(np.int64)
    t = src - lo
    A = cubic_a
    def k(d: np.ndarray) -> np.ndarray:
      d = np.abs(d)
      return np.where(d <= 1, ((A + 2) * d - (A + 3)) * d * d + 1, np.where(d < 2, ((A * d - 5 * A) * d + 8 * A) * d - 4 * A, 0))
    for o in range(out_len):
      coeffs = [(lo[o] + j, k(t[o] - j)) for j in (-1, 0, 1, 2)]
      if exclude_outside:
        tot = sum(c for i, c in coeffs if 0 <= i < in_len)
        coeffs = [(i, c / tot if 0 <= i < in_len else 0) for i, c in coeffs]
      for i, c in coeffs: w[o, min(max(i, 0), in_len - 1)] += c
  else: raise OnnxUnsupportedOpError(f"Resize mode {mode!r}")
  outside = np.zeros(out_len, dtype=bool)
  if ctm == "tf_crop_and_resize": outside = (src < 0) | (src > in_len - 1)
  w[outside] = 0
  xt = x.transpose(a, -1) if a != x.ndim - 1 else x
  fdt = x.dtype if dtypes.is_float(x.dtype) else dtypes.float32
  wt = Tensor(w.T.astype(np.float64 if fdt == dtypes.float64 else np.float32), device=x.device).cast(fdt)
  ret = xt.cast(fdt) @ wt
  if outside.any(): ret = ret + Tensor(np.where(outside, extrapolation_value, 0).astype(np.float32), device=x.device).cast(fdt)
  if not dtypes.is_float(x.dtype): ret = ret.round() if mode != "nearest" else ret
  ret = ret.cast(x.dtype)
  return ret.transpose(a, -1) if a != x.ndim - 1 else ret
OPS["Resize"] = {10: lambda x, scales, mode="nearest": _resize(x, scales=scales, mode=mode, coordinate_transformation_mode="asymmetric",
                                                               nearest_mode="floor"), 11: _resize}
def _upsample(x: Tensor, scales: Any = None, mode: str = "nearest", height_scale: float | None = None, width_scale: float | None = None) -> Tensor:
  if scales is None: scales = [1.0, 1.0, height_scale, width_scale]
  return _resize(x, scales=scales, mode="linear" if mode in ("linear", "bilinear") else mode, coordinate_transformation_mode="asymmetric",
                 nearest_mode="floor")
OPS["Upsample"] = _upsample

# *** control flow ***

def _read(ctx: Any, t: Tensor) -> np.ndarray:
  """A data-dependent value read back to the host (control flow): the runner stops replaying this model with the JIT."""
  ctx.runner._host_reads += 1
  from tg_onnx.runner import to_numpy
  return to_numpy(t)

def _if(cond: Tensor, then_branch: Any, else_branch: Any, ctx: Any) -> tuple:
  return tuple((then_branch if bool(ctx.host(0).reshape(-1)[0]) else else_branch)())
register("If", ctx=True)(_if)

def _stack(xs: list[Tensor]) -> Tensor: return xs[0].unsqueeze(0) if len(xs) == 1 else Tensor.stack(*xs)

def _loop(M: Tensor | None, cond: Tensor | None, *v_initial: Any, body: Any, ctx: Any) -> tuple:
  trip = int(ctx.host(0).reshape(-1)[0]) if M is not None else None
  keep = bool(ctx.host(1).reshape(-1)[0]) if cond is not None else True
  carried, scans, i = list(v_initial), [], 0
  n_out = len(body.output_names) - 1 - len(v_initial)
  while (trip is None or i < trip) and keep:
    outs = body(Tensor(np.array(i, dtype=np.int64), device=ctx.device), Tensor(np.array(keep), device=ctx.device), *carried)
    carried, scans = outs[1:1 + len(v_initial)], scans + [outs[1 + len(v_initial):]]
    if cond is not None or trip is None: keep = bool(_read(ctx, outs[0]).reshape(-1)[0])
    i += 1
  stacked = [_stack([s[j] for s in scans]) if scans else Tensor.empty(0, device=ctx.device) for j in range(n_out)]
  return tuple(carried + stacked)
register("Loop", ctx=True)(_loop)

def _scan(*inputs: Tensor, body: Any, num_scan_inputs: int, scan_input_axes: Any = None, scan_input_directions: Any = None,
          scan_output_axes: Any = None, scan_output_directions: Any = None, ctx: Any = None) -> tuple:
  if ctx.opset < 9: raise OnnxUnsupportedOpError("Scan of opset 8 (with a batch axis and sequence_lens); re-export with opset >= 9")
  n_state = len(inputs) - num_scan_inputs
  state, xs = list(inputs[:n_state]), inputs[n_state:]
  in_axes = [_axis(a, x.ndim) for a, x in zip(scan_input_axes or [0] * len(xs), xs)]
  in_dirs = scan_input_directions or [0] * len(xs)
  T = xs[0].shape[in_axes[0]]
  n_scan_out = len(body.output_names) - n_state
  outs: list[list[Tensor]] = [[] for _ in range(n_scan_out)]
  for t in range(T):
    sl = [x.shrink(tuple(((T - 1 - t, T - t) if d else (t, t + 1)) if i == a else None for i in range(x.ndim))).squeeze(a)
          for x, a, d in zip(xs, in_axes, in_dirs)]
    res = body(*state, *sl)
    state = res[:n_state]
    for j, y in enumerate(res[n_state:]): outs[j].append(y)
  out_axes, out_dirs = scan_output_axes or [0] * n_scan_out, scan_output_directions or [0] * n_scan_out
  stacked = []
  for j, ys in enumerate(outs):
    if out_dirs[j]: ys = ys[::-1]
    s = _stack(ys)
    a = _axis(out_axes[j], s.ndim)
    stacked.append(s.permute(*range(1, a + 1), 0, *range(a + 1, s.ndim)) if a else s)
  return tuple(state + stacked)
register("Scan", ctx=True)(_scan)

# *** sequences and optionals ***

OPS["SequenceConstruct"] = lambda *xs: list(xs)
OPS["SequenceEmpty"] = lambda dtype=None: []
OPS["SequenceLength"] = lambda seq: Tensor(np.array(len(seq), dtype=np.int64))
def _seq_pos(pos: Any, n: int) -> int:
  p = int(np.asarray(pos).reshape(-1)[0])
  return p + n if p < 0 else p
OPS["SequenceAt"] = lambda seq, pos: seq[_seq_pos(pos, len(seq))]
def _seq_insert(seq: list, t: Tensor, pos: Any = None) -> list:
  p = len(seq) if pos is None else _seq_pos(pos, len(seq))
  return seq[:p] + [t] + seq[p:]
OPS["SequenceInsert"] = _seq_insert
def _seq_erase(seq: list, pos: Any = None) -> list:
  p = len(seq) - 1 if pos is None else _seq_pos(pos, len(seq))
  return seq[:p] + seq[p + 1:]
OPS["SequenceErase"] = _seq_erase
def _concat_from_seq(seq: list, axis: int, new_axis: int = 0) -> Tensor:
  if new_axis: return Tensor.stack(*seq, dim=_axis(axis, seq[0].ndim + 1))
  return _concat(*seq, axis=axis)
OPS["ConcatFromSequence"] = _concat_from_seq
def _split_to_seq(x: Tensor, split: Any = None, axis: int = 0, keepdims: int = 1) -> list:
  ax = _axis(axis, x.ndim)
  if split is None:
    parts = [x.shrink(tuple((i, i + 1) if j == ax else None for j in range(x.ndim))) for i in range(x.shape[ax])]
    return [p.squeeze(ax) for p in parts] if not keepdims else parts
  sizes = [int(split)] * math.ceil(x.shape[ax] / int(split)) if not isinstance(split, list) else [int(s) for s in split]
  if not isinstance(split, list) and x.shape[ax] % int(split): sizes[-1] = x.shape[ax] % int(split)
  out, st = [], 0
  for s in sizes:
    out.append(x.shrink(tuple((st, st + s) if j == ax else None for j in range(x.ndim))))
    st += s
  return out
OPS["SplitToSequence"] = _split_to_seq
def _seq_map(seq: list, *extra: Any, body: Any) -> tuple:
  n_out = len(body.output_names)
  res: list[list] = [[] for _ in range(n_out)]
  for i in range(len(seq)):
    outs = body(seq[i], *[e[i] if isinstance(e, list) else e for e in extra])
    for j, o in enumerate(outs): res[j].append(o)
  return tuple(res)
OPS["SequenceMap"] = _seq_map
OPS["Optional"] = lambda x=None, type=None: x  # noqa: A002
OPS["OptionalHasElement"] = lambda x=None: Tensor(np.array(x is not None))
def _opt_get(x: Any = None) -> Any:
  if x is None: raise OnnxNodeError("OptionalGetElement of an empty optional")
  return x
OPS["OptionalGetElement"] = _opt_get

# *** recurrent ***

def _act(name: str, alpha: float | None, beta: float | None) -> Callable[[Tensor], Tensor]:
  acts: dict[str, Callable[[Tensor], Tensor]] = {
    "Relu": Tensor.relu, "Tanh": Tensor.tanh, "Sigmoid": Tensor.sigmoid, "Softsign": Tensor.softsign, "Softplus": Tensor.softplus,
    "Affine": lambda x: x * (alpha if alpha is not None else 1.0) + (beta or 0.0),
    "LeakyRelu": lambda x: x.leaky_relu(alpha if alpha is not None else 0.01),
    "ThresholdedRelu": lambda x: (x > (alpha if alpha is not None else 1.0)).where(x, 0),
    "ScaledTanh": lambda x: (x * (beta if beta is not None else 1.0)).tanh() * (alpha if alpha is not None else 1.0),
    "HardSigmoid": lambda x: (x * (alpha if alpha is not None else 0.2) + (beta if beta is not None else 0.5)).clip(0, 1),
    "Elu": lambda x: x.elu(alpha if alpha is not None else 1.0)}
  if name not in acts: raise OnnxUnsupportedOpError(f"recurrent activation {name!r}")
  return acts[name]

def _rnn_common(kind: str, X: Tensor, W: Tensor, R: Tensor, B: Tensor | None, sequence_lens: Tensor | None, initial_h: Tensor | None,
                initial_c: Tensor | None, P: Tensor | None, activations: Any, activation_alpha: Any, activation_beta: Any, clip: float | None,
                direction: str, hidden_size: int, layout: int, input_forget: int = 0, linear_before_reset: int = 0) -> tuple:
  if layout: X = X.transpose(0, 1)
  T, bs, _ = X.shape
  nd = 2 if direction == "bidirectional" else 1
  ngates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
  defaults = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[kind]
  acts_names = activations or defaults * nd
  alphas, betas = activation_alpha or [], activation_beta or []
  acts = [_act(n, alphas[i] if i < len(alphas) else None, betas[i] if i < len(betas) else None) for i, n in enumerate(acts_names)]
  H = hidden_size
  if B is None: B = Tensor.zeros(nd, 2 * ngates * H, dtype=X.dtype, device=X.device)
  h0 = initial_h if initial_h is not None else Tensor.zeros(nd, bs, H, dtype=X.dtype, device=X.device)
  c0 = initial_c if initial_c is not None else Tensor.zeros(nd, bs, H, dtype=X.dtype, device=X.device)
  lens = sequence_lens.cast(dtypes.int32).reshape(bs, 1) if sequence_lens is not None else None
  Ys, Hs, Cs = [], [], []
  for d in range(nd):
    rev = direction == "reverse" or d == 1
    f = acts[d * len(defaults):(d + 1) * len(defaults)]
    w, r, b = W[d], R[d], B[d]
    wb, rb = b[:ngates * H], b[ngates * H:]
    xw = X @ w.T + wb  # all timesteps' input projections at once: (T, bs, ngates*H)
    h, c = h0[d], c0[d]
    p = P[d] if P is not None else None
    ys: list[Tensor | None] = [None] * T
    for step in range(T):
      t = T - 1 - step if rev else step
      g = xw[t]
      if kind == "LSTM":
        # realized: the four gates feed both the new state and the output, and each kernel that fused the matmuls would run them again
        gates = (g + h @ r.T + rb).contiguous()
        i_, o_, f_, c_ = (gates[:, k * H:(k + 1) * H] for k in range(4))
        if p is not None: i_, f_ = i_ + p[:H] * c, f_ + p[2 * H:] * c
        if clip is not None: i_, o_, f_, c_ = (x.clip(-clip, clip) for x in (i_, o_, f_, c_))
        i_ = f[0](i_)
        f_ = (1 - i_) if input_forget else f[0](f_)
        cn = f_ * c + i_ * f[1](c_)
        if p is not None: o_ = o_ + p[H:2 * H] * cn
        if clip is not None: o_ = o_.clip(-clip, clip)
        hn = f[0](o_) * f[2](cn)
      elif kind == "GRU":
        gz, gr, gh = (g[:, k * H:(k + 1) * H] for k in range(3))
        rz, rr, rh = (r[k * H:(k + 1) * H] for k in range(3))
        bz, br, bh = (rb[k * H:(k + 1) * H] for k in range(3))
        zz, rr_ = gz + h @ rz.T + bz, gr + h @ rr.T + br
        if clip is not None: zz, rr_ = zz.clip(-clip, clip), rr_.clip(-clip, clip)
        z, rt = f[0](zz), f[0](rr_)
        hh = gh + ((h @ rh.T + bh) * rt if linear_before_reset else (rt * h) @ rh.T + bh)
        if clip is not None: hh = hh.clip(-clip, clip)
        hn, cn = (1 - z) * f[1](hh) + z * h, c
      else:
        a = g + h @ r.T + rb
        if clip is not None: a = a.clip(-clip, clip)
        hn, cn = f[0](a), c
      if lens is not None:
        m = lens > t
        hn, cn = m.where(hn, h), m.where(cn, c)
        ys[t] = m.where(hn, 0)
      else: ys[t] = hn
      # the state is realized between steps: the next step's matmul reads each element of h ngates*H times, and unrealized
      # state chains would grow with the sequence (every step recomputing all the earlier ones)
      h, c = (hn.contiguous(), cn.contiguous() if kind == "LSTM" else cn) if step < T - 1 else (hn, cn)
    Ys.append(Tensor.stack(*ys) if T > 1 else ys[0].unsqueeze(0))  # type: ignore[union-attr,arg-type]
    Hs.append(h)
    Cs.append(c)
  Y = Tensor.stack(*Ys, dim=1).cast(X.dtype)  # (T, nd, bs, H)
  Yh, Yc = Tensor.stack(*Hs).cast(X.dtype), Tensor.stack(*Cs).cast(X.dtype)
  if layout: Y, Yh, Yc = Y.permute(2, 0, 1, 3), Yh.transpose(0, 1), Yc.transpose(0, 1)
  return (Y, Yh, Yc) if kind == "LSTM" else (Y, Yh)

def _rnn_op(kind: str) -> Op:
  def op(X: Tensor, W: Tensor, R: Tensor, B: Tensor | None = None, sequence_lens: Tensor | None = None, initial_h: Tensor | None = None,
         initial_c: Tensor | None = None, P: Tensor | None = None, activation_alpha: Any = None, activation_beta: Any = None, activations: Any = None,
         clip: float | None = None, direction: str = "forward", hidden_size: int | None = None, layout: int = 0, input_forget: int = 0,
         linear_before_reset: int = 0) -> tuple:
    if kind == "GRU": initial_h, initial_c = initial_c if False else initial_h, None
    return _rnn_common(kind, X, W, R, B, sequence_lens, initial_h, initial_c, P, activations, activation_alpha, activation_beta, clip, direction,
                       hidden_size if hidden_size is not None else R.shape[-1], layout, input_forget, linear_before_reset)
  return op
OPS["LSTM"], OPS["GRU"], OPS["RNN"] = _rnn_op("LSTM"), _rnn_op("GRU"), _rnn_op("RNN")

# *** attention ***

def _attention(Q: Tensor, K: Tensor, V: Tensor, attn_mask: Tensor | None = None, past_key: Tensor | None = None, past_value: Tensor | None = None,
               nonpad_kv_seqlen: Tensor | None = None, is_causal: int = 0, kv_num_heads: int | None = None, q_num_heads: int | None = None,
               qk_matmul_output_mode: int = 0, scale: float | None = None, softcap: float = 0.0, softmax_precision: int | None = None,
               left_window_size: int = -1, right_window_size: int = -1) -> tuple:
  """Attention (opset 23+) following the onnx reference: bottom-right causal and window masks offset by the cache, fully masked rows give 0."""
  three_d, out_dt = Q.ndim == 3, Q.dtype
  if Q.dtype == dtypes.float16: Q, K, V = Q.float(), K.float(), V.float()  # like onnxruntime: fp16 attention accumulates in fp32
  if three_d:
    bs, sq = Q.shape[:2]
    Q = Q.reshape(bs, sq, q_num_heads, -1).transpose(1, 2)
    K = K.reshape(bs, K.shape[1], kv_num_heads, -1).transpose(1, 2)
    V = V.reshape(bs, V.shape[1], kv_num_heads, -1).transpose(1, 2)
  if past_key is not None: K = past_key.cast(K.dtype).cat(K, dim=2)
  if past_value is not None: V = past_value.cast(V.dtype).cat(V, dim=2)
  present_k, present_v = K.cast(out_dt), V.cast(out_dt)
  qh, kvh = Q.shape[1], K.shape[1]
  if qh != kvh: K, V = K.repeat_interleave(qh // kvh, dim=1), V.repeat_interleave(qh // kvh, dim=1)
  S, L, dev = Q.shape[-2], K.shape[-2], Q.device
  sc = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(Q.shape[-1]))
  qk = (Q * sc) @ (K * sc).transpose(-1, -2)
  if softcap: qk = (qk / softcap).tanh() * softcap
  ninf = Tensor(-math.inf, dtype=Q.dtype, device=dev)
  bias = Tensor.zeros(S, L, dtype=Q.dtype, device=dev)
  if attn_mask is not None:
    m = attn_mask
    if m.shape[-1] < L: m = m.pad(tuple(None for _ in range(m.ndim - 1)) + ((0, L - m.shape[-1]),), value=False if m.dtype == dtypes.bool else -math.inf)
    bias = bias + (m.where(0, ninf) if m.dtype == dtypes.bool else m.cast(Q.dtype))
  # offset of the causal/window frontier: the cache length, per batch for an external cache
  offset: Tensor | int = past_key.shape[2] if past_key is not None else 0
  if past_key is None and nonpad_kv_seqlen is not None: offset = (nonpad_kv_seqlen.cast(dtypes.int32) - S).reshape(-1, 1, 1, 1)
  i = Tensor.arange(S, device=dev).reshape(S, 1) + offset
  j = Tensor.arange(L, device=dev).reshape(1, L)
  if is_causal: bias = bias + (j <= i).where(0, ninf)
  if left_window_size >= 0: bias = bias + (i - j <= left_window_size).where(0, ninf)
  if right_window_size >= 0: bias = bias + (j - i <= right_window_size).where(0, ninf)
  if nonpad_kv_seqlen is not None: bias = bias + (j.reshape(1, 1, 1, L) < nonpad_kv_seqlen.cast(dtypes.int32).reshape(-1, 1, 1, 1)).where(0, ninf)
  qk_out = qk if qk_matmul_output_mode != 2 else qk + bias
  x = (qk + bias).cast(onnx_dtype(softmax_precision) if softmax_precision is not None else Q.dtype)
  mx = x.max(-1, keepdim=True)
  e = (x - mx.isinf().where(0, mx)).exp()
  tot = e.sum(-1, keepdim=True)
  probs = e / (tot == 0).where(1, tot)
  probs = bias.max(-1, keepdim=True).isinf().where(0, probs)
  if qk_matmul_output_mode == 3: qk_out = probs
  Y = probs.cast(Q.dtype) @ V
  if three_d: Y = Y.transpose(1, 2).reshape(Y.shape[0], S, -1)
  return Y.cast(out_dt), present_k, present_v, qk_out.cast(out_dt)
OPS["Attention"] = _attention

def _rotary(X: Tensor, cos_cache: Tensor, sin_cache: Tensor, position_ids: Tensor | None = None, interleaved: int = 0, num_heads: int = 0,
            rotary_embedding_dim: int = 0) -> Tensor:
  orig = X.shape
  if X.ndim == 4: X = X.transpose(1, 2)  # (B, S, H, hd)
  else: X = X.reshape(orig[0], orig[1], num_heads, -1)
  hd = X.shape[-1]
  rd = rotary_embedding_dim or hd
  xr, xp = X[..., :rd], X[..., rd:]
  if position_ids is not None: cos, sin = cos_cache[position_ids], sin_cache[position_ids]
  else: cos, sin = cos_cache, sin_cache
  cos, sin = cos[..., :rd // 2].unsqueeze(-2), sin[..., :rd // 2].unsqueeze(-2)
  if interleaved: x1, x2 = xr[..., 0::2], xr[..., 1::2]
  else: x1, x2 = xr[..., :rd // 2], xr[..., rd // 2:]
  real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
  rot = Tensor.stack(real, imag, dim=-1).reshape(*real.shape[:-1], rd) if interleaved else real.cat(imag, dim=-1)
  out = rot.cat(xp, dim=-1) if rd < hd else rot
  return (out.transpose(1, 2) if len(orig) == 4 else out.reshape(orig)).cast(X.dtype)
OPS["RotaryEmbedding"] = _rotary

# *** quantization ***

def _qparams(scale: Tensor, zp: Tensor | None, x: Tensor, axis: int, block_size: int) -> tuple[Tensor, Tensor | None]:
  if scale.ndim == 0 or scale.numel() == 1 and x.ndim == 0: return scale, zp
  ax = _axis(axis, x.ndim)
  if block_size:
    scale = scale.repeat_interleave(block_size, dim=ax).shrink(tuple((0, x.shape[ax]) if i == ax else None for i in range(x.ndim)))
    if zp is not None: zp = zp.repeat_interleave(block_size, dim=ax).shrink(tuple((0, x.shape[ax]) if i == ax else None for i in range(x.ndim)))
    return scale, zp
  shp = [x.shape[ax] if i == ax else 1 for i in range(x.ndim)]
  return scale.reshape(shp), zp.reshape(shp) if zp is not None else None

def _saturate(y: Tensor, dt: DType) -> Tensor:
  if dtypes.is_int(dt): return y.clip(dtypes.min(dt), dtypes.max(dt)).cast(dt)
  return _cast(y, next(k for k, v in ONNX_DTYPES.items() if v == dt))

def _ieee_div(a: Tensor, b: Tensor) -> Tensor:
  """a / b rounded like IEEE division (Tensor division multiplies by the reciprocal): float32 goes through float64, so round-half-even
  ties in quantization land where onnxruntime's land."""
  if a.dtype == dtypes.float64: return a / b
  return (a.cast(dtypes.float64) / b.cast(dtypes.float64)).cast(a.dtype)

def _quantize(x: Tensor, y_scale: Tensor, y_zero_point: Tensor | None = None, axis: int = 1, block_size: int = 0, output_dtype: int = 0,
              saturate: int = 1, precision: int = 0) -> Tensor:
  dt = y_zero_point.dtype if y_zero_point is not None else onnx_dtype(output_dtype) if output_dtype else dtypes.uint8
  s, zp = _qparams(y_scale, y_zero_point, x, axis, block_size)
  cdt = dtypes.float32 if x.dtype != dtypes.float64 else dtypes.float64
  y = _ieee_div(x.cast(cdt), s.cast(cdt))
  if dtypes.is_int(dt): y = y.round()
  if zp is not None: y = y + zp.cast(cdt)
  return _saturate(y, dt)
OPS["QuantizeLinear"] = _quantize
def _dequantize(x: Tensor, x_scale: Tensor, x_zero_point: Tensor | None = None, axis: int = 1, block_size: int = 0, output_dtype: int = 0) -> Tensor:
  s, zp = _qparams(x_scale, x_zero_point, x, axis, block_size)
  xf = x.cast(dtypes.float32)
  if zp is not None: xf = xf - zp.cast(dtypes.float32)
  out = onnx_dtype(output_dtype) if output_dtype else x_scale.dtype
  return (xf * s.cast(dtypes.float32)).cast(out)
OPS["DequantizeLinear"] = _dequantize
def _dyn_quantize(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
  mx, mn = x.max().maximum(0), x.min().minimum(0)
  scale = (mx - mn) / 255
  zp = (0 - _ieee_div(mn, scale)).round().clip(0, 255)
  y = (_ieee_div(x, scale).round() + zp).clip(0, 255)
  return y.cast(dtypes.uint8), scale.cast(x.dtype), zp.cast(dtypes.uint8)
OPS["DynamicQuantizeLinear"] = _dyn_quantize
def _zp_sub(x: Tensor, zp: Tensor | None, row: bool) -> Tensor:
  xi = x.cast(dtypes.int32)
  if zp is None: return xi
  z = zp.cast(dtypes.int32)
  if z.ndim == 1 and z.numel() > 1 and row: z = z.reshape(-1, 1)
  return xi - z
OPS["MatMulInteger"] = lambda A, B, a_zero_point=None, b_zero_point=None: _zp_sub(A, a_zero_point, True).matmul(_zp_sub(B, b_zero_point, False)).cast(
  dtypes.int32)
def _conv_integer(x: Tensor, w: Tensor, x_zero_point: Tensor | None = None, w_zero_point: Tensor | None = None, **kw: Any) -> Tensor:
  xi = _zp_sub(x, x_zero_point, False)
  wz = w_zero_point.cast(dtypes.int32).reshape(-1, *[1] * (w.ndim - 1)) if w_zero_point is not None and w_zero_point.ndim else w_zero_point
  wi = w.cast(dtypes.int32) - (wz if wz is not None else 0)
  if x_zero_point is not None and kw.get("pads"):  # padding must be the zero point, i.e. 0 after the subtraction: pad explicitly
    pass
  return _conv(xi, wi, None, **kw).cast(dtypes.int32)
OPS["ConvInteger"] = _conv_integer
def _requant(acc: Tensor, scale: Tensor, y_scale: Tensor, y_zp: Tensor | None) -> Tensor:
  y = (acc.cast(dtypes.float32) * (scale / y_scale.cast(dtypes.float32))).round()
  if y_zp is not None: y = y + y_zp.cast(dtypes.float32)
  return _saturate(y, y_zp.dtype if y_zp is not None else dtypes.uint8)
def _qlinear_matmul(a: Tensor, a_scale: Tensor, a_zp: Tensor, b: Tensor, b_scale: Tensor, b_zp: Tensor, y_scale: Tensor, y_zp: Tensor) -> Tensor:
  af = (a.cast(dtypes.float32) - a_zp.cast(dtypes.float32).reshape(*a_zp.shape, *([1] if a_zp.ndim == 1 and a_zp.numel() > 1 else [])))
  bf = b.cast(dtypes.float32) - b_zp.cast(dtypes.float32)
  acc = af @ bf
  sa = a_scale.cast(dtypes.float32).reshape(-1, 1) if a_scale.ndim == 1 and a_scale.numel() > 1 else a_scale.cast(dtypes.float32)
  return _requant(acc, sa * b_scale.cast(dtypes.float32), y_scale, y_zp)
OPS["QLinearMatMul"] = _qlinear_matmul
def _qlinear_conv(x: Tensor, x_scale: Tensor, x_zp: Tensor, w: Tensor, w_scale: Tensor, w_zp: Tensor, y_scale: Tensor, y_zp: Tensor,
                  B: Tensor | None = None, **kw: Any) -> Tensor:
  xf = x.cast(dtypes.float32) - x_zp.cast(dtypes.float32)
  wz = w_zp.cast(dtypes.float32).reshape(-1, *[1] * (w.ndim - 1)) if w_zp.ndim and w_zp.numel() > 1 else w_zp.cast(dtypes.float32)
  wf = w.cast(dtypes.float32) - wz
  acc = _conv(xf, wf, None, **kw)
  if B is not None: acc = acc + B.cast(dtypes.float32).reshape(1, -1, *[1] * (x.ndim - 2))
  ws = w_scale.cast(dtypes.float32).reshape(1, -1, *[1] * (x.ndim - 2)) if w_scale.ndim and w_scale.numel() > 1 else w_scale.cast(dtypes.float32)
  return _requant(acc, x_scale.cast(dtypes.float32) * ws, y_scale, y_zp)
OPS["QLinearConv"] = _qlinear_conv

# *** detection, sampling ***

def _nms(boxes: Tensor, scores: Tensor, max_output_boxes_per_class: Any = None, iou_threshold: Any = None, score_threshold: Any = None,
         center_point_box: int = 0) -> Tensor:
  """Host NMS (the output size depends on the data, like onnxruntime's CPU kernel)."""
  b, s = boxes.numpy().astype(np.float64), scores.numpy().astype(np.float64)
  mx = int(np.asarray(max_output_boxes_per_class).reshape(-1)[0]) if max_output_boxes_per_class is not None and np.size(max_output_boxes_per_class) else 0
  iou_t = float(np.asarray(iou_threshold).reshape(-1)[0]) if iou_threshold is not None and np.size(iou_threshold) else 0.0
  st = float(np.asarray(score_threshold).reshape(-1)[0]) if score_threshold is not None and np.size(score_threshold) else None
  if center_point_box:
    cx, cy, w, h = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    b = np.stack([cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2], -1)
  y1, x1 = np.minimum(b[..., 0], b[..., 2]), np.minimum(b[..., 1], b[..., 3])
  y2, x2 = np.maximum(b[..., 0], b[..., 2]), np.maximum(b[..., 1], b[..., 3])
  out = []
  for bi in range(s.shape[0]):
    for ci in range(s.shape[1]):
      sc = s[bi, ci]
      order = [i for i in np.argsort(-sc, kind="stable") if st is None or sc[i] > st]
      keep: list[int] = []
      for i in order:
        if len(keep) >= mx: break
        ok = True
        for j in keep:
          iw = max(0.0, min(x2[bi, i], x2[bi, j]) - max(x1[bi, i], x1[bi, j]))
          ih = max(0.0, min(y2[bi, i], y2[bi, j]) - max(y1[bi, i], y1[bi, j]))
          inter = iw * ih
          union = (x2[bi, i] - x1[bi, i]) * (y2[bi, i] - y1[bi, i]) + (x2[bi, j] - x1[bi, j]) * (y2[bi, j] - y1[bi, j]) - inter
          if union > 0 and inter / union > iou_t:
            ok = False
            break
        if ok: keep.append(i)
      out += [[bi, ci, i] for i in keep]
  return Tensor(np.array(out, dtype=np.int64).reshape(-1, 3), device=boxes.device)
OPS["NonMaxSuppression"] = _nms

def _grid_sample(x: Tensor, grid: Tensor, align_corners: int = 0, mode: str = "linear", padding_mode: str = "zeros") -> Tensor:
  mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
  N, C, *sp = x.shape
  nd = len(sp)
  out_sp = grid.shape[1:-1]
  P = int(np.prod(out_sp))
  g = grid.reshape(N, P, nd).cast(dtypes.float32)
  taps_per_dim = []
  for d in range(nd):
    size = sp[nd - 1 - d]  # grid's last dim is (x, y, z): x indexes the last spatial dim
    c = g[:, :, d]
    pos = ((c + 1) / 2 * (size - 1)) if align_corners else ((c + 1) * size - 1) / 2
    if padding_mode == "border": pos = pos.clip(0, size - 1)
    elif padding_mode == "reflection": pos = _reflect(pos, size, bool(align_corners))
    if mode == "nearest":
      i0 = pos.round() if True else pos
      taps = [(i0, pos.ones_like())]
    elif mode == "linear":
      f = pos.floor()
      taps = [(f, 1 - (pos - f)), (f + 1, pos - f)]
    else:
      f = pos.floor()
      taps = [(f + j, _cubic_weight(pos - f - j)) for j in (-1, 0, 1, 2)]
    taps_per_dim.append((size, taps))
  xf = x.reshape(N, C, -1).cast(dtypes.float32)
  total: Tensor | None = None
  import itertools
  for combo in itertools.product(*[range(len(t)) for _, t in taps_per_dim]):
    flat, w, valid = None, None, None
    stride = 1
    for d, ti in enumerate(combo):
      size, taps = taps_per_dim[d]
      idx, wt = taps[ti]
      ok = (idx >= 0) & (idx <= size - 1)
      idxc = idx.clip(0, size - 1)
      if padding_mode != "zeros" and mode == "cubic": ok = ok.ones_like().cast(dtypes.bool)
      flat = idxc * stride if flat is None else flat + idxc * stride
      w = wt if w is None else w * wt
      valid = ok if valid is None else valid & ok
      stride *= size
    assert flat is not None and w is not None and valid is not None
    vals = xf.gather(2, flat.cast(dtypes.int32).reshape(N, 1, P).expand(N, C, P))
    contrib = valid.reshape(N, 1, P).where(vals * w.reshape(N, 1, P), 0)
    total = contrib if total is None else total + contrib
  assert total is not None
  return total.reshape(N, C, *out_sp).cast(x.dtype)
def _cubic_weight(d: Tensor, A: float = -0.75) -> Tensor:
  a = d.abs()
  return (a <= 1).where(((A + 2) * a - (A + 3)) * a * a + 1, (a < 2).where(((A * a - 5 * A) * a + 8 * A) * a - 4 * A, 0))
def _reflect(pos: Tensor, size: int, align_corners: bool) -> Tensor:
  lo, hi = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
  span = hi - lo
  if span <= 0: return pos.zeros_like()
  d = (pos - lo).abs()
  flips = (d / span).floor()
  extra = d - flips * span
  r = (flips % 2 == 0).where(lo + extra, hi - extra)
  return r.clip(0, size - 1)
OPS["GridSample"] = _grid_sample

def _affine_grid(theta: Tensor, size: Any, align_corners: int = 0) -> Tensor:
  N, C, *sp = [int(s) for s in size]
  nd = len(sp)
  lins = []
  for s in sp:
    if align_corners: lin = np.linspace(-1, 1, s) if s > 1 else np.zeros(1)
    else: lin = (np.arange(s) * 2 + 1) / s - 1
    lins.append(lin)
  mesh = np.meshgrid(*lins, indexing="ij")  # D,H,W order
  base = np.stack([*mesh[::-1], np.ones_like(mesh[0])], -1).reshape(-1, nd + 1).astype(np.float32)
  b = Tensor(base, device=theta.device).cast(theta.dtype)
  out = b.reshape(1, -1, nd + 1) @ theta.transpose(1, 2)
  return out.reshape(N, *sp, nd)
OPS["AffineGrid"] = _affine_grid

# *** signal processing ***

def _window(kind: str) -> Op:
  def op(size: Any, output_datatype: int = 1, periodic: int = 1) -> Tensor:
    n = int(np.asarray(size).reshape(-1)[0])
    N = n if periodic else n - 1
    k = np.arange(n, dtype=np.float64)
    if kind == "hann": w = 0.5 - 0.5 * np.cos(2 * np.pi * k / N)
    elif kind == "hamming": w = 25 / 46 - (1 - 25 / 46) * np.cos(2 * np.pi * k / N)
    else: w = 0.42 - 0.5 * np.cos(2 * np.pi * k / N) + 0.08 * np.cos(4 * np.pi * k / N)
    return Tensor(w.astype(np.float32)).cast(onnx_dtype(output_datatype))
  return op
OPS["HannWindow"], OPS["HammingWindow"], OPS["BlackmanWindow"] = _window("hann"), _window("hamming"), _window("blackman")

def _dft_matrix(n_in: int, n_out: int, inverse: bool) -> tuple[np.ndarray, np.ndarray]:
  k = np.arange(n_out).reshape(-1, 1)
  j = np.arange(n_in).reshape(1, -1)
  ang = 2 * np.pi * k * j / n_in * (1 if inverse else -1)
  return np.cos(ang), np.sin(ang)

def _dft_core(x: Tensor, ax: int, n: int, inverse: bool, onesided: bool) -> Tensor:
  """x: (..., L, ..., 2) complex as its last dim; DFT along axis `ax` with length n (pad or crop)."""
  L = x.shape[ax]
  if L < n: x = x.pad(tuple((0, n - L) if i == ax else None for i in range(x.ndim)))
  elif L > n: x = x.shrink(tuple((0, n) if i == ax else None for i in range(x.ndim)))
  n_out = n // 2 + 1 if onesided else n
  c, s = _dft_matrix(n, n_out, inverse)
  fdt = x.dtype if dtypes.is_float(x.dtype) else dtypes.float32
  C = Tensor(c.astype(np.float64 if fdt == dtypes.float64 else np.float32), device=x.device).cast(fdt)
  S = Tensor(s.astype(np.float64 if fdt == dtypes.float64 else np.float32), device=x.device).cast(fdt)
  xm = x.transpose(ax, -2)  # (..., 2, n) with the signal axis next to the complex one
  re, im = xm[..., 0], xm[..., 1]
  ore, oim = re @ C.T - im @ S.T, re @ S.T + im @ C.T
  if inverse: ore, oim = ore / n, oim / n
  out = Tensor.stack(ore, oim, dim=-1)  # (..., n_out, 2) with the signal axis at -2
  return out.transpose(ax, -2) if ax != x.ndim - 2 else out

def _dft(x: Tensor, dft_length: Any = None, axis: Any = None, inverse: int = 0, onesided: int = 0, ctx: Any = None) -> Tensor:
  if x.shape[-1] == 1: x = x.cat(x.zeros_like(), dim=-1)
  ax_ = int(np.asarray(axis).reshape(-1)[0]) if axis is not None else (1 if ctx.opset < 20 else -2)
  ax = ax_ + x.ndim if ax_ < 0 else ax_
  n = int(np.asarray(dft_length).reshape(-1)[0]) if dft_length is not None and np.size(dft_length) else x.shape[ax]
  return _dft_core(x, ax, n, bool(inverse), bool(onesided))
register("DFT", ctx=True)(_dft)

def _stft(signal: Tensor, frame_step: Any, window: Tensor | None = None, frame_length: Any = None, onesided: int = 1) -> Tensor:
  step = int(np.asarray(frame_step).reshape(-1)[0])
  fl = int(np.asarray(frame_length).reshape(-1)[0]) if frame_length is not None else window.shape[0]  # type: ignore[union-attr]
  if signal.shape[-1] == 1: signal = signal.cat(signal.zeros_like(), dim=-1)
  B, L = signal.shape[:2]
  nf = (L - fl) // step + 1
  frames = Tensor.stack(*[signal[:, f * step:f * step + fl] for f in range(nf)], dim=1)  # (B, nf, fl, 2)
  if window is not None: frames = frames * window.reshape(1, 1, fl, 1).cast(frames.dtype)
  return _dft_core(frames, 2, fl, False, bool(onesided))
OPS["STFT"] = _stft

def _mel(num_mel_bins: Any, dft_length: Any, sample_rate: Any, lower_edge_hertz: Any, upper_edge_hertz: Any, output_datatype: int = 1) -> Tensor:
  """The triangular mel filter bank, built on the host exactly as the onnx reference does."""
  nm, nd, sr = (int(np.asarray(v).reshape(-1)[0]) for v in (num_mel_bins, dft_length, sample_rate))
  lo, hi = (float(np.asarray(v).reshape(-1)[0]) for v in (lower_edge_hertz, upper_edge_hertz))
  low_mel, high_mel = 2595 * np.log1p(lo / 700) / np.log(10), 2595 * np.log1p(hi / 700) / np.log(10)
  bins = np.arange(0, nm + 2) * ((high_mel - low_mel) / (nm + 2)) + low_mel
  fb = (((nd + 1) * (700 * np.expm1(bins / 2595 * np.log(10)))) // sr).astype(int)
  out = np.zeros((nd // 2 + 1, nm))
  for i in range(nm):
    lo_b, c_b, hi_b = fb[i], fb[i + 1], fb[i + 2]
    if c_b == lo_b: out[c_b, i] = 1
    else:
      for j in range(lo_b, c_b + 1): out[j, i] = (j - lo_b) / (c_b - lo_b)
    if hi_b > c_b:
      for j in range(c_b, hi_b): out[j, i] = (hi_b - j) / (hi_b - c_b)
  return Tensor(out.astype(np.float32)).cast(onnx_dtype(output_datatype))
OPS["MelWeightMatrix"] = _mel

def _col2im(x: Tensor, image_shape: Any, block_shape: Any, dilations: Any = None, pads: Any = None, strides: Any = None) -> Tensor:
  ns = len(image_shape)
  d, s = dilations or [1] * ns, strides or [1] * ns
  p = pads or [0] * (2 * ns)
  N, CK, Lb = x.shape
  K = int(np.prod(block_shape))
  C = CK // K
  padded = [int(image_shape[i]) + p[i] + p[i + ns] for i in range(ns)]
  outs = [(padded[i] - (d[i] * (int(block_shape[i]) - 1) + 1)) // s[i] + 1 for i in range(ns)]
  # host-built scatter matrix: (K*L) block positions -> padded image positions, applied as a matmul
  total = int(np.prod(padded))
  M = np.zeros((K * Lb, total), dtype=np.float32)
  for kidx, kpos in enumerate(np.ndindex(*[int(b) for b in block_shape])):
    for lidx, lpos in enumerate(np.ndindex(*outs)):
      M[kidx * Lb + lidx, np.ravel_multi_index(tuple(lp * s[i] + kp * d[i] for i, (lp, kp) in enumerate(zip(lpos, kpos))), padded)] = 1
  y = x.reshape(N, C, K * Lb).cast(dtypes.float32) @ Tensor(M, device=x.device)
  y = y.reshape(N, C, *padded)
  return y.shrink((None, None, *[(p[i], p[i] + int(image_shape[i])) for i in range(ns)])).cast(x.dtype)
OPS["Col2Im"] = _col2im

def _deform_conv(x: Tensor, w: Tensor, offset: Tensor, B: Tensor | None = None, mask: Tensor | None = None, dilations: Any = None, group: int = 1,
                 kernel_shape: Any = None, offset_group: int = 1, pads: Any = None, strides: Any = None) -> Tensor:
  """Deformable conv 2D: bilinear samples at offset kernel taps (zero outside), then a grouped matmul with the weights."""
  N, C, H, W_ = x.shape
  Co, Cg, kh, kw = w.shape
  d, s = dilations or [1, 1], strides or [1, 1]
  p = pads or [0, 0, 0, 0]
  oh, ow = offset.shape[2:]
  K = kh * kw
  ki, kj = np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij")
  base_y = (np.arange(oh).reshape(-1, 1) * s[0] - p[0]).reshape(1, 1, oh, 1) + (ki.reshape(-1) * d[0]).reshape(1, K, 1, 1)
  base_x = (np.arange(ow).reshape(1, -1) * s[1] - p[1]).reshape(1, 1, 1, ow) + (kj.reshape(-1) * d[1]).reshape(1, K, 1, 1)
  off = offset.reshape(N, offset_group, K, 2, oh, ow).cast(dtypes.float32)
  py = Tensor(base_y.astype(np.float32), device=x.device).reshape(1, 1, K, oh, 1) + off[:, :, :, 0]
  px = Tensor(base_x.astype(np.float32), device=x.device).reshape(1, 1, K, 1, ow) + off[:, :, :, 1]
  xg = x.reshape(N, offset_group, C // offset_group, H * W_).cast(dtypes.float32)
  y0, x0 = py.floor(), px.floor()
  samp: Tensor | None = None
  P = K * oh * ow
  for dy in (0, 1):
    for dx in (0, 1):
      yy, xx = y0 + dy, x0 + dx
      wt = (1 - (py - yy).abs()) * (1 - (px - xx).abs())
      ok = (yy >= 0) & (yy <= H - 1) & (xx >= 0) & (xx <= W_ - 1)
      idx = (yy.clip(0, H - 1) * W_ + xx.clip(0, W_ - 1)).cast(dtypes.int32).reshape(N, offset_group, 1, P)
      vals = xg.gather(3, idx.expand(N, offset_group, C // offset_group, P))
      c = ok.reshape(N, offset_group, 1, P).where(vals * wt.reshape(N, offset_group, 1, P), 0)
      samp = c if samp is None else samp + c
  assert samp is not None
  samp = samp.reshape(N, C, K, oh, ow)
  if mask is not None: samp = samp * mask.reshape(N, offset_group, 1, K, oh, ow).expand(N, offset_group, C // offset_group, K, oh, ow).reshape(
    N, C, K, oh, ow).cast(dtypes.float32)
  cols = samp.reshape(N, group, Cg * K, oh * ow)
  wm = w.reshape(group, Co // group, Cg * K).cast(dtypes.float32)
  out = (wm.reshape(1, group, Co // group, Cg * K) @ cols).reshape(N, Co, oh, ow)
  if B is not None: out = out + B.reshape(1, -1, 1, 1)
  return out.cast(x.dtype)
OPS["DeformConv"] = _deform_conv

def _roi_align(x: Tensor, rois: Tensor, batch_indices: Tensor, coordinate_transformation_mode: str = "half_pixel", mode: str = "avg",
               output_height: int = 1, output_width: int = 1, sampling_ratio: int = 0, spatial_scale: float = 1.0) -> Tensor:
  """RoiAlign on the host (numpy), following the onnx reference (and onnxruntime's CPU kernel): bilinear samples averaged or maxed."""
  X, R, bi = x.numpy().astype(np.float64), rois.numpy().astype(np.float64), batch_indices.numpy()
  C, H, W = X.shape[1:]
  out = np.zeros((R.shape[0], C, output_height, output_width))
  off = 0.5 if coordinate_transformation_mode == "half_pixel" else 0.0
  for n in range(R.shape[0]):
    x1, y1, x2, y2 = R[n] * spatial_scale - off
    rw, rh = (x2 - x1, y2 - y1) if off else (max(x2 - x1, 1.0), max(y2 - y1, 1.0))
    bh, bw = rh / output_height, rw / output_width
    gh = sampling_ratio if sampling_ratio > 0 else int(np.ceil(rh / output_height))
    gw = sampling_ratio if sampling_ratio > 0 else int(np.ceil(rw / output_width))
    cnt = max(gh * gw, 1)
    img = X[int(bi[n])]
    for ph in range(output_height):
      for pw in range(output_width):
        acc = np.zeros(C) if mode == "avg" else np.full(C, -np.inf)
        for iy in range(gh):
          yy = y1 + ph * bh + (iy + 0.5) * bh / gh
          for ix in range(gw):
            xx = x1 + pw * bw + (ix + 0.5) * bw / gw
            if yy < -1.0 or yy > H or xx < -1.0 or xx > W:
              v = np.zeros(C)
              acc = acc + v if mode == "avg" else np.maximum(acc, v)
              continue
            yy_, xx_ = max(yy, 0.0), max(xx, 0.0)
            yl, xl = int(yy_), int(xx_)
            if yl >= H - 1: yh = yl = H - 1; yy_ = float(yl)  # noqa: E702
            else: yh = yl + 1
            if xl >= W - 1: xh = xl = W - 1; xx_ = float(xl)  # noqa: E702
            else: xh = xl + 1
            ly, lx = yy_ - yl, xx_ - xl
            hy, hx = 1 - ly, 1 - lx
            ws = (hy * hx, hy * lx, ly * hx, ly * lx)
            vs = (img[:, yl, xl], img[:, yl, xh], img[:, yh, xl], img[:, yh, xh])
            if mode == "avg": acc = acc + sum(w_ * v for w_, v in zip(ws, vs))
            else: acc = np.maximum(acc, np.max(np.stack([w_ * v for w_, v in zip(ws, vs)]), 0))
        out[n, :, ph, pw] = acc / cnt if mode == "avg" else acc
  return Tensor(out.astype(x.numpy().dtype), device=x.device)
OPS["RoiAlign"] = _roi_align

# *** random ***

def _rand_dtype(dtype: int | None, like: Tensor | None) -> DType:
  return onnx_dtype(dtype) if dtype is not None else like.dtype if like is not None else dtypes.float32
def _seeded(seed: float | None) -> None:
  if seed is not None: Tensor.manual_seed(int(seed))
def _random_uniform(shape: Any = None, dtype: int | None = None, high: float = 1.0, low: float = 0.0, seed: float | None = None,
                    like: Tensor | None = None) -> Tensor:
  _seeded(seed)
  return (Tensor.rand(*(shape if shape is not None else like.shape)) * (high - low) + low).cast(_rand_dtype(dtype, like))  # type: ignore[union-attr]
def _random_normal(shape: Any = None, dtype: int | None = None, mean: float = 0.0, scale: float = 1.0, seed: float | None = None,
                   like: Tensor | None = None) -> Tensor:
  _seeded(seed)
  return (Tensor.randn(*(shape if shape is not None else like.shape)) * scale + mean).cast(_rand_dtype(dtype, like))  # type: ignore[union-attr]
OPS["RandomUniform"] = _random_uniform
OPS["RandomNormal"] = _random_normal
OPS["RandomUniformLike"] = lambda x, dtype=None, high=1.0, low=0.0, seed=None: _random_uniform(None, dtype, high, low, seed, x)
OPS["RandomNormalLike"] = lambda x, dtype=None, mean=0.0, scale=1.0, seed=None: _random_normal(None, dtype, mean, scale, seed, x)
def _bernoulli(x: Tensor, dtype: int | None = None, seed: float | None = None) -> Tensor:
  _seeded(seed)
  return (Tensor.rand(*x.shape) < x).cast(_rand_dtype(dtype, x))
OPS["Bernoulli"] = _bernoulli
def _multinomial(x: Tensor, dtype: int = 6, sample_size: int = 1, seed: float | None = None) -> Tensor:
  _seeded(seed)
  return x.softmax(-1).multinomial(sample_size, replacement=True).cast(onnx_dtype(dtype))
OPS["Multinomial"] = _multinomial

# *** newest ops ***

def _swiglu(a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor:
  if a.shape != b.shape: raise OnnxNodeError(f"SwiGLU takes A and B of one shape (no broadcasting), got {a.shape} and {b.shape}")
  return (a * (a * alpha).sigmoid().cast(a.dtype) * b).cast(a.dtype)
OPS["SwiGLU"] = _swiglu
def _tensor_scatter(past_cache: Tensor, update: Tensor, write_indices: Tensor | None = None, axis: int = -2, mode: str = "linear") -> Tensor:
  ax = _axis(axis, past_cache.ndim)
  B, L, S = past_cache.shape[0], past_cache.shape[ax], update.shape[ax]
  idx = write_indices.cast(dtypes.int32).reshape(B, *[1] * (past_cache.ndim - 1)) if write_indices is not None else \
    Tensor.zeros(B, *[1] * (past_cache.ndim - 1), dtype=dtypes.int32)
  pos = Tensor.arange(S).reshape(*[S if i == ax else 1 for i in range(past_cache.ndim)]) + idx
  if mode == "circular": pos = pos % L
  pos = pos.expand(update.shape)
  return past_cache.scatter(ax, pos, update)
OPS["TensorScatter"] = _tensor_scatter

# *** ai.onnx.ml, training ***

ML_OPS["Binarizer"] = lambda x, threshold=0.0: (x > threshold).cast(x.dtype)
ML_OPS["ArrayFeatureExtractor"] = lambda x, y: x[..., y.reshape(-1).cast(dtypes.int32)]
def _adagrad(R: Tensor, T: Tensor, *xs: Tensor, decay_factor: float = 0.0, epsilon: float = 0.0, norm_coefficient: float = 0.0) -> tuple[Tensor, ...]:
  n = len(xs) // 3
  r = R / (T.cast(R.dtype) * decay_factor + 1)
  outs_x, outs_h = [], []
  for X, G, H in zip(xs[:n], xs[n:2 * n], xs[2 * n:]):
    g = norm_coefficient * X + G
    h = H + g * g
    outs_x.append(X - r * g / (h.sqrt() + epsilon))
    outs_h.append(h)
  return tuple(outs_x + outs_h)
TRAINING_OPS["Adagrad"] = _adagrad
def _momentum(R: Tensor, T: Tensor, *xs: Tensor, alpha: float, beta: float, mode: str, norm_coefficient: float) -> tuple[Tensor, ...]:
  n = len(xs) // 3
  outs_x, outs_v = [], []
  for X, G, V in zip(xs[:n], xs[n:2 * n], xs[2 * n:]):
    g = norm_coefficient * X + G
    b = (T > 0).where(beta, 1).cast(X.dtype)
    v = alpha * V + b * g
    outs_x.append(X - R * (g + alpha * v) if mode == "nesterov" else X - R * v)
    outs_v.append(v)
  return tuple(outs_x + outs_v)
TRAINING_OPS["Momentum"] = _momentum
def _adam(R: Tensor, T: Tensor, *xs: Tensor, alpha: float = 0.9, beta: float = 0.999, epsilon: float = 0.0, norm_coefficient: float = 0.0,
          norm_coefficient_post: float = 0.0) -> tuple[Tensor, ...]:
  n = len(xs) // 4
  ox, ov, oh = [], [], []
  t = T.cast(dtypes.float32)
  for X, G, V, H in zip(xs[:n], xs[n:2 * n], xs[2 * n:3 * n], xs[3 * n:]):
    g = norm_coefficient * X + G
    v = alpha * V + (1 - alpha) * g
    h = beta * H + (1 - beta) * g * g
    hs = h.sqrt() + epsilon
    r = (T > 0).where(R * (1 - beta ** (t + 1)).sqrt() / (1 - alpha ** (t + 1)), R) if False else R * (1 - (t + 1).cast(dtypes.float32).mul(
      math.log(beta)).exp()).sqrt() / (1 - (t + 1).mul(math.log(alpha)).exp())
    x = X - r * v / hs
    ox.append((1 - norm_coefficient_post) * x)
    ov.append(v)
    oh.append(h)
  return tuple(ox + ov + oh)
TRAINING_OPS["Adam"] = _adam
def _causal_conv_with_state(x: Tensor, weight: Tensor, bias: Tensor | None = None, past_state: Tensor | None = None, activation: str = "none",
                            ndim: int | None = None) -> tuple[Tensor, Tensor]:
  """Depthwise causal conv1d that carries the last k-1 inputs as state (opset 27)."""
  if activation not in ("none", "silu", "swish"): raise OnnxUnsupportedOpError(f"CausalConvWithState activation {activation!r}")
  bs, c, _ = x.shape
  k = weight.shape[2]
  pad = past_state if past_state is not None else Tensor.zeros(bs, c, k - 1, dtype=x.dtype, device=x.device)
  padded = pad.cat(x, dim=2) if k > 1 else x
  out = padded.conv2d(weight, bias, groups=c).cast(x.dtype)
  if activation != "none": out = (out.float() * out.float().sigmoid()).cast(x.dtype)
  state = padded.shrink((None, None, (padded.shape[2] - (k - 1), padded.shape[2])))
  return out, state
OPS["CausalConvWithState"] = _causal_conv_with_state

def _linear_attention(query: Tensor, key: Tensor, value: Tensor, past_state: Tensor | None = None, decay: Tensor | None = None,
                      beta: Tensor | None = None, chunk_size: int | None = None, kv_num_heads: int | None = None, q_num_heads: int | None = None,
                      scale: float | None = None, update_rule: str = "gated_delta") -> tuple[Tensor, Tensor]:
  """Recurrent linear attention (opset 27): a (d_k, d_v) state per head updated per step (linear, gated, delta, gated_delta), in fp32."""
  if update_rule not in ("linear", "gated", "delta", "gated_delta"): raise OnnxUnsupportedOpError(f"LinearAttention update_rule {update_rule!r}")
  if q_num_heads is None or kv_num_heads is None: raise OnnxNodeError("LinearAttention needs q_num_heads and kv_num_heads")
  b, t, _ = query.shape
  dk, dv, grp = query.shape[-1] // q_num_heads, value.shape[-1] // kv_num_heads, q_num_heads // kv_num_heads
  def heads(x: Tensor, h: int) -> Tensor: return x.reshape(b, t, h, -1).transpose(1, 2).float()
  q4, k4, v4 = heads(query, q_num_heads), heads(key, kv_num_heads), heads(value, kv_num_heads)
  d4 = None if decay is None else \
    (decay.reshape(b, t, kv_num_heads, 1).transpose(1, 2) if decay.shape[-1] == kv_num_heads else heads(decay, kv_num_heads)).float()
  b4 = None if beta is None else beta.reshape(b, t, beta.shape[-1], 1).transpose(1, 2).float()
  state = past_state.float() if past_state is not None else Tensor.zeros(b, kv_num_heads, dk, dv, device=query.device)
  sc = scale if scale else 1.0 / math.sqrt(dk)
  outs = []
  for i in range(t):
    qt, kt, vt = q4[:, :, i], k4[:, :, i], v4[:, :, i]
    if update_rule in ("gated", "gated_delta"): state = state * d4[:, :, i].exp().unsqueeze(-1)  # type: ignore[index]
    if update_rule in ("delta", "gated_delta"): vt = b4[:, :, i] * (vt - (state * kt.unsqueeze(-1)).sum(2))  # type: ignore[index]
    state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
    read = state.repeat_interleave(grp, dim=1) if grp > 1 else state
    outs.append((qt.unsqueeze(-1) * read).sum(2) * sc)
  out = Tensor.stack(*outs, dim=2).transpose(1, 2).reshape(b, t, q_num_heads * dv)
  return out.cast(query.dtype), state.cast(past_state.dtype if past_state is not None else query.dtype)
OPS["LinearAttention"] = _linear_attention

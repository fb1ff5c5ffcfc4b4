"""Tensor methods: elementwise ops. Built only from Tensor's core primitives (see tg_core/tensor.py).

Numerics follow torch: transcendental functions of float16/bfloat16 compute in float32 and round once (like torch's CPU
kernels), and every formula avoids overflow in its intermediates. Where a function is split into ranges (`cond.where(a, b)`),
each range gets an input masked to a safe value, so the branch that is not taken can't put inf/NaN into the gradient."""
from __future__ import annotations
import functools
import math
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tg_core.dtype import ConstType, dtypes, float_result_dtype, least_upper_float
from tg_core.frontend import tensor_class
from tg_core.uop import Ops

if TYPE_CHECKING:
  from tg_core.tensor import Tensor
  from tg_core.uop.ops import UOp

# *** helpers ***

def polyN(x: Tensor, p: Sequence[float]) -> Tensor:
  """p[0]*x**(n-1) + ... + p[-1], by Horner's rule."""
  acc: Any = p[0]
  for c in p[1:]: acc = acc * x + c
  return acc

def _float_op(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
  """Run `fn` on a float tensor: ints/bools are cast to the default float; float16, bfloat16 and fp8 compute in float32."""
  @functools.wraps(fn)
  def wrapper(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    out = float_result_dtype(self.dtype)
    if out.itemsize < 4: return fn(self.cast(dtypes.float32), *args, **kwargs).cast(out)
    return fn(self.cast(out), *args, **kwargs)
  return wrapper

def _const_arg(t: Tensor) -> ConstType | None:
  """The value of a tensor that is one broadcast constant (a Python scalar operand), else None."""
  u = t.uop
  while u.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP): u = u.src[0]
  return u.arg if u.op is Ops.CONST and isinstance(u.arg, (int, float, bool)) else None

def int_pow(base: Tensor, exponent: Tensor) -> Tensor:
  """`base ** exponent` for integer (or bool) tensors of one dtype and shape, exact like torch: repeated squaring over the bits of
  the exponent, wrapping on overflow. A negative exponent gives 1 for base 1, +-1 for base -1 and 0 otherwise (torch's integer pow)."""
  dt = base.dtype
  if dt == dtypes.bool: return base | exponent.logical_not()  # x**True = x, x**False = True
  ret, sq = base.ones_like(), base
  if (c := _const_arg(exponent)) is not None and int(c) >= 0:  # a constant exponent unrolls to exactly its bits
    n = int(c)
    while n:
      if n & 1: ret = ret * sq
      n >>= 1
      if n: sq = sq * sq
    return ret
  signed = not dtypes.is_unsigned(dt)
  e = (exponent < 0).where(0, exponent) if signed else exponent
  nbits = dt.bitsize - int(signed)
  for k in range(nbits):
    ret = ((e >> k) & 1).ne(0).where(ret * sq, ret)
    if k != nbits - 1: sq = sq * sq
  if not signed: return ret
  one = base.ones_like()
  neg_pow = base.eq(1).where(one, base.eq(-1).where((exponent & 1).ne(0).where(base, one), base.zeros_like()))
  return (exponent < 0).where(neg_pow, ret)

def _pow_value(b: Tensor, e: Tensor) -> Tensor:
  """b**e for float tensors of one dtype and shape, with C pow's special cases (like torch): x**0 = 1, 1**y = 1, (-1)**+-inf = 1,
  a negative base gives +-|b|**e for an integer e and NaN otherwise."""
  ret = (e * b.abs().log2()).exp2()
  is_int_e = e.eq(e.trunc())
  odd = (e.abs() - 2 * (e.abs() * 0.5).floor()).eq(1)
  # (a NaN constant, not ret * nan: that would put 0 * nan = NaN into the gradient of every element)
  ret = (b < 0).where(is_int_e.where(odd.where(-ret, ret), ret.full_like(math.nan)), ret)
  if (c := _const_arg(e)) is None or not math.isfinite(c):  # exp2(+-inf * log2(1)) would be NaN
    ret = (b.eq(1) | (b.eq(-1) & e.abs().eq(math.inf))).where(1, ret)
  return e.eq(0).where(1, ret).cast(ret.dtype)

def _pow_grad(ctx: UOp, call: UOp) -> tuple[UOp, UOp]:
  """torch's pow gradients: d/db = e * b**(e-1) (0 where e == 0); d/de = b**e * log(b) (0 where b == 0 and e >= 0, so -inf for e < 0
  and NaN for a negative base)."""
  T = tensor_class()
  b, e = (T(a) for a in call.call_args)
  g = T(ctx)
  db = g * e.eq(0).where(0, e * _pow_value(b, e - 1))
  de = g * b.eq(0).where((e < 0).where(-math.inf, 0), _pow_value(b, e) * b.log())
  return db.uop, de.uop

def float_pow(base: Tensor, exponent: Tensor) -> Tensor:
  """base**exponent for broadcast tensors of one float or int dtype (at least one float): exp2(e*log2|b|) with the sign and
  special cases fixed. Its gradient is torch's (a custom rule, the decomposition's own gradient would be NaN at b == 0)."""
  dt = least_upper_float(base.dtype)
  b, e = base.cast(dt), exponent.cast(dt)
  if tensor_class().no_grad or not (b.requires_grad or e.requires_grad): return _pow_value(b, e)
  from tg_core.function import function
  return function(_pow_value, grad_fxn=_pow_grad)(b, e)

_LN2 = math.log(2)

class ElementwiseMixin:
  __slots__ = ()

  # *** trigonometric ***
  @_float_op
  def cos(self: Tensor) -> Tensor:
    """Cosine, as 1 - 2*sin(x/2)**2 (exact argument, no pi/2 - x rounding for large x).

    ```python
    Tensor([0., math.pi]).cos().numpy()  # [1., -1.]
    ```"""
    s = (self * 0.5).sin()
    return 1 - 2 * s * s
  @_float_op
  def tan(self: Tensor) -> Tensor:
    """Tangent: sin(x) / cos(x)."""
    return self.sin() / self.cos()
  @_float_op
  def asin(self: Tensor) -> Tensor:
    """Inverse sine: a Taylor series for |x| < 0.25, else Abramowitz-Stegun 4.4.46 (abs error 2e-8). NaN outside [-1, 1]."""
    small = self.abs() < 0.25
    xs = small.where(self, 0.0)
    ps = xs * polyN(xs * xs, [63 / 2816, 35 / 1152, 5 / 112, 3 / 40, 1 / 6, 1.0])
    a = small.where(0.5, self.abs())
    r = math.pi / 2 - (1.0 - a).sqrt() * polyN(a, _ASIN_AS)
    return small.where(ps, (self < 0).where(-r, r))
  @_float_op
  def acos(self: Tensor) -> Tensor:
    """Inverse cosine: sqrt(1-x)*P(x) for x >= 0 and pi - sqrt(1+x)*P(-x) below (Abramowitz-Stegun 4.4.46, no cancellation near 1)."""
    pos = self >= 0
    xp, xn = pos.where(self, 0.0), pos.where(0.0, -self)
    return pos.where((1.0 - xp).sqrt() * polyN(xp, _ASIN_AS), math.pi - (1.0 - xn).sqrt() * polyN(xn, _ASIN_AS))
  @_float_op
  def atan(self: Tensor) -> Tensor:
    """Inverse tangent: asin(x / sqrt(1 + x*x)) for |x| <= 1 and +-pi/2 - atan(1/x) beyond (no overflow for large |x|)."""
    big = self.abs() > 1
    xs = big.where(0.0, self)
    r = big.where(self, 1.0).reciprocal()
    small_atan = (xs / (1 + xs * xs).sqrt()).asin()
    big_atan = (self > 0).where(math.pi / 2, -math.pi / 2) - (r / (1 + r * r).sqrt()).asin()
    return big.where(big_atan, small_atan)

  # *** hyperbolic ***
  @_float_op
  def sinh(self: Tensor) -> Tensor:
    """Hyperbolic sine: a Taylor series for |x| < 0.5, else (e^(x/2))^2/2 - (e^(-x/2))^2/2 (finite up to where sinh overflows)."""
    small = self.abs() < 0.5
    xs = small.where(self, 0.0)
    ps = xs * polyN(xs * xs, [1 / 362880, 1 / 5040, 1 / 120, 1 / 6, 1.0])
    xb = small.where(1.0, self)
    a, b = (xb * 0.5).exp(), (xb * -0.5).exp()
    return small.where(ps, (a * 0.5) * a - (b * 0.5) * b)
  @_float_op
  def cosh(self: Tensor) -> Tensor:
    """Hyperbolic cosine: (e^(x/2))^2/2 + (e^(-x/2))^2/2 (finite up to where cosh overflows)."""
    a, b = (self * 0.5).exp(), (self * -0.5).exp()
    return (a * 0.5) * a + (b * 0.5) * b
  @_float_op
  def tanh(self: Tensor) -> Tensor:
    """Hyperbolic tangent: a Taylor series for |x| < 0.2, else +-(1 - e)/(1 + e) with e = exp(-2|x|) (never overflows)."""
    small = self.abs() < 0.2
    xs = small.where(self, 0.0)
    ps = xs * polyN(xs * xs, [-17 / 315, 2 / 15, -1 / 3, 1.0])
    xb = small.where(1.0, self)
    e = (xb.abs() * -2).exp()
    t = (1 - e) / (1 + e)
    return small.where(ps, (xb < 0).where(-t, t))
  @_float_op
  def asinh(self: Tensor) -> Tensor:
    """Inverse hyperbolic sine: a Taylor series for |x| < 0.25, +-log(|x| + sqrt(x*x + 1)) up to 1e4, +-(log|x| + log 2) beyond."""
    ax = self.abs()
    small, huge = ax < 0.25, ax > 1e4
    xs = small.where(self, 0.0)
    ps = xs * polyN(xs * xs, [-63 / 2816, 35 / 1152, -5 / 112, 3 / 40, -1 / 6, 1.0])
    am = (small | huge).where(1.0, ax)
    r = huge.where(huge.where(ax, 1.0).log() + _LN2, (am + (am * am + 1).sqrt()).log())
    return small.where(ps, (self < 0).where(-r, r))
  @_float_op
  def acosh(self: Tensor) -> Tensor:
    """Inverse hyperbolic cosine: log(x + sqrt(x-1)*sqrt(x+1)) up to 1e4, log(x) + log(2) beyond. NaN below 1."""
    huge = self > 1e4
    xm = huge.where(1.0, self)
    return huge.where(huge.where(self, 1.0).log() + _LN2, (xm + (xm - 1).sqrt() * (xm + 1).sqrt()).log())
  @_float_op
  def atanh(self: Tensor) -> Tensor:
    """Inverse hyperbolic tangent: a Taylor series for |x| < 0.25, else log((1 + x) / (1 - x)) / 2. +-inf at +-1, NaN beyond."""
    small = self.abs() < 0.25
    xs = small.where(self, 0.0)
    ps = xs * polyN(xs * xs, [1 / 11, 1 / 9, 1 / 7, 1 / 5, 1 / 3, 1.0])
    xb = small.where(0.5, self)
    return small.where(ps, ((1 + xb) / (1 - xb)).log() * 0.5)

  # *** error function ***
  @_float_op
  def erf(self: Tensor) -> Tensor:
    """Error function: a Taylor series for |x| < 0.5, else +-(1 - erfc|x|) with Numerical Recipes' erfcc (relative error < 1.2e-7)."""
    small = self.abs() < 0.5
    xs = small.where(self, 0.0)
    ps = xs * polyN(xs * xs, [1 / 9360, -1 / 1320, 1 / 216, -1 / 42, 1 / 10, -1 / 3, 1.0]) * (2 / math.sqrt(math.pi))
    xb = small.where(1.0, self)
    c = _erfc_pos(xb.abs())
    return small.where(ps, (xb < 0).where(c - 1, 1 - c))

  # *** rounding, exponent and logarithm relatives ***
  def round(self: Tensor) -> Tensor:
    """Round half to even, like torch. Integer tensors are returned as they are.

    ```python
    Tensor([-2.5, -0.5, 0.5, 1.5, 2.5]).round().numpy()  # [-2., -0., 0., 2., 2.]
    ```"""
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    d = (self - t).abs()  # exact
    odd = (t - (t * 0.5).trunc() * 2).ne(0)
    up = (d > 0.5) | (d.eq(0.5) & odd)
    return up.where((self < 0).where(t - 1, t + 1), t)
  def rsqrt(self: Tensor) -> Tensor:
    """1 / sqrt(x)."""
    return self.sqrt().reciprocal()
  def log10(self: Tensor) -> Tensor:
    """Base-10 logarithm."""
    return self.log2() * math.log10(2)
  def logaddexp(self: Tensor, other: Tensor | ConstType) -> Tensor:
    """log(exp(x) + exp(y)) without overflow: max(x, y) + log(1 + exp(-|x - y|)); exact for equal infinities like torch."""
    a, b = self._broadcasted(other)
    if not dtypes.is_float(a.dtype): a, b = a.cast(float_result_dtype(a.dtype)), b.cast(float_result_dtype(b.dtype))
    out = a.dtype
    if out.itemsize < 4: a, b = a.cast(dtypes.float32), b.cast(dtypes.float32)
    d = a.eq(b).where(0.0, a - b)
    return (a.maximum(b) + (1 + (-d.abs()).exp()).log()).cast(out)

  # *** activations ***
  def relu6(self: Tensor) -> Tensor:
    """min(max(x, 0), 6); the gradient is 0 at both kinks, like torch."""
    return self.hardtanh(0, 6)
  def hardtanh(self: Tensor, min_val: float = -1, max_val: float = 1) -> Tensor:
    """x clamped to [min_val, max_val]; NaN stays NaN and the gradient is 0 at the bounds, like torch."""
    return (self <= min_val).where(min_val, (self >= max_val).where(max_val, self))
  def hardsigmoid(self: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
    """alpha*x + beta clamped to [0, 1]. The defaults are torch's."""
    return (alpha * self + beta).hardtanh(0, 1)
  def hardswish(self: Tensor) -> Tensor:
    """x * relu6(x + 3) / 6 (relu6 has torch's zero gradient at its kinks, so this matches torch there too)."""
    return self * (self + 3).relu6() * (1 / 6)
  def leaky_relu(self: Tensor, neg_slope: float = 0.01) -> Tensor:
    """x for x > 0, else neg_slope * x."""
    return (self > 0).where(self, neg_slope * self)
  def elu(self: Tensor, alpha: float = 1.0) -> Tensor:
    """x for x > 0, else alpha * (exp(x) - 1)."""
    pos = self > 0
    return pos.where(self, alpha * (pos.where(0.0, self).exp() - 1))
  def celu(self: Tensor, alpha: float = 1.0) -> Tensor:
    """x for x > 0, else alpha * (exp(x / alpha) - 1)."""
    pos = self > 0
    return pos.where(self, alpha * ((pos.where(0.0, self) / alpha).exp() - 1))
  def selu(self: Tensor, alpha: float = 1.6732632423543772, gamma: float = 1.0507009873554805) -> Tensor:
    """gamma * elu(x, alpha). The defaults are the exact constants of the paper (and torch); tinygrad rounds them to 1.67326, 1.0507."""
    return gamma * self.elu(alpha)
  def swish(self: Tensor) -> Tensor:
    """x * sigmoid(x)."""
    return self * self.sigmoid()
  def silu(self: Tensor) -> Tensor:
    """x * sigmoid(x) (the same function as swish)."""
    return self.swish()
  def quick_gelu(self: Tensor) -> Tensor:
    """x * sigmoid(1.702 * x)."""
    return self * (self * 1.702).sigmoid()
  def gelu(self: Tensor, approximate: str = "tanh") -> Tensor:
    """Gaussian error linear unit. Like tinygrad the default is the tanh approximation (torch's default is approximate="none").

    ```python
    Tensor([-1., 0., 1.]).gelu().numpy()  # [-0.1588, 0., 0.8412]
    ```"""
    if approximate == "tanh":
      # 0.5 * (1 + tanh(z)) == sigmoid(2z): no cancellation for negative x
      return self * (2 * math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).sigmoid()
    if approximate == "none": return self * _phi(self)
    raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate!r}")
  def softplus(self: Tensor, beta: float = 1.0) -> Tensor:
    """log(1 + exp(beta * x)) / beta, computed without overflow."""
    return (1 / beta) * (self * beta).logaddexp(0.0)
  def softsign(self: Tensor) -> Tensor:
    """x / (1 + |x|)."""
    return self / (1 + self.abs())
  def mish(self: Tensor) -> Tensor:
    """x * tanh(softplus(x))."""
    return self * self.softplus().tanh()
  def logsigmoid(self: Tensor) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), finite for very negative x."""
    return -(-self).softplus()

  # *** combining ***
  def lerp(self: Tensor, end: Tensor, weight: Tensor | float) -> Tensor:
    """self + weight * (end - self), in torch's two-sided form (exact at weight 0 and 1).

    ```python
    Tensor([1., 2.]).lerp(Tensor([3., 6.]), 0.5).numpy()  # [2., 4.]
    ```"""
    diff = end - self
    return (weight < 0.5).where(self + weight * diff, end - diff * (1 - weight)) if isinstance(weight, type(self)) else \
      self + weight * diff if weight < 0.5 else end - diff * (1 - weight)
  def clamp(self: Tensor, min_: Tensor | ConstType | None = None, max_: Tensor | ConstType | None = None) -> Tensor:
    """x clamped to [min_, max_] (either may be None). NaN stays NaN; the gradient is 1 at the bounds, like torch."""
    if min_ is None and max_ is None: raise RuntimeError("at least one of 'min_' or 'max_' must not be None")
    ret = (self < min_).where(min_, self) if min_ is not None else self
    return (ret > max_).where(max_, ret) if max_ is not None else ret
  def clip(self: Tensor, min_: Tensor | ConstType | None = None, max_: Tensor | ConstType | None = None) -> Tensor:
    """Alias of `clamp`."""
    return self.clamp(min_, max_)
  def copysign(self: Tensor, other: Tensor | ConstType) -> Tensor:
    """|self| with the sign of `other` (-0.0 counts as negative). Like tinygrad the dtype follows promotion (torch always returns float)."""
    a, b = self._broadcasted(other)
    return a.abs() * ((b < 0) | (b.reciprocal() < 0)).where(-1, 1)

  # *** classification ***
  def isinf(self: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    """True where the element is +inf (if detect_positive) or -inf (if detect_negative)."""
    ret = self.zeros_like(dtype=dtypes.bool)
    if detect_positive: ret = ret | self.eq(math.inf)
    if detect_negative: ret = ret | self.eq(-math.inf)
    return ret
  def isnan(self: Tensor) -> Tensor:
    """True where the element is NaN."""
    return self.ne(self)
  def isfinite(self: Tensor) -> Tensor:
    """True where the element is neither inf nor NaN."""
    return (self.isinf() | self.isnan()).logical_not()
  def isclose(self: Tensor, other: Tensor | ConstType, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """|self - other| <= atol + rtol * |other| elementwise, like torch: equal values (infinities too) are close, NaN only with equal_nan."""
    a, b = self._broadcasted(other)
    close = a.eq(b)
    if equal_nan and dtypes.is_float(a.dtype): close = close | (a.isnan() & b.isnan())
    if rtol == 0 and atol == 0: return close
    if a.dtype == dtypes.bool: a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
    err = (a - b).abs()
    return close | (err.isfinite() & (err <= atol + (rtol * b).abs()))
  def allclose(self: Tensor, other: Tensor | ConstType, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """Whether every element is close (see `isclose`), as a Python bool."""
    return int(self.isclose(other, rtol, atol, equal_nan).logical_not().cast(dtypes.int32).sum().item()) == 0

_ASIN_AS = [-0.0012624911, 0.0066700901, -0.0170881256, 0.0308918810, -0.0501743046, 0.0889789874, -0.2145988016, 1.5707963050]
_ERFC_NR = [0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418, 0.37409196, 1.00002368, -1.26551223]

def _erfc_pos(z: Tensor) -> Tensor:
  """erfc(z) for z >= 0 with relative error < 1.2e-7 (Numerical Recipes' erfcc, a Chebyshev fit)."""
  t = 1 / (1 + 0.5 * z)
  return t * (polyN(t, _ERFC_NR) - z * z).exp()

@_float_op
def _phi(x: Tensor) -> Tensor:
  """The standard normal CDF 0.5 * (1 + erf(x / sqrt 2)), through erfc on the far side so the left tail keeps its precision."""
  small = x.abs() < 0.5 * math.sqrt(2)
  ps = 0.5 + 0.5 * small.where(x, 0.0).mul(1 / math.sqrt(2)).erf()
  xb = small.where(1.0, x)
  c = 0.5 * _erfc_pos(xb.abs() * (1 / math.sqrt(2)))
  return small.where(ps, (xb < 0).where(c, 1 - c))

"""Transcendental approximations: EXP2, LOG2 and SIN written with basic ALU ops, for renderers that lack them.

Each approximation is a UOp graph built from ADD, MUL, WHERE, CMPLT, CMPNE, CAST, BITCAST, SHL/SHR, AND/OR, IDIV and
RECIPROCAL (assumed native, like SQRT). float32 and float64 are computed in their own precision; smaller floats
(float16, bfloat16, fp8) are computed in float32 and cast back.

  exp2(x) = 2^q * p(s), q = round(x), s = x - q in [-1/2, 1/2], p a minimax polynomial (SLEEF's); 2^q is applied in
            two halves so results in the denormal range are rounded once.
  log2(x) = e + log2(m), x = m*2^e with m in [sqrt(1/2), sqrt(2)) (integer ops on the bits, denormals prescaled),
            log2(m) = 2/ln2 * atanh(s), s = (m-1)/(m+1) (refined once), atanh by its series (|s| < 0.172).
  sin(x)  = +-sin(r) or +-cos(r), x = q*pi/2 + r, |r| <= ~pi/4. r comes from a Cody-Waite reduction (pi/2 split into
            parts short enough that q*part is exact) for |x| < 2^12 (float32) / 2^26 (float64), and from an exact
            integer Payne-Hanek reduction (uint64 limbs, 128-bit window of 2/pi) for larger |x|. Kernel polynomials
            are fdlibm's / musl's.
NaN, +-inf, +-0 and denormals follow IEEE/libm: exp2(-inf)=0, exp2(inf)=inf, log2(+-0)=-inf, log2(x<0)=NaN,
log2(inf)=inf, sin(+-inf)=NaN, sin(-0)=-0.

Which ops are rewritten: the renderer's `caps.native_transcendentals` (default: all) says what it has; TRANSCENDENTAL=2
forces the approximations for every float dtype, TRANSCENDENTAL=0 disables them."""
from __future__ import annotations
import functools
import math
import struct
from typing import TYPE_CHECKING, Callable

from tg_core.dtype import DType, dtypes, truncate_float
from tg_core.helpers import TRANSCENDENTAL
from tg_core.uop import Ops
from tg_core.uop.ops import UOp
from tg_core.uop.pattern import PatternMatcher, UPat
from tg_core.uop.rewrite import graph_rewrite

if TYPE_CHECKING:
  from fractions import Fraction

  from tg_core.device import Renderer

APPROXIMATED_OPS: frozenset[Ops] = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN})

# *** exact constants (computed once with integer / decimal arithmetic) ***

@functools.cache
def _pi_fixed(nbits: int) -> int:
  """floor(pi * 2**nbits), by Machin's formula pi = 16 atan(1/5) - 4 atan(1/239) in integer arithmetic."""
  g = nbits + 64
  def atan_inv(n: int) -> int:
    total, term, k, sign = 0, (1 << g) // n, 1, 1
    while term:
      total += sign * (term // k)
      term, k, sign = term // (n * n), k + 2, -sign
    return total
  return (16 * atan_inv(5) - 4 * atan_inv(239)) >> 64

@functools.cache
def two_over_pi_words(nwords: int) -> tuple[int, ...]:
  """The first `nwords` 32-bit words of the binary expansion of 2/pi (0xA2F9836E, 0x4E441529, ...)."""
  nbits = 32 * nwords
  t = (1 << (2 * nbits + 65)) // _pi_fixed(nbits + 64)  # 2/pi * 2^nbits
  return tuple((t >> (32 * (nwords - 1 - i))) & 0xFFFFFFFF for i in range(nwords))

def _pio2() -> Fraction:
  from fractions import Fraction  # here, not at import: every kernel's codegen imports this module, few approximate sin
  return Fraction(_pi_fixed(256), 1 << 257)

def _split(v: Fraction, bits: int) -> Fraction:
  """v truncated to `bits` significant bits."""
  from fractions import Fraction
  e = math.floor(math.log2(v))
  scale = Fraction(2) ** (bits - 1 - e)
  return Fraction(math.floor(v * scale)) / scale

@functools.cache
def _pio2_parts(bits: int, n: int) -> tuple[float, ...]:
  """pi/2 = p0 + p1 + ... + p_{n-1} (+ a negligible rest), the first n-1 parts with `bits` significant bits."""
  rest, parts = _pio2(), []
  for _ in range(n - 1):
    parts.append(_split(rest, bits))
    rest -= parts[-1]
  return (*[float(p) for p in parts], float(rest))

def _f32(x: float) -> float: return truncate_float(x, dtypes.float32)

@functools.cache
def _two_over_ln2(dt: DType) -> tuple[float, float]:
  """2/ln(2) as hi + lo, hi exact in dt."""
  import decimal  # here, not at import (see _pio2)
  ctx = decimal.Context(prec=60)
  c = ctx.divide(decimal.Decimal(2), decimal.Decimal(2).ln(ctx))
  hi = float(c) if dt == dtypes.float64 else _f32(float(c))
  return hi, float(ctx.subtract(c, decimal.Decimal(hi)))

# *** float format facts and small helpers ***

# dtype -> (same-size uint, same-size int, mantissa bits, exponent bias)
_FMT: dict[DType, tuple[DType, DType, int, int]] = {dtypes.float32: (dtypes.uint32, dtypes.int32, 23, 127),
                                                     dtypes.float64: (dtypes.uint64, dtypes.int64, 52, 1023)}

def _vec(dt: DType, like: UOp) -> DType: return dt.vec(like.dtype.count)  # a count of 1 gives dt
def _c(like: UOp, v: float | int) -> UOp: return UOp.const(like.dtype, v)
def _where(cond: UOp, a: UOp | float | int, b: UOp | float | int, like: UOp) -> UOp:
  return cond.where(a if isinstance(a, UOp) else _c(like, a), b if isinstance(b, UOp) else _c(like, b))
def _neg(x: UOp) -> UOp: return x * _c(x, -1)
def _rint(x: UOp) -> UOp:
  """round(x), ties to even, as int32, for |x| < 2^22 (float32) / 2^31 (float64): adding 1.5*2^mantissa leaves the integer in
  the low mantissa bits, where a bitcast reads it. No float->int conversion: its saturating form has no vector instruction."""
  f32 = x.dtype.scalar() == dtypes.float32
  magic, it = (1.5 * 2.0 ** 23, dtypes.int32) if f32 else (1.5 * 2.0 ** 52, dtypes.int64)
  bits = struct.unpack("<i", struct.pack("<f", magic))[0] if f32 else struct.unpack("<q", struct.pack("<d", magic))[0]
  q = (x + _c(x, magic)).bitcast(_vec(it, x)) - UOp.const(_vec(it, x), bits)
  return q if f32 else q.cast(_vec(dtypes.int32, x))
def _poly(x: UOp, coeffs: list[float]) -> UOp:
  """Horner: coeffs[0]*x^n + ... + coeffs[n]."""
  acc = _c(x, coeffs[0])
  for c in coeffs[1:]: acc = acc * x + _c(x, c)
  return acc

def _pow2i(k: UOp, dt: DType) -> UOp:
  """2.0**k as dt, k an int UOp whose value is a normal exponent of dt."""
  uint, _, mant, bias = _FMT[dt]
  return ((k + bias).cast(_vec(uint, k)) << mant).bitcast(_vec(dt, k))

# *** exp2 ***

_EXP2_F32 = [0.1535920892e-3, 0.1339262701e-2, 0.9618384764e-2, 0.5550347269e-1, 0.2402264476e+0, 0.6931471825e+0, 1.0]
_EXP2_F64 = [0.4434359082926529454e-9, 0.7073164598085707425e-8, 0.1017819260921760451e-6, 0.1321543872511327615e-5,
             0.1525273353517584730e-4, 0.1540353045101147808e-3, 0.1333355814670499073e-2, 0.9618129107597600536e-2,
             0.5550410866482046596e-1, 0.2402265069591012214e+0, 0.6931471805599452862e+0, 1.0]

def xexp2(d: UOp) -> UOp:
  """2**d for float32/float64 d (~1 ulp)."""
  dt = d.dtype.scalar()
  upper, lower = (128.0, -150.0) if dt == dtypes.float32 else (1024.0, -1075.0)
  x = _where(d < lower, lower, d, d)
  x = _where(x < upper, x, upper, d)  # NaN and +-inf end up finite here; they are patched at the end
  q = _rint(x)
  s = x - q.cast(d.dtype)
  u = _poly(s, _EXP2_F32 if dt == dtypes.float32 else _EXP2_F64)
  h = q // 2
  u = u * _pow2i(h, dt) * _pow2i(q - h, dt)  # two normal factors: a denormal result is rounded once, by the last multiply
  u = _where(d < upper, u, math.inf, d)
  u = _where(d < lower, 0.0, u, d)
  return _where(d.ne(d), math.nan, u, d)

# *** log2 ***

def xlog2(d: UOp) -> UOp:
  """log2(d) for float32/float64 d (~2 ulp)."""
  dt = d.dtype.scalar()
  uint, sint, mant, bias = _FMT[dt]
  sqrt_half_bits = struct.unpack("<I", struct.pack("<f", math.sqrt(0.5)))[0] if dt == dtypes.float32 else \
    struct.unpack("<Q", struct.pack("<d", math.sqrt(0.5)))[0]
  one_bits = bias << mant
  is_den = d < 2.0 ** (1 - bias)  # denormals (and values < 0, patched below) are prescaled by 2^64
  a = _where(is_den, d * _c(d, 2.0 ** 64), d, d)
  ix = a.bitcast(_vec(uint, d)) + (one_bits - sqrt_half_bits)
  k = (ix >> mant).cast(_vec(sint, d)) + (-bias)
  m = ((ix & ((1 << mant) - 1)) + sqrt_half_bits).bitcast(d.dtype)  # m in [sqrt(1/2), sqrt(2))
  e = k.cast(d.dtype) - _where(is_den, 64.0, 0.0, d)
  f = m - 1.0  # exact
  s = f * (f + 2.0).reciprocal()
  s = (f - s * f) * 0.5  # one fixed-point step of s = (f - s*f)/2: damps the division's rounding errors by |f|/2 <= 0.21
  z = s * s
  c_hi, c_lo = _two_over_ln2(dt)
  c = c_hi + c_lo
  # atanh(s) = s + s^3/3 + s^5/5 + ...: 5 terms reach 2^-28 relative for float32, 11 reach 2^-60 for float64
  nterms = 5 if dt == dtypes.float32 else 11
  tail = s * z * _poly(z, [c / (2 * j + 1) for j in range(nterms, 0, -1)])
  r = e + (s * _c(d, c_hi) + (s * _c(d, c_lo) + tail))
  r = _where(d.ne(math.inf), r, math.inf, d)
  r = _where(d.ne(0.0), r, -math.inf, d)  # +0 and -0
  r = _where(d < 0.0, math.nan, r, d)
  return _where(d.ne(d), math.nan, r, d)

# *** sin ***

# sin(r) = r + r^3 * S(r^2), cos(r) = 1 - r^2/2 + r^4 * C(r^2) on |r| <= pi/4 (musl __sindf/__cosdf, fdlibm __kernel_sin/cos)
_SIN_F32 = [0.0000027183114939898219064, -0.000198393348360966317347, 0.0083333293858894631756, -0.166666666416265235595]
_COS_F32 = [0.0000243904487962774090654, -0.00138867637746099294692, 0.0416666233237390631894]
_SIN_F64 = [1.58969099521155010221e-10, -2.50507602534068634195e-08, 2.75573137070700676789e-06, -1.98412698298579493134e-04,
            8.33333333332248946124e-03, -1.66666666666666324348e-01]
_COS_F64 = [-1.13596475577881948265e-11, 2.08757232129817482790e-09, -2.75573143513906633035e-07, 2.48015872894767294178e-05,
            -1.38888888888741095749e-03, 4.16666666666666019037e-02]

# Cody-Waite: pi/2 in parts of `bits` significant bits, so q*part is exact for q < 2^(mantissa+1-bits); below `switch`
# the quadrant q stays under that bound. Above it, Payne-Hanek.
_CW: dict[DType, tuple[int, float]] = {dtypes.float32: (12, 4096.0), dtypes.float64: (26, 2.0 ** 26)}

def _cody_waite(x: UOp) -> tuple[UOp, UOp]:
  """x >= 0 (below the switch) -> (r, q) with x = q*pi/2 + r."""
  bits, _ = _CW[x.dtype.scalar()]
  q = _rint(x * _c(x, float(1 / _pio2())))
  qf = q.cast(x.dtype)
  r = x
  for p in _pio2_parts(bits, 4): r = r - qf * _c(x, p)
  return r, q

def _lookup(idx: UOp, table: list[int], lo: int, hi: int, dt: DType) -> UOp:
  """table[idx] for idx in [lo, hi] as a chain of WHEREs (indices outside give table[hi])."""
  ret = UOp.const(_vec(dt, idx), table[hi])
  for i in range(hi - 1, lo - 1, -1): ret = idx.ne(i).where(ret, UOp.const(_vec(dt, idx), table[i]))
  return ret

def _payne_hanek(x: UOp) -> tuple[UOp, UOp]:
  """x >= the Cody-Waite switch, finite -> (r, q) with x = q*pi/2 + r, exact to ~2^-64 before the final float ops.

  x = M*2^k (M the integer mantissa). With T = 2/pi, x*T/4 mod 1 = frac(M * frac(2^(k-2)*T)); frac(2^(k-2)*T) is read as
  a 128-bit window of T's bits starting at bit k-1, the product M*window mod 2^128 is done in 32-bit limbs in uint64,
  and its top 64 bits are 2 bits of quadrant and 62 bits of fraction."""
  dt = x.dtype.scalar()
  uint, _, mant, bias = _FMT[dt]
  u64, i32 = _vec(dtypes.uint64, x), _vec(dtypes.int32, x)
  _, switch = _CW[dt]
  k_min, k_max = math.floor(math.log2(switch)) - mant, bias - mant  # x = M * 2^k, M in [2^mant, 2^(mant+1))
  nzero = max(0, -((k_min - 2) // 32))  # zero words in front of T so the window start is never negative
  wi_lo, wi_hi = (k_min - 2 + 32 * nzero) >> 5, (k_max - 2 + 32 * nzero) >> 5
  table = [0] * nzero + list(two_over_pi_words(wi_hi + 5 - nzero))

  bits = x.bitcast(_vec(uint, x))
  k = (bits >> mant).cast(i32) + (-(bias + mant))
  mm = ((bits & ((1 << mant) - 1)) | (1 << mant)).cast(u64)
  p = k + (32 * nzero - 2)  # bit position of the window in the table
  wi, sh = p >> 5, (p & 31).cast(u64)
  # window words: W_j = bits [32j, 32j+32) of the window = (table[wi+j]:table[wi+j+1]) >> (32 - sh)
  pairs = [[(table[i + j] << 32) | table[i + j + 1] if i + j + 1 < len(table) else 0 for i in range(len(table))] for j in range(4)]
  lo32 = 0xFFFFFFFF
  w = [(_lookup(wi, pairs[j], wi_lo, wi_hi, dtypes.uint64) >> (_c(sh, 32) - sh)) & lo32 for j in range(4)]
  m0 = mm & lo32
  def hi(v: UOp) -> UOp: return v >> 32
  def lo(v: UOp) -> UOp: return v & lo32
  p03, p02, p01, p00 = m0 * w[3], m0 * w[2], m0 * w[1], m0 * w[0]
  # column sums (32-bit columns, carries propagated; the 2^128 column and above drop out: they are multiples of 4)
  s1, s2, s3 = hi(p03) + lo(p02), hi(p02) + lo(p01), hi(p01) + lo(p00)
  if mant > 31:  # float64: M has 53 bits, its high limb m1 multiplies too
    m1 = mm >> 32
    p13, p12, p11 = m1 * w[3], m1 * w[2], m1 * w[1]
    s1, s2, s3 = s1 + lo(p13), s2 + hi(p13) + lo(p12), s3 + hi(p12) + lo(p11)
  s2 = s2 + hi(s1)
  s3 = s3 + hi(s2)
  top = (s3 << 32) | lo(s2)
  q = (top >> 62).cast(i32)
  frac = (top & ((1 << 62) - 1)).cast(_vec(dtypes.int64, x))
  up = (top >> 61) & 1  # fraction >= 1/2: round the quadrant up, the remainder becomes negative
  frac = up.ne(0).where(frac - (1 << 62), frac)
  q = up.ne(0).where(q + 1, q)
  fr = frac.cast(x.dtype)
  if mant > 31: fr = fr + lo(s1).cast(x.dtype) * _c(x, 2.0 ** -32)  # 32 more bits for remainders near 0
  return fr * _c(x, float(_pio2()) * 2.0 ** -62), q

def _sin_kernel(r: UOp, q: UOp) -> UOp:
  """sin(r + q*pi/2) for |r| <= ~pi/4."""
  f32 = r.dtype.scalar() == dtypes.float32
  z = r * r
  s = r + r * z * _poly(z, _SIN_F32 if f32 else _SIN_F64)
  c = (_c(r, 1.0) - z * 0.5) + z * z * _poly(z, _COS_F32 if f32 else _COS_F64)
  ret = (q & 1).ne(0).where(c, s)
  return (q & 2).ne(0).where(_neg(ret), ret)

def xsin(d: UOp) -> UOp:
  """sin(d) for float32/float64 d."""
  dt = d.dtype.scalar()
  _, switch = _CW[dt]
  finite = _where(d < 0.0, _neg(d), d, d) < math.inf  # False for +-inf and NaN
  xa = _where(finite, _where(d < 0.0, _neg(d), d, d), 0.0, d)
  big = (xa < switch).logical_not()
  r_cw, q_cw = _cody_waite(_where(big, 0.0, xa, d))
  r_ph, q_ph = _payne_hanek(_where(big, xa, switch, d))
  ret = _sin_kernel(big.where(r_ph, r_cw), big.where(q_ph, q_cw))
  ret = _where(d < 0.0, _neg(ret), ret, d)
  ret = _where(d.ne(0.0), ret, d, d)  # sin(+-0) = +-0
  return _where(finite, ret, math.nan, d)

# *** the pass ***

_APPROX: dict[Ops, Callable[[UOp], UOp]] = {Ops.EXP2: xexp2, Ops.LOG2: xlog2, Ops.SIN: xsin}

def _approximate(x: UOp, d: UOp) -> UOp | None:
  dt = x.dtype.scalar()
  if dt in (dtypes.float32, dtypes.float64): return _APPROX[x.op](d)
  if dt in (dtypes.float16, dtypes.bfloat16, *dtypes.fp8s): return _APPROX[x.op](d.cast(_vec(dtypes.float32, d))).cast(x.dtype)
  return None  # weakfloat: left alone

@functools.cache
def _pm_transcendental(ops: frozenset[Ops]) -> PatternMatcher:
  return PatternMatcher([(UPat(tuple(sorted(ops)), dtype=dtypes.floats, src=(UPat.var("d"),), name="x"), _approximate)])

def pm_transcendental(ops: set[Ops] | frozenset[Ops]) -> PatternMatcher:
  """The rewrite of `ops` (a subset of EXP2, LOG2, SIN) into their approximations."""
  if not (ops := frozenset(ops)) <= APPROXIMATED_OPS: raise ValueError(f"no approximation for {sorted(ops - APPROXIMATED_OPS)}")
  return _pm_transcendental(ops)

def transcendental_ops(ren: Renderer | None) -> frozenset[Ops]:
  """The ops to approximate for this renderer: those it lacks (all with TRANSCENDENTAL>=2, none with TRANSCENDENTAL=0)."""
  if TRANSCENDENTAL.value <= 0: return frozenset()
  if TRANSCENDENTAL.value >= 2: return APPROXIMATED_OPS
  return APPROXIMATED_OPS - ren.caps.native_transcendentals if ren is not None else frozenset()

def get_transcendental_matcher(ren: Renderer | None) -> PatternMatcher | None:
  return pm_transcendental(ops) if (ops := transcendental_ops(ren)) else None

def rewrite_transcendental(sink: UOp, ren: Renderer | None) -> UOp:
  """The codegen pass: approximate the transcendental ops the renderer lacks."""
  if (pm := get_transcendental_matcher(ren)) is None: return sink
  return graph_rewrite(sink, pm, name="transcendental")

__all__ = ["APPROXIMATED_OPS", "xexp2", "xlog2", "xsin", "pm_transcendental", "get_transcendental_matcher", "transcendental_ops",
           "rewrite_transcendental", "two_over_pi_words"]

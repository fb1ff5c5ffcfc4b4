"""Bit-exact numerics the PTX interpreter needs beyond numpy's: bf16 encode/decode, correctly rounded fma, directed
rounding of float->float conversions, flush-to-zero, integer division with the GPU's results for x/0."""
from __future__ import annotations

import numpy as np

F32_MIN_NORMAL = np.float32(np.finfo(np.float32).tiny)
F64_MIN_NORMAL = np.finfo(np.float64).tiny
_LOW29, _HALF29, _F32_TINYISH = np.uint64(0x1FFFFFFF), np.uint64(0x10000000), np.float64(2.0 ** -125)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
  return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(x: np.ndarray, mode: str = "rn") -> np.ndarray:
  """f32 -> bf16 bits; NaN -> canonical 0x7fff (what the hardware writes), rn = ties to even, rz = truncation."""
  b = np.asarray(x, np.float32).view(np.uint32)
  if mode == "rn": r = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
  elif mode == "rz": r = b >> np.uint32(16)
  else: raise ValueError(mode)
  return np.where(np.isnan(x), np.uint32(0x7FFF), r).astype(np.uint16)


def ftz(x: np.ndarray) -> np.ndarray:
  """Flushes f32 subnormals to sign-preserving zero (the `.ftz` modifier)."""
  x = np.asarray(x)
  return np.where(np.abs(x) < F32_MIN_NORMAL, np.copysign(np.zeros((), x.dtype), x), x)


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  s = a + b
  bb = s - a
  err = (a - (s - bb)) + (b - bb)
  return s, np.where(np.isfinite(s), err, 0.0)


def round_exact_to_f32(s: np.ndarray, err: np.ndarray) -> np.ndarray:
  """Rounds the exact value s + err (f64 pair, |err| <= ulp(s)/2) to f32, ties to even, with one rounding."""
  r = s.astype(np.float32)
  other = np.nextafter(r, np.where(s > r.astype(np.float64), np.float32(np.inf), np.float32(-np.inf)).astype(np.float32))
  tie = (s == (r.astype(np.float64) + other.astype(np.float64)) / 2) & (err != 0) & np.isfinite(r)
  if not tie.any(): return r
  up = np.where(err > 0, np.maximum(r, other), np.minimum(r, other))
  return np.where(tie, up, r)


def round_exact_to_odd_f32(s: np.ndarray, err: np.ndarray) -> np.ndarray:
  """Rounds s + err to f32 with round-to-odd; a second rounding of that to f16/bf16 (ties to even) is then exact."""
  r = s.astype(np.float32)
  rd = r.astype(np.float64)
  inexact = ((rd != s) | (err != 0)) & np.isfinite(r)
  if not inexact.any(): return r
  # the exact value lies between r and its neighbour towards it; the odd one of the two is the result
  towards = np.where((s > rd) | ((s == rd) & (err > 0)), np.float32(np.inf), np.float32(-np.inf)).astype(np.float32)
  nb = np.nextafter(r, towards)
  odd_r = (r.view(np.uint32) & np.uint32(1)) == 1
  return np.where(inexact & ~odd_r, nb, r)


def fma_exact(a: np.ndarray, b: np.ndarray, c: np.ndarray, t: str) -> np.ndarray:
  """a*b+c rounded once to t (f32/f16/bf16 given as f32 values; f64 via the products' two-product split)."""
  if t == "f64":
    return _fma_f64(a, b, c)
  p = np.multiply(a, b, dtype=np.float64)   # exact: at most 48 significant bits
  if t == "f32":
    # rounding the f64 sum to f32 is exact unless the sum sits on an f32 midpoint (low 29 mantissa bits = 1000...0) or
    # in the f32 subnormal range; only those lanes need the exact error term
    s = np.add(p, c, dtype=np.float64)
    suspect = ((np.asarray(s).view(np.uint64) & _LOW29) == _HALF29) | (np.abs(s) < _F32_TINYISH)
    if not np.logical_or.reduce(suspect, axis=None): return s.astype(np.float32)
    c = np.asarray(c, np.float64)
    s, err = two_sum(p, c)
    return round_exact_to_f32(s, err)
  s, err = two_sum(p, np.asarray(c, np.float64))
  return round_exact_to_odd_f32(s, err)               # the caller rounds to f16/bf16 (ties to even)


def _fma_f64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
  # Dekker's two-product and a two-sum: correct except when the intermediate overflows (then a*b+c is inf/nan anyway)
  a, b, c = (np.asarray(v, np.float64) for v in (a, b, c))
  p = a * b
  split = 134217729.0
  ah = a * split; ah = ah - (ah - a); al = a - ah
  bh = b * split; bh = bh - (bh - b); bl = b - bh
  pe = ((ah * bh - p) + ah * bl + al * bh) + al * bl
  s, se = two_sum(p, c)
  res = s + (se + pe)
  return np.where(np.isfinite(p), res, p + c)


def round_f64_directed(x: np.ndarray, target: type, mode: str) -> np.ndarray:
  """Rounds exact f64 values to target (float32/float16) with mode rn/rz/rm/rp."""
  r = x.astype(target)
  if mode == "rn": return r
  rd = r.astype(np.float64)
  if mode == "rz": bad = np.abs(rd) > np.abs(x); toward = np.zeros((), target)
  elif mode == "rm": bad = rd > x; toward = np.array(-np.inf, target)
  elif mode == "rp": bad = rd < x; toward = np.array(np.inf, target)
  else: raise ValueError(mode)
  return np.where(bad, np.nextafter(r, toward), r)


def udivmod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Unsigned division; x/0 = all ones and x%0 = x, which is what NVIDIA GPUs return (PTX calls it unspecified)."""
  bz = b == 0
  bs = np.where(bz, np.ones((), b.dtype), b)
  return np.where(bz, ~np.zeros((), a.dtype), a // bs), np.where(bz, a, a % bs)


def sdivmod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Signed division truncating toward zero (C semantics); x/0 = -1, x%0 = x; MIN/-1 wraps to MIN."""
  a, b = np.asarray(a), np.asarray(b)
  ut = np.dtype(a.dtype.str.replace("i", "u"))
  uq, ur = udivmod(np.abs(a).view(ut), np.abs(b).view(ut))
  zero = np.zeros((), ut)
  q = np.where((a < 0) ^ (b < 0), zero - uq, uq).view(a.dtype)
  r = np.where(a < 0, zero - ur, ur).view(a.dtype)
  bz = b == 0
  return np.where(bz, np.array(-1, a.dtype), q), np.where(bz, a, r)


def round_exact_directed_f32(s: np.ndarray, err: np.ndarray, mode: str) -> np.ndarray:
  """Rounds the exact value s + err to f32 with rz/rm/rp (rn: round_exact_to_f32)."""
  if mode == "rn": return round_exact_to_f32(s, err)
  r = s.astype(np.float32)
  d = r.astype(np.float64) - s            # exact (Sterbenz): r and s are within a factor of 2
  above, below = np.isfinite(r) & (d > err), np.isfinite(r) & (d < err)   # r > exact / r < exact
  if mode == "rz": fix, toward = np.where(s > 0, above, below), np.float32(0)
  elif mode == "rm": fix, toward = above, np.float32(-np.inf)
  elif mode == "rp": fix, toward = below, np.float32(np.inf)
  else: raise ValueError(mode)
  # overflow: RN gives inf where a directed mode keeps the largest finite value
  big = np.isinf(r) & np.isfinite(s)
  fmax = np.float32(np.finfo(np.float32).max)
  keep = big & ((mode == "rz") | ((mode == "rm") & (s > 0)) | ((mode == "rp") & (s < 0)))
  r = np.where(keep, np.copysign(fmax, s).astype(np.float32), r)
  return np.where(fix & ~big, np.nextafter(r, toward), r)


def _fp8_table(ebits: int, mbits: int) -> np.ndarray:
  """The value of every fp8 code (e4m3: no infinities, NaN = S.1111.111; e5m2: IEEE-like inf/NaN)."""
  bias = (1 << (ebits - 1)) - 1
  c = np.arange(256)
  e, f = (c >> mbits) & ((1 << ebits) - 1), c & ((1 << mbits) - 1)
  v = np.where(e == 0, f * 2.0 ** (1 - bias - mbits), (1 + f / 2 ** mbits) * 2.0 ** (e - bias))
  top = (1 << ebits) - 1
  if ebits == 4: v = np.where((e == top) & (f == (1 << mbits) - 1), np.nan, v)
  else: v = np.where(e == top, np.where(f == 0, np.inf, np.nan), v)
  return np.where(c >= 128, -v, v)


FP8_VALUES = {"e4m3": _fp8_table(4, 3), "e5m2": _fp8_table(5, 2)}
_FP8_POS = {k: (np.flatnonzero(np.isfinite(v[:128])), v[:128][np.isfinite(v[:128])]) for k, v in FP8_VALUES.items()}


def fp8_decode(codes: np.ndarray, kind: str) -> np.ndarray:
  return FP8_VALUES[kind][np.asarray(codes).astype(np.int64) & 0xFF].astype(np.float32)


def f32_to_fp8_satfinite(x: np.ndarray, kind: str) -> np.ndarray:
  """f32 -> fp8 code, round to nearest even, saturating to the largest finite value (`.rn.satfinite`); NaN -> 0x7F."""
  x = np.asarray(x, np.float64)
  codes, vals = _FP8_POS[kind]
  a = np.minimum(np.abs(np.nan_to_num(x, nan=0.0)), vals[-1])
  hi = np.clip(np.searchsorted(vals, a), 0, len(vals) - 1)
  lo = np.maximum(hi - 1, 0)
  dlo, dhi = a - vals[lo], vals[hi] - a
  pick = np.where((dhi < dlo) | ((dhi == dlo) & (codes[hi] % 2 == 0)), hi, lo)
  out = codes[pick] | np.where(np.signbit(x), 0x80, 0)
  return np.where(np.isnan(x), 0x7F, out).astype(np.uint8)

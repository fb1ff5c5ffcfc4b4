"""Vector ALU semantics: mnemonic -> (dst type, src types, numpy fn over whole lanes).

Precision (what is modelled): add/sub/mul/fma/sqrt and conversions are IEEE correctly rounded with denormals kept (the
code objects LLVM emits run with denorm mode "preserve" for f32/f16/f64). v_rcp/v_rsq/v_exp/v_log/v_sin/v_cos are
computed in float64 and rounded once (the hardware is within ~1 ulp of that; LLVM's expansions refine them anyway).
f32 fma goes through float64 (exact product, one rounding of the sum, then to f32: innocuous double rounding for the
cases LLVM's sequences rely on); f64 fma uses an error-free product/sum (exact except in rare ties). min/max follow IEEE
mode: a quiet NaN operand yields the other operand.
"""
from __future__ import annotations
from typing import Callable
import numpy as np

DT = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "u16": np.uint16, "i16": np.int16, "u32": np.uint32, "i32": np.int32,
      "u64": np.uint64, "i64": np.int64, "b16": np.uint16, "b32": np.uint32, "b64": np.uint64, "u8": np.uint8}
BITS = {k: np.dtype(v).itemsize * 8 for k, v in DT.items()}
FLOATS = ("f16", "f32", "f64")
VOP: dict[str, tuple[str, tuple[str, ...], Callable]] = {}
f64, u32, u64, i64 = np.float64, np.uint32, np.uint64, np.int64

def _reg(name: str, dst: str, srcs: tuple[str, ...], fn: Callable) -> None: VOP[name] = (dst, srcs, fn)

def _via64(fn: Callable) -> Callable: return lambda *a: fn(*(x.astype(f64) for x in a))
def fmax(a, b):
  r = np.fmax(a, b)
  return np.where((a == 0) & (b == 0), np.where(np.signbit(a) & np.signbit(b), a, np.abs(a)), r)  # max(-0, +0) = +0
def fmin(a, b):
  r = np.fmin(a, b)
  return np.where((a == 0) & (b == 0), np.where(np.signbit(a) | np.signbit(b), -np.abs(a), a), r)
def _two_prod_fma(a, b, c):
  # f64 fma without a wider type: Dekker product + two-sum, exact but for rare double-rounding ties
  split = 134217729.0
  def sp(x): t = split * x; hi = t - (t - x); return hi, x - hi
  p = a * b; ah, al = sp(a); bh, bl = sp(b)
  e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
  s = p + c; bb = s - p; t = (p - (s - bb)) + (c - bb)
  r = s + (t + e)
  return np.where(np.isfinite(p) & np.isfinite(c), r, p + c)
def fma(a, b, c): return _two_prod_fma(a, b, c) if a.dtype == f64 else (a.astype(f64) * b + c.astype(f64))

for t in FLOATS:
  sig = (t, t)
  _reg(f"v_add_{t}", t, sig, np.add); _reg(f"v_sub_{t}", t, sig, np.subtract); _reg(f"v_subrev_{t}", t, sig, lambda a, b: b - a)
  _reg(f"v_mul_{t}", t, sig, np.multiply); _reg(f"v_max_{t}", t, sig, fmax); _reg(f"v_min_{t}", t, sig, fmin)
  _reg(f"v_fma_{t}", t, (t, t, t), fma); _reg(f"v_fmac_{t}", t, (t, t, t), fma)
  _reg(f"v_fmaak_{t}", t, (t, t, t), fma); _reg(f"v_fmamk_{t}", t, (t, t, t), lambda a, k, b: fma(a, k, b))
  _reg(f"v_ldexp_{t}", t, (t, "i32"), lambda a, e: np.ldexp(a.astype(f64), np.clip(e, -2000, 2000).astype(np.int32)))
  _reg(f"v_rcp_{t}", t, (t,), _via64(lambda a: 1.0 / a)); _reg(f"v_rsq_{t}", t, (t,), _via64(lambda a: 1.0 / np.sqrt(a)))
  _reg(f"v_sqrt_{t}", t, (t,), np.sqrt)
  _reg(f"v_floor_{t}", t, (t,), np.floor); _reg(f"v_ceil_{t}", t, (t,), np.ceil); _reg(f"v_trunc_{t}", t, (t,), np.trunc)
  _reg(f"v_rndne_{t}", t, (t,), np.rint); _reg(f"v_fract_{t}", t, (t,), lambda a: np.where(np.isinf(a), np.nan, np.minimum(a - np.floor(a),
       np.nextafter(np.ones_like(a), 0))))
  _reg(f"v_frexp_mant_{t}", t, (t,), lambda a: np.where(np.isfinite(a), np.frexp(a)[0], a))
  _reg(f"v_frexp_exp_i32_{t}" if t != "f16" else "v_frexp_exp_i16_f16", "i32" if t != "f16" else "i16", (t,),
       lambda a: np.where(np.isfinite(a), np.frexp(a)[1], 0))
  _reg(f"v_max3_{t}", t, (t, t, t), lambda a, b, c: fmax(fmax(a, b), c)); _reg(f"v_min3_{t}", t, (t, t, t), lambda a, b, c: fmin(fmin(a, b), c))
  _reg(f"v_med3_{t}", t, (t, t, t), lambda a, b, c: np.where(np.isnan(a) | np.isnan(b) | np.isnan(c), fmin(fmin(a, b), c),
       fmax(fmin(a, b), fmin(fmax(a, b), c))))
  _reg(f"v_maxmin_{t}", t, (t, t, t), lambda a, b, c: fmin(fmax(a, b), c)); _reg(f"v_minmax_{t}", t, (t, t, t), lambda a, b, c: fmax(fmin(a, b), c))
_reg("v_rcp_iflag_f32", "f32", ("f32",), _via64(lambda a: 1.0 / a))
_reg("v_exp_f32", "f32", ("f32",), _via64(np.exp2)); _reg("v_log_f32", "f32", ("f32",), _via64(np.log2))
_reg("v_exp_f16", "f16", ("f16",), _via64(np.exp2)); _reg("v_log_f16", "f16", ("f16",), _via64(np.log2))
_reg("v_sin_f32", "f32", ("f32",), _via64(lambda a: np.sin(2 * np.pi * a))); _reg("v_cos_f32", "f32", ("f32",), _via64(lambda a: np.cos(2 * np.pi * a)))
_reg("v_sin_f16", "f16", ("f16",), _via64(lambda a: np.sin(2 * np.pi * a))); _reg("v_cos_f16", "f16", ("f16",), _via64(lambda a: np.cos(2 * np.pi * a)))
_reg("v_mul_dx9_zero_f32", "f32", ("f32", "f32"), lambda a, b: np.where((a == 0) | (b == 0), np.float32(0), a * b))
_reg("v_fma_dx9_zero_f32", "f32", ("f32", "f32", "f32"), lambda a, b, c: np.where((a == 0) | (b == 0), c, fma(a, b, c)))

# integers
for w, ut, it in ((32, "u32", "i32"), (16, "u16", "i16")):
  m = w - 1
  _reg(f"v_add_nc_{ut}", ut, (ut, ut), np.add); _reg(f"v_sub_nc_{ut}", ut, (ut, ut), np.subtract)
  _reg(f"v_subrev_nc_{ut}", ut, (ut, ut), lambda a, b: b - a)
  _reg(f"v_add_nc_{it}", it, (it, it), np.add); _reg(f"v_sub_nc_{it}", it, (it, it), np.subtract)
  _reg(f"v_lshlrev_b{w}", ut, (ut, ut), lambda s, a, m=m: a << (s & m)); _reg(f"v_lshrrev_b{w}", ut, (ut, ut), lambda s, a, m=m: a >> (s & m))
  _reg(f"v_ashrrev_{it}", it, (ut, it), lambda s, a, m=m: a >> (s & m).astype(a.dtype))
  _reg(f"v_max_{ut}", ut, (ut, ut), np.maximum); _reg(f"v_min_{ut}", ut, (ut, ut), np.minimum)
  _reg(f"v_max_{it}", it, (it, it), np.maximum); _reg(f"v_min_{it}", it, (it, it), np.minimum)
  _reg(f"v_mul_lo_{ut}", ut, (ut, ut), np.multiply)
  for t in (ut, it):
    _reg(f"v_max3_{t}", t, (t, t, t), lambda a, b, c: np.maximum(np.maximum(a, b), c))
    _reg(f"v_min3_{t}", t, (t, t, t), lambda a, b, c: np.minimum(np.minimum(a, b), c))
    _reg(f"v_med3_{t}", t, (t, t, t), lambda a, b, c: np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c)))
    _reg(f"v_maxmin_{t}", t, (t, t, t), lambda a, b, c: np.minimum(np.maximum(a, b), c))
    _reg(f"v_minmax_{t}", t, (t, t, t), lambda a, b, c: np.maximum(np.minimum(a, b), c))
_reg("v_mad_u16", "u16", ("u16", "u16", "u16"), lambda a, b, c: a * b + c)
_reg("v_mad_i16", "i16", ("i16", "i16", "i16"), lambda a, b, c: a * b + c)
for nm, f in (("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor)):
  _reg(f"v_{nm}_b32", "u32", ("u32", "u32"), f); _reg(f"v_{nm}_b16", "u16", ("u16", "u16"), f)
_reg("v_xnor_b32", "u32", ("u32", "u32"), lambda a, b: ~(a ^ b))
_reg("v_not_b32", "u32", ("u32",), np.invert); _reg("v_not_b16", "u16", ("u16",), np.invert)
_reg("v_mov_b32", "u32", ("u32",), lambda a: a); _reg("v_mov_b16", "u16", ("u16",), lambda a: a)
_reg("v_mul_lo_u32", "u32", ("u32", "u32"), np.multiply)
_reg("v_mul_hi_u32", "u32", ("u32", "u32"), lambda a, b: (a.astype(u64) * b) >> u64(32))
_reg("v_mul_hi_i32", "i32", ("i32", "i32"), lambda a, b: (a.astype(i64) * b) >> i64(32))
def _u24(a): return a & u32(0xffffff)
def _i24(a): return (a << np.int32(8)) >> np.int32(8)
_reg("v_mul_u32_u24", "u32", ("u32", "u32"), lambda a, b: _u24(a) * _u24(b))
_reg("v_mul_hi_u32_u24", "u32", ("u32", "u32"), lambda a, b: (_u24(a).astype(u64) * _u24(b)) >> u64(32))
_reg("v_mul_i32_i24", "i32", ("i32", "i32"), lambda a, b: _i24(a) * _i24(b))
_reg("v_mul_hi_i32_i24", "i32", ("i32", "i32"), lambda a, b: (_i24(a).astype(i64) * _i24(b)) >> i64(32))
_reg("v_mad_u32_u24", "u32", ("u32", "u32", "u32"), lambda a, b, c: _u24(a) * _u24(b) + c)
_reg("v_mad_i32_i24", "i32", ("i32", "i32", "i32"), lambda a, b, c: _i24(a) * _i24(b) + c)
_reg("v_lshl_add_u32", "u32", ("u32", "u32", "u32"), lambda a, s, c: (a << (s & u32(31))) + c)
_reg("v_add_lshl_u32", "u32", ("u32", "u32", "u32"), lambda a, b, s: (a + b) << (s & u32(31)))
_reg("v_lshl_or_b32", "u32", ("u32", "u32", "u32"), lambda a, s, c: (a << (s & u32(31))) | c)
_reg("v_and_or_b32", "u32", ("u32", "u32", "u32"), lambda a, b, c: (a & b) | c)
_reg("v_or3_b32", "u32", ("u32", "u32", "u32"), lambda a, b, c: a | b | c)
_reg("v_xor3_b32", "u32", ("u32", "u32", "u32"), lambda a, b, c: a ^ b ^ c)
_reg("v_add3_u32", "u32", ("u32", "u32", "u32"), lambda a, b, c: a + b + c)
_reg("v_xad_u32", "u32", ("u32", "u32", "u32"), lambda a, b, c: (a ^ b) + c)
_reg("v_bfe_u32", "u32", ("u32", "u32", "u32"), lambda a, o, w: np.where((w & u32(31)) == 0, u32(0),
     (a >> (o & u32(31))) & ((u64(1) << (w & u32(31)).astype(u64)) - u64(1)).astype(u32)))
_reg("v_bfe_i32", "i32", ("i32", "u32", "u32"), lambda a, o, w: np.where((w & u32(31)) == 0, np.int32(0),
     ((a << (u32(32) - (o & u32(31)) - (w & u32(31))).astype(np.int32)) >> (u32(32) - (w & u32(31))).astype(np.int32))))
_reg("v_bfi_b32", "u32", ("u32", "u32", "u32"), lambda m, a, b: (m & a) | (~m & b))
_reg("v_bfm_b32", "u32", ("u32", "u32"), lambda w, o: (((u64(1) << (w & u32(31)).astype(u64)) - u64(1)) << (o & u32(31)).astype(u64)).astype(u32))
_reg("v_alignbit_b32", "u32", ("u32", "u32", "u32"), lambda a, b, s: (((a.astype(u64) << u64(32)) | b) >> (s & u32(31)).astype(u64)).astype(u32))
_reg("v_alignbyte_b32", "u32", ("u32", "u32", "u32"), lambda a, b, s: (((a.astype(u64) << u64(32)) | b) >> ((s & u32(3)) * u32(8)).astype(u64)).astype(u32))
_reg("v_bfrev_b32", "u32", ("u32",), lambda a: np.array([int(f"{int(x):032b}"[::-1], 2) for x in np.atleast_1d(a)], u32))
_reg("v_bcnt_u32_b32", "u32", ("u32", "u32"), lambda a, b: np.bitwise_count(a).astype(u32) + b)
def _clz(a): return np.where(a == 0, u32(0xffffffff), u32(31) - np.floor(np.log2(np.maximum(a, 1).astype(f64))).astype(u32))
_reg("v_clz_i32_u32", "u32", ("u32",), _clz)
_reg("v_cls_i32", "u32", ("i32",), lambda a:
     np.where((a == 0) | (a == -1), u32(0xffffffff), _clz(np.where(a < 0, ~a, a).view(u32))))
_reg("v_ctz_i32_b32", "u32", ("u32",), lambda a: np.where(a == 0, u32(0xffffffff), u32(31) - _clz(a & (~a + u32(1)))))
def _perm(a, b, sel):
  src = (a.astype(u64) << u64(32)) | b  # byte 0..3 from b, 4..7 from a
  out = np.zeros(np.broadcast(a, b, sel).shape, u32)
  for i in range(4):
    s = (sel >> u32(8 * i)) & u32(0xff)
    byte = ((src >> (np.minimum(s, u32(7)).astype(u64) * u64(8))) & u64(0xff)).astype(u32)
    sign = lambda k: np.where((src >> u64(8 * k + 7)) & u64(1) != 0, u32(0xff), u32(0)).astype(u32)
    byte = np.where(s == 8, sign(1), np.where(s == 9, sign(3), np.where(s == 10, sign(5), np.where(s == 11, sign(7), byte))))
    byte = np.where(s == 12, u32(0), np.where(s > 12, u32(0xff), byte))
    out |= byte << u32(8 * i)
  return out
_reg("v_perm_b32", "u32", ("u32", "u32", "u32"), _perm)
# 64-bit integer
_reg("v_lshlrev_b64", "u64", ("u32", "u64"), lambda s, a: a << (s & u32(63)).astype(u64))
_reg("v_lshrrev_b64", "u64", ("u32", "u64"), lambda s, a: a >> (s & u32(63)).astype(u64))
_reg("v_ashrrev_i64", "i64", ("u32", "i64"), lambda s, a: a >> (s & u32(63)).astype(i64))

# conversions: float -> int saturates and maps NaN to 0 (the ISA's rule)
def _f2i(t: str) -> Callable:
  info = np.iinfo(DT[t])
  return lambda a: np.where(np.isnan(a), 0, np.clip(np.trunc(a.astype(f64)), info.min, info.max)).astype(DT[t])
for ft in FLOATS:
  for it in ("i32", "u32", "i16", "u16"):
    if ft == "f16" or it in ("i32", "u32"): _reg(f"v_cvt_{it}_{ft}", it, (ft,), _f2i(it))
    if ft == "f16" or it in ("i32", "u32"): _reg(f"v_cvt_{ft}_{it}", ft, (it,), lambda a, ft=ft: a.astype(DT[ft]))
  for ft2 in FLOATS:
    if ft != ft2: _reg(f"v_cvt_{ft}_{ft2}", ft, (ft2,), lambda a, ft=ft: a.astype(DT[ft]))
_reg("v_cvt_floor_i32_f32", "i32", ("f32",), lambda a: _f2i("i32")(np.floor(a)))
_reg("v_cvt_nearest_i32_f32", "i32", ("f32",), lambda a: _f2i("i32")(np.floor(a.astype(f64) + 0.5)))
for i in range(4): _reg(f"v_cvt_f32_ubyte{i}", "f32", ("u32",), lambda a, i=i: ((a >> u32(8 * i)) & u32(0xff)).astype(np.float32))
def _rtz_f16(a):
  r = a.astype(np.float16)
  over = np.isfinite(a) & (np.abs(r.astype(np.float32)) > np.abs(a))
  return np.where(over, np.nextafter(r, np.float16(0)), r)
_reg("v_cvt_pk_rtz_f16_f32", "u32", ("f32", "f32"), lambda a, b: _rtz_f16(a).view(np.uint16).astype(u32) | (_rtz_f16(b).view(np.uint16).astype(u32) << u32(16)))
_reg("v_pack_b32_f16", "u32", ("f16", "f16"), lambda a, b: a.view(np.uint16).astype(u32) | (b.view(np.uint16).astype(u32) << u32(16)))
_reg("v_cvt_pk_i16_i32", "u32", ("i32", "i32"), lambda a, b: (np.clip(a, -32768, 32767).astype(np.uint16).astype(u32)) |
     (np.clip(b, -32768, 32767).astype(np.uint16).astype(u32) << u32(16)))
_reg("v_cvt_pk_u16_u32", "u32", ("u32", "u32"), lambda a, b: np.minimum(a, u32(65535)) | (np.minimum(b, u32(65535)) << u32(16)))

# comparisons (VOPC): cond name -> fn; float conds are IEEE (ordered unless the name says otherwise)
FCMP = {"f": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool), "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater,
        "lg": lambda a, b: (a < b) | (a > b), "ge": np.greater_equal, "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)),
        "u": lambda a, b: np.isnan(a) | np.isnan(b), "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)),
        "ngt": lambda a, b: ~(a > b), "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
        "t": lambda a, b: np.ones(np.broadcast(a, b).shape, bool)}
ICMP = {"f": FCMP["f"], "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater, "ne": np.not_equal, "ge": np.greater_equal, "t": FCMP["t"]}
CMP: dict[str, tuple[str, Callable]] = {}
for t in FLOATS:
  for c, f in FCMP.items(): CMP[f"v_cmp_{c}_{t}"] = (t, f)
  CMP[f"v_cmp_class_{t}"] = (t, None)  # type: ignore[assignment]
for t in ("i16", "u16", "i32", "u32", "i64", "u64"):
  for c, f in ICMP.items(): CMP[f"v_cmp_{c}_{t}"] = (t, f)

def fp_class(a: np.ndarray, mask: np.ndarray) -> np.ndarray:
  """v_cmp_class: bit 0 sNaN, 1 qNaN, 2 -inf, 3 -normal, 4 -denorm, 5 -0, 6 +0, 7 +denorm, 8 +normal, 9 +inf."""
  ut = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize]
  mbits, ebits = {2: (10, 5), 4: (23, 8), 8: (52, 11)}[a.itemsize]
  bits = a.view(ut)
  e, m = (bits >> ut(mbits)) & ut((1 << ebits) - 1), bits & ut((1 << mbits) - 1)
  neg = (bits >> ut(mbits + ebits)) != 0
  top = e == ut((1 << ebits) - 1)
  idx = np.where(top, np.where(m == 0, np.where(neg, 2, 9), np.where(m >> ut(mbits - 1) != 0, 1, 0)),
                 np.where(e == 0, np.where(m == 0, np.where(neg, 5, 6), np.where(neg, 4, 7)), np.where(neg, 3, 8)))
  return (mask.astype(np.uint32) >> idx.astype(np.uint32)) & np.uint32(1) != 0

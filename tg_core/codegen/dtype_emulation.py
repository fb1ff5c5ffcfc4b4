"""Emulation of the small float dtypes a renderer lacks: float16, bfloat16, fp8e4m3 (OCP e4m3fn) and fp8e5m2.

An emulated dtype D lives in memory as the same-size uint (its bit pattern) and in registers as float32 holding a value
that D represents exactly:
  - global/local buffers of D become buffers of uint16/uint8; a LOAD decodes the bits to float32 (bfloat16: a shift;
    float16/fp8: exponent rebias, denormals, inf/NaN), a STORE encodes float32 to D's bits with round-to-nearest-even
  - register buffers (accumulators) of D become float32
  - ALU ops on D run in float32; those that round (ADD, MUL, SQRT, ...) are rounded back to D's precision right away,
    so results match native D arithmetic (float32 has more than 2p+2 bits for every D: the double rounding is exact)
  - CAST to D rounds to D (from float64 or wide ints through float32, like torch's casts); BITCAST to/from D reads/writes
    the bit pattern.
Rounding rules follow torch (and dtype.float_to_fp8): overflow goes to inf (float16, e5m2); e4m3fn has no inf, so
out-of-range values and +-inf saturate to +-448; NaN stays NaN (bfloat16 0x7FC0, float16 0x7E00, fp8 0x7F, sign kept
for fp8/float16).

Int64/uint64 emulation is out of scope. The pass runs when the renderer's `caps.native_dtypes` lacks one of these
dtypes, or when EMULATED_DTYPES names it ("bfloat16,float16"; for testing on renderers that have them)."""
from __future__ import annotations
import dataclasses
import functools
from typing import TYPE_CHECKING

from tg_core.dtype import AddrSpace, DType, dtypes, to_dtype
from tg_core.helpers import EMULATED_DTYPES
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp
from tg_core.uop.pattern import PatternMatcher, UPat
from tg_core.uop.rewrite import graph_rewrite

if TYPE_CHECKING:
  from tg_core.device import Renderer

EMULATABLE: tuple[DType, ...] = (dtypes.float16, dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2)
STORAGE: dict[DType, DType] = {dtypes.float16: dtypes.uint16, dtypes.bfloat16: dtypes.uint16,
                               dtypes.fp8e4m3: dtypes.uint8, dtypes.fp8e5m2: dtypes.uint8}
# dtype -> (exponent bits, mantissa bits, bias, a NaN's bits without the sign, the code overflow goes to)
_FMT: dict[DType, tuple[int, int, int, int, int]] = {dtypes.float16: (5, 10, 15, 0x7E00, 0x7C00), dtypes.fp8e5m2: (5, 2, 15, 0x7F, 0x7C),
                                                      dtypes.fp8e4m3: (4, 3, 7, 0x7F, 0x7E)}
# ops whose float32 result must be rounded back to the emulated dtype; the others (NEG, MAX, WHERE, ...) are exact
ROUNDING_OPS = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC, Ops.POW, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN}
_VALUE_OPS = (GroupOp.ALU - GroupOp.Comparison) | {Ops.GEP, Ops.STACK}

def _v(dt: DType, like: UOp | DType) -> DType: return dt.vec(like.count if isinstance(like, DType) else like.dtype.count)
def _c(like: UOp, v: float | int) -> UOp: return UOp.const(like.dtype, v)

# *** bit conversions (pure ALU) ***

def decode(bits: UOp, dt: DType) -> UOp:
  """The float32 value of `bits`, an unsigned int UOp holding a `dt` bit pattern."""
  u = bits.cast(_v(dtypes.uint32, bits))
  f32 = _v(dtypes.float32, bits)
  if dt == dtypes.bfloat16: return (u << 16).bitcast(f32)
  ebits, mbits, bias, _, _ = _FMT[dt]
  sign = (u >> (ebits + mbits)) << 31
  e, m = (u >> mbits) & ((1 << ebits) - 1), u & ((1 << mbits) - 1)
  normal = ((e + (127 - bias)) << 23) | (m << (23 - mbits))
  denormal = (m.cast(f32) * UOp.const(f32, 2.0 ** (1 - bias - mbits))).bitcast(u.dtype)  # exact
  mag = e.ne(0).where(normal, denormal)
  if dt == dtypes.fp8e4m3: mag = (u & 0x7F).ne(0x7F).where(mag, _c(u, 0x7FC00000))  # S.1111.111 is e4m3fn's only NaN; no inf
  else: mag = e.ne((1 << ebits) - 1).where(mag, (m << (23 - mbits)) | 0x7F800000)  # IEEE-style inf / NaN
  return (mag | sign).bitcast(f32)

def encode(x: UOp, dt: DType) -> UOp:
  """The `dt` bit pattern (as STORAGE[dt]) of float32 `x`, rounded to nearest even."""
  u = x.bitcast(_v(dtypes.uint32, x))
  st = _v(STORAGE[dt], x)
  if dt == dtypes.bfloat16:
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return x.ne(x).where(_c(r, 0x7FC0), r).cast(st)
  ebits, mbits, bias, nan_code, max_code = _FMT[dt]
  a = u & 0x7FFFFFFF
  shift = 23 - mbits
  # normal results: round the float32 bits to mbits of mantissa, then rebias the exponent
  normal = ((a + ((1 << (shift - 1)) - 1) + ((a >> shift) & 1)) >> shift) - ((127 - bias) << mbits)
  # denormal results: adding 2^(24-bias-mbits) makes float32's own rounding leave the code in the low bits
  magic = (24 - bias - mbits + 127) << 23
  denormal = (a.bitcast(x.dtype) + UOp.const(x.dtype, 2.0 ** (24 - bias - mbits))).bitcast(u.dtype) - magic
  code = (a < ((128 - bias) << 23)).where(denormal, normal)
  code = (code < max_code).where(code, _c(code, max_code))  # overflow: inf (float16, e5m2) or saturation to 448 (e4m3fn)
  code = (_c(a, 0x7F800000) < a).where(_c(a, nan_code), code)
  return (code | ((u >> 31) << (ebits + mbits))).cast(st)

def round_to(x: UOp, dt: DType) -> UOp:
  """float32 `x` rounded to the nearest `dt` value (still float32)."""
  return decode(encode(x, dt), dt)

# *** the rewrite (bottom up: a rule sees the original sources; a D-typed source is used as CAST(float32, src), which
# *** collapses once that source is rewritten to float32) ***

def _store_dt(dt: DType, addrspace: AddrSpace) -> DType: return dtypes.float32 if addrspace is AddrSpace.REG else STORAGE[dt]
def _f32(x: UOp, emu: frozenset[DType]) -> UOp: return x.cast(_v(dtypes.float32, x)) if x.dtype.scalar() in emu else x

def _rw_define(x: UOp) -> UOp:
  st = _store_dt(x.dtype.scalar(), x.arg.addrspace)
  return x.replace(dtype=_v(st, x), arg=dataclasses.replace(x.arg, dtype=st))

def _rw_view(x: UOp) -> UOp: return x.replace(dtype=_v(_store_dt(x.dtype.scalar(), x.addrspace), x))

def _rw_load(x: UOp) -> UOp:
  dt = x.dtype.scalar()
  st, f32 = _store_dt(dt, x.src[0].addrspace), _v(dtypes.float32, x)
  srcs = list(x.src)
  if len(srcs) == 3: srcs[1] = srcs[1].cast(f32) if st == dtypes.float32 else encode(srcs[1].cast(f32), dt)  # the gated load's alt value
  if st == dtypes.float32: return UOp(Ops.LOAD, f32, tuple(srcs), x.arg)
  return decode(UOp(Ops.LOAD, _v(st, x), tuple(srcs), x.arg), dt)

def _rw_store(x: UOp, idx: UOp, val: UOp, ctx: frozenset[DType]) -> UOp:
  dt, f32 = idx.dtype.scalar(), _v(dtypes.float32, val)
  if _store_dt(dt, idx.addrspace) == dtypes.float32: return x.replace(src=(idx, val.cast(f32), *x.src[2:]))
  # encode(round_to(y)) is encode(y): an ALU result stored to memory is encoded unrounded
  v = UOp(val.op, f32, tuple(_f32(s, ctx) for s in val.src), val.arg) if val.op in ROUNDING_OPS else val.cast(f32)
  return x.replace(src=(idx, encode(v, dt), *x.src[2:]))

def _rw_alu(x: UOp, ctx: frozenset[DType]) -> UOp:
  ret = UOp(x.op, _v(dtypes.float32, x), tuple(_f32(s, ctx) for s in x.src), x.arg)
  return round_to(ret, x.dtype.scalar()) if x.op in ROUNDING_OPS else ret

def _rw_cast(x: UOp, s: UOp, ctx: frozenset[DType]) -> UOp | None:
  f32 = _v(dtypes.float32, x)
  if x.dtype.scalar() in ctx: return round_to(s.cast(f32), x.dtype.scalar())  # CAST(float32, D') of an emulated source is its value
  if s.dtype.scalar() in ctx and x.dtype.scalar() != dtypes.float32: return s.cast(f32).cast(x.dtype)
  return None  # CAST(float32, D): the value of D as float32, collapses when the source is rewritten

def _rw_bitcast(x: UOp, s: UOp, ctx: frozenset[DType]) -> UOp | None:
  # a load of D's bits from memory bitcast to its storage dtype is that load (no decode and re-encode: NaN payloads stay)
  if s.op is Ops.LOAD and len(s.src) == 1 and s.dtype.scalar() in ctx and x.dtype.scalar() == _store_dt(s.dtype.scalar(), s.src[0].addrspace):
    return UOp(Ops.LOAD, x.dtype, s.src, s.arg)
  if x.dtype.scalar() in ctx: return decode(s.bitcast(_v(STORAGE[x.dtype.scalar()], x)), x.dtype.scalar())
  if s.dtype.scalar() in ctx: return encode(s.cast(_v(dtypes.float32, s)), s.dtype.scalar()).bitcast(x.dtype)
  return None

@functools.cache
def pm_emulate_dtypes(emu: frozenset[DType]) -> PatternMatcher:
  """The rewrite (run bottom up, ctx=emu) that removes every dtype of `emu` from a kernel."""
  d = tuple(emu)
  return PatternMatcher([
    (UPat((Ops.PARAM, Ops.BUFFER), dtype=d, name="x"), _rw_define),
    (UPat((Ops.AFTER, Ops.INDEX), dtype=d, name="x"), _rw_view),
    (UPat(Ops.LOAD, dtype=d, name="x"), _rw_load),
    (UPat(Ops.STORE, src=(UPat(dtype=d, name="idx"), UPat(dtype=d, name="val")), allow_any_len=True, name="x"), _rw_store),
    (UPat(Ops.CONST, dtype=d, name="x"), lambda x: UOp.const(_v(dtypes.float32, x), x.arg)),
    (UPat(tuple(_VALUE_OPS), dtype=d, name="x"), _rw_alu),
    (UPat(tuple(GroupOp.Comparison), src=(UPat(dtype=d), UPat()), name="x"), lambda x, ctx: x.replace(src=tuple(_f32(s, ctx) for s in x.src))),
    (UPat(Ops.CAST, src=(UPat(name="s"),), name="x"), _rw_cast),
    (UPat(Ops.BITCAST, src=(UPat(name="s"),), name="x"), _rw_bitcast),
    # CAST(float32, float32): what CAST(float32, D) becomes once D's source is float32
    (UPat(Ops.CAST, dtype=dtypes.float32, src=(UPat(dtype=dtypes.float32, name="s"),), name="x"), lambda x, s: s if s.dtype == x.dtype else None),
  ])

def parse_emulated(spec: str) -> frozenset[DType]:
  """The dtypes named in an EMULATED_DTYPES string ("bfloat16,float16")."""
  ret = frozenset(to_dtype(n.strip()) for n in spec.split(",") if n.strip())
  if bad := [str(x) for x in ret if x not in EMULATABLE]: raise ValueError(f"EMULATED_DTYPES: can't emulate {bad}; emulatable: {list(EMULATABLE)}")
  return ret

def emulated_dtypes(ren: Renderer | None) -> frozenset[DType]:
  """The dtypes to emulate for this renderer: the emulatable ones it lacks, plus those EMULATED_DTYPES names."""
  return (ren.caps.emulated_dtypes() if ren is not None else frozenset()) | parse_emulated(str(EMULATED_DTYPES.value or ""))

def rewrite_emulated_dtypes(sink: UOp, ren: Renderer | None) -> UOp:
  """The codegen pass: emulate the small float dtypes the renderer lacks."""
  if not (emu := emulated_dtypes(ren)): return sink
  if not any(u.dtype.scalar() in emu for u in sink.toposort()): return sink
  ret = graph_rewrite(sink, pm_emulate_dtypes(emu), ctx=emu, bottom_up=True, name="emulate dtypes")
  if left := [u for u in ret.toposort() if u.dtype.scalar() in emu]: raise RuntimeError(f"dtype emulation left {left[0].op} of {left[0].dtype}")
  return ret

__all__ = ["EMULATABLE", "STORAGE", "decode", "encode", "round_to", "pm_emulate_dtypes", "parse_emulated", "emulated_dtypes",
           "rewrite_emulated_dtypes"]

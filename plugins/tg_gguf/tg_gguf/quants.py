"""Dequantization of every GGML type as tg Tensor ops on the packed bytes.

Each `dequantize_<type>(blocks)` takes a uint8 Tensor (n_blocks, block_bytes) and returns (n_blocks, block_elems): float32 for the
quantized types (as ggml and gguf-py do), the stored dtype for the plain ones (F16 stays float16, I32 int32). Everything is
elementwise on the bytes (shrink, cast, shift, and, or, bitcast, mul), so the graph fuses into the kernel that consumes it and no
dequantized copy of a weight is ever made; only the IQ lattice types look their grid rows up with a one-hot reduce.

Bit-exactness: every float op is done in the order gguf-py (and ggml's reference `dequantize_row_*`) does it, in float32, and fp16
scales are decoded from their bits with integer ops (so no device's half conversion is relied on)."""
from __future__ import annotations
import functools
import math
from collections.abc import Callable

from tg_core import Tensor, dtypes
from tg_core.dtype import DType

from tg_gguf.grids import GRIDS

# *** byte helpers: `x` is the block array cast to int32 (N, block_bytes) ***

@functools.lru_cache(maxsize=None)
def _const(vals: tuple[int, ...], device: str, dtype: DType = dtypes.int32) -> Tensor:
  """A small realized table on `device` (shift amounts, lookup levels), made once per device."""
  return Tensor(list(vals), dtype=dtype, device=device).realize()

def _seg(x: Tensor, start: int, n: int) -> Tensor: return x[:, start:start + n]

def _le(x: Tensor, start: int, n: int, width: int, dtype: DType = dtypes.int32) -> Tensor:
  """(N, n) little-endian unsigned words of `width` bytes at byte `start`, assembled with shifts and ors."""
  b = _seg(x, start, n * width).reshape(x.shape[0], n, width).cast(dtype)
  ret = b[..., 0]
  for k in range(1, width): ret = ret | (b[..., k] << (8 * k))
  return ret

def _bits(x: Tensor, shifts: tuple[int, ...], axis: int, mask: int) -> Tensor:
  """`(x >> s) & mask` for each s, stacked on a new `axis` (of x.ndim + 1)."""
  sh = _const(shifts, x.device, x.dtype).reshape(*[len(shifts) if i == axis else 1 for i in range(x.ndim + 1)])
  return (x.unsqueeze(axis) >> sh) & mask

def _f16_bits_to_f32(h: Tensor) -> Tensor:
  """float32 values of fp16 bit patterns (int32 in 0..65535), exactly: the magnitude's fields moved into a float32 (exponent
  rebased by 2**112: a float32 multiply by a power of two, exact for normals and subnormals alike), inf/nan by moving the
  fields, then the sign. About half the integer ops of decoding the three cases apart: a matvec decodes one or two scales
  per block of 32 elements for each row, so this is a good part of its work."""
  h = h.cast(dtypes.uint32)
  mag = (((h & 0x7fff) << 13).bitcast(dtypes.float32) * 2.0 ** 112).bitcast(dtypes.uint32)
  special = ((h & 0x3ff) << 13) | (255 << 23)
  return ((h & 0x7c00).eq(0x7c00).where(special, mag) | ((h >> 15) << 31)).bitcast(dtypes.float32)

def _f16(x: Tensor, start: int, n: int = 1) -> Tensor: return _f16_bits_to_f32(_le(x, start, n, 2))

def _int8(v: Tensor) -> Tensor:
  """Signed value of bytes 0..255 (int32)."""
  return v - (v >= 128).where(256, 0)

def _i8_f32(blocks: Tensor, start: int, n: int) -> Tensor:
  """(N, n) signed bytes at byte `start` of the uint8 blocks as float32: a bitcast and one conversion (the sign extension is the
  hardware's), where `_int8` on widened bytes takes a compare and a select per element (Q8_0 matvec: 1.4x)."""
  return blocks[:, start:start + n].bitcast(dtypes.int8).cast(dtypes.float32)

def _lookup(idx: Tensor, table: tuple[int, ...]) -> Tensor:
  """table[idx] for a small table, as a where-chain on the bits of idx (elementwise, so it fuses)."""
  vals = [_const_of(v, idx) for v in table]
  while len(vals) & (len(vals) - 1): vals.append(vals[-1])  # pad to a power of two: indices past the table never occur
  bit = 0
  while len(vals) > 1:
    b = ((idx >> bit) & 1).eq(1)
    vals = [b.where(vals[i + 1], vals[i]) for i in range(0, len(vals), 2)]
    bit += 1
  return vals[0]

def _const_of(v: int, like: Tensor) -> Tensor: return Tensor.full(like.shape, v, dtype=dtypes.int32, device=like.device)

def _grid(idx: Tensor, name: str) -> Tensor:
  """Rows of an IQ grid as float32 (..., row_len): the packed row is found with a one-hot sum over the grid (the only non-elementwise
  step of any format), then its elements are unpacked with shifts and mapped to their levels."""
  levels, bits, rows = GRIDS[name]
  row_len = 8 if len(levels) == 3 else 4
  table = _const(rows, idx.device)
  onehot = idx.unsqueeze(-1).eq(_const(tuple(range(len(rows))), idx.device))
  packed = onehot.where(table, 0).sum(-1, dtype=dtypes.int32)
  codes = _bits(packed, tuple(bits * j for j in range(row_len)), packed.ndim, (1 << bits) - 1)
  return _lookup(codes, levels).cast(dtypes.float32)

def _ksigns(i: Tensor) -> Tensor:
  """ggml's ksigns_iq2xs: 7 sign bits plus an 8th that makes the count of negatives even (the parity of the 7)."""
  p = i ^ (i >> 4)
  p = p ^ (p >> 2)
  p = (p ^ (p >> 1)) & 1
  return i | (p << 7)

def _pm(bits01: Tensor) -> Tensor: return bits01.eq(0).where(1.0, -1.0).cast(dtypes.float32)

def _ints(blocks: Tensor) -> tuple[Tensor, int]:
  """The blocks as int32 (room for shifts and sums) and their count."""
  return blocks.cast(dtypes.int32), blocks.shape[0]

def _f32(t: Tensor) -> Tensor: return t.cast(dtypes.float32)

# *** plain types: reassemble the stored words and bitcast ***

def _plain(blocks: Tensor, width: int, word: DType, out: DType) -> Tensor:
  ret = _le(blocks.cast(word), 0, 1, width, word) if width > 1 else blocks.cast(word)
  return ret.bitcast(out)

def dequantize_f32(blocks: Tensor) -> Tensor: return _plain(blocks, 4, dtypes.uint32, dtypes.float32)
def dequantize_f16(blocks: Tensor) -> Tensor: return _plain(blocks, 2, dtypes.uint16, dtypes.float16)
def dequantize_bf16(blocks: Tensor) -> Tensor: return _plain(blocks, 2, dtypes.uint16, dtypes.bfloat16)
def dequantize_f64(blocks: Tensor) -> Tensor: return _plain(blocks, 8, dtypes.uint64, dtypes.float64)
def dequantize_i8(blocks: Tensor) -> Tensor: return blocks.bitcast(dtypes.int8)
def dequantize_i16(blocks: Tensor) -> Tensor: return _plain(blocks, 2, dtypes.uint16, dtypes.int16)
def dequantize_i32(blocks: Tensor) -> Tensor: return _plain(blocks, 4, dtypes.uint32, dtypes.int32)
def dequantize_i64(blocks: Tensor) -> Tensor: return _plain(blocks, 8, dtypes.uint64, dtypes.int64)

# *** 32-element blocks ***

def _nibbles32(x: Tensor, start: int) -> Tensor:
  """32 4-bit values from 16 bytes: the low nibbles are elements 0..15, the high ones 16..31."""
  return _bits(_seg(x, start, 16), (0, 4), 1, 15).reshape(x.shape[0], 32)

def _high_bits32(x: Tensor, start: int) -> Tensor:
  """Bit i of the little-endian uint32 at `start`, for i in 0..31."""
  return _bits(_seg(x, start, 4), tuple(range(8)), 2, 1).reshape(x.shape[0], 32)

def dequantize_q4_0(blocks: Tensor) -> Tensor:
  x, _ = _ints(blocks)
  return _f16(x, 0) * _f32(_nibbles32(x, 2) - 8)

def dequantize_q4_1(blocks: Tensor) -> Tensor:
  x, _ = _ints(blocks)
  return _f16(x, 0) * _f32(_nibbles32(x, 4)) + _f16(x, 2)

def dequantize_q5_0(blocks: Tensor) -> Tensor:
  x, _ = _ints(blocks)
  q = _nibbles32(x, 6) | (_high_bits32(x, 2) << 4)
  return _f16(x, 0) * _f32(q - 16)

def dequantize_q5_1(blocks: Tensor) -> Tensor:
  x, _ = _ints(blocks)
  q = _nibbles32(x, 8) | (_high_bits32(x, 4) << 4)
  return _f16(x, 0) * _f32(q) + _f16(x, 2)

def dequantize_q8_0(blocks: Tensor) -> Tensor:
  x, _ = _ints(blocks)
  return _i8_f32(blocks, 2, 32) * _f16(x, 0)

def dequantize_q8_1(blocks: Tensor) -> Tensor:
  # ggml's block_q8_1 {half d; half s; int8 qs[32]}: s = d * sum(qs) only serves dot products; the value is d * q
  x, _ = _ints(blocks)
  return _i8_f32(blocks, 4, 32) * _f16(x, 0)

IQ4_NL_VALUES = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
E2M1_X2 = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)  # e2m1 values doubled; the scales carry the 0.5

def dequantize_iq4_nl(blocks: Tensor) -> Tensor:
  x, _ = _ints(blocks)
  return _f16(x, 0) * _f32(_lookup(_nibbles32(x, 2), IQ4_NL_VALUES))

def dequantize_mxfp4(blocks: Tensor) -> Tensor:
  x, _ = _ints(blocks)
  e = _seg(x, 0, 1).cast(dtypes.uint32)
  # e8m0 scale halved: 2**(e-128) as float32 bits (subnormal for e < 2)
  d = (e < 2).where(e.full_like(0x00200000) << e, (e - 1) << 23).bitcast(dtypes.float32)
  return d * _f32(_lookup(_nibbles32(x, 1), E2M1_X2))

def dequantize_nvfp4(blocks: Tensor) -> Tensor:
  x, n = _ints(blocks)
  s = _seg(x, 0, 4)
  exp, man = (s >> 3) & 15, s & 7
  # ue4m3 scale halved: (1 + man/8) * 2**(exp-8) for exp > 0, man * 2**-10 for exp == 0; the bytes 0x00 and 0x7f decode to 0
  normal = (((exp + 119) << 23) | (man << 20)).bitcast(dtypes.float32)
  d = (s.eq(0) | s.eq(0x7F)).where(0.0, exp.eq(0).where(_f32(man) * 2.0 ** -10, normal)).reshape(n, 4, 1)
  q = _seg(x, 4, 32).reshape(n, 4, 8)
  vals = (q & 15).cat(q >> 4, dim=-1)
  return (d * _f32(_lookup(vals, E2M1_X2))).reshape(n, 64)

# *** k-quants (256-element super-blocks) ***

def _scale_min_k4(x: Tensor, start: int) -> tuple[Tensor, Tensor]:
  """The 8 6-bit scales and 8 6-bit mins of Q4_K/Q5_K packed in 12 bytes at `start`."""
  d, m, md = _seg(x, start, 4), _seg(x, start + 4, 4), _seg(x, start + 8, 4)
  sc = (d & 63).cat((md & 15) | ((d >> 2) & 48), dim=1)
  mn = (m & 63).cat((md >> 4) | ((m >> 2) & 48), dim=1)
  return sc, mn

def dequantize_q2_k(blocks: Tensor) -> Tensor:
  x, n = _ints(blocks)
  sc = _seg(x, 0, 16)
  d, dmin = _f16(x, 80), _f16(x, 82)
  dl, ml = (d * _f32(sc & 15)).reshape(n, 16, 1), (dmin * _f32(sc >> 4)).reshape(n, 16, 1)
  q = _bits(_seg(x, 16, 64).reshape(n, 2, 32), (0, 2, 4, 6), 2, 3).reshape(n, 16, 16)
  return (dl * _f32(q) - ml).reshape(n, 256)

def dequantize_q3_k(blocks: Tensor) -> Tensor:
  x, n = _ints(blocks)
  d = _f16(x, 108)
  low = _bits(_seg(x, 96, 8), (0, 4), 1, 15).reshape(n, 16)
  high = _bits(_seg(x, 104, 4), (0, 2, 4, 6), 1, 3).reshape(n, 16)
  dl = (d * _f32((low | (high << 4)) - 32)).reshape(n, 16, 1)
  ql = _bits(_seg(x, 32, 64).reshape(n, 2, 32), (0, 2, 4, 6), 2, 3).reshape(n, 16, 16)
  qh = _bits(_seg(x, 0, 32).reshape(n, 1, 32), tuple(range(8)), 2, 1).reshape(n, 16, 16) ^ 1  # the high bit set means no -4
  return (dl * _f32(ql - (qh << 2))).reshape(n, 256)

def dequantize_q4_k(blocks: Tensor) -> Tensor:
  x, n = _ints(blocks)
  sc, mn = _scale_min_k4(x, 4)
  dd, dm = (_f16(x, 0) * _f32(sc)).reshape(n, 8, 1), (_f16(x, 2) * _f32(mn)).reshape(n, 8, 1)
  q = _bits(_seg(x, 16, 128).reshape(n, 4, 32), (0, 4), 2, 15).reshape(n, 8, 32)
  return (dd * _f32(q) - dm).reshape(n, 256)

def dequantize_q5_k(blocks: Tensor) -> Tensor:
  x, n = _ints(blocks)
  sc, mn = _scale_min_k4(x, 4)
  dd, dm = (_f16(x, 0) * _f32(sc)).reshape(n, 8, 1), (_f16(x, 2) * _f32(mn)).reshape(n, 8, 1)
  ql = _bits(_seg(x, 48, 128).reshape(n, 4, 32), (0, 4), 2, 15).reshape(n, 8, 32)
  qh = _bits(_seg(x, 16, 32).reshape(n, 1, 32), tuple(range(8)), 2, 1).reshape(n, 8, 32)
  return (dd * _f32(ql | (qh << 4)) - dm).reshape(n, 256)

def dequantize_q6_k(blocks: Tensor) -> Tensor:
  x, n = _ints(blocks)
  dd = (_f16(x, 208) * _f32(_int8(_seg(x, 192, 16)))).reshape(n, 16, 1)
  ql = _bits(_seg(x, 0, 128).reshape(n, 2, 64), (0, 4), 2, 15).reshape(n, 8, 32)
  qh = _bits(_seg(x, 128, 64).reshape(n, 2, 32), (0, 2, 4, 6), 2, 3).reshape(n, 8, 32)
  q = ((ql | (qh << 4)) - 32).reshape(n, 16, 16)
  return (dd * _f32(q)).reshape(n, 256)

def dequantize_q8_k(blocks: Tensor) -> Tensor:
  # ggml's block_q8_K {float d; int8 qs[256]; int16 bsums[16]}: bsums only serve dot products; the value is d * q
  x, _ = _ints(blocks)
  d = _le(x, 0, 1, 4, dtypes.uint32).bitcast(dtypes.float32)
  return d * _i8_f32(blocks, 4, 256)

# *** ternary ***

def dequantize_tq1_0(blocks: Tensor) -> Tensor:
  x, n = _ints(blocks)
  # 5 (4 in qh) trits per byte as a fixed-point fraction: multiplying by 3**k (mod 256) brings trit k to the top, * 3 >> 8 reads it
  p5, p4 = (1, 3, 9, 27, 81), (1, 3, 9, 27)
  q0 = _seg(x, 0, 32).reshape(n, 1, 32) * _const(p5, x.device).reshape(1, 5, 1)
  q1 = _seg(x, 32, 16).reshape(n, 1, 16) * _const(p5, x.device).reshape(1, 5, 1)
  qh = _seg(x, 48, 4).reshape(n, 1, 4) * _const(p4, x.device).reshape(1, 4, 1)
  q = q0.reshape(n, 160).cat(q1.reshape(n, 80), qh.reshape(n, 16), dim=1) & 255
  return _f16(x, 52) * _f32(((q * 3) >> 8) - 1)

def dequantize_tq2_0(blocks: Tensor) -> Tensor:
  x, n = _ints(blocks)
  q = _bits(_seg(x, 0, 64).reshape(n, 2, 32), (0, 2, 4, 6), 2, 3).reshape(n, 256)
  return _f16(x, 64) * _f32(q - 1)

# *** IQ (lattice) types ***

def _db_iq2(d: Tensor, s: Tensor, mul: float) -> Tensor: return d * (0.5 + _f32(s)) * mul

def dequantize_iq2_xxs(blocks: Tensor) -> Tensor:
  x, n = _ints(blocks)
  aux = _seg(x, 2, 64).reshape(n, 8, 8)
  signs_word = _le(x, 2, 16, 4, dtypes.uint32).reshape(n, 8, 2)[..., 1]
  db = _db_iq2(_f16(x, 0), signs_word >> 28, 0.25).reshape(n, 8, 1, 1)
  si = _ksigns(_bits(signs_word, (0, 7, 14, 21), 2, 127).cast(dtypes.int32))
  signs = _pm(_bits(si, tuple(range(8)), 3, 1))
  grid = _grid(aux[..., 0:4], "IQ2_XXS")
  return (db * grid * signs).reshape(n, 256)

def dequantize_iq2_xs(blocks: Tensor) -> Tensor:
  x, n = _ints(blocks)
  qs = _le(x, 2, 32, 2)
  sc = _bits(_seg(x, 66, 8), (0, 4), 2, 15).reshape(n, 16)
  db = _db_iq2(_f16(x, 0), sc, 0.25).reshape(n, 16, 1, 1)
  signs = _pm(_bits(_ksigns(qs >> 9), tuple(range(8)), 2, 1)).reshape(n, 16, 2, 8)
  grid = _grid(qs & 511, "IQ2_XS").reshape(n, 16, 2, 8)
  return (db * grid * signs).reshape(n, 256)

def dequantize_iq2_s(blocks: Tensor) -> Tensor:
  x, n = _ints(blocks)
  sc = _bits(_seg(x, 74, 8), (0, 4), 2, 15).reshape(n, 16)
  db = _db_iq2(_f16(x, 0), sc, 0.25).reshape(n, 16, 1, 1)
  signs = _pm(_bits(_seg(x, 34, 32), tuple(range(8)), 2, 1)).reshape(n, 16, 2, 8)
  qh = _bits(_seg(x, 66, 8), (0, 2, 4, 6), 2, 3).reshape(n, 32)
  grid = _grid(_seg(x, 2, 32) | (qh << 8), "IQ2_S").reshape(n, 16, 2, 8)
  return (db * grid * signs).reshape(n, 256)

def dequantize_iq3_xxs(blocks: Tensor) -> Tensor:
  x, n = _ints(blocks)
  sw = _le(x, 66, 8, 4, dtypes.uint32)
  db = _db_iq2(_f16(x, 0), sw >> 28, 0.5).reshape(n, 8, 1, 1)
  si = _ksigns(_bits(sw, (0, 7, 14, 21), 2, 127).cast(dtypes.int32))
  signs = _pm(_bits(si, tuple(range(8)), 3, 1))
  grid = _grid(_seg(x, 2, 64), "IQ3_XXS").reshape(n, 8, 4, 8)
  return (db * grid * signs).reshape(n, 256)

def dequantize_iq3_s(blocks: Tensor) -> Tensor:
  x, n = _ints(blocks)
  sc = _bits(_seg(x, 106, 4), (0, 4), 2, 15).reshape(n, 8)
  db = (_f16(x, 0) * _f32(1 + 2 * sc)).reshape(n, 8, 1, 1)
  signs = _pm(_bits(_seg(x, 74, 32), tuple(range(8)), 2, 1)).reshape(n, 8, 4, 8)
  qh = _bits(_seg(x, 66, 8), tuple(range(8)), 2, 1).reshape(n, 64)
  grid = _grid(_seg(x, 2, 64) | (qh << 8), "IQ3_S").reshape(n, 8, 4, 8)
  return (db * grid * signs).reshape(n, 256)

IQ1_DELTA = 0.125

def dequantize_iq1_s(blocks: Tensor) -> Tensor:
  x, n = _ints(blocks)
  qh = _le(x, 34, 8, 2)
  dl = (_f16(x, 0) * _f32(2 * ((qh >> 12) & 7) + 1)).reshape(n, 8, 1, 1)
  delta = (qh & 0x8000).eq(0).where(IQ1_DELTA, -IQ1_DELTA).cast(dtypes.float32).reshape(n, 8, 1, 1)
  hi = _bits(qh, (0, 3, 6, 9), 2, 7).reshape(n, 32)
  grid = _grid(_seg(x, 2, 32) | (hi << 8), "IQ1_S").reshape(n, 8, 4, 8)
  return (dl * (grid + delta)).reshape(n, 256)

def dequantize_iq1_m(blocks: Tensor) -> Tensor:
  x, n = _ints(blocks)
  sc = _le(x, 48, 4, 2)
  # the fp16 super-block scale is split over the top nibble of the 4 scale words
  dbits = ((sc[:, 0:1] & 0xF000) >> 12) | ((sc[:, 1:2] & 0xF000) >> 8) | ((sc[:, 2:3] & 0xF000) >> 4) | (sc[:, 3:4] & 0xF000)
  d = _f16_bits_to_f32(dbits)
  s3 = _bits(sc, (0, 3, 6, 9), 2, 7).reshape(n, 16)
  dl = (d * _f32(2 * s3 + 1)).reshape(n, 8, 2, 1, 1)
  qh = _bits(_seg(x, 32, 16), (0, 4), 2, 15).reshape(n, 32)
  delta = (qh & 8).eq(0).where(IQ1_DELTA, -IQ1_DELTA).cast(dtypes.float32).reshape(n, 8, 2, 2, 1)
  grid = _grid(_seg(x, 0, 32) | ((qh & 7) << 8), "IQ1_S").reshape(n, 8, 2, 2, 8)
  return (dl * (grid + delta)).reshape(n, 256)

def dequantize_iq4_xs(blocks: Tensor) -> Tensor:
  x, n = _ints(blocks)
  lo = _bits(_seg(x, 4, 4), (0, 4), 2, 15).reshape(n, 8)
  hi = _bits(_le(x, 2, 1, 2).reshape(n), tuple(range(0, 16, 2)), 1, 3)
  dl = (_f16(x, 0) * _f32((lo | (hi << 4)) - 32)).reshape(n, 8, 1)
  q = _bits(_seg(x, 8, 128).reshape(n, 8, 16), (0, 4), 2, 15).reshape(n, 8, 32)
  return (dl * _f32(_lookup(q, IQ4_NL_VALUES))).reshape(n, 256)

# *** factored decodes for dot products: value = scale * q + min per group of elements ***
# A matvec sums q * x over a group's elements first and applies the group's scale and min once per group:
# sum_g scale_g * (sum_e q_e x_e) + min_g * (sum_e x_e), where the dequantized form pays a multiply and an add per element.
# Each returns (scale (n, G, 1), q (n, G, E) float32, min (n, G, 1) or None), with scale * q + min == dequantize_<type> up to
# float rounding (the sums are reordered). A nibble's high half is kept in place (b & 0xF0, its scale divided by 16: exact).

def _nibble_halves(x: Tensor, start: int, n_bytes: int) -> Tensor:
  """(N, 2, n_bytes) int32: the low nibbles of the bytes at `start`, then the high nibbles left in place (b & 0xF0)."""
  return _seg(x, start, n_bytes).unsqueeze(1) & _const((15, 240), x.device).reshape(1, 2, 1)

def _per_half(v: Tensor) -> Tensor:
  """(N, k) per-block values -> (N, 2k, 1): each for the low half, then divided by 16 for the high one (its nibbles are 16x)."""
  return (v.unsqueeze(-1) * Tensor([1.0, 1.0 / 16], device=v.device)).reshape(v.shape[0], -1, 1)

def factored_q4_0(blocks: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
  x, n = _ints(blocks)
  # q - 8 per element: min is -8 * scale, applied per group
  d = _per_half(_f16(x, 0))
  return d, _f32(_nibble_halves(x, 2, 16)), _f16(x, 0).reshape(n, 1, 1).expand(n, 2, 1) * -8.0

def factored_q4_1(blocks: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
  x, n = _ints(blocks)
  return _per_half(_f16(x, 0)), _f32(_nibble_halves(x, 4, 16)), _f16(x, 2).reshape(n, 1, 1).expand(n, 2, 1)

def factored_q8_0(blocks: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
  x, n = _ints(blocks)
  return _f16(x, 0).reshape(n, 1, 1), _i8_f32(blocks, 2, 32).reshape(n, 1, 32), None

def factored_q5_0(blocks: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
  """Q5_0 with its elements in FACTORED_ORDER's order (pair L of qs bytes 2L, 2L+1: their 4 nibbles, low halves first), for a
  matvec that unrolls each 4: every shift below is then an immediate, its cat's selects fold away, and each element costs a
  nibble op, two for its 5th bit, a subtract, a conversion and a multiply-add. q - 16 = nibble - 16 * (1 - 5th bit): the
  inverted qh word is shifted by 2L once per 4 elements (a table shift) and each bit moved to bit 4 with a fixed shift."""
  x, n = _ints(blocks)
  qs = _seg(x, 6, 16).reshape(n, 8, 1, 2)
  nibbles = (qs & 15).cat(qs >> 4, dim=2)  # (n, L, half, k): element half * 16 + 2L + k
  w = (_le(x, 2, 1, 4) ^ -1).reshape(n, 1) >> _const(tuple(range(0, 16, 2)), x.device).reshape(1, 8)
  def bit4(at: int) -> Tensor: return (w << (4 - at) if at <= 4 else w >> (at - 4)).reshape(n, 8, 1, 1) & 16
  high = Tensor.cat(*[bit4(16 * h).cat(bit4(16 * h + 1), dim=3) for h in (0, 1)], dim=2)
  return _f16(x, 0).reshape(n, 1, 1), _f32(nibbles - high).reshape(n, 1, 32), None

def factored_q6_k(blocks: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
  """Q6_K with its elements in FACTORED_ORDER's order: the 4 elements that share a qh byte l (ql bytes l, l + 32 of the half,
  element 32j + l, j = 0..3) adjacent, so a matvec that unrolls each 4 loads 3 bytes a lane for them and unpacks every 6-bit value
  with immediate shifts. Their 4 int8 scales differ, so q carries them (sc * (q - 32), sc decoded once per 64 elements of a
  half's 16-element run) and `scale` is the block's d: d * (sc * (q - 32)), where ggml computes (d * sc) * (q - 32)."""
  x, n = _ints(blocks)
  ql = _seg(x, 0, 128).reshape(n, 2, 2, 2, 16).permute(0, 1, 3, 4, 2).reshape(n, 2, 2, 16, 1, 2)  # (half, is, lm, ., j % 2)
  nibbles = (ql & 15).cat(ql >> 4, dim=4).reshape(n, 2, 2, 16, 4)
  qh = _seg(x, 128, 64).reshape(n, 2, 2, 16, 1)
  high = Tensor.cat(*[(qh << (4 - 2 * j) if j < 2 else qh >> (2 * j - 4)) & 48 for j in range(4)], dim=4)
  sc = _f32(_int8(_seg(x, 192, 16))).reshape(n, 2, 4, 2).permute(0, 1, 3, 2).reshape(n, 2, 2, 1, 4)
  q = (_f32((nibbles | high) - 32) * sc).reshape(n, 4, 64)
  return _f16(x, 208).reshape(n, 1, 1).expand(n, 4, 1), q, None

# where a factored q's elements aren't in the block's order: the block's elements reshaped to [0] and permuted by [1] are q's
FACTORED_ORDER: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {"Q5_0": ((2, 8, 2), (1, 0, 2)), "Q6_K": ((2, 4, 2, 16), (0, 2, 3, 1))}

# the formats whose factored matvec measured faster than the dequantized one (same process, alternated): Q4_0/Q4_1/Q8_0 with
# the sums of x; Q5_0 and Q6_K reordered (FACTORED_ORDER) so their bits unpack with immediate shifts, no sums of x. Q4_K factored
# gained less alone than the kernel its sums of x add, so it keeps the dequantized form. (The decode step reads these and Q4_K
# through DOT below: Transformer's int8_dot, the default.)
FACTORED = {"Q4_0": factored_q4_0, "Q4_1": factored_q4_1, "Q8_0": factored_q8_0, "Q5_0": factored_q5_0, "Q6_K": factored_q6_k}

# *** integer dot products (Tensor.dp4a): the matvecs and matmuls against x quantized to int8 per 32-element block ***
# A block's dot product is then int32 sums of byte products (4 per DP4A op) scaled once: d_w * d_x * isum (+ m_w * sum(x)), as
# llama.cpp's q8_1 dot products do (tg's x takes two int8 levels: Transformer.dot_matvec, dot_matmul). Each takes a format's
# blocks as int32 words, a unit of whole blocks that is a whole number of words (n, unit words): the words must hold 4
# consecutive elements of one row (tg_gguf.llm.model.LANE_WORD). It returns, for each 32-element block of the unit (a k-quant
# super-block is 8 of them), a DotBlock (d (n, 1), words, min (n, 1) or None, scales): words are its 8 (n, 1) words of 4 bytes,
# word k its elements 4k..4k+3: int32 signed bytes q, or the bytes q + o (DOT_OFFSET), with d * q + min == dequantize_<type>
# (or, with part scales (two (n, 1) int32: Q6_K's 16-element sub-blocks), d * scale_p * q + min for words 4p..4p+3). (Each word
# its own (n, 1) tensor, made with immediate shifts: a matvec's dot products are then straight-line code in its loop over the
# units, where a reduce over a part's words was a loop of its own.) A block not on the word grid (Q4_0, Q5_0, Q8_0 and Q6_K
# blocks come in pairs, the second or first one 2 bytes off it) is realigned with a funnel shift of two words.
DotBlock = tuple[Tensor, tuple[Tensor, ...], Tensor | None, tuple[Tensor, Tensor] | None]

def _lo16(w: Tensor) -> Tensor: return w & 0xFFFF
def _hi16(w: Tensor) -> Tensor: return (w >> 16) & 0xFFFF

def _word(w: Tensor, byte: int) -> Tensor:
  """(N, 1) the 4 bytes at `byte` (a multiple of 2) of the unit's words: a word, or the high half of one and the low of the next."""
  i = byte // 4
  return w[:, i:i + 1] if byte % 4 == 0 else _hi16(w[:, i:i + 1]) | (w[:, i + 1:i + 2] << 16)

def _f16_at(w: Tensor, byte: int, conv: Callable[[Tensor], Tensor] | None = None) -> Tensor:
  """The fp16 at `byte` (a multiple of 2) as float32 (N, 1), by `conv` (default _f16_bits_to_f32)."""
  return (conv or _f16_bits_to_f32)((_lo16 if byte % 4 == 0 else _hi16)(w[:, byte // 4:byte // 4 + 1]))

def _byte_at(w: Tensor, byte: int, signed: bool = False) -> Tensor:
  """The byte at `byte` as int32 (N, 1): unsigned, or sign-extended (moved to the top, shifted back arithmetically)."""
  v, s = w[:, byte // 4:byte // 4 + 1], 8 * (byte % 4)
  return (v << (24 - s)) >> 24 if signed else (v >> s) & 255

def _words(w: Tensor, byte: int, n: int) -> tuple[Tensor, ...]: return tuple(_word(w, byte + 4 * k) for k in range(n))

def _lo_nibbles(v: Tensor) -> Tensor: return v & 0x0F0F0F0F
def _hi_nibbles(v: Tensor) -> Tensor: return (v >> 4) & 0x0F0F0F0F

def _nibble_block(qs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
  """A 32-element block's 8 words from its 4 words of nibble bytes: the low nibbles are elements 0..15, the high ones 16..31."""
  return tuple(_lo_nibbles(v) for v in qs) + tuple(_hi_nibbles(v) for v in qs)

def dot_q4_1(w: Tensor) -> tuple[DotBlock, ...]:
  # word 0: the fp16 scale and min; words 1..4: the 16 nibble bytes
  return ((_f16_at(w, 0), _nibble_block(_words(w, 4, 4)), _f16_at(w, 2), None),)

def dot_q4_0(w: Tensor) -> tuple[DotBlock, ...]:
  # a pair of blocks in 9 words (18 bytes each: d, 16 nibble bytes); q - 8: min = -8 * d
  return tuple((d := _f16_at(w, o), _nibble_block(_words(w, o + 2, 4)), d * -8.0, None) for o in (0, 18))

def dot_q8_0(w: Tensor) -> tuple[DotBlock, ...]:
  # a pair of blocks in 17 words as the lanes buffer holds them (tg_gguf.llm.model.LANE_REPACK: repacked at load): word 0 both
  # fp16 d, words 1..8 and 9..16 each block's 32 quants as unsigned bytes q + 128 (uint32 words: DOT_OFFSET), which a dp4a takes
  # as they are (vpdpbusd: no funnel shift or sign handling per word)
  return tuple((_f16_at(w, 2 * b, _f16_to_f32), tuple(w[:, k:k + 1].bitcast(dtypes.uint32) for k in range(1 + 8 * b, 9 + 8 * b)),
                None, None) for b in (0, 1))

def _f16_to_f32(h: Tensor) -> Tensor:
  """float32 values of fp16 bit patterns (int32 in 0..65535) through the float16 dtype: one conversion instruction where the
  device has float16 natively (x86's F16C vcvtph2ps), the core's exact emulation elsewhere."""
  return h.cast(dtypes.uint16).bitcast(dtypes.float16).cast(dtypes.float32)

def _spread_bits(qh: Tensor, at: int) -> Tensor:
  """Bits at..at+3 of qh (N, 1) as bit 4 of the 4 bytes of a word (0x10 per set bit): one multiply spreads the 4 bits (copies
  shifted by 4 + 7j, j = 0..3, never overlap, so no carries), a mask keeps bit j of copy j."""
  return ((qh >> at) & 15) * 0x02040810 & 0x10101010

def dot_q5_0(w: Tensor) -> tuple[DotBlock, ...]:
  # a pair of blocks in 11 words (22 bytes each: d, the 32 5th bits qh, 16 nibble bytes). Unsigned q = nibble | 5th bit << 4 in
  # 0..31, the - 16 its min: element 4k + b of a block is byte b of word k, its 5th bit bit 4k + b of qh
  out = []
  for o in (0, 22):
    d, qh, qs = _f16_at(w, o), _word(w, o + 2), _nibble_block(_words(w, o + 6, 4))
    out.append((d, tuple(v | _spread_bits(qh, 4 * k) for k, v in enumerate(qs)), d * -16.0, None))
  return tuple(out)

def dot_q4_k(w: Tensor) -> tuple[DotBlock, ...]:
  # one super-block in 36 words: d, dmin (fp16), 12 bytes of 6-bit scales and mins, 128 nibble bytes. Sub-block s (32 elements) is
  # the low (s even) or high nibbles of bytes 32 (s // 2)..+31: value d * sc_s * q - dmin * m_s
  d, dmin = _f16_at(w, 0), _f16_at(w, 2)
  out = []
  for s in range(8):
    if s < 4: sc, mn = _byte_at(w, 4 + s) & 63, _byte_at(w, 8 + s) & 63
    else:
      md = _byte_at(w, 12 + s - 4)
      sc, mn = (md & 15) | ((_byte_at(w, s) >> 2) & 48), (md >> 4) | ((_byte_at(w, 4 + s) >> 2) & 48)
    nib = _lo_nibbles if s % 2 == 0 else _hi_nibbles
    out.append((d * _f32(sc), tuple(nib(v) for v in _words(w, 16 + 32 * (s // 2), 8)), -(dmin * _f32(mn)), None))
  return tuple(out)

def dot_q6_k(w: Tensor) -> tuple[DotBlock, ...]:
  # a pair of super-blocks in 105 words (210 bytes each: ql 128 bytes of low nibbles, qh 64 bytes of 2 high bits, 16 int8 scales,
  # d). Per half h (128 elements) and l in 0..31: element 128h + 32j + l is nibble j // 2 of ql byte 64h + 32 (j % 2) + l with
  # bits 2j, 2j+1 of qh byte 32h + l above it, scaled by sc[8h + 2j + l // 16]. Unsigned q in 0..63: the - 32 is DOT_OFFSET's
  out = []
  for o in (0, 210):
    d = _f16_at(w, o + 208)
    for h, j in ((h, j) for h in range(2) for j in range(4)):
      ql, qh = _words(w, o + 64 * h + 32 * (j % 2), 8), _words(w, o + 128 + 32 * h, 8)
      nib = _lo_nibbles if j < 2 else _hi_nibbles
      high = [(v << (4 - 2 * j) if j < 2 else v >> (2 * j - 4)) & 0x30303030 for v in qh]
      sc = (_byte_at(w, o + 192 + 8 * h + 2 * j, signed=True), _byte_at(w, o + 192 + 8 * h + 2 * j + 1, signed=True))
      out.append((d, tuple(nib(a) | b for a, b in zip(ql, high)), None, sc))
  return tuple(out)

# format -> o where its dot decode's words hold the unsigned bytes q + o (q the signed quant): a block's integer dot product is then
# sum((q + o) * xq) - o * sum(xq) per part (16 elements, before a part scale), the second term the same for every row (q8_level_sums).
# Q8_0's words are uint32 (bytes 0..255: x86's vpdpbusd as it is), Q6_K's int32 (bytes 0..63: signed and unsigned alike)
DOT_OFFSET = {"Q8_0": 128, "Q6_K": 32}

# format -> (format blocks in a unit, its dot decode)
DOT = {"Q4_0": (2, dot_q4_0), "Q4_1": (1, dot_q4_1), "Q8_0": (2, dot_q8_0), "Q5_0": (2, dot_q5_0), "Q4_K": (1, dot_q4_k), "Q6_K": (2, dot_q6_k)}

def _q8_part_sums(words: Tensor) -> Tensor:
  """int8 words (..., 8) int32 -> (..., 2) int32: the sums of each block's values 0..15 and 16..31 (DP4A against bytes of 1)."""
  ones = Tensor.full(words.shape, 0x01010101, dtype=dtypes.uint32, device=words.device)
  return ones.dp4a(words, b_in_range=True).reshape(*words.shape[:-1], 2, 4).sum(-1, dtype=dtypes.int32)

# round to nearest even by adding 1.5 * 2**23 (|v| <= 2**22: the sum's low mantissa bits are then the rounded integer): two ops
# where round() and a float->int cast were ~20 (the cast guards out-of-range values)
_RNE = 12582912.0

def _byte_words(q: Tensor) -> Tensor:
  """(..., 32) int32 values in -128..127 -> (..., 8) int32 words of 4 of them as bytes, by shifts and ors."""
  q = q.reshape(*q.shape[:-1], 8, 4)
  return (q[..., 0] & 255) | ((q[..., 1] & 255) << 8) | ((q[..., 2] & 255) << 16) | (q[..., 3] << 24)

def _rne(v: Tensor) -> Tensor:
  """float32 v (|v| <= 2**22) rounded to the nearest integer, ties to even, as int32: the rounded sum's bits read back."""
  return (v + _RNE).bitcast(dtypes.int32) - 0x4B400000

def _scaled(xb: Tensor, d: Tensor) -> Tensor:
  """x / d per block (0 where d is 0): what an int8 level rounds."""
  return xb * (d > 0).where(1.0 / d, 0.0)

def quantize_q8_residual(x: Tensor) -> tuple[Tensor, Tensor]:
  """x (..., K) float32, K a multiple of 32 -> (q (..., K/32, 16) int32: per 32-element block 8 words of 4 int8 hi, then 8 of
  lo; stats (..., K/32, 2) float32: d and the block's sum of x), with x = d * (hi + lo / 127) to within d / 254: hi = round(x / d)
  (d = max|x| / 127), lo = round(127 * (x / d - hi)) in -64..64, x's rounding error quantized again. One int8 level (llama.cpp's
  q8 x) rounds an element to 1/254 of its block's largest, which a block with an outlier (a norm weight's channel) makes most of
  the others' value: SmolLM2's logits then left transformers' top 10; two levels keep ~15 bits of the block's range. Two small
  kernels (a decode step's matvecs are many and small: each kernel more cost it ~15 us): the stats, both levels' words. Many rows
  (a prefill's x): d and the sums each a kernel of its own, stats a view of the two; in one kernel the two reduces' loops counted
  as nested in the heuristic's size estimate, and its 2 x 2 tile ran each block's 32 elements as serial chains."""
  xb = x.reshape(*x.shape[:-1], x.shape[-1] // 32, 32)
  # max |x| as the max of x's bits with the sign bit cleared (non-negative floats order as their bits): an integer max, where a
  # float max carries NaN selects in its chain
  amax = (xb.bitcast(dtypes.int32) & 0x7FFFFFFF).max(-1, keepdim=True).bitcast(dtypes.float32)
  d, sx = amax / 127.0, xb.sum(-1, keepdim=True)
  if math.prod(x.shape[:-1]) > 1:
    d = d.contiguous()
    stats = d.cat(sx.contiguous(), dim=-1)
  else: d = (stats := d.cat(sx, dim=-1).contiguous())[..., 0:1]
  s = _scaled(xb, d)
  hi = _rne(s)
  lo = _rne((s - hi.cast(dtypes.float32)) * 127.0)  # (hi is exact in float32)
  return _byte_words(hi).cat(_byte_words(lo), dim=-1).contiguous(), stats

def q8_level_sums(q: Tensor) -> Tensor:
  """quantize_q8_residual's words (..., 16) -> (..., 4) int32: hi's sums over each block's elements 0..15 and 16..31, then lo's
  (what a format's offset bytes take off the integer sums, DOT_OFFSET): a small kernel, the same for every row."""
  return _q8_part_sums(q.reshape(*q.shape[:-1], 2, 8)).reshape(*q.shape[:-1], 4)

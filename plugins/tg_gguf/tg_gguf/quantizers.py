"""Quantization (float -> GGML blocks) on the host with numpy, for the types gguf-py quantizes: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
Q8_0, TQ1_0, TQ2_0, MXFP4. Each follows ggml's reference `quantize_row_*_ref` (the scale is computed in float32, stored as fp16),
so the bytes equal gguf-py's and llama.cpp's."""
from __future__ import annotations
from typing import Callable

import numpy as np

from tg_gguf.errors import GGUFError
from tg_gguf.ggml_types import BY_ID, BY_NAME

def _roundf(x: np.ndarray) -> np.ndarray:
  """C's roundf (half away from zero), exactly: the fraction of |x| is exact in float32."""
  a = np.abs(x)
  f = np.floor(a)
  return np.sign(x) * (f + (a - f >= 0.5))

def _inv(d: np.ndarray) -> np.ndarray:
  with np.errstate(divide="ignore"): return np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)

def _f16_bytes(d: np.ndarray) -> np.ndarray: return d.astype(np.float16).view(np.uint8).reshape(d.shape[0], -1)

def _pack_nibbles(q: np.ndarray) -> np.ndarray:
  """32 values of 4 bits -> 16 bytes: element j in the low nibble of byte j, element 16+j in the high one."""
  return (q[:, :16] & 15) | ((q[:, 16:] & 15) << 4)

def _absmax_signed(x: np.ndarray) -> np.ndarray:
  """The element of largest magnitude of each block (the first one on ties), with its sign."""
  return np.take_along_axis(x, np.abs(x).argmax(axis=-1, keepdims=True), axis=-1)

def _q4_0(x: np.ndarray) -> np.ndarray:
  d = _absmax_signed(x) / np.float32(-8)
  q = np.minimum(np.trunc(x * _inv(d) + np.float32(8.5)), 15).astype(np.uint8)
  return np.concatenate([_f16_bytes(d), _pack_nibbles(q)], axis=1)

def _q4_1(x: np.ndarray) -> np.ndarray:
  mx, mn = x.max(axis=-1, keepdims=True), x.min(axis=-1, keepdims=True)
  d = (mx - mn) / np.float32(15)
  q = np.minimum(np.trunc((x - mn) * _inv(d) + np.float32(0.5)), 15).astype(np.uint8)
  return np.concatenate([_f16_bytes(d), _f16_bytes(mn), _pack_nibbles(q)], axis=1)

def _high_bits(q: np.ndarray) -> np.ndarray:
  """Bit 4 of 32 values as a little-endian uint32 (4 bytes)."""
  return np.packbits((q >> 4) & 1, axis=-1, bitorder="little")

def _q5_0(x: np.ndarray) -> np.ndarray:
  d = _absmax_signed(x) / np.float32(-16)
  q = np.minimum(np.trunc(x * _inv(d) + np.float32(16.5)), 31).astype(np.uint8)
  return np.concatenate([_f16_bytes(d), _high_bits(q), _pack_nibbles(q)], axis=1)

def _q5_1(x: np.ndarray) -> np.ndarray:
  mx, mn = x.max(axis=-1, keepdims=True), x.min(axis=-1, keepdims=True)
  d = (mx - mn) / np.float32(31)
  q = np.minimum(np.trunc((x - mn) * _inv(d) + np.float32(0.5)), 31).astype(np.uint8)
  return np.concatenate([_f16_bytes(d), _f16_bytes(mn), _high_bits(q), _pack_nibbles(q)], axis=1)

def _q8_0(x: np.ndarray) -> np.ndarray:
  d = np.abs(x).max(axis=-1, keepdims=True) / np.float32(127)
  q = _roundf(x * _inv(d)).astype(np.int8).view(np.uint8)
  return np.concatenate([_f16_bytes(d), q], axis=1)

def _ternary(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  d = np.abs(x).max(axis=-1, keepdims=True)
  return d, (_roundf(x * _inv(d)) + 1).astype(np.uint16)  # trits 0, 1, 2

def _tq1_0(x: np.ndarray) -> np.ndarray:
  n = x.shape[0]
  d, q = _ternary(x)
  p5, p4 = np.array([81, 27, 9, 3, 1], dtype=np.uint16), np.array([81, 27, 9, 3], dtype=np.uint16)
  # byte j packs trits j, j+32, ... (base 3, most significant first), then stores ceil(v * 256 / 243): a fixed-point fraction
  q0 = (q[:, :160].reshape(n, 5, 32) * p5.reshape(1, 5, 1)).sum(axis=1)
  q1 = (q[:, 160:240].reshape(n, 5, 16) * p5.reshape(1, 5, 1)).sum(axis=1)
  qh = (q[:, 240:].reshape(n, 4, 4) * p4.reshape(1, 4, 1)).sum(axis=1)
  v = np.concatenate([q0, q1, qh], axis=1).astype(np.uint16)
  return np.concatenate([((v * 256 + 242) // 243).astype(np.uint8), _f16_bytes(d)], axis=1)

def _tq2_0(x: np.ndarray) -> np.ndarray:
  n = x.shape[0]
  d, q = _ternary(x)
  q = q.astype(np.uint8).reshape(n, 2, 4, 32) << np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
  packed = np.bitwise_or.reduce(q, axis=2).reshape(n, 64)
  return np.concatenate([packed, _f16_bytes(d)], axis=1)

E2M1_X2 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)

def _e8m0_half(e: np.ndarray) -> np.ndarray:
  e = e.astype(np.uint32)
  return np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << np.uint32(23)).astype(np.uint32).view(np.float32)

def _mxfp4(x: np.ndarray) -> np.ndarray:
  n = x.shape[0]
  amax = np.abs(x).max(axis=-1, keepdims=True)
  with np.errstate(divide="ignore"): e = np.where(amax > 0, np.floor(np.log2(amax)) - 2 + 127, 0).astype(np.uint8)
  d = _e8m0_half(e).reshape(n, 1, 1)
  best = np.abs(d * E2M1_X2.reshape(1, 1, 16) - x.reshape(n, 32, 1)).argmin(axis=-1).astype(np.uint8)
  return np.concatenate([e, _pack_nibbles(best)], axis=1)

def _bf16(x: np.ndarray) -> np.ndarray:
  n = x.view(np.uint32).astype(np.uint64)
  n = np.where((n & 0x7FFFFFFF) > 0x7F800000, (n & 0xFFFF0000) | (64 << 16), n)  # NaN: keep it quiet
  return ((n + (0x7FFF + ((n >> 16) & 1))) >> 16).astype(np.uint16).view(np.uint8).reshape(x.shape[0], 2)

QUANTIZERS: dict[int, Callable[[np.ndarray], np.ndarray]] = {
  BY_NAME["F32"].id: lambda x: x.view(np.uint8).reshape(x.shape[0], 4),
  BY_NAME["F16"].id: lambda x: x.astype(np.float16).view(np.uint8).reshape(x.shape[0], 2),
  BY_NAME["BF16"].id: _bf16, BY_NAME["Q4_0"].id: _q4_0, BY_NAME["Q4_1"].id: _q4_1, BY_NAME["Q5_0"].id: _q5_0, BY_NAME["Q5_1"].id: _q5_1,
  BY_NAME["Q8_0"].id: _q8_0, BY_NAME["TQ1_0"].id: _tq1_0, BY_NAME["TQ2_0"].id: _tq2_0, BY_NAME["MXFP4"].id: _mxfp4}

def quantize(data: np.ndarray, ggml_type: int) -> np.ndarray:
  """float array (..., row) -> uint8 blocks (..., row // block_elems * block_bytes), like gguf-py's `quants.quantize`."""
  if ggml_type not in QUANTIZERS:
    have = ", ".join(BY_ID[t].name for t in QUANTIZERS)
    raise GGUFError(f"quantizing to GGML type {BY_ID[ggml_type].name if ggml_type in BY_ID else ggml_type} is not implemented (can: {have})")
  t = BY_ID[ggml_type]
  x = np.asarray(data, dtype=np.float32)
  if x.ndim == 0 or x.shape[-1] % t.block_elems:
    raise GGUFError(f"can't quantize shape {x.shape} to {t.name}: the last dim must be a multiple of {t.block_elems}")
  blocks = np.ascontiguousarray(x).reshape(-1, t.block_elems)
  return QUANTIZERS[ggml_type](blocks).reshape(*x.shape[:-1], x.shape[-1] // t.block_elems * t.block_bytes)

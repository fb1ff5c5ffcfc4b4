"""Every GGML type dequantizes bit-identically to gguf-py (gguf.quants.dequantize), on the device under test (DEV), for
(a) blocks gguf-py quantized, (b) random payloads with random finite fp16 scales (subnormals and +-0 included);
the types gguf-py can't dequantize are checked against their ggml definition written in numpy. The quantizers are byte-equal to gguf-py's."""
from __future__ import annotations

import numpy as np
import pytest
from gguf_testutil import assert_same_bits

from tg_core import Tensor, dtypes
from tg_gguf import dequantize, quantize
from tg_gguf.ggml_types import BY_NAME, GGML_TYPES
from tg_gguf.quantizers import QUANTIZERS

gguf = pytest.importorskip("gguf", reason="gguf-py is the reference (pip install gguf)")
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf import quants as gq  # noqa: E402

# where each type keeps its fp16 scales: (byte offset, count)
FP16_FIELDS: dict[str, tuple[int, int]] = {
  "Q4_0": (0, 1), "Q4_1": (0, 2), "Q5_0": (0, 1), "Q5_1": (0, 2), "Q8_0": (0, 1), "Q8_1": (0, 2), "Q2_K": (80, 2), "Q3_K": (108, 1), "Q4_K": (0, 2),
  "Q5_K": (0, 2), "Q6_K": (208, 1), "IQ2_XXS": (0, 1), "IQ2_XS": (0, 1), "IQ2_S": (0, 1), "IQ3_XXS": (0, 1), "IQ3_S": (0, 1), "IQ1_S": (0, 1),
  "IQ4_NL": (0, 1), "IQ4_XS": (0, 1), "TQ1_0": (52, 1), "TQ2_0": (64, 1)}
GGUF_PY_CAN = {t.name for t in GGML_TYPES if t.name in Q.__members__ and (t.name in ("F32", "F16") or Q[t.name] in gq._type_traits)}
DEFINED_HERE = sorted({t.name for t in GGML_TYPES} - GGUF_PY_CAN)

def finite_f16_bits(rng: np.random.Generator, n: int) -> np.ndarray:
  """Random fp16 bit patterns that are finite: every exponent but 31, so subnormals and +-0 occur."""
  bits = rng.integers(0, 1 << 16, n, dtype=np.uint32)
  return np.where((bits >> 10) & 31 == 31, bits & ~np.uint32(1 << 14), bits).astype(np.uint16)

def random_blocks(name: str, n: int, seed: int) -> np.ndarray:
  t = BY_NAME[name]
  rng = np.random.default_rng(seed)
  raw = rng.integers(0, 256, (n, t.block_bytes), dtype=np.uint8)
  if name in FP16_FIELDS:
    off, cnt = FP16_FIELDS[name]
    raw[:, off:off + 2 * cnt] = finite_f16_bits(rng, n * cnt).view(np.uint8).reshape(n, 2 * cnt)
  if name == "IQ1_M":  # the fp16 scale is the top nibbles of the 4 scale words at byte 48
    d = finite_f16_bits(rng, n).astype(np.uint16)
    words = raw[:, 48:56].copy().view(np.uint16) & np.uint16(0x0FFF)
    words |= np.stack([(d >> s) & 0xF for s in (0, 4, 8, 12)], axis=1).astype(np.uint16) << np.uint16(12)
    raw[:, 48:56] = words.view(np.uint8)
  if name in ("F16", "BF16"): raw[:] = finite_f16_bits(rng, n).view(np.uint8).reshape(n, 2) if name == "F16" else raw
  if name in ("F32", "Q8_K"):  # finite float32 at byte 0
    f = rng.standard_normal(n).astype(np.float32) * np.float32(2.0) ** rng.integers(-140, 120, n).astype(np.float32)
    raw[:, 0:4] = f.view(np.uint8).reshape(n, 4)
  return raw

def tg_dequant(raw: np.ndarray, name: str) -> np.ndarray:
  t = BY_NAME[name]
  out = dequantize(raw, t.id, (raw.shape[0], t.block_elems))
  return out.cast(dtypes.float32).numpy() if dtypes.is_float(out.dtype) else out.numpy()

@pytest.mark.parametrize("name", sorted(GGUF_PY_CAN))
def test_random_payload_matches_gguf_py(name: str):
  raw = random_blocks(name, 48, seed=sum(map(ord, name)))
  ref = gq.dequantize(raw, Q[name]).reshape(raw.shape[0], -1)
  assert_same_bits(tg_dequant(raw, name), ref, name)

@pytest.mark.parametrize("tid", sorted(QUANTIZERS))
def test_quantized_by_gguf_py_round_trip(tid: int):
  name = next(t.name for t in GGML_TYPES if t.id == tid)
  rng = np.random.default_rng(tid)
  x = (rng.standard_normal((6, 512)) * np.array([1e-6, 1e-3, 1, 10, 1e2, 1e3], dtype=np.float32).reshape(6, 1)).astype(np.float32)
  x[0, :64] = 0  # all-zero blocks take the d == 0 path
  blocks = gq.quantize(x, Q[name]).view(np.uint8)
  mine = quantize(x, tid)
  assert np.array_equal(mine, blocks.reshape(mine.shape)), f"{name}: quantized bytes differ from gguf-py"
  ref = gq.dequantize(blocks, Q[name])
  assert_same_bits(dequantize(mine, tid, x.shape).cast(dtypes.float32).numpy(), ref, name)

def _definition(raw: np.ndarray, name: str) -> np.ndarray:
  """ggml's definitions (ggml-common.h) of the types gguf-py can't dequantize."""
  if name == "Q8_1": return raw[:, 0:2].copy().view(np.float16).astype(np.float32) * raw[:, 4:36].view(np.int8).astype(np.float32)
  if name == "Q8_K": return raw[:, 0:4].copy().view(np.float32) * raw[:, 4:260].view(np.int8).astype(np.float32)
  return raw.copy().view({"I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64, "F64": np.float64}[name]).reshape(raw.shape[0], 1)

@pytest.mark.parametrize("name", DEFINED_HERE)
def test_types_gguf_py_lacks_match_their_definition(name: str):
  raw = random_blocks(name, 40, seed=7)
  if name == "F64": raw[:] = np.random.default_rng(3).standard_normal(40).view(np.uint8).reshape(40, 8)
  ref = _definition(raw, name)
  t = BY_NAME[name]
  out = dequantize(raw, t.id, (raw.shape[0], t.block_elems)).numpy()
  if name in ("Q8_1", "Q8_K"): assert_same_bits(out, ref, name)
  else:
    assert out.dtype == ref.dtype and np.array_equal(out.view(np.uint8), ref.view(np.uint8)), name

def test_plain_types_keep_their_dtype():
  for name, dt in (("F32", dtypes.float32), ("F16", dtypes.float16), ("BF16", dtypes.bfloat16), ("F64", dtypes.float64), ("I8", dtypes.int8),
                   ("I16", dtypes.int16), ("I32", dtypes.int32), ("I64", dtypes.int64), ("Q4_K", dtypes.float32)):
    t = BY_NAME[name]
    assert dequantize(np.zeros(t.block_bytes * 2, np.uint8), t.id, (2 * t.block_elems,)).dtype == dt, name

def test_dequantize_accepts_bytes_and_checks_sizes():
  from tg_gguf import GGUFTensorError, GGUFUnknownTypeError
  t = BY_NAME["Q8_0"]
  raw = random_blocks("Q8_0", 4, 1)
  ref = gq.dequantize(raw, Q.Q8_0).reshape(2, 64)
  assert_same_bits(dequantize(raw.tobytes(), t.id, (2, 64)).numpy(), ref, "bytes input")
  with pytest.raises(GGUFTensorError, match="needs 136 bytes"): dequantize(raw.tobytes()[:-1], t.id, (2, 64))
  with pytest.raises(GGUFTensorError, match="multiple of the Q8_0 block size 32"): dequantize(raw.tobytes(), t.id, (8, 17))
  with pytest.raises(GGUFUnknownTypeError, match="GGML type id 199: no installed plugin provides it"): dequantize(b"", 199, (0,))

FUSED = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4"]

@pytest.mark.parametrize("name", FUSED)
def test_quantized_matmul_is_one_kernel(name: str):
  """The dequantization fuses into its consumer: x @ W.T with W quantized schedules one kernel reading the packed blocks, and
  computes the matmul of gguf-py's dequantized W (to float32 rounding: the summation order differs)."""
  t = BY_NAME[name]
  n_rows = 4
  raw = random_blocks(name, n_rows * 256 // t.block_elems, seed=3)
  if name in FP16_FIELDS:  # moderate scales, so the products stay in range
    off, cnt = FP16_FIELDS[name]
    raw[:, off:off + 2 * cnt] = np.full(raw.shape[0] * cnt, 0.01, np.float16).view(np.uint8).reshape(-1, 2 * cnt)
  if name == "MXFP4": raw[:, 0] = 120
  w_ref = gq.dequantize(raw, Q[name]).reshape(n_rows, 256)
  blocks = Tensor(raw).realize()
  x = Tensor(np.random.default_rng(0).standard_normal((3, 256)).astype(np.float32)).realize()
  from tg_core.engine.realize import run_schedule
  from tg_gguf.reader import dequantize_blocks, format_for
  y = x @ dequantize_blocks(blocks, format_for(t.id)).reshape(n_rows, 256).T
  items = y.schedule()
  kernels = [si for si in items if si.ast.op.name == "SINK"]
  assert len(kernels) == 1, f"{name}: {len(kernels)} kernels, the dequantization was not fused"
  run_schedule(items)
  np.testing.assert_allclose(y.numpy(), x.numpy() @ w_ref.T, rtol=1e-4, atol=1e-4 * float(np.abs(w_ref).max()) * 16)

def test_same_shape_tensors_share_one_graph():
  # the dequantize graph is built once per (format, block count, device) and its input substituted: tensors of one shape,
  # realized together, each dequantize their own blocks, and the graph is not rebuilt for the second
  from tg_gguf.reader import _dequant_graph
  raws = [random_blocks("Q4_K", 3, seed=s) for s in (11, 12, 13)]
  before = _dequant_graph.cache_info()
  outs = [dequantize(r, Q.Q4_K, (3, 256)) for r in raws]
  outs[0].realize(*outs[1:])
  after = _dequant_graph.cache_info()
  assert after.hits - before.hits >= 2 and after.misses - before.misses <= 1
  for r, o in zip(raws, outs): assert_same_bits(o.numpy(), gq.dequantize(r.reshape(1, -1), Q.Q4_K).reshape(3, 256), "Q4_K")

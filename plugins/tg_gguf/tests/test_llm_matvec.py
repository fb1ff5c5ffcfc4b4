"""The decode step's quantized matvec (Transformer._matvec over Weights' packed blocks, ROW_LANES rows interleaved byte by byte):
gguf-py's dequantized matrix times x, per format, in one kernel that runs the interleaved rows in the vector lanes."""
from __future__ import annotations
import itertools

import numpy as np
import pytest
from test_gguf_quants import FP16_FIELDS, random_blocks

from tg_core import Tensor
from tg_core.codegen.opt import OptOps
from tg_core.codegen.opt.heuristic import _row_lanes_reduce
from tg_core.device import Device
from tg_core.engine.realize import run_schedule
from tg_gguf.ggml_types import BY_NAME
from tg_gguf.llm.model import LANE_WORD, ROW_LANES, WIDE_MAX_ROWS, WIDE_ROW_LANES, Transformer, Weights, row_lanes, row_lanes_view
from tg_gguf.reader import format_for

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf import quants as gq  # noqa: E402

def _blocks(name: str, rows: int, cols: int) -> np.ndarray:
  t = BY_NAME[name]
  raw = random_blocks(name, rows * cols // t.block_elems, seed=rows + cols)
  off, cnt = FP16_FIELDS[name]  # moderate scales: the products stay in range
  raw[:, off:off + 2 * cnt] = np.random.default_rng(1).uniform(0.001, 0.01, raw.shape[0] * cnt).astype(np.float16).view(np.uint8).reshape(-1, 2 * cnt)
  return raw

def _row_lane_kernel(rows: int) -> bool:
  """Does a matvec over `rows` interleaved rows take the row-lanes opts? Where the rows are more than one group of lanes: a single
  group's loads are contiguous along the whole output axis, an ordinary vectorized matvec."""
  return 0 < row_lanes("CPU", rows) < rows

@pytest.mark.parametrize("name,rows", [("Q4_0", 48), ("Q4_1", 40), ("Q5_0", 24), ("Q5_1", 16), ("Q8_0", 32), ("Q4_K", 16), ("Q5_K", 16),
                                       ("Q6_K", 24), ("Q2_K", 16), ("Q3_K", 16), ("Q4_1", 12)])
def test_matvec_matches_gguf_py(name: str, rows: int):
  """12 rows: not a multiple of ROW_LANES, held as stored (no interleave), the kernel takes the ordinary path; 16, 32, 48 rows are
  interleaved by 16 on a host with 16 fp32 lanes (row_lanes), the others by 8."""
  cols = 512
  raw = _blocks(name, rows, cols)
  fmt = format_for(BY_NAME[name].id)
  wb = Weights._blocked(Weights._interleave(Tensor(raw, device="CPU").realize(), rows), fmt, rows, cols)
  x = np.random.default_rng(2).standard_normal((1, 1, cols)).astype(np.float32)
  y = Transformer._matvec(Tensor(x, device="CPU"), wb)
  items = y.schedule()
  kernels = [si for si in items if si.ast.op.name == "SINK"]
  assert len(kernels) == 1, f"{name}: {len(kernels)} kernels"
  lanes = _row_lanes_reduce(kernels[0].ast, Device["CPU"].renderer.caps)
  assert (lanes is not None) == _row_lane_kernel(rows), f"{name} {rows} rows: row-lane opts {lanes}"
  if lanes is not None: assert lanes[0].op is OptOps.UPCAST and lanes[0].arg == row_lanes("CPU", rows), lanes
  run_schedule(items)
  ref = gq.dequantize(raw, Q[name]).reshape(rows, cols).astype(np.float64) @ x.reshape(cols).astype(np.float64)
  np.testing.assert_allclose(y.numpy().reshape(rows), ref, rtol=1e-4, atol=1e-5 * float(np.abs(ref).max()))

def test_interleave_keeps_the_blocks():
  """The interleaved buffer, viewed back, is the stored blocks byte for byte (every consumer of Weights sees the file's blocks)."""
  raw = _blocks("Q4_K", 16, 512)
  t = Weights._interleave(Tensor(raw, device="CPU").realize(), 16)
  np.testing.assert_array_equal(t.numpy(), raw)

@pytest.mark.parametrize("name", ["Q5_K", "Q4_K"])
def test_weights_read_from_the_file_into_the_lanes(tmp_path, name: str):
  """Weights reads each quantized matrix from the file straight into its ROW_LANES layout (a fused group's members' rows
  concatenated, the reads crossing its staging slabs and the members' ends): viewed back, every member is its stored blocks,
  and the buffer is what the kernel interleave (byte-interleaved Q5_K) or the numpy one (word-interleaved Q4_K, LANE_WORD)
  makes of them."""
  from gguf import GGUFWriter
  from tg_gguf.reader import GGUFFile
  cols = 256 * 64  # rows of 9216 (Q4_K) or 11264 (Q5_K) bytes: a slab holds 56 or 40 rows, the 136 rows of the q/k/v group take 3 or 4
  shapes = {"blk.0.attn_q.weight": 64, "blk.0.attn_k.weight": 32, "blk.0.attn_v.weight": 40, "blk.0.ffn_down.weight": 12}
  raws = {n: _blocks(name, r, cols) for n, r in shapes.items()}
  w = GGUFWriter(tmp_path / "m.gguf", "llama")
  w.add_block_count(1)
  for n, raw in raws.items(): w.add_tensor(n, raw.reshape(shapes[n], -1), raw_dtype=Q[name])
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  ws = Weights(GGUFFile(tmp_path / "m.gguf"), "CPU")
  assert list(ws.fused) == ["blk.0.attn_q.weight"] and ws.fused["blk.0.attn_q.weight"][0] == tuple(list(shapes)[:3])
  for n, raw in raws.items(): np.testing.assert_array_equal(ws.packed[n].numpy(), raw, err_msg=n)
  group = np.concatenate([raws[n] for n in list(shapes)[:3]])
  if name in LANE_WORD:
    np.testing.assert_array_equal(ws._lanes["blk.0.attn_q.weight"].numpy(), Weights._interleave_words(group, 136, "CPU").numpy())
  else:
    lanes = Weights._interleave(Tensor(group, device="CPU").realize(), 136)
    np.testing.assert_array_equal(_base_bytes(ws.packed["blk.0.attn_q.weight"]), _base_bytes(lanes))

def _base_bytes(t: Tensor) -> np.ndarray:
  from tg_core.engine.realize import buffer_of
  return np.frombuffer(buffer_of(t.uop.base).as_buffer(), dtype=np.uint8)

@pytest.mark.parametrize("name,rows", [("Q4_0", 16), ("Q4_1", 40), ("Q8_0", 32), ("Q4_1", 12), ("Q5_0", 24), ("Q5_0", 12), ("Q6_K", 24)])
def test_factored_matvec_matches_gguf_py(name: str, rows: int):
  """The decode step's factored matvec (per group: scale * sum(q * x) + min * sum(x)): the products in one kernel that runs the
  interleaved rows in the vector lanes (rows a multiple of ROW_LANES) with the group sums inside it, the sums of x in another."""
  cols = 512
  raw = _blocks(name, rows, cols)
  fmt = format_for(BY_NAME[name].id)
  packed = Weights._interleave(Tensor(raw, device="CPU").realize(), rows)
  fz = Weights._factored(packed, fmt, rows, cols)
  assert fz is not None and (fz.min is None) == (name in ("Q8_0", "Q5_0", "Q6_K")), name
  x = np.random.default_rng(3).standard_normal((1, 1, cols)).astype(np.float32)
  y = Transformer.matvec(Tensor(x, device="CPU"), Weights._blocked(packed, fmt, rows, cols), fz)
  items = y.schedule()
  kernels = [si for si in items if si.ast.op.name == "SINK"]
  assert len(kernels) == (1 if fz.min is None else 2), f"{name}: {len(kernels)} kernels"
  lanes = _row_lanes_reduce(kernels[-1].ast, Device["CPU"].renderer.caps)
  assert (lanes is not None) == _row_lane_kernel(rows), f"{name} {rows} rows: row-lane opts {lanes}"
  if lanes is not None: assert lanes[0].arg == row_lanes("CPU", rows), lanes
  run_schedule(items)
  ref = gq.dequantize(raw, Q[name]).reshape(rows, cols).astype(np.float64) @ x.reshape(cols).astype(np.float64)
  np.testing.assert_allclose(y.numpy().reshape(rows), ref, rtol=1e-4, atol=1e-5 * float(np.abs(ref).max()))

@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q8_0", "Q5_0", "Q6_K"])
def test_factored_decode_is_the_dequantized_value(name: str):
  """scale * q + min of quants.FACTORED equals gguf-py's dequantized blocks (exactly: each term is one rounding of the same value),
  q's elements in FACTORED_ORDER's order where it has one. Q6_K's is d * (sc * (q - 32)), one rounding where ggml's (d * sc) *
  (q - 32) has two: within 2 float32 ulps."""
  from tg_gguf.quants import FACTORED, FACTORED_ORDER
  raw = _blocks(name, 8, 512)
  scale, q, mn = FACTORED[name](Tensor(raw, device="CPU"))
  got = (scale * q + mn if mn is not None else scale * q).numpy().reshape(raw.shape[0], -1)
  want = gq.dequantize(raw, Q[name]).reshape(raw.shape[0], -1)
  if (order := FACTORED_ORDER.get(name)) is not None: want = want.reshape(-1, *order[0]).transpose(0, *(1 + p for p in order[1])).reshape(want.shape)
  if name == "Q6_K": np.testing.assert_allclose(got, want, rtol=2.5e-7, atol=0)
  else: np.testing.assert_array_equal(got, want)

def _q8_blocks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """numpy's int8 quantization of x per 32-element block (llama.cpp's q8_1 for x): d = max|x| / 127, q = round(x / d)."""
  xb = x.reshape(-1, 32).astype(np.float64)
  d = np.abs(xb).max(-1, keepdims=True) / 127
  return d, np.round(xb / np.where(d > 0, d, 1)).astype(np.int64)

def _q_d_m(name: str, raw: np.ndarray, rows: int, nb: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(q (rows, nb, 32) int, d, min (rows, nb) float64) of a 32-block format from the file's bytes: value = d * q + min."""
  half = lambda o: raw[:, o:o + 2].copy().view(np.float16).astype(np.float64).reshape(rows, nb)  # noqa: E731
  if name == "Q8_0": return raw[:, 2:34].view(np.int8).astype(np.int64).reshape(rows, nb, 32), half(0), np.zeros((rows, nb))
  qs = raw[:, {"Q4_0": 2, "Q4_1": 4}[name]:][:, :16].reshape(rows, nb, 16).astype(np.int64)
  q = np.concatenate([qs & 15, qs >> 4], axis=-1)
  return q, half(0), half(2) if name == "Q4_1" else -8 * half(0)

@pytest.mark.parametrize("lanes_by", [ROW_LANES, WIDE_ROW_LANES])
@pytest.mark.parametrize("name,rows,cols", [("Q4_1", 48, 512), ("Q4_1", 16, 1536), ("Q4_0", 32, 512), ("Q8_0", 32, 512), ("Q8_0", 16, 640)])
def test_dot_matvec_matches_int8_reference(name: str, rows: int, cols: int, lanes_by: int):
  """Transformer.dot_matvec (the decode step's integer matvec over word-interleaved rows) is, per block, d_w * d_x * sum(q_w * q_x)
  + m_w * sum(x) with x's int8 quantization: checked against that sum in float64 from the file's bytes, and against gguf-py's
  dequantized matrix times the unquantized x within what x's int8 rounding allows. Q4_0 and Q8_0 blocks come in pairs, the
  first one's quants 2 bytes off the word grid. Rows interleaved by 8 and by 16 (row_lanes: AVX2 and AVX-512 hosts)."""
  raw = _blocks(name, rows, cols)
  fmt = format_for(BY_NAME[name].id)
  dz = Weights._dot(Weights._interleave_words(raw, rows, "CPU", lanes_by), fmt, rows, cols)
  assert dz is not None
  x = np.random.default_rng(3).standard_normal(cols).astype(np.float32)
  x[32:64] = 0  # an all-zero block: d_x = 0
  got = Transformer.dot_matvec(Tensor(x.reshape(1, 1, cols), device="CPU"), dz).numpy().reshape(rows)
  nb = cols // 32
  q_w, d_w, m_w = _q_d_m(name, raw, rows, nb)
  d_x, q_x = _q8_blocks(x)
  ref = (d_w * d_x.reshape(nb) * (q_w * q_x.reshape(1, nb, 32)).sum(-1) + m_w * x.reshape(nb, 32).astype(np.float64).sum(-1)).sum(-1)
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))
  exact = gq.dequantize(raw, Q[name]).reshape(rows, cols).astype(np.float64) @ x.astype(np.float64)
  np.testing.assert_allclose(got, exact, atol=2e-2 * float(np.abs(exact).max()))

def test_word_interleaved_lanes_keep_the_blocks():
  """A LANE_WORD format's lanes buffer (int32 words), viewed back as bytes, is the stored blocks (prefill and the dequantized
  views read the file's blocks through it)."""
  for (name, bb), by in itertools.product((("Q4_1", 20), ("Q8_0", 34)), (ROW_LANES, WIDE_ROW_LANES)):
    raw = _blocks(name, 16, 512)
    lanes = Weights._interleave_words(raw, 16, "CPU", by)
    assert lanes.shape[-1] == by
    np.testing.assert_array_equal(row_lanes_view(lanes, bb).numpy(), raw)

def test_row_lanes_follow_the_vector_width(monkeypatch: pytest.MonkeyPatch):
  """16 rows a vector where the renderer's vectors hold 16 fp32 lanes (AVX-512), 16 divides the rows and they are at most
  WIDE_MAX_ROWS, else 8 (AVX2), else none."""
  import dataclasses
  r = Device["CPU"].renderer
  for width, rows, want in ((16, 48, 16), (16, 40, 8), (16, 12, 0), (16, WIDE_MAX_ROWS + 16, 8), (8, 48, 8), (8, 40, 8), (8, 12, 0)):
    monkeypatch.setattr(r, "caps", dataclasses.replace(r.caps, vector_width=width))
    assert row_lanes("CPU", rows) == want, (width, rows)

def _mins(name: str, raw: np.ndarray) -> np.ndarray:
  """(n_blocks, block_elems / 32) the min of each 32-element run of a k-quant or Q5_0 block, decoded from the file's bytes: the
  part of each value that the integer dot products take as min * sum(x) (Q6_K: none, its q - 32 is a signed byte)."""
  half = lambda o: raw[:, o:o + 2].copy().view(np.float16).astype(np.float64)  # noqa: E731
  if name == "Q5_0": return -16 * half(0)
  if name == "Q4_K":  # ggml's get_scale_min_k4: the 6-bit mins of sub-blocks 0..3 in bytes 8..11, of 4..7 split over bytes 12..15 and 8..11
    sc = raw[:, 4:16].astype(np.int64)
    return -half(2) * np.concatenate([sc[:, 4:8] & 63, (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)], axis=1)
  return np.zeros((raw.shape[0], 8))

@pytest.fixture(params=["native", "avx2", "portable"])
def isa(request: pytest.FixtureRequest):
  """The host's instruction sets, AVX2 only (no AVX-512: DP4A by vpmaddubsw/vpmaddwd, 8-lane vectors) or neither (DP4A in
  portable IR), as the x86 renderer sees them."""
  from tg_core.engine import realize
  r = Device["CPU"].renderer
  flags = [f for f in ("avx2", "avx512", "avx512vnni", "avx512vl") if hasattr(r, f)]
  have = {f: getattr(r, f) for f in flags}
  for f in flags: setattr(r, f, have[f] and (request.param == "native" or (request.param == "avx2" and f == "avx2")))
  realize._runner_cache.clear()  # the runner cache keys on the renderer's caps, not on these flags
  yield request.param
  for f, v in have.items(): setattr(r, f, v)
  realize._runner_cache.clear()

@pytest.mark.parametrize("lanes_by", [ROW_LANES, WIDE_ROW_LANES])
@pytest.mark.parametrize("name,cols", [("Q5_0", 640), ("Q5_0", 1024), ("Q4_K", 512), ("Q4_K", 1024), ("Q6_K", 512), ("Q6_K", 1024)])
def test_kquant_dot_matvec_matches_int8_reference(name: str, cols: int, lanes_by: int, isa: str):
  """Transformer.dot_matvec over Q5_0, Q4_K and Q6_K (quants.DOT: 5-bit q from qs and qh, 6-bit scales and mins, 16-element int8
  scales, blocks off the word grid) against numpy: gguf-py's dequantized matrix W times x's int8 quantization done here, per
  32-element block d_x * sum((W - min) * q_x) + min * sum(x) in float64 (min: what the format subtracts, taken against the float
  sum of x as for Q4_0); and against W times the unquantized x within what x's int8 rounding allows. Rows interleaved by 8 and 16,
  rendered with the host's instructions, AVX2 only and portable IR."""
  rows = 32
  raw = _blocks(name, rows, cols)
  fmt = format_for(BY_NAME[name].id)
  dz = Weights._dot(Weights._interleave_words(raw, rows, "CPU", lanes_by), fmt, rows, cols)
  assert dz is not None
  x = np.random.default_rng(3).standard_normal(cols).astype(np.float32)
  x[32:64] = 0  # an all-zero block: d_x = 0
  got = Transformer.dot_matvec(Tensor(x.reshape(1, 1, cols), device="CPU"), dz).numpy().reshape(rows)
  nb = cols // 32
  w = gq.dequantize(raw, Q[name]).reshape(rows, nb, 32).astype(np.float64)
  m = _mins(name, raw).reshape(rows, nb, 1)
  d_x, q_x = _q8_blocks(x)
  xb = x.reshape(1, nb, 32).astype(np.float64)
  ref = (d_x.reshape(1, nb) * ((w - m) * q_x.reshape(1, nb, 32)).sum(-1) + (m * xb).sum(-1)).sum(-1)
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))
  exact = (w * xb).sum((-2, -1))
  np.testing.assert_allclose(got, exact, atol=2e-2 * float(np.abs(exact).max()))

def test_kquant_word_lanes_keep_the_blocks():
  """Q5_0, Q4_K and Q6_K lanes buffers (word-interleaved, LANE_WORD), viewed back as bytes, are the stored blocks."""
  for name, by in itertools.product(("Q5_0", "Q4_K", "Q6_K"), (ROW_LANES, WIDE_ROW_LANES)):
    raw = _blocks(name, 16, 1024)
    lanes = Weights._interleave_words(raw, 16, "CPU", by)
    np.testing.assert_array_equal(row_lanes_view(lanes, BY_NAME[name].block_bytes).numpy(), raw, err_msg=f"{name} by {by}")

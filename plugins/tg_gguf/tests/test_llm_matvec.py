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
from tg_gguf.quants import q8_level_sums, quantize_q8_residual
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
    np.testing.assert_array_equal(ws._lanes["blk.0.attn_q.weight"].numpy(), Weights._interleave_words(group, 136, "CPU", name).numpy())
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

def _q_d_m(name: str, raw: np.ndarray, rows: int, nb: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(q (rows, nb, 32) int, d, min (rows, nb) float64) of a 32-block format from the file's bytes: value = d * q + min."""
  half = lambda o: raw[:, o:o + 2].copy().view(np.float16).astype(np.float64).reshape(rows, nb)  # noqa: E731
  if name == "Q8_0": return raw[:, 2:34].view(np.int8).astype(np.int64).reshape(rows, nb, 32), half(0), np.zeros((rows, nb))
  qs = raw[:, {"Q4_0": 2, "Q4_1": 4}[name]:][:, :16].reshape(rows, nb, 16).astype(np.int64)
  q = np.concatenate([qs & 15, qs >> 4], axis=-1)
  return q, half(0), half(2) if name == "Q4_1" else -8 * half(0)

# the renderer's x86 paths for DP4A: (flags set, the others off), as bench/quant_matvec_ab.py switches them
ISA_PATHS = {"vnni": ("avx2", "avx512", "avx512vnni", "avx512vl"), "avx2": ("avx2",), "portable": ()}

@pytest.mark.parametrize("path", list(ISA_PATHS))
@pytest.mark.parametrize("lanes_by", [ROW_LANES, WIDE_ROW_LANES])
def test_q8_0_dot_matvec_extremes_on_every_path(path: str, lanes_by: int, monkeypatch: pytest.MonkeyPatch):
  """Q8_0's integer matvec takes its quants as unsigned bytes q + 128 (quants.DOT_OFFSET: one vpdpbusd a word, no sign handling)
  and subtracts 128 * the sum of x's int8 values per block (both levels): exact against the signed products in int64 for quants
  of -128, -127 and 127 against x's -127 and 127 (numpy's two-level quantization), on each DP4A path the renderer has (VNNI,
  AVX2's split bytes, portable IR) where the host has it. Several units of blocks, so that the sums over units run in one reduce with both blocks of a unit."""
  from tg_core.engine import realize
  r = Device["CPU"].renderer
  have = {"avx2": r.avx2, "avx512": r.avx512, "avx512vnni": r.avx512vnni, "avx512vl": r.avx512vl}  # the x86 renderer's declared flags
  if not all(have[f] for f in ISA_PATHS[path]): pytest.skip(f"the host has no {path}")
  for f in ISA_PATHS["vnni"]: monkeypatch.setattr(r, f, f in ISA_PATHS[path])
  monkeypatch.setattr(realize, "_runner_cache", {})  # keyed on the renderer's caps, not on these flags
  rows, cols = 32, 256
  raw = _blocks("Q8_0", rows, cols)
  raw[:rows // 2, 2:34] = np.array([0x80, 0x81, 0x7f, 0x80], dtype=np.uint8).repeat(8)  # -128, -127, 127, -128 ...
  x = np.random.default_rng(5).standard_normal(cols).astype(np.float32)
  x[:32] = np.where(np.arange(32) % 2 == 0, -1.0, 1.0)  # int8 -127 and 127
  x[64:96] = 0
  dz = Weights._dot(Weights._interleave_words(raw, rows, "CPU", "Q8_0", lanes_by), format_for(BY_NAME["Q8_0"].id), rows, cols)
  assert dz is not None and all(z.offset == 128 for z in dz)
  got = Transformer.dot_matvec(Tensor(x.reshape(1, 1, cols), device="CPU"), dz).numpy().reshape(rows)
  nb = cols // 32
  q_w, d_w, _ = _q_d_m("Q8_0", raw, rows, nb)
  d_x, hi, lo = _q8_residual(x)
  ref = (d_w * d_x.reshape(nb) / 127 * (q_w * (127 * hi + lo).reshape(1, nb, 32)).sum(-1)).sum(-1)
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))

def test_word_interleaved_lanes_keep_the_blocks():
  """A LANE_WORD format's lanes buffer (int32 words), viewed back as bytes, is the stored blocks (prefill and the dequantized
  views read the file's blocks through it)."""
  for (name, bb), by in itertools.product((("Q4_1", 20), ("Q8_0", 34)), (ROW_LANES, WIDE_ROW_LANES)):
    raw = _blocks(name, 16, 512)
    lanes = Weights._interleave_words(raw, 16, "CPU", name, by)
    assert lanes.shape[-1] == by
    np.testing.assert_array_equal(row_lanes_view(lanes, bb, name).numpy(), raw)

def test_row_lanes_follow_the_vector_width(monkeypatch: pytest.MonkeyPatch):
  """16 rows a vector where the renderer's vectors hold 16 fp32 lanes (AVX-512), 16 divides the rows and they are at most
  WIDE_MAX_ROWS, else 8 (AVX2), else none."""
  import dataclasses
  r = Device["CPU"].renderer
  for width, rows, want in ((16, 48, 16), (16, 40, 8), (16, 12, 0), (16, WIDE_MAX_ROWS + 16, 8), (8, 48, 8), (8, 40, 8), (8, 12, 0)):
    monkeypatch.setattr(r, "caps", dataclasses.replace(r.caps, vector_width=width))
    assert row_lanes("CPU", rows) == want, (width, rows)

@pytest.mark.parametrize("name,rows,cols,T", [("Q4_1", 48, 512, 5), ("Q4_1", 32, 576, 16), ("Q4_0", 32, 512, 8), ("Q8_0", 16, 640, 3)])
def test_dot_matmul_matches_int8_reference(name: str, rows: int, cols: int, T: int):
  """Transformer.dot_matmul (prefill's integer matmul over word-interleaved rows, T tokens) is, per token and block,
  d_w * d_x / 127 * sum(q_w * (127 hi + lo)) + m_w * sum(x) with each token's x quantized per block in two int8 levels: checked
  against that sum in float64 from the file's bytes and numpy's two-level quantization, and against gguf-py's dequantized
  matrix times the unquantized x, which two levels follow to ~1e-4 of the largest output (one level: 2e-2)."""
  raw = _blocks(name, rows, cols)
  fmt = format_for(BY_NAME[name].id)
  dz = Weights._dot(Weights._interleave_words(raw, rows, "CPU", name), fmt, rows, cols)
  assert dz is not None
  x = np.random.default_rng(4).standard_normal((T, cols)).astype(np.float32)
  x[1, 32:64] = 0  # an all-zero block: d_x = 0
  got = Transformer.dot_matmul(Tensor(x.reshape(1, T, cols), device="CPU"), dz).numpy()
  assert got.shape == (1, T, rows)
  nb = cols // 32
  q_w, d_w, m_w = _q_d_m(name, raw, rows, nb)
  for t in range(T):
    d_x, hi, lo = _q8_residual(x[t])
    q_x = 127 * hi + lo
    ref = (d_w * d_x.reshape(nb) / 127 * (q_w * q_x.reshape(1, nb, 32)).sum(-1) + m_w * x[t].reshape(nb, 32).astype(np.float64).sum(-1)).sum(-1)
    np.testing.assert_allclose(got[0, t], ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))
  exact = x.astype(np.float64) @ gq.dequantize(raw, Q[name]).reshape(rows, cols).astype(np.float64).T
  np.testing.assert_allclose(got[0], exact, atol=1e-4 * float(np.abs(exact).max()))

def _q8_residual(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """numpy's two-level int8 quantization of float32 x per 32-element block: d = max|x| / 127, hi = round(x / d), lo =
  round(127 * (x / d - hi)), in float32 as the kernel computes them (1 / d, then products)."""
  xb = x.reshape(-1, 32).astype(np.float32)
  d = (np.abs(xb).max(-1, keepdims=True) / np.float32(127)).astype(np.float32)
  inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
  s = (xb * inv).astype(np.float32)
  hi = np.rint(s)
  return d.astype(np.float64), hi.astype(np.int64), np.rint(((s - hi) * np.float32(127)).astype(np.float32)).astype(np.int64)

def test_quantize_q8_residual_matches_numpy():
  """quantize_q8_residual's two levels against numpy's: hi = round(x / d) in -127..127, lo in -64..64, x = d * (hi + lo / 127)
  to within d / 254; an outlier block, an all-zero block (d = 0: both levels 0), each level's sums per 16 elements."""
  x = np.random.default_rng(5).standard_normal((3, 128)).astype(np.float32)
  x[0, 3], x[1, 32:64], x[2, 70] = 300.0, 0, -1e-3
  qt, st = quantize_q8_residual(Tensor(x, device="CPU"))
  q, stats, s = qt.numpy(), st.numpy(), q8_level_sums(qt).numpy()
  d = stats[..., 0]
  assert q.shape == (3, 4, 16) and stats.shape == (3, 4, 2) and s.shape == (3, 4, 4)
  np.testing.assert_allclose(stats[..., 1].reshape(-1), x.reshape(-1, 32).astype(np.float64).sum(-1), rtol=1e-5, atol=1e-5)
  hb, lb = (np.ascontiguousarray(w).view(np.int8).reshape(-1, 32).astype(np.int64) for w in (q[..., 0:8], q[..., 8:16]))
  d_ref, hi_ref, lo_ref = _q8_residual(x)
  np.testing.assert_allclose(d.reshape(-1, 1), d_ref, rtol=2.5e-7)  # (max / 127 may round as max * (1 / 127): an ulp)
  np.testing.assert_array_equal(hb, hi_ref)
  assert np.abs(lb - lo_ref).max() <= 1 and np.abs(lb).max() <= 64 and np.abs(hb).max() <= 127
  rec = d.reshape(-1, 1).astype(np.float64) * (hb + lb / 127)
  assert (np.abs(rec - x.reshape(-1, 32)) <= d.reshape(-1, 1) / 254 * 1.01 + 1e-12).all()
  assert not hb[5].any() and not lb[5].any()  # row 1, block 1
  np.testing.assert_array_equal(s.reshape(-1, 4), np.concatenate([v.reshape(-1, 2, 16).sum(-1) for v in (hb, lb)], axis=-1))

def test_dot_matmul_only_with_native_dp4a(monkeypatch: pytest.MonkeyPatch):
  """Prefill takes the integer matmul only where int8_prefill is on and the renderer renders DP4A (caps.native_dp4a); lowered to
  byte shifts it would be slower than the float32 matmul on decoded weights, which hosts without it keep."""
  import dataclasses
  import types
  raw = _blocks("Q4_1", 16, 512)
  dz = Weights._dot(Weights._interleave_words(raw, 16, "CPU", "Q4_1"), format_for(BY_NAME["Q4_1"].id), 16, 512)
  r = Device["CPU"].renderer
  x4, x1 = Tensor.empty(1, 4, 512, device="CPU"), Tensor.empty(1, 1, 512, device="CPU")
  for native, on, x, want in ((True, True, x4, True), (False, True, x4, False), (True, False, x4, False), (True, True, x1, False)):
    monkeypatch.setattr(r, "caps", dataclasses.replace(r.caps, native_dp4a=native))
    model = types.SimpleNamespace(int8_prefill=on, device="CPU")
    assert Transformer._dot_prefill(model, x, dz) is want, (native, on, x.shape)  # type: ignore[arg-type]
  assert Transformer._dot_prefill(types.SimpleNamespace(int8_prefill=True, device="CPU"), x4, None) is False  # type: ignore[arg-type]

@pytest.mark.parametrize("rows,cols,T", [(576, 576, 128), (256, 1024, 64), (576, 1536, 16)])
def test_dot_matmul_takes_a_vector_tile(rows: int, cols: int, T: int):
  """dot_matmul's kernel is a big one (its DP4As count 4 multiply-adds each, 16 a block): on a target with a big register tile
  the heuristic tiles it as a matmul, at least a whole vector of rows (a native 16-lane DP4A: vpdpbusd) by several tokens.
  Sized by its loops alone (the blocks, not their words) it took the mid-size 4 x 4 tile, whose 4-lane DP4A is the portable
  byte products; half the big tile's columns, as the block's unpacked words share the registers with the accumulators."""
  from tg_core.codegen.opt.heuristic import hand_coded_optimizations
  caps = Device["CPU"].renderer.caps
  if caps.big_reduce_tile is None: pytest.skip("the CPU renderer declares no big register tile")
  raw = _blocks("Q4_1", rows, cols)
  dz = Weights._dot(Weights._interleave_words(raw, rows, "CPU", "Q4_1"), format_for(BY_NAME["Q4_1"].id), rows, cols)
  y = Transformer.dot_matmul(Tensor.empty(1, T, cols, device="CPU"), dz)
  ast = [si for si in y.schedule() if si.ast.op.name == "SINK"][-1].ast
  ups = [o for o in hand_coded_optimizations(ast, caps) if o.op is OptOps.UPCAST]
  assert len(ups) == 2 and ups[0].arg >= min(16, caps.big_reduce_tile[0] // 2) and ups[1].arg >= 4, ups
  # half the tile's columns: each row vector's 8 unpacked words of a block stay in registers for all the tile's tokens
  assert ups[0].arg <= caps.big_reduce_tile[0] // 2, ups

def test_dot_matmul_avx2_tile_matches_int8_reference():
  """The int8 prefill matmul on an AVX2-only host (TG_CPU_ARCH=x86-64-v3, a fresh process: 8 lanes, the 16 x 6 register tile,
  DP4A as vpmaddubsw/vpmaddwd): the DP4A rule halves the tile's columns to one vector of rows (8), the tokens take the tile's 6
  rows (64 tokens padded to 66), and the product matches the int8 reference (test_dot_matmul_matches_int8_reference's)."""
  import os
  import subprocess
  import sys
  code = f"""
import sys
sys.path.insert(0, {os.path.dirname(__file__)!r})
import test_llm_matvec as t
from tg_core.codegen import simplified_kernel
from tg_core.codegen.opt import OptOps, hand_coded_optimizations
r = t.Device["CPU"].renderer
assert (r.caps.vector_width, r.caps.big_reduce_tile, r.caps.native_dp4a, r.avx2, r.avx512) == (8, (16, 6), True, True, False), r.caps
rows, cols, T = 256, 1024, 64
raw = t._blocks("Q4_1", rows, cols)
dz = t.Weights._dot(t.Weights._interleave_words(raw, rows, "CPU", "Q4_1"), t.format_for(t.BY_NAME["Q4_1"].id), rows, cols)
ast = [si for si in t.Transformer.dot_matmul(t.Tensor.empty(1, T, cols, device="CPU"), dz).schedule() if si.ast.op.name == "SINK"][-1].ast
opts = hand_coded_optimizations(simplified_kernel(ast), r.caps)
assert [(o.op, o.arg) for o in opts] == [(OptOps.UPCAST, 8), (OptOps.PADTO, 6), (OptOps.UPCAST, 6)], opts
t.test_dot_matmul_matches_int8_reference("Q4_1", rows, cols, T)
print("OK")
"""
  env = {**os.environ, "TG_CPU_ARCH": "x86-64-v3"}
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
  assert out.returncode == 0 and out.stdout.strip().endswith("OK"), f"stdout:\n{out.stdout[-3000:]}\nstderr:\n{out.stderr[-3000:]}"

def _mins(name: str, raw: np.ndarray) -> np.ndarray:
  """(n_blocks, block_elems / 32) the min of each 32-element run of a block, decoded from the file's bytes: the part of each
  value that the integer dot products take as min * sum(x) (Q8_0, Q6_K: none, their q's offset is taken off the integer sums)."""
  half = lambda o: raw[:, o:o + 2].copy().view(np.float16).astype(np.float64)  # noqa: E731
  if name in ("Q4_0", "Q4_1", "Q8_0"): return {"Q4_0": -8 * half(0), "Q4_1": half(2), "Q8_0": 0 * half(0)}[name]
  if name == "Q5_0": return -16 * half(0)
  if name == "Q4_K":  # ggml's get_scale_min_k4: the 6-bit mins of sub-blocks 0..3 in bytes 8..11, of 4..7 split over bytes 12..15 and 8..11
    sc = raw[:, 4:16].astype(np.int64)
    return -half(2) * np.concatenate([sc[:, 4:8] & 63, (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)], axis=1)
  return np.zeros((raw.shape[0], 8))

@pytest.fixture(params=list(ISA_PATHS))
def isa(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
  """The renderer's DP4A paths (ISA_PATHS: VNNI, AVX2 only: vpmaddubsw/vpmaddwd, portable IR) where the host has them."""
  from tg_core.engine import realize
  r = Device["CPU"].renderer
  have = {"avx2": r.avx2, "avx512": r.avx512, "avx512vnni": r.avx512vnni, "avx512vl": r.avx512vl}  # the x86 renderer's declared flags
  if not all(have[f] for f in ISA_PATHS[request.param]): pytest.skip(f"the host has no {request.param}")
  for f in ISA_PATHS["vnni"]: monkeypatch.setattr(r, f, f in ISA_PATHS[request.param])
  monkeypatch.setattr(realize, "_runner_cache", {})  # keyed on the renderer's caps, not on these flags
  return request.param

@pytest.mark.parametrize("lanes_by", [ROW_LANES, WIDE_ROW_LANES])
@pytest.mark.parametrize("name,rows,cols", [("Q4_1", 48, 512), ("Q4_1", 16, 1536), ("Q4_0", 32, 512), ("Q8_0", 32, 512), ("Q8_0", 16, 640),
                                            ("Q5_0", 32, 640), ("Q5_0", 32, 1024), ("Q4_K", 32, 512), ("Q4_K", 32, 1024),
                                            ("Q6_K", 32, 512), ("Q6_K", 32, 1024)])
def test_dot_matvec_matches_int8_reference(name: str, rows: int, cols: int, lanes_by: int, isa: str):
  """Transformer.dot_matvec (the decode step's integer matvec over word-interleaved rows; quants.DOT: nibbles, 5-bit q from qs
  and qh, 6-bit scales and mins, 16-element int8 scales, blocks off the word grid, q + 128 bytes) against numpy: gguf-py's
  dequantized matrix W times x's two-level int8 quantization done here (x = d * (hi + lo / 127)), per 32-element block
  d_x / 127 * sum((W - min) * (127 hi + lo)) + min * sum(x) in float64 (min: what the format takes against the float sum of x);
  and against W times the unquantized x within what two levels allow (each element within d_x / 254). Rows
  interleaved by 8 and 16, rendered with the host's instructions, AVX2 only and portable IR; a block with an outlier (the
  residual stream's ~1000x channels), an all-zero block (d_x = 0)."""
  raw = _blocks(name, rows, cols)
  fmt = format_for(BY_NAME[name].id)
  dz = Weights._dot(Weights._interleave_words(raw, rows, "CPU", name, lanes_by), fmt, rows, cols)
  assert dz is not None
  x = np.random.default_rng(3).standard_normal(cols).astype(np.float32)
  x[32:64] = 0
  x[70] = 1000.0
  got = Transformer.dot_matvec(Tensor(x.reshape(1, 1, cols), device="CPU"), dz).numpy().reshape(rows)
  nb = cols // 32
  w = gq.dequantize(raw, Q[name]).reshape(rows, nb, 32).astype(np.float64)
  m = _mins(name, raw).reshape(rows, nb, 1)
  d_x, hi, lo = _q8_residual(x)
  xb = x.reshape(1, nb, 32).astype(np.float64)
  ref = (d_x.reshape(1, nb) / 127 * ((w - m) * (127 * hi + lo).reshape(1, nb, 32)).sum(-1) + (m * xb).sum(-1)).sum(-1)
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))
  # each element of x within d_x / 254 of its two levels' value: the output within that times |W| (plus float rounding)
  exact = (w * xb).sum((-2, -1))
  bound = (d_x.reshape(1, nb) / 254 * np.abs(w).sum(-1)).sum(-1)
  assert (np.abs(got - exact) <= 1.01 * bound + 1e-5 * float(np.abs(exact).max())).all(), np.abs(got - exact) / bound

def test_kquant_word_lanes_keep_the_blocks():
  """Q5_0, Q4_K and Q6_K lanes buffers (word-interleaved, LANE_WORD), viewed back as bytes, are the stored blocks."""
  for name, by in itertools.product(("Q5_0", "Q4_K", "Q6_K"), (ROW_LANES, WIDE_ROW_LANES)):
    raw = _blocks(name, 16, 1024)
    lanes = Weights._interleave_words(raw, 16, "CPU", name, by)
    np.testing.assert_array_equal(row_lanes_view(lanes, BY_NAME[name].block_bytes, name).numpy(), raw, err_msg=f"{name} by {by}")

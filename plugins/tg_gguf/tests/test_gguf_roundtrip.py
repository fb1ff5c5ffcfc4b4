"""Round trips with gguf-py: save_gguf -> gguf-py's GGUFReader reads the same metadata (with the same types) and bytes; gguf-py's
GGUFWriter -> tg_gguf's reader likewise; and save_gguf -> tg_gguf's reader is exact, nested arrays and pinned types included."""
from __future__ import annotations
import pathlib

import numpy as np
import pytest
from test_gguf_quants import random_blocks

from tg_core import Tensor, dtypes
from tg_gguf import GGUFValue, GGUFValueType, QuantizedArray, save_gguf
from tg_gguf.ggml_types import BY_NAME
from tg_gguf.reader import GGUFFile

gguf = pytest.importorskip("gguf", reason="gguf-py is the reference (pip install gguf)")
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter  # noqa: E402
from gguf import GGUFValueType as RefVT  # noqa: E402

V = GGUFValueType
METADATA = {
  "general.architecture": "llama", "u8": GGUFValue(200, V.UINT8), "i8": GGUFValue(-100, V.INT8), "u16": GGUFValue(60000, V.UINT16),
  "i16": GGUFValue(-30000, V.INT16), "u32": GGUFValue(4_000_000_000, V.UINT32), "i32": -5, "f32": 0.1, "bool": True, "str": "héllo ✓",
  "u64": GGUFValue(2**64 - 1, V.UINT64), "i64": -2**40, "f64": GGUFValue(0.1, V.FLOAT64), "empty": "",
  "tokens": ["a", "bb", "", "日本"], "scores": [0.5, -1.25, 3.0], "ids": [1, 2, 3], "flags": [True, False],
  "big": GGUFValue(np.arange(1000, dtype=np.int16), (V.ARRAY, V.INT16))}
RNG = np.random.default_rng(0)
TENSORS = {
  "f32": RNG.standard_normal((3, 5)).astype(np.float32), "f16": RNG.standard_normal((4, 4)).astype(np.float16),
  "f64": RNG.standard_normal(7), "i8": RNG.integers(-128, 128, (2, 3), dtype=np.int8), "i16": RNG.integers(-999, 999, 5).astype(np.int16),
  "i32": RNG.integers(-2**31, 2**31, 6).astype(np.int32), "i64": RNG.integers(-2**62, 2**62, 2).astype(np.int64),
  "bf16": Tensor(RNG.standard_normal((2, 8)).astype(np.float32)).cast(dtypes.bfloat16),
  "q4_k": QuantizedArray(random_blocks("Q4_K", 6, 1), BY_NAME["Q4_K"].id, (3, 512)),
  "q8_0": QuantizedArray(random_blocks("Q8_0", 4, 2), BY_NAME["Q8_0"].id, (128,)),
  "scalar": np.array(3.5, dtype=np.float32)}

def _plain(v):
  return v.value.tolist() if isinstance(v, GGUFValue) and isinstance(v.value, np.ndarray) else v.value if isinstance(v, GGUFValue) else v

def _bytes(v) -> bytes:
  if isinstance(v, QuantizedArray): return v.data.tobytes()
  if isinstance(v, Tensor): return v.bitcast(dtypes.uint16).numpy().tobytes()
  return np.ascontiguousarray(v).tobytes()

def _shape(v) -> tuple[int, ...]:
  s = tuple(v.shape)
  return s if s else (1,)

@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
  p = tmp_path_factory.mktemp("rt") / "m.gguf"
  save_gguf(p, METADATA, TENSORS)
  return p

def test_save_then_gguf_py_reads_it(written: pathlib.Path):
  r = GGUFReader(written)
  fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
  assert list(fields) == list(METADATA)
  for k, v in METADATA.items():
    got = fields[k].contents()
    want = _plain(v)
    if isinstance(want, float) and fields[k].types[0] == RefVT.FLOAT32: want = float(np.float32(want))
    if isinstance(want, list) and want and isinstance(want[0], float): want = [float(np.float32(x)) for x in want]
    assert got == want, k
  assert fields["u8"].types == [RefVT.UINT8] and fields["f64"].types == [RefVT.FLOAT64] and fields["big"].types == [RefVT.ARRAY, RefVT.INT16]
  assert fields["i32"].types == [RefVT.INT32] and fields["i64"].types == [RefVT.INT64] and fields["tokens"].types == [RefVT.ARRAY, RefVT.STRING]
  ref = {t.name: t for t in r.tensors}
  assert list(ref) == list(TENSORS)
  for name, v in TENSORS.items():
    t = ref[name]
    assert np.asarray(t.data).tobytes() == _bytes(v), name
    assert tuple(int(s) for s in t.shape[::-1]) == _shape(v), name

def test_save_then_tg_reads_it_exactly(written: pathlib.Path):
  f = GGUFFile(written)
  assert f.version == 3 and f.alignment == 32
  for k, v in METADATA.items():
    want = _plain(v)
    if f.types[k] == V.FLOAT32: want = float(np.float32(want))
    if isinstance(want, list) and want and isinstance(want[0], float): want = [float(np.float32(x)) for x in want]
    assert f.metadata[k] == want, k
  assert f.types["u16"] == V.UINT16 and f.types["scores"] == (V.ARRAY, V.FLOAT32) and f.types["big"] == (V.ARRAY, V.INT16)
  for name, v in TENSORS.items():
    info = f.tensors[name]
    assert info.shape == _shape(v) and info.offset % 32 == 0, name
    assert f.raw(name, "PYTHON").numpy().tobytes() == _bytes(v), name
  assert np.array_equal(f.tensor("i16").numpy(), TENSORS["i16"]) and f.tensor("f16").dtype == dtypes.float16
  assert f.tensor("bf16").dtype == dtypes.bfloat16

def test_copy_with_types_is_byte_identical(written: pathlib.Path, tmp_path: pathlib.Path):
  """Reading a file and writing it back with its own types gives the same bytes."""
  f = GGUFFile(written)
  blocks = {n: QuantizedArray(f.raw(n, "PYTHON").numpy(), i.ggml_type, i.shape) for n, i in f.tensors.items()}
  save_gguf(tmp_path / "copy.gguf", f.metadata, blocks, types=f.types)
  assert (tmp_path / "copy.gguf").read_bytes() == written.read_bytes()

def test_nested_arrays_and_alignment(tmp_path: pathlib.Path):
  meta = {"nested": [[1, 2], [3], []], "deep": [[["x"]], [["y", "z"]]], "general.alignment": GGUFValue(64, V.UINT32)}
  save_gguf(tmp_path / "n.gguf", meta, {"a": np.ones(3, np.float32), "b": np.zeros(5, np.float32)})
  f = GGUFFile(tmp_path / "n.gguf")
  assert f.metadata["nested"] == [[1, 2], [3], []] and f.metadata["deep"] == [[["x"]], [["y", "z"]]]
  assert f.alignment == 64 and all(i.offset % 64 == 0 for i in f.tensors.values())
  r = GGUFReader(tmp_path / "n.gguf")  # gguf-py parses the nesting too
  assert r.fields["general.alignment"].contents() == 64 and [t.name for t in r.tensors] == ["a", "b"]

def test_gguf_py_writer_then_tg_reads_it(tmp_path: pathlib.Path):
  p = tmp_path / "w.gguf"
  w = GGUFWriter(p, "llama")
  w.add_uint8("u8", 7)
  w.add_int16("i16", -7)
  w.add_uint32("u32", 123456)
  w.add_uint64("u64", 2**60)
  w.add_float32("f32", 1.5)
  w.add_float64("f64", 2.25)
  w.add_bool("b", False)
  w.add_string("s", "text ✓")
  w.add_array("arr_s", ["x", "yy"])
  w.add_array("arr_i", [5, 6, 7])
  w.add_array("arr_f", [0.25, 0.5])
  a = RNG.standard_normal((4, 32)).astype(np.float32)
  q = random_blocks("Q6_K", 4, 3)
  w.add_tensor("a", a)
  w.add_tensor("h", a.astype(np.float16))
  w.add_tensor("q", q.reshape(2, -1), raw_dtype=GGMLQuantizationType.Q6_K)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  f = GGUFFile(p)
  m = f.metadata
  assert (m["general.architecture"], m["u8"], m["i16"], m["u32"], m["u64"], m["f32"], m["f64"], m["b"], m["s"]) == \
    ("llama", 7, -7, 123456, 2**60, 1.5, 2.25, False, "text ✓")
  assert m["arr_s"] == ["x", "yy"] and m["arr_i"] == [5, 6, 7] and m["arr_f"] == [0.25, 0.5]
  assert f.types["u8"] == V.UINT8 and f.types["u64"] == V.UINT64 and f.types["f64"] == V.FLOAT64
  assert np.array_equal(f.tensor("a", "PYTHON").numpy(), a) and np.array_equal(f.tensor("h", "PYTHON").numpy(), a.astype(np.float16))
  assert f.tensors["q"].shape == (2, 512) and f.raw("q", "PYTHON").numpy().tobytes() == q.tobytes()

def test_big_endian_file_from_gguf_py_is_refused_clearly(tmp_path: pathlib.Path):
  from gguf import GGUFEndian

  from tg_gguf import GGUFVersionError
  p = tmp_path / "be.gguf"
  w = GGUFWriter(p, "llama", endianess=GGUFEndian.BIG)
  w.add_uint32("n", 1)
  w.add_tensor("a", np.ones(4, np.float32))
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  with pytest.raises(GGUFVersionError, match="big-endian GGUF file .version 3.: only little-endian files are read"): GGUFFile(p)

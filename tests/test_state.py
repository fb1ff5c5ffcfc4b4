"""nn.state: safetensors round trips (every dtype, bit exact), interop with the PyPI `safetensors` package both ways, malformed
files, DISK-backed loading, and get_state_dict / get_parameters / load_state_dict."""
from __future__ import annotations
import json
import struct
from collections import OrderedDict, namedtuple

import numpy as np
import pytest

from helpers import torch
from tg_core import Device, nn
from tg_core.dtype import _to_np_storage, dtypes
from tg_core.nn.state import (SafetensorsError, get_parameters, get_state_dict, inverse_safe_dtypes, load_state_dict, safe_dtypes, safe_load,
                              safe_load_metadata, safe_save)
from tg_core.tensor import Tensor, _buffer_from_numpy

ALL_DTYPES = list(safe_dtypes.values())

def bits(dt, shape, seed: int = 0) -> np.ndarray:
  """Random storage bits for `dt` (any pattern, NaNs included), made by numpy."""
  rng = np.random.default_rng(seed)
  npdt = np.dtype(_to_np_storage(dt))
  if dt == dtypes.bool: return rng.integers(0, 2, shape).astype(np.bool_)
  return rng.integers(0, 256, (int(np.prod(shape)) * npdt.itemsize,), dtype=np.uint8).view(npdt).reshape(shape)

def tensor_of_bits(arr: np.ndarray, dt) -> Tensor: return Tensor(_buffer_from_numpy(arr, "PYTHON", dt))

def raw_bits(t: Tensor) -> bytes:
  """Storage bytes: numpy() keeps the bits for dtypes numpy has; data() is the raw bytes for the others (bfloat16, fp8)."""
  return t.numpy().tobytes() if t.dtype.fmt is not None else t.data().tobytes()

# *** round trip ***

@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (5,), (2, 3), (0,), (3, 0, 2), (1, 1, 7)])
def test_round_trip_every_dtype(tmp_path, dt, shape):
  arr = bits(dt, shape)
  fn = tmp_path / "t.safetensors"
  safe_save({"x": tensor_of_bits(arr, dt)}, fn)
  x = safe_load(fn)["x"]
  assert x.dtype == dt and x.shape == shape and x.device == f"DISK:{fn}"
  assert raw_bits(x) == arr.tobytes()

def test_round_trip_many_tensors_and_metadata(tmp_path):
  ts = {"w": Tensor([[1.0, 2.0], [3.0, 4.0]]), "b": Tensor([1, 2, 3], dtype=dtypes.int64), "flag": Tensor(True),
        "h": Tensor([0.5], dtype=dtypes.float16)}
  fn = tmp_path / "m.safetensors"
  safe_save(ts, fn, metadata={"format": "pt", "who": "tg"})
  out = safe_load(fn)
  assert list(out) == list(ts)
  for k, v in ts.items(): np.testing.assert_equal(out[k].numpy(), v.numpy())
  _, start, header = safe_load_metadata(fn)
  assert header["__metadata__"] == {"format": "pt", "who": "tg"} and start % 8 == 0 and start == 8 + struct.unpack("<Q", fn.read_bytes()[:8])[0]

def test_save_lazy_and_non_contiguous(tmp_path):
  base = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
  ts = {"t": base.T, "s": base.shrink(((1, 3), (1, 2))), "lazy": base * 2 + 1}
  fn = tmp_path / "l.safetensors"
  safe_save(ts, fn)
  out = safe_load(fn)
  for k, v in ts.items(): np.testing.assert_equal(out[k].numpy(), v.numpy())

def test_loaded_tensors_copy_to_compute_device(tmp_path):
  fn = tmp_path / "c.safetensors"
  safe_save({"x": Tensor([1.0, 2.0, 3.0]), "y": Tensor([1, 2], dtype=dtypes.bfloat16)}, fn)
  d = safe_load(fn)
  x = d["x"].to("PYTHON")
  assert x.device == "PYTHON" and (x * 2).numpy().tolist() == [2.0, 4.0, 6.0]
  assert d["y"].to("PYTHON").float().numpy().tolist() == [1.0, 2.0]

def test_resave_same_path_keeps_old_tensors(tmp_path):
  fn = tmp_path / "r.safetensors"
  safe_save({"x": Tensor([1.0, 2.0])}, fn)
  old = safe_load(fn)["x"]
  safe_save({"x": Tensor([5.0]), "z": Tensor([7, 8, 9])}, fn)
  assert old.numpy().tolist() == [1.0, 2.0]
  assert safe_load(fn)["x"].numpy().tolist() == [5.0]

def test_load_from_tensor(tmp_path):
  fn = tmp_path / "t.safetensors"
  safe_save({"a": Tensor([1.5, -2.0]), "b": Tensor([3], dtype=dtypes.uint8), "c": Tensor([1.0], dtype=dtypes.bfloat16)}, fn)
  out = safe_load(Tensor(fn.read_bytes()))
  assert out["a"].numpy().tolist() == [1.5, -2.0] and out["b"].dtype == dtypes.uint8 and out["b"].numpy().tolist() == [3]
  assert out["c"].dtype == dtypes.bfloat16 and out["c"].numpy().tolist() == [1.0]

def test_save_errors(tmp_path):
  with pytest.raises(SafetensorsError): safe_save({"x": np.zeros(3)}, tmp_path / "e.safetensors")  # type: ignore[dict-item]
  with pytest.raises(SafetensorsError): safe_save({"__metadata__": Tensor([1.0])}, tmp_path / "e.safetensors")
  with pytest.raises(SafetensorsError): safe_save({"x": Tensor([1.0])}, tmp_path / "e.safetensors", metadata={"a": 1})  # type: ignore[dict-item]
  assert not (tmp_path / "e.safetensors").exists() and list(tmp_path.iterdir()) == []
  assert issubclass(SafetensorsError, ValueError)

def test_dtype_tables():
  assert set(safe_dtypes) == {"BOOL", "I8", "U8", "I16", "U16", "I32", "U32", "I64", "U64", "F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2"}
  assert all(inverse_safe_dtypes[v] == k for k, v in safe_dtypes.items())

# *** interop with the safetensors package ***

TORCH_DT = {dtypes.bool: torch.bool, dtypes.int8: torch.int8, dtypes.uint8: torch.uint8, dtypes.int16: torch.int16, dtypes.uint16: torch.uint16,
            dtypes.int32: torch.int32, dtypes.uint32: torch.uint32, dtypes.int64: torch.int64, dtypes.uint64: torch.uint64,
            dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16, dtypes.float32: torch.float32, dtypes.float64: torch.float64,
            dtypes.fp8e4m3: torch.float8_e4m3fn, dtypes.fp8e5m2: torch.float8_e5m2}

def torch_of_bits(arr: np.ndarray, dt) -> torch.Tensor:
  if arr.dtype == np.bool_: return torch.from_numpy(arr.copy())
  u = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[arr.dtype.itemsize]
  return torch.from_numpy(arr.copy().view({1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}[arr.dtype.itemsize])).view(u).view(TORCH_DT[dt])

def torch_bits(t: torch.Tensor) -> bytes:
  if t.dtype == torch.bool: return t.numpy().tobytes()
  u = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
  return t.contiguous().view(u).numpy().tobytes()

def test_read_file_written_by_safetensors(tmp_path):
  st = pytest.importorskip("safetensors.torch")
  arrs = {f"t_{i}": (bits(dt, (2, 3) if i % 2 else (4,), seed=i), dt) for i, dt in enumerate(ALL_DTYPES)}
  arrs["scalar"] = (np.array(3.5, dtype=np.float32), dtypes.float32)
  arrs["empty"] = (np.zeros((0, 2), dtype=np.int32), dtypes.int32)
  fn = tmp_path / "theirs.safetensors"
  st.save_file({k: torch_of_bits(a, dt) for k, (a, dt) in arrs.items()}, str(fn), metadata={"origin": "safetensors"})
  out = safe_load(fn)
  assert set(out) == set(arrs)
  for k, (a, dt) in arrs.items():
    assert out[k].dtype == dt and out[k].shape == a.shape, k
    assert raw_bits(out[k]) == a.tobytes(), k
  assert safe_load_metadata(fn)[2]["__metadata__"] == {"origin": "safetensors"}

def test_safetensors_reads_our_file(tmp_path):
  st = pytest.importorskip("safetensors.torch")
  arrs = {f"t_{i}": (bits(dt, (3, 2) if i % 2 else (5,), seed=10 + i), dt) for i, dt in enumerate(ALL_DTYPES)}
  arrs["scalar"] = (np.array(7, dtype=np.int16), dtypes.int16)
  arrs["empty"] = (np.zeros((2, 0), dtype=np.float32), dtypes.float32)
  fn = tmp_path / "ours.safetensors"
  safe_save({k: tensor_of_bits(a, dt) for k, (a, dt) in arrs.items()}, fn, metadata={"a": "b"})
  out = st.load_file(str(fn))
  assert set(out) == set(arrs)
  for k, (a, dt) in arrs.items():
    assert out[k].dtype == TORCH_DT[dt] and tuple(out[k].shape) == a.shape, k
    assert torch_bits(out[k]) == a.tobytes(), k
  from safetensors import safe_open
  with safe_open(str(fn), "pt") as f: assert f.metadata() == {"a": "b"}

def test_safetensors_numpy_reads_our_file(tmp_path):
  stn = pytest.importorskip("safetensors.numpy")
  fn = tmp_path / "np.safetensors"
  x = np.arange(6, dtype=np.float64).reshape(2, 3)
  safe_save({"x": Tensor(x), "y": Tensor(np.array([1, -2], dtype=np.int8))}, fn)
  out = stn.load_file(str(fn))
  np.testing.assert_equal(out["x"], x)
  np.testing.assert_equal(out["y"], np.array([1, -2], dtype=np.int8))

def test_load_torch_model_weights_into_tg(tmp_path):
  st = pytest.importorskip("safetensors.torch")
  tmod = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
  fn = tmp_path / "model.safetensors"
  st.save_file(tmod.state_dict(), str(fn))
  class Net:
    def __init__(self): self.layers = {"0": nn.Linear(4, 3), "2": nn.Linear(3, 2)}
    def __call__(self, x): return self.layers["2"](self.layers["0"](x).relu())
  net = Net()
  loaded = load_state_dict(net, {k.replace("0.", "layers.0.", 1).replace("2.", "layers.2.", 1): v for k, v in safe_load(fn).items()})
  assert len(loaded) == 4 and all(t.device == Device.DEFAULT for t in loaded)
  x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
  np.testing.assert_allclose(net(Tensor(x)).numpy(), tmod(torch.tensor(x)).detach().numpy(), atol=1e-6, rtol=1e-5)

# *** malformed files ***

def write_raw(path, header: bytes, data: bytes = b"", n: int | None = None):
  path.write_bytes(struct.pack("<Q", len(header) if n is None else n) + header + data)
  return path

def hdr(d) -> bytes: return json.dumps(d).encode()

MALFORMED = {
  "empty_file": lambda p: (p.write_bytes(b""), p)[1],
  "short_length": lambda p: (p.write_bytes(b"\x05\x00\x00"), p)[1],
  "header_past_end": lambda p: write_raw(p, b'{"a":1}', n=1000),
  "huge_header_length": lambda p: write_raw(p, b"{}", n=2**62),
  "bad_json": lambda p: write_raw(p, b'{"x": {"dtype": "F32",'),
  "not_utf8": lambda p: write_raw(p, b'{"\xff\xfe": 1}'),
  "not_an_object": lambda p: write_raw(p, b"[1, 2, 3]"),
  "entry_not_object": lambda p: write_raw(p, hdr({"x": [1, 2]})),
  "missing_offsets": lambda p: write_raw(p, hdr({"x": {"dtype": "F32", "shape": [1]}}), b"\0" * 4),
  "unknown_dtype": lambda p: write_raw(p, hdr({"x": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}), b"\0" * 16),
  "dtype_not_str": lambda p: write_raw(p, hdr({"x": {"dtype": 7, "shape": [1], "data_offsets": [0, 4]}}), b"\0" * 4),
  "offsets_past_data": lambda p: write_raw(p, hdr({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}), b"\0" * 8),
  "negative_offset": lambda p: write_raw(p, hdr({"x": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}}), b"\0" * 8),
  "reversed_offsets": lambda p: write_raw(p, hdr({"x": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}}), b"\0" * 8),
  "size_mismatch": lambda p: write_raw(p, hdr({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}), b"\0" * 12),
  "negative_shape": lambda p: write_raw(p, hdr({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}), b""),
  "shape_not_list": lambda p: write_raw(p, hdr({"x": {"dtype": "F32", "shape": 4, "data_offsets": [0, 16]}}), b"\0" * 16),
  "offsets_wrong_length": lambda p: write_raw(p, hdr({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}}), b"\0" * 8),
  "metadata_not_object": lambda p: write_raw(p, hdr({"__metadata__": "x"})),
}

@pytest.mark.parametrize("case", list(MALFORMED), ids=list(MALFORMED))
def test_malformed_raises(tmp_path, case):
  fn = MALFORMED[case](tmp_path / f"{case}.safetensors")
  with pytest.raises(SafetensorsError) as e: safe_load(fn)
  assert str(fn) in str(e.value)

@pytest.mark.parametrize("case", ["header_past_end", "bad_json", "unknown_dtype", "offsets_past_data", "size_mismatch"])
def test_malformed_rejected_by_safetensors_too(tmp_path, case):
  # the reference implementation agrees these files are broken
  st = pytest.importorskip("safetensors.numpy")
  fn = MALFORMED[case](tmp_path / f"{case}.safetensors")
  with pytest.raises(Exception): st.load_file(str(fn))  # noqa: B017

def test_malformed_messages(tmp_path):
  msgs = {"empty_file": "truncated", "header_past_end": "truncated header", "bad_json": "JSON", "unknown_dtype": "unknown dtype 'F128'",
          "offsets_past_data": "out of range", "size_mismatch": "needs 12 bytes"}
  for case, msg in msgs.items():
    with pytest.raises(SafetensorsError, match=msg): safe_load(MALFORMED[case](tmp_path / f"{case}.safetensors"))

def test_malformed_tensor_input():
  with pytest.raises(SafetensorsError): safe_load(Tensor(b"\x10\x00\x00\x00\x00\x00\x00\x00{}"))

def test_missing_file(tmp_path):
  with pytest.raises(FileNotFoundError): safe_load(tmp_path / "nope.safetensors")

def test_trailing_space_padding_ok(tmp_path):
  fn = write_raw(tmp_path / "p.safetensors", hdr({"x": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}}) + b"   ", struct.pack("<i", -5))
  assert safe_load(fn)["x"].numpy().tolist() == [-5]

# *** state dicts ***

class Block:
  def __init__(self): self.lin, self.norm, self.extra = nn.Linear(2, 2), nn.LayerNorm(2), "not a tensor"

def test_get_state_dict_recursive():
  Pair = namedtuple("Pair", ["a", "b"])
  t1, t2, t3, t4 = Tensor([1.0]), Tensor([2.0]), Tensor([3.0]), Tensor([4.0])
  obj = {"blocks": [Block(), Block()], "pair": Pair(t1, t2), "od": OrderedDict(x=t3), "tup": (t4, 5, None)}
  sd = get_state_dict(obj)
  assert sorted(sd) == sorted(["blocks.0.lin.weight", "blocks.0.lin.bias", "blocks.0.norm.weight", "blocks.0.norm.bias", "blocks.1.lin.weight",
                               "blocks.1.lin.bias", "blocks.1.norm.weight", "blocks.1.norm.bias", "pair.a", "pair.b", "od.x", "tup.0"])
  assert sd["pair.a"] is t1 and sd["od.x"] is t3 and sd["tup.0"] is t4
  assert get_state_dict(t1) == {"": t1}
  assert get_state_dict(Block(), prefix="m.").keys() == {"m.lin.weight", "m.lin.bias", "m.norm.weight", "m.norm.bias"}

def test_get_parameters_dedups():
  b = Block()
  b.alias = b.lin.weight
  ps = get_parameters(b)
  assert len(ps) == 4 and all(isinstance(p, Tensor) for p in ps)

def test_load_state_dict_strict_and_lenient():
  b = Block()
  sd = {"lin.weight": Tensor([[1.0, 2.0], [3.0, 4.0]]), "lin.bias": Tensor([0.5, 0.5]), "norm.weight": Tensor([2.0, 2.0])}
  with pytest.raises(KeyError): load_state_dict(b, sd)
  ret = load_state_dict(b, sd, strict=False)
  assert len(ret) == 3 and b.lin.weight.numpy().tolist() == [[1.0, 2.0], [3.0, 4.0]] and b.norm.bias.numpy().tolist() == [0.0, 0.0]
  np.testing.assert_allclose(b.lin(Tensor([[1.0, 1.0]])).numpy(), [[3.5, 7.5]])

def test_load_state_dict_shape_mismatch():
  b = Block()
  sd = {k: v for k, v in get_state_dict(Block()).items()}
  sd["lin.bias"] = Tensor([1.0, 2.0, 3.0])
  with pytest.raises(ValueError, match="Shape mismatch"): load_state_dict(b, sd)

def test_load_state_dict_consume_and_verbose(capsys):
  b = Block()
  sd = {k: Tensor.ones(*v.shape) for k, v in get_state_dict(Block()).items()}
  sd["unused"] = Tensor([1.0])
  load_state_dict(b, sd, consume=True, verbose=True)
  assert list(sd) == ["unused"] and b.lin.bias.numpy().tolist() == [1.0, 1.0]
  assert "unused" in capsys.readouterr().out

def test_save_load_model_round_trip(tmp_path):
  a, b = Block(), Block()
  fn = tmp_path / "block.safetensors"
  safe_save(get_state_dict(a), fn)
  load_state_dict(b, safe_load(fn))
  for (k, va), vb in zip(get_state_dict(a).items(), get_state_dict(b).values()):
    assert vb.device == Device.DEFAULT, k
    np.testing.assert_equal(va.numpy(), vb.numpy())

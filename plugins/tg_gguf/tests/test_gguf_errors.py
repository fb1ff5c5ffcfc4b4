"""Malformed files: each raises its GGUFError subclass with a message that names the problem."""
from __future__ import annotations
import pathlib
import struct

import numpy as np
import pytest
from gguf_bytes import build, kv_str, kv_str_array, kv_u32, s, tensor_info

from tg_gguf import GGUFError, GGUFFormatError, GGUFMagicError, GGUFTensorError, GGUFTruncatedError, GGUFUnknownTypeError, GGUFVersionError
from tg_gguf.reader import GGUFFile

F32, Q8_0 = 0, 8
DATA = np.arange(64, dtype=np.float32).tobytes()

def good(**kw) -> bytes:
  infos = kw.pop("infos", [tensor_info("a", (8,), F32, 0), tensor_info("b", (4, 2), F32, 32)])
  return build(kw.pop("kvs", [kv_str("general.architecture", "x"), kv_str_array("tok", ["a", "b"])]), infos, kw.pop("data", DATA), **kw)

def open_bytes(tmp_path: pathlib.Path, raw: bytes) -> GGUFFile:
  p = tmp_path / "bad.gguf"
  p.write_bytes(raw)
  return GGUFFile(p)

ARCH = kv_str("general.architecture", "x")
CASES = [
  ("empty file", lambda: b"", GGUFTruncatedError, "truncated file: the magic"),
  ("truncated header", lambda: good()[:12], GGUFTruncatedError, "truncated file: tensor count needs 8 bytes at offset 8"),
  ("truncated kv", lambda: good()[:60], GGUFFormatError, "larger than the file"),
  ("bad magic", lambda: good(magic=b"GGML"), GGUFMagicError, "not a GGUF file: it starts with b'GGML'"),
  ("version 1", lambda: good(version=1), GGUFVersionError, "version 1"),
  ("future version", lambda: good(version=7), GGUFVersionError, "unsupported GGUF version 7"),
  ("big-endian", lambda: good(version=0x03000000), GGUFVersionError, "big-endian"),
  ("huge tensor count", lambda: good(n_tensors=2**40), GGUFFormatError, "tensor count 1099511627776 at offset 8 is larger than the file"),
  ("huge kv count", lambda: good(n_kv=2**62), GGUFFormatError, "metadata count"),
  ("huge string length", lambda: good(kvs=[s("k") + struct.pack("<IQ", 8, 2**50)]), GGUFFormatError, "length of metadata 'k'"),
  ("huge array count", lambda: good(kvs=[s("k") + struct.pack("<IIQ", 9, 6, 2**61)]), GGUFFormatError, "element count of metadata 'k'"),
  ("unknown value type", lambda: good(kvs=[s("k") + struct.pack("<I", 13)]), GGUFFormatError, "unknown value type 13"),
  ("bad utf-8 key", lambda: good(kvs=[s(b"\xff\xfe") + struct.pack("<II", 4, 1)]), GGUFFormatError, "not valid UTF-8"),
  ("bad utf-8 in a string array", lambda: good(kvs=[ARCH, s("tok") + struct.pack("<IIQ", 9, 8, 3) + s("a") + s(b"\xc3") + s("c")]),
   GGUFFormatError, r"metadata 'tok'\[1\] at offset \d+ is not valid UTF-8"),
  ("truncated string array", lambda: good(kvs=[ARCH, s("tok") + struct.pack("<IIQ", 9, 8, 2) + s("a") + struct.pack("<Q", 2**20)]),
   GGUFFormatError, r"metadata 'tok'\[1\]"),
  ("duplicate key", lambda: good(kvs=[kv_u32("k", 1), kv_u32("k", 2)]), GGUFFormatError, "'k' appears twice"),
  ("bad alignment", lambda: good(kvs=[kv_u32("general.alignment", 24)]), GGUFFormatError, "power of two, got 24"),
  ("offset past end", lambda: good(infos=[tensor_info("a", (8,), F32, 1024)]), GGUFTruncatedError, "'a' data (32 bytes at data offset 1024) is past"),
  ("misaligned offset", lambda: good(infos=[tensor_info("a", (4,), F32, 8)]), GGUFTensorError, "offset 8 is not a multiple of the alignment 32"),
  ("overlap", lambda: good(infos=[tensor_info("a", (16,), F32, 0), tensor_info("b", (8,), F32, 32)]), GGUFTensorError, "'a' and 'b' overlap"),
  ("dims overflow", lambda: good(infos=[tensor_info("a", (2**32, 2**32), F32, 0)]), GGUFTensorError, "overflow"),
  ("too many dims", lambda: good(infos=[tensor_info("a", (1,) * 9, F32, 0)]), GGUFTensorError, "9 dims"),
  ("partial block row", lambda: good(infos=[tensor_info("a", (16, 2), Q8_0, 0)]), GGUFTensorError, "rows of 16 elements, not a multiple of the Q8_0 block"),
  ("duplicate tensor", lambda: good(infos=[tensor_info("a", (8,), F32, 0), tensor_info("a", (8,), F32, 32)]), GGUFTensorError, "'a' appears twice"),
  ("unknown ggml type", lambda: good(infos=[tensor_info("a", (8,), 77, 0)]), GGUFUnknownTypeError, "GGML type id 77: no installed plugin provides it"),
  ("truncated data", lambda: good(data=DATA[:64])[:-8], GGUFTruncatedError, "'b' data (32 bytes at data offset 32) is past the end"),
]

@pytest.mark.parametrize("raw, err, msg", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed(tmp_path: pathlib.Path, raw, err: type[GGUFError], msg: str):
  with pytest.raises(err, match=msg.replace("(", r"\(").replace(")", r"\)").replace("'", "'")) as e:
    open_bytes(tmp_path, raw())
  assert isinstance(e.value, GGUFError) and "bad.gguf" in str(e.value)

def test_good_seed_opens(tmp_path: pathlib.Path):
  f = open_bytes(tmp_path, good())
  assert f.metadata == {"general.architecture": "x", "tok": ["a", "b"]}
  assert np.array_equal(f.tensor("b", "PYTHON").numpy(), np.arange(8, 16, dtype=np.float32).reshape(2, 4))

def test_string_array_reads_as_a_sequence(tmp_path: pathlib.Path):
  """An array of strings is held as its bytes (StringArray) and reads like the list of its strs."""
  words = ["", "a", "\u00e9t\u00e9", "\U0001f600", "x y", "\u4e2d"]
  tok = open_bytes(tmp_path, good(kvs=[kv_str("general.architecture", "x"), kv_str_array("tok", words)])).metadata["tok"]
  assert len(tok) == 6 and list(tok) == words and tok == words and tok[2] == words[2] and tok[-1] == words[-1] and tok[1:4] == words[1:4]
  assert tok != words[:-1] and tok != [*words[:-1], "y"]
  with pytest.raises(IndexError): tok[6]

def test_unknown_type_error_carries_the_id(tmp_path: pathlib.Path):
  with pytest.raises(GGUFUnknownTypeError) as e: open_bytes(tmp_path, good(infos=[tensor_info("a", (8,), 200, 0)]))
  assert e.value.type_id == 200 and "tg_quant_formats" in str(e.value)

"""Hand-built GGUF bytes, for malformed-file tests: every field can be given any value."""
from __future__ import annotations
import struct

def s(text: str | bytes) -> bytes:
  b = text.encode() if isinstance(text, str) else text
  return struct.pack("<Q", len(b)) + b

def kv_u32(key: str, v: int) -> bytes: return s(key) + struct.pack("<II", 4, v)
def kv_str(key: str, v: str) -> bytes: return s(key) + struct.pack("<I", 8) + s(v)
def kv_str_array(key: str, vals: list[str]) -> bytes: return s(key) + struct.pack("<IIQ", 9, 8, len(vals)) + b"".join(s(v) for v in vals)

def tensor_info(name: str, dims: tuple[int, ...], ggml_type: int, offset: int) -> bytes:
  return s(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", ggml_type, offset)

def build(kvs: list[bytes], infos: list[bytes], data: bytes, version: int = 3, n_tensors: int | None = None, n_kv: int | None = None,
          alignment: int = 32, magic: bytes = b"GGUF") -> bytes:
  head = magic + struct.pack("<IQQ", version, len(infos) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv)
  head += b"".join(kvs) + b"".join(infos)
  return head + b"\x00" * (-len(head) % alignment) + data

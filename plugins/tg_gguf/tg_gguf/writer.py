"""The GGUF writer: `save_gguf(path, metadata, tensors)` writes a v3 little-endian file that gguf-py's GGUFReader and tg_gguf's
reader both read back as written. Value types are inferred (bool, int32/int64/uint64, float32, str, lists of one kind) unless
pinned with `GGUFValue` or a `types` dict (such as `GGUFFile.types`, for an exact copy)."""
from __future__ import annotations
import os
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from tg_core import Tensor, dtypes

from tg_gguf.errors import GGUFError
from tg_gguf.ggml_types import BY_NAME
from tg_gguf.reader import DEFAULT_ALIGNMENT, GGUF_MAGIC, SCALARS, GGUFValueType, StringArray, format_for

@dataclass(frozen=True)
class GGUFValue:
  """A metadata value with its GGUF type pinned; `type` (ARRAY, element type), nested for nested arrays, for arrays."""
  value: Any
  type: Any

@dataclass(frozen=True)
class QuantizedArray:
  """Raw blocks of GGML type `ggml_type` holding a tensor of `shape` (numpy order)."""
  data: np.ndarray
  ggml_type: int
  shape: tuple[int, ...]

_NP_TYPES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.float64): "F64", np.dtype(np.int8): "I8",
             np.dtype(np.int16): "I16", np.dtype(np.int32): "I32", np.dtype(np.int64): "I64"}
_NP_VALUE_TYPES = {np.dtype(np.dtype(npdt).newbyteorder("=")): t for t, (_, npdt) in SCALARS.items()}

def _infer(v: Any, key: str) -> Any:
  if isinstance(v, GGUFValue): return v.type
  if isinstance(v, (bool, np.bool_)): return GGUFValueType.BOOL
  if isinstance(v, np.generic): return _NP_VALUE_TYPES[v.dtype]
  if isinstance(v, int):
    if -2**31 <= v < 2**31: return GGUFValueType.INT32
    if -2**63 <= v < 2**63: return GGUFValueType.INT64
    if 0 <= v < 2**64: return GGUFValueType.UINT64
    raise GGUFError(f"metadata {key!r}: int {v} doesn't fit in 64 bits")
  if isinstance(v, float): return GGUFValueType.FLOAT32
  if isinstance(v, str): return GGUFValueType.STRING
  if isinstance(v, StringArray): return (GGUFValueType.ARRAY, GGUFValueType.STRING)  # a reader's array of strings
  if isinstance(v, np.ndarray):
    if v.ndim != 1 or v.dtype not in _NP_VALUE_TYPES: raise GGUFError(f"metadata {key!r}: a numpy array value must be 1-d of a GGUF scalar type")
    return (GGUFValueType.ARRAY, _NP_VALUE_TYPES[v.dtype])
  if isinstance(v, (list, tuple)):
    if not v: return (GGUFValueType.ARRAY, GGUFValueType.INT32)
    kinds = [_infer(x, key) for x in v]
    if all(k == GGUFValueType.BOOL for k in kinds): return (GGUFValueType.ARRAY, GGUFValueType.BOOL)
    if all(k in (GGUFValueType.INT32, GGUFValueType.INT64, GGUFValueType.UINT64) for k in kinds):
      return (GGUFValueType.ARRAY, max(kinds, key=[GGUFValueType.INT32, GGUFValueType.INT64, GGUFValueType.UINT64].index))
    if all(k in (GGUFValueType.INT32, GGUFValueType.INT64, GGUFValueType.FLOAT32) for k in kinds): return (GGUFValueType.ARRAY, GGUFValueType.FLOAT32)
    if len(set(map(repr, kinds))) == 1: return (GGUFValueType.ARRAY, kinds[0])
    raise GGUFError(f"metadata {key!r}: a list must hold values of one type, got {sorted(set(map(repr, kinds)))}")
  raise GGUFError(f"metadata {key!r}: can't store a {type(v).__name__} in GGUF (use bool, int, float, str, or lists of them)")

def _pack_string(s: str | bytes) -> bytes:
  b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
  return struct.pack("<Q", len(b)) + b

def _pack_value(v: Any, t: Any, key: str) -> bytes:
  """The bytes of value v of type t (without the type tag)."""
  if isinstance(v, GGUFValue): v = v.value
  try:
    if isinstance(t, tuple):
      et = t[1]
      head = struct.pack("<IQ", int(et[0] if isinstance(et, tuple) else et), len(v))
      if not isinstance(et, tuple) and et in SCALARS: return head + np.asarray(v, dtype=SCALARS[et][1]).tobytes()
      return head + b"".join(_pack_value(x, et, key) for x in v)
    t = GGUFValueType(t)
    if t is GGUFValueType.STRING: return _pack_string(v)
    return struct.pack(SCALARS[t][0], v)
  except (struct.error, OverflowError, TypeError, ValueError) as e:
    raise GGUFError(f"metadata {key!r}: value {v!r} can't be stored as {t!r}: {e}") from e

def _tensor_bytes(name: str, v: Any) -> tuple[bytes | memoryview, int, tuple[int, ...]]:
  """(data, GGML type id, shape in numpy order) of one tensor to write."""
  if isinstance(v, QuantizedArray):
    fmt = format_for(int(v.ggml_type), f"tensor {name!r}: ")
    shape = tuple(int(s) for s in v.shape)
    numel = int(np.prod(shape)) if shape else 1
    if shape and shape[-1] % fmt.block_elems: raise GGUFError(f"tensor {name!r}: rows of {shape[-1]} aren't whole {fmt.name} blocks of {fmt.block_elems}")
    data = np.ascontiguousarray(v.data).view(np.uint8).reshape(-1)
    if data.size != numel // fmt.block_elems * fmt.block_bytes:
      raise GGUFError(f"tensor {name!r}: {fmt.name} of shape {shape} needs {numel // fmt.block_elems * fmt.block_bytes} bytes, got {data.size}")
    return data.data, int(v.ggml_type), shape
  if isinstance(v, Tensor):
    if v.dtype == dtypes.bfloat16: return v.bitcast(dtypes.uint16).numpy().tobytes(), BY_NAME["BF16"].id, tuple(int(s) for s in v.shape)
    v = v.numpy()
  if isinstance(v, np.ndarray):
    arr = np.ascontiguousarray(v)
    if arr.dtype.newbyteorder("=") not in _NP_TYPES: raise GGUFError(f"tensor {name!r}: dtype {arr.dtype} has no GGML type (quantize it, or cast it)")
    arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
    return arr.reshape(-1).view(np.uint8).data, BY_NAME[_NP_TYPES[arr.dtype.newbyteorder("=")]].id, arr.shape
  raise GGUFError(f"tensor {name!r}: expected a Tensor, numpy array or QuantizedArray, got {type(v).__name__}")

def _pad(f: BinaryIO, pos: int, alignment: int) -> int:
  n = -pos % alignment
  f.write(b"\x00" * n)
  return pos + n

def save_gguf(path: str | os.PathLike, metadata: dict[str, Any], tensors: dict[str, Any], types: dict[str, Any] | None = None) -> None:
  """Write a GGUF v3 file: `metadata` {key: value}, `tensors` {name: Tensor | numpy array | QuantizedArray}, data aligned to
  `general.alignment` (default 32). `types` pins the GGUF type of any metadata key."""
  types = types or {}
  kv = []
  for key, v in metadata.items():
    if not isinstance(key, str): raise GGUFError(f"metadata keys must be str, got {key!r}")
    t = types[key] if key in types else _infer(v, key)
    kv.append(_pack_string(key) + struct.pack("<I", int(t[0] if isinstance(t, tuple) else t)) + _pack_value(v, t, key))
  alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
  alignment = alignment.value if isinstance(alignment, GGUFValue) else alignment
  if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
    raise GGUFError(f"general.alignment must be a power of two, got {alignment!r}")
  datas, infos, offset = [], [], 0
  for name, v in tensors.items():
    data, type_id, shape = _tensor_bytes(name, v)
    dims = shape[::-1] if shape else (1,)
    infos.append(_pack_string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", type_id, offset))
    datas.append(data)
    offset += -(-len(data) // alignment) * alignment
  with open(path, "wb") as f:
    head = GGUF_MAGIC + struct.pack("<IQQ", 3, len(infos), len(kv)) + b"".join(kv) + b"".join(infos)
    f.write(head)
    pos = _pad(f, len(head), alignment)
    for data in datas:
      f.write(data)
      pos = _pad(f, pos + len(data), alignment)

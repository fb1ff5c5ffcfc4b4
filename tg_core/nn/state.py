"""Model state: safetensors read/write and state dicts, like tinygrad's nn.state.

`safe_load` parses the header itself and returns Tensors backed by windows of the file on the DISK device (mmap, no copy);
they are copied to a compute device on use (`.to(device)`, or `load_state_dict`). Malformed files raise `SafetensorsError`."""
from __future__ import annotations
import json
import os
import pathlib
import tempfile
from collections import OrderedDict
from typing import Any

import numpy as np

from tg_core.dtype import DType, dtypes
from tg_core.helpers import prod, round_up
from tg_core.tensor import Tensor, after_holders
from tg_core.uop import Ops
from tg_core.uop.ops import UOp

__all__ = ["SafetensorsError", "safe_dtypes", "inverse_safe_dtypes", "safe_load_metadata", "safe_load", "safe_save", "get_state_dict",
           "get_parameters", "load_state_dict"]

class SafetensorsError(ValueError):
  """A safetensors file (or a tensor dict to save) that doesn't follow the format."""

safe_dtypes: dict[str, DType] = {
  "BOOL": dtypes.bool, "I8": dtypes.int8, "U8": dtypes.uint8, "I16": dtypes.int16, "U16": dtypes.uint16, "I32": dtypes.int32, "U32": dtypes.uint32,
  "I64": dtypes.int64, "U64": dtypes.uint64, "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64,
  "F8_E4M3": dtypes.fp8e4m3, "F8_E5M2": dtypes.fp8e5m2}
inverse_safe_dtypes: dict[DType, str] = {v: k for k, v in safe_dtypes.items()}

MAX_HEADER_SIZE = 100_000_000  # the reference implementation's limit

def _parse_header(raw: bytes | memoryview, file_size: int, name: str) -> tuple[int, dict[str, Any]]:
  """(data start, header) of a safetensors file whose first bytes are `raw`; checks every entry against the file size."""
  if file_size < 8: raise SafetensorsError(f"{name}: truncated file: {file_size} bytes, the header length needs 8")
  n = int.from_bytes(bytes(raw[:8]), "little")
  if n > MAX_HEADER_SIZE: raise SafetensorsError(f"{name}: header length {n} is over the limit of {MAX_HEADER_SIZE} bytes")
  if 8 + n > file_size: raise SafetensorsError(f"{name}: truncated header: {n} bytes announced, {file_size - 8} in the file")
  try: header = json.loads(bytes(raw[8:8 + n]).decode("utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e: raise SafetensorsError(f"{name}: the header is not valid JSON: {e}") from e
  if not isinstance(header, dict): raise SafetensorsError(f"{name}: the header must be a JSON object, got {type(header).__name__}")
  data_len = file_size - 8 - n
  for k, v in header.items():
    if k == "__metadata__":
      if not isinstance(v, dict): raise SafetensorsError(f"{name}: __metadata__ must be an object, got {type(v).__name__}")
      continue
    if not isinstance(v, dict) or not {"dtype", "shape", "data_offsets"} <= v.keys():
      raise SafetensorsError(f"{name}: tensor {k!r} needs dtype, shape and data_offsets, got {v!r}")
    if not isinstance(v["dtype"], str) or v["dtype"] not in safe_dtypes:
      raise SafetensorsError(f"{name}: tensor {k!r} has unknown dtype {v['dtype']!r}")
    shape, offs = v["shape"], v["data_offsets"]
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
      raise SafetensorsError(f"{name}: tensor {k!r} has invalid shape {shape!r}")
    if not isinstance(offs, list) or len(offs) != 2 or not all(isinstance(o, int) and not isinstance(o, bool) for o in offs):
      raise SafetensorsError(f"{name}: tensor {k!r} has invalid data_offsets {offs!r}")
    if not 0 <= offs[0] <= offs[1] <= data_len:
      raise SafetensorsError(f"{name}: tensor {k!r} data_offsets {offs} are out of range of the {data_len}-byte data section")
    if (nbytes := prod(shape) * safe_dtypes[v["dtype"]].itemsize) != offs[1] - offs[0]:
      raise SafetensorsError(f"{name}: tensor {k!r} of shape {shape} and dtype {v['dtype']} needs {nbytes} bytes, "
                             f"data_offsets {offs} hold {offs[1]-offs[0]}")
  return 8 + n, header

def _file_of(fn: str | os.PathLike) -> tuple[str, int]:
  path = os.path.abspath(os.fspath(fn))
  return path, os.stat(path).st_size

def safe_load_metadata(fn: Tensor | str | os.PathLike) -> tuple[Tensor, int, dict[str, Any]]:
  """(the file as a uint8 Tensor, the byte offset where the data starts, the parsed JSON header)."""
  if isinstance(fn, Tensor):
    raw = _raw_bytes(fn)
    data_start, header = _parse_header(raw, len(raw), "<tensor>")
    return fn, data_start, header
  path, size = _file_of(fn)
  with open(path, "rb") as f: raw = f.read(8)
  if size >= 8 and 8 + (n := int.from_bytes(raw, "little")) <= size and n <= MAX_HEADER_SIZE:
    with open(path, "rb") as f: raw = f.read(8 + n)
  data_start, header = _parse_header(raw, size, path)
  return Tensor.empty(size, dtype=dtypes.uint8, device=f"DISK:{path}"), data_start, header

def _disk_tensor(base: Any, device: str, offset: int, shape: tuple[int, ...], dt: DType) -> Tensor:
  """A Tensor whose BUFFER is a view of `base` (the file's DISK buffer) at `offset` bytes."""
  from tg_core.engine.realize import buffers
  numel = prod(shape)
  u = UOp.new_buffer(device, numel, dt)
  buffers[u] = base.view(numel, dt, offset)
  return Tensor(u.reshape(shape) if shape != (numel,) else u, requires_grad=False)

def safe_load(fn: Tensor | str | os.PathLike) -> dict[str, Tensor]:
  """Load a .safetensors file: {name: Tensor on the DISK device}; `.to(device)` (or `load_state_dict`) copies one to a compute device.
  With a Tensor holding the file's bytes, the tensors are host copies on that tensor's device."""
  t, data_start, header = safe_load_metadata(fn)
  entries = {k: v for k, v in header.items() if k != "__metadata__"}
  if isinstance(fn, Tensor):
    from tg_core.tensor import _buffer_from_numpy
    from tg_core.dtype import _to_np_storage
    raw = np.frombuffer(_raw_bytes(t), dtype=np.uint8)
    dev = t.device if isinstance(t.device, str) else t.device[0]
    ret = {}
    for k, v in entries.items():
      dt, (b, e) = safe_dtypes[v["dtype"]], v["data_offsets"]
      arr = raw[data_start + b:data_start + e].view(_to_np_storage(dt)).reshape(v["shape"])
      ret[k] = Tensor(_buffer_from_numpy(arr, dev, dt), requires_grad=False)
    return ret
  from tg_core.engine.realize import buffer_of
  base, device = buffer_of(t.uop.base), t.device
  assert isinstance(device, str)
  return {k: _disk_tensor(base, device, data_start + v["data_offsets"][0], tuple(v["shape"]), safe_dtypes[v["dtype"]]) for k, v in entries.items()}

def safe_save(tensors: dict[str, Tensor], fn: str | os.PathLike, metadata: dict[str, Any] | None = None) -> None:
  """Save {name: Tensor} as a .safetensors file (header padded to 8 bytes, data in dict order). The file is replaced atomically,
  so tensors still loaded from an older version of it stay valid."""
  headers: dict[str, Any] = {}
  if metadata:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()): raise SafetensorsError("metadata must map str to str")
    headers["__metadata__"] = metadata
  offset = 0
  for k, v in tensors.items():
    if not isinstance(k, str): raise SafetensorsError(f"tensor names must be str, got {k!r}")
    if k == "__metadata__": raise SafetensorsError("'__metadata__' is reserved and can't name a tensor")
    if not isinstance(v, Tensor): raise SafetensorsError(f"{k!r} is a {type(v).__name__}, not a Tensor")
    if v.dtype not in inverse_safe_dtypes: raise SafetensorsError(f"{k!r}: dtype {v.dtype} can't be stored in safetensors")
    headers[k] = {"dtype": inverse_safe_dtypes[v.dtype], "shape": [int(s) for s in v.shape], "data_offsets": [offset, offset + v.nbytes()]}
    offset += v.nbytes()
  j = json.dumps(headers, separators=(",", ":")).encode("utf-8")
  j += b"\x20" * (round_up(len(j), 8) - len(j))
  path = pathlib.Path(fn).absolute()
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(len(j).to_bytes(8, "little"))
      f.write(j)
      for v in tensors.values():
        if v.nbytes(): f.write(_raw_bytes(v))
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp): os.unlink(tmp)
    raise

def _raw_bytes(t: Tensor) -> bytes:
  """The tensor's storage bytes (Tensor.data() can't cast to float16's 'e' format before Python 3.12)."""
  buf = t._buffer()  # held while its memory is read
  return bytes(buf.as_buffer())

def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
  """{dotted name: Tensor} for every Tensor reachable through attributes, dicts, lists and tuples of `obj`.

  ```python
  class Net:
    def __init__(self): self.l1, self.blocks = nn.Linear(4, 4), [nn.Linear(4, 4)]
  get_state_dict(Net()).keys()  # l1.weight, l1.bias, blocks.0.weight, blocks.0.bias
  ```"""
  if isinstance(obj, tensor_type): return {prefix.strip("."): obj}
  if hasattr(obj, "_asdict"): return get_state_dict(obj._asdict(), prefix, tensor_type)  # namedtuple
  if isinstance(obj, OrderedDict): return get_state_dict(dict(obj), prefix, tensor_type)
  if hasattr(obj, "__dict__"): return get_state_dict(obj.__dict__, prefix, tensor_type)
  state_dict: dict[str, Tensor] = {}
  if isinstance(obj, (list, tuple)):
    for i, x in enumerate(obj): state_dict.update(get_state_dict(x, f"{prefix}{i}.", tensor_type))
  elif isinstance(obj, dict):
    for k, v in obj.items(): state_dict.update(get_state_dict(v, f"{prefix}{k}.", tensor_type))
  return state_dict

def get_parameters(obj: Any) -> list[Tensor]:
  """Every Tensor in `get_state_dict(obj)` (each once)."""
  return list(dict.fromkeys(get_state_dict(obj).values()))

def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = False, consume: bool = False,
                    realize: bool = True) -> list[Tensor]:
  """Replace each of the model's tensors with the same-named one of `state_dict`, copied to the model tensor's device.
  strict: a model tensor missing from `state_dict` raises KeyError (else it is skipped); a shape mismatch raises ValueError.
  consume: delete each entry from `state_dict` once loaded. Returns the loaded tensors."""
  import time
  st = time.perf_counter()
  model_state_dict = get_state_dict(model)
  if verbose and (unused := sorted(state_dict.keys() - model_state_dict.keys())): print(f"WARNING: unused weights in state_dict {unused}")
  ret = []
  for k, v in model_state_dict.items():
    if k not in state_dict:
      if strict: raise KeyError(f"{k!r} is missing from the state_dict")
      if verbose: print(f"WARNING: not loading {k}")
      continue
    src = state_dict[k]
    if tuple(v.shape) != tuple(src.shape):
      raise ValueError(f"Shape mismatch in layer `{k}`: Expected shape {v.shape}, but found {src.shape} in state dict.")
    v.uop = src.to(v.device).uop  # like tinygrad's Tensor.replace: v takes the loaded tensor's value (and dtype)
    if v.uop.op is Ops.AFTER: after_holders[id(v)] = v
    if realize: v.realize()
    if consume: del state_dict[k]
    ret.append(v)
  if verbose: print(f"loaded {len(ret)} weights in {(time.perf_counter() - st) * 1e3:.2f} ms")
  return ret

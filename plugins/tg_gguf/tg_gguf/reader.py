"""The GGUF reader: header, metadata and tensor infos parsed from an mmap (only the header's pages are touched); tensor data stays
in the file, as windows of it on the DISK device, copied to a compute device and dequantized lazily when something realizes them.

A model is one file, a llama.cpp split (`name-00001-of-00003.gguf`: every split is opened), or a list of raw chunks that
concatenate to one file (read in place, never joined on disk). Every bad input raises a `GGUFError` subclass."""
from __future__ import annotations
import functools
import mmap
import os
import re
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Callable, Sequence

import numpy as np

from tg_core import Device, Tensor, dtypes
from tg_core.dtype import DType
from tg_core.plugins import QuantFormatSpec, load_attr, registry
from tg_core.uop.ops import UOp

from tg_gguf.errors import GGUFError, GGUFFormatError, GGUFMagicError, GGUFTensorError, GGUFTruncatedError, GGUFUnknownTypeError, GGUFVersionError

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 8          # ggml uses 4; a file with more is surely corrupt
MAX_ARRAY_DEPTH = 8   # nested arrays deeper than this are refused (no recursion bomb)

class GGUFValueType(IntEnum):
  UINT8 = 0
  INT8 = 1
  UINT16 = 2
  INT16 = 3
  UINT32 = 4
  INT32 = 5
  FLOAT32 = 6
  BOOL = 7
  STRING = 8
  ARRAY = 9
  UINT64 = 10
  INT64 = 11
  FLOAT64 = 12

# scalar value types: (struct format, numpy dtype)
SCALARS: dict[GGUFValueType, tuple[str, str]] = {
  GGUFValueType.UINT8: ("<B", "<u1"), GGUFValueType.INT8: ("<b", "<i1"), GGUFValueType.UINT16: ("<H", "<u2"), GGUFValueType.INT16: ("<h", "<i2"),
  GGUFValueType.UINT32: ("<I", "<u4"), GGUFValueType.INT32: ("<i", "<i4"), GGUFValueType.FLOAT32: ("<f", "<f4"), GGUFValueType.BOOL: ("<?", "?"),
  GGUFValueType.UINT64: ("<Q", "<u8"), GGUFValueType.INT64: ("<q", "<i8"), GGUFValueType.FLOAT64: ("<d", "<f8")}
_STRUCTS = {t: struct.Struct(f) for t, (f, _) in SCALARS.items()}
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
_MIN_VALUE_BYTES = {**{t: s.size for t, s in _STRUCTS.items()}, GGUFValueType.STRING: 8, GGUFValueType.ARRAY: 12}

class StringArray(Sequence[str]):
  """A GGUF array of strings held as their UTF-8 bytes end to end and where each starts: a vocabulary of 100k tokens costs its
  bytes, not a Python str object per token. Reads as a read-only sequence of str; equal to a list of the same strs."""
  __slots__ = ("_blob", "_starts")
  def __init__(self, blob: bytes, starts: np.ndarray):
    self._blob, self._starts = blob, starts  # string i is blob[starts[i]:starts[i + 1]]
  def __len__(self) -> int: return len(self._starts) - 1
  def _at(self, i: int) -> str: return self._blob[int(self._starts[i]):int(self._starts[i + 1])].decode("utf-8")
  def __getitem__(self, i: Any) -> Any:
    if isinstance(i, slice): return [self._at(j) for j in range(*i.indices(len(self)))]
    n = len(self)
    if not -n <= i < n: raise IndexError(f"string array index {i} out of range (length {n})")
    return self._at(i % n)
  def __iter__(self) -> Any:
    blob, starts = self._blob, self._starts.tolist()
    return (blob[a:b].decode("utf-8") for a, b in zip(starts, starts[1:]))
  def __eq__(self, other: object) -> bool:
    if isinstance(other, StringArray): return self._blob == other._blob and np.array_equal(self._starts, other._starts)
    return isinstance(other, (list, tuple)) and len(other) == len(self) and all(a == b for a, b in zip(self, other))
  __hash__ = None  # type: ignore[assignment]
  def __repr__(self) -> str: return f"StringArray({self[:3]}{'...' if len(self) > 3 else ''}, {len(self)} strings)"

@dataclass(frozen=True)
class GGUFTensorInfo:
  """One tensor of the file: `shape` in numpy order (GGUF stores the innermost dim first), data at byte `offset` of the whole file."""
  name: str
  shape: tuple[int, ...]
  ggml_type: int
  offset: int
  nbytes: int
  format: QuantFormatSpec
  @property
  def n_blocks(self) -> int: return self.nbytes // self.format.block_bytes

# *** quant formats, from every installed plugin ***

def quant_formats() -> dict[int, list[QuantFormatSpec]]:
  """{GGML type id: the formats that installed plugins (tg-gguf and third parties) register for it}."""
  ret: dict[int, list[QuantFormatSpec]] = {}
  for claims in registry().quant_formats.values():
    for spec, _ in claims:
      if spec.ggml_type is not None and spec not in ret.setdefault(spec.ggml_type, []): ret[spec.ggml_type].append(spec)
  return ret

def format_for(type_id: int, where: str = "") -> QuantFormatSpec:
  specs = quant_formats().get(type_id, [])
  if not specs:
    known = ", ".join(f"{i}" for i in sorted(quant_formats()))
    raise GGUFUnknownTypeError(f"{where}GGML type id {type_id}: no installed plugin provides it (a quant format plugin registers it with "
                               f"QuantFormatSpec(ggml_type={type_id}) through tg_quant_formats; installed type ids: {known})", type_id)
  if len({(s.block_elems, s.block_bytes, s.dequantize) for s in specs}) > 1:
    raise GGUFFormatError(f"{where}GGML type id {type_id} is provided by more than one plugin: {', '.join(f'{s.name} ({s.dequantize})' for s in specs)}; "
                          f"uninstall one (or limit the plugins with TG_PLUGINS)")
  return specs[0]

# tg-gguf's plain types, by their dequantize target: loaded as typed windows of the file (a third party's spec for the same id is not)
PLAIN_DTYPES: dict[str, DType] = {f"tg_gguf.quants:dequantize_{name}": dt for name, dt in (
  ("f32", dtypes.float32), ("f16", dtypes.float16), ("bf16", dtypes.bfloat16), ("f64", dtypes.float64), ("i8", dtypes.int8),
  ("i16", dtypes.int16), ("i32", dtypes.int32), ("i64", dtypes.int64))}

@functools.lru_cache(maxsize=None)
def _dequantizer(target: str) -> Callable[[Tensor], Tensor]: return load_attr(target)

@functools.lru_cache(maxsize=256)
def _dequant_graph(fmt: QuantFormatSpec, n_blocks: int, device: str) -> tuple[UOp, UOp]:
  """The dequantize graph of `n_blocks` blocks on `device`, built once over a placeholder input: (placeholder, output).
  A model has few distinct (type, shape) pairs: building the graph in Python cost more than running its kernel."""
  placeholder = Tensor.empty(n_blocks, fmt.block_bytes, dtype=dtypes.uint8, device=device)
  out = _dequantizer(fmt.dequantize)(placeholder)
  if tuple(out.shape) != (n_blocks, fmt.block_elems):
    raise GGUFError(f"the dequantize function {fmt.dequantize} of {fmt.name} returned shape {out.shape}, expected {(n_blocks, fmt.block_elems)}")
  return placeholder.uop, out.uop

def dequantize_blocks(blocks: Tensor, fmt: QuantFormatSpec) -> Tensor:
  """(n_blocks, block_bytes) uint8 -> (n_blocks, block_elems), through the format's plugin function (its graph reused per shape)."""
  if blocks.dtype != dtypes.uint8 or len(blocks.shape) != 2 or blocks.shape[1] != fmt.block_bytes or not isinstance(blocks.shape[0], int):
    raise GGUFError(f"{fmt.name} blocks must be a uint8 Tensor of shape (n_blocks, {fmt.block_bytes}), got {blocks.dtype} {blocks.shape}")
  placeholder, out = _dequant_graph(fmt, blocks.shape[0], blocks.device)
  return Tensor(out.substitute({placeholder: blocks.uop}), requires_grad=False)

def dequantize(data: bytes | bytearray | memoryview | np.ndarray, ggml_type: int, shape: Sequence[int], device: str | None = None) -> Tensor:
  """A Tensor of `shape` (numpy order: the last dim is the contiguous one, made of whole blocks) from raw GGUF block bytes."""
  fmt = format_for(int(ggml_type))
  arr = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
  shape = tuple(int(s) for s in shape)
  numel = int(np.prod(shape, dtype=object)) if shape else 1
  if shape and shape[-1] % fmt.block_elems: raise GGUFTensorError(f"row length {shape[-1]} is not a multiple of the {fmt.name} block size {fmt.block_elems}")
  if (want := numel // fmt.block_elems * fmt.block_bytes) != arr.size:
    raise GGUFTensorError(f"{fmt.name} data of shape {shape} needs {want} bytes, got {arr.size}")
  n = arr.size // fmt.block_bytes
  blocks = Tensor(np.ascontiguousarray(arr).reshape(n, fmt.block_bytes), device=device)
  return dequantize_blocks(blocks, fmt).reshape(shape)

# *** the header parser ***

class _NeedMore(Exception):
  """The header runs past the first chunk(s) of a chunked file: parse again over more of it."""

class _Parser:
  def __init__(self, buf: memoryview | bytes, total: int, name: str):
    self.buf, self.total, self.name, self.pos = buf, total, name, 0

  def need(self, n: int, what: str) -> None:
    if self.pos + n <= len(self.buf): return
    if self.pos + n <= self.total: raise _NeedMore()
    raise GGUFTruncatedError(f"{self.name}: truncated file: {what} needs {n} bytes at offset {self.pos}, the file has {self.total}")

  def scalar(self, t: GGUFValueType, what: str) -> Any:
    s = _STRUCTS[t]
    self.need(s.size, what)
    v = s.unpack_from(self.buf, self.pos)[0]
    self.pos += s.size
    return v

  def u32(self, what: str) -> int: return self.scalar(GGUFValueType.UINT32, what)
  def u64(self, what: str) -> int: return self.scalar(GGUFValueType.UINT64, what)

  def count(self, what: str, elem_bytes: int) -> int:
    """A u64 count of things at least `elem_bytes` each: refused when they can't fit in the rest of the file (no allocation by it)."""
    at = self.pos
    n = self.u64(what)
    if n * elem_bytes > self.total - self.pos:
      raise GGUFFormatError(f"{self.name}: {what} {n} at offset {at} is larger than the file: {n} x {elem_bytes} bytes don't fit in the "
                            f"{self.total - self.pos} bytes left")
    return n

  def string(self, what: str) -> str:
    n = self.count(f"length of {what}", 1)
    self.need(n, what)
    raw = bytes(self.buf[self.pos:self.pos + n])
    try: s = raw.decode("utf-8")
    except UnicodeDecodeError as e: raise GGUFFormatError(f"{self.name}: {what} at offset {self.pos} is not valid UTF-8: {e}") from e
    self.pos += n
    return s

  def strings(self, n: int, what: str) -> StringArray:
    """n strings in a row (tokenizer vocabularies: hundreds of thousands), each checked in one tight loop and kept as their bytes."""
    buf, pos, end, unpack = self.buf, self.pos, len(self.buf), _U64.unpack_from
    blob, starts, i = bytearray(), np.zeros(n + 1, dtype=np.uint64), 0  # no Python int per string, even for a moment
    try:
      while i < n:
        if pos + 8 > end: break
        (k,) = unpack(buf, pos)
        if pos + 8 + k > end: break
        s = buf[pos + 8:pos + 8 + k]
        str(s, "utf-8")
        blob += s
        i += 1
        starts[i] = len(blob)
        pos += 8 + k
    except UnicodeDecodeError as e: raise GGUFFormatError(f"{self.name}: {what}[{i}] at offset {pos + 8} is not valid UTF-8: {e}") from e
    self.pos = pos
    if i < n: self.string(f"{what}[{i}]")  # the slow path reports the truncation
    return StringArray(bytes(blob), starts.astype(np.uint32) if len(blob) < 2**32 else starts)

  def value_type(self, what: str) -> GGUFValueType:
    at = self.pos
    t = self.u32(f"type of {what}")
    try: return GGUFValueType(t)
    except ValueError: raise GGUFFormatError(f"{self.name}: {what} has unknown value type {t} at offset {at} (GGUF defines 0..12)") from None

  def value(self, t: GGUFValueType, what: str, depth: int = 0) -> tuple[Any, Any]:
    """(value, its type: a GGUFValueType, or (ARRAY, element type) nested for arrays)."""
    if t in _STRUCTS: return self.scalar(t, what), t
    if t is GGUFValueType.STRING: return self.string(what), t
    et = self.value_type(f"elements of {what}")
    n = self.count(f"element count of {what}", _MIN_VALUE_BYTES[et])
    if et in SCALARS:
      size = _STRUCTS[et].size
      self.need(n * size, what)
      arr = np.frombuffer(self.buf, dtype=SCALARS[et][1], count=n, offset=self.pos)
      self.pos += n * size
      return arr.tolist(), (GGUFValueType.ARRAY, et)
    if et is GGUFValueType.STRING: return self.strings(n, what), (GGUFValueType.ARRAY, et)
    if depth >= MAX_ARRAY_DEPTH: raise GGUFFormatError(f"{self.name}: {what} nests arrays deeper than {MAX_ARRAY_DEPTH}")
    vals, sub = [], (GGUFValueType.ARRAY, GGUFValueType.UINT8)
    for i in range(n):
      v, sub = self.value(et, f"{what}[{i}]", depth + 1)
      vals.append(v)
    return vals, (GGUFValueType.ARRAY, sub)

@dataclass
class _Header:
  version: int
  metadata: dict[str, Any]
  types: dict[str, Any]
  tensors: dict[str, GGUFTensorInfo]
  alignment: int
  data_offset: int

def _byteswap32(v: int) -> int: return int.from_bytes(v.to_bytes(4, "little"), "big")

def parse_header(buf: memoryview | bytes, total: int, name: str) -> _Header:
  p = _Parser(buf, total, name)
  p.need(4, "the magic")
  if (magic := bytes(buf[:4])) != GGUF_MAGIC:
    raise GGUFMagicError(f"{name}: not a GGUF file: it starts with {magic!r}, a GGUF file starts with {GGUF_MAGIC!r}")
  p.pos = 4
  version = p.u32("the version")
  if version not in (2, 3):
    if _byteswap32(version) in (1, 2, 3):
      raise GGUFVersionError(f"{name}: a big-endian GGUF file (version {_byteswap32(version)}): only little-endian files are read; convert it "
                             f"with gguf-py's gguf_convert_endian")
    if version == 1: raise GGUFVersionError(f"{name}: GGUF version 1 (32-bit counts) is not supported: convert it to v3 with llama.cpp")
    raise GGUFVersionError(f"{name}: unsupported GGUF version {version}: this reader reads versions 2 and 3")
  n_tensors = p.count("tensor count", 24)
  n_kv = p.count("metadata count", 13)
  metadata: dict[str, Any] = {}
  types: dict[str, Any] = {}
  for i in range(n_kv):
    key = p.string(f"metadata key #{i}")
    if key in metadata: raise GGUFFormatError(f"{name}: metadata key {key!r} appears twice")
    t = p.value_type(f"metadata {key!r}")
    metadata[key], types[key] = p.value(t, f"metadata {key!r}")
  alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
  if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 or alignment & (alignment - 1):
    raise GGUFFormatError(f"{name}: general.alignment must be a positive power of two, got {alignment!r}")
  infos: list[tuple[str, tuple[int, ...], int, int]] = []
  seen: set[str] = set()
  for i in range(n_tensors):
    tname = p.string(f"name of tensor #{i}")
    if tname in seen: raise GGUFTensorError(f"{name}: tensor {tname!r} appears twice")
    seen.add(tname)
    n_dims = p.u32(f"dim count of tensor {tname!r}")
    if n_dims > MAX_DIMS: raise GGUFTensorError(f"{name}: tensor {tname!r} has {n_dims} dims, at most {MAX_DIMS} are allowed")
    dims = tuple(p.u64(f"dims of tensor {tname!r}") for _ in range(n_dims))
    ggml_type = p.u32(f"type of tensor {tname!r}")
    offset = p.u64(f"offset of tensor {tname!r}")
    infos.append((tname, dims, ggml_type, offset))
  data_offset = -(-p.pos // alignment) * alignment
  data_size = total - data_offset
  tensors: dict[str, GGUFTensorInfo] = {}
  for tname, dims, ggml_type, offset in infos:
    fmt = format_for(ggml_type, f"{name}: tensor {tname!r} has ")
    numel = 1
    for d in dims:
      numel *= d
      if numel >= 1 << 63: raise GGUFTensorError(f"{name}: tensor {tname!r} dims {list(dims)} overflow: their product is past 2**63")
    if dims and dims[0] % fmt.block_elems:
      raise GGUFTensorError(f"{name}: tensor {tname!r} has rows of {dims[0]} elements, not a multiple of the {fmt.name} block size {fmt.block_elems}")
    if offset % alignment: raise GGUFTensorError(f"{name}: tensor {tname!r} data offset {offset} is not a multiple of the alignment {alignment}")
    nbytes = numel // fmt.block_elems * fmt.block_bytes
    if offset + nbytes > data_size:
      raise GGUFTruncatedError(f"{name}: tensor {tname!r} data ({nbytes} bytes at data offset {offset}) is past the end of the file "
                               f"({max(data_size, 0)} bytes of tensor data)")
    tensors[tname] = GGUFTensorInfo(tname, dims[::-1], ggml_type, data_offset + offset, nbytes, fmt)
  prev: GGUFTensorInfo | None = None
  for info in sorted(tensors.values(), key=lambda t: (t.offset, t.nbytes)):
    if prev is not None and info.nbytes and info.offset < prev.offset + prev.nbytes:
      raise GGUFTensorError(f"{name}: tensors {prev.name!r} and {info.name!r} overlap (bytes {prev.offset}..{prev.offset + prev.nbytes} and "
                            f"{info.offset}..{info.offset + info.nbytes})")
    if info.nbytes: prev = info
  return _Header(version, metadata, types, tensors, alignment, data_offset)

# *** files ***

SPLIT_RE = re.compile(r"^(?P<prefix>.*)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")

def _pread_exact(path: str, mv: memoryview, offset: int) -> None:
  """Fill `mv` with the file's bytes from `offset` (preadv may return less than asked: it loops)."""
  fd = os.open(path, os.O_RDONLY)
  try:
    done = 0
    while done < mv.nbytes:
      if (n := os.preadv(fd, [mv[done:]], offset + done)) <= 0:
        raise GGUFTruncatedError(f"{path}: the file ended at byte {offset + done} while reading tensor data (was it truncated?)")
      done += n
  finally: os.close(fd)

def _map(path: str) -> mmap.mmap | None:
  with open(path, "rb") as f:
    if os.fstat(f.fileno()).st_size == 0: return None
    return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

class GGUFFile:
  """One GGUF model: `path` is a .gguf file or a sequence of chunk files whose concatenation is one. Opening parses the header only.

  `metadata` {key: value} (ints, floats, bools, strs, nested lists; arrays of strings as `StringArray`s), `types` {key: GGUFValueType or (ARRAY, element type)},
  `tensors` {name: GGUFTensorInfo}; `raw(name)` is the stored blocks, `tensor(name)` the lazily dequantized values."""
  def __init__(self, path: str | os.PathLike | Sequence[str | os.PathLike]):
    paths = [os.fspath(path)] if isinstance(path, (str, os.PathLike)) else [os.fspath(p) for p in path]
    if not paths: raise GGUFError("no files given: pass a .gguf path or a list of chunk paths")
    self.paths = [os.path.abspath(p) for p in paths]
    self.name = self.paths[0] if len(self.paths) == 1 else f"{self.paths[0]} (+{len(self.paths) - 1} chunks)"
    self.sizes = [os.stat(p).st_size for p in self.paths]
    self.starts = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
    total = sum(self.sizes)
    first = _map(self.paths[0])
    buf: memoryview | bytes = memoryview(first) if first is not None else b""
    k = 1
    while True:
      try:
        h = parse_header(buf, total, self.name)
        break
      except _NeedMore:
        # the header runs into the next chunk (rare: headers are small): parse over the first k+1 chunks joined in memory
        k += 1
        buf = b"".join(open(p, "rb").read() for p in self.paths[:k])
    del buf
    if first is not None:
      try: first.close()
      except BufferError: pass  # a view of it is still alive: the mapping goes with the last one
    self.version, self.metadata, self.types, self.tensors = h.version, h.metadata, h.types, h.tensors
    self.alignment, self.data_offset = h.alignment, h.data_offset
    self._disk: list[Tensor | None] = [None] * len(self.paths)

  def _chunk(self, i: int) -> Tensor:
    if (t := self._disk[i]) is None: t = self._disk[i] = Tensor.empty(self.sizes[i], dtype=dtypes.uint8, device=f"DISK:{self.paths[i]}")
    return t

  def _window(self, i: int, offset: int, n: int, dtype: DType = dtypes.uint8) -> Tensor:
    """n elements of `dtype` at byte `offset` of chunk i, as a Tensor whose buffer is a view of the file's DISK buffer (nothing is read)."""
    from tg_core.engine.realize import buffer_of, buffers
    from tg_core.uop.ops import UOp
    base = self._chunk(i)
    u = UOp.new_buffer(base.device, n, dtype)
    buffers[u] = buffer_of(base.uop.base).view(n, dtype, offset)
    return Tensor(u, requires_grad=False)

  def raw(self, name: str, device: str | None = None) -> Tensor:
    """The stored blocks of tensor `name`: uint8 (n_blocks, block_bytes), copied (lazily) from the file to `device`."""
    info = self._info(name)
    dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
    if info.nbytes == 0: return Tensor(np.zeros((0, info.format.block_bytes), dtype=np.uint8), device=dev)
    pieces = []
    for i, (start, size) in enumerate(zip(self.starts, self.sizes)):
      lo, hi = max(info.offset, start), min(info.offset + info.nbytes, start + size)
      if lo < hi: pieces.append(self._window(i, lo - start, hi - lo).to(dev))
    # a tensor cut by chunk boundaries is joined into one buffer first: reading through the cat in every consumer costs masks per byte
    data = pieces[0] if len(pieces) == 1 else pieces[0].cat(*pieces[1:]).contiguous()
    return data.reshape(info.n_blocks, info.format.block_bytes)

  def read_raw(self, name: str, device: str | None = None) -> Tensor:
    """The stored blocks of tensor `name` as `raw` gives them, but read now with os.preadv straight into a realized buffer on `device`
    (through a bounce buffer where its memory isn't host-visible). Unlike copying from the DISK mapping, this leaves none of the file's
    pages resident in the process: a loaded model costs its weights once, not twice."""
    info = self._info(name)
    return self._read_into(info, Tensor.empty(info.n_blocks, info.format.block_bytes, dtype=dtypes.uint8, device=device))

  def read_plain(self, name: str, device: str | None = None) -> Tensor:
    """Tensor `name` of a plain stored type (F32, F16, ...; see `tensor`) in that dtype, read like `read_raw` into a realized buffer."""
    info = self._info(name)
    if (dt := PLAIN_DTYPES.get(info.format.dequantize)) is None:
      raise GGUFTensorError(f"{self.name}: tensor {name!r} is {info.format.name}, not a plain type: use read_raw for its blocks")
    return self._read_into(info, Tensor.empty(*info.shape, dtype=dt, device=device))

  def _read_into(self, info: GGUFTensorInfo, empty: Tensor) -> Tensor:
    from tg_core.engine.realize import buffer_of
    out = empty.realize()
    if info.nbytes == 0: return out
    buf = buffer_of(out.uop.base)
    try: mv, bounce = buf.as_buffer(force_zero_copy=True), False
    except RuntimeError: mv, bounce = memoryview(bytearray(info.nbytes)), True
    self.read_bytes(info.name, 0, mv)
    if bounce: buf.copyin(mv)
    return out

  def read_bytes(self, name: str, start: int, out: memoryview) -> None:
    """Fill `out` with bytes start..start+len(out) of tensor `name`'s stored data, read with os.preadv (no file pages stay resident)."""
    info = self._info(name)
    if not 0 <= start <= start + out.nbytes <= info.nbytes:
      raise GGUFTensorError(f"{self.name}: bytes {start}..{start + out.nbytes} are outside tensor {name!r}'s {info.nbytes} bytes")
    first, last = info.offset + start, info.offset + start + out.nbytes
    for i, (cs, size) in enumerate(zip(self.starts, self.sizes)):
      lo, hi = max(first, cs), min(last, cs + size)
      if lo < hi: _pread_exact(self.paths[i], out[lo - first:hi - first], lo - cs)

  def tensor(self, name: str, device: str | None = None) -> Tensor:
    """Tensor `name` in its float (or stored int) dtype and numpy-order shape; realizing it (or what consumes it) dequantizes it."""
    info = self._info(name)
    if (dt := PLAIN_DTYPES.get(info.format.dequantize)) is not None and info.nbytes and (i := self._chunk_holding(info)) is not None:
      # tg-gguf's own plain types (F32, F16, ...) need no kernel: the file window is viewed in their dtype and copied as it is
      n = info.nbytes // dt.itemsize
      dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
      return self._window(i, info.offset - self.starts[i], n, dt).to(dev).reshape(info.shape)
    return dequantize_blocks(self.raw(name, device), info.format).reshape(info.shape)

  def _chunk_holding(self, info: GGUFTensorInfo) -> int | None:
    """The chunk that holds all of the tensor's bytes, if one does."""
    for i, (start, size) in enumerate(zip(self.starts, self.sizes)):
      if start <= info.offset and info.offset + info.nbytes <= start + size: return i
    return None

  def _info(self, name: str) -> GGUFTensorInfo:
    if name not in self.tensors: raise KeyError(f"{self.name} has no tensor {name!r}")
    return self.tensors[name]

def split_paths(path: str) -> list[str]:
  """All files of a llama.cpp split model given any one of them (`m-00002-of-00003.gguf`), or [path]."""
  m = SPLIT_RE.match(path)
  if m is None: return [path]
  n = int(m["n"])
  ret = [f"{m['prefix']}-{i:05d}-of-{n:05d}.gguf" for i in range(1, n + 1)]
  if missing := [p for p in ret if not os.path.exists(p)]: raise GGUFError(f"{path}: split model of {n} files, missing: {', '.join(missing)}")
  return ret

def gguf_load(path: str | os.PathLike | Sequence[str | os.PathLike], device: str | None = None) -> tuple[dict[str, Any], dict[str, Tensor]]:
  """(metadata, {name: Tensor}) of a GGUF model, like tinygrad's gguf_load: tensors in their float dtype, dequantized lazily.
  `path` is a .gguf file (every split when it is one of llama.cpp's `-0000k-of-0000n.gguf`) or a list of raw chunks of one file."""
  if isinstance(path, (str, os.PathLike)):
    files = [GGUFFile(p) for p in split_paths(os.fspath(path))]
  else:
    files = [GGUFFile(path)]
  metadata = dict(files[0].metadata)
  tensors: dict[str, Tensor] = {}
  for f in files:
    for name in f.tensors:
      if name in tensors: raise GGUFTensorError(f"{f.name}: tensor {name!r} is also in another split")
      tensors[name] = f.tensor(name, device)
  return metadata, tensors

"""A minimal MessagePack reader for the AMDGPU metadata note (so the emulator needs no msgpack dependency)."""
from __future__ import annotations
import struct
from typing import Any
from tg_amd.emu.errors import AMDCodeObjectError

_FIXED = {0xc0: None, 0xc2: False, 0xc3: True}
# type byte -> (struct format, size) of a fixed-width scalar
_SCALARS = {0xca: (">f", 4), 0xcb: (">d", 8), 0xcc: (">B", 1), 0xcd: (">H", 2), 0xce: (">I", 4), 0xcf: (">Q", 8),
            0xd0: (">b", 1), 0xd1: (">h", 2), 0xd2: (">i", 4), 0xd3: (">q", 8)}
# type byte -> (length format, size, kind) of a str/bin/array/map with an explicit length
_SIZED = {0xd9: (">B", 1, "str"), 0xda: (">H", 2, "str"), 0xdb: (">I", 4, "str"), 0xc4: (">B", 1, "bin"), 0xc5: (">H", 2, "bin"),
          0xc6: (">I", 4, "bin"), 0xdc: (">H", 2, "array"), 0xdd: (">I", 4, "array"), 0xde: (">H", 2, "map"), 0xdf: (">I", 4, "map")}

def unpackb(data: bytes) -> Any:
  try: value, end = _read(data, 0)
  except (struct.error, IndexError, UnicodeDecodeError) as e:
    raise AMDCodeObjectError(f"msgpack: metadata document is truncated or corrupt ({e}); recompile the code object") from e
  if end != len(data): raise AMDCodeObjectError(f"msgpack: {len(data) - end} trailing bytes after the metadata document")
  return value

def _read(d: bytes, i: int) -> tuple[Any, int]:
  if i >= len(d): raise AMDCodeObjectError("msgpack: metadata document ends early (truncated note)")
  t = d[i]; i += 1
  if t <= 0x7f: return t, i
  if t >= 0xe0: return t - 0x100, i
  if 0xa0 <= t <= 0xbf: return _sized(d, i, t & 0x1f, "str")
  if 0x90 <= t <= 0x9f: return _sized(d, i, t & 0x0f, "array")
  if 0x80 <= t <= 0x8f: return _sized(d, i, t & 0x0f, "map")
  if t in _FIXED: return _FIXED[t], i
  if t in _SCALARS:
    fmt, n = _SCALARS[t]
    return struct.unpack_from(fmt, d, i)[0], i + n
  if t in _SIZED:
    fmt, n, kind = _SIZED[t]
    return _sized(d, i + n, struct.unpack_from(fmt, d, i)[0], kind)
  raise AMDCodeObjectError(f"msgpack: unsupported type byte 0x{t:02x} at offset {i - 1} (extension types are not used by AMDGPU metadata)")

def _sized(d: bytes, i: int, n: int, kind: str) -> tuple[Any, int]:
  if kind == "str": return d[i:i + n].decode(), i + n
  if kind == "bin": return bytes(d[i:i + n]), i + n
  if kind == "array":
    out = []
    for _ in range(n):
      v, i = _read(d, i); out.append(v)
    return out, i
  m = {}
  for _ in range(n):
    k, i = _read(d, i); v, i = _read(d, i); m[k] = v
  return m, i

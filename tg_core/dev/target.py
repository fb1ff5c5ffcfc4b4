"""Device strings: `canonicalize` ("cpu:0" -> "CPU") and DEV parsing (`[iface[:indices]+]DEVICE[:RENDERER[:arch]]`)."""
from __future__ import annotations
import dataclasses
import functools
from dataclasses import dataclass

@functools.lru_cache(maxsize=4096)
def canonicalize(device: str) -> str:
  """"cpu" -> "CPU", "CPU:0" -> "CPU", "disk:/Path" -> "DISK:/Path" (only the name before the first ':' is upper-cased)."""
  if not isinstance(device, str): raise TypeError(f"a device must be a str, got {device!r} ({type(device).__name__})")
  name, sep, rest = device.partition(":")
  ret = name.upper() + sep + rest
  return ret[:-2] if ret.endswith(":0") else ret

@dataclass(frozen=True)
class DevTarget:
  """A parsed DEV value: `[iface[:indices]+]DEVICE[:RENDERER[:arch]]`."""
  device: str
  renderer: str | None = None
  arch: str | None = None
  iface: str | None = None
  raw: str = dataclasses.field(default="", compare=False)

def parse_dev(dev: str) -> DevTarget:
  """Parse DEV ("AMD", "AMD:LLVM:gfx1100", "MOCK+AMD", "CUDA:PTX:sm_90"). The device and renderer are upper-cased, arch is kept as is."""
  if not isinstance(dev, str) or not dev.strip(): raise ValueError(f"DEV must be a non-empty string, got {dev!r}")
  iface, _, rest = dev.strip().rpartition("+")
  parts = rest.split(":", 2)
  if not parts[0]: raise ValueError(f"DEV={dev!r} names no device; the grammar is [iface[:indices]+]DEVICE[:RENDERER[:arch]]")
  return DevTarget(device=parts[0].upper(), renderer=parts[1].upper() if len(parts) > 1 and parts[1] else None,
                   arch=parts[2] if len(parts) > 2 and parts[2] else None, iface=iface or None, raw=dev)

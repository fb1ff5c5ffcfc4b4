"""What a plugin declares: small typed records returned by its hook implementations, and the hook specifications.

Every factory is a lazy "module:attr" string: nothing heavy is imported until the thing is first used."""
from __future__ import annotations
import importlib
from dataclasses import dataclass
from typing import Any

import pluggy

PROJECT = "tg_core"
# (major, minor) of the plugin API: a plugin's major must match, its minor be <= this.
# 1.1: the renderer contract is one declared record, RendererCaps (docs/backend-authors.md); DEV is validated against it
TG_CORE_API: tuple[int, int] = (1, 2)
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

def load_attr(target: str) -> Any:
  """Import "module:attr" (attr may be dotted)."""
  if ":" not in target: raise ValueError(f"expected 'module:attr', got {target!r}")
  module, attr = target.split(":", 1)
  obj: Any = importlib.import_module(module)
  for part in attr.split("."): obj = getattr(obj, part)
  return obj

@dataclass(frozen=True)
class DeviceSpec:
  """A device: `factory("NAME:1")` returns a `tg_core.device.Compiled`. With DEV unset, the highest-`priority`
  device whose `probe` (a cheap "module:function" returning bool, e.g. "does /dev/kfd exist") passes is the default.
  `auto=False` devices are never chosen automatically. `interfaces` are the names DEV may put before the device
  (`DEV=MOCK+AMD`); DEV naming any other is an error."""
  name: str
  factory: str
  priority: int = 0
  interfaces: tuple[str, ...] = ()
  probe: str | None = None
  auto: bool = True
  description: str = ""

@dataclass(frozen=True)
class RendererSpec:
  """A renderer `name` ("LLVM") for the devices in `devices`; `factory()` returns a `tg_core.device.Renderer`."""
  name: str
  devices: tuple[str, ...]
  factory: str
  description: str = ""

@dataclass(frozen=True)
class ImporterSpec:
  """A model format (`format`: "onnx"); files are recognised by suffix or leading magic bytes. `factory` loads one."""
  format: str
  factory: str
  suffixes: tuple[str, ...] = ()
  magic: bytes | None = None
  description: str = ""

@dataclass(frozen=True)
class QuantFormatSpec:
  """A quantization format ("Q4_K"): blocks of `block_elems` values in `block_bytes` bytes; `dequantize` is a
  "module:function" taking (blocks: Tensor of uint8 (n, block_bytes)) and returning a float Tensor (n, block_elems)."""
  name: str
  ggml_type: int | None
  block_elems: int
  block_bytes: int
  dequantize: str
  description: str = ""

class TgHookSpecs:
  """The hook specifications (the contract; additive within an API major). A manifest module implements any subset
  with `@hookimpl` and sets `tg_api = (major, minor)`, the tg_core plugin API it was built for."""
  @hookspec
  def tg_devices(self) -> list[DeviceSpec]:  # type: ignore[empty-body]
    """Devices this plugin provides."""
  @hookspec
  def tg_renderers(self) -> list[RendererSpec]:  # type: ignore[empty-body]
    """Renderers this plugin provides (for its own devices or others')."""
  @hookspec
  def tg_importers(self) -> list[ImporterSpec]:  # type: ignore[empty-body]
    """Model importers this plugin provides."""
  @hookspec
  def tg_quant_formats(self) -> list[QuantFormatSpec]:  # type: ignore[empty-body]
    """Quantization formats this plugin provides."""

"""The devices that need nothing outside Python: NULL (compile-only), DISK (mmap'ed files), NPY (numpy arrays), PYTHON (the reference)."""
from __future__ import annotations
import importlib
from typing import Any, Callable

def _lazy(module: str, cls: str) -> Callable[[str], Any]:
  """A device factory that imports `module` only when the device is first opened."""
  def factory(device: str) -> Any: return getattr(importlib.import_module(module), cls)(device)
  factory.__qualname__ = factory.__name__ = f"lazy<{module}:{cls}>"
  return factory

def register_core_devices() -> None:
  """Register the core devices with `tg_core.device.Device` (idempotent). Called at the bottom of tg_core/device.py.

  name, "module:Class" factory, priority for auto-selection (`auto=False`: never chosen as the default), probe."""
  from tg_core.device import Device  # imported here: tg_core.device imports this module while it is being initialized
  core: list[tuple[str, str, int, bool]] = [
    ("NULL", "tg_core.runtime.ops_null:NullDevice", -100, False),
    ("DISK", "tg_core.runtime.ops_disk:DiskDevice", -100, False),
    ("NPY", "tg_core.runtime.ops_npy:NpyDevice", -100, False),
    # auto=True with a low priority: the fallback default when no plugin device probes OK
    ("PYTHON", "tg_core.runtime.ops_python:PythonDevice", -10, True),
  ]
  for name, target, priority, auto in core:
    if name in Device.registered(): continue
    module, cls = target.split(":")
    Device.register(name, _lazy(module, cls), priority=priority, auto=auto, origin="tg-core")

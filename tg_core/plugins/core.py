"""The core's own manifest: tg-core's devices register through the same hooks as any plugin."""
from __future__ import annotations

from tg_core.plugins.specs import DeviceSpec, hookimpl

tg_api = (1, 2)

@hookimpl
def tg_devices() -> list[DeviceSpec]:
  return [
    DeviceSpec("PYTHON", "tg_core.runtime.ops_python:PythonDevice", priority=-10, description="reference: numpy interpreter of kernels"),
    DeviceSpec("NULL", "tg_core.runtime.ops_null:NullDevice", priority=-100, auto=False, description="compiles, runs nothing"),
    DeviceSpec("DISK", "tg_core.runtime.ops_disk:DiskDevice", priority=-100, auto=False, description="memory-mapped files"),
    DeviceSpec("NPY", "tg_core.runtime.ops_npy:NpyDevice", priority=-100, auto=False, description="numpy arrays as buffers"),
  ]

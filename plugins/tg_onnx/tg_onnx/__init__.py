"""tg-onnx: run ONNX models on any tg device. `OnnxRunner(model_or_path)(inputs: dict) -> dict` of Tensors.

The names load on first use: plugin discovery imports the manifest (tg_onnx.plugin), and with it this package, in every
process that opens a device; importing the runner (and onnx) here cost a cold start ~0.9 s."""
from __future__ import annotations
import importlib
from typing import Any

_EXPORTS = {"OnnxRunner": "runner", "OnnxError": "errors", "OnnxLoadError": "errors", "OnnxOpsetError": "errors", "OnnxUnsupportedOpError": "errors",
            "OnnxInputError": "errors", "OnnxNodeError": "errors"}
__all__ = list(_EXPORTS)

def __getattr__(name: str) -> Any:
  if name not in _EXPORTS: raise AttributeError(f"module 'tg_onnx' has no attribute {name!r}")
  return getattr(importlib.import_module(f"tg_onnx.{_EXPORTS[name]}"), name)

"""tg-gguf: GGUF files and every GGML quantization format for tg.

    from tg_gguf import gguf_load, dequantize
    metadata, tensors = gguf_load("model.gguf")   # tensors dequantize lazily, fused into whatever consumes them

The names load on first use, so the plugin manifest (tg_gguf.plugin) imports nothing heavy."""
from __future__ import annotations
import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {"gguf_load": "reader", "GGUFFile": "reader", "GGUFTensorInfo": "reader", "dequantize": "reader", "save_gguf": "writer",
            "GGUFValue": "writer", "QuantizedArray": "writer", "quantize": "quantizers", "GGUFValueType": "reader", "GGUFError": "errors",
            "GGUFTruncatedError": "errors", "GGUFMagicError": "errors", "GGUFVersionError": "errors", "GGUFFormatError": "errors",
            "GGUFTensorError": "errors", "GGUFUnknownTypeError": "errors"}
__all__ = list(_EXPORTS)

def __getattr__(name: str) -> Any:
  if name not in _EXPORTS: raise AttributeError(f"module 'tg_gguf' has no attribute {name!r}")
  return getattr(importlib.import_module(f"tg_gguf.{_EXPORTS[name]}"), name)

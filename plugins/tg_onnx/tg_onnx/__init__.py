"""tg-onnx: run ONNX models on any tg device. `OnnxRunner(model_or_path)(inputs: dict) -> dict` of Tensors."""
from tg_onnx.errors import OnnxError, OnnxInputError, OnnxLoadError, OnnxNodeError, OnnxOpsetError, OnnxUnsupportedOpError
from tg_onnx.runner import OnnxRunner

__all__ = ["OnnxRunner", "OnnxError", "OnnxLoadError", "OnnxOpsetError", "OnnxUnsupportedOpError", "OnnxInputError", "OnnxNodeError"]

"""The manifest of tg-onnx: imports only tg_core.plugins. The runner (onnx, numpy) loads when a model is first opened."""
from tg_core.plugins import ImporterSpec, hookimpl

tg_api = (1, 0)

@hookimpl
def tg_importers() -> list[ImporterSpec]:
  return [ImporterSpec("onnx", "tg_onnx.runner:OnnxRunner", suffixes=(".onnx",), description="ONNX models: OnnxRunner(path)(inputs) -> outputs")]

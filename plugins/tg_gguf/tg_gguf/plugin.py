"""The manifest of tg-gguf: imports only tg_core.plugins and the plain type table. The reader and the dequantizers load on first use."""
from tg_core.plugins import ImporterSpec, QuantFormatSpec, hookimpl

from tg_gguf.ggml_types import GGML_TYPES, dequantize_target

tg_api = (1, 0)

@hookimpl
def tg_importers() -> list[ImporterSpec]:
  return [ImporterSpec("gguf", "tg_gguf.reader:gguf_load", suffixes=(".gguf",), magic=b"GGUF", description="GGUF v2/v3 (llama.cpp) models")]

@hookimpl
def tg_quant_formats() -> list[QuantFormatSpec]:
  return [QuantFormatSpec(t.name, t.id, t.block_elems, t.block_bytes, dequantize_target(t), description=t.description) for t in GGML_TYPES]

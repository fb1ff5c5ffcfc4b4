"""The manifest: tg-gguf registers the gguf importer and one quant format per GGML type, and importing it loads no heavy code."""
from __future__ import annotations
import pathlib
import subprocess
import sys

import numpy as np

from tg_core.plugins import load_attr, registry
from tg_gguf import save_gguf
from tg_gguf.ggml_types import GGML_TYPES

def test_registers_importer_and_every_type():
  spec = registry().importer("gguf")
  assert spec.suffixes == (".gguf",) and spec.magic == b"GGUF" and spec.factory == "tg_gguf.reader:gguf_load"
  by_id = {s.ggml_type: s for claims in registry().quant_formats.values() for s, _ in claims}
  for t in GGML_TYPES:
    s = by_id[t.id]
    assert (s.name, s.block_elems, s.block_bytes) == (t.name, t.block_elems, t.block_bytes)
    assert callable(load_attr(s.dequantize))
  assert len(GGML_TYPES) == 33

def test_importer_factory_loads_a_file(tmp_path: pathlib.Path):
  a = np.arange(32, dtype=np.float32)
  save_gguf(tmp_path / "m.gguf", {"general.architecture": "x"}, {"a": a})
  meta, tensors = load_attr(registry().importer("gguf").factory)(tmp_path / "m.gguf")
  assert meta == {"general.architecture": "x"} and np.array_equal(tensors["a"].numpy(), a)

def test_manifest_import_is_light():
  code = "import sys, tg_gguf.plugin; print(sorted(m for m in sys.modules if m.startswith('tg_gguf')))"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
  assert out == "['tg_gguf', 'tg_gguf.ggml_types', 'tg_gguf.plugin']", out

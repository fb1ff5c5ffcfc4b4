"""A quant format from a separate distribution: built here as tg-quant-demo (GGML type id 200) and installed with tg-gguf into a fresh
virtualenv (tests/plugin_env.py, as the plugin-system tests do). The reader finds it by type id; without it the id is an error."""
from __future__ import annotations
import pathlib
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests"))
from plugin_env import make_venv, pip_install, run  # noqa: E402

FORMAT = '''
"""DEMO_Q4X: blocks of 4 values in 3 bytes: a power-of-two scale 2**(e-8) in byte 0, then 4 nibbles (value = (q - 8) * scale)."""
from tg_core import Tensor, dtypes

def dequantize(blocks: Tensor) -> Tensor:
  x = blocks.cast(dtypes.int32)
  scale = ((x[:, 0:1] + 119) << 23).bitcast(dtypes.float32)
  q = x[:, 1:3]
  nib = (q & 15).reshape(-1, 2, 1).cat((q >> 4).reshape(-1, 2, 1), dim=2).reshape(-1, 4)
  return scale * (nib - 8).cast(dtypes.float32)
'''
MANIFEST = '''
from tg_core.plugins import QuantFormatSpec, hookimpl
tg_api = (1, 0)
@hookimpl
def tg_quant_formats():
  return [QuantFormatSpec("DEMO_Q4X", 200, 4, 3, "tg_quant_demo.fmt:dequantize", description="a third-party test format")]
'''
PYPROJECT = '''
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"
[project]
name = "tg-quant-demo"
version = "0.1.0"
dependencies = ["tg-core>=0.1,<1"]
[project.entry-points."tg_core.plugins"]
quant_demo = "tg_quant_demo.plugin"
[tool.setuptools.packages.find]
include = ["tg_quant_demo*"]
'''
CHECK = textwrap.dedent('''
  import sys, numpy as np
  from tg_gguf import save_gguf, gguf_load, QuantizedArray, GGUFUnknownTypeError
  rng = np.random.default_rng(0)
  e = rng.integers(0, 16, (6, 1), dtype=np.uint8)
  q = rng.integers(0, 256, (6, 2), dtype=np.uint8)
  blocks = np.concatenate([e, q], axis=1)
  nib = np.stack([q & 15, q >> 4], axis=2).reshape(6, 4).astype(np.float32)
  want = ((nib - 8) * np.float32(2.0) ** (e.astype(np.float32) - 8)).reshape(3, 8)
  save_gguf(sys.argv[1], {"general.architecture": "demo"}, {"w": QuantizedArray(blocks, 200, (3, 8))})
  try:
    _, t = gguf_load(sys.argv[1])
  except GGUFUnknownTypeError as err:
    print("UNKNOWN", err.type_id, err)
    raise SystemExit(0)
  got = t["w"].numpy()
  assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32)), (got, want)
  print("OK")
''')

@pytest.fixture(scope="module")
def demo_src(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
  src = tmp_path_factory.mktemp("demo_src")
  (src / "tg_quant_demo").mkdir()
  (src / "tg_quant_demo" / "__init__.py").write_text("")
  (src / "tg_quant_demo" / "plugin.py").write_text(MANIFEST)
  (src / "tg_quant_demo" / "fmt.py").write_text(FORMAT)
  (src / "pyproject.toml").write_text(PYPROJECT)
  return src

def test_third_party_format_is_found_by_type_id(tmp_path: pathlib.Path, demo_src: pathlib.Path):
  py = make_venv(tmp_path / "venv")
  pip_install(py, REPO / "plugins" / "tg_gguf")
  (tmp_path / "writer.py").write_text(CHECK)
  # without the plugin the writer can't size type 200's blocks: the error names the id and the missing plugin
  r = run(py, "", args=[str(tmp_path / "writer.py"), str(tmp_path / "m.gguf")], env={"DEV": "PYTHON"})
  assert r.returncode != 0 and "GGML type id 200: no installed plugin provides it" in r.stderr, r.stdout + r.stderr
  pip_install(py, demo_src)
  r = run(py, "", args=[str(tmp_path / "writer.py"), str(tmp_path / "m.gguf")], env={"DEV": "PYTHON"})
  assert r.returncode == 0 and r.stdout.strip() == "OK", r.stdout + r.stderr
  doc = run(py, "", args=["-m", "tg_core", "doctor"])
  assert "tg-quant-demo" in doc.stdout and "DEMO_Q4X" in doc.stdout and "tg-gguf" in doc.stdout, doc.stdout

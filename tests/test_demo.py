"""The digits example (`make digits`; `make demo` is the LLM chat now): a small CNN on scikit-learn's digits must reach >= 95% test accuracy."""
from __future__ import annotations
import pathlib
import sys

import pytest

pytest.importorskip("sklearn")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))

def test_digits_cnn_reaches_95_percent():
  from digits_cnn import train
  acc = train(epochs=8, batch=64, lr=1e-2, seed=0, verbose=False)
  assert acc >= 0.95, f"test accuracy {acc:.4f} < 0.95"

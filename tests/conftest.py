"""Test-suite wiring: tests/ on sys.path for the shared helpers."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402

@pytest.fixture(autouse=True)
def _seed_torch():
  """Reference modules draw their initial weights from torch's global RNG: seed it so every test is reproducible
  whatever ran before it in the same worker."""
  try: import torch
  except ImportError: return
  torch.manual_seed(0)

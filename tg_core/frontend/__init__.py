"""Front-end op groups. Each module is a mixin of `Tensor` methods built from the core primitives in tensor.py."""
from __future__ import annotations
from typing import Any

def tensor_class() -> Any:
  """The Tensor class, for mixin code that builds new tensors (tensor.py imports the mixins, so they import it lazily)."""
  from tg_core.tensor import Tensor
  return Tensor

"""Tensor methods: nn ops. Built only from Tensor's core primitives (see tg_core/tensor.py)."""
from __future__ import annotations

class NNMixin:
  __slots__ = ()

"""The ONNX backend interface over OnnxRunner, for onnx.backend.test.BackendTest."""
from __future__ import annotations
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from tg_onnx import OnnxRunner
from tg_onnx.runner import to_numpy

from tg_core import Tensor

def _out(v: Any) -> Any:
  if isinstance(v, Tensor): return to_numpy(v)
  if isinstance(v, list): return [_out(x) for x in v]
  return v

class TgRep(BackendRep):
  def __init__(self, runner: OnnxRunner): self.runner = runner
  def run(self, inputs: Any, **kwargs: Any) -> tuple:
    if isinstance(inputs, dict): feed = inputs
    else:
      names = [i.name for i in self.runner.model.graph.input]
      if len(inputs) < len(names): names = [n for n in names if n not in self.runner.initializers]
      feed = dict(zip(names, inputs if isinstance(inputs, (list, tuple)) else [inputs]))
    outs = self.runner(feed)
    return tuple(_out(outs[n]) for n in self.runner.output_names)

class TgBackend(Backend):
  @classmethod
  def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> TgRep:
    return TgRep(OnnxRunner(model, jit=False))
  @classmethod
  def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
    return cls.prepare(model, device).run(inputs)
  @classmethod
  def supports_device(cls, device: str) -> bool: return device == "CPU"

__all__ = ["TgBackend", "np"]

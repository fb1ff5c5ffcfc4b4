"""The typed errors of tg-onnx: every failure a caller can cause (a bad file, an op tg does not run, a wrong input) is one of these."""
from __future__ import annotations

class OnnxError(Exception):
  """Base class of every error tg-onnx raises on purpose."""

class OnnxLoadError(OnnxError, ValueError):
  """The file or bytes are not a readable ONNX model (truncated, malformed, inconsistent graph)."""

class OnnxOpsetError(OnnxError, ValueError):
  """The model imports an opset version tg-onnx does not implement."""

class OnnxUnsupportedOpError(OnnxError, NotImplementedError):
  """A node uses an op (or an attribute value, or a tensor type) tg-onnx does not run."""

class OnnxInputError(OnnxError, ValueError):
  """The inputs passed to the runner do not match the model's graph inputs (name, rank, shape or dtype)."""

class OnnxNodeError(OnnxError, RuntimeError):
  """A node failed while running (inconsistent shapes or attributes in the model); chains the cause."""

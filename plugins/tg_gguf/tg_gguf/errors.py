"""The errors of tg-gguf: every malformed file raises a subclass of GGUFError naming the problem (and the fix, where there is one)."""
from __future__ import annotations

class GGUFError(ValueError):
  """A GGUF file (or data to write as one) that doesn't follow the format."""

class GGUFTruncatedError(GGUFError):
  """The file ends before the header, a value or a tensor's data does."""

class GGUFMagicError(GGUFError):
  """The file doesn't start with the GGUF magic."""

class GGUFVersionError(GGUFError):
  """A GGUF version this reader doesn't read (v1, a future one, or a big-endian file)."""

class GGUFFormatError(GGUFError):
  """A bad value in the header: an unknown value type, a count or length larger than the file, a bad key or alignment."""

class GGUFTensorError(GGUFError):
  """A bad tensor info: dims, offsets past the end, misaligned or overlapping data, a row that isn't a whole number of blocks."""

class GGUFUnknownTypeError(GGUFError):
  """A GGML type id that no installed plugin provides."""
  def __init__(self, msg: str, type_id: int):
    super().__init__(msg)
    self.type_id = type_id

"""Errors of the PTX interpreter. Each names the instruction (or directive) and its line in the PTX text."""


class PTXError(Exception):
  """Base of the PTX interpreter's errors."""


class PTXParseError(PTXError, ValueError):
  """The PTX text is malformed (or uses a construct the parser does not know)."""


class PTXUnsupportedError(PTXError, NotImplementedError):
  """An instruction or modifier the interpreter does not implement. It is never skipped or read as zeros."""


class PTXRuntimeError(PTXError, RuntimeError):
  """A kernel did something a GPU would fault on (illegal or misaligned address, barrier deadlock) or ran past the step limit."""

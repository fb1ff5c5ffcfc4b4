"""HCQSignal: a 64-bit timeline value in memory both the host and the device see."""
from __future__ import annotations
import time
from abc import ABC, abstractmethod
from tg_core.hcq.errors import HCQTimeoutError

class HCQSignal(ABC):
  """A timeline: the device raises `value` as commands complete; `wait(v)` returns once value >= v, or raises HCQTimeoutError.

  Subclasses say where the value lives (`_read`/`_write`, e.g. a field of a mapped struct) and may block in the driver between
  polls (`_sleep`, e.g. an interrupt-backed event wait) instead of spinning."""
  def __init__(self, name: str): self.name = name

  @abstractmethod
  def _read(self) -> int: ...
  @abstractmethod
  def _write(self, value: int) -> None: ...
  def _sleep(self, remaining_s: float) -> None: time.sleep(min(remaining_s, 1e-3))

  @property
  def value(self) -> int: return self._read()
  @value.setter
  def value(self, v: int) -> None: self._write(v)

  def wait(self, value: int, timeout_s: float = 30.0) -> None:
    """Block until the timeline reaches `value`; never hangs: past `timeout_s` raises HCQTimeoutError with the value seen."""
    deadline = time.monotonic() + timeout_s
    while (seen := self._read()) < value:
      remaining = deadline - time.monotonic()
      if remaining <= 0: raise HCQTimeoutError(self.name, value, seen, timeout_s)
      self._sleep(remaining)

  def __repr__(self) -> str: return f"<{type(self).__name__} {self.name} value={self._read()}>"

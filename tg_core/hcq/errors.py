"""HCQ errors: each names the signal, queue or command it is about."""
from __future__ import annotations

class HCQError(RuntimeError):
  """Base class of the hardware-command-queue layer's errors."""

class HCQTimeoutError(HCQError, TimeoutError):
  """A signal did not reach the value waited for in time: the device hung, a queue never ran, or a wait was recorded wrongly."""
  def __init__(self, signal: str, wanted: int, seen: int, timeout_s: float):
    super().__init__(f"timeout after {timeout_s:g}s waiting for signal {signal} to reach {wanted}; it holds {seen}. The queue that should "
                     f"advance it never ran the command or is stuck: check the kernels submitted before it (a hang) and the wait values")
    self.signal, self.wanted, self.seen, self.timeout_s = signal, wanted, seen, timeout_s

class HCQQueueError(HCQError, ValueError):
  """A command recorded with arguments the queue can't encode (names the command and the fix)."""

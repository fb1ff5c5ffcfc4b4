"""The device layer's errors, and the "did you mean" every DEV error ends with."""
from __future__ import annotations
import difflib
from typing import Sequence

class DeviceError(Exception):
  """Base class of the device layer's errors."""

class DeviceNotFoundError(DeviceError, KeyError):
  """A device name that nothing registered. It is a KeyError, so `Device["X"]` behaves like a mapping lookup."""
  def __init__(self, message: str, name: str | None = None):
    super().__init__(message)
    self.message, self.name = message, name
  def __str__(self) -> str: return self.message  # KeyError would quote the message

class DeviceUnavailableError(DeviceError, RuntimeError):
  """A registered device whose factory failed (missing driver, no hardware, bad device string); the cause is chained."""

class DeviceAlreadyRegisteredError(DeviceError, ValueError):
  """Two registrations claimed the same device name."""

class DevTargetError(DeviceError, ValueError):
  """DEV names a renderer, arch or interface the device can't serve. The message names what it can serve."""
  def __init__(self, message: str, wanted: str, valid: Sequence[str]):
    super().__init__(message)
    self.wanted, self.valid = wanted, tuple(valid)

class RendererNotFoundError(DevTargetError):
  """DEV=DEVICE:RENDERER names a renderer the device doesn't have."""

class ArchUnsupportedError(DevTargetError):
  """DEV=DEVICE:RENDERER:arch names an arch the renderer can't target."""

class InterfaceUnsupportedError(DevTargetError):
  """DEV=iface+DEVICE names an interface the device doesn't declare."""

def did_you_mean(wanted: str, valid: Sequence[str]) -> str:
  """" (did you mean 'X'?)" for the closest valid name (case-insensitive), else ""."""
  by_upper = {v.upper(): v for v in valid}
  close = difflib.get_close_matches(wanted.upper(), list(by_upper), n=1, cutoff=0.5)
  return f" (did you mean {by_upper[close[0]]!r}?)" if close else ""

"""HWQueue: record commands as packets, then submit them to a device's ring in one go."""
from __future__ import annotations
from abc import ABC, abstractmethod
from typing import Generic, Self, TypeVar
from tg_core.hcq.signal import HCQSignal

DeviceT = TypeVar("DeviceT")

class HWQueue(ABC, Generic[DeviceT]):
  """A recorded command list. Subclasses encode each command into `packets` (bytes, in the ring's format); `submit` copies them
  into the device's ring and rings its doorbell (`_submit`). Commands return self so a queue reads as a chain:
  `Queue().wait(sig, v).exec(prog, args, grid, block).signal(sig, v + 1).submit(dev)`."""
  def __init__(self) -> None: self.packets: list[bytes] = []

  def _add(self, packet: bytes) -> Self:
    self.packets.append(packet)
    return self

  # the commands; a queue type implements those its engine has (a copy engine has no exec)
  def exec(self, prog: object, kernargs_addr: int, grid: tuple[int, int, int], block: tuple[int, int, int]) -> Self:
    raise NotImplementedError(f"{type(self).__name__} has no kernel dispatch; record it on the device's compute queue")
  def copy(self, dst: int, src: int, size: int) -> Self:
    raise NotImplementedError(f"{type(self).__name__} has no copy command; record it on the device's copy queue")
  @abstractmethod
  def signal(self, sig: HCQSignal, value: int) -> Self:
    """Once every earlier command has completed, the device sets `sig` to `value`."""
  @abstractmethod
  def wait(self, sig: HCQSignal, value: int) -> Self:
    """The device holds later commands until `sig` reaches `value`."""

  @abstractmethod
  def _submit(self, dev: DeviceT) -> None: ...
  def submit(self, dev: DeviceT) -> Self:
    if self.packets: self._submit(dev)
    return self

"""The HCQ-compiled device (owner of the timeline signal) and an allocator whose copies run on its copy queue."""
from __future__ import annotations
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING
from tg_core.hcq.signal import HCQSignal
if TYPE_CHECKING: from tg_core.hcq.queue import HWQueue

@dataclass(frozen=True)
class HCQBuffer:
  """Device memory: its address in the device's virtual address space and its size; `cpu_view` when the host can map it."""
  va: int
  size: int
  cpu_view: memoryview | None = None

class HCQCompiled(ABC):
  """A device driven through HCQ queues. `timeline_signal` counts the device's completed submissions: each submission signals
  `next_timeline()`, and `synchronize` waits for the last one. `compute_queue_t` is the queue type that dispatches kernels and
  `allocator` allocates its memory (HCQGraph records on the one and puts its kernarg area in the other). `open` turns False when
  the device is closed and its memory freed with it: what still holds an HCQBuffer of it must not free that buffer again."""
  timeline_signal: HCQSignal
  timeline_value: int = 0
  open: bool = True
  compute_queue_t: type[HWQueue]
  allocator: HCQAllocator

  def next_timeline(self) -> int:
    self.timeline_value += 1
    return self.timeline_value

  def synchronize(self, timeout_s: float = 30.0) -> None: self.timeline_signal.wait(self.timeline_value, timeout_s)

class HCQAllocator(ABC):
  """Allocates device memory and copies host<->device through a host-visible staging buffer and the device's copy queue."""
  @abstractmethod
  def alloc(self, size: int, host_visible: bool = False) -> HCQBuffer: ...
  @abstractmethod
  def free(self, buf: HCQBuffer) -> None: ...
  @abstractmethod
  def copyin(self, dst: HCQBuffer, src: memoryview) -> None: ...
  @abstractmethod
  def copyout(self, dst: memoryview, src: HCQBuffer) -> None: ...

"""The KFD driver's errors: each names the ioctl, queue or allocation it is about."""
from __future__ import annotations
import errno
import os
from tg_core.device import DeviceError

class KFDError(DeviceError):
  """Base class of the KFD driver's errors."""

class KFDIoctlError(KFDError):
  """An ioctl on /dev/kfd failed: names the ioctl, the errno and the arguments sent."""
  def __init__(self, ioctl: str, err: int, args: object, detail: str = ""):
    super().__init__(f"{ioctl} failed with {errno.errorcode.get(err, err)} ({os.strerror(err)}){': ' + detail if detail else ''}; arguments {args!r}")
    self.ioctl, self.errno = ioctl, err

class KFDOutOfMemoryError(KFDIoctlError, MemoryError):
  """AMDKFD_IOC_ALLOC_MEMORY_OF_GPU returned ENOMEM: the GPU's memory of that kind is exhausted."""
  def __init__(self, ioctl: str, err: int, args: object, size: int, kind: str, gpu_id: int):
    super().__init__(ioctl, err, args, f"out of GPU memory allocating {size} bytes of {kind} on gpu_id {gpu_id}; free buffers or use smaller ones")
    self.size, self.kind, self.gpu_id = size, kind, gpu_id

class KFDTopologyError(KFDError):
  """The sysfs topology has no usable GPU node, or a node's properties can't be read."""

class KFDDeviceFaultError(KFDError):
  """A submission after the device faulted (a kernel fault, an unknown packet): its timeline can't advance any more, so every
  later submission and wait fails at once with the first fault instead of timing out. Reopen the device (a new process)."""

"""Hardware command queues (HCQ): the device-independent half of a driver that builds GPU command streams in Python.

A backend subclasses these for its command processor (AMD: AQL/SDMA over KFD; CUDA could later do the same over its driver):
- `HCQSignal`: a timeline value in device-visible memory; the device advances it, the host waits for it with a timeout.
- `HWQueue`: records commands (dispatch, signal, wait, copy) into a list of packets, then submits them to a device's ring.
- `KernargLayout` / `HCQProgram`: the kernel-argument segment of a program (buffer addresses, then 32-bit values).
- `HCQAllocator` / `HCQCompiled`: an allocator whose copies run on the device's copy queue, and the device owning the timeline.
- `HCQRuntime` / `HCQGraph`: a device runtime program over an HCQProgram, and TinyJit's batch of them replayed as one submission.
"""
from tg_core.hcq.errors import HCQError, HCQTimeoutError, HCQQueueError
from tg_core.hcq.signal import HCQSignal
from tg_core.hcq.queue import HWQueue
from tg_core.hcq.program import KernargLayout, HCQProgram, HCQRuntime
from tg_core.hcq.device import HCQAllocator, HCQBuffer, HCQCompiled
from tg_core.hcq.graph import HCQGraph

__all__ = ["HCQError", "HCQTimeoutError", "HCQQueueError", "HCQSignal", "HWQueue", "KernargLayout", "HCQProgram", "HCQAllocator", "HCQBuffer",
           "HCQCompiled", "HCQRuntime", "HCQGraph"]

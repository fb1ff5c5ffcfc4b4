"""The AMD device: AMD GPUs through the KFD driver (tg_amd.kfd.driver), or with DEV=MOCKKFD+AMD the same driver on the mock
KFD (tg_amd.kfd.mock), whose dispatches run the compiled code objects on the emulator (tg_amd.emu). Only the OS seam differs.

AMD:n is GPU node n of the topology (modulo the nodes present, as CUDA:n). An arch in DEV (`MOCKKFD+AMD:LLVM:gfx942`) picks
the nodes of that arch: the mock has a gfx1100 node and a gfx942 node, so `MOCKKFD+AMD` is gfx1100 and `MOCKKFD+AMD:LLVM:gfx942`
the CDNA3 one. `DEV=NULL:LLVM:gfx950` renders and compiles for any arch in tg_amd.renderer.ARCHS without a GPU."""
from __future__ import annotations
import functools
import math
import os
import time
from typing import Any

from tg_core.device import BufferSpec, Compiled, Device, DeviceUnavailableError, LRUAllocator
from tg_core.hcq import HCQBuffer, HCQGraph, HCQRuntime
from tg_amd.kfd.driver import AMDProgram, KFDDevice
from tg_amd.kfd.mock import MockKFD
from tg_amd.kfd.topology import gpu_nodes
from tg_amd.renderer import FLAT_BLOCK, AMDGPURenderer, kernel_symbol

@functools.cache
def mock_kfd() -> MockKFD:
  """One mock KFD per process (as there is one /dev/kfd): a gfx1100 node and a gfx942 node."""
  return MockKFD()

def interface() -> str:
  """The interface DEV names for AMD ("MOCKKFD" for DEV=MOCKKFD+AMD), "" for the real /dev/kfd."""
  tgt = Device.target
  return tgt.iface.split(":")[0].upper() if tgt is not None and tgt.device == "AMD" and tgt.iface else ""

def probe() -> bool:
  """Cheap: does this machine have a KFD (no device is opened)."""
  return os.path.exists("/dev/kfd")

class AMDAllocator(LRUAllocator[HCQBuffer]):
  """GPU memory of the device's KFDAllocator; sub-buffers are HCQBuffers at an offset into their allocation."""
  def __init__(self, dev: AMDDevice):
    super().__init__(dev)
    self.kfd = dev.kfd
  def _alloc(self, size: int, options: BufferSpec) -> HCQBuffer:
    return self.kfd.allocator.alloc(max(size, 16))  # a gated load reads element 0 of even an empty buffer
  def _free(self, opaque: HCQBuffer, options: BufferSpec) -> None:
    if self.kfd.allocator.buffers.get(opaque.va) is opaque: self.kfd.allocator.free(opaque)
  def _copyin(self, dest: HCQBuffer, src: memoryview) -> None:
    src = src.cast("B") if src.format != "B" or src.ndim != 1 else src
    if src.nbytes: self.kfd.allocator.copyin(dest, src)
  def _copyout(self, dest: memoryview, src: HCQBuffer) -> None:
    if dest.nbytes: self.kfd.allocator.copyout(dest, src)
  def _offset(self, buf: HCQBuffer, size_bytes: int, offset_bytes: int) -> HCQBuffer:
    return HCQBuffer(buf.va + offset_bytes, size_bytes)

class AMDRuntimeProgram(HCQRuntime):
  """One kernel loaded on the device (tg_amd.kfd.driver.AMDProgram); `__call__` dispatches it on the AQL queue (TinyJit batches
  them in an HCQGraph)."""
  def __init__(self, device: str, name: str, lib: bytes, **kwargs: Any):
    self.dev: AMDDevice = Device[device]  # type: ignore[assignment]
    self.name = name
    self.prog = AMDProgram(self.dev.kfd, lib, kernel_symbol(name))

  @staticmethod
  def launch_dims(global_size: tuple[int, ...], local_size: tuple[int, ...]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(workgroups, work-items per workgroup). Without LOCAL dims gidx0 is spread over workgroups of FLAT_BLOCK (the renderer's)."""
    g = (tuple(global_size) + (1, 1, 1))[:3]
    loc = (tuple(local_size) + (1, 1, 1))[:3]
    if math.prod(loc) == 1: return (math.ceil(g[0] / FLAT_BLOCK), g[1], g[2]), (FLAT_BLOCK, 1, 1)
    return (g[0], g[1], g[2]), (loc[0], loc[1], loc[2])

  def __call__(self, *bufs: HCQBuffer, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    grid, block = self.launch_dims(global_size, local_size)
    if 0 in grid: return 0.0 if wait else None
    st = time.perf_counter()
    # every buffer of the kernel comes by slot; the kernel declares slots up to the last one it uses
    self.prog(*bufs[:self.prog.layout.nbufs], vals=tuple(vals), grid=grid, block=block, wait=wait)
    return time.perf_counter() - st if wait else None

class AMDDevice(Compiled):
  """AMD, AMD:1, ...: a GPU node of /dev/kfd (or of the mock KFD with DEV=MOCKKFD+AMD)."""
  MOCK_UNSUPPORTED = {"large_buffers": "MOCKKFD+AMD emulates the GPU's ISA on numpy, one wave at a time: a 1 GiB kernel is too slow"}

  def __init__(self, device: str):
    self.iface = interface()
    os_ = mock_kfd() if self.iface == "MOCKKFD" else None
    tgt = Device.target
    want = tgt.arch if tgt is not None and tgt.device == "AMD" else None
    ordinal = int(device.split(":")[1]) if ":" in device else 0
    if os_ is None and not probe():
      raise DeviceUnavailableError(f"{device}: /dev/kfd does not exist: no AMD GPU with the amdgpu/KFD driver on this machine. Run on the mock KFD "
                                   "and its ISA emulator with DEV=MOCKKFD+AMD (gfx1100; DEV=MOCKKFD+AMD:LLVM:gfx942 for CDNA3), or compile "
                                   "only with DEV=NULL:LLVM:gfx1100")
    # the node: AMD:n among the nodes (of the arch DEV names, if any)
    nodes = gpu_nodes(os_) if os_ is not None else None
    self.kfd = self._open(device, ordinal, want, os_, nodes)
    self.arch = self.kfd.arch
    self.unsupported = dict(self.MOCK_UNSUPPORTED) if self.iface == "MOCKKFD" else {}  # type: ignore[misc]
    super().__init__(device, AMDAllocator(self), [AMDGPURenderer(self.arch)], None, AMDRuntimeProgram, graph=HCQGraph)

  @staticmethod
  def _open(device: str, ordinal: int, arch: str | None, os_: Any, nodes: Any) -> KFDDevice:
    if nodes is None:  # the real KFD: the driver reads the topology itself
      from tg_amd.kfd.seam import LinuxOS
      nodes = gpu_nodes(LinuxOS())
    idx = list(range(len(nodes)))
    if arch is not None: idx = [i for i in idx if nodes[i].arch == arch]
    if not idx:
      have = ", ".join(n.arch for n in nodes) or "none"
      raise DeviceUnavailableError(f"{device}: no GPU node with arch {arch} (the KFD has: {have}). Pick one of those, or compile only with "
                                   f"DEV=NULL:LLVM:{arch}")
    return KFDDevice(idx[ordinal % len(idx)], os_=os_)

  def synchronize(self) -> None: self.kfd.synchronize(self.kfd.timeout_s)

"""The KFD driver: an AMD GPU through /dev/kfd ioctls, with an AQL compute queue and an SDMA copy queue built on tg_core.hcq.

Why AQL (not PM4) for compute: an AQL dispatch packet carries the kernel descriptor address, kernarg pointer and grid in one
64-byte record the firmware decodes for every gfx9+ part, so the driver needs no per-generation register offsets (PM4's
COMPUTE_PGM_*/USER_DATA setup differs between gfx9 and gfx11); completion and waits use the HSA signal semantics.
Signals are amd_signal_t objects: the packet processor *decrements* a completion signal by one, so a timeline value t is stored
as -t and a signal may only be advanced one step per recorded `signal` (checked when recording)."""
from __future__ import annotations
import ctypes
import errno
import struct
import time
import weakref
from dataclasses import dataclass
from typing import Self
from tg_core.device import DeviceUnavailableError
from tg_core.hcq import HCQAllocator, HCQBuffer, HCQCompiled, HCQProgram, HCQQueueError, HCQSignal, HWQueue, KernargLayout
from tg_amd.emu.dispatch import build_kernargs
from tg_amd.emu.elf import read_code_object
from tg_amd.kfd import packets as pk
from tg_amd.kfd import uapi
from tg_amd.kfd.errors import KFDDeviceFaultError, KFDIoctlError, KFDOutOfMemoryError
from tg_amd.kfd.seam import LinuxOS, OSInterface
from tg_amd.kfd.topology import KFDNode, gpu_nodes

PAGE = 4096
def round_up(x: int, a: int) -> int: return -(-x // a) * a

@dataclass
class KFDProcess:
  """What KFD keeps once per process (per address space), shared by every GPU node opened: the /dev/kfd fd and the event page."""
  kfd: int
  event_page: HCQBuffer | None = None
  event_page_handle: int = 0  # its KFD memory handle
  pending_event_page: int = 0  # the handle until the first signal event hands it to KFD, then 0

_PROCESSES: weakref.WeakKeyDictionary[OSInterface, KFDProcess] = weakref.WeakKeyDictionary()  # OS seam -> its process state
_LINUX: list[LinuxOS] = []

def _process(os_: OSInterface) -> KFDProcess:
  if os_ not in _PROCESSES:
    try: fd = os_.open("/dev/kfd")
    except OSError as e:
      raise DeviceUnavailableError(f"AMD: can't open /dev/kfd ({e.strerror or e}): no AMD GPU with the amdgpu/KFD driver here. "
                                   "Use DEV=MOCKKFD+AMD to run on the mock KFD and its emulator (directly: "
                                   "KFDDevice(os_=tg_amd.kfd.mock.MockKFD()))") from e
    _PROCESSES[os_] = KFDProcess(fd)
  return _PROCESSES[os_]

class KFDDevice(HCQCompiled):
  """One GPU node of /dev/kfd. `os_` is the OS seam (the real one by default; tg_amd.kfd.mock.MockKFD fakes it)."""
  def __init__(self, index: int = 0, os_: OSInterface | None = None, timeout_s: float = 30.0):
    if os_ is None:
      if not _LINUX: _LINUX.append(LinuxOS())
      os_ = _LINUX[0]
    self.os, self.timeout_s = os_, timeout_s
    self.fault: Exception | None = None  # what stopped the device (see _Ring.ring_doorbell)
    self.process = _process(os_)
    self.kfd = self.process.kfd
    ver = self.ioctl("AMDKFD_IOC_GET_VERSION")
    if ver.major_version != uapi.KFD_IOCTL_MAJOR_VERSION:
      raise DeviceUnavailableError(f"AMD: /dev/kfd speaks ioctl version {ver.major_version}.{ver.minor_version}, this driver {uapi.KFD_IOCTL_MAJOR_VERSION}.x")
    nodes = gpu_nodes(self.os)
    if not 0 <= index < len(nodes): raise DeviceUnavailableError(f"AMD:{index}: there are {len(nodes)} GPU nodes (AMD:0..AMD:{len(nodes) - 1})")
    self.node: KFDNode = nodes[index]
    self.gpu_id, self.arch = self.node.gpu_id, self.node.arch
    self.drm_fd = self.os.open(f"/dev/dri/renderD{self.node.drm_render_minor}")
    self.ioctl("AMDKFD_IOC_ACQUIRE_VM", drm_fd=self.drm_fd, gpu_id=self.gpu_id)
    self.allocator = KFDAllocator(self)
    # the event page, one per process: the packet processor writes an event's id to its mailbox slot, then interrupts
    if self.process.event_page is None:
      self.process.event_page = self.allocator.alloc(uapi.KFD_SIGNAL_EVENT_LIMIT * 8, host_visible=True)
      self.process.event_page_handle = self.process.pending_event_page = self.allocator.handles[self.process.event_page.va]
    else:  # map the page to this GPU too, so its packet processor can post events
      ids = (ctypes.c_uint32 * 1)(self.gpu_id)
      self.ioctl("AMDKFD_IOC_MAP_MEMORY_TO_GPU", handle=self.process.event_page_handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1)
    self.event_page = self.process.event_page
    self.signal_pool = self.allocator.alloc(PAGE, host_visible=True)
    self.signals: list[AMDSignal] = []
    self._free_signal_slots = list(range(PAGE // pk.AMD_SIGNAL.size))[::-1]
    self.kernarg_pool = self.allocator.alloc(1 << 20, host_visible=True)
    self._kernarg_next = 0
    self.compute_queue = AQLRing(self)
    self.copy_queue = SDMARing(self)
    self.compute_queue_t = AMDComputeQueue
    self.timeline_signal = self.new_signal("timeline")

  def close(self) -> None:
    """Destroy this device's queues and signal events and free its memory (the per-process event page stays)."""
    for ring in (self.compute_queue, self.copy_queue):
      self.ioctl("AMDKFD_IOC_DESTROY_QUEUE", queue_id=ring.queue_id)
      self.os.munmap(ring.doorbell_page)
    for sig in self.signals: self.ioctl("AMDKFD_IOC_DESTROY_EVENT", event_id=sig.event_id)
    for va in [va for va in self.allocator.handles if va != self.event_page.va]: self.allocator.free(self.allocator.buffers[va])
    self.os.close(self.drm_fd)
    self.open = False

  def ioctl(self, name: str, **fields: int) -> ctypes.Structure:
    req, st = uapi.IOCTLS[name]
    args = st(**fields)
    try: self.os.ioctl(self.kfd, req, args)
    except OSError as e:
      if name == "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU" and e.errno == errno.ENOMEM:
        kind = "VRAM" if fields.get("flags", 0) & uapi.KFD_IOC_ALLOC_MEM_FLAGS_VRAM else "GTT"
        raise KFDOutOfMemoryError(name, e.errno, args, fields["size"], kind, self.gpu_id) from e
      raise KFDIoctlError(name, e.errno or 0, args) from e
    return args

  def new_signal(self, name: str) -> AMDSignal:
    if not self._free_signal_slots: raise HCQQueueError(f"signal pool of {PAGE // pk.AMD_SIGNAL.size} signals exhausted; destroy unused signals")
    self.signals.append(sig := AMDSignal(self, name, self._free_signal_slots.pop()))
    return sig

  def kernargs(self, data: bytes) -> int:
    """Copy a kernarg segment into the (host-visible) kernarg ring. Before wrapping around it waits for every submitted dispatch,
    so a segment is never overwritten while a queued kernel may still read it."""
    size = round_up(len(data), 64)
    if size > self.kernarg_pool.size: raise HCQQueueError(f"kernarg segment of {len(data)} bytes exceeds the {self.kernarg_pool.size}-byte kernarg ring")
    if self._kernarg_next + size > self.kernarg_pool.size:
      self.synchronize(self.timeout_s)
      self._kernarg_next = 0
    off, self._kernarg_next = self._kernarg_next, self._kernarg_next + size
    assert self.kernarg_pool.cpu_view is not None
    self.kernarg_pool.cpu_view[off:off + len(data)] = data
    return self.kernarg_pool.va + off

  def wait_event(self, event_id: int, timeout_ms: int) -> bool:
    """AMDKFD_IOC_WAIT_EVENTS on one event; True when it fired, False on timeout."""
    ev = uapi.kfd_event_data(event_id=event_id)
    res = self.ioctl("AMDKFD_IOC_WAIT_EVENTS", events_ptr=ctypes.addressof(ev), num_events=1, wait_for_all=1, timeout=timeout_ms)
    if res.wait_result == uapi.KFD_IOC_WAIT_RESULT_FAIL: raise KFDIoctlError("AMDKFD_IOC_WAIT_EVENTS", errno.EIO, res, f"event {event_id} failed")
    return res.wait_result == uapi.KFD_IOC_WAIT_RESULT_COMPLETE

class AMDSignal(HCQSignal):
  """An amd_signal_t in the device's signal pool, with a KFD signal event for interrupt-backed waits. Stores the timeline value
  negated (see the module docstring); `recorded` is the value the last recorded `signal` command will leave."""
  def __init__(self, dev: KFDDevice, name: str, slot: int):
    super().__init__(name)
    self.dev, self.slot = dev, slot
    self.va = dev.signal_pool.va + slot * pk.AMD_SIGNAL.size
    assert dev.signal_pool.cpu_view is not None
    self._mem = dev.signal_pool.cpu_view[slot * pk.AMD_SIGNAL.size:(slot + 1) * pk.AMD_SIGNAL.size]
    # the first event hands KFD the event page (by its memory handle); KFD refuses it on later events
    ev = dev.ioctl("AMDKFD_IOC_CREATE_EVENT", event_page_offset=dev.process.pending_event_page, event_type=uapi.KFD_IOC_EVENT_SIGNAL, auto_reset=1)
    dev.process.pending_event_page = 0
    self.event_id = ev.event_id
    pk.AMD_SIGNAL.pack_into(self._mem, 0, pk.AMD_SIGNAL_KIND_USER, 0, dev.event_page.va + ev.event_slot_index * 8, ev.event_id, 0, 0, 0, 0, 0, 0)
    self.recorded = 0

  def _read(self) -> int: return -struct.unpack_from("<q", self._mem, pk.AMD_SIGNAL_VALUE_OFFSET)[0]
  def _write(self, value: int) -> None:
    struct.pack_into("<q", self._mem, pk.AMD_SIGNAL_VALUE_OFFSET, -value)
    self.recorded = value
  def _sleep(self, remaining_s: float) -> None: self.dev.wait_event(self.event_id, max(1, min(int(remaining_s * 1000), 10)))

  def next_step(self, value: int, queue: str) -> None:
    if value != self.recorded + 1:
      raise HCQQueueError(f"{queue}: signal {self.name} can only advance one step per command (AQL/SDMA completion decrements it): "
                          f"recorded up to {self.recorded}, asked for {value}; signal {self.recorded + 1} instead")
    self.recorded = value

class _Ring:
  """A KFD user-mode queue: a ring buffer, read/write pointers and a doorbell, all in memory mapped into this process."""
  queue_type: int
  ring_size: int
  def __init__(self, dev: KFDDevice):
    self.dev = dev
    self.ring = dev.allocator.alloc(self.ring_size, host_visible=True)
    self.pointers = dev.allocator.alloc(PAGE, host_visible=True)  # rptr at 0, wptr at 8
    self.eop = dev.allocator.alloc(PAGE) if self.queue_type != uapi.KFD_IOC_QUEUE_TYPE_SDMA else None
    q = dev.ioctl("AMDKFD_IOC_CREATE_QUEUE", ring_base_address=self.ring.va, ring_size=self.ring_size, gpu_id=dev.gpu_id,
                  queue_type=self.queue_type, queue_percentage=uapi.KFD_MAX_QUEUE_PERCENTAGE, queue_priority=7,
                  read_pointer_address=self.pointers.va, write_pointer_address=self.pointers.va + 8,
                  eop_buffer_address=self.eop.va if self.eop else 0, eop_buffer_size=self.eop.size if self.eop else 0)
    self.queue_id = q.queue_id
    # the doorbell page: KFD's doorbell_offset is an mmap offset of /dev/kfd; the queue's doorbell is at its low bits within the 8 KiB page
    self.doorbell_page = dev.os.mmap(0, 0x2000, dev.kfd, q.doorbell_offset & ~0x1fff)
    self.doorbell = self.doorbell_page.cast("Q")
    self.doorbell_index = (q.doorbell_offset & 0x1fff) // 8
    self.wptr = 0  # in packets (AQL) or bytes (SDMA), as the engine counts

  def check_fault(self) -> None:
    if (f := self.dev.fault) is not None:
      raise KFDDeviceFaultError(f"AMD {self.dev.arch}: the device stopped at an earlier fault ({type(f).__name__}: {f})") from f

  def ring_doorbell(self, value: int) -> None:
    """Write the doorbell. A fault the write reports (the mock KFD runs the queue right here) stops the device."""
    try: self.doorbell[self.doorbell_index] = value
    except Exception as e:
      self.dev.fault = e
      raise

class AQLRing(_Ring):
  queue_type, ring_size = uapi.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL, 64 * pk.AQL_PACKET_SIZE * 16
  def push(self, packets: list[bytes]) -> None:
    """Write the packets and ring the doorbell. A submission larger than the free ring (a big HCQGraph) goes in pieces, each
    waiting for the packet processor to free slots; a queue that stops reading fails after the device's timeout."""
    self.check_fault()
    n = self.ring_size // pk.AQL_PACKET_SIZE
    view = self.ring.cpu_view
    assert view is not None
    i, deadline = 0, time.monotonic() + self.dev.timeout_s
    while i < len(packets):
      rptr = struct.unpack_from("<Q", self.pointers.cpu_view, 0)[0]  # type: ignore[arg-type]
      if (free := n - (self.wptr - rptr)) <= 0:
        if time.monotonic() > deadline:
          raise HCQQueueError(f"AQL queue full for {self.dev.timeout_s:g}s: {len(packets) - i} packets wait with {self.wptr - rptr} of {n} in "
                              "flight; the packet processor stopped reading (a hung kernel or a wait that is never met)")
        time.sleep(1e-4)
        continue
      for p in packets[i:i + free]:
        off = self.wptr % n * pk.AQL_PACKET_SIZE
        view[off + 2:off + 64] = p[2:]  # body first, header last: the packet processor must never see a half-written packet
        view[off:off + 2] = p[:2]
        self.wptr += 1
      i += free
      struct.pack_into("<Q", self.pointers.cpu_view, 8, self.wptr)  # type: ignore[arg-type]
      self.ring_doorbell(self.wptr - 1)  # an AQL doorbell holds the id of the last packet written

class SDMARing(_Ring):
  queue_type, ring_size = uapi.KFD_IOC_QUEUE_TYPE_SDMA, 1 << 16
  def push(self, packets: list[bytes]) -> None:
    self.check_fault()
    data = b"".join(packets)
    rptr = struct.unpack_from("<Q", self.pointers.cpu_view, 0)[0]  # type: ignore[arg-type]
    if self.wptr + len(data) - rptr > self.ring_size: raise HCQQueueError(f"SDMA queue full: {len(data)} bytes with {self.wptr - rptr} in flight")
    view = self.ring.cpu_view
    assert view is not None
    for i in range(0, len(data), 4):
      off = (self.wptr + i) % self.ring_size
      view[off:off + 4] = data[i:i + 4]
    self.wptr += len(data)
    struct.pack_into("<Q", self.pointers.cpu_view, 8, self.wptr)  # type: ignore[arg-type]
    self.ring_doorbell(self.wptr)  # an SDMA doorbell holds the write pointer in bytes

class AMDComputeQueue(HWQueue[KFDDevice]):
  """Commands for the AQL compute queue: dispatches, waits (barrier-value packets) and signals (a barrier packet's completion)."""
  def exec(self, prog: object, kernargs_addr: int, grid: tuple[int, int, int], block: tuple[int, int, int]) -> Self:
    if not isinstance(prog, AMDProgram): raise HCQQueueError(f"AMDComputeQueue.exec takes an AMDProgram, got {type(prog).__name__}")
    return self._add(pk.aql_dispatch(prog.kernel_object, kernargs_addr, grid, block, prog.group_segment_size, prog.private_segment_size))
  def wait(self, sig: HCQSignal, value: int) -> Self:
    if not isinstance(sig, AMDSignal): raise HCQQueueError(f"AMDComputeQueue.wait takes an AMDSignal, got {type(sig).__name__}")
    return self._add(pk.aql_barrier_value(sig.va, pk.HSA_SIGNAL_CONDITION_LT, 1 - value))  # timeline >= value <=> stored (-timeline) < 1 - value
  def signal(self, sig: HCQSignal, value: int) -> Self:
    if not isinstance(sig, AMDSignal): raise HCQQueueError(f"AMDComputeQueue.signal takes an AMDSignal, got {type(sig).__name__}")
    sig.next_step(value, "AMDComputeQueue")
    # a barrier-value packet whose condition always holds (0 == 0 under mask 0) completes after every earlier packet (barrier bit)
    return self._add(pk.aql_barrier_value(sig.va, pk.HSA_SIGNAL_CONDITION_EQ, 0, mask=0, completion_signal=sig.va))
  def _submit(self, dev: KFDDevice) -> None: dev.compute_queue.push(self.packets)

class AMDCopyQueue(HWQueue[KFDDevice]):
  """Commands for the SDMA queue: linear copies and signals (a 64-bit atomic add of -1 on the signal value)."""
  def copy(self, dst: int, src: int, size: int) -> Self:
    for off in range(0, size, pk.SDMA_COPY_MAX): self._add(pk.sdma_copy_linear(dst + off, src + off, min(pk.SDMA_COPY_MAX, size - off)))
    return self
  def signal(self, sig: HCQSignal, value: int) -> Self:
    if not isinstance(sig, AMDSignal): raise HCQQueueError(f"AMDCopyQueue.signal takes an AMDSignal, got {type(sig).__name__}")
    sig.next_step(value, "AMDCopyQueue")
    return self._add(pk.sdma_atomic_add64(sig.va + pk.AMD_SIGNAL_VALUE_OFFSET, -1))
  def wait(self, sig: HCQSignal, value: int) -> Self:
    raise HCQQueueError("AMDCopyQueue.wait: SDMA's POLL_REGMEM compares 32 bits and can't test a 64-bit signal; wait on the host "
                        "(signal.wait) or on the compute queue before submitting the copy")
  def _submit(self, dev: KFDDevice) -> None: dev.copy_queue.push(self.packets)

class KFDAllocator(HCQAllocator):
  """GPU memory through AMDKFD_IOC_ALLOC_MEMORY_OF_GPU + MAP_MEMORY_TO_GPU at a CPU-reserved virtual address (so GPU and CPU
  addresses agree); host-visible buffers are GTT, mmapped through the DRM render node. Copies go through a GTT staging buffer and SDMA."""
  STAGING = 1 << 21
  def __init__(self, dev: KFDDevice):
    self.dev = dev
    self.handles: dict[int, int] = {}  # va -> KFD memory handle
    self.buffers: dict[int, HCQBuffer] = {}
    self._staging: HCQBuffer | None = None

  def alloc(self, size: int, host_visible: bool = False) -> HCQBuffer:
    if size <= 0: raise ValueError(f"allocation size must be positive, got {size}")
    dev, size = self.dev, round_up(size, PAGE)
    va = dev.os.reserve_va(size)
    flags = (uapi.KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE | uapi.KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE | uapi.KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE |
             (uapi.KFD_IOC_ALLOC_MEM_FLAGS_GTT | uapi.KFD_IOC_ALLOC_MEM_FLAGS_COHERENT | uapi.KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED if host_visible
              else uapi.KFD_IOC_ALLOC_MEM_FLAGS_VRAM))
    try: mem = dev.ioctl("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=va, size=size, gpu_id=dev.gpu_id, flags=flags)
    except Exception:
      dev.os.release_va(va, size)
      raise
    ids = (ctypes.c_uint32 * 1)(dev.gpu_id)
    mapped = dev.ioctl("AMDKFD_IOC_MAP_MEMORY_TO_GPU", handle=mem.handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1)
    if mapped.n_success != 1: raise KFDIoctlError("AMDKFD_IOC_MAP_MEMORY_TO_GPU", errno.EIO, mapped, f"mapped on {mapped.n_success} of 1 GPUs")
    view = dev.os.mmap(va, size, dev.drm_fd, mem.mmap_offset) if host_visible else None
    self.handles[va] = mem.handle
    self.buffers[va] = buf = HCQBuffer(va, size, view)
    return buf

  def free(self, buf: HCQBuffer) -> None:
    if buf.va not in self.handles: raise ValueError(f"free of 0x{buf.va:x}, which this allocator did not allocate (or freed already)")
    dev, handle = self.dev, self.handles.pop(buf.va)
    del self.buffers[buf.va]
    if buf is self._staging: self._staging = None
    if buf.cpu_view is not None: dev.os.munmap(buf.cpu_view)
    ids = (ctypes.c_uint32 * 1)(dev.gpu_id)
    dev.ioctl("AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU", handle=handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1)
    dev.ioctl("AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=handle)
    dev.os.release_va(buf.va, buf.size)

  def _copy(self, dst: int, src: int, size: int) -> None:
    dev = self.dev
    AMDCopyQueue().copy(dst, src, size).signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    dev.synchronize(dev.timeout_s)

  def copyin(self, dst: HCQBuffer, src: memoryview) -> None:
    if self._staging is None: self._staging = self.alloc(self.STAGING, host_visible=True)
    src = src.cast("B")
    for off in range(0, len(src), self.STAGING):
      n = min(self.STAGING, len(src) - off)
      self._staging.cpu_view[:n] = src[off:off + n]  # type: ignore[index]
      self._copy(dst.va + off, self._staging.va, n)

  def copyout(self, dst: memoryview, src: HCQBuffer) -> None:
    if self._staging is None: self._staging = self.alloc(self.STAGING, host_visible=True)
    dst = dst.cast("B")
    for off in range(0, len(dst), self.STAGING):
      n = min(self.STAGING, len(dst) - off)
      self._copy(self._staging.va, src.va + off, n)
      dst[off:off + n] = self._staging.cpu_view[:n]  # type: ignore[index]

class AMDProgram(HCQProgram):
  """A kernel of an AMDGPU code object, loaded into executable GPU memory. Its kernarg layout is read from the code object's
  metadata (explicit arguments: global buffers, then 32-bit by-value integers; hidden arguments after them)."""
  def __init__(self, dev: KFDDevice, lib: bytes, name: str):
    co = read_code_object(lib)
    if co.arch != dev.arch: raise HCQQueueError(f"code object for {co.arch} loaded on a {dev.arch} device; compile for {dev.arch}")
    self.dev, self.kernel = dev, co.kernel(name)
    explicit = [a for a in self.kernel.args if not a[".value_kind"].startswith("hidden_")]
    kinds = [a[".value_kind"] for a in explicit]
    nbufs = kinds.count("global_buffer")
    if kinds != ["global_buffer"] * nbufs + ["by_value"] * (len(kinds) - nbufs) or any(a[".size"] != 4 for a in explicit[nbufs:]):
      raise HCQQueueError(f"kernel {name}: arguments {kinds} are not global buffers followed by 32-bit values, the layout HCQ programs use")
    super().__init__(name, KernargLayout(nbufs, len(kinds) - nbufs, self.kernel.descriptor.kernarg_size))
    self.lib = dev.allocator.alloc(len(co.image))
    dev.allocator.copyin(self.lib, memoryview(co.image))
    self.kernel_object = self.lib.va + co.symbols[name + ".kd"][0]
    self.group_segment_size = self.kernel.descriptor.group_segment_fixed_size
    self.private_segment_size = self.kernel.descriptor.private_segment_fixed_size

  def kernargs(self, bufs: tuple[int, ...], vals: tuple[int, ...], grid: tuple[int, int, int], block: tuple[int, int, int]) -> bytes:
    return build_kernargs(self.kernel, self.layout.pack(bufs, vals), grid, block)

  def __call__(self, *bufs: HCQBuffer, vals: tuple[int, ...] = (), grid: tuple[int, int, int] = (1, 1, 1), block: tuple[int, int, int] = (1, 1, 1),
               wait: bool = True) -> None:
    dev = self.dev
    args = dev.kernargs(self.kernargs(tuple(b.va for b in bufs), vals, grid, block))
    AMDComputeQueue().wait(dev.timeline_signal, dev.timeline_value).exec(self, args, grid, block) \
                     .signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    if wait: dev.synchronize(dev.timeout_s)

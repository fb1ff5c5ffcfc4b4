"""MOCKKFD: a fake /dev/kfd at the driver's OS seam (tg_amd.kfd.seam.OSInterface), so tg_amd.kfd.driver runs unchanged without a GPU.

It fakes the device files (/dev/kfd, /dev/dri/renderD*), the sysfs topology (a CPU node, a gfx1100 node and a gfx942 node), the
ioctls the driver uses, mmaps of GPU memory and doorbell pages. GPU memory is one tg_amd.emu.Memory at the addresses the driver
reserved, and a host mapping is a view of the same bytes. A doorbell write runs the queue's executor synchronously: it parses the
packets the driver wrote into the ring (AQL on compute queues, SDMA on copy queues), runs dispatches on the emulator, and completes
signals by decrementing their amd_signal_t value and firing their KFD event.

Fault injection: `fail_ioctl(name, errno)` makes an ioctl fail; `hang(queue_type)` makes queues of that type never execute (so their
signals never advance); `vram_size`/`gtt_size` bound allocations (ENOMEM beyond)."""
from __future__ import annotations
import bisect
import ctypes
import errno
import struct
import time
from dataclasses import dataclass, field
import numpy as np
from tg_amd.emu import CodeObject, KernelDescriptor, KernelInfo, Memory, run_kernel
from tg_amd.kfd import packets as pk
from tg_amd.kfd import uapi
from tg_amd.kfd.errors import KFDError
from tg_amd.kfd.topology import TOPOLOGY

PAGE = 4096
KFD_MMAP_TYPE_DOORBELL = 3 << 62
MOCK_NODES = {"gfx1100": {"gfx_target_version": 110000, "simd_count": 192, "max_waves_per_simd": 16, "wave_front_size": 32, "lds_size_in_kb": 64},
              "gfx942": {"gfx_target_version": 90402, "simd_count": 1216, "max_waves_per_simd": 8, "wave_front_size": 64, "lds_size_in_kb": 64}}

class MockKFDError(KFDError):
  """The mock's executor met something it can't run (an unknown packet, a partial workgroup): names the packet and queue."""

@dataclass
class _Alloc:
  va: int
  size: int
  flags: int
  gpu_id: int
  buf: np.ndarray
  mapped: bool = False

@dataclass
class _Queue:
  queue_id: int
  queue_type: int
  gpu_id: int
  arch: str
  ring: int
  ring_size: int
  rptr: int
  wptr: int
  doorbell_index: int
  fault: Exception | None = None  # what stopped the queue (a kernel fault, an unknown packet): later doorbells raise it again

@dataclass
class _Node:
  gpu_id: int
  arch: str
  render_minor: int
  vram_used: int = 0
  gtt_used: int = 0
  queues: dict[int, _Queue] = field(default_factory=dict)

class _DoorbellPage:
  """The mmapped doorbell page of one GPU: writing a queue's doorbell slot runs that queue's executor."""
  def __init__(self, mock: MockKFD, gpu_id: int): self.mock, self.gpu_id = mock, gpu_id
  def cast(self, fmt: str) -> _DoorbellPage:
    if fmt != "Q": raise MockKFDError(f"doorbells are 64-bit on gfx9+; the driver cast the page to {fmt!r}")
    return self
  def __setitem__(self, index: int, value: int) -> None: self.mock._ring_doorbell(self.gpu_id, index, value)
  def release(self) -> None: pass

class MockKFD:
  """An OSInterface for the KFD driver that fakes the kernel driver and the GPUs (see the module docstring)."""
  def __init__(self, archs: tuple[str, ...] = ("gfx1100", "gfx942"), vram_size: int = 1 << 30, gtt_size: int = 1 << 30):
    self.vram_size, self.gtt_size = vram_size, gtt_size
    self.mem = Memory()
    self.nodes = [_Node(gpu_id=0x1000 + i, arch=a, render_minor=128 + i) for i, a in enumerate(archs)]
    self._fds: dict[int, str] = {}
    self._next_fd, self._next_handle, self._next_queue, self._next_event = 100, 1, 1, 1
    self._va_next = 0x1000_0000_0000  # below emu.Memory's own range (0x7f00...), which run_kernel uses for its kernarg copies
    self._reserved: dict[int, int] = {}
    self._allocs: dict[int, _Alloc] = {}  # handle -> allocation
    self._by_va: list[tuple[int, int]] = []  # sorted (va, handle)
    self._event_page: int = 0
    self._events: dict[int, bool] = {}  # event id -> fired (auto-reset on wait)
    self._failing: dict[str, int] = {}
    self._hung: set[int] = set()
    self.dispatches = 0
    self._handlers = {"AMDKFD_IOC_GET_VERSION": self._get_version, "AMDKFD_IOC_ACQUIRE_VM": self._acquire_vm,
                      "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU": self._alloc_memory_of_gpu, "AMDKFD_IOC_FREE_MEMORY_OF_GPU": self._free_memory_of_gpu,
                      "AMDKFD_IOC_MAP_MEMORY_TO_GPU": self._map_memory_to_gpu, "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU": self._unmap_memory_from_gpu,
                      "AMDKFD_IOC_CREATE_QUEUE": self._create_queue, "AMDKFD_IOC_DESTROY_QUEUE": self._destroy_queue,
                      "AMDKFD_IOC_CREATE_EVENT": self._create_event, "AMDKFD_IOC_DESTROY_EVENT": self._destroy_event,
                      "AMDKFD_IOC_WAIT_EVENTS": self._wait_events}

  # *** fault injection ***
  def fail_ioctl(self, name: str, err: int = errno.EINVAL) -> None:
    if name not in uapi.IOCTLS: raise ValueError(f"no ioctl {name!r}; the mock knows {sorted(uapi.IOCTLS)}")
    self._failing[name] = err
  def hang(self, queue_type: int) -> None:
    """Queues of this KFD_IOC_QUEUE_TYPE_* accept doorbells but never execute: their signals never advance."""
    self._hung.add(queue_type)

  # *** files and sysfs ***
  def _node_by_gpu(self, gpu_id: int) -> _Node:
    for n in self.nodes:
      if n.gpu_id == gpu_id: return n
    raise OSError(errno.EINVAL, f"no GPU with gpu_id {gpu_id}")

  def open(self, path: str) -> int:
    known = ["/dev/kfd"] + [f"/dev/dri/renderD{n.render_minor}" for n in self.nodes]
    if path not in known: raise FileNotFoundError(errno.ENOENT, f"mock KFD has no {path}", path)
    self._next_fd += 1
    self._fds[self._next_fd] = path
    return self._next_fd
  def close(self, fd: int) -> None: self._fds.pop(fd)

  def _sysfs(self) -> dict[str, str]:
    files = {f"{TOPOLOGY}/0/gpu_id": "0\n", f"{TOPOLOGY}/0/properties": "cpu_cores_count 16\nsimd_count 0\n"}
    for i, n in enumerate(self.nodes, 1):
      props = {"cpu_cores_count": 0, **MOCK_NODES[n.arch], "drm_render_minor": n.render_minor, "local_mem_size": self.vram_size}
      files[f"{TOPOLOGY}/{i}/gpu_id"] = f"{n.gpu_id}\n"
      files[f"{TOPOLOGY}/{i}/properties"] = "".join(f"{k} {v}\n" for k, v in props.items())
    return files
  def read_text(self, path: str) -> str:
    files = self._sysfs()
    if path not in files: raise FileNotFoundError(errno.ENOENT, f"mock sysfs has no {path}", path)
    return files[path]
  def listdir(self, path: str) -> list[str]:
    if path != TOPOLOGY: raise FileNotFoundError(errno.ENOENT, f"mock sysfs has no directory {path}", path)
    return [str(i) for i in range(len(self.nodes) + 1)]

  # *** address space and mappings ***
  def reserve_va(self, size: int) -> int:
    addr = self._va_next
    self._va_next += -(-size // PAGE) * PAGE + PAGE  # a guard page between reservations
    self._reserved[addr] = size
    return addr
  def release_va(self, addr: int, size: int) -> None: self._reserved.pop(addr)

  def mmap(self, addr: int, size: int, fd: int, offset: int) -> memoryview:
    path = self._fds.get(fd)
    if path == "/dev/kfd" and offset & KFD_MMAP_TYPE_DOORBELL == KFD_MMAP_TYPE_DOORBELL:
      return _DoorbellPage(self, offset >> 46 & 0xffff)  # type: ignore[return-value]
    if path is None or not path.startswith("/dev/dri/"): raise OSError(errno.EINVAL, f"mmap of fd {fd} ({path}) at offset 0x{offset:x}")
    a = self._allocs.get(offset >> 12)
    if a is None or a.va != addr or a.size != size:
      raise OSError(errno.EINVAL, f"mmap at 0x{addr:x}+{size}, offset 0x{offset:x}: no allocation with that mmap offset at that address and size")
    if not a.flags & uapi.KFD_IOC_ALLOC_MEM_FLAGS_GTT and not a.flags & uapi.KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC:
      raise OSError(errno.EINVAL, f"mmap of VRAM at 0x{addr:x} that was not allocated PUBLIC (host-visible)")
    return memoryview(a.buf)
  def munmap(self, view: memoryview) -> None: view.release()

  # *** ioctls ***
  def ioctl(self, fd: int, request: int, arg: ctypes.Structure) -> None:
    if self._fds.get(fd) != "/dev/kfd": raise OSError(errno.ENOTTY, f"ioctl on fd {fd}, which is not /dev/kfd")
    name = uapi.IOCTL_NAMES.get(request)
    if name is None: raise OSError(errno.ENOTTY, f"unknown KFD ioctl 0x{request:x}")
    if not isinstance(arg, uapi.IOCTLS[name][1]): raise OSError(errno.EFAULT, f"{name} passed a {type(arg).__name__}")
    if name in self._failing: raise OSError(self._failing[name], f"{name}: failure injected by MockKFD.fail_ioctl")
    self._handlers[name](arg)

  def _get_version(self, a: uapi.kfd_ioctl_get_version_args) -> None: a.major_version, a.minor_version = 1, 11
  def _acquire_vm(self, a: uapi.kfd_ioctl_acquire_vm_args) -> None:
    n = self._node_by_gpu(a.gpu_id)
    if self._fds.get(a.drm_fd) != f"/dev/dri/renderD{n.render_minor}": raise OSError(errno.EINVAL, f"drm_fd {a.drm_fd} is not gpu {a.gpu_id}'s render node")

  def _alloc_memory_of_gpu(self, a: uapi.kfd_ioctl_alloc_memory_of_gpu_args) -> None:
    n = self._node_by_gpu(a.gpu_id)
    if a.va_addr % PAGE or a.size % PAGE or a.size == 0: raise OSError(errno.EINVAL, "va_addr and size must be nonzero multiples of the page size")
    if self._reserved.get(a.va_addr, -1) < a.size: raise OSError(errno.EINVAL, f"0x{a.va_addr:x}+{a.size} is not inside a range the process reserved")
    vram = bool(a.flags & uapi.KFD_IOC_ALLOC_MEM_FLAGS_VRAM)
    if vram == bool(a.flags & uapi.KFD_IOC_ALLOC_MEM_FLAGS_GTT): raise OSError(errno.EINVAL, "flags must name exactly one of VRAM and GTT")
    used, cap = (n.vram_used, self.vram_size) if vram else (n.gtt_used, self.gtt_size)
    if used + a.size > cap: raise OSError(errno.ENOMEM, f"{a.size} bytes requested, {cap - used} free")
    if vram: n.vram_used += a.size
    else: n.gtt_used += a.size
    handle = self._next_handle; self._next_handle += 1
    self._allocs[handle] = _Alloc(a.va_addr, a.size, a.flags, a.gpu_id, self.mem.alloc_at(a.va_addr, a.size))
    bisect.insort(self._by_va, (a.va_addr, handle))
    a.handle, a.mmap_offset = handle, handle << 12

  def _alloc_of(self, handle: int) -> _Alloc:
    if handle not in self._allocs: raise OSError(errno.EINVAL, f"no allocation with handle {handle}")
    return self._allocs[handle]
  def _map_memory_to_gpu(self, a: uapi.kfd_ioctl_map_memory_to_gpu_args) -> None:
    m = self._alloc_of(a.handle)
    ids = (ctypes.c_uint32 * a.n_devices).from_address(a.device_ids_array_ptr)
    for gid in ids: self._node_by_gpu(gid)
    m.mapped, a.n_success = True, a.n_devices
  def _unmap_memory_from_gpu(self, a: uapi.kfd_ioctl_unmap_memory_from_gpu_args) -> None:
    self._alloc_of(a.handle).mapped, a.n_success = False, a.n_devices
  def _free_memory_of_gpu(self, a: uapi.kfd_ioctl_free_memory_of_gpu_args) -> None:
    self._alloc_of(a.handle)
    m = self._allocs.pop(a.handle)
    n = self._node_by_gpu(m.gpu_id)
    if m.flags & uapi.KFD_IOC_ALLOC_MEM_FLAGS_VRAM: n.vram_used -= m.size
    else: n.gtt_used -= m.size
    self._by_va.remove((m.va, a.handle))
    self.mem.free(m.va)

  def _create_queue(self, a: uapi.kfd_ioctl_create_queue_args) -> None:
    n = self._node_by_gpu(a.gpu_id)
    if a.queue_type not in (uapi.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL, uapi.KFD_IOC_QUEUE_TYPE_SDMA):
      raise OSError(errno.EINVAL, f"the mock runs AQL compute and SDMA queues, not queue type {a.queue_type}")
    if a.ring_size & (a.ring_size - 1) or a.ring_size < 256: raise OSError(errno.EINVAL, f"ring_size {a.ring_size} is not a power of two >= 256")
    for addr, size in ((a.ring_base_address, a.ring_size), (a.read_pointer_address, 8), (a.write_pointer_address, 8)):
      self.mem.view(addr, np.uint8, size)  # faults (AMDEmuMemoryFault) if the driver passed memory it never allocated
    if a.queue_type == uapi.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL and not a.eop_buffer_address: raise OSError(errno.EINVAL, "compute queues need an EOP buffer")
    qid = self._next_queue; self._next_queue += 1
    n.queues[qid] = _Queue(qid, a.queue_type, a.gpu_id, n.arch, a.ring_base_address, a.ring_size, a.read_pointer_address, a.write_pointer_address, qid)
    a.queue_id, a.doorbell_offset = qid, KFD_MMAP_TYPE_DOORBELL | a.gpu_id << 46 | qid * 8
  def _destroy_queue(self, a: uapi.kfd_ioctl_destroy_queue_args) -> None:
    for n in self.nodes:
      if n.queues.pop(a.queue_id, None) is not None: return
    raise OSError(errno.EINVAL, f"no queue {a.queue_id}")

  def _create_event(self, a: uapi.kfd_ioctl_create_event_args) -> None:
    if a.event_type != uapi.KFD_IOC_EVENT_SIGNAL: raise OSError(errno.EINVAL, f"the mock has signal events only, not type {a.event_type}")
    if a.event_page_offset:
      if self._event_page: raise OSError(errno.EINVAL, "the event page is already set")
      self._event_page = self._alloc_of(a.event_page_offset).va
    if not self._event_page: raise OSError(errno.EINVAL, "the first signal event must pass the event page's handle")
    eid = self._next_event; self._next_event += 1
    self._events[eid] = False
    a.event_id, a.event_slot_index, a.event_trigger_data = eid, eid, eid
  def _destroy_event(self, a: uapi.kfd_ioctl_destroy_event_args) -> None: self._events.pop(a.event_id)
  def _wait_events(self, a: uapi.kfd_ioctl_wait_events_args) -> None:
    evs = (uapi.kfd_event_data * a.num_events).from_address(a.events_ptr)
    ids = [e.event_id for e in evs]
    if any(i not in self._events for i in ids): raise OSError(errno.EINVAL, f"wait on unknown events {ids}")
    fired = [self._events[i] for i in ids]
    if all(fired) if a.wait_for_all else any(fired):
      for i in ids: self._events[i] = False  # auto reset
      a.wait_result = uapi.KFD_IOC_WAIT_RESULT_COMPLETE
    else:
      time.sleep(a.timeout / 1000)  # the executor runs at doorbell time: nothing can fire during the wait
      a.wait_result = uapi.KFD_IOC_WAIT_RESULT_TIMEOUT

  # *** the queue executors ***
  def _ring_doorbell(self, gpu_id: int, index: int, value: int) -> None:
    n = self._node_by_gpu(gpu_id)
    q = next((q for q in n.queues.values() if q.doorbell_index == index), None)
    if q is None: raise MockKFDError(f"doorbell {index} of gpu {gpu_id} belongs to no queue")
    if q.queue_type in self._hung: return
    # a fault stops the queue, as KFD evicts a queue whose kernel faulted: its signals would never advance, so a later
    # submission fails at once naming the first fault instead of waiting out its timeout
    if q.fault is not None: raise MockKFDError(f"queue {q.queue_id} stopped at an earlier fault: {type(q.fault).__name__}: {q.fault}") from q.fault
    try:
      if q.queue_type == uapi.KFD_IOC_QUEUE_TYPE_SDMA: self._run_sdma(q, value)
      else: self._run_aql(q, value)
    except Exception as e:
      q.fault = e
      raise

  def _u64(self, addr: int) -> int: return int(self.mem.view(addr, np.uint64, 1)[0])
  def _set_u64(self, addr: int, v: int) -> None: self.mem.view(addr, np.uint64, 1)[0] = v & (1 << 64) - 1

  def _complete(self, signal: int) -> None:
    """An HSA completion: decrement the amd_signal_t value by one, then post its event (mailbox write + interrupt)."""
    if not signal: return
    kind, value, mailbox, event_id = struct.unpack_from("<qqQI", self.mem.read(signal, 28))
    self.mem.write(signal + pk.AMD_SIGNAL_VALUE_OFFSET, struct.pack("<q", value - 1))
    if mailbox:
      self.mem.write(mailbox, struct.pack("<Q", event_id))
      if event_id in self._events: self._events[event_id] = True

  def _run_aql(self, q: _Queue, last: int) -> None:
    n = q.ring_size // pk.AQL_PACKET_SIZE
    rptr = self._u64(q.rptr)
    while rptr <= last:
      at = q.ring + rptr % n * pk.AQL_PACKET_SIZE
      raw = self.mem.read(at, pk.AQL_PACKET_SIZE)
      header, = struct.unpack_from("<H", raw)
      ptype = header & 0xff
      if ptype == pk.HSA_PACKET_TYPE_INVALID: break  # not yet written: the packet processor waits for the header
      if ptype == pk.HSA_PACKET_TYPE_KERNEL_DISPATCH:
        self._dispatch(q, rptr, pk.DISPATCH_BODY.unpack_from(raw, 2))
        completion = pk.DISPATCH_BODY.unpack_from(raw, 2)[-1]
      elif ptype == pk.HSA_PACKET_TYPE_VENDOR_SPECIFIC and raw[2] == pk.HSA_AMD_PACKET_TYPE_BARRIER_VALUE:
        _, _, _, signal, value, mask, cond, _, _, _, completion = pk.BARRIER_VALUE_BODY.unpack_from(raw, 2)
        have = struct.unpack("<q", self.mem.read(signal + pk.AMD_SIGNAL_VALUE_OFFSET, 8))[0] & mask
        ok = {pk.HSA_SIGNAL_CONDITION_EQ: have == value, pk.HSA_SIGNAL_CONDITION_NE: have != value, pk.HSA_SIGNAL_CONDITION_LT: have < value,
              pk.HSA_SIGNAL_CONDITION_GTE: have >= value}.get(cond)
        if ok is None: raise MockKFDError(f"AQL queue {q.queue_id} packet {rptr}: barrier-value condition {cond} is not an hsa_signal_condition_t")
        if not ok: break  # the barrier holds the queue until a later doorbell finds the condition met
      else: raise MockKFDError(f"AQL queue {q.queue_id} packet {rptr}: header 0x{header:04x} (type {ptype}) is not a dispatch or AMD barrier-value packet")
      self._complete(completion)
      self.mem.write(at, struct.pack("<H", pk.HSA_PACKET_TYPE_INVALID))  # consumed: the slot is free again
      rptr += 1
      self._set_u64(q.rptr, rptr)

  def _dispatch(self, q: _Queue, index: int, body: tuple[int, ...]) -> None:
    setup, bx, by, bz, _, gx, gy, gz, private, group, kernel_object, kernarg_address, _, _ = body
    block, size = (bx, by, bz), (gx, gy, gz)
    if any(b == 0 or g % b for g, b in zip(size, block)):
      raise MockKFDError(f"AQL queue {q.queue_id} packet {index}: grid {size} is not a whole number of {block} workgroups (the mock runs whole ones)")
    i = bisect.bisect_right(self._by_va, (kernel_object, 1 << 62)) - 1
    if i < 0: raise MockKFDError(f"AQL queue {q.queue_id} packet {index}: kernel_object 0x{kernel_object:x} is in no allocation")
    alloc = self._allocs[self._by_va[i][1]]
    kd_off = kernel_object - alloc.va
    image = alloc.buf[:kd_off + 64].tobytes()
    kd = KernelDescriptor.from_bytes(image[kd_off:kd_off + 64])
    entry = kd_off + kd.kernel_code_entry_byte_offset
    # decode from the entry up to the descriptor: LLVM lays .text out before the .rodata holding the descriptors
    code_size = kd_off - entry if entry < kd_off else alloc.size - entry
    name = f"kernel.kd@0x{kd_off:x}"  # by offset in the image: the emulator caches decoded code objects by image content
    co = CodeObject(q.arch, image if entry < kd_off else alloc.buf.tobytes(), {name + ".kd": (kd_off, 64)},
                    {name: KernelInfo(name, entry, code_size, kd, {})})
    kernargs = self.mem.read(kernarg_address, kd.kernarg_size) if kd.kernarg_size else b""
    run_kernel(co, name, kernargs, (gx // bx, gy // by, gz // bz), block, self.mem, dynamic_lds=group - kd.group_segment_fixed_size)
    self.dispatches += 1

  def _run_sdma(self, q: _Queue, wptr: int) -> None:
    rptr = self._u64(q.rptr)
    def dword(i: int) -> int: return int(self.mem.view(q.ring + (rptr + 4 * i) % q.ring_size, np.uint32, 1)[0])
    while rptr < wptr:
      header = dword(0)
      op = header & 0xff
      if op == pk.SDMA_OP_COPY and header >> 8 & 0xff == pk.SDMA_SUBOP_COPY_LINEAR:
        size, src, dst = dword(1) + 1, dword(3) | dword(4) << 32, dword(5) | dword(6) << 32
        self.mem.write(dst, self.mem.read(src, size))
        rptr += pk.COPY_LINEAR.size
      elif op == pk.SDMA_OP_ATOMIC and header >> 25 == pk.SDMA_ATOMIC_ADD64:
        addr, v = dword(1) | dword(2) << 32, dword(3) | dword(4) << 32
        self._set_u64(addr, self._u64(addr) + v)
        rptr += pk.ATOMIC.size
      else: raise MockKFDError(f"SDMA queue {q.queue_id} at byte {rptr}: packet header 0x{header:08x} (op {op}) is not COPY_LINEAR or ATOMIC ADD64")
      self._set_u64(q.rptr, rptr)

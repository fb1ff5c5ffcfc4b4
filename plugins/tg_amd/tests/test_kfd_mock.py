"""The KFD driver end to end on MOCKKFD: alloc, copy in (SDMA), dispatch (AQL), signal wait, copy out, compared with numpy,
for gfx1100 and gfx942; the injected faults (failed ioctl, a queue that never signals, out of memory) and signal timeouts."""
from __future__ import annotations
import errno
import os
import numpy as np
import pytest
from amdgpu_ir import DECLS, compile_ir, elementwise
from tg_core.device import DeviceUnavailableError
from tg_core.hcq import HCQQueueError, HCQTimeoutError
from tg_amd.kfd import uapi
from tg_amd.kfd.driver import AMDComputeQueue, AMDCopyQueue, AMDProgram, KFDDevice
from tg_amd.kfd.errors import KFDIoctlError, KFDOutOfMemoryError
from tg_amd.emu import AMDEmuMemoryFault
from tg_amd.kfd.mock import MockKFD, MockKFDError
from tg_amd.kfd.topology import gpu_nodes

ARCHS = {"gfx1100": 0, "gfx942": 1}  # MockKFD's GPU node order
ADD = elementwise("add", ["float", "float"], "float", "  %r = fadd float %x0, %x1")
SCALE = DECLS + """
define amdgpu_kernel void @scale(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %in, i32 %k, i32 %n) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %gid = call i32 @llvm.amdgcn.workgroup.id.x()
  %g = mul i32 %gid, 64
  %i = add i32 %g, %tid
  %inb = icmp slt i32 %i, %n
  br i1 %inb, label %body, label %done
body:
  %p = getelementptr i32, ptr addrspace(1) %in, i32 %i
  %x = load i32, ptr addrspace(1) %p
  %r = mul i32 %x, %k
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %r, ptr addrspace(1) %po
  br label %done
done:
  ret void
}"""

def _dev(arch: str, mock: MockKFD | None = None, timeout_s: float = 5.0) -> KFDDevice:
  return KFDDevice(ARCHS[arch], os_=mock if mock is not None else MockKFD(), timeout_s=timeout_s)

def test_topology_lists_both_mock_gpus():
  nodes = gpu_nodes(MockKFD())
  assert [n.arch for n in nodes] == ["gfx1100", "gfx942"]
  assert all(n.gpu_id != 0 for n in nodes)

@pytest.mark.parametrize("arch", list(ARCHS))
def test_elementwise_add_end_to_end(arch: str):
  dev = _dev(arch)
  assert dev.arch == arch
  prog = AMDProgram(dev, compile_ir(ADD, arch), "add")
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal(512).astype(np.float32), rng.standard_normal(512).astype(np.float32)
  A, B, O = (dev.allocator.alloc(a.nbytes) for _ in range(3))
  dev.allocator.copyin(A, memoryview(a)); dev.allocator.copyin(B, memoryview(b))
  prog(O, A, B, grid=(8, 1, 1), block=(64, 1, 1))
  out = np.empty_like(a)
  dev.allocator.copyout(memoryview(out), O)
  np.testing.assert_array_equal(out, a + b)

@pytest.mark.parametrize("arch", list(ARCHS))
def test_by_value_arguments_and_partial_tail(arch: str):
  dev = _dev(arch)
  prog = AMDProgram(dev, compile_ir(SCALE, arch), "scale")
  assert (prog.layout.nbufs, prog.layout.nvals) == (2, 2)
  n = 150  # not a multiple of the 64-wide workgroup: the kernel's bound check masks the tail
  x = np.arange(-75, 75, dtype=np.int32)
  X, O = dev.allocator.alloc(x.nbytes), dev.allocator.alloc(256 * 4)
  dev.allocator.copyin(X, memoryview(x))
  dev.allocator.copyin(O, memoryview(np.full(256, 7, np.int32)))
  prog(O, X, vals=(-3, n), grid=(4, 1, 1), block=(64, 1, 1))
  out = np.empty(256, np.int32)
  dev.allocator.copyout(memoryview(out), O)
  np.testing.assert_array_equal(out[:n], x * -3)
  np.testing.assert_array_equal(out[n:], 7)

def test_large_copy_round_trip_through_sdma():
  dev = _dev("gfx1100")
  data = np.random.default_rng(2).integers(0, 256, 5 << 20, dtype=np.uint8)  # over the 2 MiB staging buffer and the 4 MiB SDMA packet limit
  buf = dev.allocator.alloc(len(data))
  dev.allocator.copyin(buf, memoryview(data))
  back = np.zeros_like(data)
  dev.allocator.copyout(memoryview(back), buf)
  np.testing.assert_array_equal(back, data)
  dev.allocator.free(buf)

def test_compute_queue_wait_holds_later_packets_until_the_signal_is_reached():
  mock = MockKFD()
  dev = _dev("gfx1100", mock)
  prog = AMDProgram(dev, compile_ir(ADD, "gfx1100"), "add")
  a = np.arange(64, dtype=np.float32)
  A, O = dev.allocator.alloc(256), dev.allocator.alloc(256)
  dev.allocator.copyin(A, memoryview(a))
  gate = dev.new_signal("gate")
  args = dev.kernargs(prog.layout.pack((O.va, A.va, A.va)) + bytes(prog.layout.size - prog.layout.explicit_size))
  done = dev.next_timeline()
  AMDComputeQueue().wait(gate, 1).exec(prog, args, (1, 1, 1), (64, 1, 1)).signal(dev.timeline_signal, done).submit(dev)
  assert mock.dispatches == 0 and dev.timeline_signal.value == done - 1  # held at the barrier-value packet
  gate.value = 1
  AMDComputeQueue().signal(gate, 2).submit(dev)  # the next doorbell finds the condition met and runs the held packets
  dev.timeline_signal.wait(done, 1.0)
  assert mock.dispatches == 1
  out = np.empty(64, np.float32)
  dev.allocator.copyout(memoryview(out), O)
  np.testing.assert_array_equal(out, a + a)

def test_signal_advances_one_step_per_command():
  dev = _dev("gfx1100")
  sig = dev.new_signal("s")
  with pytest.raises(HCQQueueError, match=r"signal s can only advance one step.*recorded up to 0, asked for 5; signal 1 instead"):
    AMDComputeQueue().signal(sig, 5)
  with pytest.raises(HCQQueueError, match="POLL_REGMEM"):
    AMDCopyQueue().wait(sig, 1)

# *** faults ***
def test_signal_wait_times_out_with_a_clear_message():
  dev = _dev("gfx1100")
  sig = dev.new_signal("never")
  with pytest.raises(HCQTimeoutError, match=r"timeout after 0.05s waiting for signal never to reach 3; it holds 0") as e:
    sig.wait(3, timeout_s=0.05)
  assert (e.value.signal, e.value.wanted, e.value.seen) == ("never", 3, 0)

def test_injected_ioctl_failure_names_the_ioctl():
  mock = MockKFD()
  mock.fail_ioctl("AMDKFD_IOC_CREATE_QUEUE", errno.EBUSY)
  with pytest.raises(KFDIoctlError, match=r"AMDKFD_IOC_CREATE_QUEUE failed with EBUSY") as e:
    _dev("gfx1100", mock)
  assert e.value.ioctl == "AMDKFD_IOC_CREATE_QUEUE" and e.value.errno == errno.EBUSY

def test_hung_compute_queue_times_out_instead_of_hanging():
  mock = MockKFD()
  dev = _dev("gfx942", mock, timeout_s=0.1)
  prog = AMDProgram(dev, compile_ir(ADD, "gfx942"), "add")
  A = dev.allocator.alloc(256)
  mock.hang(uapi.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL)
  with pytest.raises(HCQTimeoutError, match=r"signal timeline to reach (\d+); it holds (\d+)") as e:
    prog(A, A, A, grid=(1, 1, 1), block=(64, 1, 1))
  assert e.value.wanted == e.value.seen + 1 and mock.dispatches == 0

def test_hung_copy_queue_times_out():
  mock = MockKFD()
  dev = _dev("gfx1100", mock, timeout_s=0.1)
  buf = dev.allocator.alloc(4096)
  mock.hang(uapi.KFD_IOC_QUEUE_TYPE_SDMA)
  with pytest.raises(HCQTimeoutError, match="signal timeline"):
    dev.allocator.copyin(buf, memoryview(bytes(4096)))

def test_out_of_memory_is_typed_and_names_the_request():
  dev = _dev("gfx1100", MockKFD(vram_size=64 << 20))
  with pytest.raises(KFDOutOfMemoryError, match=r"ALLOC_MEMORY_OF_GPU failed with ENOMEM.*out of GPU memory allocating 134217728 bytes of VRAM") as e:
    dev.allocator.alloc(128 << 20)
  assert e.value.size == 128 << 20 and e.value.kind == "VRAM" and isinstance(e.value, MemoryError)
  dev.allocator.alloc(16 << 20)  # a failed allocation leaks nothing: smaller ones still fit

def test_code_object_for_another_arch_is_refused():
  dev = _dev("gfx942")
  with pytest.raises(HCQQueueError, match="code object for gfx1100 loaded on a gfx942 device"):
    AMDProgram(dev, compile_ir(ADD, "gfx1100"), "add")

@pytest.mark.skipif(os.path.exists("/dev/kfd"), reason="this machine has /dev/kfd: the no-driver error can't be provoked")
def test_no_kfd_raises_device_unavailable_suggesting_the_mock():
  with pytest.raises(DeviceUnavailableError, match=r"/dev/kfd.*DEV=MOCKKFD\+AMD"):
    KFDDevice()

def test_close_destroys_queues_events_and_memory():
  mock = MockKFD()
  dev = _dev("gfx1100", mock)
  dev.allocator.alloc(1 << 20)
  dev.close()
  assert all(not n.queues for n in mock.nodes) and list(mock._events) == []
  assert mock.nodes[0].vram_used == 0 and mock.nodes[0].gtt_used == uapi.KFD_SIGNAL_EVENT_LIMIT * 8  # only the per-process event page is left
  dev2 = _dev("gfx1100", mock)  # the process state (fd, event page) is reused by a new device
  prog = AMDProgram(dev2, compile_ir(ADD, "gfx1100"), "add")
  A = dev2.allocator.alloc(256)
  dev2.allocator.copyin(A, memoryview(np.ones(64, np.float32)))
  prog(A, A, A, grid=(1, 1, 1), block=(64, 1, 1))
  out = np.empty(64, np.float32)
  dev2.allocator.copyout(memoryview(out), A)
  np.testing.assert_array_equal(out, np.full(64, 2, np.float32))

@pytest.mark.parametrize("arch", list(ARCHS))
def test_lds_and_barriers_across_waves_through_the_driver(arch: str):
  from test_emu_kernels import LDS_REDUCE  # a 256-wide workgroup tree reduction in LDS with s_barrier between steps
  dev = _dev(arch)
  prog = AMDProgram(dev, compile_ir(LDS_REDUCE, arch), "reduce")
  assert prog.group_segment_size == 256 * 4
  x = np.random.default_rng(3).standard_normal((3, 256)).astype(np.float32)
  X, O = dev.allocator.alloc(x.nbytes), dev.allocator.alloc(3 * 4)
  dev.allocator.copyin(X, memoryview(x))
  prog(O, X, grid=(3, 1, 1), block=(256, 1, 1))
  want = x.copy()
  s = 128
  while s: want[:, :s] += want[:, s:2 * s]; s //= 2  # the kernel's summation order, in float32
  out = np.empty(3, np.float32)
  dev.allocator.copyout(memoryview(out), O)
  np.testing.assert_array_equal(out, want[:, 0])

def test_unknown_aql_packet_is_a_typed_error_naming_it():
  dev = _dev("gfx1100")
  bogus = bytes([7, 0]) + bytes(62)  # packet type 7 is not one the packet processor runs
  with pytest.raises(MockKFDError, match=r"AQL queue \d+ packet 0: header 0x0007 \(type 7\)"):
    AMDComputeQueue()._add(bogus).submit(dev)

def test_kernel_memory_fault_surfaces_from_the_dispatch():
  dev = _dev("gfx1100")
  prog = AMDProgram(dev, compile_ir(ADD, "gfx1100"), "add")
  A = dev.allocator.alloc(256)
  with pytest.raises(AMDEmuMemoryFault, match="outside every allocation"):
    prog(A, A, A, grid=(128, 1, 1), block=(64, 1, 1))  # 8192 work-items over a 4 KiB buffer

def test_kernarg_ring_wraps_after_waiting_for_queued_dispatches():
  mock = MockKFD()
  dev = _dev("gfx1100", mock)
  prog = AMDProgram(dev, compile_ir(ADD, "gfx1100"), "add")
  a = np.arange(64, dtype=np.float32)
  A, O = dev.allocator.alloc(256), dev.allocator.alloc(256)
  dev.allocator.copyin(A, memoryview(a))
  dev._kernarg_next = dev.kernarg_pool.size - 64  # the next segment (over 64 bytes) doesn't fit: the ring wraps
  prog(O, A, A, grid=(1, 1, 1), block=(64, 1, 1), wait=False)
  assert dev._kernarg_next == prog.layout.size + (-prog.layout.size % 64)  # restarted at the ring's start
  dev.synchronize(1.0)
  out = np.empty(64, np.float32)
  dev.allocator.copyout(memoryview(out), O)
  np.testing.assert_array_equal(out, a + a)

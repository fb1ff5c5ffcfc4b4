"""The packet formats the driver writes and the mock's executor parses: AQL (HSA) packets on the compute queue, SDMA on the copy queue.

AQL: HSA Platform System Architecture Specification 1.2, section 2.9 ("Architected Queuing Language"): 64-byte packets, the 16-bit
header (type bits 0-7, barrier bit 8, acquire/release fence scopes bits 9-12) stored last so the packet processor never sees a
half-written packet; `completion_signal` is decremented by one when the packet completes. The AMD vendor "barrier value" packet
(ROCr's hsa_ext_amd.h, hsa_amd_barrier_value_packet_t) waits until (signal & mask) <cond> value. The signal object is ROCr's
amd_signal_t (amd_hsa_signal.h): 64 bytes, int64 value at offset 8, event mailbox pointer at 16 and event id at 24.
SDMA (gfx9+ SDMA v4-v6 packet layouts, as in the amdgpu kernel driver's sdma_v*_0 ring code): COPY_LINEAR (op 1, sub-op 0, count =
bytes - 1) and ATOMIC (op 10) with ADD64 (= 47, in header bits 25-31); transcribed, no header on this machine to check against."""
from __future__ import annotations
import struct

# AQL
AQL_PACKET_SIZE = 64
HSA_PACKET_TYPE_VENDOR_SPECIFIC, HSA_PACKET_TYPE_INVALID, HSA_PACKET_TYPE_KERNEL_DISPATCH = 0, 1, 2
HSA_PACKET_HEADER_BARRIER, HSA_PACKET_HEADER_ACQUIRE_FENCE_SCOPE, HSA_PACKET_HEADER_RELEASE_FENCE_SCOPE = 8, 9, 11
HSA_FENCE_SCOPE_SYSTEM = 2
HSA_AMD_PACKET_TYPE_BARRIER_VALUE = 2
HSA_SIGNAL_CONDITION_EQ, HSA_SIGNAL_CONDITION_NE, HSA_SIGNAL_CONDITION_LT, HSA_SIGNAL_CONDITION_GTE = 0, 1, 2, 3
# hsa_kernel_dispatch_packet_t after the header: setup, workgroup_size_x/y/z, reserved0, grid_size_x/y/z, private_segment_size,
# group_segment_size, kernel_object, kernarg_address, reserved2, completion_signal
DISPATCH_BODY = struct.Struct("<HHHHHIIIIIQQQQ")
# hsa_amd_barrier_value_packet_t after the header: AmdFormat, reserved, reserved0, signal, value, mask, cond, reserved1..3, completion_signal
BARRIER_VALUE_BODY = struct.Struct("<BBIQqqIIQQQ")
AMD_SIGNAL = struct.Struct("<qqQIIQQQII")  # amd_signal_t: kind, value, event_mailbox_ptr, event_id, reserved1, start_ts, end_ts, queue_ptr, reserved3[2]
AMD_SIGNAL_KIND_USER = 1
AMD_SIGNAL_VALUE_OFFSET = 8

def aql_header(packet_type: int, barrier: bool = True) -> int:
  return (packet_type | int(barrier) << HSA_PACKET_HEADER_BARRIER | HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_ACQUIRE_FENCE_SCOPE |
          HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_RELEASE_FENCE_SCOPE)

def aql_dispatch(kernel_object: int, kernarg_address: int, grid: tuple[int, int, int], block: tuple[int, int, int], group_segment_size: int,
                 private_segment_size: int, completion_signal: int = 0) -> bytes:
  """A kernel dispatch packet; `grid` counts workgroups, the packet counts work-items."""
  dims = 3 if grid[2] * block[2] > 1 else 2 if grid[1] * block[1] > 1 else 1
  body = DISPATCH_BODY.pack(dims, *block, 0, *(g * b for g, b in zip(grid, block)), private_segment_size, group_segment_size, kernel_object,
                            kernarg_address, 0, completion_signal)
  return struct.pack("<H", aql_header(HSA_PACKET_TYPE_KERNEL_DISPATCH)) + body

def aql_barrier_value(signal: int, cond: int, value: int, mask: int = -1, completion_signal: int = 0) -> bytes:
  body = BARRIER_VALUE_BODY.pack(HSA_AMD_PACKET_TYPE_BARRIER_VALUE, 0, 0, signal, value, mask, cond, 0, 0, 0, completion_signal)
  return struct.pack("<H", aql_header(HSA_PACKET_TYPE_VENDOR_SPECIFIC)) + body

# SDMA
SDMA_OP_COPY, SDMA_SUBOP_COPY_LINEAR, SDMA_OP_ATOMIC = 1, 0, 10
SDMA_ATOMIC_ADD64 = 47
SDMA_COPY_MAX = 1 << 22  # COPY_LINEAR's count field holds bytes - 1 in 22 bits on SDMA v4 (gfx9); later engines allow more
COPY_LINEAR = struct.Struct("<IIIIIII")  # header, count, parameter, src lo, src hi, dst lo, dst hi
ATOMIC = struct.Struct("<IIIIIIII")  # header (op, loop bit 16, atomic op bits 25-31), addr lo/hi, src data lo/hi, cmp data lo/hi, loop interval

def sdma_copy_linear(dst: int, src: int, size: int) -> bytes:
  assert 0 < size <= SDMA_COPY_MAX
  return COPY_LINEAR.pack(SDMA_OP_COPY | SDMA_SUBOP_COPY_LINEAR << 8, size - 1, 0, src & 0xffffffff, src >> 32, dst & 0xffffffff, dst >> 32)

def sdma_atomic_add64(addr: int, value: int) -> bytes:
  v = value & (1 << 64) - 1
  return ATOMIC.pack(SDMA_OP_ATOMIC | SDMA_ATOMIC_ADD64 << 25, addr & 0xffffffff, addr >> 32, v & 0xffffffff, v >> 32, 0, 0, 0)

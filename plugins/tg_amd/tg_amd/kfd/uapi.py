"""ctypes mirrors of the `linux/kfd_ioctl.h` structures and ioctl numbers the driver uses (uapi 1.x).

Transcribed field by field from the header (Debian linux-libc-dev, /usr/include/linux/kfd_ioctl.h); `tests/test_kfd_uapi.py`
compiles a C program against that header and compares every size, offset and ioctl number below."""
from __future__ import annotations
import ctypes

u32, u64 = ctypes.c_uint32, ctypes.c_uint64

class _S(ctypes.Structure):
  _anonymous_: tuple[str, ...] = ()
  def __repr__(self) -> str: return f"{type(self).__name__}(" + ", ".join(f"{n}={getattr(self, n)}" for n, _ in self._fields_) + ")"

class kfd_ioctl_get_version_args(_S): _fields_ = [("major_version", u32), ("minor_version", u32)]
class kfd_ioctl_create_queue_args(_S):
  _fields_ = [("ring_base_address", u64), ("write_pointer_address", u64), ("read_pointer_address", u64), ("doorbell_offset", u64),
              ("ring_size", u32), ("gpu_id", u32), ("queue_type", u32), ("queue_percentage", u32), ("queue_priority", u32), ("queue_id", u32),
              ("eop_buffer_address", u64), ("eop_buffer_size", u64), ("ctx_save_restore_address", u64), ("ctx_save_restore_size", u32),
              ("ctl_stack_size", u32)]
class kfd_ioctl_destroy_queue_args(_S): _fields_ = [("queue_id", u32), ("pad", u32)]
class kfd_ioctl_create_event_args(_S):
  _fields_ = [("event_page_offset", u64), ("event_trigger_data", u32), ("event_type", u32), ("auto_reset", u32), ("node_id", u32),
              ("event_id", u32), ("event_slot_index", u32)]
class kfd_ioctl_destroy_event_args(_S): _fields_ = [("event_id", u32), ("pad", u32)]
class kfd_memory_exception_failure(_S): _fields_ = [("NotPresent", u32), ("ReadOnly", u32), ("NoExecute", u32), ("imprecise", u32)]
class kfd_hsa_memory_exception_data(_S): _fields_ = [("failure", kfd_memory_exception_failure), ("va", u64), ("gpu_id", u32), ("ErrorType", u32)]
class kfd_hsa_hw_exception_data(_S): _fields_ = [("reset_type", u32), ("reset_cause", u32), ("memory_lost", u32), ("gpu_id", u32)]
class _kfd_event_data_union(ctypes.Union):
  _fields_ = [("memory_exception_data", kfd_hsa_memory_exception_data), ("hw_exception_data", kfd_hsa_hw_exception_data)]
class kfd_event_data(_S): _anonymous_ = ("u",); _fields_ = [("u", _kfd_event_data_union), ("kfd_event_data_ext", u64), ("event_id", u32), ("pad", u32)]
class kfd_ioctl_wait_events_args(_S):
  _fields_ = [("events_ptr", u64), ("num_events", u32), ("wait_for_all", u32), ("timeout", u32), ("wait_result", u32)]
class kfd_ioctl_acquire_vm_args(_S): _fields_ = [("drm_fd", u32), ("gpu_id", u32)]
class kfd_ioctl_alloc_memory_of_gpu_args(_S):
  _fields_ = [("va_addr", u64), ("size", u64), ("handle", u64), ("mmap_offset", u64), ("gpu_id", u32), ("flags", u32)]
class kfd_ioctl_free_memory_of_gpu_args(_S): _fields_ = [("handle", u64)]
class kfd_ioctl_map_memory_to_gpu_args(_S): _fields_ = [("handle", u64), ("device_ids_array_ptr", u64), ("n_devices", u32), ("n_success", u32)]
class kfd_ioctl_unmap_memory_from_gpu_args(_S): _fields_ = [("handle", u64), ("device_ids_array_ptr", u64), ("n_devices", u32), ("n_success", u32)]

# <asm-generic/ioctl.h>: dir(2 bits) << 30 | size(14) << 16 | type(8) << 8 | nr(8); AMDKFD_IOCTL_BASE is 'K'
_IOC_WRITE, _IOC_READ = 1, 2
def _ioc(direction: int, nr: int, struct: type[ctypes.Structure]) -> int: return direction << 30 | ctypes.sizeof(struct) << 16 | ord("K") << 8 | nr

# name -> (ioctl request number, argument struct)
IOCTLS: dict[str, tuple[int, type[ctypes.Structure]]] = {name: (_ioc(d, nr, st), st) for name, d, nr, st in [
  ("AMDKFD_IOC_GET_VERSION", _IOC_READ, 0x01, kfd_ioctl_get_version_args),
  ("AMDKFD_IOC_CREATE_QUEUE", _IOC_READ | _IOC_WRITE, 0x02, kfd_ioctl_create_queue_args),
  ("AMDKFD_IOC_DESTROY_QUEUE", _IOC_READ | _IOC_WRITE, 0x03, kfd_ioctl_destroy_queue_args),
  ("AMDKFD_IOC_CREATE_EVENT", _IOC_READ | _IOC_WRITE, 0x08, kfd_ioctl_create_event_args),
  ("AMDKFD_IOC_DESTROY_EVENT", _IOC_WRITE, 0x09, kfd_ioctl_destroy_event_args),
  ("AMDKFD_IOC_WAIT_EVENTS", _IOC_READ | _IOC_WRITE, 0x0C, kfd_ioctl_wait_events_args),
  ("AMDKFD_IOC_ACQUIRE_VM", _IOC_WRITE, 0x15, kfd_ioctl_acquire_vm_args),
  ("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", _IOC_READ | _IOC_WRITE, 0x16, kfd_ioctl_alloc_memory_of_gpu_args),
  ("AMDKFD_IOC_FREE_MEMORY_OF_GPU", _IOC_WRITE, 0x17, kfd_ioctl_free_memory_of_gpu_args),
  ("AMDKFD_IOC_MAP_MEMORY_TO_GPU", _IOC_READ | _IOC_WRITE, 0x18, kfd_ioctl_map_memory_to_gpu_args),
  ("AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU", _IOC_READ | _IOC_WRITE, 0x19, kfd_ioctl_unmap_memory_from_gpu_args)]}
IOCTL_NAMES = {req: name for name, (req, _) in IOCTLS.items()}
STRUCTS = [kfd_ioctl_get_version_args, kfd_ioctl_create_queue_args, kfd_ioctl_destroy_queue_args, kfd_ioctl_create_event_args,
           kfd_ioctl_destroy_event_args, kfd_memory_exception_failure, kfd_hsa_memory_exception_data, kfd_hsa_hw_exception_data, kfd_event_data,
           kfd_ioctl_wait_events_args, kfd_ioctl_acquire_vm_args, kfd_ioctl_alloc_memory_of_gpu_args, kfd_ioctl_free_memory_of_gpu_args,
           kfd_ioctl_map_memory_to_gpu_args, kfd_ioctl_unmap_memory_from_gpu_args]

KFD_IOCTL_MAJOR_VERSION = 1
KFD_IOC_QUEUE_TYPE_COMPUTE, KFD_IOC_QUEUE_TYPE_SDMA, KFD_IOC_QUEUE_TYPE_COMPUTE_AQL = 0x0, 0x1, 0x2
KFD_MAX_QUEUE_PERCENTAGE, KFD_MAX_QUEUE_PRIORITY = 100, 15
KFD_IOC_EVENT_SIGNAL = 0
KFD_IOC_WAIT_RESULT_COMPLETE, KFD_IOC_WAIT_RESULT_TIMEOUT, KFD_IOC_WAIT_RESULT_FAIL = 0, 1, 2
KFD_IOC_ALLOC_MEM_FLAGS_VRAM, KFD_IOC_ALLOC_MEM_FLAGS_GTT = 1 << 0, 1 << 1
KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE, KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE, KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC = 1 << 31, 1 << 30, 1 << 29
KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE, KFD_IOC_ALLOC_MEM_FLAGS_COHERENT, KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED = 1 << 28, 1 << 26, 1 << 25
KFD_SIGNAL_EVENT_LIMIT = 4096

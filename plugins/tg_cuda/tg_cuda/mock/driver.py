"""A mock of the CUDA driver API (`libcuda.so`) that runs kernels with the PTX interpreter.

`MockCUDA()` has a method for each driver function a runtime calls, with libcuda's name, argument order and CUresult
return codes. Arguments are what ctypes code passes to the real library: Python ints, ctypes scalars, `ctypes.byref(x)`
/ `ctypes.pointer(x)` for out-parameters, ctypes arrays or addresses for host memory. So a runtime written against
`ctypes.CDLL("libcuda.so")` runs unchanged on `MockCUDA()` (the seam: `tg_cuda.mock.driver.load_driver`).

Everything runs synchronously on the host: streams are ordered trivially, events record the host clock. Faults the
hardware would report asynchronously (illegal address) and constructs the interpreter does not implement raise the
interpreter's exceptions (`PTXRuntimeError`, `PTXUnsupportedError`) at the call, with a message naming the instruction:
a CUresult code would lose it."""
from __future__ import annotations

import ctypes
import itertools
import time
from dataclasses import dataclass, field

import numpy as np
from tg_core.device import DeviceUnavailableError

from tg_cuda.mock.memory import GLOBAL_BASE, DeviceMemory
from tg_cuda.mock.ptx_interp import CompiledKernel, load_module
from tg_cuda.mock.ptx_parser import parse_ptx

# CUresult codes (cuda.h)
CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_INVALID_DEVICE = 101
CUDA_ERROR_INVALID_IMAGE = 200
CUDA_ERROR_INVALID_CONTEXT = 201
CUDA_ERROR_NO_BINARY_FOR_GPU = 209
CUDA_ERROR_INVALID_PTX = 218
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701
ERROR_NAMES = {v: k for k, v in globals().items() if k.startswith("CUDA_")}

# CUdevice_attribute values this mock answers (cuda.h)
CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1
CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z = 2, 3, 4
CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 5, 6, 7
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8
CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10
CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK = 12
CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0
CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
CU_FUNC_ATTRIBUTE_NUM_REGS = 4
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
# cuLaunchKernel `extra`
CU_LAUNCH_PARAM_END, CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE = 0, 1, 2

_CArg = type(ctypes.byref(ctypes.c_int()))


def _int(x) -> int:
  """An integer argument (handle, size, device pointer) given as int or ctypes scalar."""
  if isinstance(x, int): return x
  if isinstance(x, ctypes._SimpleCData): return int(x.value or 0)
  return int(ctypes.cast(x, ctypes.c_void_p).value or 0)


def _ptr(x) -> int:
  """A host address given as int, ctypes object, byref(), pointer, array or bytes."""
  if x is None: return 0
  if isinstance(x, int): return x
  return int(ctypes.cast(x, ctypes.c_void_p).value or 0)


def _out(arg, value) -> None:
  """Stores value into an out-parameter passed as byref(x), pointer(x) or a raw address of a 64-bit slot."""
  if isinstance(arg, _CArg): arg._obj.value = value
  elif isinstance(arg, ctypes._Pointer): arg.contents.value = value
  elif isinstance(arg, int): ctypes.c_uint64.from_address(arg).value = value
  else: raise TypeError(f"out-parameter of type {type(arg).__name__}: pass ctypes.byref(x)")


@dataclass
class _Context:
  device: int


@dataclass
class _Module:
  kernels: dict[str, CompiledKernel]
  globals: dict[str, int]


@dataclass
class _Function:
  kernel: CompiledKernel
  max_dynamic_shared: int = 48 * 1024


@dataclass
class _Event:
  t: float | None = None


@dataclass
class MockCUDA:
  """One mock GPU (compute capability `arch`, default sm_90 like an H200) with `memory_limit` bytes of device memory."""
  arch: tuple[int, int] = (9, 0)
  memory_limit: int = 1 << 34
  name: str = "tg MOCK+CUDA (PTX interpreter)"
  mem: DeviceMemory = field(init=False)
  handles: dict[int, object] = field(init=False, default_factory=dict)
  host_allocs: dict[int, ctypes.Array] = field(init=False, default_factory=dict)
  initialized: bool = field(init=False, default=False)
  current: int = field(init=False, default=0)
  primary: int = field(init=False, default=0)
  launches: int = field(init=False, default=0)

  def __post_init__(self) -> None:
    self.mem = DeviceMemory(limit=self.memory_limit)
    self._ids = itertools.count(1)

  def _new(self, obj: object) -> int:
    h = next(self._ids) * 16
    self.handles[h] = obj
    return h

  def _get(self, h, kind: type):
    obj = self.handles.get(_int(h))
    return obj if isinstance(obj, kind) else None

  # -------- init / device / context
  def cuInit(self, flags) -> int:
    self.initialized = True
    return CUDA_SUCCESS

  def cuDriverGetVersion(self, version) -> int:
    _out(version, 12080); return CUDA_SUCCESS

  def cuDeviceGetCount(self, count) -> int:
    if not self.initialized: return CUDA_ERROR_NOT_INITIALIZED
    _out(count, 1); return CUDA_SUCCESS

  def cuDeviceGet(self, device, ordinal) -> int:
    if not self.initialized: return CUDA_ERROR_NOT_INITIALIZED
    if _int(ordinal) != 0: return CUDA_ERROR_INVALID_DEVICE
    _out(device, 0); return CUDA_SUCCESS

  def cuDeviceGetName(self, name, length, device) -> int:
    if _int(device) != 0: return CUDA_ERROR_INVALID_DEVICE
    raw = self.name.encode()[:_int(length) - 1] + b"\0"
    ctypes.memmove(_ptr(name), raw, len(raw)); return CUDA_SUCCESS

  def cuDeviceComputeCapability(self, major, minor, device) -> int:
    if _int(device) != 0: return CUDA_ERROR_INVALID_DEVICE
    _out(major, self.arch[0]); _out(minor, self.arch[1]); return CUDA_SUCCESS

  def cuDeviceTotalMem_v2(self, nbytes, device) -> int:
    if _int(device) != 0: return CUDA_ERROR_INVALID_DEVICE
    _out(nbytes, self.memory_limit); return CUDA_SUCCESS

  def cuDeviceGetAttribute(self, value, attrib, device) -> int:
    if _int(device) != 0: return CUDA_ERROR_INVALID_DEVICE
    table = {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: 1024, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: 1024, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: 1024,
             CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: 64, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: 2**31 - 1, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: 65535,
             CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: 65535, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: 48 * 1024, CU_DEVICE_ATTRIBUTE_WARP_SIZE: 32,
             CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: 65536, CU_DEVICE_ATTRIBUTE_CLOCK_RATE: 1_000_000, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: 1,
             CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: self.arch[0], CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: self.arch[1],
             CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 227 * 1024}
    v = table.get(_int(attrib))
    if v is None: return CUDA_ERROR_INVALID_VALUE
    _out(value, v); return CUDA_SUCCESS

  def cuCtxCreate_v2(self, ctx, flags, device) -> int:
    if not self.initialized: return CUDA_ERROR_NOT_INITIALIZED
    if _int(device) != 0: return CUDA_ERROR_INVALID_DEVICE
    h = self._new(_Context(0))
    self.current = h
    _out(ctx, h); return CUDA_SUCCESS

  def cuCtxCreate_v4(self, ctx, params, flags, device) -> int:   # CUDA 13's cuCtxCreate (CUctxCreateParams are ignored)
    return self.cuCtxCreate_v2(ctx, flags, device)

  def cuDevicePrimaryCtxRetain(self, ctx, device) -> int:
    if not self.initialized: return CUDA_ERROR_NOT_INITIALIZED
    if _int(device) != 0: return CUDA_ERROR_INVALID_DEVICE
    if not self.primary: self.primary = self._new(_Context(0))
    _out(ctx, self.primary); return CUDA_SUCCESS

  def cuDevicePrimaryCtxRelease_v2(self, device) -> int:
    return CUDA_SUCCESS if _int(device) == 0 else CUDA_ERROR_INVALID_DEVICE

  def cuCtxDestroy_v2(self, ctx) -> int:
    if self._get(ctx, _Context) is None: return CUDA_ERROR_INVALID_CONTEXT
    del self.handles[_int(ctx)]
    if self.current == _int(ctx): self.current = 0
    return CUDA_SUCCESS

  def cuCtxSetCurrent(self, ctx) -> int:
    if _int(ctx) and self._get(ctx, _Context) is None: return CUDA_ERROR_INVALID_CONTEXT
    self.current = _int(ctx); return CUDA_SUCCESS

  def cuCtxGetCurrent(self, ctx) -> int:
    _out(ctx, self.current); return CUDA_SUCCESS

  def cuCtxSynchronize(self) -> int:
    return CUDA_SUCCESS if self.current else CUDA_ERROR_INVALID_CONTEXT

  # -------- memory
  def cuMemAlloc_v2(self, dptr, nbytes) -> int:
    if not self.current: return CUDA_ERROR_INVALID_CONTEXT
    if _int(nbytes) == 0: return CUDA_ERROR_INVALID_VALUE
    try: _out(dptr, self.mem.alloc(_int(nbytes)))
    except MemoryError: return CUDA_ERROR_OUT_OF_MEMORY
    return CUDA_SUCCESS

  def cuMemFree_v2(self, dptr) -> int:
    try: self.mem.release(_int(dptr))
    except ValueError: return CUDA_ERROR_INVALID_VALUE
    return CUDA_SUCCESS

  def cuMemHostAlloc(self, pp, nbytes, flags) -> int:
    buf = (ctypes.c_char * max(1, _int(nbytes)))()
    self.host_allocs[ctypes.addressof(buf)] = buf
    _out(pp, ctypes.addressof(buf)); return CUDA_SUCCESS

  def cuMemFreeHost(self, p) -> int:
    return CUDA_SUCCESS if self.host_allocs.pop(_ptr(p), None) is not None else CUDA_ERROR_INVALID_VALUE

  def _dev_addr(self, dptr, n: int) -> int | None:
    try: off = self.mem.offset(_int(dptr), n)
    except Exception: return None
    return self.mem.buf.ctypes.data + off

  def cuMemcpyHtoD_v2(self, dst, src, nbytes) -> int:
    n = _int(nbytes)
    d = self._dev_addr(dst, n)
    if d is None or not _ptr(src): return CUDA_ERROR_INVALID_VALUE
    ctypes.memmove(d, _ptr(src), n); return CUDA_SUCCESS

  def cuMemcpyDtoH_v2(self, dst, src, nbytes) -> int:
    n = _int(nbytes)
    s = self._dev_addr(src, n)
    if s is None or not _ptr(dst): return CUDA_ERROR_INVALID_VALUE
    ctypes.memmove(_ptr(dst), s, n); return CUDA_SUCCESS

  def cuMemcpyDtoD_v2(self, dst, src, nbytes) -> int:
    n = _int(nbytes)
    d, s = self._dev_addr(dst, n), self._dev_addr(src, n)
    if d is None or s is None: return CUDA_ERROR_INVALID_VALUE
    ctypes.memmove(d, s, n); return CUDA_SUCCESS

  def cuMemcpyHtoDAsync_v2(self, dst, src, nbytes, stream) -> int: return self.cuMemcpyHtoD_v2(dst, src, nbytes)
  def cuMemcpyDtoHAsync_v2(self, dst, src, nbytes, stream) -> int: return self.cuMemcpyDtoH_v2(dst, src, nbytes)
  def cuMemcpyDtoDAsync_v2(self, dst, src, nbytes, stream) -> int: return self.cuMemcpyDtoD_v2(dst, src, nbytes)

  def cuMemsetD8_v2(self, dptr, value, count) -> int:
    n = _int(count)
    d = self._dev_addr(dptr, n)
    if d is None: return CUDA_ERROR_INVALID_VALUE
    ctypes.memset(d, _int(value) & 0xFF, n); return CUDA_SUCCESS

  def cuMemsetD32_v2(self, dptr, value, count) -> int:
    n = _int(count)
    if self._dev_addr(dptr, 4 * n) is None: return CUDA_ERROR_INVALID_VALUE
    off = _int(dptr) - GLOBAL_BASE
    self.mem.buf[off:off + 4 * n].view(np.uint32)[:] = _int(value) & 0xFFFFFFFF
    return CUDA_SUCCESS

  # -------- modules and launches
  def cuModuleLoadData(self, module, image) -> int:
    if not self.current: return CUDA_ERROR_INVALID_CONTEXT
    text = ctypes.string_at(_ptr(image)).decode()
    if ".entry" not in text and ".version" not in text: return CUDA_ERROR_INVALID_IMAGE   # a cubin or garbage: only PTX is interpreted
    mod = parse_ptx(text)
    if mod.target.startswith("sm_"):
      want = int("".join(ch for ch in mod.target[3:] if ch.isdigit()))
      if want > self.arch[0] * 10 + self.arch[1]: return CUDA_ERROR_NO_BINARY_FOR_GPU
    kernels, gaddrs = load_module(mod, self.mem)
    _out(module, self._new(_Module(kernels, gaddrs))); return CUDA_SUCCESS

  def cuModuleLoadDataEx(self, module, image, num_options, options, option_values) -> int:
    return self.cuModuleLoadData(module, image)

  def cuModuleUnload(self, module) -> int:
    if self._get(module, _Module) is None: return CUDA_ERROR_INVALID_HANDLE
    del self.handles[_int(module)]; return CUDA_SUCCESS

  def cuModuleGetFunction(self, func, module, name) -> int:
    m = self._get(module, _Module)
    if m is None: return CUDA_ERROR_INVALID_HANDLE
    k = m.kernels.get(name.decode() if isinstance(name, bytes) else ctypes.string_at(_ptr(name)).decode() if not isinstance(name, str) else name)
    if k is None: return CUDA_ERROR_NOT_FOUND
    _out(func, self._new(_Function(k))); return CUDA_SUCCESS

  def cuModuleGetGlobal_v2(self, dptr, nbytes, module, name) -> int:
    m = self._get(module, _Module)
    if m is None: return CUDA_ERROR_INVALID_HANDLE
    key = name.decode() if isinstance(name, bytes) else name
    if key not in m.globals: return CUDA_ERROR_NOT_FOUND
    if dptr is not None: _out(dptr, m.globals[key])
    if nbytes is not None: _out(nbytes, self.mem.requested[m.globals[key] - GLOBAL_BASE])
    return CUDA_SUCCESS

  def cuFuncGetAttribute(self, value, attrib, func) -> int:
    f = self._get(func, _Function)
    if f is None: return CUDA_ERROR_INVALID_HANDLE
    table = {CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: 1024, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: f.kernel.kernel.shared_size,
             CU_FUNC_ATTRIBUTE_NUM_REGS: min(255, len(f.kernel.kernel.reg_types)), CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: f.max_dynamic_shared}
    v = table.get(_int(attrib))
    if v is None: return CUDA_ERROR_INVALID_VALUE
    _out(value, v); return CUDA_SUCCESS

  def cuFuncSetAttribute(self, func, attrib, value) -> int:
    f = self._get(func, _Function)
    if f is None: return CUDA_ERROR_INVALID_HANDLE
    if _int(attrib) != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: return CUDA_ERROR_INVALID_VALUE
    f.max_dynamic_shared = _int(value); return CUDA_SUCCESS

  def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, shared_bytes, stream, kernel_params, extra) -> int:
    f = self._get(func, _Function)
    if f is None: return CUDA_ERROR_INVALID_HANDLE
    grid, block = (_int(gx), _int(gy), _int(gz)), (_int(bx), _int(by), _int(bz))
    if min(grid + block) < 1: return CUDA_ERROR_INVALID_VALUE
    if block[0] * block[1] * block[2] > 1024: return CUDA_ERROR_INVALID_VALUE
    dyn = _int(shared_bytes)
    if dyn > f.max_dynamic_shared or f.kernel.kernel.shared_size + dyn > 227 * 1024: return CUDA_ERROR_INVALID_VALUE
    params = self._params(f.kernel, kernel_params, extra)
    if params is None: return CUDA_ERROR_INVALID_VALUE
    f.kernel.launch(grid, block, params, self.mem, dyn)
    self.launches += 1
    return CUDA_SUCCESS

  def _params(self, ck: CompiledKernel, kernel_params, extra) -> bytes | None:
    k = ck.kernel
    if _ptr(kernel_params):
      arr = ctypes.cast(kernel_params, ctypes.POINTER(ctypes.c_void_p))
      buf = bytearray(k.param_size)
      for i, p in enumerate(k.params):
        if not arr[i]: return None
        buf[p.offset:p.offset + p.size] = ctypes.string_at(arr[i], p.size)
      return bytes(buf)
    if _ptr(extra):
      arr = ctypes.cast(extra, ctypes.POINTER(ctypes.c_void_p))
      ptr = size = None
      i = 0
      while (arr[i] or 0) != CU_LAUNCH_PARAM_END:
        if arr[i] == CU_LAUNCH_PARAM_BUFFER_POINTER: ptr = arr[i + 1]
        elif arr[i] == CU_LAUNCH_PARAM_BUFFER_SIZE: size = ctypes.c_size_t.from_address(arr[i + 1]).value
        else: return None
        i += 2
      if ptr is None or size is None or size < k.param_size: return None
      return ctypes.string_at(ptr, size)
    return b"" if not k.params else None

  # -------- streams and events (everything is synchronous)
  def cuStreamCreate(self, stream, flags) -> int:
    _out(stream, self._new("stream")); return CUDA_SUCCESS

  def cuStreamDestroy_v2(self, stream) -> int:
    return CUDA_SUCCESS if self.handles.pop(_int(stream), None) == "stream" else CUDA_ERROR_INVALID_HANDLE

  def cuStreamSynchronize(self, stream) -> int:
    return CUDA_SUCCESS if not _int(stream) or self.handles.get(_int(stream)) == "stream" else CUDA_ERROR_INVALID_HANDLE

  def cuEventCreate(self, event, flags) -> int:
    _out(event, self._new(_Event())); return CUDA_SUCCESS

  def cuEventDestroy_v2(self, event) -> int:
    if self._get(event, _Event) is None: return CUDA_ERROR_INVALID_HANDLE
    del self.handles[_int(event)]; return CUDA_SUCCESS

  def cuEventRecord(self, event, stream) -> int:
    e = self._get(event, _Event)
    if e is None: return CUDA_ERROR_INVALID_HANDLE
    e.t = time.perf_counter(); return CUDA_SUCCESS

  def cuEventSynchronize(self, event) -> int:
    return CUDA_SUCCESS if self._get(event, _Event) is not None else CUDA_ERROR_INVALID_HANDLE

  def cuEventElapsedTime(self, ms, start, end) -> int:
    s, e = self._get(start, _Event), self._get(end, _Event)
    if s is None or e is None or s.t is None or e.t is None: return CUDA_ERROR_INVALID_HANDLE
    _out(ms, (e.t - s.t) * 1000.0); return CUDA_SUCCESS

  # -------- errors
  def cuGetErrorName(self, error, pstr) -> int:
    name = ERROR_NAMES.get(_int(error))
    if name is None: return CUDA_ERROR_INVALID_VALUE
    self._keep = ctypes.c_char_p(name.encode())
    _out(pstr, ctypes.cast(self._keep, ctypes.c_void_p).value); return CUDA_SUCCESS

  def cuGetErrorString(self, error, pstr) -> int: return self.cuGetErrorName(error, pstr)


def load_driver(interface: str) -> object:
  """The seam the runtime uses: `"MOCK"` -> a MockCUDA, `""` -> libcuda through ctypes. Both expose the same driver
  functions; the runtime calls them by name and checks CUresult codes the same way."""
  if interface == "MOCK": return MockCUDA()
  if interface: raise ValueError(f"unknown CUDA driver interface {interface!r} (expected 'MOCK' or '')")
  try: return ctypes.CDLL("libcuda.so.1")
  except OSError as e:
    raise DeviceUnavailableError(f"CUDA: libcuda.so.1 (the NVIDIA driver) cannot be loaded ({e}); DEV=MOCK+CUDA runs on the PTX interpreter") from e

"""The CUDA driver-API mock: ctypes calling conventions, CUresult codes, parameter passing (kernelParams and `extra`),
events and streams, as a runtime written against libcuda uses them."""
import ctypes

import numpy as np
import pytest
from cuda_testutil import PTXAS, MockGPU, ptxas_check
from tg_core.device import DeviceUnavailableError

from tg_cuda.mock import driver as d
from tg_cuda.mock.driver import MockCUDA, load_driver

# out[i] = a[i] * s + i (a struct-free kernel taking a pointer pair and two scalars of different sizes)
AXPY = """.version 8.0
.target sm_80
.address_size 64
.visible .entry axpy(.param .u64 pa, .param .u64 pout, .param .f32 s, .param .u64 n)
{
  .reg .pred %p<2>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<12>;
  .reg .f32 %f<6>;
  ld.param.u64 %rd1, [pa];
  ld.param.u64 %rd2, [pout];
  ld.param.f32 %f1, [s];
  ld.param.u64 %rd3, [n];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mad.lo.s32 %r4, %r1, %r2, %r3;
  cvt.u64.u32 %rd4, %r4;
  setp.ge.u64 %p1, %rd4, %rd3;
  @%p1 bra DONE;
  shl.b64 %rd5, %rd4, 2;
  add.s64 %rd6, %rd1, %rd5;
  ld.global.f32 %f2, [%rd6];
  cvt.rn.f32.u32 %f3, %r4;
  fma.rn.f32 %f4, %f2, %f1, %f3;
  add.s64 %rd7, %rd2, %rd5;
  st.global.f32 [%rd7], %f4;
DONE:
  ret;
}
"""


@pytest.mark.skipif(PTXAS is None, reason="ptxas (CUDA toolkit or pip's nvidia-cuda-nvcc) is not installed")
def test_axpy_ptx_is_valid():
  ptxas_check(AXPY, "sm_90")


def _setup():
  g = MockGPU()
  n = 300
  a = np.arange(n, dtype=np.float32) * 0.5
  return g, n, a, g.upload(a), g.empty(n * 4), g.function(AXPY, "axpy")


def test_launch_with_kernel_params():
  g, n, a, pa, po, fn = _setup()
  args = [ctypes.c_uint64(pa), ctypes.c_uint64(po), ctypes.c_float(3.0), ctypes.c_uint64(n)]
  kp = (ctypes.c_void_p * 4)(*[ctypes.addressof(x) for x in args])
  assert g.cu.cuLaunchKernel(fn, 3, 1, 1, 128, 1, 1, 0, None, kp, None) == d.CUDA_SUCCESS
  np.testing.assert_array_equal(g.download(po, (n,), np.float32), a * np.float32(3) + np.arange(n, dtype=np.float32))


def test_launch_with_extra_buffer():
  # tinygrad-style: one packed argument struct through CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE
  g, n, a, pa, po, fn = _setup()

  class Args(ctypes.Structure):
    _fields_ = [("a", ctypes.c_uint64), ("out", ctypes.c_uint64), ("s", ctypes.c_float), ("n", ctypes.c_uint64)]
  args = Args(pa, po, -1.5, n)
  size = ctypes.c_size_t(ctypes.sizeof(args))
  extra = (ctypes.c_void_p * 5)(d.CU_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(args), d.CU_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(size),
                                d.CU_LAUNCH_PARAM_END)
  assert g.cu.cuLaunchKernel(fn, 3, 1, 1, 128, 1, 1, 0, None, None, extra) == d.CUDA_SUCCESS
  np.testing.assert_array_equal(g.download(po, (n,), np.float32), a * np.float32(-1.5) + np.arange(n, dtype=np.float32))


def test_device_queries():
  cu = MockCUDA(arch=(8, 0))
  v = ctypes.c_int()
  assert cu.cuDeviceGetCount(ctypes.byref(v)) == d.CUDA_ERROR_NOT_INITIALIZED
  assert cu.cuInit(0) == d.CUDA_SUCCESS
  assert cu.cuDeviceGetCount(ctypes.byref(v)) == d.CUDA_SUCCESS and v.value == 1
  assert cu.cuDeviceGet(ctypes.byref(v), 1) == d.CUDA_ERROR_INVALID_DEVICE
  major, minor = ctypes.c_int(), ctypes.c_int()
  assert cu.cuDeviceComputeCapability(ctypes.byref(major), ctypes.byref(minor), 0) == 0 and (major.value, minor.value) == (8, 0)
  assert cu.cuDeviceGetAttribute(ctypes.byref(v), d.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0) == 0 and v.value == 8
  assert cu.cuDeviceGetAttribute(ctypes.byref(v), d.CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0) == 0 and v.value == 32
  assert cu.cuDeviceGetAttribute(ctypes.byref(v), 123456, 0) == d.CUDA_ERROR_INVALID_VALUE
  name = ctypes.create_string_buffer(64)
  assert cu.cuDeviceGetName(name, 64, 0) == 0 and b"MOCK" in name.value
  ctx, ctx2 = ctypes.c_void_p(), ctypes.c_void_p()
  assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx2), 0) == 0
  assert ctx.value == ctx2.value and cu.cuCtxSetCurrent(ctx) == 0 and cu.cuCtxSynchronize() == 0
  assert cu.cuCtxCreate_v4(ctypes.byref(ctx2), None, 0, 0) == 0 and ctx2.value != ctx.value
  s = ctypes.c_char_p()
  assert cu.cuGetErrorName(d.CUDA_ERROR_INVALID_PTX, ctypes.byref(s)) == 0 and s.value == b"CUDA_ERROR_INVALID_PTX"


def test_error_codes():
  g, n, a, pa, po, fn = _setup()
  cu = g.cu
  mod, f = ctypes.c_void_p(), ctypes.c_void_p()
  assert cu.cuModuleLoadData(ctypes.byref(mod), ctypes.create_string_buffer(AXPY.encode())) == 0
  assert cu.cuModuleGetFunction(ctypes.byref(f), mod, b"nope") == d.CUDA_ERROR_NOT_FOUND
  assert cu.cuModuleGetFunction(ctypes.byref(f), 12345, b"axpy") == d.CUDA_ERROR_INVALID_HANDLE
  assert cu.cuModuleLoadData(ctypes.byref(mod), ctypes.create_string_buffer(b"\x7fELF not ptx")) == d.CUDA_ERROR_INVALID_IMAGE
  assert cu.cuModuleLoadData(ctypes.byref(mod), ctypes.create_string_buffer(AXPY.replace("sm_80", "sm_100").encode())) == d.CUDA_ERROR_NO_BINARY_FOR_GPU
  host = np.zeros(4, np.float32)
  assert cu.cuMemcpyDtoH_v2(host.ctypes.data, po, n * 4 + 4096) == d.CUDA_ERROR_INVALID_VALUE   # past the allocation
  assert cu.cuMemcpyHtoD_v2(0x1234, host.ctypes.data, 16) == d.CUDA_ERROR_INVALID_VALUE
  assert cu.cuMemFree_v2(po + 4) == d.CUDA_ERROR_INVALID_VALUE
  assert cu.cuLaunchKernel(fn, 1, 1, 1, 2048, 1, 1, 0, None, None, None) == d.CUDA_ERROR_INVALID_VALUE
  assert cu.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, None, None, None) == d.CUDA_ERROR_INVALID_VALUE   # no parameters given
  assert cu.cuLaunchKernel(999, 1, 1, 1, 32, 1, 1, 0, None, None, None) == d.CUDA_ERROR_INVALID_HANDLE
  p = ctypes.c_uint64()
  assert cu.cuMemAlloc_v2(ctypes.byref(p), 1 << 40) == d.CUDA_ERROR_OUT_OF_MEMORY
  assert cu.cuMemFree_v2(po) == 0 and cu.cuMemFree_v2(po) == d.CUDA_ERROR_INVALID_VALUE


def test_memory_copies_events_streams():
  g = MockGPU()
  cu = g.cu
  a = np.arange(1000, dtype=np.uint8)
  p1, p2 = g.upload(a), g.empty(1000)
  assert cu.cuMemcpyDtoD_v2(p2, p1, 1000) == 0
  np.testing.assert_array_equal(g.download(p2, (1000,), np.uint8), a)
  assert cu.cuMemsetD32_v2(p2, 0xDEADBEEF, 100) == 0
  np.testing.assert_array_equal(g.download(p2, (100,), np.uint32), np.full(100, 0xDEADBEEF, np.uint32))
  pinned = ctypes.c_void_p()
  assert cu.cuMemHostAlloc(ctypes.byref(pinned), 1000, 0) == 0
  stream, e0, e1 = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
  assert cu.cuStreamCreate(ctypes.byref(stream), 0) == 0
  assert cu.cuMemcpyDtoHAsync_v2(pinned, p1, 1000, stream) == 0 and cu.cuStreamSynchronize(stream) == 0
  np.testing.assert_array_equal(np.frombuffer((ctypes.c_uint8 * 1000).from_address(pinned.value), np.uint8), a)
  assert cu.cuMemFreeHost(pinned) == 0
  assert cu.cuEventCreate(ctypes.byref(e0), 0) == 0 and cu.cuEventCreate(ctypes.byref(e1), 0) == 0
  ms = ctypes.c_float()
  assert cu.cuEventElapsedTime(ctypes.byref(ms), e0, e1) == d.CUDA_ERROR_INVALID_HANDLE   # not recorded yet
  assert cu.cuEventRecord(e0, stream) == 0 and cu.cuEventRecord(e1, stream) == 0 and cu.cuEventSynchronize(e1) == 0
  assert cu.cuEventElapsedTime(ctypes.byref(ms), e0, e1) == 0 and ms.value >= 0
  assert cu.cuStreamDestroy_v2(stream) == 0 and cu.cuStreamSynchronize(stream) == d.CUDA_ERROR_INVALID_HANDLE


def test_load_driver_seam():
  assert isinstance(load_driver("MOCK"), MockCUDA)
  with pytest.raises(ValueError, match="unknown CUDA driver interface 'KFD'"):
    load_driver("KFD")
  try: lib = load_driver("")
  except DeviceUnavailableError as e: assert "libcuda.so.1" in str(e)
  else: assert hasattr(lib, "cuInit")   # a machine with the NVIDIA driver

"""Speed of tg_cuda's PTX interpreter: thread-instructions per second on one loop kernel (a tinygrad-style matvec with
float4 loads and fma), and the ratio to numpy computing the same result in the same run. Prints the CPU model."""
from _timing import cpu_model
import ctypes
import time

import numpy as np

from tg_cuda.mock.driver import MockCUDA

# out[row] = sum_k a[row, k] * x[k]; one thread per row, the k loop unrolled by 4 with ld.global.nc.v4.f32 and fma.rn
PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry matvec(.param .u64 pa, .param .u64 px, .param .u64 pout, .param .u32 K)
{
  .reg .pred %p<2>;
  .reg .b32 %r<16>;
  .reg .b64 %rd<16>;
  .reg .f32 %f<16>;
  ld.param.u64 %rd1, [pa];
  ld.param.u64 %rd2, [px];
  ld.param.u64 %rd3, [pout];
  ld.param.u32 %r1, [K];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  cvta.to.global.u64 %rd3, %rd3;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  mul.lo.s32 %r6, %r5, %r1;
  mul.wide.s32 %rd4, %r6, 4;
  add.s64 %rd5, %rd1, %rd4;
  mov.u64 %rd6, %rd2;
  mov.f32 %f1, 0f00000000;
  mov.u32 %r7, 0;
LOOP:
  ld.global.nc.v4.f32 {%f2, %f3, %f4, %f5}, [%rd5];
  ld.global.nc.v4.f32 {%f6, %f7, %f8, %f9}, [%rd6];
  fma.rn.f32 %f1, %f2, %f6, %f1;
  fma.rn.f32 %f1, %f3, %f7, %f1;
  fma.rn.f32 %f1, %f4, %f8, %f1;
  fma.rn.f32 %f1, %f5, %f9, %f1;
  add.s64 %rd5, %rd5, 16;
  add.s64 %rd6, %rd6, 16;
  add.s32 %r7, %r7, 4;
  setp.lt.s32 %p1, %r7, %r1;
  @%p1 bra LOOP;
  mul.wide.s32 %rd7, %r5, 4;
  add.s64 %rd8, %rd3, %rd7;
  st.global.f32 [%rd8], %f1;
  ret;
}
"""




def main() -> None:
  rows, K, block = 8192, 256, 256
  rng = np.random.default_rng(0)
  a, x = rng.standard_normal((rows, K)).astype(np.float32), rng.standard_normal(K).astype(np.float32)
  cu = MockCUDA()
  assert cu.cuInit(0) == 0
  ctx, mod, fn = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
  assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0) == 0
  bufs = []
  for arr in (a, x, np.zeros(rows, np.float32)):
    p = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ctypes.byref(p), arr.nbytes) == 0 and cu.cuMemcpyHtoD_v2(p, arr.ctypes.data, arr.nbytes) == 0
    bufs.append(p)
  t0 = time.perf_counter()
  assert cu.cuModuleLoadData(ctypes.byref(mod), ctypes.create_string_buffer(PTX.encode())) == 0
  assert cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"matvec") == 0
  load_s = time.perf_counter() - t0
  kargs = [*bufs, ctypes.c_uint32(K)]
  params = (ctypes.c_void_p * 4)(*[ctypes.addressof(v) for v in kargs])
  best = float("inf")
  for _ in range(3):
    t0 = time.perf_counter()
    assert cu.cuLaunchKernel(fn, rows // block, 1, 1, block, 1, 1, 0, None, params, None) == 0
    best = min(best, time.perf_counter() - t0)
  out = np.empty(rows, np.float32)
  assert cu.cuMemcpyDtoH_v2(out.ctypes.data, bufs[2], out.nbytes) == 0
  np.testing.assert_allclose(out, a.astype(np.float64) @ x, rtol=1e-4, atol=1e-4)
  kernel = cu.handles[fn.value].kernel
  n = kernel.instructions_executed
  t0 = time.perf_counter()
  for _ in range(10): a @ x
  np_s = (time.perf_counter() - t0) / 10
  print(f"CPU: {cpu_model()}")
  print(f"matvec {rows}x{K} fp32, block {block}: {n / 1e6:.1f}M thread-instructions in {best * 1e3:.1f} ms -> {n / best / 1e6:.1f}M thread-instr/s "
        f"(module load {load_s * 1e3:.1f} ms)")
  print(f"numpy a @ x in the same run: {np_s * 1e3:.3f} ms -> interpreter is {best / np_s:.0f}x slower than numpy")


if __name__ == "__main__":
  main()

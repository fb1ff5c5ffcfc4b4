// sm_90 kernels: native bf16 arithmetic, half2 intrinsics, fp8 (e4m3/e5m2) conversions
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
extern "C" {
__global__ void bf16_ops(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  o[i * 4 + 0] = __hfma(a[i], b[i], __hadd(a[i], b[i]));
  o[i * 4 + 1] = __hmax(a[i], b[i]);
  o[i * 4 + 2] = __hmul(a[i], b[i]);
  o[i * 4 + 3] = __hsub(a[i], b[i]);
}
__global__ void half2_ops(const __half2* h, __half2* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half2 x = h[i];
  o[i * 3 + 0] = __hfma2(x, x, __hadd2(x, x));
  o[i * 3 + 1] = __hmax2(x, __hneg2(x));
  o[i * 3 + 2] = __hmul2(x, __habs2(x));
}
__global__ void fp8_ops(const float* f, float* o, unsigned char* codes, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __nv_fp8_e4m3 a(f[i]);
  __nv_fp8_e5m2 b(f[i]);
  codes[i * 2 + 0] = a.__x;
  codes[i * 2 + 1] = b.__x;
  o[i * 2 + 0] = (float)a;
  o[i * 2 + 1] = (float)b;
}
}

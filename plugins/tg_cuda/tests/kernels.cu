// CUDA C kernels the PTX interpreter tests compile with NVRTC (or nvcc) and check against numpy.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" {

__global__ void ew(const float4* __restrict__ a, const float4* __restrict__ b, float4* out, int n4) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n4) {
    float4 x = a[i], y = b[i];
    out[i] = make_float4(fmaf(x.x, y.x, 1.0f), x.y * y.y - x.z, x.z / y.z, fmaxf(x.w, y.w));
  }
}

__global__ void math(const float* a, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = a[i];
  out[i * 8 + 0] = expf(x); out[i * 8 + 1] = logf(fabsf(x)); out[i * 8 + 2] = sinf(x); out[i * 8 + 3] = cosf(x);
  out[i * 8 + 4] = sqrtf(fabsf(x)); out[i * 8 + 5] = tanhf(x); out[i * 8 + 6] = 1.0f / x; out[i * 8 + 7] = powf(fabsf(x), 0.37f);
}

__global__ void fastmath(const float* a, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = a[i];
  out[i * 6 + 0] = exp2f(x); out[i * 6 + 1] = __log2f(x); out[i * 6 + 2] = __sinf(x); out[i * 6 + 3] = __cosf(x);
  out[i * 6 + 4] = rsqrtf(x); out[i * 6 + 5] = __fdividef(1.0f, x);
}

__global__ void reduce(const float* a, float* out, int n) {
  __shared__ float s[256];
  int t = threadIdx.x;
  float acc = 0.f;
  for (int i = blockIdx.x * 256 + t; i < n; i += gridDim.x * 256) acc += a[i];
  s[t] = acc;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) { if (t < k) s[t] += s[t + k]; __syncthreads(); }
  if (t == 0) out[blockIdx.x] = s[0];
}

__global__ void warpsum(const float* a, float* out) {
  float v = a[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  unsigned ballot = __ballot_sync(0xffffffffu, a[blockIdx.x * blockDim.x + threadIdx.x] > 0.5f);
  if ((threadIdx.x & 31) == 0) { out[(blockIdx.x * blockDim.x + threadIdx.x) / 32 * 2] = v; out[(blockIdx.x * blockDim.x + threadIdx.x) / 32 * 2 + 1] = __int_as_float(ballot); }
}

__global__ void collatz(const unsigned* a, unsigned* steps, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned x = a[i], c = 0;
  while (x != 1) { if (x & 1) x = 3 * x + 1; else x >>= 1; c++; }
  steps[i] = c;
}

__global__ void atomics(const int* a, int* hist, int* mx, unsigned* cas_out, float* fsum, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = a[i];
  atomicAdd(&hist[v & 15], 1);
  atomicMax(mx, v);
  atomicAdd(fsum, (float)(v & 7));
  cas_out[i] = atomicCAS(&cas_out[n + (unsigned)i % 64u], 0u, (unsigned)i + 1u);
}

__global__ void shared_atomics(const int* a, int* out) {
  __shared__ int h[8];
  if (threadIdx.x < 8) h[threadIdx.x] = 0;
  __syncthreads();
  atomicAdd(&h[a[blockIdx.x * blockDim.x + threadIdx.x] & 7], 1);
  __syncthreads();
  if (threadIdx.x < 8) out[blockIdx.x * 8 + threadIdx.x] = h[threadIdx.x];
}

__global__ void intops(const int* a, const int* b, int* out, const long long* la, const long long* lb, long long* lout, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int x = a[i], y = b[i];
  unsigned ux = (unsigned)x, uy = (unsigned)y;
  out[i * 10 + 0] = x / y; out[i * 10 + 1] = x % y; out[i * 10 + 2] = (int)(ux / uy); out[i * 10 + 3] = (int)(ux % uy);
  out[i * 10 + 4] = __mulhi(x, y); out[i * 10 + 5] = (int)__umulhi(ux, uy); out[i * 10 + 6] = __popc(ux); out[i * 10 + 7] = __clz(x);
  out[i * 10 + 8] = (int)__brev(ux); out[i * 10 + 9] = (int)__byte_perm(ux, uy, 0x5140 + (i & 0x7));
  long long p = la[i], q = lb[i];
  lout[i * 4 + 0] = p / q; lout[i * 4 + 1] = p % q; lout[i * 4 + 2] = (long long)((unsigned long long)p >> (i & 63)); lout[i * 4 + 3] = __mul64hi(p, q);
}

__global__ void f2i(const float* a, int* out, unsigned* uout, long long* lout, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = a[i];
  out[i * 3 + 0] = (int)x; out[i * 3 + 1] = __float2int_rn(x); out[i * 3 + 2] = __float2int_rd(x);
  uout[i] = (unsigned)x; lout[i] = (long long)x;
}

__global__ void halfs(const float* a, unsigned short* h, unsigned short* bf, float* back, unsigned* h2, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = a[i];
  __half hx = __float2half_rn(x);
  __nv_bfloat16 bx = __float2bfloat16_rn(x);
  h[i] = __half_as_ushort(hx);
  bf[i] = __bfloat16_as_ushort(bx);
  back[i * 3 + 0] = __half2float(hx);
  back[i * 3 + 1] = __bfloat162float(bx);
  back[i * 3 + 2] = __half2float(__hfma(hx, hx, __float2half_rn(0.5f)));
  __half2 p = __floats2half2_rn(x, -x);
  __half2 q = __hmul2(__hadd2(p, p), p);
  h2[i] = *(unsigned*)&q;
}

__global__ void transpose(const float* a, float* out, int rows, int cols) {
  __shared__ float tile[16][17];
  int x = blockIdx.x * 16 + threadIdx.x, y = blockIdx.y * 16 + threadIdx.y;
  if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = a[y * cols + x];
  __syncthreads();
  int tx = blockIdx.y * 16 + threadIdx.x, ty = blockIdx.x * 16 + threadIdx.y;
  if (tx < rows && ty < cols) out[ty * rows + tx] = tile[threadIdx.x][threadIdx.y];
}

__global__ void dynsmem(const float* a, float* out) {
  extern __shared__ float buf[];
  buf[threadIdx.x] = a[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}

__global__ void localmem(const float* a, const int* idx, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float arr[16];
  for (int j = 0; j < 16; j++) arr[j] = a[i * 16 + j] * (float)(j + 1);
  arr[idx[i] & 15] += 100.0f;
  out[i] = arr[idx[i] >> 4 & 15];
}

__device__ unsigned pack_h(__half lo, __half hi) { return (unsigned)__half_as_ushort(lo) | ((unsigned)__half_as_ushort(hi) << 16); }
__device__ unsigned pack_b(__nv_bfloat16 lo, __nv_bfloat16 hi) { return (unsigned)__bfloat16_as_ushort(lo) | ((unsigned)__bfloat16_as_ushort(hi) << 16); }

// D[M,N] = A[M,K] @ B[K,N] (+ C), one warp per 16x8 tile, fragments per the PTX ISA m16n8k16 layout
#define MMA_KERNEL(NAME, T, PACK, TYPE)                                                                           \
__global__ void NAME(const T* A, const T* B, const float* C, float* D, int M, int N, int K) {                     \
  int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;                                                      \
  int m0 = blockIdx.y * 16, n0 = blockIdx.x * 8;                                                                 \
  float d[4];                                                                                                    \
  for (int r = 0; r < 4; r++) d[r] = C[(m0 + g + (r >= 2 ? 8 : 0)) * N + n0 + t * 2 + (r & 1)];                  \
  for (int k0 = 0; k0 < K; k0 += 16) {                                                                           \
    unsigned a[4], b[2];                                                                                         \
    for (int r = 0; r < 4; r++) {                                                                                \
      int row = m0 + g + ((r & 1) ? 8 : 0), col = k0 + t * 2 + (r >= 2 ? 8 : 0);                                 \
      a[r] = PACK(A[row * K + col], A[row * K + col + 1]);                                                       \
    }                                                                                                            \
    for (int r = 0; r < 2; r++) {                                                                                \
      int k = k0 + t * 2 + (r ? 8 : 0);                                                                          \
      b[r] = PACK(B[k * N + n0 + g], B[(k + 1) * N + n0 + g]);                                                   \
    }                                                                                                            \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])); \
  }                                                                                                              \
  for (int r = 0; r < 4; r++) D[(m0 + g + (r >= 2 ? 8 : 0)) * N + n0 + t * 2 + (r & 1)] = d[r];                  \
}
MMA_KERNEL(mma_f16, __half, pack_h, "f16")
MMA_KERNEL(mma_bf16, __nv_bfloat16, pack_b, "bf16")

// m16n8k8 with f16 accumulate: one warp, D(16x8,f16) = A(16x8) @ B(8x8) + C
__global__ void mma_k8_f16acc(const __half* A, const __half* B, const __half* C, __half* D) {
  int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  unsigned a[2], b, c[2], dd[2];
  for (int r = 0; r < 2; r++) a[r] = pack_h(A[(g + 8 * r) * 8 + t * 2], A[(g + 8 * r) * 8 + t * 2 + 1]);
  b = pack_h(B[(t * 2) * 8 + g], B[(t * 2 + 1) * 8 + g]);
  for (int r = 0; r < 2; r++) c[r] = pack_h(C[(g + 8 * r) * 8 + t * 2], C[(g + 8 * r) * 8 + t * 2 + 1]);
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3}, {%4}, {%5,%6};"
               : "=r"(dd[0]), "=r"(dd[1]) : "r"(a[0]), "r"(a[1]), "r"(b), "r"(c[0]), "r"(c[1]));
  for (int r = 0; r < 2; r++) {
    D[(g + 8 * r) * 8 + t * 2] = __ushort_as_half((unsigned short)(dd[r] & 0xFFFF));
    D[(g + 8 * r) * 8 + t * 2 + 1] = __ushort_as_half((unsigned short)(dd[r] >> 16));
  }
}

// one warp: A (16x16 f16, row-major) and B (16x8, row-major K x N) staged in shared memory, fragments loaded with
// ldmatrix (.x4 for A, .x2.trans for B), D = A @ B with mma.sync m16n8k16
__global__ void ldmatrix_mma(const __half* A, const __half* B, float* D) {
  __shared__ __align__(16) __half sa[16 * 16];
  __shared__ __align__(16) __half sb[16 * 8];
  int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) sa[i] = A[i];
  for (int i = lane; i < 128; i += 32) sb[i] = B[i];
  __syncwarp();
  int mi = lane / 8, r = lane % 8;
  unsigned a_addr = (unsigned)__cvta_generic_to_shared(&sa[(r + 8 * (mi % 2)) * 16 + 8 * (mi / 2)]);
  unsigned b_addr = (unsigned)__cvta_generic_to_shared(&sb[(r + 8 * (mi % 2)) * 8]);
  unsigned a[4], b[2];
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(a_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(b[0]), "=r"(b[1]) : "r"(b_addr));
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  int g = lane >> 2, t = lane & 3;
  for (int q = 0; q < 4; q++) D[(g + (q >= 2 ? 8 : 0)) * 8 + t * 2 + (q & 1)] = d[q];
}

// f64 sin/cos/pow: NVRTC calls .func slow paths (Payne-Hanek reduction with 128-bit carry chains) for large arguments
__global__ void f64math(const double* a, double* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double x = a[i];
  out[i * 3 + 0] = sin(x); out[i * 3 + 1] = cos(x); out[i * 3 + 2] = pow(fabs(x), 0.75);
}

__global__ void warp_misc(const int* a, int* out) {
  int v = a[threadIdx.x];
  int s = __reduce_add_sync(0xffffffffu, v), mx = __reduce_max_sync(0xffffffffu, (unsigned)v);
  unsigned m = 0;
  if (v & 1) m = __activemask();
  out[threadIdx.x * 3 + 0] = s; out[threadIdx.x * 3 + 1] = mx; out[threadIdx.x * 3 + 2] = (int)m;
}

// cp.async global->shared (16 bytes per thread, the last thread's copy truncated by src-size), then a rotated read-back
__global__ void cp_async(const float4* src, float4* out) {
  __shared__ __align__(16) float4 tile[64];
  unsigned saddr = (unsigned)__cvta_generic_to_shared(&tile[threadIdx.x]);
  int src_size = threadIdx.x == 63 ? 8 : 16;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(saddr), "l"(src + threadIdx.x), "r"(src_size));
  asm volatile("cp.async.commit_group;");
  asm volatile("cp.async.wait_group 0;");
  __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) % 64];
}

// m16n8k8 tf32 (f32 accumulate): D(16x8) = A(16x8) @ B(8x8) + C, operands rounded with cvt.rna.tf32.f32
__device__ unsigned to_tf32(float x) { unsigned r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return r; }
__global__ void mma_tf32(const float* A, const float* B, const float* C, float* D, unsigned* rounded) {
  int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  unsigned a[4] = {to_tf32(A[g * 8 + t]), to_tf32(A[(g + 8) * 8 + t]), to_tf32(A[g * 8 + t + 4]), to_tf32(A[(g + 8) * 8 + t + 4])};
  unsigned b[2] = {to_tf32(B[t * 8 + g]), to_tf32(B[(t + 4) * 8 + g])};
  float d[4];
  for (int q = 0; q < 4; q++) d[q] = C[(g + (q >= 2 ? 8 : 0)) * 8 + t * 2 + (q & 1)];
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  for (int q = 0; q < 4; q++) D[(g + (q >= 2 ? 8 : 0)) * 8 + t * 2 + (q & 1)] = d[q];
  rounded[lane] = to_tf32(A[lane]);
}

__global__ void illegal(float* p) { p[threadIdx.x * 1000000] = 1.0f; }
}

// the shape of tinygrad's CUDA renderer output: a 4x4 register-tiled matmul with float4 loads, index arithmetic,
// fully unrolled accumulators, and an elementwise half kernel with a NaN-propagating max and exp2
#define INFINITY (__int_as_float(0x7f800000))
#define NAN (__int_as_float(0x7fffffff))
extern "C" __global__ void __launch_bounds__(16) r_4_4_4_4_16(float* data0, const float* __restrict__ data1, const float* __restrict__ data2) {
  int gidx0 = blockIdx.x; /* 4 */
  int gidx1 = blockIdx.y; /* 4 */
  int lidx0 = threadIdx.x; /* 4 */
  int lidx1 = threadIdx.y; /* 4 */
  float acc0 = 0.0f; float acc1 = 0.0f; float acc2 = 0.0f; float acc3 = 0.0f;
  float acc4 = 0.0f; float acc5 = 0.0f; float acc6 = 0.0f; float acc7 = 0.0f;
  float acc8 = 0.0f; float acc9 = 0.0f; float acc10 = 0.0f; float acc11 = 0.0f;
  float acc12 = 0.0f; float acc13 = 0.0f; float acc14 = 0.0f; float acc15 = 0.0f;
  for (int ridx0 = 0; ridx0 < 64; ridx0++) {
    int alu0 = ((gidx1*1024)+(lidx1*256)+ridx0);
    float val0 = *(data1+alu0);
    float val1 = *(data1+(alu0+64));
    float val2 = *(data1+(alu0+128));
    float val3 = *(data1+(alu0+192));
    float4 val4 = *((float4*)((data2+((gidx0*16)+(lidx0*4)+(ridx0*64)))));
    acc0 = ((val0*val4.x)+acc0); acc1 = ((val0*val4.y)+acc1); acc2 = ((val0*val4.z)+acc2); acc3 = ((val0*val4.w)+acc3);
    acc4 = ((val1*val4.x)+acc4); acc5 = ((val1*val4.y)+acc5); acc6 = ((val1*val4.z)+acc6); acc7 = ((val1*val4.w)+acc7);
    acc8 = ((val2*val4.x)+acc8); acc9 = ((val2*val4.y)+acc9); acc10 = ((val2*val4.z)+acc10); acc11 = ((val2*val4.w)+acc11);
    acc12 = ((val3*val4.x)+acc12); acc13 = ((val3*val4.y)+acc13); acc14 = ((val3*val4.z)+acc14); acc15 = ((val3*val4.w)+acc15);
  }
  int alu1 = ((gidx0*16)+(gidx1*1024)+(lidx0*4)+(lidx1*256));
  *((float4*)((data0+alu1))) = make_float4(acc0,acc1,acc2,acc3);
  *((float4*)((data0+(alu1+64)))) = make_float4(acc4,acc5,acc6,acc7);
  *((float4*)((data0+(alu1+128)))) = make_float4(acc8,acc9,acc10,acc11);
  *((float4*)((data0+(alu1+192)))) = make_float4(acc12,acc13,acc14,acc15);
}

extern "C" __global__ void __launch_bounds__(32) E_77(half* data0, const half* __restrict__ data1, const float* __restrict__ data2) {
  int gidx0 = blockIdx.x;
  int lidx0 = threadIdx.x;
  int alu0 = ((gidx0*32)+lidx0);
  bool alu1 = (alu0<77);
  half val0 = (alu1?*(data1+alu0):(half)(0.0f));
  float val1 = (alu1?*(data2+alu0):0.0f);
  float alu2 = ((float)(val0));
  float alu3 = (((alu2!=alu2)||(val1!=val1))?NAN:((alu2<val1)?val1:alu2));
  float alu4 = exp2((alu3*1.4426950408889634f));
  if (alu1) {
    *(data0+alu0) = ((half)((alu4*(1.0f/(alu4+1.0f)))));
  }
}


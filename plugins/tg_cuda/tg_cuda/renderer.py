"""CUDA C from tg's linear program (see tg_core/runtime/ops_python.py for the semantics of every op), compiled by NVRTC.

Values are `const` locals, one per uop; loops are `for`, IF is `if`. float16 and bfloat16 live in memory as their 16 bits
and in registers as float32 values that every ALU op rounds back to their precision (what the PYTHON reference does), so
results are bit-identical to it; the conversions are single PTX `cvt`s (inline asm), so no CUDA header is needed. Integer
division by zero, INT_MIN / -1, shifts by the width or more and float -> int conversions of NaN/inf/out-of-range values
give the reference's values instead of C's undefined behaviour; float MAX propagates NaN like numpy.maximum.

A pass over the program is a table `Ops -> template` (`_UOP_TEMPLATES`; ALU ops: `_FLOAT_ALU`, `_INT_ALU`, `_BOOL_ALU`).
Vectors appear only as WMMA fragments/accumulators and 4/8/16-byte memory accesses (tg_cuda.devectorize splits the rest):
`tg_vec<T, n>` structs. Launch contract with `tg_cuda.runtime`: the parameters are the variables (int32) then a pointer per buffer slot;
gidx<i> / lidx<i> are grid / block dim i (x, y, z). A kernel without lidx
computes gidx0 from blockIdx.x * blockDim.x + threadIdx.x with a bounds guard and declares `__launch_bounds__(FLAT_BLOCK)`:
the runtime reads `.maxntid` from the PTX and launches blocks of that many threads (kernels with lidx declare their block)."""
from __future__ import annotations
import dataclasses
import math
from typing import Any, Callable

import numpy as np

from tg_core.device import Renderer, RendererCaps, TensorCore
from tg_core.renderer import FragmentLayout
from tg_core.dtype import AddrSpace, DType, dtypes
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp
from tg_cuda.devectorize import pm_devectorize

FLAT_BLOCK = 128   # threads per block of a kernel without LOCAL dims
ARCHS = ("sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_101", "sm_103", "sm_110", "sm_120", "sm_121")

# the C type of each dtype in memory (storage) and in registers (compute: half/bfloat16 compute as float)
_STORAGE = {dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short", dtypes.uint16: "unsigned short",
            dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long", dtypes.uint64: "unsigned long long",
            dtypes.float16: "unsigned short", dtypes.bfloat16: "unsigned short", dtypes.float32: "float", dtypes.float64: "double"}
_UNSIGNED_OF = {"signed char": "unsigned char", "short": "unsigned short", "int": "unsigned int", "long long": "unsigned long long"}
_SMALL_FLOATS = (dtypes.float16, dtypes.bfloat16)

def _scalar(dt: DType) -> DType:
  s = dt.scalar()
  return dtypes.float64 if s == dtypes.weakfloat else dtypes.int64 if s == dtypes.weakint else s

def ctype(dt: DType) -> str:
  """The register (compute) type of a dtype: a scalar's, or tg_vec<scalar, n> for the accumulator fragment of a WMMA."""
  s = _scalar(dt)
  if dt.count != 1: return f"tg_vec<{ctype(s)}, {dt.count}>"
  if s in _SMALL_FLOATS: return "float"
  if s not in _STORAGE: raise NotImplementedError(f"the CUDA renderer has no type for {dt} (it is emulated by the core, see caps.native_dtypes)")
  return _STORAGE[s]

def storage_type(dt: DType) -> str:
  s = _scalar(dt)
  if s not in _STORAGE: raise NotImplementedError(f"the CUDA renderer has no storage type for {dt}")
  return _STORAGE[s]

def _is_float(dt: DType) -> bool: return dtypes.is_float(_scalar(dt))
def _is_unsigned(dt: DType) -> bool: return _scalar(dt) == dtypes.bool or dtypes.is_unsigned(_scalar(dt))
def _bits(dt: DType) -> int: return 1 if _scalar(dt) == dtypes.bool else _scalar(dt).itemsize * 8

def _f32_lit(v: float) -> str:
  if math.isnan(v): return "__int_as_float(0x7fc00000)"
  if math.isinf(v): return f"__int_as_float({'0xff800000' if v < 0 else '0x7f800000'})"
  return f"{float(np.float32(v)).hex()}f"

def _f64_lit(v: float) -> str:
  if math.isnan(v): return "__longlong_as_double(0x7ff8000000000000LL)"
  if math.isinf(v): return f"__longlong_as_double({'0xfff0000000000000LL' if v < 0 else '0x7ff0000000000000LL'})"
  return float(v).hex()

def cconst(v: Any, dt: DType) -> str:
  """A constant in the register type of `dt`, with the reference's value (float16: rounded to half; bfloat16: a float32)."""
  s = _scalar(dt)
  if s == dtypes.bool: return "true" if v else "false"
  if s == dtypes.float64: return _f64_lit(float(v))
  if s == dtypes.float32 or s == dtypes.bfloat16: return _f32_lit(float(v))
  if s == dtypes.float16: return _f32_lit(float(np.float16(float(v))))
  b, iv = _bits(s), int(v) & ((1 << _bits(s)) - 1)
  if _is_unsigned(s): return f"{iv}ull" if b == 64 else f"{iv}u"
  iv = iv - (1 << b) if iv >= 1 << (b - 1) else iv
  if b == 64: return f"({iv}ll)" if iv != -(1 << 63) else "(-9223372036854775807ll-1)"
  return f"({iv})" if iv != -(1 << 31) else "(-2147483647-1)"

# helpers every kernel may use (NVRTC drops the unused ones)
PRELUDE = r"""
typedef unsigned long long tg_u64;
template<class T, int N> struct tg_vec { T v[N]; };
/* one vector load/store (ld/st.global.v<n>) where the address is aligned to its size, else lane by lane (a buffer may be a view
   at any offset) */
template<class S, int N> struct alignas(sizeof(S) * N) tg_mem { S v[N]; };
template<class S, int N> __device__ __forceinline__ tg_vec<S, N> tg_ldv(const S* p) {
  tg_vec<S, N> r;
  if (((tg_u64)p & (sizeof(S) * N - 1)) == 0) { const tg_mem<S, N> m = *(const tg_mem<S, N>*)p; for (int i = 0; i < N; i++) r.v[i] = m.v[i]; }
  else { for (int i = 0; i < N; i++) r.v[i] = p[i]; }
  return r;
}
template<class S, int N> __device__ __forceinline__ void tg_stv(S* p, tg_vec<S, N> x) {
  if (((tg_u64)p & (sizeof(S) * N - 1)) == 0) { tg_mem<S, N> m; for (int i = 0; i < N; i++) m.v[i] = x.v[i]; *(tg_mem<S, N>*)p = m; }
  else { for (int i = 0; i < N; i++) p[i] = x.v[i]; }
}
__device__ __forceinline__ unsigned int tg_pack(unsigned short lo, unsigned short hi) { return (unsigned int)lo | ((unsigned int)hi << 16); }
__device__ __forceinline__ float tg_h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ unsigned short tg_f2h(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ unsigned short tg_d2h(double d) { unsigned short h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d)); return h; }
__device__ __forceinline__ float tg_bf2f(unsigned short b) { return __uint_as_float(((unsigned int)b) << 16); }
__device__ __forceinline__ unsigned short tg_f2bf(float f) {  /* round to nearest even; NaN -> 0x7fc0 as the reference */
  unsigned int u = __float_as_uint(f);
  if (f != f) return 0x7fc0;
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float tg_rh(float f) { return tg_h2f(tg_f2h(f)); }
__device__ __forceinline__ float tg_rbf(float f) { return tg_bf2f(tg_f2bf(f)); }
/* float -> int64 as the reference: NaN/inf -> 0, else truncate and clamp to [-2^63, 2^63-1024] */
__device__ __forceinline__ long long tg_f2i(double x) {
  if (x != x || x == __longlong_as_double(0x7ff0000000000000LL) || x == __longlong_as_double(0xfff0000000000000LL)) return 0;
  return (long long)fmin(x, 9223372036854774784.0);
}
template<class D, class S> __device__ __forceinline__ D tg_bitcast(S s) { D d; memcpy(&d, &s, sizeof(D)); return d; }
template<class T> __device__ __forceinline__ T tg_sdiv(T a, T b) { return b == 0 ? (T)0 : b == (T)-1 ? (T)(0ull - (tg_u64)a) : (T)(a / b); }
template<class T> __device__ __forceinline__ T tg_smod(T a, T b) { return b == 0 ? a : b == (T)-1 ? (T)0 : (T)(a % b); }
template<class T> __device__ __forceinline__ T tg_udiv(T a, T b) { return b == 0 ? (T)0 : (T)(a / b); }
template<class T> __device__ __forceinline__ T tg_umod(T a, T b) { return b == 0 ? a : (T)(a % b); }
__device__ __forceinline__ unsigned int tg_rotl(unsigned int x, int r) { return (x << r) | (x >> (32 - r)); }
__device__ tg_u64 tg_threefry(tg_u64 x, tg_u64 key) {  /* threefry2x32, 20 rounds, as tg_core.runtime.ops_python.threefry2x32 */
  unsigned int x0 = (unsigned int)x, x1 = (unsigned int)(x >> 32), k0 = (unsigned int)key, k1 = (unsigned int)(key >> 32);
  unsigned int ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
  const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  x0 += ks[0]; x1 += ks[1];
  for (int i = 0; i < 5; i++) {
    for (int j = 0; j < 4; j++) { x0 += x1; x1 = tg_rotl(x1, rot[i % 2][j]) ^ x0; }
    x0 += ks[(i + 1) % 3]; x1 += ks[(i + 2) % 3] + (unsigned int)(i + 1);
  }
  return ((tg_u64)x1 << 32) | (tg_u64)x0;
}
"""

def _round(v: str, dt: DType) -> str:
  """An ALU result of a small float, computed in float, rounded to its precision."""
  s = _scalar(dt)
  return f"tg_rh({v})" if s == dtypes.float16 else f"tg_rbf({v})" if s == dtypes.bfloat16 else v

def _wrap_int(expr: Callable[[str, str], str], dt: DType, a: str, b: str) -> str:
  """Signed add/sub/mul computed on the unsigned type: wraps instead of C's undefined overflow."""
  t = ctype(dt)
  if (u := _UNSIGNED_OF.get(t)) is None: return f"({t})({expr(a, b)})"
  return f"({t})({expr(f'({u}){a}', f'({u}){b}')})"

_MATH = {Ops.EXP2: ("exp2f", "exp2"), Ops.LOG2: ("log2f", "log2"), Ops.SIN: ("sinf", "sin"), Ops.SQRT: ("sqrtf", "sqrt"), Ops.TRUNC: ("truncf", "trunc")}

# ALU templates: operands `s` (rendered), then for floats whether it is float64 (the result is rounded to a small float's
# precision after), for integers the result dtype; bool ops are C's logical ones
Template = Callable[..., str]
_CMP = {Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}
def _bool_infix(c: str) -> Template: return lambda s: f"({s[0]} {c} {s[1]})"
def _float_infix(c: str) -> Template: return lambda s, f64: f"({s[0]} {c} {s[1]})"
def _math(fn: tuple[str, str]) -> Template: return lambda s, f64: f"{fn[1 if f64 else 0]}({s[0]})"
def _int_bitop(c: str) -> Template: return lambda dt, s: f"({ctype(dt)})({s[0]} {c} {s[1]})"
_BOOL_ALU: dict[Ops, Template] = {
  **{op: _bool_infix(c) for op, c in {Ops.ADD: "||", Ops.MAX: "||", Ops.MUL: "&&", Ops.SUB: "!=", Ops.AND: "&&", Ops.OR: "||", Ops.XOR: "!="}.items()},
  Ops.NEG: lambda s: f"(!{s[0]})", Ops.MULACC: lambda s: f"(({s[0]} && {s[1]}) || {s[2]})",
}
_FLOAT_ALU: dict[Ops, Template] = {
  **{op: _float_infix(c) for op, c in {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/"}.items()},
  Ops.MAX: lambda s, f64: f"(({s[0]} > {s[1]} || {s[0]} != {s[0]}) ? {s[0]} : {s[1]})",  # NaN in either gives NaN, as numpy.maximum
  Ops.MULACC: lambda s, f64: f"(({s[0]} * {s[1]}) + {s[2]})",  # two roundings as the reference (NVRTC runs with --fmad=false)
  Ops.NEG: lambda s, f64: f"(-{s[0]})", Ops.RECIPROCAL: lambda s, f64: f"({'1.0' if f64 else '1.0f'} / {s[0]})",
  Ops.POW: lambda s, f64: f"{'pow' if f64 else 'powf'}({s[0]}, {s[1]})",
  **{op: _math(fn) for op, fn in _MATH.items()},
}

def _shift(op: Ops) -> Template:
  def f(dt: DType, s: list[str]) -> str:
    t = ctype(dt)
    w, u = _bits(dt), _UNSIGNED_OF.get(t, t)
    amt = f"(unsigned long long)({t})({s[1]})"  # the amount in a's dtype, as the reference; >= width shifts all out
    if op is Ops.SHL: return f"({amt} >= {w} ? ({t})0 : ({t})(({u}){s[0]} << {amt}))"
    fill = f"({t})0" if _is_unsigned(dt) else f"({t})({s[0]} < 0 ? -1 : 0)"
    return f"({amt} >= {w} ? {fill} : ({t})({s[0]} >> {amt}))"
  return f

def _threefry(dt: DType, s: list[str]) -> str:
  if _scalar(dt) != dtypes.uint64: raise NotImplementedError(f"THREEFRY on {dt}")
  return f"tg_threefry({s[0]}, {s[1]})"

def _mul(x: str, y: str) -> str: return f"{x} * {y}"
def _add(x: str, y: str) -> str: return f"{x} + {y}"
_INT_ALU: dict[Ops, Template] = {
  Ops.ADD: lambda dt, s: _wrap_int(_add, dt, s[0], s[1]), Ops.SUB: lambda dt, s: _wrap_int(lambda x, y: f"{x} - {y}", dt, s[0], s[1]),
  Ops.MUL: lambda dt, s: _wrap_int(_mul, dt, s[0], s[1]),
  Ops.MULACC: lambda dt, s: _wrap_int(_add, dt, _wrap_int(_mul, dt, s[0], s[1]), s[2]),
  Ops.NEG: lambda dt, s: _wrap_int(lambda x, y: f"{x} - {y}", dt, f"({ctype(dt)})0", s[0]),
  Ops.IDIV: lambda dt, s: f"tg_{'u' if _is_unsigned(dt) else 's'}div<{ctype(dt)}>({s[0]}, {s[1]})",
  Ops.MOD: lambda dt, s: f"tg_{'u' if _is_unsigned(dt) else 's'}mod<{ctype(dt)}>({s[0]}, {s[1]})",
  Ops.MAX: lambda dt, s: f"({s[0]} > {s[1]} ? {s[0]} : {s[1]})",
  **{op: _int_bitop(c) for op, c in {Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}.items()},
  Ops.SHL: _shift(Ops.SHL), Ops.SHR: _shift(Ops.SHR), Ops.TRUNC: lambda dt, s: s[0], Ops.THREEFRY: _threefry,
}

def render_alu(op: Ops, dt: DType, src: list[str], sdt: DType) -> str:
  """The C expression of ALU op `op` (result dtype `dt`, first operand's dtype `sdt`) on rendered operands `src`."""
  if op in _CMP: return f"({src[0]} {_CMP[op]} {src[1]})"
  if op is Ops.WHERE: return f"({src[0]} ? {src[1]} : {src[2]})"
  if _scalar(dt) == dtypes.bool and op in _BOOL_ALU: return _BOOL_ALU[op](src)
  if _is_float(sdt):
    if op not in _FLOAT_ALU: raise NotImplementedError(f"the CUDA renderer can't render {op} on {dt}")
    return _round(_FLOAT_ALU[op](src, _scalar(dt) == dtypes.float64), dt)
  if op not in _INT_ALU: raise NotImplementedError(f"the CUDA renderer can't render {op} on {dt}")
  return _INT_ALU[op](dt, src)

def render_cast(v: str, src: DType, dst: DType) -> str:
  """CAST with the reference's semantics (tg_core.runtime.ops_python._cast)."""
  s, d = _scalar(src), _scalar(dst)
  if s == d: return v
  t = ctype(dst)
  if d == dtypes.bool: return f"({v} != 0)"
  if _is_float(src) and not _is_float(dst): return f"({t})tg_f2i((double){v})"  # wraps from int64 to narrower ints
  if d == dtypes.float16: return f"tg_h2f(tg_d2h((double){v}))"  # straight to half, one rounding (numpy astype(float16))
  if d == dtypes.bfloat16: return f"tg_rbf((float){v})"  # through float32, as the reference
  return f"({t}){v}"

def render_bitcast(v: str, src: DType, dst: DType) -> str:
  s, d = _scalar(src), _scalar(dst)
  if s == d: return v
  # to the source's bits, reinterpret, from the destination's bits
  bits = f"tg_f2h({v})" if s == dtypes.float16 else f"tg_f2bf({v})" if s == dtypes.bfloat16 else f"(unsigned char){v}" if s == dtypes.bool else v
  sst = "unsigned char" if s == dtypes.bool else storage_type(src)
  if d == dtypes.bool: return f"(tg_bitcast<unsigned char, {sst}>({bits}) != 0)"
  out = f"tg_bitcast<{storage_type(dst)}, {sst}>({bits})"
  return f"tg_h2f({out})" if d == dtypes.float16 else f"tg_bf2f({out})" if d == dtypes.bfloat16 else out

def load_value(ptr: str, dt: DType) -> str:
  s = _scalar(dt)
  return f"tg_h2f({ptr})" if s == dtypes.float16 else f"tg_bf2f({ptr})" if s == dtypes.bfloat16 else ptr

def store_value(v: str, dt: DType) -> str:
  s = _scalar(dt)
  return f"tg_f2h({v})" if s == dtypes.float16 else f"tg_f2bf({v})" if s == dtypes.bfloat16 else v

def _contractible(uops: list[UOp]) -> set[UOp]:
  """Float ADD(MUL, x) whose value is stored into a register accumulator (matmul, conv): rendered as one fma. It rounds once
  where the reference rounds twice, which only reductions see, inside their tolerance (the CPU renderer does the same)."""
  ret: set[UOp] = set()
  for u in uops:
    if u.op is not Ops.STORE or u.src[0].op is not Ops.INDEX or not _is_float(u.src[1].dtype): continue
    buf = u.src[0].src[0]
    while buf.op is Ops.AFTER: buf = buf.src[0]
    if buf.op is not Ops.BUFFER or buf.arg.addrspace is not AddrSpace.REG: continue
    v = u.src[1]
    if v.op is Ops.ADD and any(s.op is Ops.MUL and s.dtype == v.dtype for s in v.src): ret.add(v)
  return ret

# mma.sync m16n8k16 (sm_80+), A row-major and B column-major fragments: where each lane holds which element (PTX ISA "Matrix
# Fragments for mma.m16n8k16"; g = lane >> 2, t = lane & 3): A a_i at (g + 8*bit1(i), 2t + bit0(i) + 8*bit2(i)), B b_i at
# (2t + bit0(i) + 8*bit1(i), g), C/D c_i at (g + 8*bit1(i), 2t + bit0(i))
_ROW_COL_LANES = ((0, 2), (0, 4), (1, 0), (2, 0), (4, 0))
MMA_LAYOUT: tuple[FragmentLayout, ...] = ((_ROW_COL_LANES, ((0, 1), (8, 0), (0, 8))), (((2, 0), (4, 0), (0, 1), (0, 2), (0, 4)), ((1, 0), (8, 0))),
                                          (_ROW_COL_LANES, ((0, 1), (8, 0))))
TENSOR_CORES = tuple(TensorCore((16, 8, 16), dt, dtypes.float32, 32, MMA_LAYOUT) for dt in (dtypes.float16, dtypes.bfloat16))
_MMA_TYPE = {dtypes.float16: "f16", dtypes.bfloat16: "bf16"}

def tensor_cores_of(arch: str) -> tuple[TensorCore, ...]:
  """mma.sync m16n8k16 for fp16/bf16 with fp32 accumulation from sm_80 (Ampere) on."""
  return TENSOR_CORES if int(arch.removeprefix("sm_").rstrip("a")) >= 80 else ()

def mma_instruction(tc: TensorCore) -> str:
  return f"mma.sync.aligned.m{tc.dims[0]}n{tc.dims[1]}k{tc.dims[2]}.row.col.f32.{_MMA_TYPE[tc.dtype_in]}.{_MMA_TYPE[tc.dtype_in]}.f32"

class CUDARenderer(Renderer):
  """CUDA C for NVRTC. The target arch (sm_XX) picks the NVRTC compiler's `--gpu-architecture` (see tg_cuda.compiler)."""
  # every storage dtype but fp8 (emulated by the core); vectors only in memory accesses (tg_cuda.devectorize); grid x up to 2^31-1
  # blocks, y/z 65535; 1024 threads per block;
  # EXP2/LOG2/SIN/SQRT by CUDA's accurate math library (not the .approx instructions)
  caps = RendererCaps(native_dtypes=frozenset(_STORAGE), vector_upcast=True, extra_matcher=pm_devectorize, global_max=(2**31 - 1, 65535, 65535),
                      local_max=(1024, 1024, 64),
                      shared_max=48 * 1024, archs=ARCHS, arch="sm_80", tensor_cores=tensor_cores_of("sm_80"))

  def __init__(self, cubin: bool = True) -> None:
    """cubin=False: the compiler makes PTX (for MOCK+CUDA's interpreter) instead of a cubin."""
    from tg_cuda.compiler import NVRTCCompiler
    self._compiler_cls, self._cubin = NVRTCCompiler, cubin
    self.compiler = NVRTCCompiler(self.caps.arch, cubin)

  def select_arch(self, arch: str) -> None:
    self.caps = dataclasses.replace(self.caps, arch=arch, tensor_cores=tensor_cores_of(arch))
    self.compiler = self._compiler_cls(arch, self._cubin)

  def render(self, uops: list[UOp]) -> str: return _KernelWriter(uops).render()

class _KernelWriter:
  def __init__(self, uops: list[UOp]):
    self.uops = uops
    sink = uops[-1] if uops and uops[-1].op is Ops.SINK else None
    self.name = sink.arg.name if sink is not None and sink.arg is not None else "kernel"
    self.r: dict[UOp, str] = {}
    self.lines: list[str] = []
    self.top: list[str] = []
    self.depth = 1
    self.n = 0
    self.stacks: dict[UOp, list[str]] = {}

  def var(self, prefix: str = "v") -> str:
    self.n += 1
    return f"{prefix}{self.n}"
  def emit(self, line: str) -> None: self.lines.append("  " * self.depth + line)
  def define(self, u: UOp, expr: str, prefix: str = "v", name: str | None = None) -> None:
    name = name or self.var(prefix)
    self.emit(f"const {ctype(u.dtype)} {name} = {expr};")
    self.r[u] = name

  def render(self) -> str:
    uops = self.uops
    bufs = sorted({u.arg.slot: u for u in uops if u.op is Ops.PARAM and u.arg.addrspace is AddrSpace.GLOBAL}.items())
    var_uops = sorted([u for u in uops if u.op is Ops.PARAM and u.arg.addrspace is AddrSpace.ALU], key=lambda v: v.arg.name)
    has_local = any(u.op is Ops.SPECIAL and u.arg.startswith("lidx") for u in uops)
    written = {self._root(u.src[0].src[0]) for u in uops if u.op is Ops.STORE and u.src[0].op is Ops.INDEX}
    # the variables first (int32 each, sorted by name), then one pointer per buffer slot up to the last one used (the runtime
    # passes every buffer of the kernel by slot; one the kernel doesn't use is a void*), so trailing unused buffers are harmless
    params = []
    for i, v in enumerate(var_uops):
      params.append(f"const int var{i}")
      self.r[v] = f"var{i}" if ctype(v.dtype) == "int" else f"(({ctype(v.dtype)})var{i})"
    by_slot = dict(bufs)
    for slot in range(max(by_slot) + 1 if by_slot else 0):
      if (p := by_slot.get(slot)) is None:
        params.append(f"const void* __restrict__ unused{slot}")
        continue
      const = "" if p in written else "const "
      params.append(f"{const}{storage_type(p.dtype)}* __restrict__ data{slot}")
      self.r[p] = f"data{slot}"
    block = math.prod(int(u.src[0].arg) for u in uops if u.op is Ops.SPECIAL and u.arg.startswith("lidx")) if has_local else FLAT_BLOCK
    self.has_local = has_local
    self.contract = _contractible(uops)
    for u in uops: self.render_uop(u)
    body = [*self.top, *self.lines]
    return "\n".join([PRELUDE, f'extern "C" __global__ void __launch_bounds__({block}) {self.name}({", ".join(params)}) {{', *body, "}", ""])

  @staticmethod
  def _root(u: UOp) -> UOp:
    while u.op is Ops.AFTER: u = u.src[0]
    return u

  def render_uop(self, u: UOp) -> None:
    if u.op is Ops.ADD and u in self.contract: return self.render_fma(u)
    if u.op in GroupOp.ALU: return self.define(u, render_alu(u.op, u.dtype, [self.r[s] for s in u.src], u.src[0].dtype))
    if (template := _UOP_TEMPLATES.get(u.op)) is None: raise NotImplementedError(f"the CUDA renderer can't render {u.op}")
    template(self, u)

  # *** the templates of _UOP_TEMPLATES that take more than a line ***
  def alias(self, u: UOp, expr: str) -> None: self.r[u] = expr
  def open_block(self, line: str) -> None:
    self.emit(line)
    self.depth += 1
  def close_block(self) -> None:
    self.depth -= 1
    self.emit("}")

  def render_param(self, u: UOp) -> None:
    if u not in self.r: raise NotImplementedError(f"PARAM with addrspace {u.arg.addrspace} is not supported by the CUDA renderer")

  def render_buffer(self, u: UOp) -> None:
    name = self.var("reg" if u.arg.addrspace is AddrSpace.REG else "smem")
    shared = "__shared__ " if u.arg.addrspace is AddrSpace.LOCAL else ""
    self.top.append(f"  {shared}{ctype(u.dtype) if not shared else storage_type(u.dtype)} {name}[{max(u.arg.size or 1, 1)}];")
    self.r[u] = name

  def render_const(self, u: UOp) -> None:
    self.r[u] = cconst(u.arg, u.dtype) if u.dtype.count == 1 else f"{ctype(u.dtype)}{{{{{', '.join([cconst(u.arg, u.dtype)] * u.dtype.count)}}}}}"

  def render_stack(self, u: UOp) -> None:  # (a WMMA operand fragment is packed from its elements where the WMMA is)
    self.stacks[u] = [self.r[s] for s in u.src]
    self.define(u, f"{ctype(u.dtype)}{{{{{', '.join(self.stacks[u])}}}}}")

  def render_special(self, u: UOp) -> None:
    dim = int(u.arg[-1])
    xyz = "xyz"[dim]
    if u.arg.startswith("lidx"): expr = f"threadIdx.{xyz}"
    elif not self.has_local and dim == 0: expr = "(blockIdx.x * blockDim.x + threadIdx.x)"
    else: expr = f"blockIdx.{xyz}"
    self.define(u, f"({ctype(u.dtype)}){expr}", name=u.arg)  # SPECIAL names are unique in a kernel
    if not self.has_local and u.arg == "gidx0": self.emit(f"if ({self.r[u]} >= {self.r[u.src[0]]}) return;")

  def render_index(self, u: UOp) -> None:
    if len(u.src) > 3: raise NotImplementedError("the CUDA renderer supports INDEX(buf, idx[, gate]) only")
    self.r[u] = f"{self.r[u.src[0]]}[{self.r[u.src[1]]}]"

  def render_range(self, u: UOp) -> None:
    name = self.var("ridx")
    self.open_block(f"for ({ctype(u.dtype)} {name} = 0; {name} < {self.r[u.src[0]]}; {name}++) {{")
    self.r[u] = name

  def render_end(self, u: UOp) -> None:
    for _ in [s for s in u.src[1:] if s.op is Ops.RANGE]: self.close_block()

  def render_fma(self, u: UOp) -> None:  # an accumulator update a*b + c: one fma (see _contractible)
    m, c = (u.src[0], u.src[1]) if u.src[0].op is Ops.MUL else (u.src[1], u.src[0])
    fma = "fma" if _scalar(u.dtype) == dtypes.float64 else "fmaf"
    self.define(u, _round(f"{fma}({self.r[m.src[0]]}, {self.r[m.src[1]]}, {self.r[c]})", u.dtype))

  def render_wmma(self, u: UOp) -> None:
    """mma.sync on the fragments: A's and B's 16-bit elements packed two to a .b32 register (low half first), C's floats in place."""
    tc: TensorCore = u.arg
    to_bits = "tg_f2h" if tc.dtype_in == dtypes.float16 else "tg_f2bf"
    regs = []
    for frag in u.src[:2]:
      els = self.stacks[frag]
      for i in range(0, len(els), 2):
        regs.append(name := self.var("frag"))
        self.emit(f"const unsigned int {name} = tg_pack({to_bits}({els[i]}), {to_bits}({els[i + 1]}));")
    name, nc = self.var("mma"), u.dtype.count
    self.emit(f"{ctype(u.dtype)} {name} = {self.r[u.src[2]]};")
    na = len(self.stacks[u.src[0]]) // 2
    ops = [f"%{i}" for i in range(nc + len(regs))]
    asm = f"{mma_instruction(tc)} {{{', '.join(ops[:nc])}}}, {{{', '.join(ops[nc:nc + na])}}}, {{{', '.join(ops[nc + na:])}}}, {{{', '.join(ops[:nc])}}};"
    outs, ins = ", ".join(f'"+f"({name}.v[{i}])' for i in range(nc)), ", ".join(f'"r"({x})' for x in regs)
    self.emit(f'asm volatile("{asm}" : {outs} : {ins});')
    self.r[u] = name

  def _gate(self, idx: UOp) -> str | None:
    return self.r[idx.src[2]] if idx.op is Ops.INDEX and len(idx.src) > 2 else None

  def _is_reg(self, idx: UOp) -> bool:
    return self._root(idx.src[0]).op is Ops.BUFFER and self._root(idx.src[0]).arg.addrspace is AddrSpace.REG

  def render_load(self, u: UOp) -> None:
    idx = u.src[0]
    if u.dtype.count > 1 and not self._is_reg(idx):  # a global vector load (tg_cuda.devectorize: ungated)
      n, st = u.dtype.count, storage_type(u.dtype.scalar())
      raw = self.var("raw")
      self.emit(f"const tg_vec<{st}, {n}> {raw} = tg_ldv<{st}, {n}>(&{self.r[idx]});")
      return self.define(u, f"{ctype(u.dtype)}{{{{{', '.join(load_value(f'{raw}.v[{i}]', u.dtype.scalar()) for i in range(n))}}}}}")
    gates = [g for g in (self._gate(idx), self.r[u.src[2]] if len(u.src) == 3 else None) if g is not None]
    if not gates: return self.define(u, self.r[idx] if self._is_reg(idx) else load_value(self.r[idx], u.dtype))
    # NVRTC may turn `g ? p[i] : 0` into an unconditional load and a select: a masked-off index becomes 0, always in bounds
    gate = " && ".join(gates)
    addr = f"{self.r[idx.src[0]]}[{gate} ? {self.r[idx.src[1]]} : 0]"
    val = addr if self._is_reg(idx) else load_value(addr, u.dtype)
    other = self.r[u.src[1]] if len(u.src) == 3 else cconst(0, u.dtype)
    self.define(u, f"({gate} ? {val} : {other})")

  def render_store(self, u: UOp) -> None:
    idx = u.src[0]
    if idx.op is not Ops.INDEX: raise NotImplementedError(f"the CUDA renderer stores through INDEX only, got {idx.op}")
    gates = [g for g in (self._gate(idx), self.r[u.src[2]] if len(u.src) == 3 else None) if g is not None]
    if (n := u.src[1].dtype.count) > 1 and not self._is_reg(idx):  # a global vector store (tg_cuda.devectorize: ungated)
      st, dt = storage_type(u.src[1].dtype.scalar()), u.src[1].dtype.scalar()
      lanes = ", ".join(store_value(f"{self.r[u.src[1]]}.v[{i}]", dt) for i in range(n))
      return self.emit(f"tg_stv<{st}, {n}>(&{self.r[idx]}, tg_vec<{st}, {n}>{{{{{lanes}}}}});")
    val = self.r[u.src[1]] if self._is_reg(idx) else store_value(self.r[u.src[1]], u.src[1].dtype)
    st = f"{self.r[idx]} = {val};"
    self.emit(f"if ({' && '.join(gates)}) {st}" if gates else st)

# how each op that isn't ALU is rendered (ALU: render_alu; the accumulator fma: render_fma)
_UOP_TEMPLATES: dict[Ops, Callable[[_KernelWriter, UOp], None]] = {
  Ops.SINK: lambda w, u: None, Ops.GROUP: lambda w, u: None, Ops.NOOP: lambda w, u: None,
  Ops.PARAM: _KernelWriter.render_param, Ops.BUFFER: _KernelWriter.render_buffer, Ops.AFTER: lambda w, u: w.alias(u, w.r[u.src[0]]),
  Ops.CONST: _KernelWriter.render_const, Ops.STACK: _KernelWriter.render_stack, Ops.GEP: lambda w, u: w.alias(u, f"{w.r[u.src[0]]}.v[{u.arg[0]}]"),
  Ops.WMMA: _KernelWriter.render_wmma, Ops.SPECIAL: _KernelWriter.render_special, Ops.INDEX: _KernelWriter.render_index,
  Ops.LOAD: _KernelWriter.render_load, Ops.STORE: _KernelWriter.render_store,
  Ops.RANGE: _KernelWriter.render_range, Ops.END: _KernelWriter.render_end,
  Ops.IF: lambda w, u: w.open_block(f"if ({w.r[u.src[0]]}) {{"), Ops.ENDIF: lambda w, u: w.close_block(),
  Ops.BARRIER: lambda w, u: w.emit("__syncthreads();"),
  Ops.CAST: lambda w, u: w.define(u, render_cast(w.r[u.src[0]], u.src[0].dtype, u.dtype)),
  Ops.BITCAST: lambda w, u: w.define(u, render_bitcast(w.r[u.src[0]], u.src[0].dtype, u.dtype)),
}

__all__ = ["CUDARenderer", "FLAT_BLOCK", "ARCHS"]

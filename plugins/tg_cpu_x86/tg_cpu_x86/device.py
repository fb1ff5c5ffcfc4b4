"""The CPU device: host memory, the LLVM IR renderer, llvmlite's in-process compiler, a multi-core runtime and a graph for TinyJit replay."""
from __future__ import annotations
import dataclasses
import functools

from tg_core.device import Compiled, RendererCaps
from tg_core.dtype import dtypes
from tg_cpu_x86.allocator import CPUAllocator
from tg_cpu_x86.compiler import LLVMCompiler, host_target, warm_up
from tg_cpu_x86.graph import CPUGraph
from tg_cpu_x86.host import host_cache_sizes
from tg_cpu_x86.renderer import LLVMRenderer
from tg_cpu_x86.runtime import CPUProgram, max_threads, resolves

@functools.cache
def _compiler() -> LLVMCompiler: return LLVMCompiler()

@functools.cache
def host_features() -> frozenset[str]:
  """The host's CPU features as LLVM names them ("+avx2", "-avx512f", ...)."""
  return frozenset(host_target()[2].split(","))

@functools.cache
def vector_width() -> int:
  """float32 lanes per SIMD register of the host: 16 with AVX-512, 8 with AVX, else 4 (SSE)."""
  feats = host_features()
  return 16 if "+avx512f" in feats else 8 if "+avx" in feats else 4

@functools.cache
def register_tile() -> tuple[int, int]:
  """The register tile of a big matmul (output columns, rows) from the host's vector register file: two vectors of
  columns, and as many rows as leave a register for each column vector and one for the broadcast row element
  (16 registers with AVX2: 16 x 6; 32 with AVX-512: 32 x 8, rows capped at 8). A bigger tile spills accumulators
  (16 x 8 on AVX2: 25 GFLOPS at 1024^3 on one core, 16 x 6: 57)."""
  regs = 32 if "+avx512f" in host_features() else 16
  return 2 * vector_width(), min(8, (regs - 3) // 2)

@functools.cache
def _cache_sizes() -> tuple[int, ...]: return host_cache_sizes()

def _native_dtypes(base: frozenset) -> frozenset:
  """float16 is native where the host converts it in hardware (F16C: vcvtph2ps/vcvtps2ph, 8 lanes an instruction; LLVM runs half
  arithmetic in float32 and rounds back): a float16 KV cache's reads then cost one instruction per 8 values, where the core's
  emulation decodes each value's bits with ~12 integer ops. Without F16C LLVM calls library helpers for every conversion; with
  it, for double -> half only (libgcc's __truncdfhf2): where that doesn't resolve, float16 stays emulated."""
  return base | {dtypes.float16} if "+f16c" in host_features() and resolves("__truncdfhf2") else base

def _has_dpbf16() -> bool:
  """The host has vdpbf16ps in every width the renderer uses (AVX512_BF16; 8 and 4 lanes take AVX512VL's forms)."""
  return {"+avx512bf16", "+avx512vl"} <= host_features()

class HostLLVMRenderer(LLVMRenderer):
  """The LLVM renderer with the host's caps: its SIMD width, register tile and caches; the only arch it targets is the host's
  (kernels run here): DEV=CPU:LLVM:<other> is an error. Made when codegen first needs it (the device lists the class), by when
  `warm_up` has had the scheduling of the first kernels to load LLVM in. `caps.cores` is the runtime's thread count
  (`max_threads`: NUM_CPU_THREADS, or the cores this process may run on) at each read: the renderer is made once per device,
  and a Context that changes NUM_CPU_THREADS then gets kernels planned, and cached (program_key keys on caps), for its count."""
  def __init__(self) -> None:
    super().__init__()
    self.caps = dataclasses.replace(base := LLVMRenderer.caps, vector_width=vector_width(), big_reduce_tile=register_tile(), cache_sizes=_cache_sizes(),
                                    archs=(host_target()[1],), arch=host_target()[1], native_dtypes=_native_dtypes(base.native_dtypes),
                                    native_dp4a="+avx2" in host_features(),
                                    native_dpbf16=_has_dpbf16())
    feats = host_features()
    self.avx2, self.avx512, self.avx512vnni, self.avx512vl = ("+avx2" in feats, "+avx512f" in feats, "+avx512vnni" in feats,
                                                              "+avx512vl" in feats)
    self.fma = "+fma" in feats
  @property
  def caps(self) -> RendererCaps:
    if (c := self._with_cores.get(n := max_threads())) is None: c = self._with_cores[n] = dataclasses.replace(self._caps, cores=n)
    return c
  @caps.setter
  def caps(self, caps: RendererCaps) -> None:  # (select_arch, tests): the record whatever its cores; reads give the thread count's
    self._caps, self._with_cores = caps, {}
  @classmethod
  def target_name(cls) -> str: return LLVMRenderer.target_name()  # "LLVM", as DEV=CPU:LLVM names it

class CPUDevice(Compiled):
  """CPU, CPU:1, ...: every instance is the same host; different instances are separate devices to the scheduler."""
  def __init__(self, device: str):
    warm_up(_compiler())
    super().__init__(device, CPUAllocator(), [HostLLVMRenderer], _compiler(), CPUProgram, graph=CPUGraph)  # TinyJit replays through CPUGraph

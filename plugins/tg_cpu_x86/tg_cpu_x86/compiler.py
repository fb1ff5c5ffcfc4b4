"""LLVM IR text -> an x86-64 ELF object file (bytes), in-process with llvmlite's bundled LLVM: no C compiler needed.

The target machine is the host: its CPU name and features (AVX2/AVX-512 where present) come from LLVM's host detection.
`cachekey` names the LLVM version, triple, CPU, features and optimization level, so the on-disk cache of
`Compiler.compile_cached` never hands an object built for another machine or another LLVM.

`llvmlite.binding` is slow to import (its Python wrappers: most of a cold first kernel's budget): host detection and compiles
call llvmlite's library directly (`tg_cpu_x86.llvmcapi`) where its version was checked, llvmlite.binding only elsewhere (and for
the runtime's MCJIT fallback). The host facts the device's caps and the cache key need are kept in the disk cache
(`host_target`), so a process whose kernels all come from the compile cache never loads LLVM."""
from __future__ import annotations
import functools
import hashlib
import os
import threading
from types import ModuleType
from typing import Any, Callable

import llvmlite  # the version only: llvmlite/__init__.py imports nothing else

from tg_core.device import Compiler, diskcache_get, diskcache_put
from tg_core.helpers import BEAM, getenv
from tg_cpu_x86 import llvmcapi
from tg_cpu_x86.abi import kernel_work

_lock = threading.Lock()
# held while LLVM is set up (imported, host detected, target machine made): by `warm_up`'s thread, or by whoever asks first
_init_lock = threading.RLock()
_binding: ModuleType | None = None

def llvm() -> ModuleType:
  """llvmlite.binding, with the native target and asm printer initialized (imported on first use)."""
  global _binding
  if _binding is not None: return _binding
  with _init_lock:
    if _binding is None:
      import llvmlite.binding as binding
      # llvmlite >= 0.44 initializes the core itself (llvm.initialize() raises there)
      binding.initialize_native_target()
      binding.initialize_native_asmprinter()
      _binding = binding
  return _binding

_warm_thread: threading.Thread | None = None
def warm_up(compiler: LLVMCompiler) -> None:
  """Set LLVM up for `compiler` on a background thread (once per process): load LLVM (its shared library's load runs without
  the GIL), detect the host and make the target machine, while the caller builds and schedules
  its first kernels. Whatever needs LLVM before it is done waits for it (`_init_lock`). Only where the host facts aren't in the
  disk cache (a first process: it needs LLVM to detect the host anyway); elsewhere a process whose kernels all come from the
  compile cache never loads LLVM."""
  global _warm_thread
  if _warm_thread is not None or ((key := _host_key()) != ("",) and diskcache_get(HOST_TABLE, key) is not None): return
  def work() -> None:
    with _init_lock:
      host_facts()
      compiler.capi_tm if llvmcapi.available() else compiler.tm  # noqa: B018
  (_warm_thread := threading.Thread(target=work, name="tg_cpu_llvm_warm_up", daemon=True)).start()

# the disk cache table of LLVM's host detection, keyed by what it depends on (`_host_key`)
HOST_TABLE = "tg_cpu_x86_host_v2"
CPU_FIELDS = ("vendor_id", "cpu family", "model", "model name", "stepping", "microcode", "flags")

def _host_key() -> tuple[str, ...]:
  """What LLVM's host detection depends on: the CPU (cpu0's block of /proc/cpuinfo: vendor, family, model, flags), the
  LLVM build (llvmlite's version and its shared library's size and mtime) and TG_CPU_ARCH. Without /proc/cpuinfo (not
  Linux) the key can't tell CPUs apart: ("",) and nothing is cached."""
  fields: list[str] = []
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:  # cpu0's block, up to the first blank line; not the fields that change while it runs (cpu MHz)
        if not line.strip(): break
        if line.split(":", 1)[0].strip() in CPU_FIELDS: fields.append(line.strip())
  except OSError: return ("",)
  if not fields: return ("",)
  cpu = "\n".join(fields)
  lib = os.path.join(os.path.dirname(llvmlite.__file__), "binding")
  try: st = next(os.stat(os.path.join(lib, n)) for n in sorted(os.listdir(lib)) if n.startswith("libllvmlite"))
  except (OSError, StopIteration): return ("",)
  return (hashlib.sha256(cpu.encode()).hexdigest()[:32], llvmlite.__version__, f"{st.st_size}-{st.st_mtime_ns}", getenv("TG_CPU_ARCH", ""))

# the features the caps read (tg_cpu_x86.device), each with IR whose assembly for a CPU that has it contains the marker. LLVM's
# C API says which features the host has, not which a named CPU (TG_CPU_ARCH) implies; the CPU's own code says that. Plain IR
# only, no target intrinsics: one the CPU lacks would abort LLVM
_WIDE = '\nattributes #0 = { "min-legal-vector-width"="512" "prefer-vector-width"="512" }\n'
FEATURE_PROBES: dict[str, tuple[str, str]] = {
  "avx": ("define <8 x float> @f(<8 x float> %a, <8 x float> %b) #0 {\n%c = fadd <8 x float> %a, %b\nret <8 x float> %c\n}", "ymm"),
  "avx2": ("define <8 x i32> @f(<8 x i32> %a, <8 x i32> %b) #0 {\n%c = add <8 x i32> %a, %b\nret <8 x i32> %c\n}", "vpaddd\t%ymm"),
  "fma": ("declare <4 x float> @llvm.fma.v4f32(<4 x float>, <4 x float>, <4 x float>)\ndefine <4 x float> @f(<4 x float> %a, <4 x float> %b) #0 {\n"
          "%c = call <4 x float> @llvm.fma.v4f32(<4 x float> %a, <4 x float> %b, <4 x float> %a)\nret <4 x float> %c\n}", "vfmadd"),
  "f16c": ("define <4 x float> @f(<4 x half> %a) #0 {\n%c = fpext <4 x half> %a to <4 x float>\nret <4 x float> %c\n}", "vcvtph2ps"),
  "avx512f": ("define <16 x float> @f(<16 x float> %a, <16 x float> %b) #0 {\n%c = fadd <16 x float> %a, %b\nret <16 x float> %c\n}", "zmm"),
  "avx512vl": ("define <8 x float> @f(<8 x float> %a, <8 x float> %b) #0 {\n%m = fcmp olt <8 x float> %a, %b\n"
               "%c = select <8 x i1> %m, <8 x float> %a, <8 x float> zeroinitializer\nret <8 x float> %c\n}", "{%k"),
  "avx512bf16": ("define <16 x bfloat> @f(<16 x float> %a) #0 {\n%c = fptrunc <16 x float> %a to <16 x bfloat>\nret <16 x bfloat> %c\n}",
                 "vcvtneps2bf16"),
  "avx512vnni": ("declare i32 @llvm.vector.reduce.add.v64i32(<64 x i32>)\ndefine i32 @f(<64 x i8> %a, <64 x i8> %b) #0 {\n"
                 "%x = zext <64 x i8> %a to <64 x i32>\n%y = sext <64 x i8> %b to <64 x i32>\n%m = mul <64 x i32> %x, %y\n"
                 "%r = call i32 @llvm.vector.reduce.add.v64i32(<64 x i32> %m)\nret i32 %r\n}", "vpdpbusd"),
}

def arch_features(asm: Callable[[str], str]) -> str:
  """The feature string ("+avx2,-avx512f,...", FEATURE_PROBES' features only) of the CPU whose assembly `asm` (IR -> text) emits:
  what the caps of TG_CPU_ARCH's CPU read, so an explicit x86-64-v3 plans for AVX2 and not for the SSE of an empty string."""
  return ",".join(f"{'+' if marker in asm(ir + _WIDE) else '-'}{name}" for name, (ir, marker) in sorted(FEATURE_PROBES.items()))

@functools.cache
def host_facts() -> tuple[str, str, str, str]:
  """(triple, cpu name, feature string, LLVM version) of this machine, from the disk cache or LLVM's host detection."""
  with _init_lock: return _host_facts()

def _host_facts() -> tuple[str, str, str, str]:
  key = _host_key()
  if key != ("",) and isinstance(hit := diskcache_get(HOST_TABLE, key), tuple) and len(hit) == 4: return hit
  arch = getenv("TG_CPU_ARCH", "")
  if llvmcapi.available():  # the same queries without importing llvmlite.binding
    triple, ver = llvmcapi.process_triple(), llvmcapi.version()
    if arch:
      tm = llvmcapi.TargetMachine(triple, arch, "", 3)
      cpu, features = arch, arch_features(lambda ir: tm.compile(ir, 3, asm=True).decode())
    else: cpu, features = llvmcapi.host_cpu_name(), llvmcapi.host_cpu_features()
    return diskcache_put(HOST_TABLE, key, (triple, cpu, features, ver)) if key != ("",) else (triple, cpu, features, ver)
  binding = llvm()
  triple = binding.get_process_triple()
  if arch:  # an explicit CPU (e.g. x86-64-v3): its own features, as its code uses them
    tm = binding.Target.from_triple(triple).create_target_machine(cpu=arch, features="", opt=3, reloc="pic", codemodel="default", jit=False)
    def asm(ir: str) -> str:
      mod = binding.parse_assembly(ir)
      mod.triple, mod.data_layout = triple, str(tm.target_data)
      return str(tm.emit_assembly(mod))
    cpu, features = arch, arch_features(asm)
  else:
    cpu = binding.get_host_cpu_name()
    try: features = binding.get_host_cpu_features().flatten()
    except RuntimeError: features = ""  # some hosts (VMs) report no features: the CPU name alone decides
  ret = (triple, cpu, features, ".".join(map(str, binding.llvm_version_info)))
  return diskcache_put(HOST_TABLE, key, ret) if key != ("",) else ret

def host_target() -> tuple[str, str, str]:
  """(triple, cpu name, feature string) of this machine."""
  return host_facts()[:3]

def create_target_machine(opt: int = 3) -> Any:
  triple, cpu, features = host_target()
  # pic: the object is loaded at an arbitrary address by the JIT's linker
  return llvm().Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=opt, reloc="pic", codemodel="default",
                                                                 jit=False)

# The optimization level is a cost model, work x expected runs, decided in two tiers. A kernel with fewer ops than QUICK_WORK
# (the renderer's estimate in the IR header) is first compiled quick: no optimization passes, only the inliner and the backend
# at O`opt`. It runs in microseconds to a few milliseconds, and the O3 pipeline was two thirds of its compile time (a 64x64
# matmul on Zen 3: 38-40 -> 13-16 ms of CPU time, the cold first matmul's largest piece after importing llvmlite). Run often
# enough, the passes pay off (loop vectorization, unrolling, LICM: kernels of 2^16 to 2^22 ops, small convs, matvecs, LSTM
# steps, ran 1.5-2x slower without them), so the runtime compiles it again at the full level (`full_tier`) once its runs have
# cost about what that compile costs (tg_cpu_x86.runtime.UPGRADE_S), or once a graph captures it (a replay runs it many times)
# and it has at least TINY_WORK ops (below that the passes gain too little per run to pay for a compile up front).
QUICK_WORK = 1 << 22
TINY_WORK = 1 << 16
# the IR header line that asks for the full level whatever the kernel's size (`full_tier`)
FULL_TIER = "; tg tier: full\n"

def full_tier(src: str) -> str:
  """The IR `src` marked for the full optimization level (its compile is cached apart from the quick one's)."""
  return src if src.startswith(FULL_TIER) else FULL_TIER + src

def pass_level(src: str, opt: int) -> int:
  """The optimization pipeline's level for the IR `src` at O`opt`: 0 (the inliner only) for a kernel under QUICK_WORK not
  marked `full_tier`, else `opt`."""
  if src.startswith(FULL_TIER): return opt
  return 0 if (work := kernel_work(src)) is not None and work < QUICK_WORK else opt

class LLVMCompiler(Compiler):
  """IR -> object bytes at O`opt` (TG_CPU_OPT, default 3) with the host target machine; a small kernel (QUICK_WORK) is first
  compiled without the optimization passes. The level is a function of the source (`pass_level`), so the compile cache's keys
  stay valid. `quick_source(lib)` hands the runtime the IR of a quick object, to compile again at the full level."""
  def __init__(self, opt: int | None = None):
    self.opt = int(getenv("TG_CPU_OPT", 3)) if opt is None else opt
    super().__init__(cachekey=None)
    self._quick: dict[bytes, str] = {}  # quick objects -> their IR, until a program takes it (quick_source)

  @property
  def cachekey(self) -> str:  # type: ignore[override]
    """The LLVM version, host target and levels, made when first asked for (the host facts may need LLVM, see `warm_up`)."""
    if self._cachekey is None:
      triple, cpu, features, llvm_ver = host_facts()
      fh = hashlib.sha256(features.encode()).hexdigest()[:16]
      self._cachekey = f"tg_cpu_x86-llvm{llvm_ver}-llvmlite{llvmlite.__version__}-{triple}-{cpu}-{fh}-O{self.opt}-quick{QUICK_WORK}"
    return self._cachekey
  @cachekey.setter
  def cachekey(self, key: str | None) -> None: self._cachekey = key

  @functools.cached_property
  def tm(self) -> Any:
    """The host target machine, made on the first compile or by `warm_up` (it needs llvmlite.binding)."""
    with _init_lock: return self.__dict__.get("tm") or create_target_machine(self.opt)

  @functools.cached_property
  def capi_tm(self) -> llvmcapi.TargetMachine:
    """The host target machine of compiles through llvmcapi (only where `llvmcapi.available()`)."""
    with _init_lock:
      if (ret := self.__dict__.get("capi_tm")) is None:
        triple, cpu, features = host_target()
        ret = llvmcapi.TargetMachine(triple, cpu, features, self.opt)
      return ret

  def optimize(self, src: str) -> Any:
    """The parsed, verified and optimized module, through llvmlite.binding (where llvmcapi isn't available)."""
    binding = llvm()
    mod = binding.parse_assembly(src)
    mod.verify()
    triple, _, _ = host_target()
    mod.triple, mod.data_layout = triple, str(self.tm.target_data)
    if pass_level(src, self.opt) > 0:
      pto = binding.create_pipeline_tuning_options(speed_level=self.opt)
      pto.loop_vectorization = pto.slp_vectorization = pto.loop_unrolling = pto.loop_interleaving = True
      pb = binding.create_pass_builder(self.tm, pto)
      pb.getModulePassManager().run(mod, pb)
    else:
      pto = binding.create_pipeline_tuning_options(speed_level=0)
      pb = binding.create_pass_builder(self.tm, pto)
      mpm = binding.create_new_module_pass_manager()
      mpm.add_always_inliner_pass()
      mpm.run(mod, pb)
    return mod

  def compile_cached(self, src: str) -> bytes:
    # BEAM times its candidates: on the code they will run as, the full level (a quick object can rank them differently)
    if BEAM >= 1: src = full_tier(src)
    lib = super().compile_cached(src)
    if pass_level(src, self.opt) < self.opt: self._quick[lib] = src
    return lib

  def quick_source(self, lib: bytes) -> str | None:
    """The IR of `lib` if it was compiled quick (and not asked for before), else None. The caller compiles `full_tier(src)`."""
    return self._quick.pop(lib, None)

  def compile(self, src: str) -> bytes:
    with _lock:  # one target machine: keep codegen single-threaded per compiler
      # without llvmlite.binding where it can: the same calls, the same object (tests/test_llvmcapi.py)
      if llvmcapi.available(): return self.capi_tm.compile(src, pass_level(src, self.opt))
      return bytes(self.tm.emit_object(self.optimize(src)))

  def to_asm(self, src: str) -> str:
    with _lock:
      if llvmcapi.available(): return self.capi_tm.compile(src, pass_level(src, self.opt), asm=True).decode()
      return str(self.tm.emit_assembly(self.optimize(src)))

  def disassemble(self, lib: bytes) -> str | None:
    try:
      import subprocess
      import tempfile
      with tempfile.NamedTemporaryFile(suffix=".o") as f:
        f.write(lib); f.flush()  # noqa: E702
        return subprocess.run(["objdump", "-d", "--no-show-raw-insn", f.name], capture_output=True, text=True, check=True).stdout
    except Exception: return None

"""CUDA C -> a cubin (or PTX) with NVRTC through ctypes. libnvrtc comes from PyPI (`pip install tg-cuda[nvrtc]`, i.e.
nvidia-cuda-nvrtc) or a CUDA toolkit; no header is needed (the renderer includes none). GPUs and NULL:CUDA:sm_XX get a
cubin for `sm_XX` (NVRTC runs ptxas itself, so the PTX it makes is checked for that arch, and the driver needs no PTX JIT
that knows NVRTC's PTX ISA version); MOCK+CUDA gets PTX text for `compute_XX`, which the interpreter runs."""
from __future__ import annotations
import ctypes
import functools
import glob
import os
import shutil
import subprocess
import tempfile

from tg_core.device import Compiler, DeviceUnavailableError

# exact IEEE arithmetic, as the reference: no fused multiply-adds, IEEE division and square root, no flush to zero
NVRTC_FLAGS = ("--fmad=false", "--prec-div=true", "--prec-sqrt=true", "--ftz=false", "-default-device")

class NVRTCNotFoundError(DeviceUnavailableError):
  """No libnvrtc to compile CUDA C with."""

class CUDACompileError(RuntimeError):
  """NVRTC rejected a kernel: the message has its log and the source."""

def _candidates() -> list[str]:
  ret = []
  try:
    import nvidia  # the namespace package of PyPI's nvidia-cuda-nvrtc
    for d in nvidia.__path__: ret += sorted(glob.glob(os.path.join(d, "*", "lib", "libnvrtc.so*")), reverse=True)
  except ImportError: pass
  ret += sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*"), reverse=True)
  return [p for p in ret if "builtins" not in p] + ["libnvrtc.so"]

@functools.cache
def load_nvrtc() -> ctypes.CDLL:
  """libnvrtc, from PyPI's nvidia-cuda-nvrtc, a toolkit, or the library path; else NVRTCNotFoundError naming the fix."""
  errs = []
  for path in _candidates():
    try: return ctypes.CDLL(path)
    except OSError as e: errs.append(f"{path}: {e}")
  raise NVRTCNotFoundError("CUDA: NVRTC (libnvrtc.so) is not installed, so CUDA C can't be compiled. Install it with "
                           f"`pip install tg-cuda[nvrtc]` (tried {'; '.join(errs)})")

@functools.cache
def nvrtc_version() -> str:
  major, minor = ctypes.c_int(), ctypes.c_int()
  load_nvrtc().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
  return f"{major.value}.{minor.value}"

def _check(lib: ctypes.CDLL, rc: int, what: str) -> None:
  if rc != 0:
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    raise CUDACompileError(f"NVRTC {what} failed: {lib.nvrtcGetErrorString(rc).decode()} ({rc})")

def compile_cuda(src: str, arch: str, cubin: bool = False, name: str = "kernel.cu", flags: tuple[str, ...] = NVRTC_FLAGS) -> bytes:
  """A cubin for `arch` ("sm_90"; cubin=True) or PTX text for its virtual arch (compute_90) from CUDA C `src`."""
  lib = load_nvrtc()
  prog = ctypes.c_void_p()
  _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 0, None, None), "nvrtcCreateProgram")
  try:
    target = arch if cubin else f"compute_{arch.removeprefix('sm_')}"
    opts = [f"--gpu-architecture={target}".encode(), *(f.encode() for f in flags)]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value + 1)
    lib.nvrtcGetProgramLog(prog, log)
    if rc != 0:
      numbered = "\n".join(f"{i + 1:4d} {ln}" for i, ln in enumerate(src.splitlines()))
      raise CUDACompileError(f"NVRTC could not compile {name} for {target}:\n{log.value.decode(errors='replace')}\n{numbered}")
    kind = "CUBIN" if cubin else "PTX"
    _check(lib, getattr(lib, f"nvrtcGet{kind}Size")(prog, ctypes.byref(n)), f"nvrtcGet{kind}Size")
    buf = ctypes.create_string_buffer(n.value)
    _check(lib, getattr(lib, f"nvrtcGet{kind}")(prog, buf), f"nvrtcGet{kind}")
    return buf.raw if cubin else buf.value
  finally: lib.nvrtcDestroyProgram(ctypes.byref(prog))

def compile_ptx(src: str, arch: str) -> str: return compile_cuda(src, arch).decode()

class NVRTCCompiler(Compiler):
  """CUDA C -> a cubin for one arch, or (cubin=False) PTX bytes, NUL-terminated as cuModuleLoadData wants. libnvrtc loads
  on the first compile, so a renderer exists (and a compile fails with the install hint) without it."""
  def __init__(self, arch: str, cubin: bool = True):
    self.arch, self.cubin = arch, cubin
    super().__init__(cachekey=None)
  def compile_cached(self, src: str) -> bytes:
    if self.cachekey is None: self.cachekey = f"tg_cuda-nvrtc{nvrtc_version()}-{self.arch}-{'cubin' if self.cubin else 'ptx'}-{'_'.join(NVRTC_FLAGS)}"
    return super().compile_cached(src)
  def compile(self, src: str) -> bytes:
    out = compile_cuda(src, self.arch, self.cubin)
    return out if self.cubin else out + b"\0"
  def disassemble(self, lib: bytes) -> str | None: return None if self.cubin else lib.rstrip(b"\0").decode()

# *** the PTX renderer's compiler: its PTX goes to the driver as it is; compile-only targets assemble it with ptxas ***
def find_ptxas() -> str | None:
  """ptxas on PATH (a CUDA toolkit) or from PyPI's nvidia-cuda-nvcc (nvidia/<cu>/bin/ptxas); None when neither is installed."""
  if (p := shutil.which("ptxas")) is not None: return p
  try: import nvidia
  except ImportError: return None
  hits = [p for d in nvidia.__path__ for p in sorted(glob.glob(os.path.join(d, "*", "bin", "ptxas")))]
  return hits[0] if hits else None

class PTXAssembleError(RuntimeError):
  """ptxas (or, without it, the PTX interpreter's parser) rejected a kernel the PTX renderer made: the message has the log."""

def check_ptx(ptx: str, arch: str) -> None:
  """Assemble `ptx` for `arch` with ptxas (the CUDA toolkit's, or pip's nvidia-cuda-nvcc); without ptxas, parse and load it with the
  PTX interpreter, which rejects malformed PTX and instructions it does not know."""
  if (ptxas := find_ptxas()) is None:
    from tg_cuda.mock.errors import PTXError
    from tg_cuda.mock.memory import DeviceMemory
    from tg_cuda.mock.ptx_interp import load_module
    from tg_cuda.mock.ptx_parser import parse_ptx
    try: load_module(parse_ptx(ptx), DeviceMemory())
    except PTXError as e:
      raise PTXAssembleError(f"PTX for {arch} does not parse (no ptxas installed: `pip install nvidia-cuda-nvcc` checks it fully): {e}") from e
    return
  with tempfile.TemporaryDirectory() as d:
    src = os.path.join(d, "k.ptx")
    with open(src, "w") as f: f.write(ptx)
    r = subprocess.run([ptxas, f"-arch={arch}", src, "-o", os.path.join(d, "k.cubin")], capture_output=True, text=True, timeout=120)
  if r.returncode != 0:
    numbered = "\n".join(f"{i + 1:4d} {ln}" for i, ln in enumerate(ptx.splitlines()))
    raise PTXAssembleError(f"ptxas -arch={arch} rejected the PTX:\n{r.stderr}\n{numbered}")

class PTXCompiler(Compiler):
  """The PTX renderer's text -> NUL-terminated PTX bytes for cuModuleLoadData (the driver JIT on a GPU, the interpreter on MOCK+CUDA).
  check=True (NULL:PTX:sm_XX): every kernel is assembled by ptxas for the arch first (see check_ptx)."""
  def __init__(self, arch: str, check: bool):
    self.arch, self.check = arch, check
    super().__init__(cachekey=f"tg_cuda-ptx-{arch}-checked" if check else None)  # (unchecked: the identity, nothing worth caching)
  def compile(self, src: str) -> bytes:
    if self.check: check_ptx(src, self.arch)
    return src.encode() + b"\0"
  def disassemble(self, lib: bytes) -> str | None: return lib.rstrip(b"\0").decode()

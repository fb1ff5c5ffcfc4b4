"""CUDA C -> PTX with NVRTC through ctypes. libnvrtc comes from PyPI (`pip install tg-cuda[nvrtc]`, i.e. nvidia-cuda-nvrtc)
or a CUDA toolkit; no header is needed (the renderer includes none). The output is PTX text for `compute_XX` of the
target arch: the driver JIT-compiles it for the GPU (and MOCK+CUDA interprets it)."""
from __future__ import annotations
import ctypes
import functools
import glob
import os

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

def compile_ptx(src: str, arch: str, name: str = "kernel.cu", flags: tuple[str, ...] = NVRTC_FLAGS) -> str:
  """PTX for `arch` ("sm_80" -> compute_80; "sm_90a" -> compute_90a) from CUDA C `src`."""
  lib = load_nvrtc()
  prog = ctypes.c_void_p()
  _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 0, None, None), "nvrtcCreateProgram")
  try:
    opts = [f"--gpu-architecture=compute_{arch.removeprefix('sm_')}".encode(), *(f.encode() for f in flags)]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value + 1)
    lib.nvrtcGetProgramLog(prog, log)
    if rc != 0:
      numbered = "\n".join(f"{i + 1:4d} {ln}" for i, ln in enumerate(src.splitlines()))
      raise CUDACompileError(f"NVRTC could not compile {name} for {arch}:\n{log.value.decode(errors='replace')}\n{numbered}")
    _check(lib, lib.nvrtcGetPTXSize(prog, ctypes.byref(n)), "nvrtcGetPTXSize")
    buf = ctypes.create_string_buffer(n.value)
    _check(lib, lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
    return buf.value.decode()
  finally: lib.nvrtcDestroyProgram(ctypes.byref(prog))

class NVRTCCompiler(Compiler):
  """CUDA C -> PTX (bytes, NUL-terminated as cuModuleLoadData wants) for one arch. libnvrtc loads on the first compile, so
  a renderer exists (and NULL:CUDA fails with the install hint) without it."""
  def __init__(self, arch: str):
    self.arch = arch
    super().__init__(cachekey=None)
  def compile_cached(self, src: str) -> bytes:
    if self.cachekey is None: self.cachekey = f"tg_cuda-nvrtc{nvrtc_version()}-{self.arch}-{'_'.join(NVRTC_FLAGS)}"
    return super().compile_cached(src)
  def compile(self, src: str) -> bytes: return compile_ptx(src, self.arch).encode() + b"\0"
  def disassemble(self, lib: bytes) -> str | None: return lib.rstrip(b"\0").decode()

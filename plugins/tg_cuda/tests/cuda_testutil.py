"""Helpers of the tg_cuda tests: CUDA C -> PTX (NVRTC through ctypes, else nvcc), and running a kernel on MockCUDA."""
from __future__ import annotations

import ctypes
import glob
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

from tg_cuda.mock.driver import CUDA_SUCCESS, MockCUDA


def _find_nvrtc() -> str | None:
  try: import nvidia
  except ImportError: return None
  for d in nvidia.__path__:
    hits = sorted(glob.glob(os.path.join(d, "*", "lib", "libnvrtc.so*")))
    hits = [h for h in hits if "builtins" not in h]
    if hits: return hits[0]
  return None


def _fp16_include_dir() -> str | None:
  """NVRTC from PyPI ships no cuda_fp16.h: take it from PyPI's CUDA runtime headers or an installed toolkit."""
  cands = []
  try:
    import nvidia
    cands += [os.path.join(d, sub, "include") for d in nvidia.__path__ for sub in sorted(os.listdir(d))]
  except ImportError: pass
  cands += sorted(glob.glob("/usr/local/cuda*/include"))
  return next((c for c in cands if os.path.exists(os.path.join(c, "cuda_fp16.h"))), None)


NVRTC_PATH = _find_nvrtc()
FP16_INCLUDE = _fp16_include_dir()
NVCC = shutil.which("nvcc")
def _find_ptxas() -> str | None:
  """ptxas on PATH (a CUDA toolkit) or from PyPI's nvidia-cuda-nvcc (nvidia/<cu>/bin/ptxas)."""
  if shutil.which("ptxas"): return shutil.which("ptxas")
  try: import nvidia
  except ImportError: return None
  hits = [p for d in nvidia.__path__ for p in sorted(glob.glob(os.path.join(d, "*", "bin", "ptxas")))]
  return hits[0] if hits else None


PTXAS = _find_ptxas()


def _nvrtc_compile(src: str, arch: str, fast_math: bool = False, extra: tuple[str, ...] = ()) -> str:
  lib = ctypes.CDLL(NVRTC_PATH)
  prog = ctypes.c_void_p()
  assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"k.cu", 0, None, None) == 0
  opts = [f"--gpu-architecture=compute_{arch[3:]}".encode(), b"-default-device"] + ([f"-I{FP16_INCLUDE}".encode()] if FP16_INCLUDE else []) + \
    ([b"--use_fast_math"] if fast_math else []) + [e.encode() for e in extra]
  opts_arr = (ctypes.c_char_p * len(opts))(*opts)
  rc = lib.nvrtcCompileProgram(prog, len(opts), opts_arr)
  if rc != 0:
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, log)
    raise RuntimeError(f"NVRTC failed: {log.value.decode()}")
  n = ctypes.c_size_t()
  assert lib.nvrtcGetPTXSize(prog, ctypes.byref(n)) == 0
  buf = ctypes.create_string_buffer(n.value)
  assert lib.nvrtcGetPTX(prog, buf) == 0
  lib.nvrtcDestroyProgram(ctypes.byref(prog))
  return buf.value.decode()


def _nvcc_compile(src: str, arch: str, fast_math: bool = False, extra: tuple[str, ...] = ()) -> str:
  with tempfile.TemporaryDirectory() as d:
    cu, ptx = os.path.join(d, "k.cu"), os.path.join(d, "k.ptx")
    with open(cu, "w") as f: f.write(src)
    subprocess.run([NVCC, "-ptx", f"-arch={arch}", "-o", ptx, cu] + (["-use_fast_math"] if fast_math else []) + list(extra), check=True, capture_output=True)
    with open(ptx) as f: return f.read()


def cuda_to_ptx(src: str, arch: str = "sm_80", fast_math: bool = False, extra: tuple[str, ...] = ()) -> str:
  """CUDA C -> PTX the way users get it (NVRTC from PyPI's nvidia-cuda-nvrtc); nvcc when only that is installed."""
  if NVRTC_PATH and (FP16_INCLUDE or "cuda_fp16.h" not in src): return _nvrtc_compile(src, arch, fast_math, extra)
  if NVCC: return _nvcc_compile(src, arch, fast_math, extra)
  pytest.skip("neither NVRTC (pip install nvidia-cuda-nvrtc) nor nvcc is available to compile CUDA C to PTX")


def ptxas_check(ptx: str, arch: str = "sm_90") -> None:
  """Asserts ptxas accepts hand-written PTX (skips where ptxas is not installed)."""
  if PTXAS is None: return
  with tempfile.TemporaryDirectory() as d:
    p = os.path.join(d, "k.ptx")
    with open(p, "w") as f: f.write(ptx)
    r = subprocess.run([PTXAS, f"-arch={arch}", p, "-o", os.path.join(d, "k.cubin")], capture_output=True, text=True)
    assert r.returncode == 0, f"ptxas rejected the test's PTX:\n{r.stderr}"


def check(rc: int) -> None:
  assert rc == CUDA_SUCCESS, f"CUresult {rc}"


class MockGPU:
  """A context on a MockCUDA with numpy-array transfers, driven through the driver functions a runtime calls."""
  def __init__(self, arch: tuple[int, int] = (9, 0)):
    self.cu = MockCUDA(arch=arch)
    check(self.cu.cuInit(0))
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    check(self.cu.cuDeviceGet(ctypes.byref(dev), 0))
    check(self.cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev))
    self.modules: dict[str, ctypes.c_void_p] = {}

  def upload(self, a: np.ndarray) -> int:
    a = np.ascontiguousarray(a)
    p = ctypes.c_uint64()
    check(self.cu.cuMemAlloc_v2(ctypes.byref(p), max(1, a.nbytes)))
    if a.nbytes: check(self.cu.cuMemcpyHtoD_v2(p, a.ctypes.data, a.nbytes))
    return p.value

  def empty(self, nbytes: int) -> int:
    p = ctypes.c_uint64()
    check(self.cu.cuMemAlloc_v2(ctypes.byref(p), nbytes))
    check(self.cu.cuMemsetD8_v2(p, 0, nbytes))
    return p.value

  def download(self, ptr: int, shape, dtype) -> np.ndarray:
    out = np.empty(shape, dtype)
    check(self.cu.cuMemcpyDtoH_v2(out.ctypes.data, ptr, out.nbytes))
    return out

  def function(self, ptx: str, name: str) -> ctypes.c_void_p:
    """Loads the module once per PTX text (as a runtime would), then looks the kernel up."""
    if ptx not in self.modules:
      mod = ctypes.c_void_p()
      check(self.cu.cuModuleLoadData(ctypes.byref(mod), ctypes.create_string_buffer(ptx.encode())))
      self.modules[ptx] = mod
    fn = ctypes.c_void_p()
    check(self.cu.cuModuleGetFunction(ctypes.byref(fn), self.modules[ptx], name.encode()))
    return fn

  def launch(self, fn, grid, block, *args, shared: int = 0) -> None:
    """args: ctypes scalars (device pointers as ctypes.c_uint64)."""
    ptrs = (ctypes.c_void_p * max(1, len(args)))(*[ctypes.addressof(a) for a in args])
    check(self.cu.cuLaunchKernel(fn, *grid, *block, shared, None, ptrs, None))

"""The CUDA device end to end: CUDA C from the renderer, NVRTC, the driver runtime on MockCUDA (DEV=MOCK+CUDA), compile-only
NULL:CUDA:sm_XX, and the typed errors of bad setups. Values are checked against numpy."""
from __future__ import annotations
import ctypes
import os
import re
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from tg_core.device import Device
from tg_core.helpers import Context
from tg_core.tensor import Tensor
from tg_cuda import compiler as nvrtc

try:
  nvrtc.load_nvrtc()
  HAS_NVRTC = True
except nvrtc.NVRTCNotFoundError: HAS_NVRTC = False
def _has_libcuda() -> bool:
  try: ctypes.CDLL("libcuda.so.1")
  except OSError: return False
  return True
needs_nvrtc = pytest.mark.skipif(not HAS_NVRTC, reason="NVRTC is not installed (pip install tg-cuda[nvrtc])")

def _run(code: str, dev: str, **env: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "DEV": dev, **env}, timeout=300)

@pytest.fixture(scope="module")
def mock_cuda():
  with Context(DEV="MOCK+CUDA"):
    dev = Device["CUDA:5"]  # an instance of its own: opened while DEV names the MOCK interface
  assert dev.iface == "MOCK"
  return "CUDA:5"

def _t(x: np.ndarray, dev: str) -> Tensor: return Tensor(x, device=dev)

@needs_nvrtc
def test_nan_and_integer_edge_semantics(mock_cuda):
  nan, inf = np.float32(np.nan), np.float32(np.inf)
  a = np.array([1, nan, 3, -0.0, inf, nan], np.float32)
  b = np.array([nan, 2, 1, 0.0, -inf, nan], np.float32)
  np.testing.assert_array_equal(_t(a, mock_cuda).maximum(_t(b, mock_cuda)).numpy(), np.maximum(a, b))
  x = np.array([7, -7, 7, -7, -2**31, 5, 0], np.int32)
  y = np.array([2, 2, -2, -2, -1, 3, -5], np.int32)
  with np.errstate(all="ignore"): want_q, want_r = np.floor_divide(x, y), np.remainder(x, y)  # INT_MIN // -1 wraps, never traps
  np.testing.assert_array_equal((_t(x, mock_cuda) // _t(y, mock_cuda)).numpy(), want_q)
  np.testing.assert_array_equal((_t(x, mock_cuda) % _t(y, mock_cuda)).numpy(), want_r)
  f = np.array([np.nan, np.inf, -np.inf, 1e20, -1e20, 3.7, -3.7], np.float32)
  got = _t(f, mock_cuda).cast("int32").numpy()
  # NaN/inf -> 0; out of int64's range clamps to 2^63-1024 (-2^63), then wraps to int32: -1024 (0) -- the reference's rule
  want = np.array([0, 0, 0, -1024, 0, 3, -3], np.int64)
  np.testing.assert_array_equal(got, want.astype(np.int32))

@needs_nvrtc
def test_half_bfloat16_round_like_the_reference(mock_cuda):
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal(257).astype(np.float16), rng.standard_normal(257).astype(np.float16)
  np.testing.assert_array_equal((_t(a, mock_cuda) * _t(b, mock_cuda) + _t(a, mock_cuda)).numpy(), a * b + a)  # each op rounded to half
  f = rng.standard_normal(64).astype(np.float32) * 100
  bf = _t(f, mock_cuda).cast("bfloat16").cast("float32").numpy()
  u = f.view(np.uint32).astype(np.uint64)
  want = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)  # round to nearest even
  np.testing.assert_array_equal(bf, want)

@needs_nvrtc
def test_program_returns_kernel_time(mock_cuda):
  dev = Device[mock_cuda]
  assert dev.renderer.caps.arch == "sm_80" and dev.compiler.arch == "sm_80"  # the mock GPU's arch
  src = 'extern "C" __global__ void k(float* o) { o[threadIdx.x] = threadIdx.x; }'
  prg = dev.runtime(mock_cuda, "k", nvrtc.compile_ptx(src, "sm_80").encode())
  buf = dev.allocator.alloc(128)
  t = prg(buf, global_size=(1, 1, 1), local_size=(32, 1, 1), wait=True)
  assert isinstance(t, float) and t > 0
  host = memoryview(bytearray(128))
  dev.allocator._copyout(host, buf)
  np.testing.assert_array_equal(np.frombuffer(host, np.float32), np.arange(32, dtype=np.float32))

def test_no_libcuda_is_a_typed_error_naming_it():
  if _has_libcuda(): pytest.skip("libcuda.so.1 is installed here: DEV=CUDA opens the real driver")
  r = _run("from tg_core import Tensor; Tensor([1]).realize()", "CUDA")
  assert r.returncode != 0 and "DeviceUnavailableError" in r.stderr and "libcuda.so" in r.stderr and "MOCK+CUDA" in r.stderr, r.stderr
  d = subprocess.run([sys.executable, "-m", "tg_core", "doctor"], capture_output=True, text=True, env={**os.environ, "DEV": "CUDA"}, timeout=120)
  assert d.returncode != 0 and "libcuda.so" in d.stdout + d.stderr, d.stdout + d.stderr

def test_bad_interface_and_arch():
  r = _run("from tg_core import Tensor; Tensor([1]).realize()", "PCI+CUDA")
  assert r.returncode != 0 and "InterfaceUnsupportedError" in r.stderr and "MOCK" in r.stderr, r.stderr
  r = _run("from tg_core import Tensor; Tensor([1]).realize()", "NULL:CUDA:sm_42")
  assert r.returncode != 0 and "ArchUnsupportedError" in r.stderr and "sm_90" in r.stderr, r.stderr

def test_nvrtc_missing_names_the_extra(monkeypatch):
  monkeypatch.setattr(nvrtc, "_candidates", lambda: ["/nonexistent/libnvrtc.so.99"])
  nvrtc.load_nvrtc.cache_clear()
  try:
    with pytest.raises(nvrtc.NVRTCNotFoundError, match=re.escape("pip install tg-cuda[nvrtc]")): nvrtc.NVRTCCompiler("sm_80").compile("")
  finally: nvrtc.load_nvrtc.cache_clear()

@needs_nvrtc
def test_compile_error_shows_the_log():
  with pytest.raises(nvrtc.CUDACompileError, match="undefined"): nvrtc.compile_ptx('extern "C" __global__ void k() { undefined_thing(); }', "sm_80")

@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_conformance_kernels_compile_for_arch(arch, tmp_path):
  """DEV=NULL:CUDA:<arch> renders and NVRTC-compiles (to a cubin) every kernel of the conformance kit without running it (NULL computes
  nothing, so the kit's value checks fail: every failure must be such an AssertionError, never a render or compile error)."""
  env = {**os.environ, "DEV": f"NULL:CUDA:{arch}", "TG_CACHE_DIR": str(tmp_path)}
  r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--pyargs", "tg_core.testing",
                      "--tg-device=NULL"], capture_output=True, text=True, env=env, timeout=600)
  errors = set(re.findall(r"^E\s+([A-Za-z_.]*(?:Error|Exception))\b", r.stdout, re.M))
  assert errors <= {"AssertionError"}, (errors, r.stdout[-5000:])
  with sqlite3.connect(tmp_path / "cache.db") as c: rows = c.execute("SELECT cachekey, lib FROM compile_v1").fetchall()
  cubins = [lib for key, lib in rows if f"-{arch}-cubin-" in key]
  assert len(cubins) >= 200, len(cubins)  # the kit compiles ~330 kernels: NVRTC made each a cubin for arch (its ptxas accepted the PTX)
  assert all(c[:4] == b"\x7fELF" for c in cubins)

@needs_nvrtc
@pytest.mark.parametrize("opts", [[("LOCAL", 0, 4)], [("LOCAL", 1, 2), ("UPCAST", 0, 2)], [("LOCAL", 0, 2), ("LOCAL", 1, 4)]], ids=str)
def test_local_opts_launch_blocks(mock_cuda, opts):
  """LOCAL opts make lidx dims: the kernel declares its block, the runtime launches global_size blocks of local_size threads."""
  from tg_core.codegen import get_program
  from tg_core.codegen.opt import Opt, OptOps
  from tg_core.engine.realize import buffer_of
  from tg_core.schedule import create_schedule
  from tg_core.uop.ops import UOp
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((8, 12)).astype(np.float32), rng.standard_normal((12, 16)).astype(np.float32)
  items, _ = create_schedule(UOp.sink((_t(a, mock_cuda) @ _t(b, mock_cuda)).uop))
  dev = Device[mock_cuda]
  p = get_program(items[-1].ast, dev.renderer, [Opt(getattr(OptOps, o), ax, n) for o, ax, n in opts])
  assert p.local_size is not None and "threadIdx" in p.src and f"__launch_bounds__({int(np.prod(p.local_size))})" in p.src
  from tg_core.engine.realize import run_schedule
  run_schedule(items[:-1])  # the inputs' copies, if any
  bufs = [buffer_of(x) for x in items[-1].bufs]
  prg = dev.runtime(mock_cuda, p.name, dev.compiler.compile(p.src))
  prg(*[x._buf for x in bufs], global_size=tuple(p.global_size), local_size=tuple(p.local_size))
  out = memoryview(bytearray(8 * 16 * 4))
  dev.allocator._copyout(out, bufs[0]._buf)
  np.testing.assert_allclose(np.frombuffer(out, np.float32).reshape(8, 16), a @ b, rtol=1e-5, atol=1e-5)

@needs_nvrtc
def test_kernel_with_an_unused_buffer_slot(mock_cuda):
  """cat's backward slices one input's gradient out of the output's: that kernel leaves a buffer slot unused, and the
  runtime still passes every buffer by slot (a regression: the later slots shifted onto the wrong buffers)."""
  a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(12, dtype=np.float32).reshape(4, 3)
  ta, tb = Tensor(a, device=mock_cuda, requires_grad=True), Tensor(b, device=mock_cuda, requires_grad=True)
  w = np.arange(18, dtype=np.float32).reshape(6, 3)
  (ta.cat(tb) * Tensor(w, device=mock_cuda)).sum().backward()
  np.testing.assert_array_equal(ta.grad.numpy(), w[:2])
  np.testing.assert_array_equal(tb.grad.numpy(), w[2:])

"""The PTX renderer (tg_cuda.renderer_ptx): its PTX run by the interpreter on DEV=MOCK+CUDA:PTX against numpy, the edge
semantics it shares with the CUDA C renderer, and compile-only NULL:PTX:sm_XX, where ptxas assembles every kernel of the
conformance kit (and of a slice of the op-vs-torch suite) for sm_80 and sm_90. (The kit itself runs on MOCK+CUDA:PTX from
the Makefile: `pytest --pyargs tg_core.testing --tg-device=MOCK+CUDA:PTX --tg-strict-renderer`.)"""
from __future__ import annotations
import os
import re
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from tg_core.device import Device
from tg_core.dtype import dtypes
from tg_core.helpers import Context
from tg_core.tensor import Tensor
from tg_cuda.compiler import PTXAssembleError, check_ptx, find_ptxas
from tg_cuda.renderer_ptx import PTXRenderer

PTXAS = find_ptxas()
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas is not installed (a CUDA toolkit, or `pip install nvidia-cuda-nvcc`, the [test] extra)")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

@pytest.fixture(scope="module")
def dev() -> str:
  with Context(DEV="MOCK+CUDA:PTX"):
    d = Device["CUDA:6"]  # an instance of its own, opened while DEV names the MOCK interface and the PTX renderer
  assert d.iface == "MOCK" and isinstance(d.renderer, PTXRenderer)
  return "CUDA:6"

def _t(x: np.ndarray, dev: str) -> Tensor: return Tensor(x, device=dev)

def _src(t: Tensor) -> str:
  """The PTX of the last kernel that computes t."""
  from tg_core.codegen import get_program
  from tg_core.schedule import create_schedule
  from tg_core.uop.ops import UOp
  items, _ = create_schedule(UOp.sink(t.uop))
  return get_program(items[-1].ast, Device[t.device].renderer).src

def test_float_edges_follow_the_reference(dev):
  nan, inf = np.float32(np.nan), np.float32(np.inf)
  a = np.array([1, nan, 3, -0.0, inf, nan, 2], np.float32)
  b = np.array([nan, 2, 1, 0.0, -inf, nan, 2], np.float32)
  np.testing.assert_array_equal(_t(a, dev).maximum(_t(b, dev)).numpy(), np.maximum(a, b))  # NaN-propagating
  with np.errstate(all="ignore"):
    np.testing.assert_array_equal((_t(a, dev) / _t(b, dev)).numpy(), a / b)
    np.testing.assert_array_equal(_t(a, dev).sqrt().numpy(), np.sqrt(a))
    np.testing.assert_array_equal(_t(a, dev).reciprocal().numpy(), np.reciprocal(a))
  np.testing.assert_array_equal((_t(a, dev) != _t(b, dev)).numpy(), a != b)
  np.testing.assert_array_equal((_t(a, dev) < _t(b, dev)).numpy(), a < b)
  f = np.array([np.nan, np.inf, -np.inf, 1e20, -1e20, 3.7, -3.7], np.float32)
  # NaN/inf -> 0; out of int64's range clamps to 2^63-1024 (-2^63), then wraps to int32: -1024 (0) -- the reference's rule
  np.testing.assert_array_equal(_t(f, dev).cast(dtypes.int32).numpy(), np.array([0, 0, 0, -1024, 0, 3, -3], np.int32))
  np.testing.assert_array_equal(_t(f, dev).cast(dtypes.int8).numpy(), np.array([0, 0, 0, 0, 0, 3, -3], np.int8))
  np.testing.assert_array_equal(_t(f, dev).cast(dtypes.bool).numpy(), f != 0)

@pytest.mark.parametrize("dt", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64], ids=lambda d: np.dtype(d).name)
def test_integer_edges_follow_the_reference(dev, dt):
  """Wrapping add/sub/mul in every width (8/16-bit values live in 32-bit registers), floor division and modulo incl. INT_MIN / -1,
  max, shifts up to the width - 1."""
  info = np.iinfo(dt)
  neg1 = info.max if info.min == 0 else -1
  x = np.array([7, info.max, 7, info.min, info.min, 5, 0, info.max, 3, info.max], dt)
  y = np.array([2, 3, neg1, neg1, 1, 3, 5, 2, info.max, info.max], dt)
  tx, ty = _t(x, dev), _t(y, dev)
  with np.errstate(all="ignore"):
    np.testing.assert_array_equal((tx // ty).numpy(), np.floor_divide(x, y))
    np.testing.assert_array_equal((tx % ty).numpy(), np.remainder(x, y))
    np.testing.assert_array_equal((tx * ty).numpy(), x * y)
    np.testing.assert_array_equal((tx + ty).numpy(), x + y)
    np.testing.assert_array_equal((tx - ty).numpy(), x - y)
    np.testing.assert_array_equal(tx.maximum(ty).numpy(), np.maximum(x, y))
    # a wrapped value used again in the same kernel (compared, widened, divided): the register must hold the wrapped value
    np.testing.assert_array_equal(((tx + ty) < tx).numpy(), (x + y) < x)
    np.testing.assert_array_equal((tx * ty).cast(dtypes.int64).numpy(), (x * y).astype(np.int64))
    np.testing.assert_array_equal(((tx + ty) >> _t(np.ones_like(x), dev)).numpy(), (x + y) >> np.ones_like(x))
    np.testing.assert_array_equal((-tx).numpy() if info.min < 0 else (tx ^ ty).numpy(), -x if info.min < 0 else x ^ y)
  bits = 8 * np.dtype(dt).itemsize
  sh = np.array([0, 1, bits - 1, 3, 2, 1, 0, bits - 1, 1, bits - 2], dt)
  np.testing.assert_array_equal((tx << _t(sh, dev)).numpy(), x << sh)
  np.testing.assert_array_equal((tx >> _t(sh, dev)).numpy(), x >> sh)
  np.testing.assert_array_equal(tx.cast(dtypes.float32).numpy(), x.astype(np.float32))
  np.testing.assert_array_equal(tx.cast(dtypes.int8).numpy(), x.astype(np.int8))
  np.testing.assert_array_equal(tx.cast(dtypes.uint64).numpy(), x.astype(np.uint64))

def test_half_bfloat16_round_after_every_op(dev):
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal(257).astype(np.float16), rng.standard_normal(257).astype(np.float16)
  np.testing.assert_array_equal((_t(a, dev) * _t(b, dev) + _t(a, dev)).numpy(), a * b + a)
  f = rng.standard_normal(64).astype(np.float32) * 100
  u = f.view(np.uint32).astype(np.uint64)
  want = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)  # round to nearest even
  np.testing.assert_array_equal(_t(f, dev).cast(dtypes.bfloat16).cast(dtypes.float32).numpy(), want)
  np.testing.assert_array_equal(_t(a, dev).bitcast(dtypes.uint16).numpy(), a.view(np.uint16))

def test_transcendentals_are_accurate_not_approx(dev):
  x = np.linspace(-30, 30, 301).astype(np.float32)
  t = _t(x, dev)
  np.testing.assert_allclose(t.exp2().numpy(), np.exp2(x), rtol=2e-6)
  np.testing.assert_allclose(t.sin().numpy(), np.sin(x), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(t.abs().add(1e-3).log2().numpy(), np.log2(np.abs(x) + np.float32(1e-3)), rtol=1e-6, atol=1e-6)
  src = _src(t.exp2() + t.sin() + t.sqrt())
  assert ".approx" not in src and "sqrt.rn.f32" in src

def test_matmul_local_opts_shared_memory_and_source(dev):
  """LOCAL opts make a block; the kernel declares it in .maxntid; a reduction in registers uses .local and fma.rn."""
  from tg_core.codegen import get_program
  from tg_core.codegen.opt import Opt, OptOps
  from tg_core.engine.realize import buffer_of, run_schedule
  from tg_core.schedule import create_schedule
  from tg_core.uop.ops import UOp
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((8, 12)).astype(np.float32), rng.standard_normal((12, 16)).astype(np.float32)
  items, _ = create_schedule(UOp.sink((_t(a, dev) @ _t(b, dev)).uop))
  d = Device[dev]
  p = get_program(items[-1].ast, d.renderer, [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.UPCAST, 0, 2)])
  assert p.local_size is not None and f".maxntid {int(np.prod(p.local_size))}, 1, 1" in p.src and "%tid." in p.src
  run_schedule(items[:-1])
  bufs = [buffer_of(x) for x in items[-1].bufs]
  prg = d.runtime(dev, p.name, d.compiler.compile(p.src))
  prg(*[x._buf for x in bufs], global_size=tuple(p.global_size), local_size=tuple(p.local_size))
  out = memoryview(bytearray(8 * 16 * 4))
  d.allocator._copyout(out, bufs[0]._buf)
  np.testing.assert_allclose(np.frombuffer(out, np.float32).reshape(8, 16), a @ b, rtol=1e-5, atol=1e-5)

def test_random_and_threefry(dev):
  Tensor.manual_seed(7)
  x = Tensor.rand(1000, device=dev).numpy()
  Tensor.manual_seed(7)
  y = Tensor.rand(1000, device="PYTHON").numpy()
  np.testing.assert_array_equal(x, y)  # threefry bit for bit against the reference

@needs_ptxas
def test_bad_ptx_is_a_typed_error_with_the_log():
  bad = ".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry k() { bogus.op; }"
  with pytest.raises(PTXAssembleError, match="ptxas -arch=sm_90"): check_ptx(bad, "sm_90")

def test_without_ptxas_the_interpreter_parser_checks(monkeypatch):
  import tg_cuda.compiler as comp
  monkeypatch.setattr(comp, "find_ptxas", lambda: None)
  with pytest.raises(PTXAssembleError, match="does not parse.*nvidia-cuda-nvcc"):
    check_ptx(".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry k() { bogus.op; }", "sm_90")

def test_unknown_arch_is_a_typed_error():
  r = subprocess.run([sys.executable, "-c", "from tg_core import Tensor; Tensor([1]).realize()"], capture_output=True, text=True, timeout=120,
                     env={**os.environ, "DEV": "NULL:PTX:sm_42"})
  assert r.returncode != 0 and "ArchUnsupportedError" in r.stderr and "sm_90" in r.stderr, r.stderr[-2000:]

def _kernels_compile(dev_env: str, tmp_path, args: list[str]) -> int:
  """Run pytest `args` with DEV=dev_env (a NULL target: results are not computed, so value checks fail with AssertionError, and
  every other error is a render or compile failure); return the number of kernels the PTX compiler checked."""
  env = {**os.environ, "DEV": dev_env, "TG_CACHE_DIR": str(tmp_path)}
  r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *args], capture_output=True, text=True, env=env,
                     timeout=900, cwd=REPO)
  errors = set(re.findall(r"^E\s+([A-Za-z_.]*(?:Error|Exception))\b", r.stdout, re.M))
  assert errors <= {"AssertionError"}, (errors, r.stdout[-5000:])
  assert r.returncode in (0, 1), (r.returncode, r.stdout[-3000:], r.stderr[-3000:])  # 1: tests failed (NULL computes nothing); else it broke
  with sqlite3.connect(tmp_path / "cache.db") as c: rows = c.execute("SELECT cachekey FROM compile_v1").fetchall()
  return sum(1 for (key,) in rows if key.startswith("tg_cuda-ptx-") and key.endswith("-checked"))

@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_conformance_kernels_assemble_with_ptxas(arch, tmp_path):
  """DEV=NULL:PTX:<arch> renders every kernel of the conformance kit and `ptxas -arch=<arch>` assembles it."""
  assert _kernels_compile(f"NULL:PTX:{arch}", tmp_path, ["--pyargs", "tg_core.testing", "--tg-device=NULL"]) >= 200  # the kit makes ~330

@needs_ptxas
def test_op_suite_slice_assembles_with_ptxas(tmp_path):
  """A slice of the op-vs-torch suite (indexing: gathers, scatters, gated loads) under DEV=NULL:PTX:sm_90: every kernel
  assembles. (The whole suite, ~1300 tests, does too -- see the README -- but takes ~10 minutes on 2 cores.)"""
  assert _kernels_compile("NULL:PTX:sm_90", tmp_path, [os.path.join(REPO, "tests", "test_ops_indexing.py")]) >= 30

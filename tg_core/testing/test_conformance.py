"""Conformance tests for a device (see tg_core/testing/__init__.py). Every value is checked against numpy."""
from __future__ import annotations
import subprocess
import sys
from typing import Any, Callable

import numpy as np
import pytest

from tg_core.device import Device
from tg_core.dtype import DType, _to_np_dtype, dtypes
from tg_core.tensor import Tensor

ALL_DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64,
              dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64, dtypes.fp8e4m3, dtypes.fp8e5m2]
NP_DTYPES = [d for d in ALL_DTYPES if _to_np_dtype(d) is not None]
INT_DTYPES = [d for d in NP_DTYPES if dtypes.is_int(d)]
FLOAT_DTYPES = [dtypes.float16, dtypes.float32, dtypes.float64]

def need(tg_device: str, feature: str) -> None:
  reason = Device[tg_device].unsupported.get(feature)
  if reason: pytest.skip(f"{tg_device} declares no support for {feature}: {reason}")
def need_dtype(tg_device: str, dt: DType) -> None:
  from tg_core.codegen.dtype_emulation import EMULATABLE
  # a dtype the renderer lacks but the core emulates (float16, bfloat16, fp8) must work too
  if dt not in Device[tg_device].renderer.caps.native_dtypes and dt not in EMULATABLE: pytest.skip(f"{tg_device} declares no support for {dt}")

def rand_np(shape: tuple[int, ...], dt: DType, seed: int = 0, low: float = -3, high: float = 3) -> np.ndarray:
  rng = np.random.default_rng(seed)
  npdt = _to_np_dtype(dt)
  if dt == dtypes.bool: return rng.random(shape) > 0.5
  if dtypes.is_int(dt):
    info = np.iinfo(npdt)
    return rng.integers(max(info.min, -100), min(info.max, 100), size=shape, endpoint=True).astype(npdt)
  return rng.uniform(low, high, size=shape).astype(npdt)

def tol(dt: DType) -> dict[str, float]:
  return {dtypes.float16: {"rtol": 2e-3, "atol": 2e-3}, dtypes.float32: {"rtol": 1e-5, "atol": 1e-6},
          dtypes.float64: {"rtol": 1e-12, "atol": 1e-12}}.get(dt, {"rtol": 0, "atol": 0})

def check(got: Tensor, want: np.ndarray, dt: DType | None = None, **kw: float) -> None:
  assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
  g = got.numpy()
  if g.dtype == np.bool_ or want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer): np.testing.assert_array_equal(g, want)
  else: np.testing.assert_allclose(g.astype(np.float64), want.astype(np.float64), equal_nan=True, **(kw or tol(dt or dtypes.float32)))

# *** every dtype x elementwise ***
BINARY: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any]]] = {
  "add": (lambda a, b: a + b, np.add), "mul": (lambda a, b: a * b, np.multiply), "max": (lambda a, b: a.maximum(b), np.maximum),
  "lt": (lambda a, b: a < b, np.less), "eq": (lambda a, b: a == b, np.equal), "ne": (lambda a, b: a != b, np.not_equal)}

@pytest.mark.parametrize("dt", NP_DTYPES, ids=str)
@pytest.mark.parametrize("op", list(BINARY))
def test_binary(tg_device: str, dt: DType, op: str) -> None:
  need_dtype(tg_device, dt)
  a, b = rand_np((7, 9), dt, 1), rand_np((7, 9), dt, 2)
  tf, nf = BINARY[op]
  with np.errstate(over="ignore"): want = nf(a, b)
  check(tf(Tensor(a, device=tg_device), Tensor(b, device=tg_device)), want, dt)

@pytest.mark.parametrize("dt", INT_DTYPES, ids=str)
@pytest.mark.parametrize("op", ["and", "or", "xor", "sub", "neg_or_invert"])
def test_int_ops(tg_device: str, dt: DType, op: str) -> None:
  need_dtype(tg_device, dt)
  a, b = rand_np((5, 6), dt, 3), rand_np((5, 6), dt, 4)
  ta, tb = Tensor(a, device=tg_device), Tensor(b, device=tg_device)
  with np.errstate(over="ignore"):
    got, want = {"and": (ta & tb, a & b), "or": (ta | tb, a | b), "xor": (ta ^ tb, a ^ b), "sub": (ta - tb, a - b),
                 "neg_or_invert": (~ta, ~a)}[op]
  check(got, want, dt)

@pytest.mark.parametrize("dt", INT_DTYPES, ids=str)
def test_int_division_and_modulo(tg_device: str, dt: DType) -> None:
  need_dtype(tg_device, dt)
  a = rand_np((40,), dt, 5)
  b = rand_np((40,), dt, 6)
  b = np.where(b == 0, 1, b).astype(a.dtype)
  ta, tb = Tensor(a, device=tg_device), Tensor(b, device=tg_device)
  check(ta // tb, np.floor_divide(a, b), dt)
  check(ta % tb, np.mod(a, b), dt)

UNARY: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray], float, float]] = {
  "exp": (Tensor.exp, np.exp, -4, 4), "log": (Tensor.log, np.log, 0.01, 10), "sin": (Tensor.sin, np.sin, -10, 10),
  "sqrt": (Tensor.sqrt, np.sqrt, 0, 10), "reciprocal": (Tensor.reciprocal, np.reciprocal, 0.1, 5), "exp2": (Tensor.exp2, np.exp2, -5, 5),
  "log2": (Tensor.log2, np.log2, 0.1, 9), "neg": (Tensor.neg, np.negative, -3, 3), "relu": (Tensor.relu, lambda x: np.maximum(x, 0), -3, 3)}

@pytest.mark.parametrize("dt", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("op", list(UNARY))
def test_unary_float(tg_device: str, dt: DType, op: str) -> None:
  need_dtype(tg_device, dt)
  tf, nf, lo, hi = UNARY[op]
  a = rand_np((33,), dt, 7, lo, hi)
  want = nf(a.astype(np.float64)).astype(a.dtype)
  check(tf(Tensor(a, device=tg_device)), want, dt)

def test_nan_inf_semantics(tg_device: str) -> None:
  x = np.array([np.nan, 1.0, 2.0, -1.0, np.inf, -np.inf, 0.0, -0.0], dtype=np.float32)
  t = Tensor(x, device=tg_device)
  check(t < 1, x < 1); check(t > 1, x > 1); check(t == 1, x == 1); check(t != 1, x != 1)  # noqa: E702
  check((t < 1).where(Tensor.ones(8, device=tg_device), Tensor.zeros(8, device=tg_device)), np.where(x < 1, 1.0, 0.0).astype(np.float32))
  check(t.maximum(0), np.maximum(x, 0))
  with np.errstate(invalid="ignore"): check(t * 0, x * 0)
  with np.errstate(all="ignore"):
    check(t.reciprocal(), np.reciprocal(x))
    check(t.log(), np.log(x))
    check(t.exp(), np.exp(x))
  check(t.max(), np.array(np.nan, dtype=np.float32))

# *** casts and bitcasts ***
@pytest.mark.parametrize("src", NP_DTYPES, ids=str)
@pytest.mark.parametrize("dst", NP_DTYPES, ids=str)
def test_cast(tg_device: str, src: DType, dst: DType) -> None:
  need_dtype(tg_device, src); need_dtype(tg_device, dst)  # noqa: E702
  a = rand_np((17,), src, 8, -100, 100)
  if dtypes.is_float(src) and dtypes.is_int(dst):
    lo, hi = (0, 100) if dtypes.is_unsigned(dst) else (-100, 100)
    a = np.clip(a, lo, min(hi, np.iinfo(_to_np_dtype(dst)).max)).astype(a.dtype)
  if dtypes.is_int(src) and dtypes.is_unsigned(dst): a = np.abs(a).astype(a.dtype)
  with np.errstate(all="ignore"): want = a.astype(_to_np_dtype(dst))
  check(Tensor(a, device=tg_device).cast(dst), want, dst)

@pytest.mark.parametrize("pair", [(dtypes.float32, dtypes.int32), (dtypes.int32, dtypes.float32), (dtypes.float32, dtypes.uint32),
                                  (dtypes.float16, dtypes.int16), (dtypes.int64, dtypes.float64), (dtypes.uint8, dtypes.int8)], ids=str)
def test_bitcast(tg_device: str, pair: tuple[DType, DType]) -> None:
  src, dst = pair
  need_dtype(tg_device, src); need_dtype(tg_device, dst)  # noqa: E702
  a = rand_np((13,), src, 9)
  check(Tensor(a, device=tg_device).bitcast(dst), a.view(_to_np_dtype(dst)), dst)

@pytest.mark.parametrize("pair", [(dtypes.uint16, dtypes.uint32), (dtypes.uint8, dtypes.float32), (dtypes.float32, dtypes.uint8),
                                  (dtypes.int32, dtypes.float16), (dtypes.float64, dtypes.int32), (dtypes.int8, dtypes.int64),
                                  (dtypes.int64, dtypes.int16)], ids=str)
def test_bitcast_resize(tg_device: str, pair: tuple[DType, DType]) -> None:
  """A bitcast to another element size reads the same bytes (numpy's view): the last dimension scales by the size ratio.
  Random bytes, compared byte for byte; where the result is a float NaN only its NaN-ness (a device that carries half values in
  float registers, as CUDA's C++ renderer does, quiets a signaling NaN when it stores it: its value is still NaN)."""
  src, dst = pair
  need_dtype(tg_device, src); need_dtype(tg_device, dst)  # noqa: E702
  a = np.random.default_rng(11).integers(0, 256, size=(3, 16), dtype=np.uint8).view(_to_np_dtype(src))
  got, want = Tensor(a, device=tg_device).bitcast(dst).numpy(), a.view(_to_np_dtype(dst))
  assert got.shape == want.shape
  nan = np.isnan(want) if dtypes.is_float(dst) else np.zeros(want.shape, bool)
  assert np.array_equal(np.isnan(got), nan) if dtypes.is_float(dst) else True
  assert got[~nan].tobytes() == want[~nan].tobytes()

def test_bfloat16_roundtrip(tg_device: str) -> None:
  need_dtype(tg_device, dtypes.bfloat16)
  a = rand_np((64,), dtypes.float32, 10, -1e3, 1e3)
  bits = (a.view(np.uint32) + 0x7FFF + ((a.view(np.uint32) >> 16) & 1)) >> 16  # round to nearest even
  want = (bits << 16).astype(np.uint32).view(np.float32)
  check(Tensor(a, device=tg_device).cast(dtypes.bfloat16).cast(dtypes.float32), want, rtol=0, atol=0)

# *** reduce ***
@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.float32, dtypes.float16, dtypes.int64, dtypes.uint8], ids=str)
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2)])
def test_reduce(tg_device: str, dt: DType, axis: Any) -> None:
  need_dtype(tg_device, dt)
  a = rand_np((5, 7, 3), dt, 11)
  t = Tensor(a, device=tg_device)
  check(t.max(axis), a.max(axis), dt)
  check(t.min(axis), a.min(axis), dt)
  if dtypes.is_float(dt): check(t.sum(axis), a.astype(np.float64).sum(axis).astype(a.dtype), dt, rtol=1e-2 if dt == dtypes.float16 else 1e-5, atol=1e-2)

# *** movement ***
def test_movement_chain(tg_device: str) -> None:
  a = rand_np((4, 5, 6), dtypes.float32, 12)
  t = Tensor(a, device=tg_device)
  got = t.permute(2, 0, 1).pad(((1, 0), (0, 2), (1, 1))).flip(1).shrink(((0, 5), (1, 6), (0, 5))).reshape(5, 5, 5, 1).expand(5, 5, 5, 2)
  want = np.broadcast_to(np.flip(np.pad(a.transpose(2, 0, 1), ((1, 0), (0, 2), (1, 1))), 1)[0:5, 1:6, 0:5].reshape(5, 5, 5, 1), (5, 5, 5, 2))
  check(got, want)

# *** matmul and convolution ***
@pytest.mark.parametrize("mkn", [(1, 1, 1), (2, 3, 4), (7, 13, 5), (17, 31, 23), (64, 64, 64), (3, 257, 2), (31, 1, 37)], ids=str)
def test_matmul(tg_device: str, mkn: tuple[int, int, int]) -> None:
  m, k, n = mkn
  a, b = rand_np((m, k), dtypes.float32, 13), rand_np((k, n), dtypes.float32, 14)
  check(Tensor(a, device=tg_device) @ Tensor(b, device=tg_device), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)

def _conv_ref(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
  x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))).astype(np.float64)
  n, c, h, wd = x.shape
  co, _, kh, kw = w.shape
  oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
  out = np.zeros((n, co, oh, ow))
  for i in range(kh):
    for j in range(kw):
      patch = x[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
      out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
  return out

@pytest.mark.parametrize("cfg", [(1, 1, 5, 5, 1, 3, 1, 0), (2, 3, 7, 9, 4, 3, 1, 1), (1, 2, 11, 11, 3, 5, 2, 2), (2, 4, 8, 8, 8, 1, 1, 0)], ids=str)
def test_conv2d(tg_device: str, cfg: tuple[int, ...]) -> None:
  n, c, h, w_, co, k, stride, pad = cfg
  x, w = rand_np((n, c, h, w_), dtypes.float32, 15), rand_np((co, c, k, k), dtypes.float32, 16)
  check(Tensor(x, device=tg_device).conv2d(Tensor(w, device=tg_device), stride=stride, padding=pad), _conv_ref(x, w, stride, pad), rtol=1e-4, atol=1e-4)

# *** indexing, gather, scatter ***
def test_indexing(tg_device: str) -> None:
  a = rand_np((6, 5), dtypes.float32, 17)
  t = Tensor(a, device=tg_device)
  check(t[1:5:2, ::-1], a[1:5:2, ::-1])
  idx = np.array([4, 0, 2, 2], dtype=np.int32)
  check(t[Tensor(idx, device=tg_device)], a[idx])
  check(Tensor([10, 20, 30, 40], device=tg_device)[Tensor([1, 2, 3, 0], dtype=dtypes.uint8, device=tg_device)], np.array([20, 30, 40, 10], dtype=np.int32))

def test_gather_scatter(tg_device: str) -> None:
  a = rand_np((4, 6), dtypes.float32, 18)
  idx = np.random.default_rng(0).integers(0, 6, size=(4, 3)).astype(np.int32)
  check(Tensor(a, device=tg_device).gather(1, Tensor(idx, device=tg_device)), np.take_along_axis(a, idx, 1))
  src = rand_np((4, 3), dtypes.float32, 19)
  uidx = np.stack([np.random.default_rng(i).permutation(6)[:3] for i in range(4)]).astype(np.int32)
  want = a.copy()
  np.put_along_axis(want, uidx, src, 1)
  check(Tensor(a, device=tg_device).scatter(1, Tensor(uidx, device=tg_device), Tensor(src, device=tg_device)), want)

# *** random ***
def test_random_reproducible(tg_device: str) -> None:
  Tensor.manual_seed(1234)
  x = Tensor.rand(1000, device=tg_device).numpy()
  Tensor.manual_seed(1234)
  y = Tensor.rand(1000, device=tg_device).numpy()
  np.testing.assert_array_equal(x, y)
  assert 0 <= x.min() and x.max() < 1 and 0.4 < x.mean() < 0.6

# *** copies between devices ***
def test_copy_between_devices(tg_device: str) -> None:
  need(tg_device, "multi_device")
  a = rand_np((3, 4), dtypes.float32, 20)
  base = tg_device.split(":")[0]
  t = Tensor(a, device=f"{base}:1") + 1
  check(t.to(tg_device) * 2, (a + 1) * 2)
  check(Tensor(a, device=tg_device).to("PYTHON"), a)
  check(Tensor(a, device="PYTHON").to(tg_device), a)

# *** multi-device tensors: two instances of the device, sharded (tg_core/schedule/multi.py) ***
def _two_instances(tg_device: str) -> tuple[str, str]:
  need(tg_device, "multi_device")
  from tg_core.device import DeviceError
  base = tg_device.split(":")[0]
  try: Device[f"{base}:1"]
  except DeviceError as e: pytest.skip(f"{tg_device} can't open a second instance {base}:1: {e}")
  return Device.canonicalize(base), Device.canonicalize(f"{base}:1")

@pytest.mark.parametrize("ring", [0, 2])
def test_multi_device_shard_and_allreduce(tg_device: str, ring: int) -> None:
  from tg_core.helpers import Context
  devs = _two_instances(tg_device)
  a, b = rand_np((5, 6), dtypes.float32, 21), rand_np((6, 3), dtypes.float32, 22)
  with Context(ALLREDUCE_RING=ring):
    for axis in (0, 1):
      t = Tensor(a).shard(devs, axis)
      assert t.device == devs
      check(t * 2 + 1, a * 2 + 1)
      check(t.sum(axis), a.sum(axis), rtol=1e-5, atol=1e-5)
      check(t.max(1 - axis), a.max(1 - axis))
    check(Tensor(a).shard(devs, 1) @ Tensor(b).shard(devs, 0), a @ b, rtol=1e-5, atol=1e-5)  # sharded on K: an ALLREDUCE

def test_multi_device_jit_replay(tg_device: str) -> None:
  from tg_core.engine.jit import TinyJit
  devs = _two_instances(tg_device)
  w = rand_np((4, 3), dtypes.float32, 23)
  tw = Tensor(w).shard(devs).realize()
  step = TinyJit(lambda x: (x @ tw).sum(0).realize())
  for i in range(4):
    x = rand_np((6, 4), dtypes.float32, 30 + i)
    check(step(Tensor(x).shard(devs, 0)), (x @ w).sum(0), rtol=1e-5, atol=1e-5)

# *** large buffers and many kernels ***
def test_buffer_over_1gib(tg_device: str) -> None:
  need(tg_device, "large_buffers")
  n = (1 << 30) + 4096
  t = (Tensor.full((n,), 3, dtype=dtypes.uint8, device=tg_device) + 1).realize()
  tail = t.shrink(((n - 5, n),)).numpy()
  np.testing.assert_array_equal(tail, np.full(5, 4, dtype=np.uint8))

def test_many_small_kernels(tg_device: str) -> None:
  t = Tensor.zeros(4, device=tg_device).contiguous().realize()
  for _ in range(200): t = (t + 1).realize()
  check(t, np.full(4, 200, dtype=np.float32))

# *** plugin hygiene of the device's provider ***
def test_plugin_hygiene(tg_device: str) -> None:
  from tg_core.plugins.discovery import registry
  registry.ensure_loaded()
  name = tg_device.split(":")[0]
  claims = registry.devices.get(name)
  assert claims, f"device {name} is not registered through a plugin manifest"
  spec, rec = claims[0]
  assert rec.api is not None, f"{rec.dist} declares no tg_api"
  assert rec.status == "ok", f"{rec.dist}: {rec.reason}"
  impl_module = spec.factory.split(":")[0]
  code = (f"import sys, tg_core; before = set(sys.modules); import importlib; importlib.import_module({rec.module!r}); "
          f"new = set(sys.modules) - before; print(sorted(new)); assert {impl_module!r} not in new, 'manifest imported the implementation'")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
  assert out.returncode == 0, out.stderr
  heavy = [m for m in eval(out.stdout.strip().splitlines()[-1]) if m.split(".")[0] in {"llvmlite", "torch", "onnx", "ctypes", "cffi"}]
  assert not heavy, f"manifest {rec.module} imports heavy modules: {heavy}"

"""The LLVM renderer on the ops where C/LLVM semantics and tg's differ: every program runs on the CPU backend and on
tg_core's PYTHON reference interpreter, and the results must agree bit for bit (and with numpy where it applies)."""
from __future__ import annotations
import os
import subprocess
import sys

import numpy as np
import pytest
from cpu_testutil import c, compile_cpu, elementwise, param, rng, run_cpu, run_python, same, var

from tg_core.codegen.linearize import linearize
from tg_core.dtype import DType, _to_np_dtype, dtypes
from tg_core.runtime.ops_python import threefry2x32
from tg_core.uop import Ops
from tg_core.uop.ops import AxisType, KernelInfo, UOp

INTS = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64]
FLOATS = [dtypes.float32, dtypes.float64]

def both(uops: list[UOp], out_dt: DType, n: int, ins: list[np.ndarray], vals: tuple[int, ...] = ()) -> np.ndarray:
  got, want = run_cpu(uops, (out_dt, n), ins, vals), run_python(uops, (out_dt, n), ins, vals)
  same(got, want)
  return got

def binop(op: Ops, dt: DType, a: np.ndarray, b: np.ndarray, out_dt: DType | None = None) -> np.ndarray:
  odt = out_dt or dt
  uops = elementwise(lambda x, y: UOp(op, odt, (x, y)), [dt, dt], odt, len(a))
  return both(uops, odt, len(a), [a, b])

@pytest.mark.parametrize("dt", INTS, ids=str)
def test_int_div_mod_by_zero_and_overflow(dt: DType) -> None:
  npdt = _to_np_dtype(dt)
  info = np.iinfo(npdt)
  av = [7, 7, 0, 5, info.max, info.min, info.min, 3, 100, info.max]
  bv = [2, 0, 0, 0, 0, 0, 1, 1, 7, 3]
  if info.min < 0: av, bv = av + [-7, 7, -7, info.min, info.min, -1], bv + [2, -2, -2, -1, 0, -1]
  a, b = np.array(av, dtype=npdt), np.array(bv, dtype=npdt)
  q, m = binop(Ops.IDIV, dt, a, b), binop(Ops.MOD, dt, a, b)
  nz = b != 0
  assert (q[~nz] == 0).all() and (m[~nz] == a[~nz]).all()  # x/0 = 0 and x%0 = x, never a trap
  # C semantics: truncating quotient, remainder with the dividend's sign (INT_MIN / -1 wraps)
  want_q = np.array([(abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1) if y else 0 for x, y in zip(av, bv)], dtype=object)
  ok = nz & ~((a == info.min) & (b.astype(np.int64) == -1) if info.min < 0 else np.zeros_like(nz))
  np.testing.assert_array_equal(q[ok].astype(object), want_q[ok])
  np.testing.assert_array_equal(m[ok].astype(object), (a[ok].astype(object) - want_q[ok] * b[ok].astype(object)))

@pytest.mark.parametrize("dt", INTS, ids=str)
def test_int_div_by_constant(dt: DType) -> None:
  npdt = _to_np_dtype(dt)
  a = np.random.default_rng(0).integers(max(np.iinfo(npdt).min, -1000), min(np.iinfo(npdt).max, 1000), size=64).astype(npdt)
  for d in (3, 7, 1):
    for op in (Ops.IDIV, Ops.MOD):
      uops = elementwise(lambda x, op=op, d=d: UOp(op, dt, (x, c(d, dt))), [dt], dt, len(a))
      both(uops, dt, len(a), [a])
  # constant 0 and -1 divisors take the guarded path
  for d in (0, -1) if not dtypes.is_unsigned(dt) else (0,):
    for op in (Ops.IDIV, Ops.MOD):
      uops = elementwise(lambda x, op=op, d=d: UOp(op, dt, (x, c(d, dt))), [dt], dt, len(a))
      both(uops, dt, len(a), [a])

@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_max_propagates_nan(dt: DType) -> None:
  npdt = _to_np_dtype(dt)
  a = np.array([np.nan, 1, np.nan, -np.inf, np.inf, 0.0, 2, -3, 5], dtype=npdt)
  b = np.array([1, np.nan, np.nan, 0, 1, -0.0, 3, -4, np.inf], dtype=npdt)
  got = binop(Ops.MAX, dt, a, b)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(np.maximum(a, b)))
  np.testing.assert_array_equal(got[~np.isnan(got)], np.maximum(a, b)[~np.isnan(got)])

@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_comparisons_with_nan(dt: DType) -> None:
  npdt = _to_np_dtype(dt)
  a = np.array([np.nan, 1, np.nan, 1, 2, -np.inf, 0.0], dtype=npdt)
  b = np.array([1, np.nan, np.nan, 1, 1, -np.inf, -0.0], dtype=npdt)
  with np.errstate(invalid="ignore"):
    np.testing.assert_array_equal(binop(Ops.CMPLT, dt, a, b, dtypes.bool), a < b)
    np.testing.assert_array_equal(binop(Ops.CMPEQ, dt, a, b, dtypes.bool), a == b)
    np.testing.assert_array_equal(binop(Ops.CMPNE, dt, a, b, dtypes.bool), a != b)  # NaN != x is true

@pytest.mark.parametrize("dt", INTS + [dtypes.bool], ids=str)
def test_int_compare_max_bitwise(dt: DType) -> None:
  npdt = _to_np_dtype(dt)
  r = np.random.default_rng(1)
  if dt == dtypes.bool: a, b = r.random(50) > 0.5, r.random(50) > 0.5
  else:
    info = np.iinfo(npdt)
    a, b = [r.integers(info.min, info.max, size=50, endpoint=True, dtype=npdt) for _ in range(2)]
  np.testing.assert_array_equal(binop(Ops.CMPLT, dt, a, b, dtypes.bool), a < b)
  np.testing.assert_array_equal(binop(Ops.MAX, dt, a, b), np.maximum(a, b))
  for op, f in ((Ops.AND, np.bitwise_and), (Ops.OR, np.bitwise_or), (Ops.XOR, np.bitwise_xor)):
    np.testing.assert_array_equal(binop(op, dt, a, b), f(a, b))
  if dt != dtypes.bool:
    with np.errstate(over="ignore"):
      for op, f in ((Ops.ADD, np.add), (Ops.SUB, np.subtract), (Ops.MUL, np.multiply)): np.testing.assert_array_equal(binop(op, dt, a, b), f(a, b))

@pytest.mark.parametrize("dt", INTS, ids=str)
def test_shifts(dt: DType) -> None:
  npdt = _to_np_dtype(dt)
  bits = dt.itemsize * 8
  info = np.iinfo(npdt)
  r = np.random.default_rng(2)
  a = r.integers(info.min, info.max, size=3 * (bits + 4), endpoint=True, dtype=npdt)
  amt = np.array(list(range(bits + 4)) * 3, dtype=npdt)  # includes amounts >= the width: everything shifted out
  shl, shr = binop(Ops.SHL, dt, a, amt), binop(Ops.SHR, dt, a, amt)
  ok = amt < bits
  np.testing.assert_array_equal(shl[ok], np.left_shift(a[ok], amt[ok]))
  np.testing.assert_array_equal(shr[ok], np.right_shift(a[ok], amt[ok]))  # arithmetic for signed types
  assert (shl[~ok] == 0).all() and (shr[~ok] == np.where(a[~ok] < 0, -1, 0).astype(npdt)).all()
  for k in (0, 1, bits - 1):  # constant amounts
    for op in (Ops.SHL, Ops.SHR):
      both(elementwise(lambda x, op=op, k=k: UOp(op, dt, (x, c(k, dt))), [dt], dt, len(a)), dt, len(a), [a])

def _cast_inputs(src: DType) -> np.ndarray:
  npdt = _to_np_dtype(src)
  if src == dtypes.bool: return np.array([True, False, True, True, False], dtype=np.bool_)
  if dtypes.is_float(src):
    return np.array([0.0, -0.0, 1.5, -1.5, 2.7, -2.7, 100.9, -100.9, 255.0, 256.0, -129.0, 65535.5, 3e9, -3e9, 1e18, -1e18, 2.0**63, 1.8e19,
                     np.nan, np.inf, -np.inf, 1e-30], dtype=npdt)
  info = np.iinfo(npdt)
  return np.array([v for v in [0, 1, -1, 2, info.min, info.max, 100, info.max // 3, 127, 128, 255, -129] if info.min <= v <= info.max], dtype=npdt)

@pytest.mark.parametrize("src", INTS + FLOATS + [dtypes.bool], ids=str)
def test_casts(src: DType) -> None:
  a = _cast_inputs(src)
  for dst in INTS + FLOATS + [dtypes.bool]:
    if dst == src: continue
    both(elementwise(lambda x, dst=dst: x.cast(dst), [src], dst, len(a)), dst, len(a), [a])

@pytest.mark.parametrize("dst", INTS, ids=str)
def test_float_to_int_nan_inf_is_zero(dst: DType) -> None:
  a = np.array([np.nan, np.inf, -np.inf, 3.9, -3.9 if not dtypes.is_unsigned(dst) else 7.2], dtype=np.float32)
  got = both(elementwise(lambda x: x.cast(dst), [dtypes.float32], dst, len(a)), dst, len(a), [a])
  np.testing.assert_array_equal(got, np.array([0, 0, 0, 3, int(a[4])], dtype=_to_np_dtype(dst)))

@pytest.mark.parametrize("pair", [(dtypes.float32, dtypes.int32), (dtypes.int32, dtypes.float32), (dtypes.float64, dtypes.uint64),
                                  (dtypes.uint16, dtypes.int16), (dtypes.uint8, dtypes.bool), (dtypes.bool, dtypes.int8)], ids=str)
def test_bitcasts(pair: tuple[DType, DType]) -> None:
  src, dst = pair
  a = _cast_inputs(src) if src != dtypes.uint8 else np.array([0, 1, 0, 1], dtype=np.uint8)
  both(elementwise(lambda x: x.bitcast(dst), [src], dst, len(a)), dst, len(a), [a])

@pytest.mark.parametrize("op", [Ops.SQRT, Ops.RECIPROCAL, Ops.TRUNC, Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN])
@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_unary_float(op: Ops, dt: DType) -> None:
  a = np.array([0.0, -0.0, 1.0, 2.5, -2.5, 1e-3, 100.0, np.inf, -np.inf, np.nan, 7.0, 0.5], dtype=_to_np_dtype(dt))
  uops = elementwise(lambda x: UOp(op, dt, (x,)), [dt], dt, len(a))
  got, want = run_cpu(uops, (dt, len(a)), [a]), run_python(uops, (dt, len(a)), [a])
  if op in (Ops.EXP2, Ops.LOG2, Ops.SIN): np.testing.assert_allclose(got, want, rtol=1e-6 if dt == dtypes.float32 else 1e-14)  # libm
  else: same(got, want)

def test_where_mulacc_fdiv_pow() -> None:
  dt = dtypes.float32
  r = np.random.default_rng(3)
  a, b, d = [r.uniform(-3, 3, 40).astype(np.float32) for _ in range(3)]
  both(elementwise(lambda x, y, z: UOp(Ops.WHERE, dt, (x < y, z, y)), [dt] * 3, dt, 40), dt, 40, [a, b, d])
  both(elementwise(lambda x, y: UOp(Ops.FDIV, dt, (x, y)), [dt] * 2, dt, 40), dt, 40, [a, b])
  got = run_cpu(elementwise(lambda x, y, z: UOp(Ops.MULACC, dt, (x, y, z)), [dt] * 3, dt, 40), (dt, 40), [a, b, d])
  np.testing.assert_allclose(got, a * b + d, rtol=1e-6, atol=1e-6)
  got = run_cpu(elementwise(lambda x, y: UOp(Ops.POW, dt, (x, y)), [dt] * 2, dt, 40), (dt, 40), [np.abs(a), b])
  np.testing.assert_allclose(got, np.power(np.abs(a), b), rtol=1e-5)

def test_threefry_matches_reference() -> None:
  r = np.random.default_rng(4)
  x = r.integers(0, 2**64, size=257, dtype=np.uint64)
  k = r.integers(0, 2**64, size=257, dtype=np.uint64)
  x[:3], k[:3] = [0, 2**64 - 1, 1], [0, 2**64 - 1, 2**32]
  dt = dtypes.uint64
  got = both(elementwise(lambda a, b: UOp(Ops.THREEFRY, dt, (a, b)), [dt, dt], dt, len(x)), dt, len(x), [x, k])
  np.testing.assert_array_equal(got, threefry2x32(x, k))

def test_gated_load_and_store() -> None:
  n = 37
  a = np.arange(n, dtype=np.float32) + 0.5
  inp, out = param(1, dtypes.float32, n), param(0, dtypes.float32, n)
  r = rng(n)
  # read a[i - 5] where i >= 5 (else 0), store only where i is odd
  idx = r + c(-5, dtypes.int32)
  v = inp.index(idx, idx.alu(Ops.CMPLT, c(0, dtypes.int32)).ne(True)).load()
  st = out.index(r, (r % 2).ne(0)).store(v + c(1.0, dtypes.float32))
  uops = linearize(UOp.sink(st.end(r), arg=KernelInfo(name="gated")))
  got = both(uops, dtypes.float32, n, [a])
  i = np.arange(n)
  want = np.where(i % 2 == 1, np.where(i >= 5, np.roll(a, 5), 0) + 1, 0).astype(np.float32)
  np.testing.assert_array_equal(got, want)

_GATE_SCRIPT = r"""
import sys; sys.path.insert(0, sys.argv[1])
import numpy as np
from cpu_testutil import c, param, rng, run_cpu
from tg_core.codegen.linearize import linearize
from tg_core.dtype import dtypes
from tg_core.uop.ops import KernelInfo, UOp
n = 64
inp, out = param(1, dtypes.float32, n), param(0, dtypes.float32, n)
r = rng(n)
# a masked-off index points 2**30 elements away: touching it would crash the process
idx = (r < 32).where(r, c(1 << 30, dtypes.int32))
v = inp.index(idx, r < 32).load()
uops = linearize(UOp.sink(out.index(r).store(v).end(r), arg=KernelInfo(name="gate_far")))
got = run_cpu(uops, (dtypes.float32, n), [np.arange(n, dtype=np.float32) + 1])
assert (got[:32] == np.arange(32) + 1).all() and (got[32:] == 0).all(), got
print("ok")
"""

def test_gated_load_never_touches_memory() -> None:
  out = subprocess.run([sys.executable, "-c", _GATE_SCRIPT, os.path.dirname(__file__)], capture_output=True, text=True, timeout=300)
  assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]

def test_reduce_accumulator_and_variable_loop_bound() -> None:
  # out[i] = sum_{j < n} a[i*8 + j] with n a runtime variable (vals), accumulating in a register buffer
  rows, cols = 5, 8
  a = np.random.default_rng(5).uniform(-1, 1, rows * cols).astype(np.float32)
  nv = var("n", 1, cols)
  inp, out = param(1, dtypes.float32, rows * cols), param(0, dtypes.float32, rows)
  from tg_core.dtype import AddrSpace
  from tg_core.uop.ops import ParamArg
  acc = UOp(Ops.BUFFER, dtypes.float32, arg=ParamArg(0, dtypes.float32, 1, addrspace=AddrSpace.REG))
  i, j = rng(rows, 0), rng(nv, 1, AxisType.REDUCE)
  zero = c(0, dtypes.int32)
  init = acc.after(i).index(zero).store(c(0.0, dtypes.float32))
  cur = acc.after(init, j).index(zero)
  upd = cur.store(cur.load() + inp.index(i * cols + j).load())
  st = out.index(i).store(acc.after(upd.end(j)).index(zero).load())
  uops = linearize(UOp.sink(st.end(i), arg=KernelInfo(name="red_var")))
  for n in (1, 3, 8):
    got = both(uops, dtypes.float32, rows, [a], vals=(n,))
    np.testing.assert_allclose(got, a.reshape(rows, cols)[:, :n].sum(1), rtol=1e-6)

def test_ir_has_no_unsafe_fast_math() -> None:
  _, src = compile_cpu(elementwise(lambda x, y: x * y + x, [dtypes.float32] * 2, dtypes.float32, 16, name="fm"))
  for flag in (" fast ", " nnan ", " ninf ", " nsz ", " reassoc ", " afn ", " arcp "): assert flag not in src

def test_quick_and_full_tiers_compute_the_same_bits() -> None:
  """A kernel is first compiled quick (no optimization passes), and again at the full level once it has run enough: both objects
  must compute the same bits, or a model's greedy output changes once its kernels are upgraded (a first answer differs from the
  next ones). An accumulator's update summing two products is the case where LLVM may fuse either product into an fma: on a host
  with fma the renderer writes the fusion out itself."""
  import ctypes
  from tg_core import Tensor, TinyJit
  from tg_cpu_x86.compiler import full_tier, pass_level
  from tg_cpu_x86.device import _compiler, host_features
  from tg_cpu_x86.runtime import CPUProgram
  if "+fma" not in host_features(): pytest.skip("the host has no fma: LLVM fuses nothing, there is nothing to pin")
  r = np.random.default_rng(5)
  a, b, c_, d = (r.standard_normal((64, 96)).astype(np.float32) for _ in range(4))
  @TinyJit
  def f(ta: Tensor, tb: Tensor, tc: Tensor, td: Tensor) -> Tensor: return (ta * tb + tc * td).sum(1).realize()
  for _ in range(3): out = f(*(Tensor(x, device="CPU") for x in (a, b, c_, d)))
  np.testing.assert_allclose(out.numpy(), (a.astype(np.float64) * b + c_.astype(np.float64) * d).sum(1), rtol=1e-4, atol=1e-4)
  assert f.captured is not None
  (runner, bufs, _), = [k for k in f.captured if "llvm.fma" in k[0].p.src]
  src = runner.p.src
  assert " contract " not in src and pass_level(src, 3) == 0
  got = []
  for lib in (_compiler().compile(src), _compiler().compile(full_tier(src))):
    prg = CPUProgram("CPU", runner.p.name, lib)
    prg.fxn((ctypes.c_void_p * len(bufs))(*[b._buf.addr for b in bufs]), (ctypes.c_int32 * 1)(0), 0, 1)
    got.append(np.frombuffer(bytes(bufs[0].as_buffer()), dtype=np.float32).copy())
  np.testing.assert_array_equal(got[0].view(np.uint32), got[1].view(np.uint32))

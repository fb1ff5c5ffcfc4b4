"""EXP2/LOG2/SIN approximations (tg_core/codegen/transcendental.py), run end to end on the PYTHON device with
TRANSCENDENTAL=2, against numpy float64 references over dense samples and special values."""
from __future__ import annotations
import numpy as np
import pytest

from tg_core.device import Renderer, RendererCaps
from tg_core.codegen.transcendental import APPROXIMATED_OPS, pm_transcendental, transcendental_ops, two_over_pi_words
from tg_core.dtype import dtypes
from tg_core.engine.realize import _runner_cache, linear_program
from tg_core.helpers import Context
from tg_core.tensor import Tensor
from tg_core.uop import GroupOp, Ops

# the ops an approximation may use (plus the kernel's own loads, stores and index math)
BASIC_ALU = {Ops.ADD, Ops.MUL, Ops.WHERE, Ops.CMPLT, Ops.CMPNE, Ops.CAST, Ops.BITCAST, Ops.SHL, Ops.SHR, Ops.AND, Ops.OR, Ops.IDIV, Ops.MOD,
             Ops.TRUNC, Ops.RECIPROCAL, Ops.SQRT}
FNS = ("exp2", "log2", "sin")

@pytest.fixture(autouse=True)
def _on_python():
  # pinned to the PYTHON device (the default device depends on which plugins are installed, e.g. CPU with tg-cpu-x86)
  with Context(DEV="PYTHON"): yield

def run(fn: str, x: np.ndarray, transcendental: int = 2) -> np.ndarray:
  with Context(TRANSCENDENTAL=transcendental): return getattr(Tensor(x), fn)().numpy()

def ref(fn: str, x: np.ndarray) -> np.ndarray:
  with np.errstate(all="ignore"): return getattr(np, fn)(x.astype(np.float64))

def ulp_err(got: np.ndarray, want: np.ndarray, npdt: type) -> np.ndarray:
  """|got - want| in units of the spacing of npdt at want (want in float64); matching NaN/inf count as 0."""
  g = got.astype(np.float64)
  with np.errstate(all="ignore"):
    wr = want.astype(npdt)
    sp = np.maximum(np.spacing(np.abs(wr)).astype(np.float64), float(np.finfo(npdt).smallest_subnormal))
    err = np.abs(g - want) / sp
  same = (np.isnan(g) & np.isnan(want)) | (np.isinf(wr) & (g == wr.astype(np.float64)))
  return np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))

def rel_err(got: np.ndarray, want: np.ndarray, npdt: type) -> float:
  """max relative error over the results that are normal numbers of npdt."""
  with np.errstate(over="ignore"): m = np.isfinite(want.astype(npdt)) & (np.abs(want) >= float(np.finfo(npdt).tiny))
  return float(np.max(np.abs(got.astype(np.float64)[m] - want[m]) / np.abs(want[m]))) if m.any() else 0.0

RNG = np.random.default_rng(1234)
N = 3000
F32_TINY, F64_TINY = float(np.finfo(np.float32).tiny), float(np.finfo(np.float64).tiny)

def _samples(fn: str, npdt: type) -> dict[str, np.ndarray]:
  f32 = npdt == np.float32
  emin, emax = (-126, 128) if f32 else (-1022, 1024)
  if fn == "exp2":
    return {"normal": RNG.uniform(emin, emax, N), "denormal": RNG.uniform(emin - (24 if f32 else 53), emin, N), "small": RNG.uniform(-1, 1, N),
            "ints": np.arange(emin - 30, emax + 1, dtype=np.float64)}
  if fn == "log2":
    tiny = F32_TINY if f32 else F64_TINY
    return {"normal": np.exp2(RNG.uniform(emin, emax, N)), "near1": 1 + RNG.uniform(-1e-2, 1e-2, N), "denormal": RNG.uniform(0, tiny, N),
            "pow2": np.exp2(np.arange(emin - 20, emax, dtype=np.float64))}
  huge = np.exp2(RNG.uniform(12, 127 if f32 else 1023, N)) * RNG.choice([-1, 1], N)
  return {"small": RNG.uniform(-4, 4, N), "mid": RNG.uniform(-1e4, 1e4, N), "huge": huge, "multiples_of_pi_2": np.arange(-2000, 2000) * (np.pi / 2)}

# (max ulps, max relative error) per function for float32 and float64
BOUNDS = {(np.float32, "exp2"): (1.5, 1e-6), (np.float32, "log2"): (2.5, 1e-6), (np.float64, "exp2"): (2, 1e-15), (np.float64, "log2"): (3, 1e-15)}

@pytest.mark.parametrize("npdt", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("fn", ["exp2", "log2"])
def test_exp2_log2_accuracy(fn: str, npdt: type) -> None:
  max_ulp, max_rel = BOUNDS[(npdt, fn)]
  for name, xs in _samples(fn, npdt).items():
    x = xs.astype(npdt)
    got, want = run(fn, x), ref(fn, x)
    assert got.dtype == npdt
    err = ulp_err(got, want, npdt)
    i = int(np.argmax(err))
    assert err.max() <= max_ulp, f"{fn} {name}: {err.max():.2f} ulp at x={x[i]!r} got={got[i]!r} want={want[i]!r}"
    assert rel_err(got, want, npdt) <= max_rel, f"{fn} {name}"

@pytest.mark.parametrize("npdt", [np.float32, np.float64], ids=["float32", "float64"])
def test_sin_accuracy(npdt: type) -> None:
  abs_bound = 1e-6 if npdt == np.float32 else 1e-15
  for name, xs in _samples("sin", npdt).items():
    x = xs.astype(npdt)
    got, want = run("sin", x), ref("sin", x)
    assert got.dtype == npdt
    abs_err = np.abs(got.astype(np.float64) - want)
    assert abs_err.max() <= abs_bound, f"sin {name}: abs error {abs_err.max():.3g} at x={x[np.argmax(abs_err)]!r}"
    big = np.abs(want) > 0.25  # away from the zeros of sin the result is ulp-accurate too
    assert ulp_err(got[big], want[big], npdt).max() <= 2.5, f"sin {name}"

def test_sin_hard_arguments() -> None:
  # the double closest to a multiple of pi/2 (remainder ~2^-61 relative), the largest doubles, exact multiples of 2^k
  x = np.array([6381956970095103 * 2.0 ** 797, np.finfo(np.float64).max, -np.finfo(np.float64).max, 2.0 ** 1000, 1e22, 2.0 ** 26, 2.0 ** 26 - 1,
                np.nextafter(2.0 ** 26, 0), 1e300, 5.3e255])
  got, want = run("sin", x), ref("sin", x)
  assert np.abs(got - want).max() <= 1e-15
  x32 = np.array([16367173 * 2.0 ** 72, np.finfo(np.float32).max, 4096.0, np.nextafter(np.float32(4096), np.float32(0)), 1e38, 8.9e21, 1e4,
                  2.0 ** 100], np.float32)
  got32, want32 = run("sin", x32), ref("sin", x32)
  assert np.abs(got32.astype(np.float64) - want32).max() <= 2e-7

SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 5e-324, -5e-324, 1e-310, 1e308, -1e308, 2.0 ** -149, 2.0 ** -126, 1e-45,
            -1e-40, 3e38, -3e38, 127.99999, 128.0, -149.5, -150.0, -151.0, 1023.9, 1024.0, -1074.0, -1075.0, -1076.0, 65504.0, 70000.0]

@pytest.mark.parametrize("npdt", [np.float16, np.float32, np.float64], ids=["float16", "float32", "float64"])
@pytest.mark.parametrize("fn", FNS)
def test_special_values(fn: str, npdt: type) -> None:
  with np.errstate(all="ignore"): x = np.array(SPECIALS).astype(npdt)
  got = run(fn, x)
  with np.errstate(all="ignore"): want = ref(fn, x).astype(npdt)
  assert got.dtype == npdt
  exact = ~np.isfinite(want) | (want == 0) | ~np.isfinite(x) | (x == 0)
  assert np.array_equal(np.isnan(got), np.isnan(want)), f"{fn}: NaNs differ: x={x} got={got} want={want}"
  e = exact & ~np.isnan(want)
  assert np.array_equal(got[e], want[e]) and np.array_equal(np.signbit(got[e]), np.signbit(want[e])), f"{fn}: x={x[e]} got={got[e]} want={want[e]}"
  assert ulp_err(got[~exact], ref(fn, x)[~exact], npdt).max() <= (1.0 if npdt == np.float16 else 4.0)

@pytest.mark.parametrize("fn", FNS)
def test_float16_accuracy(fn: str) -> None:
  # computed in float32 and rounded once: within 1 ulp of float16 (nearly always correctly rounded)
  if fn == "exp2": x = np.linspace(-26, 16.5, 4001)
  elif fn == "log2": x = np.concatenate([np.linspace(2.0 ** -24, 6.2e-5, 1000), np.exp2(RNG.uniform(-14, 15.9, 3000))])
  else: x = np.concatenate([np.linspace(-10, 10, 3001), RNG.uniform(-65504, 65504, 1000)])
  x = x.astype(np.float16)
  got, want = run(fn, x), ref(fn, x)
  assert got.dtype == np.float16
  err = ulp_err(got, want, np.float16)
  assert err.max() <= 1.0, f"{fn}: {err.max():.2f} ulp at {x[np.argmax(err)]!r}"
  assert np.mean(err <= 0.5) > 0.99

@pytest.mark.parametrize("fn", FNS)
def test_bfloat16(fn: str) -> None:
  x = {"exp2": np.linspace(-130, 127, 999), "log2": np.exp2(np.linspace(-130, 127, 999)), "sin": np.linspace(-100, 100, 999)}[fn].astype(np.float32)
  t = Tensor(x).cast(dtypes.bfloat16)
  with Context(TRANSCENDENTAL=2): got = getattr(t, fn)().cast(dtypes.float32).numpy()
  xb = t.cast(dtypes.float32).numpy()
  want = Tensor(ref(fn, xb).astype(np.float32)).cast(dtypes.bfloat16).cast(dtypes.float32).numpy()  # correctly rounded to bfloat16
  with np.errstate(all="ignore"): ulps = np.abs(got - want) / np.spacing(np.abs(want))
  assert np.nanmax(np.where(got == want, 0, ulps)) <= 1.0

def _kernel_ops(fn: str, npdt: type, transcendental: int) -> set[Ops]:
  _runner_cache.clear()
  with Context(SPEC=1): run(fn, np.array([1.0, 2.0, 3.0], npdt), transcendental)  # SPEC: the program passes spec_program
  # a runner drops its linear program once compiled (ProgramSpec.uops): re-derived under the knob it was made with
  with Context(TRANSCENDENTAL=transcendental): return {u.op for r in _runner_cache.values() for u in linear_program(r)}

@pytest.mark.parametrize("fn", FNS)
def test_only_basic_alu(fn: str) -> None:
  for npdt in (np.float16, np.float32, np.float64):
    ops = _kernel_ops(fn, npdt, 2)
    assert not ops & APPROXIMATED_OPS, f"{fn} {npdt}: {ops & APPROXIMATED_OPS}"
    assert ops & GroupOp.ALU <= BASIC_ALU, f"{fn} {npdt}: {ops & GroupOp.ALU - BASIC_ALU}"
  # PYTHON has them natively: TRANSCENDENTAL=1 (default) and 0 keep the op
  assert Ops[fn.upper()] in _kernel_ops(fn, np.float32, 1)
  assert Ops[fn.upper()] in _kernel_ops(fn, np.float32, 0)

def test_runner_cache_keys_on_context() -> None:
  _runner_cache.clear()
  x = np.linspace(0.5, 4, 7, dtype=np.float32)
  a, b = run("log2", x, 1), run("log2", x, 2)
  assert len(_runner_cache) == 2
  np.testing.assert_allclose(a, b, rtol=1e-6)

def _FakeRenderer(native: set[Ops] | None) -> Renderer | None:
  """A renderer declaring `native` transcendentals; None stands for no renderer at all (nothing approximated)."""
  if native is None: return None
  ren = Renderer()
  ren.caps = RendererCaps(native_transcendentals=frozenset(native))
  return ren

def test_ops_from_renderer() -> None:
  with Context(TRANSCENDENTAL=1):
    assert transcendental_ops(_FakeRenderer({Ops.EXP2, Ops.SQRT})) == {Ops.LOG2, Ops.SIN}
    assert transcendental_ops(_FakeRenderer(set())) == APPROXIMATED_OPS
    assert transcendental_ops(_FakeRenderer(None)) == frozenset()
  with Context(TRANSCENDENTAL=2): assert transcendental_ops(_FakeRenderer(set(APPROXIMATED_OPS))) == APPROXIMATED_OPS
  with Context(TRANSCENDENTAL=0): assert transcendental_ops(_FakeRenderer(set())) == frozenset()
  with pytest.raises(ValueError): pm_transcendental({Ops.SQRT})

def test_two_over_pi_bits() -> None:
  assert two_over_pi_words(6) == (0xA2F9836E, 0x4E441529, 0xFC2757D1, 0xF534DDC0, 0xDB629599, 0x3C439041)
  w = two_over_pi_words(40)
  t = sum(v << (32 * (39 - i)) for i, v in enumerate(w))
  assert abs(t / (1 << (32 * 40)) - 2 / np.pi) < 1e-16

"""Emulation of float16/bfloat16/fp8 (tg_core/codegen/dtype_emulation.py), forced on the PYTHON device with
EMULATED_DTYPES, against torch's casts and arithmetic (and against the native PYTHON path, bit for bit)."""
from __future__ import annotations
import numpy as np
import pytest

from tg_core.codegen.dtype_emulation import EMULATABLE, emulated_dtypes, parse_emulated
from tg_core.device import Renderer, RendererCaps
from tg_core.dtype import DType, dtypes
from tg_core.engine.realize import _runner_cache, linear_program
from tg_core.helpers import Context
from tg_core.tensor import Tensor

torch = pytest.importorskip("torch")

NAME = {dtypes.float16: "float16", dtypes.bfloat16: "bfloat16", dtypes.fp8e4m3: "fp8e4m3", dtypes.fp8e5m2: "fp8e5m2"}
TORCH = {dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16, dtypes.fp8e4m3: torch.float8_e4m3fn, dtypes.fp8e5m2: torch.float8_e5m2}
UINT = {8: (dtypes.uint8, np.uint8, torch.uint8), 16: (dtypes.uint16, np.uint16, torch.int16)}
ALL = pytest.mark.parametrize("dt", EMULATABLE, ids=[NAME[d] for d in EMULATABLE])
F16S = pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=["float16", "bfloat16"])
RNG = np.random.default_rng(7)

@pytest.fixture(autouse=True)
def _on_python():
  # pinned to the PYTHON device (the default device depends on which plugins are installed, e.g. CPU with tg-cpu-x86)
  with Context(DEV="PYTHON"): yield

def emu(dt: DType | str) -> Context: return Context(EMULATED_DTYPES=dt if isinstance(dt, str) else NAME[dt])

def torch_bits(t: torch.Tensor) -> np.ndarray:
  """The bit patterns of a torch tensor of a 1- or 2-byte float dtype, as numpy uint8/uint16."""
  nbits = t.element_size() * 8
  return t.view(UINT[nbits][2]).numpy().view(UINT[nbits][1])

def torch_from_bits(bits: np.ndarray, dt: DType) -> torch.Tensor:
  return torch.from_numpy(bits.view(np.int16).copy() if dt.bitsize == 16 else bits.copy()).view(TORCH[dt])

def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Elementwise: equal as floats with the same sign of zero, or both NaN."""
  a, b = a.astype(np.float64), b.astype(np.float64)
  return ((a == b) & (np.signbit(a) == np.signbit(b))) | (np.isnan(a) & np.isnan(b))

def _all_values(dt: DType) -> np.ndarray:
  """Every finite value of dt, sorted, as float32."""
  v = torch_from_bits(np.arange(2 ** dt.bitsize).astype(UINT[dt.bitsize][1]), dt).float().numpy()
  return np.unique(v[np.isfinite(v)])

def _cast_inputs(dt: DType) -> np.ndarray:
  """float32 inputs for a cast to dt: every value, the midpoints between neighbours (ties) and their float32 neighbours,
  random float32 bit patterns, and the specials."""
  vals = _all_values(dt)
  mids = ((vals[1:].astype(np.float64) + vals[:-1]) / 2).astype(np.float32)
  rand = RNG.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
  specials = np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 1e-45, -1e-45, 1e30, -1e30, 65504, 65520, 57344, 61440, 448, 464, 480],
                      np.float32)
  return np.concatenate([vals, mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)), rand, specials])

# *** loads: decode every bit pattern ***

@ALL
def test_decode_all_bit_patterns(dt: DType) -> None:
  udt, npu, _ = UINT[dt.bitsize]
  bits = np.arange(2 ** dt.bitsize).astype(npu)
  with emu(dt): got = Tensor(bits).bitcast(dt).cast(dtypes.float32).numpy()
  want = torch_from_bits(bits, dt).float().numpy()
  ok = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))  # bit exact, NaN payloads aside
  assert ok.all(), f"{dt}: bits {bits[~ok][:8]} got {got[~ok][:8]} want {want[~ok][:8]}"

# *** stores: encode float32 with round-to-nearest-even ***

@ALL
def test_encode_matches_torch(dt: DType) -> None:
  udt, _, _ = UINT[dt.bitsize]
  x = _cast_inputs(dt)
  with emu(dt): got = Tensor(x).cast(dt).bitcast(udt).numpy()
  want = torch_bits(torch.from_numpy(x).to(TORCH[dt]))
  gv, wv = torch_from_bits(got, dt).float().numpy(), torch_from_bits(want, dt).float().numpy()
  ok = (got == want) | (np.isnan(gv) & np.isnan(wv))
  assert ok.all(), f"{dt}: x {x[~ok][:6]} got {gv[~ok][:6]} want {wv[~ok][:6]}"

@ALL
def test_encode_matches_native(dt: DType) -> None:
  # the emulated kernel stores the same values as the PYTHON device's own conversion
  x = _cast_inputs(dt)
  with emu(dt): got = Tensor(x).cast(dt).cast(dtypes.float32).numpy()
  native = Tensor(x).cast(dt).cast(dtypes.float32).numpy()
  ok = (got == native) | (np.isnan(got) & np.isnan(native))
  assert ok.all(), f"{dt}: x {x[~ok][:6]} got {got[~ok][:6]} native {native[~ok][:6]}"

@ALL
def test_cast_from_other_dtypes(dt: DType) -> None:
  # float64 and int32 go through float32, like torch (double rounding included)
  f64 = np.concatenate([1 + np.array([2.0 ** -11 + 2.0 ** -40, 2.0 ** -8 + 2.0 ** -40, 2.0 ** -4 + 2.0 ** -40]), RNG.standard_normal(500) * 100,
                        RNG.standard_normal(200) * 1e-3])
  i32 = np.concatenate([RNG.integers(-70000, 70000, 300), [2 ** 24 + 1, -(2 ** 24) - 3, 0, 1, -1, 255, 448, 449]]).astype(np.int32)
  with emu(dt):
    got64 = Tensor(f64).cast(dt).cast(dtypes.float32).numpy()
    goti = Tensor(i32).cast(dt).cast(dtypes.float32).numpy()
  want64 = torch.from_numpy(f64).to(TORCH[dt]).float().numpy()
  wanti = torch.from_numpy(i32).to(TORCH[dt]).float().numpy()
  assert same(got64, want64).all() and same(goti, wanti).all()

@ALL
def test_cast_to_other_dtypes(dt: DType) -> None:
  vals = _all_values(dt)
  src = torch.from_numpy(vals).to(TORCH[dt])
  with emu(dt):
    t = Tensor(vals).cast(dt)
    outs = {d: t.cast(d).numpy() for d in (dtypes.float64, dtypes.float32, dtypes.int32, dtypes.bool)}
  assert same(outs[dtypes.float64], src.double().numpy()).all()
  assert same(outs[dtypes.float32], src.float().numpy()).all()
  inr = np.abs(vals) < 2.0 ** 31  # float -> int out of range is undefined in C (torch gives INT_MIN)
  assert np.array_equal(outs[dtypes.int32][inr], src.float().to(torch.int32).numpy()[inr])
  assert np.array_equal(outs[dtypes.bool], src.float().to(torch.bool).numpy())

def test_cast_between_emulated() -> None:
  x = _cast_inputs(dtypes.bfloat16)
  x = x[np.isfinite(x)]
  pairs = [(dtypes.bfloat16, dtypes.float16), (dtypes.float16, dtypes.bfloat16), (dtypes.float16, dtypes.fp8e5m2), (dtypes.bfloat16, dtypes.fp8e4m3)]
  for a, b in pairs:
    with emu(f"{NAME[a]},{NAME[b]}"): got = Tensor(x).cast(a).cast(b).cast(dtypes.float32).numpy()
    want = torch.from_numpy(x).to(TORCH[a]).to(TORCH[b]).float().numpy()
    assert same(got, want).all(), f"{a} -> {b}"

@F16S
def test_bitcast_roundtrip(dt: DType) -> None:
  x = np.concatenate([_all_values(dt)[::7], np.array([np.inf, -np.inf, -0.0], np.float32)])
  with emu(dt):
    bits = Tensor(x).cast(dt).bitcast(dtypes.int16).numpy()
    back = Tensor(bits).bitcast(dt).cast(dtypes.float32).numpy()
  assert np.array_equal(bits, torch.from_numpy(x).to(TORCH[dt]).view(torch.int16).numpy())
  assert same(back, torch.from_numpy(x).to(TORCH[dt]).float().numpy()).all()

# *** arithmetic: float32 ALU, rounded to the dtype after every op ***

ARITH = {
  "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
  "chain": lambda a, b: a * b + a - b * 0.75,
  "maximum": lambda a, b: a.maximum(b) if isinstance(a, Tensor) else torch.maximum(a, b), "neg": lambda a, b: -a,
  "sqrt": lambda a, b: (a * a).sqrt(), "where": lambda a, b: (a < b).where(a, b) if isinstance(a, Tensor) else torch.where(a < b, a, b),
  "cmp": lambda a, b: a < b, "const": lambda a, b: a * 3.25 + 1.5,
}

@F16S
@pytest.mark.parametrize("op", list(ARITH))
def test_arith_matches_torch(dt: DType, op: str) -> None:
  vals = _all_values(dt)
  sa, sb = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32), np.array([1.0, np.inf, 2.0, -0.0, 0.0], np.float32)
  a = np.concatenate([RNG.standard_normal(400).astype(np.float32) * 10, RNG.choice(vals, 400), sa])
  b = np.concatenate([RNG.standard_normal(400).astype(np.float32), RNG.choice(vals, 400), sb])
  def tg() -> np.ndarray:
    r = ARITH[op](Tensor(a).cast(dt), Tensor(b).cast(dt))
    return r.cast(dtypes.float32).numpy() if r.dtype == dt else r.numpy()
  with emu(dt): got = tg()
  native = tg()
  ties = (got == 0) & (native == 0) if op == "maximum" else np.zeros_like(got, dtype=bool)  # max(0, -0) may pick either zero
  assert (same(got, native) | ties).all(), f"{op}: emulated != native"
  if op == "div": return  # tg divides as a * (1/b) (two roundings, 1/b may overflow or go denormal): only native is the reference
  want = ARITH[op](torch.from_numpy(a).to(TORCH[dt]), torch.from_numpy(b).to(TORCH[dt]))
  want = want.float().numpy() if want.dtype == TORCH[dt] else want.numpy()
  ok = same(got, want) | (((got == 0) & (want == 0)) if op == "maximum" else False)
  assert ok.all(), f"{op}: a={a[~ok][:4]} b={b[~ok][:4]} got={got[~ok][:4]} want={want[~ok][:4]}"

@ALL
def test_kernels_match_native(dt: DType) -> None:
  # reductions (register accumulators), matmul, transcendentals: identical bits with and without emulation
  a = RNG.standard_normal((6, 9)).astype(np.float32) * 2
  b = RNG.standard_normal((9, 5)).astype(np.float32)
  def f() -> list[np.ndarray]:
    ta, tb = Tensor(a).cast(dt), Tensor(b).cast(dt)
    return [x.cast(dtypes.float32).numpy() for x in (ta @ tb, ta.sum(axis=1), ta.max(axis=0), ta.exp2() * 0.5 - ta.abs().sqrt(), ta.sin(),
                                                      ta.abs().log2(), ta / (tb[:6, :1] + 3))]
  native = f()
  for transcendental in (1, 2):
    with emu(dt), Context(TRANSCENDENTAL=transcendental): got = f()
    for i, (n, g) in enumerate(zip(native, got)): assert same(n, g).all(), f"{dt} kernel {i} TRANSCENDENTAL={transcendental}"

# *** the program and the knob ***

def _kernel(dt: DType, emulate: str) -> list:
  _runner_cache.clear()
  with Context(EMULATED_DTYPES=emulate, SPEC=1):  # SPEC: the programs pass spec_program
    t = Tensor(np.arange(6, dtype=np.float32)).cast(dt).realize()  # a kernel storing dt
    (t * 2 + 1).cast(dtypes.float32).realize()  # and one loading it
    return [u for r in _runner_cache.values() for u in linear_program(r)]  # under the knob: a runner keeps no linear program

@ALL
def test_program_has_no_emulated_dtype(dt: DType) -> None:
  uops = _kernel(dt, NAME[dt])
  assert not any(u.dtype.scalar() == dt for u in uops)
  params = [u for u in uops if u.op.name == "PARAM" and u.arg.dtype.bitsize == dt.bitsize]
  assert len(params) >= 2 and all(u.dtype == u.arg.dtype == UINT[dt.bitsize][0] for u in params)
  assert any(u.dtype.scalar() == dt for u in _kernel(dt, ""))  # without the knob PYTHON runs it natively

def test_parse_and_renderer_gating() -> None:
  assert parse_emulated(" bfloat16, float16 ") == {dtypes.bfloat16, dtypes.float16}
  assert parse_emulated("") == frozenset()
  with pytest.raises(ValueError): parse_emulated("int64")
  class NoHalves(Renderer):
    caps = RendererCaps(native_dtypes=frozenset({dtypes.float32, dtypes.int32, dtypes.uint16, dtypes.uint8, dtypes.fp8e4m3}))
  with Context(EMULATED_DTYPES=""): assert emulated_dtypes(NoHalves()) == {dtypes.float16, dtypes.bfloat16, dtypes.fp8e5m2}
  with Context(EMULATED_DTYPES="fp8e4m3"): assert emulated_dtypes(NoHalves()) == set(EMULATABLE)

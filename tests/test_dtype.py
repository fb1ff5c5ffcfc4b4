"""dtypes against torch: promotion of every pair, weak Python scalars, and the bf16/fp8 conversions."""
import math
import struct

import numpy as np
import pytest

from tg_core.dtype import (DType, _from_np_dtype, _to_np_dtype, _to_np_storage, dtypes, float_to_bf16, float_to_fp8, fp8_to_float,
                           least_upper_dtype, strong_dtype, to_dtype, truncate_float)

torch = pytest.importorskip("torch")

TORCH = {dtypes.bool: torch.bool, dtypes.int8: torch.int8, dtypes.int16: torch.int16, dtypes.int32: torch.int32, dtypes.int64: torch.int64,
         dtypes.uint8: torch.uint8, dtypes.uint16: torch.uint16, dtypes.uint32: torch.uint32, dtypes.uint64: torch.uint64,
         dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16, dtypes.float32: torch.float32, dtypes.float64: torch.float64}
FROM_TORCH = {v: k for k, v in TORCH.items()}
ALL = list(TORCH)

def _torch_promote(a: DType, b: DType):
  try: return FROM_TORCH[torch.promote_types(TORCH[a], TORCH[b])]
  except RuntimeError: return None  # e.g. uint16/uint32/uint64 with a signed int: torch refuses

@pytest.mark.parametrize("a", ALL, ids=str)
def test_least_upper_dtype_matches_torch(a):
  compared = 0
  for b in ALL:
    if (want := _torch_promote(a, b)) is None: continue
    assert least_upper_dtype(a, b) == want, f"{a} {b}: torch {want}, tg {least_upper_dtype(a, b)}"
    assert least_upper_dtype(b, a) == want
    compared += 1
  assert compared >= 5  # torch refuses uint16/32/64 with signed ints

def test_least_upper_dtype_more():
  assert least_upper_dtype(dtypes.int8) == dtypes.int8
  assert least_upper_dtype(dtypes.int8, dtypes.uint8, dtypes.int16) == dtypes.int16
  assert least_upper_dtype(dtypes.float16, dtypes.bfloat16, dtypes.int64) == dtypes.float32
  assert least_upper_dtype(dtypes.fp8e4m3, dtypes.fp8e5m2) in (dtypes.float16, dtypes.bfloat16)
  with pytest.raises(ValueError): least_upper_dtype()

SCALARS = [3, -2, 2.5, True]

@pytest.mark.parametrize("a", ALL, ids=str)
def test_weak_python_scalars_match_torch(a):
  # tensor(a) op python scalar: the scalar is weak, so the tensor's dtype wins within the same kind
  for s in SCALARS:
    got = strong_dtype(least_upper_dtype(a, dtypes.from_py(s)))
    want = FROM_TORCH[torch.result_type(torch.ones(1, dtype=TORCH[a]), s)]
    if a == dtypes.bool and isinstance(s, int) and not isinstance(s, bool):
      # torch gives int64 for bool tensor + python int; tg (like tinygrad) commits a weak int to default_int, int32
      assert want == dtypes.int64
      assert got == dtypes.default_int == dtypes.int32
      continue
    assert got == want, f"{a} op {s!r}: torch {want}, tg {got}"

def test_weak_scalar_promotion_stays_weak():
  assert least_upper_dtype(dtypes.weakint, dtypes.weakfloat) == dtypes.weakfloat
  assert least_upper_dtype(dtypes.bool, dtypes.weakint) == dtypes.weakint
  assert strong_dtype(dtypes.weakint) == dtypes.int32 and strong_dtype(dtypes.weakfloat) == dtypes.float32
  assert strong_dtype(dtypes.weakint.vec(4)) == dtypes.int32.vec(4) and strong_dtype(dtypes.float16) == dtypes.float16
  assert dtypes.from_py(1) == dtypes.weakint and dtypes.from_py(1.0) == dtypes.weakfloat and dtypes.from_py(True) == dtypes.bool
  assert dtypes.from_py([1, 2.0]) == dtypes.weakfloat and dtypes.from_py([[True], [1]]) == dtypes.weakint

# *** bf16 / fp8 round trips against torch ***

def _test_values(n=4000, seed=0):
  """float32-exact values: normal, subnormal, out of every small format's range, around fp8 rounding edges, specials."""
  rng = np.random.default_rng(seed)
  vals = [rng.standard_normal(n) * 10.0 ** rng.integers(-10, 10, n),           # wide spread
          rng.uniform(-600, 600, n), rng.uniform(-70000, 70000, n),            # around the fp8 maxima (448, 57344)
          rng.standard_normal(n) * 2.0 ** -8, rng.standard_normal(n) * 2.0 ** -17,  # fp8 subnormals
          np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 448.0, 464.0, 464.1, 479.9, 480.0, 57344.0, 61440.0, 61439.0, 65536.0,
                    2.0 ** -9, 2.0 ** -10, 1.5 * 2.0 ** -9, 2.0 ** -16, 2.0 ** -17, 3 * 2.0 ** -18, 3.4e38, -3.4e38, 1e-45, 1e-40, 1.0, -1.0])]
  ret = np.concatenate(vals).astype(np.float32)
  return ret

@pytest.mark.parametrize("tdt,dt", [("float8_e4m3fn", dtypes.fp8e4m3), ("float8_e5m2", dtypes.fp8e5m2)])
def test_fp8_encode_matches_torch(tdt, dt):
  xs = _test_values()
  want = torch.from_numpy(xs).to(getattr(torch, tdt)).view(torch.uint8).numpy()
  assert np.isnan(xs).sum() == 2 and np.signbit(xs[np.isnan(xs)]).tolist() == [False, True]
  for x, w in zip(xs.tolist(), want.tolist()):
    got = float_to_fp8(x, dt)  # bit-exact, NaN sign included
    assert got == w, f"{dt} {x!r}: torch {w:#04x}, tg {got:#04x}"

@pytest.mark.parametrize("tdt,dt", [("float8_e4m3fn", dtypes.fp8e4m3), ("float8_e5m2", dtypes.fp8e5m2)])
def test_fp8_decode_matches_torch(tdt, dt):
  want = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(getattr(torch, tdt)).to(torch.float64).tolist()
  for b, w in enumerate(want):
    got = fp8_to_float(b, dt)
    assert (math.isnan(got) and math.isnan(w)) or got == w, f"{dt} {b:#04x}: torch {w}, tg {got}"
    if not math.isnan(got): assert float_to_fp8(got, dt) == b or got == 0.0  # every finite code round trips (0 and -0 both do)

def test_bf16_matches_torch():
  xs = _test_values(seed=1)
  want = torch.from_numpy(xs).to(torch.bfloat16).to(torch.float64).tolist()
  for x, w in zip(xs.tolist(), want):
    got = float_to_bf16(x)
    assert (math.isnan(got) and math.isnan(w)) or (got == w and math.copysign(1, got) == math.copysign(1, w)), f"bf16 {x!r}: torch {w}, tg {got}"
    assert truncate_float(x, dtypes.bfloat16) == got or math.isnan(got)

def test_truncate_float_matches_torch():
  xs = _test_values(seed=2)
  for name, dt in (("float16", dtypes.float16), ("float32", dtypes.float32)):
    want = torch.from_numpy(xs.astype(np.float64)).to(getattr(torch, name)).to(torch.float64).tolist()
    for x, w in zip(xs.tolist(), want):
      got = truncate_float(x, dt)
      assert (math.isnan(got) and math.isnan(w)) or got == w, f"{dt} {x!r}: torch {w}, tg {got}"
  assert truncate_float(0.1, dtypes.float64) == 0.1 and truncate_float(1e300, dtypes.float32) == math.inf
  assert truncate_float(0.1, dtypes.float32) == struct.unpack("f", struct.pack("f", 0.1))[0]
  for dt in (dtypes.fp8e4m3, dtypes.fp8e5m2):
    assert truncate_float(1.1, dt) == fp8_to_float(float_to_fp8(1.1, dt), dt)
  with pytest.raises(TypeError): truncate_float(1.0, dtypes.int32)

# *** names and numpy ***

def test_to_dtype():
  assert to_dtype("float32") is dtypes.float32 and to_dtype("half") is dtypes.float16 and to_dtype("bfloat16") is dtypes.bfloat16
  assert to_dtype(dtypes.int8) is dtypes.int8 and to_dtype("void") is dtypes.void
  assert to_dtype(np.float32) is dtypes.float32 and to_dtype(np.dtype("int16")) is dtypes.int16 and to_dtype(np.bool_) is dtypes.bool
  with pytest.raises(TypeError, match="unknown dtype"): to_dtype("float33")
  with pytest.raises(TypeError): to_dtype(3)  # type: ignore[arg-type]
  with pytest.raises(TypeError): to_dtype(np.complex64)

def test_np_dtypes():
  for dt in (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64,
             dtypes.float16, dtypes.float32, dtypes.float64):
    npdt = _to_np_dtype(dt)
    assert npdt is not None and np.dtype(npdt).itemsize == dt.itemsize and _from_np_dtype(npdt) is dt
    assert _to_np_storage(dt) is npdt
  assert _to_np_dtype(dtypes.weakint) is np.int32 and _to_np_dtype(dtypes.weakfloat) is np.float32  # storage is never weak
  assert _to_np_dtype(dtypes.bfloat16) is None and _to_np_storage(dtypes.bfloat16) is np.uint16
  assert _to_np_dtype(dtypes.fp8e4m3) is None and _to_np_storage(dtypes.fp8e5m2) is np.uint8
  # the torch view of the same bits agrees: bf16 bits stored as uint16
  x = np.array([1.5, -2.25, 3e38], dtype=np.float32)
  bits = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
  mine = np.array([struct.unpack("I", struct.pack("f", float_to_bf16(float(v))))[0] >> 16 for v in x], dtype=_to_np_storage(dtypes.bfloat16))
  np.testing.assert_array_equal(bits, mine)

def test_dtype_properties():
  assert dtypes.float32.vec(4).itemsize == 16 and dtypes.float32.vec(4).scalar() is dtypes.float32 and dtypes.float32.vec(1) is dtypes.float32
  assert dtypes.bool.itemsize == 1 and dtypes.bfloat16.itemsize == 2 and dtypes.fp8e4m3.itemsize == 1
  assert (dtypes.int8.min, dtypes.int8.max, dtypes.uint16.max) == (-128, 127, 65535)
  assert dtypes.float16.min == -math.inf and dtypes.bool.max is True
  assert repr(dtypes.float32) == "dtypes.float32" and repr(dtypes.int32.vec(4)) == "dtypes.int32.vec(4)" and repr(dtypes.void) == "dtypes.void"
  assert dtypes.finfo(dtypes.bfloat16) == (8, 7) and dtypes.finfo(dtypes.fp8e4m3) == (4, 3)
  assert dtypes.as_const(300, dtypes.uint8) == 44 and dtypes.as_const(-1, dtypes.uint32) == 2**32 - 1 and dtypes.as_const(2.7, dtypes.int8) == 2
  assert dtypes.as_const(1, dtypes.bool) is True and dtypes.as_const((1, 2), dtypes.float32.vec(2)) == (1.0, 2.0)

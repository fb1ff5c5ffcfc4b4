"""Random ops: reproducibility (seed, counters, devices, realize order), shapes, dtypes, ranges and statistics with fixed seeds.
Statistical bounds are ~4+ sigma (or KS at p=0.001), so with fixed seeds they are deterministic and far from flaky."""
from __future__ import annotations
import math

import numpy as np
import pytest

from tg_core.dtype import dtypes
from tg_core.tensor import Tensor
from helpers import helper_test_exception, torch

FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64, dtypes.fp8e4m3, dtypes.fp8e5m2]

def ks_stat(x: np.ndarray, cdf) -> float:
  """Kolmogorov-Smirnov statistic of the sample `x` against `cdf`."""
  x = np.sort(np.asarray(x, dtype=np.float64))
  n = len(x)
  c = cdf(x)
  return float(max((np.arange(1, n + 1) / n - c).max(), (c - np.arange(n) / n).max()))
def ks_bound(n: int) -> float: return 1.95 / math.sqrt(n)  # p = 0.001
def normal_cdf(x: np.ndarray) -> np.ndarray: return 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))

@pytest.fixture(autouse=True)
def _seed():
  Tensor.manual_seed(1337)
  yield

# *** reproducibility ***

def test_manual_seed_reproducible():
  Tensor.manual_seed(42)
  a = Tensor.rand(4, 5).numpy()
  b = Tensor.rand(4, 5).numpy()
  Tensor.manual_seed(42)
  np.testing.assert_equal(Tensor.rand(4, 5).numpy(), a)
  np.testing.assert_equal(Tensor.rand(4, 5).numpy(), b)
  assert not np.array_equal(a, b)

def test_seed_attribute():
  Tensor.manual_seed(7)
  assert Tensor._seed == 7
  Tensor.manual_seed()
  assert Tensor._seed == 0

@pytest.mark.parametrize("seeds", [(0, 1), (1, 2), (123, 124), (0, 2**32), (2**40, 2**40 + 1)])
def test_different_seeds_differ(seeds):
  vals = []
  for s in seeds:
    Tensor.manual_seed(s)
    vals.append(Tensor.rand(64).numpy())
  assert (vals[0] != vals[1]).mean() > 0.9

def test_counter_splits_like_one_draw():
  # the counter advances by numel: rand(2) then rand(4) are the pieces of one rand(6)
  Tensor.manual_seed(5)
  whole = Tensor.rand(6).numpy()
  Tensor.manual_seed(5)
  parts = np.concatenate([Tensor.rand(2).numpy(), Tensor.rand(4).numpy()])
  np.testing.assert_equal(parts, whole)

def test_independent_of_realize_order():
  Tensor.manual_seed(9)
  a, b, c = Tensor.rand(3), Tensor.rand(5), Tensor.rand(2, 2)
  cv, av, bv = c.numpy(), a.numpy(), b.numpy()  # realized in reverse order
  Tensor.manual_seed(9)
  np.testing.assert_equal(Tensor.rand(3).numpy(), av)
  np.testing.assert_equal(Tensor.rand(5).numpy(), bv)
  np.testing.assert_equal(Tensor.rand(2, 2).numpy(), cv)

def test_unrealized_draw_still_advances():
  Tensor.manual_seed(11)
  Tensor.rand(4)  # never realized
  b = Tensor.rand(4).numpy()
  Tensor.manual_seed(11)
  a = Tensor.rand(4).numpy()
  assert not np.array_equal(a, b)

def test_same_values_on_every_device():
  Tensor.manual_seed(3)
  a = Tensor.rand(7).numpy()
  n = Tensor.randn(5).numpy()
  Tensor.manual_seed(3)
  b = Tensor.rand(7, device="PYTHON:1")
  assert b.device == "PYTHON:1"
  np.testing.assert_equal(b.numpy(), a)
  np.testing.assert_equal(Tensor.randn(5, device="PYTHON:1").numpy(), n)

def test_per_device_counters():
  Tensor.manual_seed(3)
  a1, a2 = Tensor.rand(4).numpy(), Tensor.rand(4).numpy()
  Tensor.manual_seed(3)
  x = Tensor.rand(4).numpy()
  Tensor.rand(100, device="PYTHON:1")  # another device's counter: doesn't move this one
  y = Tensor.rand(4).numpy()
  np.testing.assert_equal(x, a1)
  np.testing.assert_equal(y, a2)

def test_threefry_known_answer():
  # Random123's known-answer test for threefry2x32_20: key (0, 0), counter (0, 0) -> (0x6b200159, 0x99ba4efe)
  Tensor.manual_seed(0)
  bits = Tensor._random_bits(1, "PYTHON").numpy()
  assert bits.dtype == np.uint64 and int(bits[0]) == (0x99ba4efe << 32) | 0x6b200159

def test_rand_uses_top_mantissa_bits():
  Tensor.manual_seed(0)
  bits = Tensor._random_bits(10, "PYTHON").numpy()
  Tensor.manual_seed(0)
  f32 = Tensor.rand(10).numpy()
  np.testing.assert_equal(f32, (bits >> np.uint64(41)).astype(np.float64) / 2**23)
  Tensor.manual_seed(0)
  f64 = Tensor.rand(10, dtype=dtypes.float64).numpy()
  np.testing.assert_equal(f64, (bits >> np.uint64(12)).astype(np.float64) / 2**52)

# *** rand ***

@pytest.mark.parametrize("shape", [(), (1,), (7,), (0,), (3, 0, 2), (2, 3, 5), (13, 1)])
def test_rand_shapes(shape):
  t = Tensor.rand(*shape)
  assert t.shape == shape and t.dtype == dtypes.float32
  x = t.numpy()
  assert x.shape == shape and ((x >= 0) & (x < 1)).all()

def test_rand_shape_forms():
  assert Tensor.rand((2, 3)).shape == (2, 3)
  assert Tensor.rand([2, 3]).shape == (2, 3)
  assert Tensor.rand(2, 3).shape == (2, 3)

@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_rand_dtypes(dt):
  t = Tensor.rand(2000, dtype=dt)
  assert t.dtype == dt
  x = t.numpy().astype(np.float64)
  assert x.min() >= 0 and x.max() < 1
  _, nmant = dtypes.finfo(dt)
  np.testing.assert_equal(x * 2**nmant, np.round(x * 2**nmant))  # a multiple of 2**-nmant
  assert len(np.unique(x)) == min(2**nmant, len(np.unique(x)))
  if nmant >= 7:
    assert abs(x.mean() - 0.5) < 0.03
    assert ks_stat(x, lambda v: v) < ks_bound(len(x)) + 2**-nmant

def test_rand_statistics():
  x = Tensor.rand(20000).numpy().astype(np.float64)
  assert abs(x.mean() - 0.5) < 4 * math.sqrt(1 / 12 / len(x))
  assert abs(x.var() - 1 / 12) < 0.005
  assert ks_stat(x, lambda v: v) < ks_bound(len(x))
  # neighbours are uncorrelated
  assert abs(np.corrcoef(x[:-1], x[1:])[0, 1]) < 4 / math.sqrt(len(x))
  # every 1/16 bucket is populated about evenly
  counts = np.bincount((x * 16).astype(int), minlength=16)
  assert ((counts - len(x) / 16) ** 2 / (len(x) / 16)).sum() < 45  # chi2(15) p < 1e-4 cutoff

def test_rand_float64_resolution():
  x = Tensor.rand(1000, dtype=dtypes.float64).numpy()
  assert len(np.unique(np.float32(x))) > 990 and len(np.unique(x)) == 1000

def test_rand_requires_grad():
  assert Tensor.rand(3, requires_grad=True).requires_grad is True
  assert Tensor.rand(3).requires_grad is None

def test_rand_not_contiguous_same_values():
  Tensor.manual_seed(1)
  a = Tensor.rand(4, contiguous=False).numpy()
  Tensor.manual_seed(1)
  np.testing.assert_equal(Tensor.rand(4).numpy(), a)

@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.bool, dtypes.uint8, "int64"])
def test_rand_bad_dtype(dt):
  with pytest.raises(ValueError): Tensor.rand(3, dtype=dt)

def test_rand_bad_shape():
  with pytest.raises(ValueError): Tensor.rand(-1, 3)
  with pytest.raises(ValueError): Tensor.rand(3, device=("PYTHON", "PYTHON:1"))

def test_rand_like():
  base = Tensor.zeros(3, 4, dtype=dtypes.float16)
  t = base.rand_like()
  assert t.shape == (3, 4) and t.dtype == dtypes.float16 and t.device == base.device
  t2 = base.rand_like(dtype=dtypes.float64)
  assert t2.dtype == dtypes.float64 and ((t2.numpy() >= 0) & (t2.numpy() < 1)).all()
  assert Tensor.zeros(2, device="PYTHON:1").rand_like().device == "PYTHON:1"
  with pytest.raises(ValueError): Tensor.zeros(3, dtype=dtypes.int32).rand_like()

# *** randn / normal ***

def test_randn_statistics():
  x = Tensor.randn(20000).numpy().astype(np.float64)
  assert abs(x.mean()) < 4 / math.sqrt(len(x))
  assert abs(x.std() - 1) < 0.02
  assert ks_stat(x, normal_cdf) < ks_bound(len(x))
  assert np.isfinite(x).all()
  # tails: ~4.6% beyond 2 sigma, ~0.27% beyond 3
  assert 0.04 < (np.abs(x) > 2).mean() < 0.052 and 0.0015 < (np.abs(x) > 3).mean() < 0.0040

@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3, 4), (1, 7)])
def test_randn_shapes(shape):
  t = Tensor.randn(*shape)
  assert t.shape == shape and t.dtype == dtypes.float32 and t.numpy().shape == shape

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16, dtypes.float64], ids=str)
def test_randn_dtypes(dt):
  t = Tensor.randn(500, dtype=dt)
  assert t.dtype == dt
  x = t.numpy().astype(np.float64)
  assert abs(x.mean()) < 0.2 and 0.85 < x.std() < 1.15

def test_randn_requires_grad_and_like():
  assert Tensor.randn(3, requires_grad=True).requires_grad is True
  base = Tensor.ones(2, 5, dtype=dtypes.float64)
  t = base.randn_like()
  assert t.shape == (2, 5) and t.dtype == dtypes.float64
  assert base.randn_like(dtype=dtypes.float16).dtype == dtypes.float16

@pytest.mark.parametrize("mean,std", [(0.0, 1.0), (3.0, 0.5), (-2.0, 4.0)])
def test_normal(mean, std):
  x = Tensor.normal(10000, mean=mean, std=std).numpy().astype(np.float64)
  assert abs(x.mean() - mean) < 4 * std / math.sqrt(len(x))
  assert abs(x.std() - std) < 0.03 * std
  assert ks_stat((x - mean) / std, normal_cdf) < ks_bound(len(x))

def test_normal_shape_and_grad():
  t = Tensor.normal(2, 3, mean=1, std=2, requires_grad=True)
  assert t.shape == (2, 3) and t.requires_grad is True and t.dtype == dtypes.float32

# *** uniform / randint ***

@pytest.mark.parametrize("low,high", [(0.0, 1.0), (-1.0, 1.0), (5.0, 7.5), (-10.0, -9.0)])
def test_uniform(low, high):
  x = Tensor.uniform(10000, low=low, high=high).numpy().astype(np.float64)
  assert x.min() >= low and x.max() < high
  assert abs(x.mean() - (low + high) / 2) < 4 * (high - low) * math.sqrt(1 / 12 / len(x))
  assert ks_stat((x - low) / (high - low), lambda v: v) < ks_bound(len(x))

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16, dtypes.float64], ids=str)
def test_uniform_dtypes(dt):
  t = Tensor.uniform(3, 4, low=-2, high=2, dtype=dt)
  assert t.dtype == dt and t.shape == (3, 4)
  x = t.numpy()
  assert (x >= -2).all() and (x <= 2).all()

def test_uniform_int_dtype():
  t = Tensor.uniform(1000, low=-3, high=3, dtype=dtypes.int32)
  assert t.dtype == dtypes.int32
  assert set(np.unique(t.numpy()).tolist()) == {-3, -2, -1, 0, 1, 2}

@pytest.mark.parametrize("dt,low,high", [(dtypes.int32, 0, 10), (dtypes.int32, -5, 5), (dtypes.int8, -128, 128), (dtypes.uint8, 0, 256),
                                         (dtypes.int16, -3, 1000), (dtypes.uint16, 7, 9), (dtypes.int64, -2**40, 2**40), (dtypes.uint32, 0, 2**32),
                                         (dtypes.int64, -2**63, 2**63), (dtypes.uint64, 0, 2**64), (dtypes.uint64, 2**63, 2**64)], ids=str)
def test_randint_range(dt, low, high):
  t = Tensor.randint(4000, low=low, high=high, dtype=dt)
  assert t.dtype == dt and t.shape == (4000,)
  x = [int(v) for v in t.numpy().tolist()]
  assert min(x) >= low and max(x) < high
  if high - low <= 256: assert len(set(x)) == high - low  # every value shows up
  else:
    # the mean of a uniform integer: within 5 sigma
    mid, sd = (low + high - 1) / 2, (high - low) / math.sqrt(12)
    assert abs(sum(x) / len(x) - mid) < 5 * sd / math.sqrt(len(x))

def test_randint_uniform_counts():
  x = Tensor.randint(14000, low=-3, high=4).numpy()
  counts = np.bincount(x + 3, minlength=7)
  assert ((counts - 2000) ** 2 / 2000).sum() < 27  # chi2(6), p < 1e-4 cutoff

def test_randint_default_and_shapes():
  t = Tensor.randint(2, 3)
  assert t.shape == (2, 3) and t.dtype == dtypes.int32 and ((t.numpy() >= 0) & (t.numpy() < 10)).all()
  assert Tensor.randint(0, 3).shape == (0, 3)
  assert Tensor.randint((), low=4, high=5).item() == 4

def test_randint_errors():
  with pytest.raises(TypeError): Tensor.randint(3, low=0.5, high=3)
  with pytest.raises(TypeError): Tensor.randint(3, low=0, high=3.0)
  with pytest.raises(TypeError): Tensor.randint(3, dtype=dtypes.float32)
  with pytest.raises(RuntimeError): Tensor.randint(3, low=5, high=5)
  with pytest.raises(RuntimeError): Tensor.randint(3, low=0, high=300, dtype=dtypes.uint8)
  # torch raises RuntimeError for an empty interval too
  with pytest.raises(RuntimeError): torch.randint(5, 5, (3,))

def test_randint_reproducible():
  Tensor.manual_seed(2)
  a = Tensor.randint(50, low=0, high=1000).numpy()
  Tensor.manual_seed(2)
  np.testing.assert_equal(Tensor.randint(50, low=0, high=1000).numpy(), a)

# *** initializers ***

def test_scaled_uniform():
  x = Tensor.scaled_uniform(40, 50).numpy()
  b = (40 * 50) ** -0.5
  assert x.shape == (40, 50) and np.abs(x).max() <= b and np.abs(x).max() > 0.95 * b
  assert abs(x.std() - b / math.sqrt(3)) < 0.05 * b

def test_glorot_uniform():
  x = Tensor.glorot_uniform(30, 20, 3).numpy()
  b = math.sqrt(6 / (30 + 20 * 3))
  assert x.shape == (30, 20, 3) and np.abs(x).max() <= b and np.abs(x).max() > 0.95 * b

@pytest.mark.parametrize("a", [0.01, 0.0, math.sqrt(5)])
def test_kaiming_uniform(a):
  x = Tensor.kaiming_uniform(64, 8, 3, 3, a=a).numpy()
  b = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(8 * 9)
  assert np.abs(x).max() <= b * (1 + 1e-6) and np.abs(x).max() > 0.95 * b
  assert abs(x.std() - b / math.sqrt(3)) < 0.05 * b

@pytest.mark.parametrize("a", [0.01, 1.0])
def test_kaiming_normal(a):
  x = Tensor.kaiming_normal(64, 16, 3, a=a).numpy().astype(np.float64)
  std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(16 * 3)
  assert abs(x.mean()) < 4 * std / math.sqrt(x.size)
  assert abs(x.std() - std) < 0.05 * std

def test_initializer_dtype():
  assert Tensor.glorot_uniform(3, 4, dtype=dtypes.float16).dtype == dtypes.float16
  assert Tensor.kaiming_uniform(3, 4, dtype=dtypes.float64).dtype == dtypes.float64

# *** randperm ***

needs_argsort = pytest.mark.xfail(not hasattr(Tensor, "argsort"), reason="Tensor.argsort (frontend/reduce.py) is missing", strict=False)

@needs_argsort
@pytest.mark.parametrize("n", [1, 2, 7, 33])
def test_randperm_is_permutation(n):
  t = Tensor.randperm(n)
  assert t.dtype == dtypes.int32 and t.shape == (n,)
  assert sorted(t.numpy().tolist()) == list(range(n))

@needs_argsort
def test_randperm_random_and_reproducible():
  Tensor.manual_seed(4)
  a = Tensor.randperm(20).numpy()
  Tensor.manual_seed(4)
  np.testing.assert_equal(Tensor.randperm(20).numpy(), a)
  b = Tensor.randperm(20).numpy()
  assert not np.array_equal(a, b) and not np.array_equal(a, np.arange(20))

@needs_argsort
def test_randperm_uniform_positions():
  # 30 permutations of 3 (fixed seed) show all 6 orders
  perms = [tuple(Tensor.randperm(3).numpy().tolist()) for _ in range(30)]
  assert len(set(perms)) == 6

@needs_argsort
def test_randperm_dtype_and_empty():
  assert Tensor.randperm(5, dtype=dtypes.int64).dtype == dtypes.int64
  assert Tensor.randperm(0).shape == (0,)

def test_randperm_bad():
  with pytest.raises(RuntimeError): Tensor.randperm(-1)
  with pytest.raises(RuntimeError): torch.randperm(-1)

# *** multinomial ***

def test_multinomial_replacement_frequencies():
  p = np.array([0.1, 0.0, 0.6, 0.3])
  x = Tensor(p.astype(np.float32)).multinomial(6000, replacement=True)
  assert x.shape == (6000,) and x.dtype == dtypes.int32  # tinygrad's int32 (torch: int64)
  counts = np.bincount(x.numpy(), minlength=4)
  assert counts[1] == 0
  exp = p * 6000
  assert sum((counts[i] - exp[i]) ** 2 / exp[i] for i in (0, 2, 3)) < 19  # chi2(2), p < 1e-4 cutoff

def test_multinomial_unnormalized_and_2d():
  w = Tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 5.0], [0.0, 2.0, 2.0]])
  x = w.multinomial(200, replacement=True)
  assert x.shape == (3, 200)
  v = x.numpy()
  assert (v[0] == 0).all() and (v[1] == 2).all() and set(v[2].tolist()) == {1, 2}

def test_multinomial_leading_and_trailing_zeros():
  x = Tensor([0.0, 0.0, 1.0, 0.0]).multinomial(100, replacement=True).numpy()
  assert (x == 2).all()

def test_multinomial_without_replacement():
  w = Tensor.ones(50, 5)
  x = w.multinomial(5).numpy()
  assert x.shape == (50, 5)
  assert all(sorted(r) == [0, 1, 2, 3, 4] for r in x.tolist())
  assert len({tuple(r) for r in x.tolist()}) > 30
  # the heavy category tends to come first
  y = Tensor([1.0, 100.0, 1.0]).multinomial(2).numpy()
  assert y.shape == (2,) and len(set(y.tolist())) == 2

def test_multinomial_one_sample():
  x = Tensor([0.25, 0.75]).multinomial().numpy()
  assert x.shape == (1,) and x[0] in (0, 1)
  counts = np.bincount(Tensor([[0.25, 0.75]] * 400).multinomial().numpy().reshape(-1), minlength=2)
  assert 60 < counts[0] < 140

def test_multinomial_int_weights():
  x = Tensor([0, 3, 1]).multinomial(300, replacement=True).numpy()
  assert set(x.tolist()) == {1, 2}

@pytest.mark.parametrize("shape,fxn", [((2, 2, 2), lambda t: t.multinomial(1)), ((3,), lambda t: t.multinomial(0, True)),
                                       ((3,), lambda t: t.multinomial(4)), ((2, 3), lambda t: t.multinomial(-1, True))],
                         ids=["3d", "zero_samples", "too_many_without_replacement", "negative_samples"])
def test_multinomial_errors(shape, fxn):
  helper_test_exception(None, fxn, fxn, RuntimeError, vals=[np.ones(shape, dtype=np.float32)])

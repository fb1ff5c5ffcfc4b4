"""Tensor methods: random ops. Built only from Tensor's core primitives (see tg_core/tensor.py).

Counter-based like tinygrad: every draw runs Threefry-2x32 (`Ops.THREEFRY`) on a uint64 counter (`arange` plus the running
per-device counter), keyed by `Tensor._seed`. The counter advances on the host when a random tensor is *built*, so values
depend only on the seed and the order of the calls, not on when (or whether) anything is realized. The key doesn't depend
on the device, so after `manual_seed` the same sequence of calls gives the same values on every device."""
from __future__ import annotations
import math
import time
from typing import TYPE_CHECKING, Any

from tg_core.dtype import DTypeLike, dtypes, least_upper_dtype, to_dtype
from tg_core.helpers import all_int, getenv, prod
from tg_core.uop import Ops

from tg_core.frontend import tensor_class

if TYPE_CHECKING:
  from tg_core.tensor import Tensor

_T = tensor_class

def _shape_arg(*shape: Any) -> tuple[int, ...]:
  from tg_core.helpers import argfix
  return tuple(argfix(*shape))

_UINT_OF_SIZE = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
_MASK64 = (1 << 64) - 1

class RandomMixin:
  __slots__ = ()
  # the seed of the generator, and the number of 64-bit draws made so far on each device
  _seed: int = getenv("SEED", int(time.time()))
  _device_rng_counters: dict[str, int] = {}

  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    """Seed the generator and reset every device's counter. `Tensor.manual_seed(42); Tensor.rand(3)` is reproducible."""
    T = _T()
    T._seed, T._device_rng_counters = int(seed), {}

  @staticmethod
  def _random_bits(numel: int, device: str) -> Tensor:
    """`numel` uint64s of Threefry-2x32 output (flat), advancing `device`'s counter by `numel`."""
    T = _T()
    counters = T._device_rng_counters
    start = counters.get(device, 0)
    counters[device] = start + numel
    ctr = T.arange(numel, device=device, dtype=dtypes.uint64, requires_grad=False) + (start & _MASK64)
    key = T.full(ctr.shape, T._seed & _MASK64, dtype=dtypes.uint64, device=device)
    return ctr._apply_uop(lambda u, k: u.alu(Ops.THREEFRY, k), key)

  @staticmethod
  def rand(*shape: Any, device: str | None = None, dtype: DTypeLike | None = None, contiguous: bool = True, **kwargs: Any) -> Tensor:
    """Uniform random numbers in [0, 1): `Tensor.rand(2, 3)`."""
    T = _T()
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if not dtypes.is_float(dt) or dtypes.is_weak(dt): raise ValueError(f"rand only supports float dtypes, got {dt}")
    shp = _shape_arg(*shape)
    if not all_int(shp) or not all(s >= 0 for s in shp): raise ValueError(f"invalid input {shp=}")
    if device is not None and not isinstance(device, str): raise ValueError(f"rand only supports a single device, got {device=}")
    from tg_core.tensor import canonicalize_device
    dev = canonicalize_device(device)
    assert isinstance(dev, str)
    requires_grad = kwargs.pop("requires_grad", None)
    if kwargs: raise TypeError(f"rand got unexpected keyword arguments {sorted(kwargs)}")
    if (numel := prod(shp)) == 0: return T.zeros(shp, device=dev, dtype=dt, requires_grad=requires_grad)
    bits = T._random_bits(numel, dev)
    # keep the top `nmant` bits as the mantissa of a float in [1, 2) (exponent of 1.0), then subtract 1
    exp, nmant = dtypes.finfo(dt)
    udt = _UINT_OF_SIZE[dt.itemsize]
    mant = (bits >> (64 - nmant)).cast(udt)
    one_bits = ((1 << (exp - 1)) - 1) << nmant
    out = (mant | one_bits).bitcast(dt) - 1
    out = out.reshape(shp).requires_grad_(requires_grad)
    return out.contiguous() if contiguous else out

  def rand_like(self: Tensor, **kwargs: Any) -> Tensor:  # type: ignore[misc]
    """`Tensor.rand` with this tensor's shape, dtype and device (each overridable)."""
    dtype = kwargs.pop("dtype", self.dtype)
    device = kwargs.pop("device", self.device)
    if isinstance(device, tuple): raise ValueError(f"rand_like only supports a single device, got {device=}")
    return _T().rand(*self.shape, device=device, dtype=dtype, **kwargs)

  @staticmethod
  def randn(*shape: Any, dtype: DTypeLike | None = None, requires_grad: bool | None = None, **kwargs: Any) -> Tensor:
    """Standard normal random numbers (Box-Muller on two float32 uniform draws): `Tensor.randn(2, 3)`."""
    shp = _shape_arg(*shape)
    src = _T().rand((2, *shp), **{**kwargs, "dtype": dtypes.float32})
    n = prod(shp)
    u1, u2 = src.reshape(2, n).shrink(((0, 1), None)).reshape(shp), src.reshape(2, n).shrink(((1, 2), None)).reshape(shp)
    # cos(2*pi*u1) = sin(pi/2 - 2*pi*u1); 1 - u2 is in (0, 1] so the log is finite
    z = (u1 * (-2 * math.pi) + math.pi / 2).sin() * ((1 - u2).log() * -2).sqrt()
    return z.cast(to_dtype(dtype) if dtype is not None else dtypes.default_float).requires_grad_(requires_grad)

  def randn_like(self: Tensor, dtype: DTypeLike | None = None, requires_grad: bool | None = None, **kwargs: Any) -> Tensor:  # type: ignore[misc]
    """`Tensor.randn` with this tensor's shape, dtype and device (each overridable)."""
    device = kwargs.pop("device", self.device)
    if isinstance(device, tuple): raise ValueError(f"randn_like only supports a single device, got {device=}")
    return _T().randn(*self.shape, dtype=dtype or self.dtype, requires_grad=requires_grad, device=device, **kwargs)

  @staticmethod
  def randint(*shape: Any, low: int = 0, high: int = 10, dtype: DTypeLike = dtypes.int32, **kwargs: Any) -> Tensor:
    """Uniform random integers in [low, high): `Tensor.randint(2, 3, low=5, high=10)` (tinygrad's signature, not torch's)."""
    if not isinstance(low, int) or not isinstance(high, int) or isinstance(low, bool) or isinstance(high, bool):
      raise TypeError(f"{low=} and {high=} must be integers")
    dt = to_dtype(dtype)
    if not dtypes.is_int(dt) or dtypes.is_weak(dt): raise TypeError(f"{dtype=} must be int")
    # torch raises RuntimeError for an empty or out-of-range interval
    if high <= low: raise RuntimeError(f"randint expects low < high, got {low=} {high=}")
    if low < dtypes.min(dt) or high - 1 > dtypes.max(dt): raise RuntimeError(f"[{low}, {high}) is out of range for {dt}")
    T = _T()
    shp = _shape_arg(*shape)
    if not all_int(shp) or not all(s >= 0 for s in shp): raise ValueError(f"invalid input {shp=}")
    from tg_core.tensor import canonicalize_device
    dev = canonicalize_device(kwargs.pop("device", None))
    if not isinstance(dev, str): raise ValueError(f"randint only supports a single device, got {dev=}")
    requires_grad = kwargs.pop("requires_grad", None)
    if kwargs: raise TypeError(f"randint got unexpected keyword arguments {sorted(kwargs)}")
    if prod(shp) == 0: return T.zeros(shp, device=dev, dtype=dt, requires_grad=requires_grad)
    bits, span = T._random_bits(prod(shp), dev), high - low
    # multiply-shift (Lemire) on the top 32 bits when the range fits in 32 bits, else 64-bit modulo (bias < span/2**64)
    idx = (((bits >> 32) * span) >> 32) if span <= 2**32 else bits % span
    # the offset wraps modulo 2**64 in the 64-bit accumulator, so it's exact even for the full int64 range
    acc = dtypes.uint64 if dtypes.is_unsigned(dt) else dtypes.int64
    off = idx.cast(acc) + T.full((), low if acc == dtypes.int64 or low >= 0 else low & _MASK64, dtype=acc, device=dev)
    return off.cast(dt).reshape(shp).requires_grad_(requires_grad)

  @staticmethod
  def normal(*shape: Any, mean: float = 0.0, std: float = 1.0, requires_grad: bool | None = None, **kwargs: Any) -> Tensor:
    """Normal random numbers with `mean` and `std`: `Tensor.normal(2, 3, mean=1, std=0.5)`."""
    return ((std * _T().randn(*shape, **kwargs)) + mean).requires_grad_(requires_grad)

  @staticmethod
  def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, dtype: DTypeLike | None = None, requires_grad: bool | None = None,
              **kwargs: Any) -> Tensor:
    """Uniform random numbers in [low, high): `Tensor.uniform(2, 3, low=-1, high=1)`. Integer dtypes draw integers."""
    T = _T()
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if dtypes.is_int(dt): return T.randint(*shape, low=int(low), high=int(high), dtype=dt, requires_grad=requires_grad, **kwargs)
    if not dtypes.is_float(dt): raise ValueError(f"uniform only supports float and int dtypes, got {dt}")
    gen = least_upper_dtype(dt, dtypes.float32)  # draw in at least float32, like tinygrad
    return (((high - low) * T.rand(*shape, dtype=gen, **kwargs)) + low).cast(dt).requires_grad_(requires_grad)

  @staticmethod
  def scaled_uniform(*shape: Any, **kwargs: Any) -> Tensor:
    """Uniform in [-1, 1) scaled by 1/sqrt(numel)."""
    return _T().uniform(*shape, low=-1.0, high=1.0, **kwargs).mul(prod(_shape_arg(*shape)) ** -0.5)

  @staticmethod
  def glorot_uniform(*shape: Any, **kwargs: Any) -> Tensor:
    """Glorot (Xavier) uniform init: <https://www.tensorflow.org/api_docs/python/tf/keras/initializers/GlorotUniform>."""
    shp = _shape_arg(*shape)
    return _T().uniform(*shp, low=-1.0, high=1.0, **kwargs).mul((6 / (shp[0] + prod(shp[1:]))) ** 0.5)

  @staticmethod
  def kaiming_uniform(*shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
    """Kaiming (He) uniform init: <https://pytorch.org/docs/stable/nn.init.html#torch.nn.init.kaiming_uniform_>."""
    shp = _shape_arg(*shape)
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shp[1:]))
    return _T().uniform(*shp, low=-bound, high=bound, **kwargs)

  @staticmethod
  def kaiming_normal(*shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
    """Kaiming (He) normal init: <https://pytorch.org/docs/stable/nn.init.html#torch.nn.init.kaiming_normal_>."""
    shp = _shape_arg(*shape)
    std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shp[1:]))
    return _T().normal(*shp, mean=0.0, std=std, **kwargs)

  @staticmethod
  def randperm(n: int, device: str | None = None, dtype: DTypeLike = dtypes.int32, **kwargs: Any) -> Tensor:
    """A random permutation of 0..n-1 (argsort of uniform draws): `Tensor.randperm(5)`."""
    if not isinstance(n, int) or n < 0: raise RuntimeError(f"randperm: n must be a non-negative int, got {n!r}")
    requires_grad = kwargs.pop("requires_grad", None)
    r = _T().rand(n, device=device, dtype=dtypes.float64, **kwargs)  # float64: ties are (practically) impossible
    return r.argsort().cast(to_dtype(dtype)).requires_grad_(requires_grad)  # type: ignore[attr-defined]

  def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:  # type: ignore[misc]
    """Sample category indices from (unnormalized) weights along the last dim: `Tensor([1, 3]).multinomial(4, True)`.
    Returns int32 (tinygrad's default int; torch returns int64)."""
    T = _T()
    # torch raises RuntimeError for these (tinygrad asserts)
    if not 1 <= self.ndim <= 2: raise RuntimeError(f"prob_dist must be 1 or 2 dim, got {self.ndim}")
    if not isinstance(num_samples, int) or num_samples <= 0: raise RuntimeError(f"cannot sample {num_samples=} <= 0 samples")
    k = int(self.shape[-1])
    if k == 0: raise RuntimeError("multinomial: the number of categories can't be 0")
    if not replacement and num_samples > k: raise RuntimeError(f"cannot sample {num_samples=} > {k} samples without replacement")
    w = (self.unsqueeze(0) if self.ndim == 1 else self).float().detach()
    b = int(w.shape[0])
    dev = self.device
    ar = T.arange(k, device=dev)
    tri = (ar.reshape(k, 1) <= ar.reshape(1, k)).float()  # tri[j, c] = j <= c: cumsum as a matmul

    def draw(w: Tensor, n: int) -> Tensor:
      cdf = (w.reshape(b, k, 1) * tri).sum(1)
      cdf = cdf / cdf.shrink((None, (k - 1, k)))
      u = T.rand(n, b, 1, device=dev)
      return (u >= cdf.reshape(1, b, k)).sum(2).permute(1, 0).cast(dtypes.int32)  # (b, n): the first c with cdf[c] > u
    if replacement or num_samples == 1: out = draw(w, num_samples)
    else:
      picks = []
      for _ in range(num_samples):
        idx = draw(w, 1)
        picks.append(idx)
        w = w * ar.reshape(1, k).ne(idx).float()
      out = picks[0]
      for i, p in enumerate(picks[1:], start=1): out = out.pad(((0, 0), (0, 1))) + p.pad(((0, 0), (i, 0)))
    return out.reshape(num_samples) if self.ndim == 1 else out

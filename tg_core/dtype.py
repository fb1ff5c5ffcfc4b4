"""Data types, torch-compatible promotion, address spaces."""
from __future__ import annotations
import enum
import functools
import math
import struct
from dataclasses import dataclass
from typing import Any, Final, Union

import numpy as np

ConstType = Union[float, int, bool]

class AddrSpace(enum.Enum):
  """Where a buffer lives: device memory, workgroup-shared memory, registers, or ALU (a scalar variable)."""
  GLOBAL = enum.auto(); LOCAL = enum.auto(); REG = enum.auto(); ALU = enum.auto()  # noqa: E702
  def __repr__(self) -> str: return f"AddrSpace.{self.name}"

@dataclass(frozen=True, eq=False)
class DType:
  """A scalar or vector data type. Instances are interned: compare with `is` or `==`."""
  priority: int      # order within the promotion lattice; used to break ties
  bitsize: int
  name: str
  fmt: str | None    # struct format character, None when Python's struct has none
  count: int = 1     # vector width
  _scalar: DType | None = None

  @staticmethod
  @functools.cache
  def new(priority: int, bitsize: int, name: str, fmt: str | None) -> DType: return DType(priority, bitsize, name, fmt)
  @property
  def itemsize(self) -> int: return (self.bitsize * self.count + 7) // 8
  @property
  def scalar_bitsize(self) -> int: return self.bitsize
  def scalar(self) -> DType: return self._scalar if self._scalar is not None else self
  @functools.cache  # noqa: B019 (DTypes are interned, the cache is bounded)
  def vec(self, sz: int) -> DType:
    assert self.count == 1, f"can't vectorize {self} with size {sz}"
    if sz == 1 or self == dtypes.void: return self
    return DType(self.priority, self.bitsize, f"{self.name}{sz}", None, sz, self)
  def __reduce__(self) -> tuple:
    return (to_dtype, (INVERSE_DTYPES_DICT.get(self.name, self.name),)) if self.count == 1 else (DType.vec, (self.scalar(), self.count))
  def __repr__(self) -> str:
    return f"dtypes.{INVERSE_DTYPES_DICT.get(self.scalar().name, self.scalar().name)}" + (f".vec({self.count})" if self.count > 1 else "")
  def __lt__(self, o: DType) -> bool: return (self.priority, self.bitsize, self.name, self.fmt, self.count) < (o.priority, o.bitsize, o.name, o.fmt, o.count)
  @property
  def min(self) -> ConstType: return dtypes.min(self)
  @property
  def max(self) -> ConstType: return dtypes.max(self)

class dtypes:
  void: Final[DType] = DType.new(-1, 0, "void", None)
  bool: Final[DType] = DType.new(0, 1, "bool", "?")
  weakint: Final[DType] = DType.new(0, 64, "weakint", None)     # a Python int: takes the width of what it meets
  int8: Final[DType] = DType.new(1, 8, "signed char", "b")
  uint8: Final[DType] = DType.new(2, 8, "unsigned char", "B")
  int16: Final[DType] = DType.new(3, 16, "short", "h")
  uint16: Final[DType] = DType.new(4, 16, "unsigned short", "H")
  int32: Final[DType] = DType.new(5, 32, "int", "i")
  uint32: Final[DType] = DType.new(6, 32, "unsigned int", "I")
  int64: Final[DType] = DType.new(7, 64, "long", "q")
  uint64: Final[DType] = DType.new(8, 64, "unsigned long", "Q")
  weakfloat: Final[DType] = DType.new(9, 64, "weakfloat", None)  # a Python float
  fp8e4m3: Final[DType] = DType.new(10, 8, "float8_e4m3", None)
  fp8e5m2: Final[DType] = DType.new(11, 8, "float8_e5m2", None)
  float16: Final[DType] = DType.new(12, 16, "half", "e")
  bfloat16: Final[DType] = DType.new(13, 16, "__bf16", None)
  float32: Final[DType] = DType.new(14, 32, "float", "f")
  float64: Final[DType] = DType.new(15, 64, "double", "d")
  # aliases
  half, float, double = float16, float32, float64
  uchar, char, short, ushort, int, uint, long, ulong = uint8, int8, int16, uint16, int32, uint32, int64, uint64
  default_float: DType = float32
  default_int: DType = int32

  floats: tuple[DType, ...] = (fp8e4m3, fp8e5m2, float16, bfloat16, float32, float64, weakfloat)
  fp8s: tuple[DType, ...] = (fp8e4m3, fp8e5m2)
  uints: tuple[DType, ...] = (uint8, uint16, uint32, uint64)
  sints: tuple[DType, ...] = (int8, int16, int32, int64, weakint)
  ints: tuple[DType, ...] = uints + sints
  weaks: tuple[DType, ...] = (weakint, weakfloat)
  int64s: tuple[DType, ...] = (int64, uint64)

  @staticmethod
  def is_float(x: DType) -> bool: return x.scalar() in dtypes.floats
  @staticmethod
  def is_int(x: DType) -> bool: return x.scalar() in dtypes.ints
  @staticmethod
  def is_unsigned(x: DType) -> bool: return x.scalar() in dtypes.uints
  @staticmethod
  def is_bool(x: DType) -> bool: return x.scalar() == dtypes.bool
  @staticmethod
  def is_weak(x: DType) -> bool: return x.scalar() in dtypes.weaks
  @staticmethod
  def from_py(x: Any) -> DType:
    """The weak dtype of a Python value (nested lists take the widest element)."""
    if x.__class__ is float: return dtypes.weakfloat
    if x.__class__ is bool: return dtypes.bool
    if x.__class__ is int: return dtypes.weakint
    if isinstance(x, (list, tuple)): return max((dtypes.from_py(xi) for xi in x), default=dtypes.default_float)
    raise RuntimeError(f"could not infer dtype of {x!r} ({type(x).__name__})")
  @staticmethod
  def as_const(val: Any, dtype: DType) -> ConstType | tuple:
    """Coerce a Python value to what a constant of `dtype` holds (ints wrap like C, floats round to the dtype)."""
    if isinstance(val, tuple):
      assert len(val) == dtype.count, f"mismatch {val} {dtype}"
      return tuple(dtypes.as_const(x, dtype.scalar()) for x in val)
    if dtypes.is_int(dtype):
      if isinstance(val, float) and not math.isfinite(val): return 0  # C leaves this undefined; pick a value
      return truncate_int(int(val), dtype)
    if dtypes.is_float(dtype): return truncate_float(float(val), dtype)
    if dtype == dtypes.bool: return bool(val)
    return val
  @staticmethod
  @functools.cache
  def min(dtype: DType) -> ConstType:
    dtype = dtype.scalar()
    if dtypes.is_int(dtype): return 0 if dtypes.is_unsigned(dtype) else -2**(dtype.bitsize-1)
    return -math.inf if dtypes.is_float(dtype) else False
  @staticmethod
  @functools.cache
  def max(dtype: DType) -> ConstType:
    dtype = dtype.scalar()
    if dtypes.is_int(dtype): return 2**(dtype.bitsize)-1 if dtypes.is_unsigned(dtype) else 2**(dtype.bitsize-1)-1
    return math.inf if dtypes.is_float(dtype) else True
  @staticmethod
  def finfo(dtype: DType) -> tuple[int, int]:
    """(exponent bits, mantissa bits) of a float dtype."""
    if not dtypes.is_float(dtype): raise ValueError(f"{dtype} is not a floating point type")
    return {dtypes.float16: (5, 10), dtypes.bfloat16: (8, 7), dtypes.float32: (8, 23), dtypes.float64: (11, 52),
            dtypes.fp8e5m2: (5, 2), dtypes.fp8e4m3: (4, 3), dtypes.weakfloat: (11, 52)}[dtype.scalar()]
  @staticmethod
  def fields() -> dict[str, DType]: return DTYPES_DICT

DTYPES_DICT: dict[str, DType] = {k: v for k, v in dtypes.__dict__.items() if isinstance(v, DType) and not k.startswith(("default", "void"))}
INVERSE_DTYPES_DICT: dict[str, str] = {**{v.name: k for k, v in reversed(list(DTYPES_DICT.items()))}, "void": "void"}

DTypeLike = Union[str, DType]
def to_dtype(dtype: DTypeLike) -> DType:
  """A DType from a DType, a name ("float32", "half") or a numpy dtype."""
  if isinstance(dtype, DType): return dtype
  if isinstance(dtype, str):
    if dtype in DTYPES_DICT: return DTYPES_DICT[dtype]
    if dtype == "void": return dtypes.void
    raise TypeError(f"unknown dtype {dtype!r}; known: {sorted(DTYPES_DICT)}")
  if isinstance(dtype, (np.dtype, type)): return _from_np_dtype(np.dtype(dtype))
  raise TypeError(f"expected a DType or a dtype name, got {dtype!r} ({type(dtype).__name__})")

# *** promotion: a lattice whose least upper bound matches torch's type promotion for binary ops ***
# Python constants enter as weakint/weakfloat: they sit just above bool / just above the ints, so a tensor's own
# dtype wins over a constant of the same kind (float16 tensor * 2.5 -> float16, int8 tensor + 1 -> int8).
_promo_lattice: dict[DType, list[DType]] = {
  dtypes.bool: [dtypes.weakint], dtypes.weakint: [dtypes.int8, dtypes.uint8],
  dtypes.int8: [dtypes.int16], dtypes.int16: [dtypes.int32], dtypes.int32: [dtypes.int64], dtypes.int64: [dtypes.weakfloat],
  dtypes.uint8: [dtypes.int16, dtypes.uint16], dtypes.uint16: [dtypes.int32, dtypes.uint32],
  dtypes.uint32: [dtypes.int64, dtypes.uint64], dtypes.uint64: [dtypes.weakfloat],
  dtypes.weakfloat: [dtypes.fp8e4m3, dtypes.fp8e5m2], dtypes.fp8e4m3: [dtypes.float16, dtypes.bfloat16],
  dtypes.fp8e5m2: [dtypes.float16, dtypes.bfloat16], dtypes.float16: [dtypes.float32], dtypes.bfloat16: [dtypes.float32],
  dtypes.float32: [dtypes.float64]}

@functools.cache
def _get_recursive_parents(dtype: DType) -> frozenset[DType]:
  return frozenset({dtype}.union(*[_get_recursive_parents(d) for d in _promo_lattice.get(dtype, [])]))

@functools.cache
def least_upper_dtype(*ds: DType) -> DType:
  """The smallest dtype every argument promotes to. Weak dtypes stay weak; commit them with `strong_dtype`."""
  if not ds: raise ValueError("least_upper_dtype needs at least one dtype")
  if len(ds) == 1: return ds[0]
  common = frozenset.intersection(*[_get_recursive_parents(d.scalar()) for d in ds])
  return min(common) if common else dtypes.float64

def strong_dtype(dt: DType) -> DType:
  """Storage is never weak: a weak dtype commits to the default int/float width."""
  if dt.scalar() == dtypes.weakint: return dtypes.default_int if dt.count == 1 else dtypes.default_int.vec(dt.count)
  if dt.scalar() == dtypes.weakfloat: return dtypes.default_float if dt.count == 1 else dtypes.default_float.vec(dt.count)
  return dt

def least_upper_float(dt: DType) -> DType: return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.weakfloat)
def float_result_dtype(dt: DType) -> DType:
  """The dtype a float function (exp, sqrt, softmax, ...) of `dt` returns: floats keep theirs, ints and bool give the default
  float (like torch)."""
  return dt if dtypes.is_float(dt) else strong_dtype(least_upper_float(dt))

def sum_acc_dtype(dt: DType) -> DType:
  """The dtype `sum` accumulates in: small ints widen, bool sums as int, floats narrower than float32 accumulate in float32."""
  if dtypes.is_unsigned(dt): return least_upper_dtype(dt, dtypes.uint32) if dt.bitsize < 32 else dt
  if dtypes.is_int(dt) or dt == dtypes.bool: return least_upper_dtype(dt, dtypes.int32) if dt.bitsize < 32 else dt
  return least_upper_dtype(dt, dtypes.float32) if dtypes.is_float(dt) and dt.bitsize < 32 else dt

# *** value truncation (what a constant of a dtype can hold) ***
def truncate_int(x: int, dt: DType) -> int:
  if dt.scalar() == dtypes.weakint: return x
  bits = dt.scalar().bitsize
  x &= (1 << bits) - 1
  return x - (1 << bits) if not dtypes.is_unsigned(dt) and x >= 1 << (bits - 1) else x

def _round_float(x: float, fmt: str) -> float:
  try: return struct.unpack(fmt, struct.pack(fmt, x))[0]
  except OverflowError: return math.copysign(math.inf, x)

def float_to_bf16(x: float) -> float:
  if not math.isfinite(x): return x
  u = struct.unpack("I", struct.pack("f", _round_float(x, "f")))[0]
  u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000  # round to nearest even
  return struct.unpack("f", struct.pack("I", u))[0]

def _fp8_round(x: float, dt: DType) -> float:
  return float(fp8_to_float(float_to_fp8(x, dt), dt))

def truncate_float(x: float, dt: DType) -> float:
  dt = dt.scalar()
  if dt in (dtypes.float64, dtypes.weakfloat): return x
  if dt == dtypes.float32: return _round_float(x, "f")
  if dt == dtypes.float16: return _round_float(x, "e")
  if dt == dtypes.bfloat16: return float_to_bf16(x)
  if dt in dtypes.fp8s: return _fp8_round(x, dt)
  raise TypeError(f"{dt} is not a float dtype")

# *** fp8 (OCP e4m3fn and e5m2) conversion, like torch's casts: e4m3fn saturates, e5m2 overflows to inf ***
FP8_MAX = {dtypes.fp8e4m3: 448.0, dtypes.fp8e5m2: 57344.0}
def float_to_fp8(x: float, dt: DType) -> int:
  """Round-to-nearest-even float -> fp8 bits, like torch's casts: e4m3fn has no inf, so out of range (inf included)
  saturates to +-448; e5m2 rounds past its max to +-inf. NaN keeps its sign (0x7f / 0xff)."""
  exp_bits, man_bits = dtypes.finfo(dt)
  bias = (1 << (exp_bits - 1)) - 1
  sign = 0x80 if math.copysign(1.0, x) < 0 else 0
  if math.isnan(x): return sign | 0x7F
  ax = abs(x)
  if math.isinf(ax): return sign | (0x7C if dt == dtypes.fp8e5m2 else 0x7E)
  if ax == 0: return sign
  # quantize in the value domain: find exponent, round mantissa to nearest even
  e = max(math.floor(math.log2(ax)), 1 - bias)
  scale = 2.0 ** (e - man_bits)
  q = ax / scale
  qr = math.floor(q)
  rem = q - qr
  if rem > 0.5 or (rem == 0.5 and qr % 2 == 1): qr += 1
  val = qr * scale
  if val > FP8_MAX[dt]:
    if dt == dtypes.fp8e4m3: return sign | 0x7E  # saturates to the max normal
    return sign | 0x7C  # e5m2 overflows to inf
  if val == 0: return sign
  e2 = max(math.floor(math.log2(val)), 1 - bias)
  m = round(val / 2.0 ** (e2 - man_bits))
  if e2 == 1 - bias and m < (1 << man_bits): return sign | m  # subnormal
  return sign | ((e2 + bias) << man_bits) | (m - (1 << man_bits))

def fp8_to_float(b: int, dt: DType) -> float:
  exp_bits, man_bits = dtypes.finfo(dt)
  bias = (1 << (exp_bits - 1)) - 1
  sign = -1.0 if b & 0x80 else 1.0
  e, m = (b >> man_bits) & ((1 << exp_bits) - 1), b & ((1 << man_bits) - 1)
  if dt == dtypes.fp8e4m3 and e == 0xF and m == 0x7: return math.nan
  if dt == dtypes.fp8e5m2 and e == 0x1F: return sign * math.inf if m == 0 else math.nan
  if e == 0: return sign * m * 2.0 ** (1 - bias - man_bits)
  return sign * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)

# *** numpy interop ***
_NP_OF: dict[DType, Any] = {dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.uint8: np.uint8, dtypes.int16: np.int16,
  dtypes.uint16: np.uint16, dtypes.int32: np.int32, dtypes.uint32: np.uint32, dtypes.int64: np.int64, dtypes.uint64: np.uint64,
  dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64}
# dtypes numpy lacks are held as their bit patterns
_NP_STORAGE: dict[DType, Any] = {dtypes.bfloat16: np.uint16, dtypes.fp8e4m3: np.uint8, dtypes.fp8e5m2: np.uint8}

def _to_np_dtype(dt: DType) -> Any | None:
  """The numpy dtype for `dt`, or None when numpy has none (bfloat16, fp8: use `_to_np_storage`)."""
  return _NP_OF.get(strong_dtype(dt).scalar())
def _to_np_storage(dt: DType) -> Any:
  """The numpy dtype that holds `dt`'s bits (bfloat16 -> uint16, fp8 -> uint8)."""
  dt = strong_dtype(dt).scalar()
  if dt in _NP_OF: return _NP_OF[dt]
  if dt in _NP_STORAGE: return _NP_STORAGE[dt]
  raise TypeError(f"no numpy storage for {dt}")
def _from_np_dtype(npdt: Any) -> DType:
  npdt = np.dtype(npdt)
  for k, v in _NP_OF.items():
    if np.dtype(v) == npdt: return k
  raise TypeError(f"numpy dtype {npdt} is not supported; use one of {[np.dtype(v).name for v in _NP_OF.values()]}")

"""Small utilities and the environment knobs (ContextVar) shared by every stage of tg."""
from __future__ import annotations
import contextlib
import functools
import itertools
import math
import os
import sys
import time
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

T = TypeVar("T")
U = TypeVar("U")

def prod(x: Iterable[T]) -> T | int:
  return functools.reduce(lambda a, b: a * b, x, 1)  # type: ignore[operator,return-value]
def dedup(x: Iterable[T]) -> list[T]: return list(dict.fromkeys(x))
def flatten(x: Iterable[Iterable[T]]) -> list[T]: return [item for sub in x for item in sub]
def argsort(x: Sequence[Any]) -> list[int]: return sorted(range(len(x)), key=x.__getitem__)
def all_same(items: Sequence[Any]) -> bool: return all(x == items[0] for x in items)
def all_int(t: Sequence[Any]) -> bool: return all(isinstance(s, int) for s in t)
def ceildiv(num: int, amt: int) -> int: return -(num // -amt)
def round_up(num: int, amt: int) -> int: return ceildiv(num, amt) * amt
def argfix(*x: Any) -> tuple:
  """Shape-like arguments given either spread out, f(2, 3), or as one sequence, f((2, 3))."""
  if x and isinstance(x[0], (tuple, list)):
    if len(x) != 1: raise ValueError(f"bad arg {x}")
    return tuple(x[0])
  return tuple(x)

def make_tuple(x: int | Sequence[int], cnt: int) -> tuple[int, ...]: return (x,) * cnt if isinstance(x, int) else tuple(x)
def to_tuple(x: Any) -> tuple: return tuple(x) if isinstance(x, (list, tuple)) else (x,)
def pluralize(st: str, cnt: int) -> str: return f"{cnt} {st}" + ("" if cnt == 1 else "s")
def partition(itr: Iterable[T], fxn: Callable[[T], bool]) -> tuple[list[T], list[T]]:
  ret: tuple[list[T], list[T]] = ([], [])
  for s in itr: ret[0 if fxn(s) else 1].append(s)
  return ret
def unwrap(x: T | None) -> T:
  assert x is not None
  return x
def colored(st: str, color: str | None, background: bool = False) -> str:
  if color is None or not sys.stdout.isatty(): return st
  colors = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"]
  return f"\u001b[{10*background+60*(color.upper() == color)+30+colors.index(color.lower())}m{st}\u001b[0m"
def size_to_str(n: float) -> str:
  for unit in ("B", "KB", "MB", "GB"):
    if abs(n) < 1000: return f"{n:.2f} {unit}"
    n /= 1000
  return f"{n:.2f} TB"
def time_to_str(t: float, w: int = 8) -> str:
  return next((f"{t*d:{w}.2f}{pr}" for d, pr in [(1, "s "), (1e3, "ms")] if t > 10 / d), f"{t*1e6:{w}.2f}us")

@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
  return type(default)(os.getenv(key, default))

class ContextVar:
  """A knob read once from the environment and overridable with `Context(NAME=value)`."""
  _cache: dict[str, ContextVar] = {}
  value: Any
  def __init__(self, key: str, default: Any):
    if key in ContextVar._cache: raise RuntimeError(f"attempt to recreate ContextVar {key}")
    ContextVar._cache[key] = self
    self.key, self.default = key, default
    self.value = getenv(key, default)
  def __bool__(self) -> bool: return bool(self.value)
  def __ge__(self, x: Any) -> bool: return self.value >= x
  def __gt__(self, x: Any) -> bool: return self.value > x
  def __lt__(self, x: Any) -> bool: return self.value < x
  def __le__(self, x: Any) -> bool: return self.value <= x
  def __eq__(self, x: Any) -> bool: return self.value == x  # type: ignore[override]
  def __hash__(self) -> int: return hash(self.key)
  def __repr__(self) -> str: return f"ContextVar({self.key}={self.value!r})"

class Context(contextlib.ContextDecorator):
  """`with Context(DEBUG=2): ...` temporarily overrides ContextVars."""
  def __init__(self, **kwargs: Any): self.kwargs = kwargs
  def __enter__(self) -> None:
    self.old = {}
    for k, v in self.kwargs.items():
      if k not in ContextVar._cache: raise KeyError(f"unknown ContextVar {k!r}; known: {sorted(ContextVar._cache)}")
      self.old[k] = ContextVar._cache[k].value
      ContextVar._cache[k].value = v
  def __exit__(self, *args: Any) -> None:
    for k, v in self.old.items(): ContextVar._cache[k].value = v

DEBUG, SPEC, BEAM, NOOPT = ContextVar("DEBUG", 0), ContextVar("SPEC", 0), ContextVar("BEAM", 0), ContextVar("NOOPT", 0)
DEV = ContextVar("DEV", "")
TRACK_MATCH_STATS = ContextVar("TRACK_MATCH_STATS", 0)
TRANSCENDENTAL, SPLIT_REDUCEOP = ContextVar("TRANSCENDENTAL", 1), ContextVar("SPLIT_REDUCEOP", 1)
LRU, CACHELEVEL = ContextVar("LRU", 1), ContextVar("CACHELEVEL", 2)
NUM_CPU_THREADS = ContextVar("NUM_CPU_THREADS", 0)
IGNORE_BEAM_CACHE = ContextVar("IGNORE_BEAM_CACHE", 0)
EMULATED_DTYPES = ContextVar("EMULATED_DTYPES", "")
# multi-device ALLREDUCE: 0 all-to-all; 1 ring when more than 2 devices and over RING_ALLREDUCE_THRESHOLD elements (tinygrad's rule); 2 ring
ALLREDUCE_RING, RING_ALLREDUCE_THRESHOLD = ContextVar("ALLREDUCE_RING", 1), ContextVar("RING_ALLREDUCE_THRESHOLD", 256_000)
CHECK_OOB = ContextVar("CHECK_OOB", 0)  # out-of-bounds checks of kernel buffer accesses (tg_core/codegen/oob.py)
LOWER_CACHE = ContextVar("LOWER_CACHE", 1)  # 0: every process lowers its kernels again (no on-disk lowered-program cache)

class GlobalCounters:
  """Process-wide counters for work done by realize: kernels run, ops and bytes estimated, time spent."""
  global_ops: int = 0
  global_mem: int = 0
  time_sum_s: float = 0.0
  kernel_count: int = 0
  mem_used: int = 0
  mem_peak: int = 0  # the most mem_used has been since the last reset
  @staticmethod
  def reset() -> None:
    GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s, GlobalCounters.kernel_count = 0, 0, 0.0, 0
    GlobalCounters.mem_peak = GlobalCounters.mem_used

class Timing(contextlib.ContextDecorator):
  def __init__(self, prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True):
    self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled
  def __enter__(self) -> None: self.st = time.perf_counter_ns()
  def __exit__(self, *exc: Any) -> None:
    self.et = time.perf_counter_ns() - self.st
    if self.enabled: print(f"{self.prefix}{self.et*1e-6:6.2f} ms" + (self.on_exit(self.et) if self.on_exit else ""))

def tqdm_iter(it: Iterable[T], desc: str = "", total: int | None = None, disable: bool = False) -> Iterator[T]:
  """A minimal progress bar on stderr (no dependency); disabled when stderr is not a terminal unless forced."""
  total = total if total is not None else (len(it) if hasattr(it, "__len__") else None)  # type: ignore[arg-type]
  show = not disable and (sys.stderr.isatty() or getenv("TG_PROGRESS", 0))
  st = time.perf_counter()
  for i, x in enumerate(it):
    yield x
    if show:
      el = time.perf_counter() - st
      pct = f"{100*(i+1)/total:3.0f}% " if total else ""
      sys.stderr.write(f"\r{desc}: {pct}{i+1}/{total if total else '?'} [{el:.1f}s]")
  if show: sys.stderr.write("\n")

counter = itertools.count
def isqrt(x: int) -> int: return math.isqrt(x)

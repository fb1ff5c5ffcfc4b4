"""Loads compiled objects (`tg_cpu_x86.elf`, C library symbols through ctypes; llvmlite's MCJIT for what it doesn't handle) and runs
kernels on host threads.

Each program is its own loaded image (kernel names repeat across programs). Calls go through ctypes, which releases the GIL
for the foreign call. The chunks of a split kernel (see `tg_cpu_x86.abi`) run on the native pool (`tg_cpu_x86.pool`): spinning
worker threads that claim chunks alongside the calling thread, with no Python per kernel. `NUM_CPU_THREADS` (0:
os.cpu_count()) caps the number of threads.

Whether a kernel is split is measured, not guessed: its first runs (per set of Variable values) are timed on the calling thread,
and it is split only where the time saved beats the pool's handoff cost, itself timed when the pool starts."""
from __future__ import annotations
import ctypes
import functools
import os
import threading
import time
from typing import Any

from tg_core.helpers import NUM_CPU_THREADS
from tg_cpu_x86.abi import kernel_work, symbol_name, work_symbol
from tg_cpu_x86.compiler import create_target_machine, llvm
from tg_cpu_x86.elf import ELFLoadError, LoadedObject
from tg_cpu_x86.pool import NativePool

# single-thread runs timed (per Variable values) before the split is decided; the first is cold (page faults, caches)
TIMED_RUNS = 2
# seconds of runs after which a quickly compiled kernel (tg_cpu_x86.compiler.QUICK_WORK) is compiled again at the full level:
# about what that compile costs a small kernel (10-40 ms on Zen 3), so a kernel run once or a few times (a cold first matmul)
# never pays for it, and one run often spends at most about twice what the better code would have cost it
UPGRADE_S = 0.02

def decision_key(vals: tuple[int, ...]) -> tuple[int, ...]:
  """The Variable values one thread decision serves: each value's power-of-two bucket. A decode step's start_pos is new at every
  step; decided per exact value, its kernels (attention over the cache) never left the single-thread timing runs, launched one
  by one from Python. A kernel's time grows about linearly with its Variables: within a bucket it at most doubles."""
  return tuple(v.bit_length() if v > 0 else v for v in vals)

def resolves(symbol: str) -> bool:
  """Whether a kernel's call to this C function links: the object loader and LLVM's linker (_init_symbols) both find it by c_symbol."""
  return bool(c_symbol(symbol))

KERNEL_FN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32)

# the C library functions LLVM may call: memset/memcpy from idiom recognition, libm for TRANSCENDENTAL=0, libgcc's double -> half
# conversion (F16C has no instruction for it)
C_SYMBOLS = ("memset", "memcpy", "memmove", "memcmp", "exp2f", "exp2", "log2f", "log2", "sinf", "sin", "powf", "pow", "sqrtf", "sqrt",
             "truncf", "trunc", "fmaf", "fma", "expf", "exp", "logf", "log", "__bzero", "bzero", "__truncdfhf2", "sched_yield")

@functools.cache
def _c_libs() -> list[ctypes.CDLL]:
  """The process's own symbols (Python links libc and libm) and libgcc_s by its soname (a dlopen, no ldconfig); libc and libm
  by name come after (_named_c_libs: find_library runs ldconfig and imports subprocess, only asked for when a symbol is missing)."""
  ret = [ctypes.CDLL(None)]
  try: ret.append(ctypes.CDLL("libgcc_s.so.1"))
  except OSError: pass
  return ret

@functools.cache
def _named_c_libs() -> list[ctypes.CDLL]:
  from ctypes.util import find_library
  ret = []
  for name in ("c", "m"):
    if (path := find_library(name)) is not None:
      try: ret.append(ctypes.CDLL(path))
      except OSError: pass
  return ret

@functools.cache
def c_symbol(name: str) -> int:
  """The address of a C library function for the object loader (0: not found), without LLVM."""
  for libs in (_c_libs, _named_c_libs):
    for lib in libs():
      try: addr = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
      except AttributeError: continue
      if addr: return addr
  return 0

@functools.cache
def _init_symbols() -> None:
  """Make C_SYMBOLS resolvable by LLVM's own linker (the MCJIT fallback), whether or not the process exports them."""
  for sym in C_SYMBOLS:
    if not llvm().address_of_symbol(sym) and (addr := c_symbol(sym)): llvm().add_symbol(sym, addr)

def load_symbols(lib: bytes, names: tuple[str, ...]) -> tuple[Any, dict[str, int]]:
  """Load an object (a kernel's, or hand-written IR's such as tg_cpu_x86.pool's) and the addresses of its symbols `names`: (the
  image to keep referenced while they can run, name -> address, 0 where the object has no such symbol). Through
  `tg_cpu_x86.elf`, else (something the small loader doesn't handle) LLVM's own linker."""
  try:
    image: Any = LoadedObject(lib, c_symbol)
    return image, {n: image.symbols.get(n, 0) for n in names}
  except ELFLoadError:
    _init_symbols()
    binding = llvm()
    image = binding.create_mcjit_compiler(binding.parse_assembly(""), create_target_machine())
    image.add_object_file(binding.ObjectFileRef.from_data(lib))
    image.finalize_object()
    return image, {n: image.get_global_value_address(n) for n in names}  # (functions are global values too)

def split_threads(t1: float, trip: int, mx: int, handoff_s: float) -> int:
  """Threads for a kernel that takes t1 seconds on one thread and whose split loop runs `trip` times: the n (up to mx and trip)
  with the least expected time t1/n + 2 * handoff_s * (n - 1), each handoff to a worker counted twice (a margin for uneven
  chunks and a worker that is slow to wake)."""
  return min(range(1, max(1, min(mx, trip)) + 1), key=lambda n: t1 / n + 2 * handoff_s * (n - 1))

_pool_lock = threading.Lock()
_pool: NativePool | None = None
def get_pool(n: int) -> NativePool:
  """The process's native pool with at least `n` workers (started on first use; a larger one replaces an outgrown pool)."""
  global _pool
  with _pool_lock:
    if _pool is None or _pool.n < n:
      if _pool is not None: _pool.close()
      _pool = NativePool(n)
    return _pool

def wake_workers() -> int:
  """Workers for this thread count (NUM_CPU_THREADS) to wake: one fewer than the threads."""
  return max_threads() - 1

@functools.cache
def _cpu_count() -> int: return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

def max_threads() -> int:
  n = int(NUM_CPU_THREADS.value)
  return n if n > 0 else _cpu_count()

class CPUProgram:
  """A kernel loaded from an object file. `__call__(*bufs, vals=...)` runs it (synchronously). A quick object (see
  tg_cpu_x86.compiler.QUICK_WORK) has its runs timed until they add up to UPGRADE_S, then is compiled at the full level and
  reloaded (`upgrade`)."""
  def __init__(self, device: str, name: str, lib: bytes, **kwargs: Any):
    from tg_cpu_x86.device import _compiler
    self.device, self.name = device, name
    self._quick_src = _compiler().quick_source(lib)  # the IR to compile again at the full level, None when it isn't quick
    self._quick_s = 0.0  # seconds spent in runs of the quick object
    self._nthreads: dict[tuple[int, ...], int] = {}          # Variable values -> decided thread count
    self._timings: dict[tuple[int, ...], tuple[int, float]] = {}  # Variable values -> (single-thread runs timed, best time)
    self._knob = NUM_CPU_THREADS.value
    self._load(lib)

  def _load(self, lib: bytes) -> None:
    self.lib = lib
    self._image, addrs = load_symbols(lib, (sym := symbol_name(self.name), work := work_symbol(self.name)))
    addr, waddr = addrs[sym], addrs[work]
    if not addr: raise RuntimeError(f"kernel {self.name}: symbol {sym} not found in the compiled object")
    self.fxn, self.addr = KERNEL_FN(addr), addr
    self.work_per_iter = ctypes.c_int64.from_address(waddr).value if waddr else 0

  @property
  def quick(self) -> bool:
    """Is the loaded object the quick compile of a kernel that `upgrade` can compile at the full level?"""
    return self._quick_src is not None

  def captured(self) -> None:
    """A graph captured this kernel, to replay it many times: a quick one with at least TINY_WORK ops is compiled at the full level
    now (its replays run in a compiled loop, untimed)."""
    from tg_cpu_x86.compiler import TINY_WORK
    if self._quick_src is not None and (kernel_work(self._quick_src) or 0) >= TINY_WORK: self.upgrade()

  def upgrade(self) -> None:
    """Compile the kernel at the full level (or take it from the compile cache) and run that from now on; the thread counts are
    decided again for the faster code. A no-op for a kernel that isn't quick."""
    if (src := self._quick_src) is None: return
    from tg_cpu_x86.compiler import full_tier
    from tg_cpu_x86.device import _compiler
    self._quick_src = None
    # the quick image stays loaded: a graph's table may still point at its function (a kernel replayed there and launched elsewhere)
    self._quick_image = self._image
    self._load(_compiler().compile_cached(full_tier(src)))
    self._nthreads.clear()
    self._timings.clear()

  def _threads(self, bufs: Any, vals_arr: Any, vals: tuple[int, ...]) -> int:
    """The thread count decided for these Variable values (`vals`: their decision_key): 1 for a kernel that can't be split; 0
    while its single-thread runs are still being timed (see `launch`)."""
    if (n := self._nthreads.get(vals)) is not None: return n
    if max_threads() <= 1 or self.work_per_iter <= 0 or int(self.fxn(bufs, vals_arr, 0, 0)) <= 1: n = 1  # n_cores == 0: the trip count
    else: return 0
    self._remember(vals, n)
    return n

  def _remember(self, vals: tuple[int, ...], n: int) -> None:
    if len(self._nthreads) > 4096: self._nthreads.clear()
    self._nthreads[vals] = n

  def _timed(self, bufs: Any, vals_arr: Any, vals: tuple[int, ...]) -> None:
    """Run on the calling thread, timed; after TIMED_RUNS runs, decide the thread count from the best time."""
    st = time.perf_counter()
    self.fxn(bufs, vals_arr, 0, 1)
    t = time.perf_counter() - st
    runs, best = self._timings.get(vals, (0, t))
    runs, best = runs + 1, min(best, t)
    if runs < TIMED_RUNS: self._timings[vals] = (runs, best)
    else:
      self._timings.pop(vals, None)
      mx = max_threads()
      n = split_threads(best, int(self.fxn(bufs, vals_arr, 0, 0)), mx, get_pool(mx - 1).handoff_s)
      self._remember(vals, n)

  def _check_knob(self) -> None:
    if NUM_CPU_THREADS.value != self._knob:  # decided for another NUM_CPU_THREADS (a Context changed it)
      self._nthreads.clear()
      self._timings.clear()
      self._knob = NUM_CPU_THREADS.value

  def threads_for(self, vals: tuple[int, ...]) -> int | None:
    """The thread count decided for these Variable values, None while undecided (its first runs through `launch` decide it). A
    graph calls a kernel decided to run on 1 thread itself, as core 0 of 1 (see tg_cpu_x86.graph)."""
    self._check_knob()
    return self._nthreads.get(decision_key(vals))

  def launch(self, bufs: Any, vals_arr: Any, vals: tuple[int, ...]) -> None:
    """Run the kernel on ctypes arrays of buffer addresses and Variable values (what a graph prepares once)."""
    self._check_knob()
    n = self._nthreads.get(key := decision_key(vals))
    if n is None: n = self._threads(bufs, vals_arr, key)
    if self._quick_src is not None: st = time.perf_counter()
    if n == 1: self.fxn(bufs, vals_arr, 0, 1)
    elif n == 0: self._timed(bufs, vals_arr, key)
    else:  # its n chunks claimed by this thread and the native pool's workers
      get_pool(n - 1).run(self.addr, ctypes.addressof(bufs), ctypes.addressof(vals_arr), n)
    if self._quick_src is not None:
      self._quick_s += time.perf_counter() - st
      if self._quick_s >= UPGRADE_S: self.upgrade()

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    addrs = (ctypes.c_void_p * max(len(bufs), 1))(*[b.addr for b in bufs])
    vals_arr = (ctypes.c_int32 * max(len(vals), 1))(*vals)
    st = time.perf_counter()
    self.launch(addrs, vals_arr, tuple(vals))
    return time.perf_counter() - st if wait else None

"""Loads compiled objects (`tg_cpu_x86.elf`, with llvmlite's MCJIT for what it doesn't handle) and runs kernels on host threads.

Each program is its own loaded image (kernel names repeat across programs). Calls go through ctypes, which
releases the GIL for the foreign call, so the chunks of a split kernel (see `tg_cpu_x86.abi`) run in parallel on a
thread pool. `NUM_CPU_THREADS` (0: os.cpu_count()) caps the number of threads; kernels with little work run on the
calling thread alone."""
from __future__ import annotations
import ctypes
import functools
import os
import queue
import threading
import time
from typing import Any, Callable

import llvmlite.binding as llvm

from tg_core.helpers import NUM_CPU_THREADS
from tg_cpu_x86.abi import symbol_name, work_symbol
from tg_cpu_x86.compiler import _init_llvm, create_target_machine
from tg_cpu_x86.elf import ELFLoadError, LoadedObject

# a thread is worth starting for about this many ops (a pool handoff costs some microseconds)
MIN_WORK_PER_THREAD = 1 << 16

KERNEL_FN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32)

@functools.cache
def _init_symbols() -> None:
  """Make the C library functions LLVM may call (memset/memcpy from idiom recognition, libm for TRANSCENDENTAL=0)
  resolvable by the JIT's linker, whether or not the process exports them."""
  _init_llvm()
  syms = ("memset", "memcpy", "memmove", "memcmp", "exp2f", "exp2", "log2f", "log2", "sinf", "sin", "powf", "pow", "sqrtf", "sqrt",
          "truncf", "trunc", "fmaf", "fma", "expf", "exp", "logf", "log", "__bzero", "bzero")
  def libs():  # the process's own symbols first (Python links libc and libm); find_library runs ldconfig, so only if needed
    yield ctypes.CDLL(None)
    from ctypes.util import find_library  # imports subprocess: ~5 ms of a cold start
    for name in ("c", "m"):
      if (path := find_library(name)) is not None:
        try: yield ctypes.CDLL(path)
        except OSError: pass
  missing = [s for s in syms if not llvm.address_of_symbol(s)]
  for lib in libs():
    for sym in list(missing):
      try: addr = ctypes.cast(getattr(lib, sym), ctypes.c_void_p).value
      except AttributeError: continue
      if addr:
        llvm.add_symbol(sym, addr)
        missing.remove(sym)
    if not missing: break

class _Workers:
  """Threads that run kernel chunks (ctypes releases the GIL for the call). Lighter than concurrent.futures, whose import
  (with logging) costs ~3 ms of a cold start, and a handoff is a queue put and an event."""
  def __init__(self, n: int):
    self.q: queue.SimpleQueue = queue.SimpleQueue()
    for i in range(n): threading.Thread(target=self._loop, name=f"tg_cpu_{i}", daemon=True).start()
    self.n = n
  def _loop(self) -> None:
    while True:
      fn, args, done, errs = self.q.get()
      try: fn(*args)
      except BaseException as e: errs.append(e)
      finally: done.set()
  def run(self, fn: Callable, argss: list[tuple], here: tuple) -> None:
    """fn(*args) for each of argss on the workers and fn(*here) on the calling thread; returns when all are done."""
    errs: list[BaseException] = []
    done = [threading.Event() for _ in argss]
    for args, ev in zip(argss, done): self.q.put((fn, args, ev, errs))
    try: fn(*here)
    finally:
      for ev in done: ev.wait()  # the buffers stay in use until every chunk is done
    if errs: raise errs[0]

_pool_lock = threading.Lock()
_pool: _Workers | None = None
def _get_pool(n: int) -> _Workers:
  global _pool
  with _pool_lock:
    if _pool is None or _pool.n < n: _pool = _Workers(n)  # an outgrown pool's threads idle on their own queue
    return _pool

@functools.cache
def _cpu_count() -> int: return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

def max_threads() -> int:
  n = int(NUM_CPU_THREADS.value)
  return n if n > 0 else _cpu_count()

class CPUProgram:
  """A kernel loaded from an object file. `__call__(*bufs, vals=...)` runs it (synchronously)."""
  def __init__(self, device: str, name: str, lib: bytes, **kwargs: Any):
    _init_symbols()
    self.device, self.name, self.lib = device, name, lib
    try:
      self._image: Any = LoadedObject(lib, llvm.address_of_symbol)
      addr, waddr = self._image.symbols.get(symbol_name(name), 0), self._image.symbols.get(work_symbol(name), 0)
    except ELFLoadError:  # something the small loader doesn't handle: LLVM's own linker does
      self._image = engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), create_target_machine())
      engine.add_object_file(llvm.ObjectFileRef.from_data(lib))
      engine.finalize_object()
      addr, waddr = engine.get_function_address(symbol_name(name)), engine.get_global_value_address(work_symbol(name))
    if not addr: raise RuntimeError(f"kernel {name}: symbol {symbol_name(name)} not found in the compiled object")
    self.fxn = KERNEL_FN(addr)
    self.work_per_iter = ctypes.c_int64.from_address(waddr).value if waddr else 0
    self._trip: dict[tuple[int, ...], int] = {}

  def _threads(self, bufs: Any, vals_arr: Any, vals: tuple[int, ...]) -> int:
    mx = max_threads()
    if mx <= 1 or self.work_per_iter <= 0: return 1
    if (trip := self._trip.get(vals)) is None:
      trip = self._trip[vals] = int(self.fxn(bufs, vals_arr, 0, 0))  # n_cores == 0: only reports the split loop's trip count
      if len(self._trip) > 4096: self._trip.clear()
    if trip <= 1: return 1
    return max(1, min(mx, trip, (trip * self.work_per_iter) // MIN_WORK_PER_THREAD))

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    addrs = (ctypes.c_void_p * max(len(bufs), 1))(*[b.addr for b in bufs])
    vals_arr = (ctypes.c_int32 * max(len(vals), 1))(*vals)
    st = time.perf_counter()
    n = self._threads(addrs, vals_arr, tuple(vals))
    if n == 1: self.fxn(addrs, vals_arr, 0, 1)
    else:
      # chunks 1..n-1 on the workers, chunk 0 on this thread
      _get_pool(n - 1).run(self.fxn, [(addrs, vals_arr, i, n) for i in range(1, n)], here=(addrs, vals_arr, 0, n))
    return time.perf_counter() - st if wait else None

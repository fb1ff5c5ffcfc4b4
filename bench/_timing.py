"""Shared by the bench scripts: best-of timing that rides out noisy neighbours, and snippets run in fresh processes.

Every peer is timed in its own process (numpy's OpenBLAS threads keep spinning after a call and would take a core from
whatever runs next in the same process). Snippets can `from _timing import best_of`: run_py puts bench/ on their path."""
from __future__ import annotations
import os
import platform
import shutil
import subprocess
import sys
import time
from typing import Any, Callable

MIN_SECONDS = 1.0
# BENCH_CLOCK=thread: best_of times with the calling thread's CPU time instead of the wall clock, for single-threaded
# peers on a shared machine (other processes' load then doesn't count; their cache pressure still does)
CLOCK = time.thread_time if os.environ.get("BENCH_CLOCK") == "thread" else time.perf_counter

def cpu_model() -> str:
  """The host CPU's model name (every bench prints it: figures differ between machines)."""
  try:
    with open("/proc/cpuinfo") as f: return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
  except (OSError, StopIteration): return platform.processor() or platform.machine() or "unknown CPU"
BENCH_DIR = os.path.dirname(os.path.abspath(__file__))

def best_of(fn: Callable[..., Any], runs: int, setup: Callable[[], Any] | None = None) -> float:
  """The best time of fn() (of fn(setup()) with `setup` untimed) over at least `runs` runs and MIN_SECONDS, after a warm-up."""
  fn(setup()) if setup is not None else fn()
  best, k, t0 = float("inf"), 0, time.perf_counter()
  while k < runs or time.perf_counter() - t0 < MIN_SECONDS:
    k += 1
    arg = setup() if setup is not None else None
    st = CLOCK()
    fn(arg) if setup is not None else fn()
    best = min(best, CLOCK() - st)
  return best

def run_py(code: str, env: dict[str, str] | None = None) -> float:
  """Run `code` in a fresh interpreter with DEV=CPU; it prints a time last."""
  code = f"import sys; sys.path.insert(0, {BENCH_DIR!r})\n" + code
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "DEV": "CPU", **(env or {})})
  if r.returncode != 0: raise RuntimeError(r.stderr[-2000:])
  return float(r.stdout.strip().splitlines()[-1])

def have_tinygrad() -> bool:
  """PyPI tinygrad with the clang its CPU backend needs (installed with apt-get when running as root)."""
  try: import tinygrad  # noqa: F401
  except ImportError:
    print("tinygrad not installed (pip install tinygrad==0.14.0): tinygrad columns skipped")
    return False
  if shutil.which("clang") is None and os.geteuid() == 0: subprocess.run(["apt-get", "install", "-y", "-q", "clang"], capture_output=True)
  if shutil.which("clang") is None:
    print("clang not found (tinygrad's CPU backend needs it; apt-get install clang): tinygrad columns skipped")
    return False
  return True

# snippet header for timing tg kernels: the schedule is built untimed, running it is timed
TG_KERNEL_TIMER = """
import numpy as np
from tg_core import Tensor, Device
from tg_core.engine.realize import run_schedule
from _timing import best_of
def tg_time(make, runs):
  make().realize()
  return best_of(lambda items: (run_schedule(items), Device["CPU"].synchronize()), runs, setup=lambda: make().schedule())
"""

# the same for tinygrad: the graph is built untimed, realizing it is timed
TINYGRAD_TIMER = """
import numpy as np
from tinygrad import Tensor, Device
from _timing import best_of
def tinygrad_time(make, runs):
  return best_of(lambda t: (t.realize(), Device[Device.DEFAULT].synchronize()), runs, setup=make)
"""

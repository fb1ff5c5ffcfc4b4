"""fp32 matmul GFLOPS on the CPU: tg (DEV=CPU, the tg-cpu-x86 plugin), numpy (OpenBLAS) and PyPI tinygrad (DEV=CPU), same run.

Also tg with NUM_CPU_THREADS=1 vs 2. tinygrad's CPU backend needs clang: if it is missing this script tries
`apt-get install -y clang` (as root) and otherwise skips tinygrad with a message."""
from __future__ import annotations
import argparse
import os
import shutil
import subprocess
import sys
import time


MIN_SECONDS = 1.0

def best_time(fn, runs: int) -> float:
  fn()
  best = float("inf")
  t0, n = time.perf_counter(), 0
  while n < runs or time.perf_counter() - t0 < MIN_SECONDS:  # best of many runs over >= MIN_SECONDS: noisy neighbours come and go
    n += 1
    st = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - st)
  return best

def tg_matmul_time(n: int, runs: int, threads: int | None) -> float:
  code = f"""
import time, numpy as np
from tg_core import Tensor, Device
from tg_core.engine.realize import run_schedule
a, b = np.random.default_rng(0).standard_normal((2, {n}, {n}), dtype=np.float32)
ta, tb = Tensor(a, device="CPU").realize(), Tensor(b, device="CPU").realize()
assert np.allclose((ta @ tb).numpy(), a @ b, atol=1e-2)
best = 1e9
t0, k = time.perf_counter(), 0
while k < {runs} or time.perf_counter() - t0 < {MIN_SECONDS}:
  k += 1
  items = (ta @ tb).schedule()
  st = time.perf_counter(); run_schedule(items); Device["CPU"].synchronize(); best = min(best, time.perf_counter() - st)
print(best)
"""
  env = {**os.environ, "DEV": "CPU", **({"NUM_CPU_THREADS": str(threads)} if threads else {})}
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
  if r.returncode != 0: raise RuntimeError(r.stderr[-2000:])
  return float(r.stdout.strip().splitlines()[-1])

def np_matmul_time(n: int, runs: int) -> float:
  # in its own process like the others: OpenBLAS threads keep spinning after a call, and in this process they would take
  # a core from the tg runs that follow (a 2-thread tg run then measured no faster than 1 thread)
  code = f"""
import sys, time, numpy as np
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from cpu_matmul import best_time
a, b = np.random.default_rng(0).standard_normal((2, {n}, {n}), dtype=np.float32)
print(best_time(lambda: a @ b, {runs}))
"""
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
  if r.returncode != 0: raise RuntimeError(r.stderr[-2000:])
  return float(r.stdout.strip().splitlines()[-1])

def tinygrad_matmul_time(n: int, runs: int) -> float | None:
  try: import tinygrad  # noqa: F401
  except ImportError:
    print("tinygrad not installed (pip install tinygrad==0.14.0): skipping the tinygrad peer")
    return None
  if shutil.which("clang") is None and os.geteuid() == 0:
    subprocess.run(["apt-get", "install", "-y", "-q", "clang"], capture_output=True)
  if shutil.which("clang") is None:
    print("clang not found (tinygrad's CPU backend needs it; apt-get install clang): skipping the tinygrad peer")
    return None
  code = f"""
import time, numpy as np
from tinygrad import Tensor, Device
a, b = np.random.default_rng(0).standard_normal((2, {n}, {n}), dtype=np.float32)
ta, tb = Tensor(a).realize(), Tensor(b).realize()
(ta @ tb).realize()
best = 1e9
t0, k = time.perf_counter(), 0
while k < {runs} or time.perf_counter() - t0 < {MIN_SECONDS}:
  k += 1
  c = ta @ tb
  st = time.perf_counter(); c.realize(); Device[Device.DEFAULT].synchronize(); best = min(best, time.perf_counter() - st)
print(best)
"""
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "DEV": "CPU"})
  if r.returncode != 0:
    print(f"tinygrad failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    return None
  return float(r.stdout.strip().splitlines()[-1])

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024], help="matrix sizes (default 512 1024)")
  ap.add_argument("--runs", type=int, default=10, help="timed runs, best reported (default 10; this VM's timings vary ~30%%)")
  args = ap.parse_args()
  for n in args.sizes:
    flops = 2 * n ** 3
    t_np = np_matmul_time(n, args.runs)
    t_tg = tg_matmul_time(n, args.runs, None)
    t_tg1, t_tg2 = tg_matmul_time(n, args.runs, 1), tg_matmul_time(n, args.runs, 2)
    t_ti = tinygrad_matmul_time(n, args.runs)
    g = lambda t, flops=flops: flops / t * 1e-9  # noqa: E731
    line = f"matmul {n}x{n} fp32: tg {g(t_tg):7.1f} GFLOPS | numpy {g(t_np):7.1f} | tg/numpy {t_np/t_tg:5.2f}x"
    if t_ti is not None: line += f" | tinygrad {g(t_ti):6.1f} | tg/tinygrad {t_ti/t_tg:5.1f}x"
    line += f" | tg 1 thread {g(t_tg1):6.1f}, 2 threads {g(t_tg2):6.1f}: {t_tg1/t_tg2:4.2f}x"
    print(line)

if __name__ == "__main__": main()

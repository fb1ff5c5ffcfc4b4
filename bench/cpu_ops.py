"""CPU ops against peers measured in the same run (DEV=CPU, the tg-cpu-x86 plugin):
- conv2d, input 8x32x32x32, weight 64x32x3x3, padding 1: tg vs torch (CPU) vs PyPI tinygrad
- elementwise add and a sum over 16M float32: tg vs numpy (goal >= 0.8x numpy)
- latency of a one-element `(x+1).realize()` (goal <= 200 us; tinygrad for comparison)
- cold time to the first matmul result, compile included, in a fresh process with an empty compile cache (goal <= 100 ms)"""
from __future__ import annotations
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

def run_py(code: str, env: dict[str, str] | None = None) -> float:
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "DEV": "CPU", **(env or {})})
  if r.returncode != 0: raise RuntimeError(r.stderr[-2000:])
  return float(r.stdout.strip().splitlines()[-1])

TG_TIMER = """
import time, numpy as np
from tg_core import Tensor, Device
from tg_core.engine.realize import run_schedule
def timeit(make, runs):
  make().realize()
  best = 1e9
  t0, k = time.perf_counter(), 0
  while k < runs or time.perf_counter() - t0 < 1.0:  # best over >= 1 s: noisy neighbours come and go
    k += 1
    items = make().schedule()
    st = time.perf_counter(); run_schedule(items); Device["CPU"].synchronize(); best = min(best, time.perf_counter() - st)
  return best
"""

def have_tinygrad() -> bool:
  try: import tinygrad  # noqa: F401
  except ImportError: return False
  if shutil.which("clang") is None and os.geteuid() == 0: subprocess.run(["apt-get", "install", "-y", "-q", "clang"], capture_output=True)
  return shutil.which("clang") is not None

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--runs", type=int, default=5, help="timed runs, best reported (default 5)")
  args = ap.parse_args()
  R = args.runs
  tiny = have_tinygrad()
  if not tiny: print("tinygrad (with clang) not available: tinygrad columns skipped")

  # conv2d
  t_tg = run_py(TG_TIMER + f"""
x = Tensor(np.random.default_rng(0).standard_normal((8,32,32,32), dtype=np.float32), device="CPU").realize()
w = Tensor(np.random.default_rng(1).standard_normal((64,32,3,3), dtype=np.float32), device="CPU").realize()
print(timeit(lambda: x.conv2d(w, padding=1), {R}))""")
  import torch
  xt, wt = torch.randn(8, 32, 32, 32), torch.randn(64, 32, 3, 3)
  torch.nn.functional.conv2d(xt, wt, padding=1)
  t_torch = _best(lambda: torch.nn.functional.conv2d(xt, wt, padding=1), R)
  line = f"conv2d 8x32x32x32 * 64x32x3x3: tg {t_tg*1e3:8.2f} ms | torch {t_torch*1e3:7.2f} ms (tg/torch speed {t_torch/t_tg:5.2f}x)"
  if tiny:
    t_ti = run_py(f"""
import time, numpy as np
from tinygrad import Tensor, Device
x = Tensor(np.random.default_rng(0).standard_normal((8,32,32,32), dtype=np.float32)).realize()
w = Tensor(np.random.default_rng(1).standard_normal((64,32,3,3), dtype=np.float32)).realize()
x.conv2d(w, padding=1).realize()
best = 1e9
t0, k = time.perf_counter(), 0
while k < {R} or time.perf_counter() - t0 < 1.0:
  k += 1
  c = x.conv2d(w, padding=1)
  st = time.perf_counter(); c.realize(); Device[Device.DEFAULT].synchronize(); best = min(best, time.perf_counter() - st)
print(best)""")
    line += f" | tinygrad {t_ti*1e3:7.2f} ms (tg/tinygrad speed {t_ti/t_tg:5.2f}x)"
  print(line)

  # 16M add and sum
  n = 16 * 1024 * 1024
  a, b = np.random.default_rng(0).standard_normal((2, n), dtype=np.float32)
  t_np_add = _best(lambda: np.add(a, b), R)
  t_np_sum = _best(lambda: a.sum(), R)
  t_tg_add = run_py(TG_TIMER + f"""
a = Tensor(np.ones({n}, np.float32), device="CPU").realize(); b = Tensor(np.ones({n}, np.float32), device="CPU").realize()
print(timeit(lambda: a + b, {R}))""")
  t_tg_sum = run_py(TG_TIMER + f"""
a = Tensor(np.ones({n}, np.float32), device="CPU").realize()
print(timeit(lambda: a.sum(), {R}))""")
  print(f"add 16M f32: tg {t_tg_add*1e3:7.2f} ms | numpy {t_np_add*1e3:7.2f} ms | tg/numpy speed {t_np_add/t_tg_add:5.2f}x (goal >= 0.8)")
  print(f"sum 16M f32: tg {t_tg_sum*1e3:7.2f} ms | numpy {t_np_sum*1e3:7.2f} ms | tg/numpy speed {t_np_sum/t_tg_sum:5.2f}x (goal >= 0.8)")

  # latency of a one-element kernel, scheduling included
  t_lat = run_py(f"""
import time
from tg_core import Tensor
x = Tensor([1.0], device="CPU").realize()
(x + 1).realize()
best = 1e9
t0, k = time.perf_counter(), 0
while k < max({R}, 20) or time.perf_counter() - t0 < 1.0:
  k += 1
  st = time.perf_counter(); (x + 1).realize(); best = min(best, time.perf_counter() - st)
print(best)""")
  line = f"latency (x+1).realize() on 1 element: tg {t_lat*1e6:7.1f} us (goal <= 200 us)"
  if tiny:
    t_lat_ti = run_py(f"""
import time
from tinygrad import Tensor
x = Tensor([1.0]).realize()
(x + 1).realize()
best = 1e9
t0, k = time.perf_counter(), 0
while k < max({R}, 20) or time.perf_counter() - t0 < 1.0:
  k += 1
  st = time.perf_counter(); (x + 1).realize(); best = min(best, time.perf_counter() - st)
print(best)""")
    line += f" | tinygrad {t_lat_ti*1e6:7.1f} us"
  print(line)

  # cold start: a fresh process and an empty compile cache, from the first op to the matmul's values. The packages are
  # byte-compiled first, as `pip install` leaves them (a checkout with PYTHONDONTWRITEBYTECODE would recompile every run)
  import importlib.util
  pkgs = [os.path.dirname(importlib.util.find_spec(m).origin) for m in ("tg_core", "tg_cpu_x86")]
  subprocess.run([sys.executable, "-m", "compileall", "-q", *pkgs], capture_output=True)
  colds = []
  for _ in range(R):  # a fresh process and an empty cache each time: report the best and the median
    with tempfile.TemporaryDirectory() as cache:
      colds.append(run_py("""
import time, numpy as np
from tg_core import Tensor
a = np.ones((64, 64), np.float32)
st = time.perf_counter(); (Tensor(a, device="CPU") @ Tensor(a, device="CPU")).numpy(); print(time.perf_counter() - st)""",
                          {"TG_CACHE_DIR": cache}))
  line = f"cold first matmul 64x64 (compile included): tg best {min(colds)*1e3:7.1f} ms, median {sorted(colds)[len(colds)//2]*1e3:7.1f} ms (goal <= 100 ms)"
  if tiny:
    ti = [run_py("""
import time, numpy as np
from tinygrad import Tensor
a = np.ones((64, 64), np.float32)
st = time.perf_counter(); (Tensor(a) @ Tensor(a)).numpy(); print(time.perf_counter() - st)""", {"CACHELEVEL": "0"}) for _ in range(R)]
    line += f" | tinygrad best {min(ti)*1e3:7.1f} ms, median {sorted(ti)[len(ti)//2]*1e3:7.1f} ms"
  print(line)

def _best(fn, runs: int) -> float:
  """Best of at least `runs` runs spread over at least 1 s."""
  fn()
  t0, k, best = time.perf_counter(), 0, float("inf")
  while k < runs or time.perf_counter() - t0 < 1.0:
    k += 1
    best = min(best, _t(fn))
  return best

def _t(fn) -> float:
  st = time.perf_counter()
  fn()
  return time.perf_counter() - st

if __name__ == "__main__": main()

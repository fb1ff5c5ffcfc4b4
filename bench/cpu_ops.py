"""CPU ops against peers measured in the same run (DEV=CPU, the tg-cpu-x86 plugin):
- conv2d, input 8x32x32x32, weight 64x32x3x3, padding 1: tg vs torch (CPU) vs PyPI tinygrad
- elementwise add and a sum over 16M float32: tg vs numpy (goal >= 0.8x numpy)
- latency of a one-element `(x+1).realize()` (goal <= 200 us; tinygrad for comparison)
- cold time to the first matmul result, compile included, in a fresh process with an empty compile cache (goal <= 100 ms)
Each side runs in its own process; times are the best of at least --runs runs spread over at least a second."""
from __future__ import annotations
import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile

from _timing import TG_KERNEL_TIMER, TINYGRAD_TIMER, cpu_model, have_tinygrad, run_py

CONV_INPUTS = """rng = np.random.default_rng(0)
xa, wa = rng.standard_normal((8, 32, 32, 32), dtype=np.float32), rng.standard_normal((64, 32, 3, 3), dtype=np.float32)
"""
# one element, graph building and scheduling included: {tensor} is how the peer makes a tensor from a list
LATENCY = """from {mod} import Tensor
from _timing import best_of
x = {tensor}.realize()
print(best_of(lambda: (x + 1).realize(), max({runs}, 20)))"""
COLD = """import time, numpy as np
from {mod} import Tensor
a = np.ones((64, 64), np.float32)
st = time.perf_counter(); (Tensor(a{dev}) @ Tensor(a{dev})).numpy(); print(time.perf_counter() - st)"""

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--runs", type=int, default=5, help="timed runs, best reported (default 5)")
  args = ap.parse_args()
  R = args.runs
  print(f"CPU: {cpu_model()} ({os.cpu_count()} cores)")
  tiny = have_tinygrad()

  # conv2d
  t_tg = run_py(TG_KERNEL_TIMER + CONV_INPUTS + f"""
x, w = Tensor(xa, device="CPU").realize(), Tensor(wa, device="CPU").realize()
print(tg_time(lambda: x.conv2d(w, padding=1), {R}))""")
  t_torch = run_py(f"""import numpy as np, torch
from _timing import best_of
{CONV_INPUTS}x, w = torch.tensor(xa), torch.tensor(wa)
print(best_of(lambda: torch.nn.functional.conv2d(x, w, padding=1), {R}))""")
  line = f"conv2d 8x32x32x32 * 64x32x3x3: tg {t_tg*1e3:8.2f} ms | torch {t_torch*1e3:7.2f} ms (tg/torch speed {t_torch/t_tg:5.2f}x)"
  if tiny:
    t_ti = run_py(TINYGRAD_TIMER + CONV_INPUTS + f"""
x, w = Tensor(xa).realize(), Tensor(wa).realize()
print(tinygrad_time(lambda: x.conv2d(w, padding=1), {R}))""")
    line += f" | tinygrad {t_ti*1e3:7.2f} ms (tg/tinygrad speed {t_ti/t_tg:5.2f}x)"
  print(line)

  # 16M add and sum
  n = 16 * 1024 * 1024
  for name, tg_expr, np_expr in (("add", "a + b", "np.add(a, b)"), ("sum", "a.sum()", "a.sum()")):
    inputs = f"a, b = np.random.default_rng(0).standard_normal((2, {n}), dtype=np.float32)\n"
    t_np = run_py("import numpy as np\nfrom _timing import best_of\n" + inputs + f"print(best_of(lambda: {np_expr}, {R}))")
    t_tg = run_py(TG_KERNEL_TIMER + inputs + f"""a, b = Tensor(a, device="CPU").realize(), Tensor(b, device="CPU").realize()
print(tg_time(lambda: {tg_expr}, {R}))""")
    print(f"{name} 16M f32: tg {t_tg*1e3:7.2f} ms | numpy {t_np*1e3:7.2f} ms | tg/numpy speed {t_np/t_tg:5.2f}x (goal >= 0.8)")

  # latency of a one-element kernel, scheduling included
  t_lat = run_py(LATENCY.format(mod="tg_core", tensor='Tensor([1.0], device="CPU")', runs=R))
  line = f"latency (x+1).realize() on 1 element: tg {t_lat*1e6:7.1f} us (goal <= 200 us)"
  if tiny: line += f" | tinygrad {run_py(LATENCY.format(mod='tinygrad', tensor='Tensor([1.0])', runs=R))*1e6:7.1f} us"
  print(line)

  # cold start: a fresh process and an empty compile cache, from the first op to the matmul's values. The packages are
  # byte-compiled first, as `pip install` leaves them (a checkout with PYTHONDONTWRITEBYTECODE would recompile every run)
  pkgs = [os.path.dirname(importlib.util.find_spec(m).origin) for m in ("tg_core", "tg_cpu_x86")]
  subprocess.run([sys.executable, "-m", "compileall", "-q", *pkgs], capture_output=True)
  def stats(ts: list[float]) -> str: return f"best {min(ts)*1e3:7.1f} ms, median {sorted(ts)[len(ts)//2]*1e3:7.1f} ms"
  colds = []
  for _ in range(R):
    with tempfile.TemporaryDirectory() as cache: colds.append(run_py(COLD.format(mod="tg_core", dev=', device="CPU"'), {"TG_CACHE_DIR": cache}))
  line = f"cold first matmul 64x64 (compile included): tg {stats(colds)} (goal <= 100 ms)"
  if tiny: line += f" | tinygrad {stats([run_py(COLD.format(mod='tinygrad', dev=''), {'CACHELEVEL': '0'}) for _ in range(R)])}"
  print(line)

if __name__ == "__main__": main()

"""256x256 fp32 matmul on the PYTHON reference device vs numpy, measured in the same run.

The reference device interprets kernels with numpy; it is allowed to be slow, not unusable. Prints time per matmul
for both and the ratio (tg / numpy; higher is slower)."""
from __future__ import annotations
import argparse
import time

import numpy as np

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--n", type=int, default=256, help="matrix size (default 256)")
  ap.add_argument("--runs", type=int, default=5, help="timed runs, best is reported (default 5)")
  args = ap.parse_args()
  from tg_core import Device, Tensor
  from tg_core.engine.realize import run_schedule
  n = args.n
  a, b = np.random.default_rng(0).standard_normal((2, n, n), dtype=np.float32)
  ta, tb = Tensor(a, device="PYTHON").realize(), Tensor(b, device="PYTHON").realize()
  # warm up: compile once (cached by the kernel's AST)
  out = (ta @ tb).numpy()
  assert np.allclose(out, a @ b, atol=1e-3), "tg result differs from numpy"
  tg_best = float("inf")
  for _ in range(args.runs):
    t = ta @ tb
    items = t.schedule()
    st = time.perf_counter()
    run_schedule(items)
    Device["PYTHON"].synchronize()
    tg_best = min(tg_best, time.perf_counter() - st)
  np_best = float("inf")
  for _ in range(args.runs):
    st = time.perf_counter()
    a @ b
    np_best = min(np_best, time.perf_counter() - st)
  flops = 2 * n ** 3
  print(f"matmul {n}x{n} fp32: tg PYTHON {tg_best*1e3:9.2f} ms ({flops/tg_best*1e-9:6.2f} GFLOPS) | "
        f"numpy {np_best*1e3:7.3f} ms ({flops/np_best*1e-9:6.2f} GFLOPS) | ratio tg/numpy time {tg_best/np_best:8.1f}x")

if __name__ == "__main__": main()

"""fp32 matmul GFLOPS on the CPU: tg (DEV=CPU, the tg-cpu-x86 plugin), numpy (OpenBLAS) and PyPI tinygrad (DEV=CPU), same run.

Also tg with NUM_CPU_THREADS=1 vs 2. tinygrad's CPU backend needs clang: if it is missing this script tries
`apt-get install -y clang` (as root) and otherwise skips tinygrad with a message. Each peer runs in its own process;
times are the best of at least --runs runs spread over at least a second."""
from __future__ import annotations
import os
import argparse

from _timing import TG_KERNEL_TIMER, TINYGRAD_TIMER, cpu_model, have_tinygrad, run_py

INPUTS = "a, b = np.random.default_rng(0).standard_normal((2, {n}, {n}), dtype=np.float32)\n"

def tg_matmul_time(n: int, runs: int, threads: int | None) -> float:
  return run_py(TG_KERNEL_TIMER + INPUTS.format(n=n) + f"""
ta, tb = Tensor(a, device="CPU").realize(), Tensor(b, device="CPU").realize()
assert np.allclose((ta @ tb).numpy(), a @ b, atol=1e-2)
print(tg_time(lambda: ta @ tb, {runs}))""", {"NUM_CPU_THREADS": str(threads)} if threads else None)

def np_matmul_time(n: int, runs: int) -> float:
  return run_py("import numpy as np\nfrom _timing import best_of\n" + INPUTS.format(n=n) + f"print(best_of(lambda: a @ b, {runs}))")

def tinygrad_matmul_time(n: int, runs: int) -> float | None:
  try: return run_py(TINYGRAD_TIMER + INPUTS.format(n=n) + f"""
ta, tb = Tensor(a).realize(), Tensor(b).realize()
print(tinygrad_time(lambda: ta @ tb, {runs}))""")
  except RuntimeError as e:
    print(f"tinygrad failed: {str(e).strip().splitlines()[-1] if str(e).strip() else e}")
    return None

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024], help="matrix sizes (default 512 1024)")
  ap.add_argument("--runs", type=int, default=10, help="timed runs, best reported (default 10; this VM's timings vary ~30%%)")
  args = ap.parse_args()
  print(f"CPU: {cpu_model()} ({os.cpu_count()} cores)")
  tiny = have_tinygrad()
  for n in args.sizes:
    flops = 2 * n ** 3
    t_np = np_matmul_time(n, args.runs)
    t_tg = tg_matmul_time(n, args.runs, None)
    t_tg1, t_tg2 = tg_matmul_time(n, args.runs, 1), tg_matmul_time(n, args.runs, 2)
    t_ti = tinygrad_matmul_time(n, args.runs) if tiny else None
    g = lambda t, flops=flops: flops / t * 1e-9  # noqa: E731
    line = f"matmul {n}x{n} fp32: tg {g(t_tg):7.1f} GFLOPS | numpy {g(t_np):7.1f} | tg/numpy {t_np/t_tg:5.2f}x"
    if t_ti is not None: line += f" | tinygrad {g(t_ti):6.1f} | tg/tinygrad {t_ti/t_tg:5.1f}x"
    line += f" | tg 1 thread {g(t_tg1):6.1f}, 2 threads {g(t_tg2):6.1f}: {t_tg1/t_tg2:4.2f}x"
    print(line)

if __name__ == "__main__": main()

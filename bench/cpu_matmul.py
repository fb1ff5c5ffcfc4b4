"""fp32 matmul GFLOPS on the CPU: tg (DEV=CPU, the tg-cpu-x86 plugin), numpy (OpenBLAS) and PyPI tinygrad (DEV=CPU), same run.

Default: square sizes (--sizes), with tinygrad and tg with NUM_CPU_THREADS=1 vs 2. `--shapes`: the table of issue 12
(M x K x N: square, odd, wide, skinny and matvec shapes, plus 4096^3), tg and numpy GFLOPS and GB/s (operand bytes over
the time: the figure that bounds a matvec), the NUM_CPU_THREADS=1 vs 2 scaling for shapes >= 1024^3 work and the
matvecs, the CPU model, and a bf16 matmul against torch's (2048^3; 1024^3 on hosts without bf16 matrix extensions) and the cold first 64x64 matmul
(fresh process, empty compile cache, compile included; bench/cpu_ops.py's measurement), then again in a second process
with the compile cache it left (the cache-hit path).
A matvec is run in both weight layouts: `x @ W` (W is K x N, the issue's shape) and `x @ W.T` (W is N x K, a Linear
layer's weight, what an LLM decode step reads). tinygrad's CPU backend needs clang: if it is missing this script tries
`apt-get install -y clang` (as root) and otherwise skips tinygrad with a message. Each peer runs in its own process;
times are the best of at least --runs runs spread over at least a second (big shapes: fewer runs). On a shared, loaded
machine `--cpu-time` runs every peer on one thread and times its CPU time instead (the load then counts far less)."""
from __future__ import annotations
import importlib.util
import os
import argparse
import subprocess
import sys
import tempfile

from _timing import TG_KERNEL_TIMER, TINYGRAD_TIMER, cpu_model, have_tinygrad, run_py

# (M, K, N, transposed weight): the table, then 4096^3 and the Linear-layout matvec
SHAPES = [(512, 512, 512, False), (1024, 1024, 1024, False), (2048, 2048, 2048, False), (1000, 1000, 1000, False),
          (4096, 64, 4096, False), (64, 4096, 64, False), (1, 4096, 4096, False), (1, 4096, 4096, True), (4096, 4096, 4096, False)]

def _inputs(m: int, k: int, n: int, tr: bool) -> str:
  return (f"rng = np.random.default_rng(0)\na = rng.standard_normal(({m}, {k}), dtype=np.float32)\n"
          f"b = rng.standard_normal({(n, k) if tr else (k, n)}, dtype=np.float32)\n")

# --cpu-time: every peer on one thread, timed by its CPU time (BENCH_CLOCK=thread, see _timing.py)
ONE_THREAD_CPU_TIME = {"NUM_CPU_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "BENCH_CLOCK": "thread"}

def tg_matmul_time(m: int, k: int, n: int, tr: bool, runs: int, threads: int | None) -> float:
  return run_py(TG_KERNEL_TIMER + _inputs(m, k, n, tr) + f"""
ta, tb = Tensor(a, device="CPU").realize(), Tensor(b, device="CPU").realize()
ref = a.astype(np.float64) @ (b.T if {tr} else b).astype(np.float64)
assert np.allclose((ta @ (tb.T if {tr} else tb)).numpy(), ref, atol=1e-2 * {k} ** 0.5, rtol=1e-3)
print(tg_time(lambda: ta @ (tb.T if {tr} else tb), {runs}))""", {"NUM_CPU_THREADS": str(threads)} if threads else None)

def np_matmul_time(m: int, k: int, n: int, tr: bool, runs: int) -> float:
  return run_py("import numpy as np\nfrom _timing import best_of\n" + _inputs(m, k, n, tr) +
                f"bb = b.T if {tr} else b\nprint(best_of(lambda: a @ bb, {runs}))")

def tinygrad_matmul_time(n: int, runs: int) -> float | None:
  try: return run_py(TINYGRAD_TIMER + _inputs(n, n, n, False) + f"""
ta, tb = Tensor(a).realize(), Tensor(b).realize()
print(tinygrad_time(lambda: ta @ tb, {runs}))""")
  except RuntimeError as e:
    print(f"tinygrad failed: {str(e).strip().splitlines()[-1] if str(e).strip() else e}")
    return None

def _bf16_extensions() -> list[str]:
  try:
    with open("/proc/cpuinfo") as f: flags = set(next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), []))
  except OSError: flags = set()
  return [x for x in ("amx_bf16", "avx512_bf16") if x in flags]

def bf16_line(runs: int, n: int | None = None) -> str:
  """bf16 matmul (fp32 accumulation): tg vs torch CPU, same run, and which bf16 matrix extensions the host has. The
  issue's goal (tg >= torch at 2048^3) applies where it has AMX or AVX512_BF16; elsewhere both convert to fp32 and
  multiply, and torch's fallback runs at ~0.5 GFLOPS on a 2-core VM, so the row is 1024^3 there (minutes otherwise)."""
  ext = _bf16_extensions()
  n = n or (2048 if ext else 1024)
  flops = 2 * n ** 3
  t_tg = run_py(TG_KERNEL_TIMER + _inputs(n, n, n, False) + f"""from tg_core import dtypes
ta, tb = Tensor(a, device="CPU").cast(dtypes.bfloat16).realize(), Tensor(b, device="CPU").cast(dtypes.bfloat16).realize()
print(tg_time(lambda: ta @ tb, {runs}))""")
  t_torch = run_py("import numpy as np, torch\nfrom _timing import best_of\n" + _inputs(n, n, n, False) +
                   f"ta, tb = torch.from_numpy(a).bfloat16(), torch.from_numpy(b).bfloat16()\nprint(best_of(lambda: ta @ tb, {runs}))")
  return (f"bf16 {n}x{n}x{n}: tg {flops/t_tg*1e-9:7.1f} GFLOPS | torch {flops/t_torch*1e-9:7.1f} | tg/torch {t_torch/t_tg:5.2f}x | "
          f"host bf16 matrix extensions: {', '.join(ext) or 'none (neither amx_bf16 nor avx512_bf16)'}")

def cold_line(runs: int) -> str:
  """The first 64x64 matmul of a fresh process with an empty TG_CACHE_DIR, compile included (issue 12's goal: 100 ms):
  wall time, and the CPU time the process spent on it (what the wall time is on an idle core; this VM is shared)."""
  from cpu_ops import COLD
  pkgs = [os.path.dirname(importlib.util.find_spec(m).origin) for m in ("tg_core", "tg_cpu_x86")]  # type: ignore[arg-type, union-attr]
  subprocess.run([sys.executable, "-m", "compileall", "-q", *pkgs], capture_output=True)  # as pip install leaves them
  snippet = COLD.format(mod="tg_core", dev=', device="CPU"')
  cpu_snippet = snippet.replace("time.perf_counter()", "time.process_time()")
  walls, cpus, warm_walls, warm_cpus = [], [], [], []
  for _ in range(runs):
    for code, ts, warm in ((snippet, walls, warm_walls), (cpu_snippet, cpus, warm_cpus)):
      with tempfile.TemporaryDirectory() as cache:
        ts.append(run_py(code, {"TG_CACHE_DIR": cache}))
        warm.append(run_py(code, {"TG_CACHE_DIR": cache}))  # a second process: the kernel comes from the compile cache
  def med(ts: list[float]) -> float: return sorted(ts)[len(ts) // 2] * 1e3
  return (f"cold first matmul 64x64 (compile included): wall best {min(walls)*1e3:.1f} ms, median {med(walls):.1f} ms | "
          f"CPU time best {min(cpus)*1e3:.1f} ms, median {med(cpus):.1f} ms (goal <= 100 ms) | load average {os.getloadavg()[0]:.1f}\n"
          f"first matmul 64x64 of a process with the kernel in the compile cache: wall best {min(warm_walls)*1e3:.1f} ms, median "
          f"{med(warm_walls):.1f} ms | CPU time best {min(warm_cpus)*1e3:.1f} ms, median {med(warm_cpus):.1f} ms")

def squares(args: argparse.Namespace) -> None:
  tiny = have_tinygrad()
  for n in args.sizes:
    flops = 2 * n ** 3
    t_np = np_matmul_time(n, n, n, False, args.runs)
    t_tg = tg_matmul_time(n, n, n, False, args.runs, None)
    t_tg1, t_tg2 = tg_matmul_time(n, n, n, False, args.runs, 1), tg_matmul_time(n, n, n, False, args.runs, 2)
    t_ti = tinygrad_matmul_time(n, args.runs) if tiny else None
    g = lambda t, flops=flops: flops / t * 1e-9  # noqa: E731
    line = f"matmul {n}x{n} fp32: tg {g(t_tg):7.1f} GFLOPS | numpy {g(t_np):7.1f} | tg/numpy {t_np/t_tg:5.2f}x"
    if t_ti is not None: line += f" | tinygrad {g(t_ti):6.1f} | tg/tinygrad {t_ti/t_tg:5.1f}x"
    line += f" | tg 1 thread {g(t_tg1):6.1f}, 2 threads {g(t_tg2):6.1f}: {t_tg1/t_tg2:4.2f}x"
    print(line)

def shapes(args: argparse.Namespace) -> None:
  print(f"{'fp32 shape (MxKxN)':>24} | {'tg GFLOPS':>9} | {'numpy GFLOPS':>12} | {'tg/numpy':>8} | {'tg GB/s':>7} | {'numpy GB/s':>10} | threads 2 vs 1")
  for m, k, n, tr in SHAPES:
    flops, nbytes = 2 * m * k * n, 4 * (m * k + k * n + m * n)
    runs = max(1, min(args.runs, int(2e10 / flops)))  # 4096^3: a single timed run after the warm-up
    t_np = np_matmul_time(m, k, n, tr, runs)
    t_tg = tg_matmul_time(m, k, n, tr, runs, None)
    scaling = ""
    if not args.cpu_time and (flops >= 2 * 1024 ** 3 and flops < 2 * 4096 ** 3 or m == 1):
      t1, t2 = tg_matmul_time(m, k, n, tr, runs, 1), tg_matmul_time(m, k, n, tr, runs, 2)
      scaling = f"{t1/t2:4.2f}x (1: {flops/t1*1e-9:.1f}, 2: {flops/t2*1e-9:.1f} GFLOPS)"
    name = f"{m}x{k}x{n}" + (" x@W.T" if tr else " x@W" if m == 1 else "")
    print(f"{name:>24} | {flops/t_tg*1e-9:9.1f} | {flops/t_np*1e-9:12.1f} | {t_np/t_tg:7.2f}x | {nbytes/t_tg*1e-9:7.1f} | {nbytes/t_np*1e-9:10.1f} | {scaling}",
          flush=True)
  print(bf16_line(max(1, min(args.runs, 3))))
  print(cold_line(max(args.runs, 3)))

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024], help="square matrix sizes (default 512 1024)")
  ap.add_argument("--shapes", action="store_true", help="the issue-12 table of shapes instead of --sizes")
  ap.add_argument("--cold", action="store_true", help="only the cold first 64x64 matmul")
  ap.add_argument("--cpu-time", action="store_true", help="tg and numpy on one thread each, timed by thread CPU time (for a loaded machine)")
  ap.add_argument("--runs", type=int, default=10, help="timed runs, best reported (default 10; this VM's timings vary ~30%%)")
  args = ap.parse_args()
  print(f"CPU: {cpu_model()} ({os.cpu_count()} cores), load average {os.getloadavg()[0]:.1f}")
  if args.cpu_time:
    os.environ.update(ONE_THREAD_CPU_TIME)  # run_py passes the environment on
    print("one thread per peer, timed by thread CPU time (--cpu-time): the threads column is skipped")
  if args.cold: print(cold_line(max(args.runs, 3)))
  else: shapes(args) if args.shapes else squares(args)

if __name__ == "__main__": main()

"""fp32 matmul speed on the CPU: tg (DEV=CPU, the tg-cpu-x86 plugin) against numpy (OpenBLAS), torch (bf16) and PyPI tinygrad.

Method (this VM's speed swings by up to 2x over minutes, so the ratio of two measurements taken one after the other says
little): every peer runs in its own persistent process (numpy's OpenBLAS threads keep spinning after a call and would take
a core from whatever ran next in the same process), driven over a pipe, and the peers take turns in --rounds rounds, in
alternating order. A round times each peer as the best of at least --runs runs and --min-s seconds; per shape the table
shows each peer's median time over the rounds as GFLOPS (GB/s for the matvecs: operand bytes over the time, the figure that
bounds them) and the ratio as the median of the per-round ratios, with their spread [min-max]. Ratios > 1 favour tg.
The thread scaling also shows the process CPU time the 2-thread runs took over the 1-thread ones (about 1.0: the split
wastes nothing) and how many cores other processes kept busy meanwhile (/proc/stat): on a 2-core host whose other core is
taken, no split can scale, and that column says so.

Default: square sizes (--sizes): tg vs numpy (and tinygrad where installed), tg with NUM_CPU_THREADS=1 vs 2. `--shapes`: the
table of issue 12 (M x K x N: square, odd, wide, skinny and matvec shapes, plus 4096^3), tg vs numpy, then the
NUM_CPU_THREADS=2 vs 1 scaling of tg for 1024^3 and 2048^3 (goal >= 1.8x) and the matvecs, then a bf16 matmul against
torch's (2048^3; 1024^3 on hosts without bf16 matrix extensions), and the cold first 64x64 matmul (fresh process, empty
compile cache, compile included; bench/cpu_ops.py's measurement), then again in a second process with the caches it left
(the cache-hit path), each with the lowered-program cache on and off (LOWER_CACHE=0). A matvec is run in both weight
layouts: `x @ W` (W is K x N, the issue's shape) and `x @ W.T` (W is N x K, a Linear layer's weight, what an LLM decode
step reads). tinygrad's CPU backend needs clang: if it is missing this script tries `apt-get install -y clang` (as root)
and otherwise skips tinygrad with a message. On a shared,
loaded machine `--cpu-time` runs every peer on one thread and times its thread CPU time instead (the load then counts far
less; no thread scaling then)."""
from __future__ import annotations
import importlib.util
import os
import argparse
import subprocess
import sys
import tempfile

from _timing import TG_KERNEL_TIMER, TINYGRAD_TIMER, Peer, cpu_model, have_tinygrad, median, ratio_stats, rounds, run_py

# (M, K, N, transposed weight): the table, then 4096^3 and the Linear-layout matvec
SHAPES = [(512, 512, 512, False), (1024, 1024, 1024, False), (2048, 2048, 2048, False), (1000, 1000, 1000, False),
          (4096, 64, 4096, False), (64, 4096, 64, False), (1, 4096, 4096, False), (1, 4096, 4096, True), (4096, 4096, 4096, False)]

def _inputs(m: int, k: int, n: int, tr: bool) -> str:
  return (f"import numpy as np\nrng = np.random.default_rng(0)\na = rng.standard_normal(({m}, {k}), dtype=np.float32)\n"
          f"b = rng.standard_normal({(n, k) if tr else (k, n)}, dtype=np.float32)\n")

# --cpu-time: every peer on one thread, timed by its CPU time (BENCH_CLOCK=thread, see _timing.py)
ONE_THREAD_CPU_TIME = {"NUM_CPU_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "BENCH_CLOCK": "thread"}
TG_TIMER = TG_KERNEL_TIMER + "_time = tg_time\n"
# a few untimed runs before round 1: a kernel's first runs are timed on one thread to decide its thread count, and a quickly
# compiled one is compiled again at the full level (then decided again); rounds should time the settled kernel
TG_SETTLE = "for _ in range(4): mm().realize()\n"

def tg_peer(name: str, m: int, k: int, n: int, tr: bool, threads: int | None = None) -> Peer:
  """tg computing A @ B (A @ B.T with `tr`) as `mm`, checked once against numpy's float64 product."""
  return Peer(name, _inputs(m, k, n, tr) + f"""
ta, tb = Tensor(a, device="CPU").realize(), Tensor(b, device="CPU").realize()
mm = lambda: ta @ (tb.T if {tr} else tb)
ref = a.astype(np.float64) @ (b.T if {tr} else b).astype(np.float64)
assert np.allclose(mm().numpy(), ref, atol=1e-2 * {k} ** 0.5, rtol=1e-3), "tg's matmul is wrong"
{TG_SETTLE}""", TG_TIMER, {"NUM_CPU_THREADS": str(threads)} if threads else None)

def np_peer(m: int, k: int, n: int, tr: bool) -> Peer:
  return Peer("numpy", _inputs(m, k, n, tr) + f"bb = b.T if {tr} else b\nmm = lambda: a @ bb\n")

def tinygrad_peer(n: int) -> Peer | None:
  try: return Peer("tinygrad", _inputs(n, n, n, False) + "ta, tb = Tensor(a).realize(), Tensor(b).realize()\nmm = lambda: ta @ tb\n",
                   TINYGRAD_TIMER + "_time = tinygrad_time\n")
  except RuntimeError as e:
    print(f"tinygrad failed: {str(e).strip().splitlines()[-1] if str(e).strip() else e}")
    return None

def _measure(peers: list[Peer], args: argparse.Namespace, runs: int | None = None) -> dict[str, list[float]]:
  try:
    ts = rounds(peers, "mm", args.rounds, runs or args.runs, args.min_s)
    return {**ts, **{p.name + " cpu": p.cpu for p in peers}, **{p.name + " others": p.others for p in peers}}
  finally:
    for p in peers: p.close()

def _scaling(ts: dict[str, list[float]], flops: int, one: str = "tg1", two: str = "tg2") -> str:
  """tg's 2 vs 1 thread speedup (median of the per-round ratios, spread), both GFLOPS, and the CPU time the 2-thread runs
  took over the 1-thread ones (process CPU time, every thread: 1.00 is a split that wastes nothing, spinning and uneven
  chunks count; on a loaded host the wall-clock speedup falls while this stays)."""
  cpu = median(ts[two + " cpu"]) / median(ts[one + " cpu"])
  others = f"; other processes kept {median(ts[two + ' others']):.1f} cores busy" if ts.get(two + " others") else ""
  return (f"{_ratio(ts, one, two)} (1: {flops/median(ts[one])*1e-9:.1f}, 2: {flops/median(ts[two])*1e-9:.1f} GFLOPS; "
          f"CPU time 2/1 {cpu:.2f}{others})")

def _ratio(ts: dict[str, list[float]], num: str, den: str) -> str:
  """The median of the per-round time ratios num/den, and their spread: how much faster `den` ran than `num`."""
  med, lo, hi = ratio_stats(ts[num], ts[den])
  return f"{med:5.2f}x [{lo:.2f}-{hi:.2f}]"

def _two_cores() -> bool:
  return len(os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)) == 2

def _bf16_extensions() -> list[str]:
  try:
    with open("/proc/cpuinfo") as f: flags = set(next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), []))
  except OSError: flags = set()
  return [x for x in ("amx_bf16", "avx512_bf16") if x in flags]

def bf16_line(args: argparse.Namespace, n: int | None = None) -> str:
  """bf16 matmul (fp32 accumulation): tg vs torch CPU in alternating rounds, tg's 2 vs 1 thread scaling, and which bf16
  matrix extensions the host has. The issue's goal (tg >= torch at 2048^3) applies where it has AMX or AVX512_BF16;
  elsewhere both convert to fp32 and multiply, and torch's fallback runs at ~0.5 GFLOPS on a 2-core VM, so the row is
  1024^3 there (minutes otherwise)."""
  ext = _bf16_extensions()
  n = n or (2048 if ext else 1024)
  flops = 2 * n ** 3
  bf = ("from tg_core import dtypes\nta = Tensor(a, device='CPU').cast(dtypes.bfloat16).realize()\n"
        "tb = Tensor(b, device='CPU').cast(dtypes.bfloat16).realize()\nmm = lambda: ta @ tb\n" + TG_SETTLE)
  peers = [Peer("tg", _inputs(n, n, n, False) + bf, TG_TIMER, {"NUM_CPU_THREADS": "2"} if not args.cpu_time else None),
           Peer("torch", _inputs(n, n, n, False) + "import torch\nta, tb = torch.from_numpy(a).bfloat16(), torch.from_numpy(b).bfloat16()\n"
                "mm = lambda: ta @ tb\n")]
  if not args.cpu_time: peers.append(Peer("tg1", _inputs(n, n, n, False) + bf, TG_TIMER, {"NUM_CPU_THREADS": "1"}))
  ts = _measure(peers, args, max(1, min(args.runs, 3)))
  g = lambda name: flops / median(ts[name]) * 1e-9  # noqa: E731
  line = f"bf16 {n}x{n}x{n}: tg {g('tg'):6.1f} GFLOPS | torch {g('torch'):6.1f} | tg/torch {_ratio(ts, 'torch', 'tg')}"
  if not args.cpu_time: line += f" | tg 2 vs 1 threads {_scaling(ts, flops, two='tg')}"
  return line + f" | host bf16 matrix extensions: {', '.join(ext) or 'none (neither amx_bf16 nor avx512_bf16)'}"

def cold_line(runs: int) -> str:
  """The first 64x64 matmul of a fresh process with an empty TG_CACHE_DIR, compile included (issue 12's goal: 100 ms):
  wall time, and the CPU time the process spent on it (what the wall time is on an idle core; this VM is shared). Then a
  second process on the cache the first left. Each is run with the lowered-program cache on (the default) and off
  (LOWER_CACHE=0), in alternating order in the same rounds: what it costs on an empty cache and saves on a warm one."""
  from cpu_ops import COLD
  pkgs = [os.path.dirname(importlib.util.find_spec(m).origin) for m in ("tg_core", "tg_cpu_x86")]  # type: ignore[arg-type, union-attr]
  subprocess.run([sys.executable, "-m", "compileall", "-q", *pkgs], capture_output=True)  # as pip install leaves them
  snippet = COLD.format(mod="tg_core", dev=', device="CPU"')
  cpu_snippet = snippet.replace("time.perf_counter()", "time.process_time()")
  t: dict[tuple[str, str, str], list[float]] = {}  # (clock, cache, LOWER_CACHE) -> seconds, one per round
  for i in range(runs):
    for lc in ("1", "0") if i % 2 == 0 else ("0", "1"):
      for clock, code in (("wall", snippet), ("cpu", cpu_snippet)):
        with tempfile.TemporaryDirectory() as cache:
          for state in ("cold", "warm"):  # warm: a second process, the kernel in the compile (and lowered-program) cache
            t.setdefault((clock, state, lc), []).append(run_py(code, {"TG_CACHE_DIR": cache, "LOWER_CACHE": lc}))
  def med(ts: list[float]) -> float: return median(ts) * 1e3
  def ms(clock: str, state: str) -> str: return f"{clock} best {min(t[clock, state, '1'])*1e3:.1f} ms, median {med(t[clock, state, '1']):.1f} ms"
  def vs(clock: str, state: str) -> str:
    r = ratio_stats(t[clock, state, "0"], t[clock, state, "1"])
    return f"{clock} {med(t[clock, state, '0']):.1f} / {med(t[clock, state, '1']):.1f} ms = {r[0]:.2f}x [{r[1]:.2f}-{r[2]:.2f}]"
  return (f"cold first matmul 64x64 (compile included): {ms('wall', 'cold')} | CPU time {ms('cpu', 'cold')[4:]} (goal <= 100 ms) | "
          f"load average {os.getloadavg()[0]:.1f}\n"
          f"first matmul 64x64 of a process with the kernel in the compile and lowered-program caches: {ms('wall', 'warm')} | "
          f"CPU time {ms('cpu', 'warm')[4:]}\n"
          f"lowered-program cache, off / on (LOWER_CACHE=0 / 1, median of {runs} rounds; ratio: median of per-round ratios [min-max]): "
          f"empty cache {vs('cpu', 'cold')}, {vs('wall', 'cold')} | warm cache {vs('cpu', 'warm')}, {vs('wall', 'warm')}")

def squares(args: argparse.Namespace) -> None:
  tiny = have_tinygrad()
  for n in args.sizes:
    flops = 2 * n ** 3
    peers = [tg_peer("tg", n, n, n, False), np_peer(n, n, n, False)]
    if not args.cpu_time: peers += [tg_peer("tg1", n, n, n, False, 1), tg_peer("tg2", n, n, n, False, 2)]
    if tiny and (ti := tinygrad_peer(n)) is not None: peers.append(ti)
    ts = _measure(peers, args)
    g = lambda name, flops=flops, ts=ts: flops / median(ts[name]) * 1e-9  # noqa: E731
    line = f"matmul {n}x{n} fp32: tg {g('tg'):7.1f} GFLOPS | numpy {g('numpy'):7.1f} | tg/numpy {_ratio(ts, 'numpy', 'tg')}"
    if "tinygrad" in ts: line += f" | tinygrad {g('tinygrad'):6.1f} | tg/tinygrad {_ratio(ts, 'tinygrad', 'tg')}"
    if not args.cpu_time: line += f" | tg 2 vs 1 threads {_scaling(ts, flops)}"
    print(line, flush=True)

def shapes(args: argparse.Namespace) -> None:
  print(f"{'fp32 shape (MxKxN)':>24} | {'tg GFLOPS':>9} | {'numpy GFLOPS':>12} | {'tg/numpy [spread]':>18} | {'tg GB/s':>7} | "
        f"{'numpy GB/s':>10} | tg 2 vs 1 threads [spread] (GFLOPS)")
  for m, k, n, tr in SHAPES:
    name = f"{m}x{k}x{n}" + (" x@W.T" if tr else " x@W" if m == 1 else "")
    if args.match and args.match not in name: continue
    flops, nbytes = 2 * m * k * n, 4 * (m * k + k * n + m * n)
    runs = max(1, min(args.runs, int(2e10 / flops)))  # 4096^3: a single timed run after the warm-up
    scale = not args.cpu_time and (2 * 1024 ** 3 <= flops < 2 * 4096 ** 3 or m == 1)
    # the scaling compares NUM_CPU_THREADS=1 and 2; on a 2-core host the default (all cores) is 2
    peers = [tg_peer("tg", m, k, n, tr, 2 if scale and _two_cores() else None), np_peer(m, k, n, tr)]
    if scale: peers += [tg_peer("tg1", m, k, n, tr, 1)] + ([] if _two_cores() else [tg_peer("tg2", m, k, n, tr, 2)])
    ts = _measure(peers, args, runs)
    if scale and _two_cores(): ts["tg2"], ts["tg2 cpu"], ts["tg2 others"] = ts["tg"], ts["tg cpu"], ts["tg others"]
    t_tg, t_np = median(ts["tg"]), median(ts["numpy"])
    scaling = _scaling(ts, flops) if scale else ""
    print(f"{name:>24} | {flops/t_tg*1e-9:9.1f} | {flops/t_np*1e-9:12.1f} | {_ratio(ts, 'numpy', 'tg'):>18} | {nbytes/t_tg*1e-9:7.1f} | "
          f"{nbytes/t_np*1e-9:10.1f} | {scaling}", flush=True)
  if not args.no_bf16: print(bf16_line(args), flush=True)
  if not args.no_cold: print(cold_line(max(args.runs, 3)))

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024], help="square matrix sizes (default 512 1024)")
  ap.add_argument("--shapes", action="store_true", help="the issue-12 table of shapes instead of --sizes")
  ap.add_argument("--only", choices=["fp32", "bf16", "cold"], help="with --shapes: only the fp32 table, the bf16 row or the cold matmul")
  ap.add_argument("--match", help="with --shapes: only the fp32 shapes whose name contains this (e.g. 2048x2048, x@W)")
  ap.add_argument("--cold", action="store_true", help="only the cold first 64x64 matmul (as --shapes --only cold)")
  ap.add_argument("--cpu-time", action="store_true", help="every peer on one thread, timed by thread CPU time (for a loaded machine)")
  ap.add_argument("--rounds", type=int, default=5, help="rounds the peers take turns in; ratios are the median of the per-round ones (default 5)")
  ap.add_argument("--runs", type=int, default=3, help="timed runs per peer and round, best kept (default 3; big shapes: fewer)")
  ap.add_argument("--min-s", type=float, default=0.2, help="seconds each peer's runs in a round span at least (default 0.2)")
  args = ap.parse_args()
  args.no_bf16, args.no_cold = args.only in ("fp32", "cold"), args.only in ("fp32", "bf16")
  print(f"CPU: {cpu_model()} ({os.cpu_count()} cores), load average {os.getloadavg()[0]:.1f} | {args.rounds} rounds, peers alternating")
  if args.cpu_time:
    os.environ.update(ONE_THREAD_CPU_TIME)  # the peers' processes inherit the environment
    print("one thread per peer, timed by thread CPU time (--cpu-time): no thread scaling")
  if args.cold or args.only == "cold": print(cold_line(max(args.runs, 3)))
  elif args.only == "bf16": print(bf16_line(args))
  else: shapes(args) if args.shapes else squares(args)
  print(f"load average at the end {os.getloadavg()[0]:.1f}")

if __name__ == "__main__": main()

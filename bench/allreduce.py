"""ALLREDUCE bandwidth across CPU:0 and CPU:1 in one process (tg_core/schedule/multi.py), both strategies, next to numpy's memcpy
bandwidth measured in the same run. Bandwidth is the buffer size per device over the time of one allreduce (the schedule is built
untimed: copies and adds run). Then, where mpirun and mpi4py exist, bench/allreduce_mpi.py across 2 MPI ranks prints its own table.

  .venv/bin/python bench/allreduce.py [MAX_MB]   (default 256: 1, 4, 16, 64, 256 MB)"""
from __future__ import annotations
import importlib.util
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import BENCH_DIR, cpu_model, run_py  # noqa: E402

TG = """
import numpy as np
from tg_core import Tensor, Device
from tg_core.helpers import Context
from tg_core.engine.realize import run_schedule
from _timing import best_of
n, ring = {n}, {ring}
devs = ("CPU", "CPU:1")
# two different partials, one per device: each part of the (2, n) tensor sharded on axis 0 is one row; the sum over axis 0 is the allreduce
x = Tensor(np.random.default_rng(0).standard_normal((2, n), dtype=np.float32)).shard(devs, 0).realize()
def make():
  with Context(ALLREDUCE_RING=ring): return x.sum(0).schedule()
out = x.sum(0)
with Context(ALLREDUCE_RING=ring): got = out.numpy()
assert np.allclose(got, x.numpy().sum(0), atol=1e-5), "wrong allreduce"
print(best_of(lambda items: (run_schedule(items), Device["CPU"].synchronize(), Device["CPU:1"].synchronize()), 3, setup=make))
"""

NP = """
import numpy as np
from _timing import best_of
n = {n}
src, dst = np.ones(n, np.float32), np.empty(n, np.float32)
print(best_of(lambda: np.copyto(dst, src), 3))
"""

def main() -> None:
  max_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 256
  print(f"CPU: {cpu_model()}  (CPU:0 and CPU:1 in one process; GB/s = buffer bytes per device / time of one allreduce)")
  print(f"{'size':>8s} {'all-to-all GB/s':>16s} {'ring GB/s':>10s} {'numpy memcpy GB/s':>18s} {'all-to-all/memcpy':>18s} {'ring/memcpy':>12s}")
  mb = 1
  while mb <= max_mb:
    n = mb * (1 << 20) // 4
    nbytes = n * 4
    t_naive = run_py(TG.format(n=n, ring=0))
    t_ring = run_py(TG.format(n=n, ring=2))
    t_np = run_py(NP.format(n=n))
    bw = [nbytes / t / 1e9 for t in (t_naive, t_ring, t_np)]
    print(f"{mb:>6d}MB {bw[0]:>16.2f} {bw[1]:>10.2f} {bw[2]:>18.2f} {bw[0] / bw[2]:>17.2f}x {bw[1] / bw[2]:>11.2f}x", flush=True)
    mb *= 4
  mpi_script = os.path.join(BENCH_DIR, "allreduce_mpi.py")
  if not os.path.exists(mpi_script): print("\nacross MPI ranks: skipped (bench/allreduce_mpi.py is not here)")
  elif shutil.which("mpirun") is None: print("\nacross MPI ranks: skipped (no mpirun: apt-get install openmpi-bin)")
  elif importlib.util.find_spec("mpi4py") is None: print("\nacross MPI ranks: skipped (no mpi4py: pip install mpi4py)")
  else:
    print("\nacross 2 MPI ranks (bench/allreduce_mpi.py):", flush=True)
    r = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, mpi_script, *sys.argv[1:]],
                       capture_output=True, text=True)
    print(r.stdout, end="")
    if r.returncode != 0: print(f"allreduce_mpi.py failed (exit {r.returncode}):\n{r.stderr[-2000:]}")

if __name__ == "__main__": main()

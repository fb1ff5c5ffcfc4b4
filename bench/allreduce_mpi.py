"""Allreduce bandwidth across 2 MPI ranks: tg_core.distributed.allreduce of a float32 tensor on the default device, next to
mpi4py's Allreduce of numpy arrays (the transport alone) and a numpy memcpy of the same size (one process), in the same run.

  mpirun --allow-run-as-root --oversubscribe -np 2 python bench/allreduce_mpi.py [--sizes 1,4,16,64,256]
  python bench/allreduce_mpi.py                  # starts itself under mpirun -np 2

Bandwidth is bytes of one rank's tensor / time (the "algorithm bandwidth"); a run's time is the slowest rank's, best of the
runs after a warm-up, every run started together after a barrier."""
from __future__ import annotations
import argparse
import os
import shutil
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import best_of, cpu_model

RELAUNCHED = "TG_BENCH_ALLREDUCE_MPI"

def timed_collective(w, fn, runs: int) -> float:
  """The best over `runs` (after a warm-up) of the slowest rank's time for fn(); every rank runs the same count."""
  fn()
  best = float("inf")
  for _ in range(runs):
    w.comm.Barrier()
    st = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - st)
  return w.comm.allreduce(best, op=w.mpi.MAX)

def main() -> None:
  ap = argparse.ArgumentParser(description="allreduce bandwidth across 2 MPI ranks vs mpi4py and numpy memcpy")
  ap.add_argument("--sizes", default="1,4,16,64,256", help="tensor sizes in MiB, comma separated (default 1,4,16,64,256)")
  args = ap.parse_args()
  try: from mpi4py import MPI  # noqa: F401
  except ImportError: sys.exit("mpi4py not installed: pip install mpi4py (and apt-get install openmpi-bin libopenmpi-dev)")
  from tg_core import Device, Tensor
  from tg_core.distributed import allreduce, world
  w = world()
  if w.size == 1 and not os.environ.get(RELAUNCHED):
    if shutil.which("mpirun") is None: sys.exit("mpirun not found (apt-get install openmpi-bin libopenmpi-dev); run this under mpirun -np 2")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, os.path.abspath(__file__), *sys.argv[1:]]
    sys.exit(subprocess.run(cmd, env={**os.environ, RELAUNCHED: "1"}).returncode)
  if w.rank == 0:
    print(f"CPU: {cpu_model()}; {w.size} ranks, {MPI.Get_library_version().splitlines()[0].split(',')[0]}, mpi4py {__import__('mpi4py').__version__}; "
          f"tg device {Device.DEFAULT}; float32 sum")
    print(f"{'size':>8} {'tg allreduce':>14} {'mpi4py Allreduce':>17} {'numpy memcpy':>13} {'tg/mpi4py':>10} {'tg/memcpy':>10}")
  for mb in (int(s) for s in args.sizes.split(",")):
    n = mb * 2**20 // 4
    runs = max(3, 64 // mb)
    x = np.random.default_rng(w.rank).standard_normal(n, dtype=np.float32)
    t = Tensor(x).realize()
    tg_s = timed_collective(w, lambda t=t: allreduce(t), runs)
    recv = np.empty_like(x)
    mpi_s = timed_collective(w, lambda x=x, recv=recv: w.comm.Allreduce(x, recv, op=MPI.SUM), runs)
    if w.rank == 0:
      dst = np.empty_like(x)
      copy_s = best_of(lambda x=x, dst=dst: np.copyto(dst, x), runs)  # one process copying while the other rank sleeps in the barrier
      gbs = [x.nbytes / s / 1e9 for s in (tg_s, mpi_s, copy_s)]
      print(f"{mb:>5} MiB {gbs[0]:>9.2f} GB/s {gbs[1]:>12.2f} GB/s {gbs[2]:>8.2f} GB/s {mpi_s / tg_s:>9.2f}x {copy_s / tg_s:>9.2f}x", flush=True)
    w.barrier()

if __name__ == "__main__": main()

"""Per-kernel replay cost of captured CPU kernels: N trivial kernels (a 1-element add each) captured by TinyJit and replayed
through tg_cpu_x86's CPUGraph, in microseconds per kernel, next to a peer measured in the same run: the same kernels called one by
one from Python through ctypes (the floor of any per-kernel Python launch). Prints the CPU model.

Usage: python bench/cpu_graph_replay.py [--kernels N] [--runs R]"""
from __future__ import annotations
import argparse
import os
import time

os.environ.setdefault("DEV", "CPU")

from _timing import best_of, cpu_model  # noqa: E402

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--kernels", type=int, default=64)
  ap.add_argument("--runs", type=int, default=200)
  args = ap.parse_args()
  from tg_core import Tensor, TinyJit
  from tg_cpu_x86.graph import CPUGraph
  n = args.kernels

  @TinyJit
  def chain(x: Tensor) -> Tensor:
    for i in range(n): x = (x + float(i)).realize()  # one kernel each
    return x

  x = Tensor([0.0]).realize()
  for _ in range(4): chain(x).numpy()  # run, capture, first replays (the kernels' thread counts are decided)
  assert chain.plan is not None
  graphs = [g for g, _ in chain.plan if isinstance(g, CPUGraph)]
  assert len(graphs) == 1 and len(graphs[0].kernels) == n, f"expected one CPUGraph of {n} kernels, got {chain.plan}"
  g = graphs[0]
  (_, bufs_per_item, _, vvs), = chain.step_args
  per_rep = best_of(lambda: [g(bufs_per_item, vvs) for _ in range(args.runs)], 3) / args.runs
  calls = [(k.prg.fxn, k.addrs, k.vals_arr) for k in g.kernels]
  def direct() -> None:
    for fxn, a, v in calls: fxn(a, v, 0, 1)
  per_direct = best_of(lambda: [direct() for _ in range(args.runs)], 3) / args.runs
  st = time.perf_counter()
  ok = chain(x).numpy()[0] == sum(range(n))
  print(f"CPU: {cpu_model()}, {n} trivial kernels, checked: {ok} ({(time.perf_counter() - st) * 1e6:.0f} us a jitted call)")
  print(f"CPUGraph replay:            {per_rep / n * 1e6:7.3f} us/kernel")
  print(f"ctypes call per kernel:     {per_direct / n * 1e6:7.3f} us/kernel (peer)")
  print(f"ratio (peer / replay):      {per_direct / per_rep:7.2f}x")

if __name__ == "__main__": main()

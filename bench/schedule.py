"""Benchmark of the scheduler: create_schedule (uncached) on a transformer forward and on a deep elementwise chain.

Times are process CPU time (steadier than wall time on a shared machine). The peer, measured in the same run, is a plain
walk of the same graph (`toposort`): the ratio says how many graph walks one scheduling costs, comparable across machines.

  python bench/schedule.py [--layers N] [--tokens T] [--depth D] [--reps R]
"""
from __future__ import annotations
import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tg_core.tensor import Tensor
from tg_core.uop.ops import UOp
from tg_core.schedule import create_schedule

def rms_norm(x: Tensor, w: Tensor) -> Tensor: return x * (x.square().mean(-1, keepdim=True) + 1e-6).rsqrt() * w

def transformer(layers: int, T: int, dim: int = 64, heads: int = 4, hidden: int = 128) -> Tensor:
  D = dim // heads
  x = Tensor.randn(1, T, dim).realize()
  cos, sin = Tensor.randn(T, D // 2).realize(), Tensor.randn(T, D // 2).realize()
  for _ in range(layers):
    wq, wk, wv, wo = (Tensor.randn(dim, dim).realize() for _ in range(4))
    w1, w2, w3 = Tensor.randn(dim, hidden).realize(), Tensor.randn(hidden, dim).realize(), Tensor.randn(dim, hidden).realize()
    n1, n2 = Tensor.randn(dim).realize(), Tensor.randn(dim).realize()
    h = rms_norm(x, n1)
    q, k, v = ((h @ w).reshape(1, T, heads, D).transpose(1, 2) for w in (wq, wk, wv))
    def rope(t: Tensor) -> Tensor:
      a, b = t[..., :D // 2], t[..., D // 2:]
      return (a * cos - b * sin).cat(a * sin + b * cos, dim=-1)
    q, k = rope(q), rope(k)
    att = ((q @ k.transpose(-1, -2)) * (1 / D ** 0.5)).softmax(-1) @ v
    x = x + att.transpose(1, 2).reshape(1, T, dim) @ wo
    h = rms_norm(x, n2)
    x = x + ((h @ w1).silu() * (h @ w3)) @ w2
  return x

def deep_chain(depth: int) -> Tensor:
  x = Tensor.randn(16, 16).realize()
  for i in range(depth): x = (x * 1.0001 + 0.5) if i % 2 else x.exp2() * 0.5
  return x

def measure(t: Tensor, reps: int) -> tuple[float, float]:
  sink = UOp.sink(t.uop)
  sched, walk = [], []
  for _ in range(reps):
    st = time.process_time()
    topo = list(sink.toposort())
    walk.append(time.process_time() - st)
    st = time.process_time()
    create_schedule(sink, topo)
    sched.append(time.process_time() - st)
  return statistics.median(sched), statistics.median(walk)

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--layers", type=int, default=8)
  ap.add_argument("--tokens", type=int, default=16)
  ap.add_argument("--depth", type=int, default=2000)
  ap.add_argument("--reps", type=int, default=5)
  a = ap.parse_args()
  print(f"cpu: {platform.processor() or platform.machine()}, python {platform.python_version()}")
  graphs = [(f"transformer {a.layers} layers, {a.tokens} tokens", transformer(a.layers, a.tokens)), (f"elementwise chain {a.depth}", deep_chain(a.depth))]
  for name, t in graphs:
    s, w = measure(t, a.reps)
    n = len(list(UOp.sink(t.uop).toposort()))
    print(f"{name:40s} {n:6d} nodes  schedule {s*1e3:8.2f} ms  toposort {w*1e3:7.3f} ms  ratio {s/w:8.1f}x")

if __name__ == "__main__": main()

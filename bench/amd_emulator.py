"""The AMDGPU emulator's speed: emulated wave-instructions per second for one gfx1100 kernel (a fused multiply-add chain with an
fdiv over 16K floats, 512 waves by default), and, as a peer measured in the same run, numpy computing the same result.
Prints the CPU model. No goal: a figure for issue 14's closing note.
Needs the tg-amd plugin (plugins/tg_amd) importable: run with PYTHONPATH=plugins/tg_amd or with it installed."""
from __future__ import annotations
import argparse
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins" / "tg_amd" / "tests"))
from amdgpu_ir import compile_ir, elementwise  # noqa: E402
from tg_amd.emu import Memory, run_kernel  # noqa: E402
from _timing import best_of, cpu_model# noqa: E402

BODY = """  %m = fmul float %x0, %x1
  %a = fadd float %m, 1.5
  %d = fdiv float %a, %x1
  %s = call float @llvm.sqrt.f32(float %d)
  %r = fsub float %s, %x0"""


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--n", type=int, default=16384)
  ap.add_argument("--runs", type=int, default=3)
  args = ap.parse_args()
  n, block = args.n, 256
  co = compile_ir(elementwise("k", ["float", "float"], "float", BODY, block=block) + "declare float @llvm.sqrt.f32(float)\n")
  rng = np.random.default_rng(0)
  a, b = rng.random(n, dtype=np.float32) + 0.5, rng.random(n, dtype=np.float32) + 0.5
  mem = Memory(); pa, pb, po = mem.alloc_bytes(a), mem.alloc_bytes(b), mem.alloc(4 * n)
  kargs = struct.pack("<QQQ", po, pa, pb)
  st = time.perf_counter(); stats = run_kernel(co, "k", kargs, (n // block, 1, 1), (block, 1, 1), mem); first = time.perf_counter() - st
  emu = best_of(lambda: run_kernel(co, "k", kargs, (n // block, 1, 1), (block, 1, 1), mem), args.runs)
  want = np.sqrt((a * b + np.float32(1.5)) / b) - a
  assert np.array_equal(mem.view(po, np.float32, n), want), "emulator result differs from numpy"
  ref = best_of(lambda: np.sqrt((a * b + np.float32(1.5)) / b) - a, args.runs)
  print(f"CPU: {cpu_model()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (a shared machine slows every figure)")
  print(f"kernel: {n} floats, {stats.workgroups} workgroups, {stats.waves} waves, {stats.instructions} wave-instructions")
  print(f"emulator: {emu * 1e3:.1f} ms ({first * 1e3:.1f} ms first run, decode and compile included): "
        f"{stats.instructions / emu:,.0f} wave-instructions/s, {stats.instructions * 32 / emu:,.0f} lane-instructions/s")
  print(f"numpy, same result: {ref * 1e3:.3f} ms; emulator/numpy time ratio {emu / ref:,.0f}x")

if __name__ == "__main__": main()

"""The decode step's quantized matvecs (bench/quant_matvec.py's shapes) under variants of the CPU code, compared in one process:
rows interleaved by 8 or 16 (tg_gguf.llm.model.row_lanes), and the x86 instruction sets the renderer may use (avx2: AVX2 only,
vnni: AVX-512 F/VL/VNNI too, where the host has them), and for the integer-dot formats the float matvec (a ":float" suffix, as --float
does for all the variants). Each variant's TinyJit-captured kernels (x's quantization included for the
integer-dot formats) are called alternately, each timed by this thread's CPU time, best of --runs: robust on a shared machine.
Run with one thread: NUM_CPU_THREADS=1 DEV=CPU .venv/bin/python bench/quant_matvec_ab.py [--only Q4_1,...] [--variants 8:avx2,8:vnni,16:vnni,16:vnni:float]"""
from __future__ import annotations
import argparse
import os
import time

os.environ.setdefault("DEV", "CPU")
os.environ.setdefault("NUM_CPU_THREADS", "1")

import numpy as np  # noqa: E402
from quant_matvec import SHAPES  # noqa: E402
from _timing import cpu_model  # noqa: E402

ISA = {"avx2": ("avx2",), "vnni": ("avx2", "avx512", "avx512vnni", "avx512vl")}

def setup(fmt: str, rows: int, cols: int, lanes: int, isa: str, int8_dot: bool, copies: int = 1):
  import gguf
  from tg_core import Device, Tensor
  from tg_core.engine import realize
  from tg_core.engine.jit import TinyJit
  from tg_gguf.llm.model import Transformer, Weights
  from tg_gguf.quants import DOT
  from tg_gguf.reader import format_for
  r = Device["CPU"].renderer
  have = {f: getattr(r, f) for f in ISA["vnni"]}
  for f in ISA["vnni"]: setattr(r, f, have[f] and f in ISA[isa])
  realize._runner_cache.clear()  # the runner cache keys on the renderer's caps, not on these flags
  try:
    rng = np.random.default_rng(0)
    qt = getattr(gguf.GGMLQuantizationType, fmt)
    elems, nbytes = gguf.GGML_QUANT_SIZES[qt]
    raw = rng.integers(0, 256, (rows * cols // elems, nbytes), dtype=np.uint8)
    n = raw.shape[0]
    for off in {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q8_0": (0,), "Q4_K": (0, 2), "Q6_K": (208,)}[fmt]:
      raw[:, off:off + 2] = rng.uniform(0.001, 0.01, n).astype(np.float16).view(np.uint8).reshape(n, 2)
    f = format_for(int(qt))
    x = rng.standard_normal((1, 1, cols), dtype=np.float32)
    tx = Tensor(x, device="CPU").realize()
    ref = gguf.quants.dequantize(raw, qt).reshape(rows, cols).astype(np.float64) @ x.reshape(cols).astype(np.float64)
    if int8_dot and fmt in DOT:
      dzs = [Weights._dot(Weights._interleave_words(raw, rows, "CPU", fmt, lanes), f, rows, cols) for _ in range(copies)]
      fn, tol = (lambda t: Tensor.stack(*[Transformer.dot_matvec(t, dz).contiguous().realize() for dz in dzs])), 2e-2
    else:
      bufs = [Weights._interleave(Tensor(raw, device="CPU").realize(), rows, lanes) for _ in range(copies)]
      views = [(Weights._blocked(b, f, rows, cols), Weights._factored(b, f, rows, cols)) for b in bufs]
      fn, tol = (lambda t: Tensor.stack(*[Transformer.matvec(t, wb, fz).contiguous().realize() for wb, fz in views])), 1e-3
    got = fn(tx).numpy().reshape(copies, rows)[-1]
    assert np.allclose(got, ref, atol=tol * np.abs(ref).max()), f"{fmt} {rows}x{cols} {lanes}:{isa}: max err {np.abs(got - ref).max()}"
    j = TinyJit(lambda t: fn(t).contiguous().realize())
    for _ in range(3): j(tx)
    return j.captured
  finally:
    for k, v in have.items(): setattr(r, k, v)
    realize._runner_cache.clear()

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--runs", type=int, default=200)
  ap.add_argument("--only", default="", help="comma-separated formats (default: all)")
  ap.add_argument("--variants", default="8:avx2,8:vnni,16:vnni", help="lanes:isa[:float], comma-separated (isa: avx2 or vnni; "
                  ":float: the float matvec)")
  ap.add_argument("--copies", type=int, default=1, help="this many copies of each matrix, run in turn (more than the L3 "
                  "holds: the weights come from memory, as in a decode step over a whole model)")
  ap.add_argument("--float", action="store_true", help="the float matvec (factored/dequantized) for the integer-dot formats too")
  args = ap.parse_args()
  variants = [(int(v.split(":")[0]), v.split(":")[1], v.endswith(":float")) for v in args.variants.split(",")]
  print(f"{cpu_model()}, NUM_CPU_THREADS={os.environ['NUM_CPU_THREADS']}, thread CPU time, best of {args.runs} alternated, load {os.getloadavg()[0]:.1f}")
  print(f"{'format':6s} {'rows x cols':>13s} " + " ".join(f"{v + ' us':>16s}" for v in args.variants.split(",")) + "  what")
  only = set(args.only.split(",")) if args.only else None
  for fmt, rows, cols, what in SHAPES:
    if only and fmt not in only: continue
    caps = [setup(fmt, rows, cols, ln, isa, not (args.float or fl), args.copies) for ln, isa, fl in variants]
    best = [float("inf")] * len(caps)
    for _ in range(args.runs):
      for i, cap in enumerate(caps):
        st = time.thread_time()
        for runner, bufs, vals in cap: runner(bufs, vals, wait=True)
        best[i] = min(best[i], time.thread_time() - st)
    print(f"{fmt:6s} {f'{rows}x{cols}':>13s} " + " ".join(f"{b * 1e6:16.1f}" for b in best) + f"  {what}", flush=True)

if __name__ == "__main__": main()

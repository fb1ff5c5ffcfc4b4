"""Quantized matvec kernels (the LLM decode step's matmuls, T == 1) at SmolLM2-135M and Gemma 3 270M shapes: each kernel's GB/s of
packed weight bytes read vs numpy's fp32 matvec (OpenBLAS sgemv, one thread) of the same shape, in GB/s of its fp32 weight bytes, same run.

A kernel at memory bandwidth reads its packed bytes as fast as sgemv reads fp32 ones (ratio ~1.0); its time per output row is then
packed/fp32 bytes (Q4_1: 0.16x) of sgemv's. The weights are random blocks with sane fp16 scales (gguf-py checks every result);
the tg side is the decode step's own expression: Transformer.dot_matvec for the integer-dot formats (quants.DOT: x quantized to
int8 per block, its kernel included in the time), else Transformer.matvec (the factored form where the format has one,
quants.FACTORED). The "float" column is the float matvec (factored or dequantized, Transformer.matvec) for comparison.
--ab adds "fz/bl": the dequantized-view matvec's time (Transformer._matvec) over the factored one's, both kernels' runners
called alternately in one process, each timed by that thread's CPU time (robust on a shared machine; run it with --threads 1).
Run: DEV=CPU .venv/bin/python bench/quant_matvec.py [--threads N] [--only Q4_1,...] [--ab]"""
from __future__ import annotations
import argparse

from _timing import TG_KERNEL_TIMER, cpu_model, run_py

# (format, rows, cols, what): the decode step's matvecs (fused q/k/v and gate/up rows concatenated as the model does)
SHAPES = [
  ("Q4_1", 960, 576, "smollm2 qkv"), ("Q4_1", 3072, 576, "smollm2 gate+up"), ("Q4_1", 576, 576, "smollm2 attn_output"),
  ("Q4_1", 576, 1536, "smollm2 ffn_down"), ("Q8_0", 49152, 576, "smollm2 output (tied embd)"),
  ("Q5_0", 1280, 640, "gemma3 q+k"), ("Q8_0", 256, 640, "gemma3 v"), ("Q5_0", 4096, 640, "gemma3 gate+up"),
  ("Q4_K", 640, 1024, "gemma3 attn_output"), ("Q6_K", 640, 2048, "gemma3 ffn_down"), ("Q8_0", 262144, 640, "gemma3 output (tied embd)"),
  ("Q4_0", 3072, 576, "Q4_0 at smollm2 gate+up"), ("Q4_K", 2048, 2048, "Q4_K square"), ("Q6_K", 2048, 2048, "Q6_K square"),
]

BLOCKS = """
import gguf, gguf.quants
from tg_gguf.reader import format_for
from tg_gguf.llm.model import Weights, Transformer
from tg_gguf.quants import DOT
from tg_core import Tensor
rng = np.random.default_rng(0)
qt = getattr(gguf.GGMLQuantizationType, FMT)
elems, nbytes = gguf.GGML_QUANT_SIZES[qt]
raw = rng.integers(0, 256, (ROWS * COLS // elems, nbytes), dtype=np.uint8)
half = lambda lo, hi, n: rng.uniform(lo, hi, n).astype(np.float16).view(np.uint8).reshape(n, 2)
n = raw.shape[0]
# fp16 fields (scale, min) set to sane values: random bits would give inf/nan; positions from ggml's block layouts
for off in {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q8_0": (0,), "Q4_K": (0, 2), "Q6_K": (208,)}[FMT]: raw[:, off:off + 2] = half(0.001, 0.01, n)
fmt = format_for(int(qt))
packed = Tensor(raw, device="CPU").realize()
lanes = Weights._interleave(packed, ROWS)
wb, fz = Weights._blocked(lanes, fmt, ROWS, COLS), Weights._factored(lanes, fmt, ROWS, COLS)
x = rng.standard_normal((1, 1, COLS), dtype=np.float32)
tx = Tensor(x, device="CPU").realize()
ref = gguf.quants.dequantize(raw, qt).reshape(ROWS, COLS).astype(np.float64) @ x.reshape(COLS).astype(np.float64)
for got in (Transformer.matvec(tx, wb, fz).numpy().reshape(ROWS), Transformer._matvec(tx, wb).numpy().reshape(ROWS)):
  assert np.allclose(got, ref, rtol=1e-3, atol=1e-4 * np.abs(ref).max()), f"{FMT} {ROWS}x{COLS}: max err {np.abs(got - ref).max()}"
dz = Weights._dot(Weights._interleave_words(raw, ROWS, "CPU", FMT), fmt, ROWS, COLS) if FMT in DOT else None
if dz is not None:  # x's int8 rounding: ~0.5% of the largest output
  got = Transformer.dot_matvec(tx, dz).numpy().reshape(ROWS)
  assert np.allclose(got, ref, atol=2e-2 * np.abs(ref).max()), f"{FMT} {ROWS}x{COLS} (int8 dot): max err {np.abs(got - ref).max()}"
decode = (lambda: Transformer.dot_matvec(tx, dz)) if dz is not None else (lambda: Transformer.matvec(tx, wb, fz))
"""

# the factored and blocked matvecs' captured kernels called alternately: the best thread CPU time of each, blocked / factored
AB = """
import time
from tg_core.engine.jit import TinyJit
def captured(f):
  j = TinyJit(lambda t: f(t).contiguous().realize())
  for _ in range(3): j(tx)
  return j.captured
caps = [captured(lambda t: Transformer.matvec(t, wb, fz)), captured(lambda t: Transformer._matvec(t, wb))]
best = [float("inf")] * 2
for _ in range(RUNS):
  for i, cap in enumerate(caps):
    st = time.thread_time()
    for runner, bufs, vals in cap: runner(bufs, vals, wait=True)
    best[i] = min(best[i], time.thread_time() - st)
print(best[1] / best[0])
"""

def ab_ratio(fmt: str, rows: int, cols: int, runs: int, env: dict[str, str]) -> float:
  blocks = BLOCKS.replace("FMT", repr(fmt)).replace("ROWS", str(rows)).replace("COLS", str(cols))
  return run_py("import numpy as np\n" + blocks + AB.replace("RUNS", str(runs)), env)

def tg_time(fmt: str, rows: int, cols: int, runs: int, env: dict[str, str], expr: str = "decode()") -> float:
  code = TG_KERNEL_TIMER + BLOCKS.replace("FMT", repr(fmt)).replace("ROWS", str(rows)).replace("COLS", str(cols))
  return run_py(code + f"print(tg_time(lambda: {expr}, {runs}))", env)

def np_time(rows: int, cols: int, runs: int, env: dict[str, str]) -> float:
  return run_py(f"""import numpy as np
from _timing import best_of
rng = np.random.default_rng(0)
w, x = rng.standard_normal(({rows}, {cols}), dtype=np.float32), rng.standard_normal({cols}, dtype=np.float32)
print(best_of(lambda: w @ x, {runs}))""", env)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--threads", type=int, default=2)
  ap.add_argument("--runs", type=int, default=20)
  ap.add_argument("--only", default="", help="comma-separated formats (default: all)")
  ap.add_argument("--ab", action="store_true", help="also the blocked/factored ratio, alternated in one process, thread CPU time")
  args = ap.parse_args()
  import gguf
  env = {"NUM_CPU_THREADS": str(args.threads)}
  # numpy on one thread: OpenBLAS's idle threads spin, and on a shared machine its 2-thread sgemv measured 10-100x off its best
  np_env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
  print(f"{cpu_model()}, tg on {args.threads} threads, numpy on 1")
  print(f"{'format':6s} {'rows x cols':>13s} {'MB':>7s} {'tg us':>9s} {'tg GB/s':>8s} {'np fp32 us':>10s} {'np GB/s':>8s} {'ratio':>6s} "
        f"{'float us':>10s}{' fz/bl' if args.ab else ''}  what")
  only = set(args.only.split(",")) if args.only else None
  for fmt, rows, cols, what in SHAPES:
    if only and fmt not in only: continue
    elems, nbytes = gguf.GGML_QUANT_SIZES[getattr(gguf.GGMLQuantizationType, fmt)]
    packed = rows * cols // elems * nbytes
    t_tg, t_np = tg_time(fmt, rows, cols, args.runs, env), np_time(rows, cols, args.runs, np_env)
    t_bl = tg_time(fmt, rows, cols, args.runs, env, "Transformer.matvec(tx, wb, fz)")
    g_tg, g_np = packed / t_tg / 1e9, rows * cols * 4 / t_np / 1e9
    ab = f" {ab_ratio(fmt, rows, cols, args.runs * 10, env):5.2f}" if args.ab else ""
    print(f"{fmt:6s} {f'{rows}x{cols}':>13s} {packed / 1e6:7.2f} {t_tg * 1e6:9.1f} {g_tg:8.2f} {t_np * 1e6:10.1f} {g_np:8.2f} {g_tg / g_np:6.2f} "
          f"{t_bl * 1e6:10.1f}{ab}  {what}",
          flush=True)

if __name__ == "__main__": main()

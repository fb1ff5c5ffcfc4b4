"""A decode step over a KV cache whose valid length is a bound Variable (DEV=CPU, the tg-cpu-x86 plugin), against numpy and
torch doing the same step in the same run:
- one attention layer (dim 256, 8 heads, cache of 512 positions): project q/k/v, write k/v at `start_pos`, attend over
  cache[:, :start_pos+1], project out. tg runs it under TinyJit (one capture replayed for every position) and without;
- the time per step is the mean over positions 0..steps-1 (the cost grows with the position), best of --runs passes.
Each side runs in its own process. Prints the CPU model and tg's speed relative to each peer."""
from __future__ import annotations
import argparse

from _timing import run_py, cpu_model

SETUP = """import time, numpy as np
DIM, HEADS, MAX_LEN, STEPS, RUNS = 256, 8, 512, {steps}, {runs}
HD = DIM // HEADS
rng = np.random.default_rng(0)
W = {{n: (rng.standard_normal((DIM, DIM)) / np.sqrt(DIM)).astype(np.float32) for n in "qkvo"}}
XS = [rng.standard_normal((1, 1, DIM)).astype(np.float32) for _ in range(STEPS)]
def best_mean_step(make_step):
  best = float("inf")
  for _ in range(RUNS + 1):  # the first pass warms up (compiles, captures)
    step = make_step()
    st = time.perf_counter()
    for pos in range(STEPS): step(pos)
    best = min(best, (time.perf_counter() - st) / STEPS)
  return best
"""

TG = SETUP + """from tg_core import Tensor, TinyJit, Variable
w = {{n: Tensor(v).realize() for n, v in W.items()}}
ck = Tensor.zeros(1, MAX_LEN, HEADS, HD).contiguous().realize()
cv = Tensor.zeros(1, MAX_LEN, HEADS, HD).contiguous().realize()
def layer(x, sp):
  q, k, v = [(x @ w[n]).reshape(1, 1, HEADS, HD) for n in "qkv"]
  ck[:, sp:sp+1].assign(k).realize()
  cv[:, sp:sp+1].assign(v).realize()
  out = Tensor.scaled_dot_product_attention(q.transpose(1, 2), ck[:, :sp+1].transpose(1, 2), cv[:, :sp+1].transpose(1, 2))
  return (out.transpose(1, 2).reshape(1, 1, DIM) @ w["o"]).realize()
sp = Variable("start_pos", 0, MAX_LEN - 1)
xs = [Tensor(x).realize() for x in XS]
jit = {jit}
def make_step():
  f = TinyJit(layer) if jit else layer
  return lambda pos: f(xs[pos], sp.bind(pos)).numpy()
print(best_mean_step(make_step))"""

NUMPY = SETUP + """
def make_step():
  ck, cv = np.zeros((MAX_LEN, HEADS, HD), np.float32), np.zeros((MAX_LEN, HEADS, HD), np.float32)
  def step(pos):
    x = XS[pos].reshape(1, DIM)
    q, k, v = [(x @ W[n]).reshape(HEADS, HD) for n in "qkv"]
    ck[pos], cv[pos] = k, v
    s = np.einsum("hd,phd->hp", q, ck[:pos+1]) / np.sqrt(HD)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hp,phd->hd", p, cv[:pos+1]).reshape(1, DIM) @ W["o"]
  return step
print(best_mean_step(make_step))"""

TORCH = SETUP + """import torch
torch.set_num_threads(2)
w = {{n: torch.tensor(v) for n, v in W.items()}}
xs = [torch.tensor(x) for x in XS]
def make_step():
  ck, cv = torch.zeros(1, MAX_LEN, HEADS, HD), torch.zeros(1, MAX_LEN, HEADS, HD)
  def step(pos):
    with torch.no_grad():
      q, k, v = [(xs[pos] @ w[n]).reshape(1, 1, HEADS, HD) for n in "qkv"]
      ck[:, pos:pos+1], cv[:, pos:pos+1] = k, v
      out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), ck[:, :pos+1].transpose(1, 2), cv[:, :pos+1].transpose(1, 2))
      return (out.transpose(1, 2).reshape(1, 1, DIM) @ w["o"]).numpy()
  return step
print(best_mean_step(make_step))"""


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--runs", type=int, default=3, help="timed passes over all positions, best reported (default 3)")
  ap.add_argument("--steps", type=int, default=128, help="decode positions per pass (default 128, at most 512)")
  args = ap.parse_args()
  fmt = {"steps": args.steps, "runs": args.runs}
  print(f"CPU: {cpu_model()}; decode step, dim 256, 8 heads, KV cache of 512, positions 0..{args.steps - 1}")
  t_jit = run_py(TG.format(**fmt, jit=True))
  t_nojit = run_py(TG.format(**fmt, jit=False))
  t_np = run_py(NUMPY.format(**fmt))
  try: t_torch: float | None = run_py(TORCH.format(**fmt))
  except RuntimeError as e:
    print(f"torch failed: {str(e).strip().splitlines()[-1]}")
    t_torch = None
  print(f"tg TinyJit  {t_jit*1e6:9.1f} us/step | numpy {t_np*1e6:9.1f} us/step (tg/numpy speed {t_np/t_jit:5.2f}x)" +
        (f" | torch {t_torch*1e6:9.1f} us/step (tg/torch speed {t_torch/t_jit:5.2f}x)" if t_torch else ""))
  print(f"tg no jit   {t_nojit*1e6:9.1f} us/step (TinyJit speed-up {t_nojit/t_jit:5.2f}x: graph building and scheduling per step)")

if __name__ == "__main__": main()

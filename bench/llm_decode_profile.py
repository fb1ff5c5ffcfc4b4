"""Where an LLM decode step's time goes (DEV=CPU, 2 threads): the TinyJit-captured decode step's kernels, each run on its own
(best of --reps, thread count as the runtime decides it) at start_pos = each of --positions, summed per kernel kind: the quantized
matvecs vs every other kind (norms, RoPE, KV-cache writes, attention scores, softmax, weighted sum, residual adds, lm_head). Also
the whole step replayed as decode runs it (tok/s), at each position. Kinds are told apart from what a kernel reads and writes:
  matvec      reads a packed weight (uint8, or int32 words: the integer-dot formats) larger than 64 KiB   (lm_head included: "lm_head"
              when its output is the vocabulary)
  kv_write    writes the float16 KV cache
  scores      reads the cache, its output is one value per (head, position)  -- start_pos-dependent
  attn_v      reads the cache, its output is one value per (head, head element)
  softmax     start_pos-dependent, no cache read
  rope        reads a RoPE table (cos/sin) and writes no cache
  other       the rest (norms fused elsewhere, activations, residual adds), labelled by their output size
Usage: DEV=CPU .venv/bin/python bench/llm_decode_profile.py [--models smollm2,gemma3-270m] [--positions 128,1000]"""
from __future__ import annotations
import argparse
import collections
import os
import time

os.environ.setdefault("DEV", "CPU")
os.environ.setdefault("NUM_CPU_THREADS", "2")

from _timing import cpu_model  # noqa: E402

def kind(model, runner, bufs) -> str:
  p, cfg = runner.p, model.cfg
  ins = [bufs[i] for i in p.ins] if p.ins else bufs[1:]
  outs = [bufs[i] for i in p.outs] if p.outs else bufs[:1]
  if any((b.dtype.itemsize == 1 or b.dtype.name == "int") and b.nbytes > 65536 for b in ins):
    return "lm_head" if any(b.size == cfg.vocab_size for b in outs) else "matvec"
  if any(b.dtype.name == "half" for b in outs): return "kv_write"
  reads_cache = any(b.dtype.name == "half" for b in ins)
  symbolic = bool(p.vars)
  if reads_cache: return "attn_v" if any(b.size == cfg.n_heads * cfg.head_dim for b in outs) else "scores"
  rope = any(b.size == model.max_context * cfg.head_dim // 2 for b in ins)
  if symbolic and not rope: return "softmax"
  if rope: return "rope"
  return f"other({outs[0].size})"

def timed(runner, bufs, vals, thread_clock: bool) -> float:
  if not thread_clock: return runner(bufs, vals, wait=True) or 0.0
  st = time.thread_time()
  runner(bufs, vals, wait=True)
  return time.thread_time() - st

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--models", default="smollm2,gemma3-270m")
  ap.add_argument("--positions", default="128,1000")
  ap.add_argument("--reps", type=int, default=7)
  ap.add_argument("--steps", type=int, default=16, help="whole decode steps timed per position")
  ap.add_argument("--list", action="store_true", help="also list the first layer's kernels")
  ap.add_argument("--thread-clock", action="store_true", help="time each kernel by this thread's CPU time (set NUM_CPU_THREADS=1): "
                  "what it costs, whatever else loads the machine")
  ap.add_argument("--prefill", action="store_true", help="also time the 128-token prefill chunk's kernels")
  a = ap.parse_args()
  from tg_gguf.llm.generate import load_llm
  print(f"CPU: {cpu_model()} ({os.cpu_count()} cores), NUM_CPU_THREADS={os.environ['NUM_CPU_THREADS']}, load {os.getloadavg()[0]:.1f}")
  positions = [int(x) for x in a.positions.split(",")]
  class Tok:
    bos_id, eos_ids, vocab_size = None, frozenset(), 0
  for name in a.models.split(","):
    llm = load_llm(name, context_length=max(positions) + a.steps + 64, progress=False, tokenizer=Tok())
    for pos in range(3): llm.decode(100, pos)
    if a.prefill: prefill_profile(llm, a)
    cap = llm._decode_jit.captured
    print(f"\n{name}: {len(cap)} kernels per decode step")
    for pos in positions:
      for s in range(4): llm.decode(100, pos + s)  # warm
      st, st_cpu = time.perf_counter(), time.thread_time()
      for s in range(a.steps): llm.decode(100, pos + s)
      step, step_cpu = (time.perf_counter() - st) / a.steps, (time.thread_time() - st_cpu) / a.steps
      per: dict[str, list[float]] = collections.defaultdict(list)
      rows = []
      for runner, bufs, vv in cap:
        vals = {**vv, **({"start_pos": pos} if "start_pos" in vv else {})}
        for _ in range(3): runner(bufs, vals, wait=True)  # the runtime's thread decision for these values
        t = min(timed(runner, bufs, vals, a.thread_clock) for _ in range(a.reps))
        k = kind(llm.model, runner, bufs)
        per[k].append(t)
        rows.append((k, runner.p.name, t, runner.prg.threads_for(tuple(vals[v.arg.name] for v in runner.p.vars))))
      total = sum(sum(v) for v in per.values())
      print(f"  start_pos {pos}: decode step {step * 1e3:6.2f} ms ({1 / step:5.1f} tok/s), this thread's CPU time {step_cpu * 1e3:6.2f} ms; "
            f"kernels alone {total * 1e3:6.2f} ms")
      from tg_cpu_x86 import runtime
      pool = getattr(runtime, "_pool", None)
      print(f"    split kernels: {sum(1 for r in rows if (r[3] or 1) > 1)} of {len(rows)}, the pool's handoff "
            f"{pool.handoff_s * 1e6 if pool is not None else float('nan'):.2f} us")
      for k, ts in sorted(per.items(), key=lambda kv: -sum(kv[1])):
        print(f"    {k:14s} {len(ts):4d} kernels {sum(ts) * 1e3:7.3f} ms  ({sum(ts) / total * 100:4.1f}%)  {sum(ts) / len(ts) * 1e6:7.1f} us each")
      if a.list and pos == positions[-1]:
        for k, n, t, th in rows[:len(rows) // llm.model.cfg.n_layers + 2]: print(f"      {k:14s} {t * 1e6:8.1f} us  threads {th}  {n}")

def prefill_profile(llm, a) -> None:
  """The captured 128-token prefill chunk's kernels at start_pos 0, each timed alone: those that depend on start_pos (attention)
  and the rest."""
  ids = [(i * 7919) % 5000 + 100 for i in range(128)]
  for _ in range(3): llm.prefill(ids, 0)
  jit = llm._prefills[128][0]
  per: dict[str, list[float]] = collections.defaultdict(list)
  for runner, bufs, vv in jit.captured:
    for _ in range(2): runner(bufs, vv, wait=True)
    per["start_pos-dependent" if "start_pos" in vv else "the rest"].append(min(timed(runner, bufs, vv, a.thread_clock) for _ in range(3)))
  print(f"  prefill chunk of 128 at start_pos 0: {len(jit.captured)} kernels, " +
        ", ".join(f"{k} {len(v)} kernels {sum(v) * 1e3:.2f} ms" for k, v in per.items()))

if __name__ == "__main__": main()

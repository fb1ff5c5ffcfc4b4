"""Per-kernel profile of one 128-token prefill chunk (the PREFILL_LONG_CHUNK TinyJit, DEV=CPU): after a prefill has captured the
chunk, each captured kernel is run alone (best of --repeat) on the captured buffers, and the times are summed by kernel name.

  python bench/llm_prefill_profile.py smollm2 [--top 25] [--clock cpu]

--clock cpu times with the process's CPU time (all threads): on a shared machine a neighbour's load then inflates the figures
less than it does the wall clock. Also prints the whole prefill's wall time (best of --runs), the CPU model and load average."""
from __future__ import annotations
import argparse
import collections
import os
import time
from collections.abc import Callable

from _timing import cpu_model

PROMPT = [(i * 7919) % 5000 + 100 for i in range(128)]  # as llm_decode.py

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("model", help="smollm2, gemma3-270m or a .gguf path")
  ap.add_argument("--top", type=int, default=25, help="kernel names listed (default 25)")
  ap.add_argument("--runs", type=int, default=3, help="whole prefills timed after the capturing ones (default 3)")
  ap.add_argument("--repeat", type=int, default=3, help="runs of each kernel, best kept (default 3)")
  ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
  a = ap.parse_args()
  from tg_gguf.llm.generate import PREFILL_LONG_CHUNK, load_llm

  class Tok:
    bos_id, eos_ids, vocab_size = None, frozenset(), 0
  llm = load_llm(a.model, context_length=512, progress=False, tokenizer=Tok())  # type: ignore[arg-type]
  for _ in range(2): llm.prefill(PROMPT, 0)  # runs, then captures
  best = min(_timed(lambda: llm.prefill(PROMPT, 0), time.perf_counter) for _ in range(a.runs))
  print(f"CPU: {cpu_model()}, load average {os.getloadavg()[0]:.1f}; {a.model}: prefill of {len(PROMPT)} tokens {best * 1e3:.1f} ms "
        f"({len(PROMPT) / best:.1f} tok/s, wall, best of {a.runs})")
  jit, _, _ = llm._prefills[PREFILL_LONG_CHUNK]
  assert jit.captured is not None
  clock = time.process_time if a.clock == "cpu" else time.perf_counter
  vals = {"start_pos": 0, "last": len(PROMPT) - 1}
  by_name: dict[str, list[float]] = collections.defaultdict(list)
  for runner, bufs, vv in jit.captured:
    if isinstance(runner, str): continue  # a copy
    by_name[runner.p.name].append(min(_timed(lambda r=runner, b=bufs, v=vv: r(b, {**v, **vals}, wait=True), clock) for _ in range(a.repeat)))
  total = sum(sum(ts) for ts in by_name.values())
  print(f"{len(jit.captured)} kernels in the chunk, {total * 1e3:.1f} ms summed ({a.clock} clock, each kernel alone)")
  for name, ts in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:a.top]:
    print(f"{sum(ts) * 1e3:9.2f} ms {100 * sum(ts) / total:5.1f}% {len(ts):4d}x {name}")

def _timed(fn: Callable[[], object], clock: Callable[[], float]) -> float:
  st = clock()
  fn()
  return clock() - st

if __name__ == "__main__": main()

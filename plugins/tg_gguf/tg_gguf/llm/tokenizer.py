"""Tokenizers built from GGUF metadata alone, following llama.cpp's llama-vocab: GPT-2 style byte-level BPE
(`tokenizer.ggml.model = gpt2`, pre-tokenizer regexes picked by `tokenizer.ggml.pre`, merges by rank) and SentencePiece
style (`llama`: score-ordered merging of UTF-8 characters, `<0xXX>` byte fallback, spaces as U+2581). Control and
user-defined tokens are matched whole in the text before either algorithm runs (control ones only with parse_special)."""
from __future__ import annotations
import codecs
import heapq
import json
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from typing import Any

import regex

from tg_gguf.llm.api import LLMError, StreamDecoder

class TokenizerError(LLMError, ValueError):
  """GGUF tokenizer metadata that is missing or inconsistent, or an id outside the vocabulary."""

# tokenizer.ggml.token_type values (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN2 = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_FALCON = (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]")
_DIGITS_GPT2 = (r"\p{N}", _GPT2)

# tokenizer.ggml.pre -> the regexes llama.cpp applies in turn (each one splits the pieces the previous one left)
PRE_TOKENIZERS: dict[str, tuple[str, ...]] = {
  "default": (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"),
  "gpt2": (_GPT2,), "gpt-2": (_GPT2,), "mpt": (_GPT2,), "olmo": (_GPT2,), "jais": (_GPT2,), "trillion": (_GPT2,),
  "llama3": (_LLAMA3,), "llama-v3": (_LLAMA3,), "llama-bpe": (_LLAMA3,), "falcon3": (_LLAMA3,), "pixtral": (_LLAMA3,),
  "dbrx": (_LLAMA3,), "smaug-bpe": (_LLAMA3,),
  "qwen2": (_QWEN2,), "stablelm2": (_QWEN2,), "deepseek-r1-qwen": (_QWEN2,), "megrez": (_QWEN2,),
  "falcon": _FALCON,
  "smollm": _DIGITS_GPT2, "starcoder": _DIGITS_GPT2, "refact": _DIGITS_GPT2, "command-r": _DIGITS_GPT2, "codeshell": _DIGITS_GPT2,
  "exaone": _DIGITS_GPT2, "minerva-7b": _DIGITS_GPT2,
}
# pre-tokenizers whose words are looked up whole before merging (llama.cpp's ignore_merges)
IGNORE_MERGES = frozenset({"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"})
# token texts that end a turn (llama.cpp's end-of-generation list), on top of the eos/eot/eom ids the file names
END_OF_TURN_TEXTS = frozenset({"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "_<EOT>", "<|end_of_text|>",
                               "<end_of_utterance>", "<|return|>", "<|call|>", "<｜end▁of▁sentence｜>"})

_WORD_START = regex.compile("(?<=[^\u2581])\u2581")

@cache
def byte_to_unicode() -> dict[int, str]:
  """GPT-2's reversible byte -> printable character map (bytes that print as themselves keep their character)."""
  keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
  extra = iter(range(256, 512))
  return {b: chr(b) if b in keep else chr(next(extra)) for b in range(256)}

def _split(text: str, patterns: Sequence[regex.Pattern]) -> list[str]:
  """llama.cpp's unicode_regex_split: each pattern cuts every piece into its matches and the gaps between them."""
  pieces = [text]
  for pat in patterns:
    out: list[str] = []
    for piece in pieces:
      pos = 0
      for m in pat.finditer(piece):
        if m.start() > pos: out.append(piece[pos:m.start()])
        if m.end() > m.start(): out.append(m.group())
        pos = m.end()
      if pos < len(piece): out.append(piece[pos:])
    pieces = out
  return pieces

class _Literals:
  """Leftmost-longest matching of many literal strings (thousands of special tokens, where a regex alternation is slow):
  candidate positions by first character, extended one character at a time while the text is a prefix of some token."""
  def __init__(self, texts: Sequence[str]):
    self.texts = {t for t in texts if t}
    self.prefixes = {t[:k] for t in self.texts for k in range(1, len(t) + 1)}
    self.first = regex.compile("[" + "".join(regex.escape(c) for c in sorted({t[0] for t in self.texts})) + "]")
  def finditer(self, text: str) -> Iterator[tuple[int, int]]:
    pos = 0
    while (m := self.first.search(text, pos)) is not None:
      p, best, k = m.start(), 0, 1
      while p + k <= len(text) and (piece := text[p:p + k]) in self.prefixes:
        if piece in self.texts: best = k
        k += 1
      if best: yield p, p + best
      pos = p + max(best, 1)

class GGUFTokenizer:
  """api.Tokenizer over a GGUF vocabulary. `encode` adds BOS per `tokenizer.ggml.add_bos_token` (llama.cpp's default when
  absent: yes for SentencePiece, no for BPE); chat.render_chat leaves the template's own leading BOS out for such files."""

  def __init__(self, metadata: dict[str, Any]):
    def get(key: str, default: Any = None) -> Any: return metadata.get(f"tokenizer.ggml.{key}", default)
    self.model: str = get("model")
    if self.model not in ("gpt2", "llama"):
      raise TokenizerError(f"tokenizer.ggml.model is {self.model!r}; tg reads 'gpt2' (byte-level BPE) and 'llama' (SentencePiece) vocabularies")
    self.tokens: list[str] = list(get("tokens") or [])
    if not self.tokens: raise TokenizerError("the GGUF file has no tokenizer.ggml.tokens: it carries no vocabulary to tokenize with")
    self.vocab_size = len(self.tokens)
    self.types: list[int] = list(get("token_type") or [NORMAL] * self.vocab_size)
    if len(self.types) != self.vocab_size:
      raise TokenizerError(f"tokenizer.ggml.token_type has {len(self.types)} entries for {self.vocab_size} tokens")
    self.ids: dict[str, int] = {}
    for i, t in enumerate(self.tokens): self.ids.setdefault(t, i)  # the first of duplicate spellings wins, as in llama.cpp
    self.bos_id: int | None = self._id(get("bos_token_id"), "bos_token_id")
    eos_id = self._id(get("eos_token_id"), "eos_token_id")
    self.add_bos: bool = bool(get("add_bos_token", self.model == "llama")) and self.bos_id is not None
    self.add_space_prefix: bool = bool(get("add_space_prefix", self.model == "llama"))
    named = {eos_id, self._id(get("eot_token_id"), "eot_token_id"), self._id(get("eom_token_id"), "eom_token_id")}
    self.eos_ids: frozenset[int] = frozenset(i for i in named if i is not None) | {self.ids[t] for t in END_OF_TURN_TEXTS if t in self.ids}
    # control tokens are matched in text only with parse_special; user-defined ones always (llama.cpp's tokenizer_st_partition)
    self._control = self._alternation([t for t, ty in zip(self.tokens, self.types) if ty in (CONTROL, USER_DEFINED)])
    self._user = self._alternation([t for t, ty in zip(self.tokens, self.types) if ty == USER_DEFINED])
    self._piece_cache: dict[int, bytes] = {}
    self._word_cache: dict[str, list[int]] = {}
    if self.model == "gpt2":
      pre = get("pre", "default")
      if pre not in PRE_TOKENIZERS:
        raise TokenizerError(f"tokenizer.ggml.pre {pre!r} is not a pre-tokenizer tg knows; known: {', '.join(sorted(PRE_TOKENIZERS))}")
      self.pre: str = pre
      self._patterns = [regex.compile(p) for p in PRE_TOKENIZERS[pre]]
      merges = get("merges")
      if not merges: raise TokenizerError("a gpt2 (byte-level BPE) vocabulary needs tokenizer.ggml.merges, which the file lacks")
      self._ranks: dict[tuple[str, str], int] = {}
      for r, m in enumerate(merges):
        a, sep, b = m.partition(" ")
        if not sep: raise TokenizerError(f"tokenizer.ggml.merges[{r}] is {m!r}: a merge is two tokens separated by one space")
        self._ranks.setdefault((a, b), r)
      self._byte_chars = byte_to_unicode()
      self._char_bytes = {c: b for b, c in self._byte_chars.items()}
      self._encode_text: Callable[[str, bool], list[int]] = self._encode_bpe
    else:
      self.scores: list[float] = list(get("scores") or [])
      if len(self.scores) != self.vocab_size:
        raise TokenizerError(f"a llama (SentencePiece) vocabulary needs one tokenizer.ggml.scores entry per token: {len(self.scores)} for {self.vocab_size}")
      self._byte_ids = [self.ids.get(f"<0x{b:02X}>") for b in range(256)]
      self._unk_id = self._id(get("unknown_token_id"), "unknown_token_id")
      # tokens with a U+2581 inside a word (after another character), and where: the only ones a cut before a word could split
      self._spanning = [(t, m.start()) for t in self.tokens if "\u2581" in t for m in _WORD_START.finditer(t)]
      self._encode_text = self._encode_spm

  def _id(self, i: int | None, key: str) -> int | None:
    if i is not None and not 0 <= i < self.vocab_size:
      raise TokenizerError(f"tokenizer.ggml.{key} is {i}, outside the vocabulary of {self.vocab_size} tokens")
    return i

  @staticmethod
  def _alternation(texts: list[str]) -> _Literals | None:
    return _Literals(texts) if any(texts) else None

  # *** encoding

  def encode(self, text: str, add_bos: bool | None = None, parse_special: bool = True) -> list[int]:
    if not isinstance(text, str): raise TypeError(f"encode takes a str, got {type(text).__name__}")
    special = self._control if parse_special else self._user
    ids: list[int] = []
    pos, first = 0, True
    for start, end in special.finditer(text) if special is not None else ():
      if start > pos: ids += self._encode_text(text[pos:start], first)
      ids.append(self.ids[text[start:end]])
      pos, first = end, False
    if pos < len(text): ids += self._encode_text(text[pos:], first)
    if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None: ids.insert(0, self.bos_id)
    return ids

  def _encode_bpe(self, text: str, first: bool) -> list[int]:
    ids: list[int] = []
    for word in _split(text, self._patterns):
      if (cached := self._word_cache.get(word)) is None:
        cached = self._word_cache[word] = self._bpe("".join(self._byte_chars[b] for b in word.encode("utf-8")))
      ids += cached
    return ids

  def _bpe(self, word: str) -> list[int]:
    if self.pre in IGNORE_MERGES and (i := self.ids.get(word)) is not None: return [i]
    parts = list(word)
    ranks = self._ranks
    while len(parts) > 1:
      best = min(range(len(parts) - 1), key=lambda i: ranks.get((parts[i], parts[i + 1]), 1 << 62))
      pair = (parts[best], parts[best + 1])
      if pair not in ranks: break
      merged: list[str] = []
      i = 0
      while i < len(parts):  # every occurrence of the best pair, left to right
        if i < len(parts) - 1 and (parts[i], parts[i + 1]) == pair: merged.append(pair[0] + pair[1]); i += 2
        else: merged.append(parts[i]); i += 1
      parts = merged
    ids = []
    for p in parts:
      if (i := self.ids.get(p)) is not None: ids.append(i)
      else: ids += [self.ids[c] for c in p if c in self.ids]  # a merge result missing from the vocabulary: its byte characters
    return ids

  def _encode_spm(self, text: str, first: bool) -> list[int]:
    if first and self.add_space_prefix: text = " " + text
    text = text.replace(" ", "\u2581")
    # SentencePiece merges over the whole fragment; cutting it before each word's U+2581 changes nothing where no token
    # could span the cut (no merge ever joins symbols across it), and lets each word's result be cached
    ids, start = [], 0
    for m in _WORD_START.finditer(text):
      p = m.start()
      if not any(p >= j and text.startswith(t, p - j) for t, j in self._spanning): ids += self._spm_word(text[start:p]); start = p
    return ids + self._spm_word(text[start:])

  def _spm_word(self, text: str) -> list[int]:
    if (cached := self._word_cache.get(text)) is None: cached = self._word_cache[text] = self._spm(text)
    return cached

  def _spm(self, text: str) -> list[int]:
    if not text: return []
    syms = list(text)  # one symbol per character, in a doubly linked list; a merge empties the right one
    nxt, prv = [*range(1, len(syms)), -1], list(range(-1, len(syms) - 1))
    heap: list[tuple[float, int, str]] = []
    ids, scores = self.ids, self.scores
    def push(left: int) -> None:
      if left < 0 or (right := nxt[left]) < 0: return
      if (i := ids.get(s := syms[left] + syms[right])) is not None: heapq.heappush(heap, (-scores[i], left, s))
    for i in range(len(syms) - 1): push(i)
    merged_from: dict[str, tuple[str, str]] = {}
    while heap:
      _, left, s = heapq.heappop(heap)
      right = nxt[left]
      if right < 0 or not syms[left] or syms[left] + syms[right] != s: continue  # outdated bigram
      merged_from[s] = (syms[left], syms[right])
      syms[left], syms[right] = s, ""
      nxt[left] = nxt[right]
      if nxt[right] >= 0: prv[nxt[right]] = left
      if prv[left] >= 0: push(prv[left])
      push(left)
    out: list[int] = []
    def emit(s: str) -> None:
      if (i := ids.get(s)) is not None: out.append(i)
      elif s in merged_from: emit(merged_from[s][0]); emit(merged_from[s][1])
      else:
        for b in s.encode("utf-8"):
          if (bi := self._byte_ids[b]) is not None: out.append(bi)
          elif self._unk_id is not None: out.append(self._unk_id)
          else: raise TokenizerError(f"character {s!r} has no token, no <0x{b:02X}> byte token and the file names no unknown_token_id")
    i = 0
    while i >= 0:
      if syms[i]: emit(syms[i])
      i = nxt[i]
    return out

  # *** decoding

  def piece(self, token_id: int) -> bytes:
    """The bytes one token stands for (control tokens as their text, byte tokens as their byte)."""
    if (b := self._piece_cache.get(token_id)) is not None: return b
    if not isinstance(token_id, int) or not 0 <= token_id < self.vocab_size:
      raise TokenizerError(f"token id {token_id!r} is outside the vocabulary of {self.vocab_size} tokens")
    text, ty = self.tokens[token_id], self.types[token_id]
    if ty in (CONTROL, USER_DEFINED, UNKNOWN): b = text.encode("utf-8")
    elif self.model == "gpt2": b = b"".join(bytes([self._char_bytes[c]]) if c in self._char_bytes else c.encode("utf-8") for c in text)
    elif ty == BYTE and len(text) == 6 and text.startswith("<0x"): b = bytes([int(text[3:5], 16)])
    else: b = text.replace("\u2581", " ").encode("utf-8")
    self._piece_cache[token_id] = b
    return b

  def decode(self, ids: Sequence[int]) -> str:
    d = self.stream_decoder()
    return "".join(d.push(i) for i in ids) + d.flush()

  def stream_decoder(self) -> StreamDecoder: return GGUFStreamDecoder(self)

class GGUFStreamDecoder:
  """Bytes of each token through an incremental UTF-8 decoder: a character split over tokens comes out once whole, bytes
  that can never form one come out as U+FFFD. With add_space_prefix the space SentencePiece put first is dropped."""
  def __init__(self, tok: GGUFTokenizer):
    self.tok, self.utf8 = tok, codecs.getincrementaldecoder("utf-8")(errors="replace")
    self.strip_space = tok.model == "llama" and tok.add_space_prefix
  def push(self, token_id: int) -> str: return self._out(self.utf8.decode(self.tok.piece(token_id)))
  def flush(self) -> str: return self._out(self.utf8.decode(b"", final=True))
  def _out(self, s: str) -> str:
    if self.strip_space and s: self.strip_space, s = False, s.removeprefix(" ")
    return s

def load_tokenizer(metadata: dict[str, Any]) -> GGUFTokenizer:
  """The tokenizer a GGUF file's metadata describes (raises TokenizerError naming what is missing or unsupported)."""
  return GGUFTokenizer(metadata)

def tokenize_json(tokenizer: GGUFTokenizer, text: str, add_bos: bool | None = None, parse_special: bool = True, pieces: bool = False) -> str:
  """`tg-llm tokenize`: the ids as a JSON list (as llama.cpp's llama-tokenize --ids), or [[id, piece], ...] with pieces."""
  ids = tokenizer.encode(text, add_bos=add_bos, parse_special=parse_special)
  if not pieces: return json.dumps(ids)
  return json.dumps([[i, tokenizer.piece(i).decode("utf-8", errors="replace")] for i in ids], ensure_ascii=False)

"""The contract between the LLM runner's parts: the model side (`model`, `generate`), the tokenizer side (`tokenizer`,
`chat`) and the front ends (`cli`, `server`). Each part codes against these names only."""
from __future__ import annotations
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

class LLMError(Exception):
  """Base of the runner's errors (bad model file, unknown architecture, context overflow, bad sampling parameters)."""

class ContextOverflowError(LLMError):
  """The prompt plus the requested tokens do not fit the model's context length."""

class UnknownModelError(LLMError):
  """A `--model` name that is neither a file nor a known package; the message names the `pip install` that provides it."""

class SamplingParamError(LLMError, ValueError):
  """A sampling parameter out of range (the message names it and the valid range)."""

@dataclass(frozen=True)
class SamplingParams:
  max_tokens: int = 256
  temperature: float = 0.0        # 0 = greedy
  top_k: int = 0                  # 0 = off
  top_p: float = 1.0
  min_p: float = 0.0
  repetition_penalty: float = 1.0
  seed: int | None = None
  stop: tuple[str, ...] = ()      # stop strings (the text stops before them)

  def __post_init__(self) -> None:
    if self.max_tokens < 0: raise SamplingParamError(f"max_tokens must be >= 0, got {self.max_tokens}")
    if self.temperature < 0: raise SamplingParamError(f"temperature must be >= 0, got {self.temperature}")
    if self.top_k < 0: raise SamplingParamError(f"top_k must be >= 0, got {self.top_k}")
    if not 0 < self.top_p <= 1: raise SamplingParamError(f"top_p must be in (0, 1], got {self.top_p}")
    if not 0 <= self.min_p <= 1: raise SamplingParamError(f"min_p must be in [0, 1], got {self.min_p}")
    if self.repetition_penalty <= 0: raise SamplingParamError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")

class Tokenizer(Protocol):
  """Built from GGUF metadata alone (`tokenizer.Tokenizer.from_metadata(metadata)`)."""
  bos_id: int | None
  eos_ids: frozenset[int]         # every id that ends generation (eos, eot, end_of_turn, ...)
  vocab_size: int
  def encode(self, text: str, add_bos: bool | None = None, parse_special: bool = True) -> list[int]: ...
  def decode(self, ids: Sequence[int]) -> str: ...
  def stream_decoder(self) -> StreamDecoder: ...

class StreamDecoder(Protocol):
  """Feeds ids one at a time and returns only complete UTF-8 text (never half a multibyte character)."""
  def push(self, token_id: int) -> str: ...
  def flush(self) -> str: ...

@dataclass
class ChatMessage:
  role: str                       # "system" | "user" | "assistant"
  content: str

@dataclass
class Completion:
  """One finished generation: the text, the ids, why it stopped ("stop" | "length"), and the token counts."""
  text: str
  token_ids: list[int] = field(default_factory=list)
  finish_reason: str = "stop"
  prompt_tokens: int = 0
  completion_tokens: int = 0

class LLM(Protocol):
  """A loaded model ready to generate (`generate.load_llm(path_or_name)` returns one)."""
  name: str                       # model id shown by /v1/models (the file stem or package name)
  context_length: int
  tokenizer: Tokenizer
  def apply_chat_template(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> str: ...
  def stream(self, prompt_ids: Sequence[int], params: SamplingParams) -> Iterator[tuple[int, str]]:
    """Yield (token id, new text) per generated token; stops at EOS, a stop string, or max_tokens. Raises
    ContextOverflowError before any work when the prompt does not fit. Not reentrant: callers serialize."""
    ...
  def complete(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion: ...

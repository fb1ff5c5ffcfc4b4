"""Chat prompts: the GGUF file's `tokenizer.chat_template` (a Jinja2 template, as transformers' apply_chat_template renders
it: sandboxed, trim_blocks/lstrip_blocks, `raise_exception`, `bos_token`/`eos_token`...), or a built-in template for
architectures whose files carry none (Gemma 3)."""
from __future__ import annotations
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tg_gguf.llm.api import ChatMessage, LLMError

class ChatTemplateError(LLMError, ValueError):
  """A chat template that does not compile or fails to render, a conversation it rejects, or a model with no template."""

# Gemma's published template (the files omit it): system text folded into the first user turn, "assistant" spelled "model"
GEMMA_TEMPLATE = (
  "{{ bos_token }}"
  "{%- if messages[0]['role'] == 'system' -%}"
  "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}"
  "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
  "{%- for message in loop_messages -%}"
  "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
  "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif -%}"
  "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
  "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}"
  "{%- endfor -%}"
  "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}")

# general.architecture -> the template used when the file has no tokenizer.chat_template
BUILTIN_TEMPLATES: dict[str, str] = {"gemma": GEMMA_TEMPLATE, "gemma2": GEMMA_TEMPLATE, "gemma3": GEMMA_TEMPLATE}

def _raise_exception(message: str) -> None: raise ChatTemplateError(f"the model's chat template rejected the conversation: {message}")
def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False) -> str:
  return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
def _strftime_now(fmt: str) -> str: return datetime.now().strftime(fmt)

@cache
def _compile(source: str) -> jinja2.Template:
  env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
  env.filters["tojson"] = _tojson
  env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
  try: return env.from_string(source)
  except jinja2.TemplateSyntaxError as e:
    raise ChatTemplateError(f"the model's chat template does not compile (line {e.lineno}: {e.message}); use --no-chat-template to send raw prompts") from e

def _token_text(metadata: Mapping[str, Any], key: str) -> str | None:
  tokens, i = metadata.get("tokenizer.ggml.tokens") or [], metadata.get(f"tokenizer.ggml.{key}")
  return tokens[i] if i is not None and 0 <= i < len(tokens) else None

def chat_template(metadata: Mapping[str, Any]) -> str:
  """The template render_chat uses: the file's own, else the built-in one for its architecture."""
  if (source := metadata.get("tokenizer.chat_template")) is not None: return source
  arch = metadata.get("general.architecture")
  if arch in BUILTIN_TEMPLATES: return BUILTIN_TEMPLATES[arch]
  raise ChatTemplateError(f"the model file has no tokenizer.chat_template and tg has no built-in one for architecture {arch!r} "
                          f"(built in: {', '.join(sorted(BUILTIN_TEMPLATES))}); use --no-chat-template to send raw prompts")

def _message(m: ChatMessage | Mapping[str, Any], i: int) -> dict[str, Any]:
  role, content = (m.role, m.content) if isinstance(m, ChatMessage) else (m.get("role"), m.get("content"))
  if not isinstance(role, str) or not isinstance(content, str):
    raise ChatTemplateError(f"message {i} needs a str role and a str content, got role={role!r}, content of type {type(content).__name__}")
  return {"role": role, "content": content}

def render_chat(metadata: Mapping[str, Any], messages: Sequence[ChatMessage | Mapping[str, Any]], add_generation_prompt: bool = True) -> str:
  """The prompt text for a conversation. When the tokenizer adds BOS itself (`tokenizer.ggml.add_bos_token`), a BOS the
  template writes first is left out (as llama.cpp does), so encoding the result gives one BOS, not two."""
  if not messages: raise ChatTemplateError("a chat needs at least one message")
  msgs = [_message(m, i) for i, m in enumerate(messages)]
  bos = _token_text(metadata, "bos_token_id")
  specials = {"bos_token": bos or "", "eos_token": _token_text(metadata, "eos_token_id") or "",
              "unk_token": _token_text(metadata, "unknown_token_id") or "", "pad_token": _token_text(metadata, "padding_token_id") or ""}
  template = _compile(chat_template(metadata))
  try: text = template.render(messages=msgs, add_generation_prompt=add_generation_prompt, tools=None, documents=None, **specials)
  except ChatTemplateError: raise
  except Exception as e:  # a template is code from the file: any failure in it is the template's, reported as such
    raise ChatTemplateError(f"the model's chat template failed to render ({type(e).__name__}: {e}); use --no-chat-template to send raw prompts") from e
  default_bos = metadata.get("tokenizer.ggml.model") == "llama"
  if bos and metadata.get("tokenizer.ggml.add_bos_token", default_bos) and text.startswith(bos): text = text[len(bos):]
  return text

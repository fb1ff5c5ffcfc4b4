"""An OpenAI-compatible HTTP server for one loaded `api.LLM`, on the standard library's ThreadingHTTPServer.

Routes: `GET /v1/models[/<id>]`, `POST /v1/chat/completions`, `POST /v1/completions` (streamed as server-sent events in
OpenAI's chunk shapes, or whole), `GET /` (the chat page in `web/index.html`), `GET /health`. Every error is a JSON body
in OpenAI's shape `{"error": {"message", "type", "param", "code"}}`; the client never sees a traceback.
The generator is not reentrant, so one lock serializes generations: concurrent requests queue. A client that goes away
mid-generation (a failed write, or a closed socket seen between tokens) ends that generation and releases the lock."""
from __future__ import annotations
import dataclasses
import hmac
import json
import select
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from tg_gguf.llm.api import LLM, ChatMessage, ContextOverflowError, LLMError, SamplingParamError, SamplingParams

DEFAULT_MAX_BODY_BYTES = 1 << 20
DEFAULT_MAX_TOKENS_CAP = 1024
COMPLETIONS_DEFAULT_MAX_TOKENS = 16   # OpenAI's default for /v1/completions; chat defaults to the cap
CLIENT_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)

class ServeError(LLMError):
  """The server cannot start (the address is taken, the host does not resolve, ...)."""

class APIError(Exception):
  """An error answered to the client as an OpenAI error body with an HTTP status."""
  def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None, type_: str = "invalid_request_error",
               headers: dict[str, str] | None = None):
    super().__init__(message)
    self.status, self.message, self.param, self.code, self.type, self.headers = status, message, param, code, type_, headers or {}

  def body(self) -> dict[str, Any]: return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

# ***** request bodies -> what to generate *****

@dataclasses.dataclass(frozen=True)
class Job:
  """One validated generation request."""
  chat: bool                      # chat.completion(.chunk) shapes, else text_completion
  prompt_ids: list[int]
  params: SamplingParams
  stream: bool
  include_usage: bool

def _type_name(v: Any) -> str: return "null" if v is None else type(v).__name__

def _get(body: dict[str, Any], name: str, kinds: tuple[type, ...], what: str, default: Any = None) -> Any:
  """body[name] when it has one of `kinds` (null counts as absent); bool is never a number here."""
  v = body.get(name)
  if v is None: return default
  if isinstance(v, bool) and bool not in kinds or not isinstance(v, kinds): raise APIError(400, f"'{name}' must be {what}, got {_type_name(v)}", param=name)
  return v

# accepted only at the value that means "off": anything else would be silently ignored, so it is refused
_OFF_VALUES: dict[str, tuple[Any, ...]] = {"frequency_penalty": (0, 0.0), "presence_penalty": (0, 0.0), "logprobs": (False, 0), "top_logprobs": (0,),
                                           "echo": (False,), "best_of": (1,), "logit_bias": ({},), "suffix": ("",), "tools": ([],),
                                           "parallel_tool_calls": (True, False)}
_COMMON_FIELDS = ("model", "max_tokens", "temperature", "top_p", "seed", "stop", "n", "stream", "stream_options", "user",
                  "top_k", "min_p", "repetition_penalty")  # the last three are tg's (and llama.cpp's) extensions
CHAT_FIELDS = frozenset(_COMMON_FIELDS + ("messages", "max_completion_tokens"))
COMPLETION_FIELDS = frozenset(_COMMON_FIELDS + ("prompt",))
CHAT_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}

def _check_fields(body: dict[str, Any], allowed: frozenset[str]) -> None:
  for k, v in body.items():
    if k in allowed or v is None: continue
    if k in _OFF_VALUES:
      if v not in _OFF_VALUES[k]:
        raise APIError(400, f"'{k}' is not supported by this server (only its default, or leave it out)", param=k)
      continue
    raise APIError(400, f"Unrecognized request argument supplied: {k}", param=k)

def _stop_strings(body: dict[str, Any]) -> tuple[str, ...]:
  stop = _get(body, "stop", (str, list), "a string or a list of up to 4 strings", ())
  stop = [stop] if isinstance(stop, str) else stop
  if len(stop) > 4 or not all(isinstance(s, str) and s for s in stop):
    raise APIError(400, "'stop' must be a string or a list of up to 4 non-empty strings", param="stop")
  return tuple(stop)

def _chat_messages(body: dict[str, Any]) -> list[ChatMessage]:
  msgs = body.get("messages")
  if msgs is None: raise APIError(400, "'messages' is required: a list of {role, content} objects", param="messages")
  if not isinstance(msgs, list) or not msgs: raise APIError(400, "'messages' must be a non-empty list of {role, content} objects", param="messages")
  out = []
  for i, m in enumerate(msgs):
    where = f"messages[{i}]"
    if not isinstance(m, dict): raise APIError(400, f"'{where}' must be an object with 'role' and 'content', got {_type_name(m)}", param=where)
    if (role := CHAT_ROLES.get(m.get("role"))) is None:
      raise APIError(400, f"'{where}.role' must be one of {sorted(CHAT_ROLES)}, got {m.get('role')!r}", param=f"{where}.role")
    content = m.get("content")
    if content is None and role == "assistant": content = ""
    if isinstance(content, list):  # content parts: only text ones
      if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
        raise APIError(400, f"'{where}.content' parts must all be {{\"type\": \"text\", \"text\": ...}} (this model reads text only)", param=f"{where}.content")
      content = "".join(p["text"] for p in content)
    if not isinstance(content, str):
      raise APIError(400, f"'{where}.content' must be a string or a list of text parts, got {_type_name(content)}", param=f"{where}.content")
    out.append(ChatMessage(role, content))
  return out

def _completion_prompt(llm: LLM, body: dict[str, Any]) -> list[int]:
  p = body.get("prompt")
  if p is None: raise APIError(400, "'prompt' is required: a string (or a list of token ids)", param="prompt")
  if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)): p = p[0]  # a batch of one
  if isinstance(p, str): return llm.tokenizer.encode(p)
  if isinstance(p, list) and p and all(type(t) is int for t in p):
    if not all(0 <= t < llm.tokenizer.vocab_size for t in p):
      raise APIError(400, f"'prompt' token ids must be in [0, {llm.tokenizer.vocab_size})", param="prompt")
    return list(p)
  if isinstance(p, list) and p and all(isinstance(t, (str, list)) for t in p):
    raise APIError(400, "'prompt' must be one prompt: this server generates one at a time", param="prompt")
  raise APIError(400, f"'prompt' must be a string or a non-empty list of token ids, got {_type_name(p)}", param="prompt")

def _sampling(body: dict[str, Any], mt_name: str) -> SamplingParams:
  """The sampling fields, type-checked here and range-checked by SamplingParams (max_tokens is settled with the prompt)."""
  number = (int, float)
  if (mt := _get(body, mt_name, (int,), "an integer", None)) is not None and mt < 1: raise APIError(400, f"'{mt_name}' must be >= 1, got {mt}", param=mt_name)
  try:
    return SamplingParams(max_tokens=mt or 1, temperature=float(_get(body, "temperature", number, "a number", 1.0)),  # OpenAI's default
                          top_p=float(_get(body, "top_p", number, "a number", 1.0)), top_k=_get(body, "top_k", (int,), "an integer", 0),
                          min_p=float(_get(body, "min_p", number, "a number", 0.0)),
                          repetition_penalty=float(_get(body, "repetition_penalty", number, "a number", 1.0)),
                          seed=_get(body, "seed", (int,), "an integer", None), stop=_stop_strings(body))
  except SamplingParamError as e: raise APIError(400, str(e), param=_param_of(e)) from e

def parse_job(llm: LLM, body: Any, chat: bool, max_tokens_cap: int) -> Job:
  """Validate a request body (field by field, naming the bad one) into a Job; the prompt is tokenized last."""
  if not isinstance(body, dict): raise APIError(400, f"the request body must be a JSON object, got {_type_name(body)}")
  _check_fields(body, CHAT_FIELDS if chat else COMPLETION_FIELDS)
  if "model" not in body: raise APIError(400, "'model' is required (GET /v1/models lists it)", param="model")
  if (model := _get(body, "model", (str,), "a string")) != llm.name:
    raise APIError(404, f"The model '{model}' does not exist: this server serves '{llm.name}'", param="model", code="model_not_found")
  if _get(body, "n", (int,), "an integer", 1) != 1: raise APIError(400, "'n' must be 1: this server generates one choice per request", param="n")
  stream = _get(body, "stream", (bool,), "a boolean", False)
  opts = _get(body, "stream_options", (dict,), "an object", None)
  if opts is not None and not stream: raise APIError(400, "'stream_options' is only allowed when 'stream' is true", param="stream_options")
  include_usage = _get(opts or {}, "include_usage", (bool,), "a boolean", False)
  mt_name = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
  params = _sampling(body, mt_name)
  if chat:
    messages = _chat_messages(body)
    try: text = llm.apply_chat_template(messages, add_generation_prompt=True)
    except Exception as e: raise APIError(400, f"the chat template rejected the messages: {e}", param="messages") from e  # jinja2's raise_exception
    prompt_ids = llm.tokenizer.encode(text)  # render_chat already leaves the BOS to the tokenizer
  else: prompt_ids = _completion_prompt(llm, body)
  prompt_param = "messages" if chat else "prompt"
  if not prompt_ids: raise APIError(400, "the prompt is empty (it has no tokens)", param=prompt_param)
  if (room := llm.context_length - len(prompt_ids)) <= 0:
    raise APIError(400, f"This model's maximum context length is {llm.context_length} tokens, but the prompt has {len(prompt_ids)}: shorten it",
                   param=prompt_param, code="context_length_exceeded")
  if body.get(mt_name) is None: max_tokens = min(max_tokens_cap if chat else COMPLETIONS_DEFAULT_MAX_TOKENS, room)
  else: max_tokens = min(params.max_tokens, max_tokens_cap)
  if max_tokens > room:
    raise APIError(400, f"This model's maximum context length is {llm.context_length} tokens, but {len(prompt_ids) + max_tokens} were requested "
                   f"({len(prompt_ids)} in the prompt, {max_tokens} for the completion): shorten the prompt or lower '{mt_name}'",
                   param=mt_name, code="context_length_exceeded")
  return Job(chat, prompt_ids, dataclasses.replace(params, max_tokens=max_tokens), stream, include_usage)

def _param_of(e: SamplingParamError) -> str | None:
  """The field a SamplingParams message names first ("top_p must be in (0, 1], got 2")."""
  word = str(e).split(" ", 1)[0]
  return word if word in CHAT_FIELDS else None

# ***** response shapes *****

def _usage(prompt: int, completion: int) -> dict[str, int]:
  return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

class _Reply:
  """The ids, timestamps and chunk shapes of one response (OpenAI's field order)."""
  def __init__(self, job: Job, model: str):
    self.job, self.model = job, model
    self.id = ("chatcmpl-" if job.chat else "cmpl-") + uuid.uuid4().hex[:24]
    self.created = int(time.time())

  def _head(self, obj: str) -> dict[str, Any]: return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "system_fingerprint": None}

  def chunk(self, text: str | None, finish: str | None = None, first: bool = False) -> dict[str, Any]:
    if self.job.chat:
      delta = {"role": "assistant", "content": ""} if first else {} if text is None else {"content": text}
      ret = self._head("chat.completion.chunk") | {"choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    else: ret = self._head("text_completion") | {"choices": [{"text": text or "", "index": 0, "logprobs": None, "finish_reason": finish}]}
    return ret | ({"usage": None} if self.job.include_usage else {})

  def usage_chunk(self, completion_tokens: int) -> dict[str, Any]:
    obj = "chat.completion.chunk" if self.job.chat else "text_completion"
    return self._head(obj) | {"choices": [], "usage": _usage(len(self.job.prompt_ids), completion_tokens)}

  def whole(self, text: str, finish: str, completion_tokens: int) -> dict[str, Any]:
    if self.job.chat:
      choice = {"index": 0, "message": {"role": "assistant", "content": text, "refusal": None}, "logprobs": None, "finish_reason": finish}
      return self._head("chat.completion") | {"choices": [choice], "usage": _usage(len(self.job.prompt_ids), completion_tokens)}
    choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": finish}
    return self._head("text_completion") | {"choices": [choice], "usage": _usage(len(self.job.prompt_ids), completion_tokens)}

class _Tally:
  """Counts the generated tokens and says why generation ended: EOS or a stop string before max_tokens is "stop", else "length"."""
  def __init__(self, llm: LLM, job: Job): self.eos, self.max_tokens, self.count, self.last = llm.tokenizer.eos_ids, job.params.max_tokens, 0, -1
  def add(self, tok: int) -> None: self.count, self.last = self.count + 1, tok
  @property
  def finish_reason(self) -> str: return "stop" if self.last in self.eos or self.count < self.max_tokens else "length"

# ***** the server *****

def _no_constant(name: str) -> Any: raise ValueError(f"{name} is not a JSON number")

def _json_bytes(obj: Any) -> bytes: return json.dumps(obj, ensure_ascii=False).encode()

class LLMServer(ThreadingHTTPServer):
  """Serves one LLM; `generate_lock` serializes its (non-reentrant) generations."""
  daemon_threads = True

  def __init__(self, llm: LLM, host: str, port: int, api_key: str | None, max_body_bytes: int, max_tokens_cap: int):
    if max_body_bytes < 1 or max_tokens_cap < 1: raise ServeError(f"max_body_bytes and max_tokens_cap must be >= 1, got {max_body_bytes} and {max_tokens_cap}")
    if api_key is not None and not api_key: raise ServeError("api_key must be a non-empty string (or None for no key)")
    self.llm, self.api_key, self.max_body_bytes, self.max_tokens_cap = llm, api_key, max_body_bytes, max_tokens_cap
    self.generate_lock = threading.Lock()
    self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try: super().__init__((host, port), _Handler)
    except OSError as e: raise ServeError(f"cannot listen on {host}:{port}: {e.strerror or e} (pick another port, or a --host this machine has)") from e

class _Handler(BaseHTTPRequestHandler):
  server: LLMServer
  protocol_version = "HTTP/1.1"
  timeout = 120                   # seconds a socket read or write may block (a stalled client frees its thread)
  error_content_type = "application/json"

  # -- plumbing --
  def _send(self, status: int, body: bytes, ctype: str = "application/json", headers: dict[str, str] | None = None) -> None:
    self.send_response(status)
    self.send_header("Content-Type", ctype)
    self.send_header("Content-Length", str(len(body)))
    for k, v in (headers or {}).items(): self.send_header(k, v)
    if self.close_connection: self.send_header("Connection", "close")
    self.end_headers()
    if self.command != "HEAD": self.wfile.write(body)

  def _send_error(self, e: APIError) -> None: self._send(e.status, _json_bytes(e.body()), headers=e.headers)

  def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
    """http.server's own errors (bad request line, oversized headers, unknown method) in OpenAI's shape too."""
    self.log_error("code %d, message %s", code, message)
    self.close_connection = True
    if self.command is None: self.command = "GET"  # the request line did not parse
    self._send_error(APIError(code, message or HTTPStatus(code).phrase, type_="invalid_request_error" if code < 500 else "server_error"))

  def _client_gone(self) -> bool:
    """True when the peer has closed its socket (readable with nothing to read); pipelined bytes leave it alive."""
    try:
      if not select.select([self.connection], [], [], 0)[0]: return False
      return self.connection.recv(1, socket.MSG_PEEK) == b""
    except OSError: return True

  def _body_length(self, required: bool) -> int:
    """The Content-Length to read; a body this server will not read (chunked, over the cap) ends the connection."""
    if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
      self.body_unread = True
      raise APIError(411, "chunked request bodies are not supported: send a Content-Length")
    if (length := self.headers.get("Content-Length")) is None:
      if required: self.body_unread = True; raise APIError(411, "a Content-Length header is required")  # where a body would end is unknown
      return 0
    if not length.isdigit(): self.body_unread = True; raise APIError(400, f"Content-Length must be a non-negative integer, got {length!r}")
    if int(length) > self.server.max_body_bytes:
      self.body_unread = True
      raise APIError(413, f"the request body is {length} bytes, over this server's cap of {self.server.max_body_bytes}")
    return int(length)

  def _read_body(self, required: bool) -> bytes:
    n, self.body_pending = self._body_length(required), False
    raw = self.rfile.read(n)
    if len(raw) < n: self.body_unread = True; raise APIError(400, f"the body ended after {len(raw)} of {n} bytes")
    return raw

  def _read_json(self) -> Any:
    raw = self._read_body(required=True)
    try: return json.loads(raw, parse_constant=_no_constant)
    except ValueError as e: raise APIError(400, f"the body is not valid JSON: {e}") from e  # also bad UTF-8, NaN, Infinity

  def _authorized(self) -> bool:
    if self.server.api_key is None: return True
    got = self.headers.get("Authorization", "")
    return got.startswith("Bearer ") and hmac.compare_digest(got[7:].strip().encode(), self.server.api_key.encode())

  # -- routing --
  def _drain_body(self) -> None:
    """Read a body the route did not (the request was refused first): closing a socket with unread bytes resets the
    connection, and the client may lose the answer. One this server will not read closes the connection instead."""
    if self.body_pending and not self.body_unread:
      try: self._read_body(required=False)
      except APIError: pass
    if self.body_unread: self.close_connection = True

  def _linger(self) -> None:
    """After answering a request whose body stays unread: half-close, then drop what the client still sends (briefly)."""
    try:
      self.connection.shutdown(socket.SHUT_WR)
      self.connection.settimeout(1)
      for _ in range(64):
        if not self.connection.recv(1 << 16): break
    except OSError: pass

  def _dispatch(self) -> None:
    path = urlsplit(self.path).path.rstrip("/") or "/"
    self.body_pending, self.body_unread = True, False
    try:
      route = ROUTES.get(path) or (ROUTES["/v1/models/<id>"] if path.startswith("/v1/models/") else None)
      if route is None: raise APIError(404, f"Unknown route {self.command} {path}: the routes are {', '.join(ROUTES)}", code="unknown_url")
      if path.startswith("/v1/") and not self._authorized():
        raise APIError(401, "Incorrect or missing API key: send the header 'Authorization: Bearer <key>'", code="invalid_api_key")
      if (fn := route.get(self.command)) is None:
        raise APIError(405, f"Method {self.command} is not allowed on {path}: use {' or '.join(route)}", code="method_not_allowed",
                       headers={"Allow": ", ".join(route)})
      if self.command != "POST": self._read_body(required=False)  # a body on a GET is read and ignored
      fn(self, path)
    except APIError as e:
      self._drain_body()
      self._send_error(e)
    except CLIENT_GONE: self.close_connection = True
    except Exception as e:  # a bug: log it here, answer a 500 without the traceback
      traceback.print_exc(file=sys.stderr)
      self.close_connection = True
      try: self._send_error(APIError(500, f"internal server error ({type(e).__name__}); the server log has the details", type_="server_error"))
      except (OSError, ValueError): pass
    finally:
      if self.body_unread: self._linger()

  do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _dispatch

  def log_message(self, format: str, *args: Any) -> None: sys.stderr.write(f"tg-llm server: {self.address_string()} {format % args}\n")

  # -- endpoints --
  def get_index(self, path: str) -> None:
    self._send(200, resources.files("tg_gguf.llm").joinpath("web/index.html").read_bytes(), "text/html; charset=utf-8", {"Cache-Control": "no-cache"})

  def get_health(self, path: str) -> None: self._send(200, _json_bytes({"status": "ok", "model": self.server.llm.name}))

  def _model_obj(self) -> dict[str, Any]: return {"id": self.server.llm.name, "object": "model", "created": 0, "owned_by": "tg"}

  def get_models(self, path: str) -> None: self._send(200, _json_bytes({"object": "list", "data": [self._model_obj()]}))

  def get_model(self, path: str) -> None:
    if (name := path[len("/v1/models/"):]) != self.server.llm.name:
      raise APIError(404, f"The model '{name}' does not exist: this server serves '{self.server.llm.name}'", param="model", code="model_not_found")
    self._send(200, _json_bytes(self._model_obj()))

  def post_chat(self, path: str) -> None: self._generate(parse_job(self.server.llm, self._read_json(), True, self.server.max_tokens_cap))
  def post_completions(self, path: str) -> None: self._generate(parse_job(self.server.llm, self._read_json(), False, self.server.max_tokens_cap))

  # -- generation --
  def _start(self, job: Job) -> Iterator[tuple[int, str]]:
    """The token stream with its first step already taken, so an error the model raises up front is still a 4xx."""
    try:  # the model may check when called or when first stepped
      gen = self.server.llm.stream(job.prompt_ids, job.params)
      first = next(gen, None)
    except ContextOverflowError as e: raise APIError(400, str(e), param="messages" if job.chat else "prompt", code="context_length_exceeded") from e
    except SamplingParamError as e: raise APIError(400, str(e), param=_param_of(e)) from e
    def tokens() -> Iterator[tuple[int, str]]:
      if first is not None: yield first
      yield from gen
    return tokens()

  def _generate(self, job: Job) -> None:
    with self.server.generate_lock:  # queued here while another request generates
      if self._client_gone(): self.close_connection = True; return
      tokens = self._start(job)
      try: (self._stream if job.stream else self._whole)(job, tokens)
      finally: tokens.close()  # a generation cut short (client gone, error) ends here, before the next one starts

  def _whole(self, job: Job, tokens: Iterator[tuple[int, str]]) -> None:
    tally, parts = _Tally(self.server.llm, job), []
    for tok, text in tokens:
      tally.add(tok)
      parts.append(text)
      if self._client_gone(): self.close_connection = True; return
    self._send(200, _json_bytes(_Reply(job, self.server.llm.name).whole("".join(parts), tally.finish_reason, tally.count)))

  def _event(self, obj: Any) -> None:
    self.wfile.write(b"data: " + (obj if isinstance(obj, bytes) else _json_bytes(obj)) + b"\n\n")

  def _stream(self, job: Job, tokens: Iterator[tuple[int, str]]) -> None:
    self.close_connection = True  # the event stream ends with the connection
    self.send_response(200)
    for k, v in (("Content-Type", "text/event-stream; charset=utf-8"), ("Cache-Control", "no-cache"), ("Connection", "close"), ("X-Accel-Buffering", "no")):
      self.send_header(k, v)
    self.end_headers()
    reply, tally = _Reply(job, self.server.llm.name), _Tally(self.server.llm, job)
    try:
      if job.chat: self._event(reply.chunk(None, first=True))
      for tok, text in tokens:
        tally.add(tok)
        if text: self._event(reply.chunk(text))
      self._event(reply.chunk(None, tally.finish_reason))
      if job.include_usage: self._event(reply.usage_chunk(tally.count))
      self._event(b"[DONE]")
    except CLIENT_GONE: raise
    except Exception as e:  # headers are out: report in-band, as OpenAI does, then close
      traceback.print_exc(file=sys.stderr)
      err = APIError(400, str(e), code="context_length_exceeded") if isinstance(e, ContextOverflowError) else \
        APIError(500, f"generation failed ({type(e).__name__}); the server log has the details", type_="server_error")
      self._event(err.body())

ROUTES: dict[str, dict[str, Callable[[_Handler, str], None]]] = {
  "/": {"GET": _Handler.get_index},
  "/health": {"GET": _Handler.get_health},
  "/v1/models": {"GET": _Handler.get_models},
  "/v1/models/<id>": {"GET": _Handler.get_model},
  "/v1/chat/completions": {"POST": _Handler.post_chat},
  "/v1/completions": {"POST": _Handler.post_completions},
}

def make_server(llm: LLM, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                max_tokens_cap: int = DEFAULT_MAX_TOKENS_CAP) -> LLMServer:
  """A bound server (port 0 = a free one; `.server_address` says which). Run it with `.serve_forever()`, stop it with `.shutdown()`."""
  return LLMServer(llm, host, port, api_key, max_body_bytes, max_tokens_cap)

def serve(llm: LLM, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
          max_tokens_cap: int = DEFAULT_MAX_TOKENS_CAP) -> None:
  """Serve until Ctrl-C (what `tg-llm --serve [PORT]` runs)."""
  server = make_server(llm, host, port, api_key, max_body_bytes, max_tokens_cap)
  h, p = server.server_address[:2]
  if api_key is None and h not in ("127.0.0.1", "::1", "localhost"):
    print(f"tg-llm: warning: listening on {h} without --api-key: anyone who can reach this port can use the model", file=sys.stderr)
  print(f"tg-llm: serving {llm.name} at http://{h}:{p}/ (OpenAI API under /v1), Ctrl-C stops", file=sys.stderr, flush=True)
  try: server.serve_forever()
  except KeyboardInterrupt: pass
  finally: server.server_close()

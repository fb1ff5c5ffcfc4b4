"""Headless Chromium driven over the DevTools protocol, with a minimal websocket client (RFC 6455 text frames), for the
web-page tests. A plain module, not a conftest."""
from __future__ import annotations
import base64
import http.client
import json
import os
import pathlib
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from typing import Any
from urllib.parse import urlsplit

class WebSocket:
  """Client side of one websocket: masked text frames out, unmasked frames in (fragments joined, pings answered)."""
  def __init__(self, url: str, timeout: float = 30.0):
    u = urlsplit(url)
    self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
    key = base64.b64encode(os.urandom(16)).decode()
    self.sock.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
      if not (got := self.sock.recv(4096)): raise ConnectionError("websocket handshake: connection closed")
      head += got
    head, self.buf = head.split(b"\r\n\r\n", 1)
    if b" 101 " not in head.split(b"\r\n", 1)[0]: raise ConnectionError(f"websocket handshake refused: {head[:200]!r}")

  def _exact(self, n: int) -> bytes:
    while len(self.buf) < n:
      if not (got := self.sock.recv(65536)): raise ConnectionError("websocket closed")
      self.buf += got
    ret, self.buf = self.buf[:n], self.buf[n:]
    return ret

  def _frame(self, opcode: int, payload: bytes) -> None:
    n, mask = len(payload), os.urandom(4)
    head = bytes([0x80 | opcode]) + (bytes([0x80 | n]) if n < 126 else struct.pack(">BH", 0x80 | 126, n) if n < 65536 else struct.pack(">BQ", 0x80 | 127, n))
    self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

  def send(self, text: str) -> None: self._frame(0x1, text.encode())

  def recv(self) -> str:
    parts: list[bytes] = []
    while True:
      b0, b1 = self._exact(2)
      n = b1 & 0x7F
      if n == 126: n = struct.unpack(">H", self._exact(2))[0]
      elif n == 127: n = struct.unpack(">Q", self._exact(8))[0]
      mask = self._exact(4) if b1 & 0x80 else b""
      payload = self._exact(n)
      if mask: payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
      opcode = b0 & 0x0F
      if opcode == 0x9: self._frame(0xA, payload); continue
      if opcode == 0x8: raise ConnectionError("websocket closed by the browser")
      if opcode in (0x0, 0x1, 0x2): parts.append(payload)
      if b0 & 0x80 and parts: return b"".join(parts).decode()

  def close(self) -> None: self.sock.close()

def chromium_binary() -> str | None:
  return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)

class Browser:
  """One headless Chromium with one page; `evaluate` runs JavaScript in it and returns the value."""
  def __init__(self, binary: str, url: str, timeout: float = 60.0):
    self.profile = tempfile.mkdtemp(prefix="tg-chromium-")
    self.log = open(pathlib.Path(self.profile) / "chromium.log", "wb")
    self.proc = subprocess.Popen([binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                                  "--disable-extensions", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
                                  f"--user-data-dir={self.profile}", url], stdout=self.log, stderr=subprocess.STDOUT)
    self.ws: WebSocket | None = None
    try: self.ws = WebSocket(self._page_ws(url, timeout), timeout)
    except BaseException: self.close(); raise
    self.next_id = 0

  def _page_ws(self, url: str, timeout: float) -> str:
    """The page's debugger URL, once Chromium has written its DevToolsActivePort file and lists the page."""
    port_file, deadline = pathlib.Path(self.profile) / "DevToolsActivePort", time.monotonic() + timeout
    while time.monotonic() < deadline:
      if self.proc.poll() is not None: raise RuntimeError(f"chromium exited with {self.proc.returncode}: {self.output()}")
      if port_file.exists() and (lines := port_file.read_text().split()):
        conn = http.client.HTTPConnection("127.0.0.1", int(lines[0]), timeout=10)
        try:
          conn.request("GET", "/json/list")
          pages = [t for t in json.loads(conn.getresponse().read()) if t["type"] == "page" and t["url"].startswith(url)]
        except (OSError, ValueError): pages = []
        finally: conn.close()
        if pages: return pages[0]["webSocketDebuggerUrl"]
      time.sleep(0.2)
    raise TimeoutError(f"chromium did not open {url} within {timeout}s: {self.output()}")

  def output(self) -> str:
    self.log.flush()
    return (pathlib.Path(self.profile) / "chromium.log").read_bytes()[-2000:].decode(errors="replace")

  def call(self, method: str, **params: Any) -> dict[str, Any]:
    assert self.ws is not None
    self.next_id += 1
    self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
    while True:
      msg = json.loads(self.ws.recv())
      if msg.get("id") == self.next_id:
        if "error" in msg: raise RuntimeError(f"{method}: {msg['error']}")
        return msg["result"]

  def evaluate(self, js: str) -> Any:
    res = self.call("Runtime.evaluate", expression=js, returnByValue=True, awaitPromise=True)
    if "exceptionDetails" in res: raise RuntimeError(f"page script failed: {res['exceptionDetails']}")
    return res["result"].get("value")

  def wait_for(self, js: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
      if v := self.evaluate(f"(() => {{ try {{ return ({js}); }} catch (e) {{ return false; }} }})()"): return v  # the page may still be loading
      time.sleep(0.1)
    raise TimeoutError(f"the page never made `{js}` true in {timeout}s")

  def close(self) -> None:
    if self.ws is not None: self.ws.close()
    self.proc.terminate()
    try: self.proc.wait(10)
    except subprocess.TimeoutExpired: self.proc.kill(); self.proc.wait()
    self.log.close()
    shutil.rmtree(self.profile, ignore_errors=True)

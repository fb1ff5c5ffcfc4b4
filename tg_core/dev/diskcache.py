"""The on-disk cache: one sqlite database per cache directory (compiled binaries, lowered programs, BEAM results, other key-value tables),
reopened after a fork, silently off when unusable."""
from __future__ import annotations
import atexit
import contextlib
import os
import pathlib
import pickle
import sqlite3
import sys
import threading
from typing import Any, Callable

from tg_core.helpers import CACHELEVEL, DEBUG

def cache_dir() -> pathlib.Path:
  """Where on-disk caches live: $TG_CACHE_DIR, else $XDG_CACHE_HOME/tg, else ~/.cache/tg."""
  if d := os.environ.get("TG_CACHE_DIR"): return pathlib.Path(d).expanduser()
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return pathlib.Path(base) / "tg"

_db_lock = threading.Lock()
_db_conns: dict[tuple[int, str], sqlite3.Connection] = {}
_db_warned = False
_COMPILE_TABLE = "compile_v1"
_LOWERED_TABLE = "lowered_v1"
# the lowered-program table keeps the newest this many rows: every edit of the lowering code (a developer's) keys new ones
LOWERED_ROWS = 20_000

def _db() -> sqlite3.Connection | None:
  """The cache database of this process (reopened after a fork or when the cache directory changes), None when unusable."""
  global _db_warned
  path = cache_dir() / "cache.db"
  key = (os.getpid(), str(path))
  if (conn := _db_conns.get(key)) is not None: return conn
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=30, check_same_thread=False)
    # a cache: commits without fsyncs. The journal still protects it from a crashed process; only an OS crash can lose or
    # corrupt entries (a corrupt database reads as unusable: no cache). The fsyncs of a fresh cache's first commits were
    # 80-130 ms of a cold first kernel on a shared VM's disk (~1.5 ms without; WAL with synchronous=NORMAL: ~50 ms)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute(f"CREATE TABLE IF NOT EXISTS {_COMPILE_TABLE} (cachekey TEXT, src_hash TEXT, lib BLOB, PRIMARY KEY (cachekey, src_hash))")
    conn.execute(f"CREATE TABLE IF NOT EXISTS {_LOWERED_TABLE} (key TEXT PRIMARY KEY, val BLOB)")
    conn.execute("CREATE TABLE IF NOT EXISTS kv_v1 (tbl TEXT, key TEXT, val BLOB, PRIMARY KEY (tbl, key))")
    conn.commit()
  except (sqlite3.Error, OSError) as e:
    if not _db_warned and DEBUG >= 1: print(f"tg: disk cache at {path} unusable, continuing without it: {e}", file=sys.stderr)
    _db_warned = True
    return None
  _db_conns[key] = conn
  return conn

@atexit.register
def _db_close_all() -> None:
  with _db_lock:
    for conn in _db_conns.values():
      with contextlib.suppress(Exception): conn.close()
    _db_conns.clear()

def _db_run(fxn: Callable[[sqlite3.Connection], Any]) -> Any:
  with _db_lock:
    if (conn := _db()) is None: return None
    try: return fxn(conn)
    except sqlite3.Error as e:
      if DEBUG >= 1: print(f"tg: disk cache error, ignored: {e}", file=sys.stderr)
      return None

def diskcache_get(table: str, key: Any) -> Any:
  """A value stored with `diskcache_put` (pickled; keys compare by repr), or None. Off when CACHELEVEL=0."""
  if CACHELEVEL < 1: return None
  row = _db_run(lambda c: c.execute("SELECT val FROM kv_v1 WHERE tbl=? AND key=?", (table, repr(key))).fetchone())
  return pickle.loads(row[0]) if row is not None else None
def diskcache_put(table: str, key: Any, val: Any) -> Any:
  if CACHELEVEL < 1: return val
  def put(c: sqlite3.Connection) -> None:
    c.execute("INSERT OR REPLACE INTO kv_v1 (tbl, key, val) VALUES (?, ?, ?)", (table, repr(key), pickle.dumps(val))); c.commit()
  _db_run(put)
  return val

def compiled_get(cachekey: str, src_hash: str) -> bytes | None:
  """A binary stored by `compiled_put` for this compiler `cachekey` and source hash, or None (see `Compiler.compile_cached`)."""
  row = _db_run(lambda c: c.execute(f"SELECT lib FROM {_COMPILE_TABLE} WHERE cachekey=? AND src_hash=?", (cachekey, src_hash)).fetchone())
  return bytes(row[0]) if row is not None else None
def compiled_put(cachekey: str, src_hash: str, lib: bytes) -> None:
  def put(c: sqlite3.Connection) -> None:
    c.execute(f"INSERT OR REPLACE INTO {_COMPILE_TABLE} (cachekey, src_hash, lib) VALUES (?, ?, ?)", (cachekey, src_hash, lib)); c.commit()
  _db_run(put)

def lowered_get(key: str) -> bytes | None:
  """A lowered program's record stored by `lowered_put` under `key` (see `tg_core.codegen.lowered_program`), or None."""
  row = _db_run(lambda c: c.execute(f"SELECT val FROM {_LOWERED_TABLE} WHERE key=?", (key,)).fetchone())
  return bytes(row[0]) if row is not None and isinstance(row[0], bytes) else None
def lowered_any() -> bool:
  """Whether the lowered-program table holds any row (False too where the cache is unusable)."""
  return _db_run(lambda c: c.execute(f"SELECT 1 FROM {_LOWERED_TABLE} LIMIT 1").fetchone()) is not None
def lowered_put(rows: list[tuple[str, bytes]]) -> None:
  """Store (key, record) rows in one transaction."""
  def put(c: sqlite3.Connection) -> None:
    c.executemany(f"INSERT OR REPLACE INTO {_LOWERED_TABLE} (key, val) VALUES (?, ?)", rows)
    # a new row takes the largest rowid + 1: the rows older than the newest LOWERED_ROWS go (a rowid range: cheap)
    c.execute(f"DELETE FROM {_LOWERED_TABLE} WHERE rowid <= (SELECT MAX(rowid) FROM {_LOWERED_TABLE}) - ?", (LOWERED_ROWS,)); c.commit()
  _db_run(put)

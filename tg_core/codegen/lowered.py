"""The on-disk cache of lowered programs: a kernel an earlier process lowered skips `get_program`'s Python lowering (the
passes, linearize, render), much of a fresh process's first-run time; the compile step has its own cache, keyed by source.

A row is keyed by everything that decides the program, so it can't be stale: the kernel AST (`UOp.key`), the renderer (class,
repr, `caps.cache_key()`, its plain instance fields), the codegen knobs, the target the compiler builds for, the explicit opts
(BEAM's choice), and a fingerprint of the code that lowers (the source files of tg_core and of the renderer classes' packages). It
holds the ProgramSpec without `uops` (as a CompiledRunner keeps it): whatever needs the linear program re-derives it with
`get_program`. Programs are stored in batches (at exit, every FLUSH_AT programs, `flush()`). `LOWER_CACHE=0` (or CACHELEVEL=0)
turns it off; a row that doesn't read back as a program is a miss."""
from __future__ import annotations
import atexit
import functools
import hashlib
import os
import pickle
import sys
import zlib
from typing import TYPE_CHECKING

from tg_core.codegen import ProgramSpec, get_program, program_key
from tg_core.dev.diskcache import cache_dir, lowered_any, lowered_get, lowered_put
from tg_core.helpers import CACHELEVEL, CHECK_OOB, DEBUG, LOWER_CACHE, TRACK_MATCH_STATS
from tg_core.uop import Ops
from tg_core.uop.ops import UOp

if TYPE_CHECKING:
  from tg_core.codegen.opt import Opt
  from tg_core.device import Renderer

_TG_CORE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_RECORD = "tg-lowered-1"  # the row layout: a row of another layout reads as a miss

def _source_stamps(root: str) -> list[tuple[str, int, int]]:
  """(relative path, mtime in ns, size) of each .py file under `root` (a package directory; or the one module file)."""
  if os.path.isfile(root): return [("", (st := os.stat(root)).st_mtime_ns, st.st_size)]
  out, stack, n = [], [root], len(root) + 1
  while stack:
    with os.scandir(stack.pop()) as it:
      for e in it:
        if e.is_dir(follow_symlinks=False):
          if e.name != "__pycache__": stack.append(e.path)
        elif e.name.endswith(".py"): out.append((e.path[n:], (st := e.stat()).st_mtime_ns, st.st_size))
  return sorted(out)

def _code_root(module: str) -> str | None:
  """The directory of `module`'s top-level package (a plugin's whole package: its renderer may import helpers from it),
  or the module's own file; None where there is no source file (the key then can't cover the code: no caching)."""
  top = sys.modules.get(module.split(".")[0])
  if (f := getattr(top, "__file__", None)) is None: return None
  return os.path.dirname(f) if os.path.basename(f) == "__init__.py" else f if f.endswith(".py") else None

@functools.cache
def code_fingerprint(modules: tuple[str, ...]) -> str | None:
  """A digest of the code that lowers a kernel for a renderer defined in `modules`: each .py file of tg_core and of each
  module's top-level package, by path, mtime (ns) and size, and the Python version. Stamps, not contents: as strong as the
  check by which Python itself trusts a .pyc for its source, and a fraction of the cost of reading the sources (this runs
  in the first lowering of every process, an empty cache included)."""
  roots = {_TG_CORE, *(_code_root(m) for m in modules if not m.startswith("tg_core."))}
  if None in roots: return None
  return hashlib.sha256(repr((sys.version_info[:3], sorted(_source_stamps(r) for r in roots if r is not None))).encode()).hexdigest()

def _key_parts(ren: Renderer, opts: list[Opt] | None, target: str | None) -> tuple:
  """What, besides the AST and the code, keys a program, as of now (a store later must key it under the knobs it was made with)."""
  # a renderer's plain instance fields (a CPU renderer's host ISA flags) decide its code too: keyed, never read otherwise
  state = sorted((k, v) for k, v in vars(ren).items() if isinstance(v, (bool, int, float, str)))
  # program_key's parts, in a form the same in every process (the record through its cache_key)
  mod, qual, caps, *knobs = program_key(ren)
  return (mod, qual, repr(ren), caps.cache_key(), state, [repr(k) for k in knobs],
          target, None if opts is None else [repr(o) for o in opts], tuple(dict.fromkeys(c.__module__ for c in type(ren).__mro__ if c is not object)))

def _key(ast: UOp, parts: tuple) -> str | None:
  if (fp := code_fingerprint(parts[-1])) is None: return None
  return hashlib.sha256(repr((ast.key.hex(), parts, fp)).encode()).hexdigest()

def lowered_key(ast: UOp, ren: Renderer, opts: list[Opt] | None = None, target: str | None = None) -> str | None:
  """The cache key of the program `get_program(ast, ren, opts)` makes, the same in every process; None: don't cache.
  `target`: what the program is compiled for (the compiler's cachekey: host CPU features, arch)."""
  return _key(ast, _key_parts(ren, opts, target))

def _pack(p: ProgramSpec) -> bytes:
  # compressed: sources (LLVM IR) shrink several-fold, for tens of microseconds
  return zlib.compress(pickle.dumps((_RECORD, p.name, p.src, p.global_size, p.local_size, p.vars, p.globals, p.outs, p.ins, p.estimated_ops,
                                     p.estimated_mem)), 1)

def _ints(x: object) -> bool: return isinstance(x, list) and all(isinstance(i, int) for i in x)

def _unpack(blob: bytes, ast: UOp, ren: Renderer) -> ProgramSpec | None:
  """The ProgramSpec a row holds, None where it doesn't read back as one (corrupt, another layout, wrong types)."""
  try: rec = pickle.loads(zlib.decompress(blob))
  except Exception: return None  # a damaged row can fail to unpickle with almost any exception
  if not (isinstance(rec, tuple) and len(rec) == 11 and rec[0] == _RECORD): return None
  _, name, src, gs, ls, vars_, globs, outs, ins, ops, mem = rec
  ok = (name == (ast.arg.name if ast.arg is not None else "kernel") and isinstance(src, str) and isinstance(gs, list) and
        all(isinstance(g, (int, UOp)) for g in gs) and (ls is None or _ints(ls)) and isinstance(vars_, list) and
        all(isinstance(v, UOp) and v.op is Ops.PARAM for v in vars_) and _ints(globs) and _ints(outs) and _ints(ins) and
        isinstance(ops, int) and isinstance(mem, int))
  return ProgramSpec(name, src, ren.device, ast, None, gs, ls, vars_, globs, outs, ins, ops, mem) if ok else None

# programs lowered since the last flush, stored together at exit or every FLUSH_AT programs: keying them needs the code's
# fingerprint, which a process on an empty cache (no lookups: nothing to hit) then pays after its first results, not before
_pending: list[tuple[UOp, tuple, ProgramSpec]] = []
FLUSH_AT = 32
_has_rows: dict[str, bool] = {}  # cache dir -> whether its table had rows when this process first looked (or since its own flush)

@atexit.register
def flush() -> None:
  """Store the programs lowered since the last flush."""
  global _pending
  items, _pending = _pending, []
  rows: list[tuple[str, bytes]] = []
  for ast, parts, p in items:
    try:
      if (key := _key(ast, parts)) is not None: rows.append((key, _pack(p)))
    except Exception: pass  # something in the launch dims that doesn't pickle: not cached
  if rows:
    lowered_put(rows)
    _has_rows[str(cache_dir())] = True

def lowered_program(ast: UOp, ren: Renderer, opts: list[Opt] | None = None, target: str | None = None) -> ProgramSpec:
  """`get_program(ast, ren, opts)`, from the on-disk cache where an earlier process lowered the same kernel (then `uops` is
  None). Lowered afresh, without caching, where the lowering itself is asked for: DEBUG>=5 prints the linear program,
  CHECK_OOB checks it, TRACK_MATCH_STATS counts its rewrites."""
  if not LOWER_CACHE or CACHELEVEL < 1 or DEBUG >= 5 or CHECK_OOB or TRACK_MATCH_STATS: return get_program(ast, ren, opts)
  parts = _key_parts(ren, opts, target)
  if (has := _has_rows.get(d := str(cache_dir()))) is None: has = _has_rows[d] = lowered_any()
  if has and (key := _key(ast, parts)) is not None and (blob := lowered_get(key)) is not None and (p := _unpack(blob, ast, ren)) is not None:
    if DEBUG >= 4: print(p.src)
    return p
  p = get_program(ast, ren, opts)
  _pending.append((ast, parts, p))
  if len(_pending) >= FLUSH_AT: flush()
  return p

"""The on-disk lowered-program cache (tg_core/codegen/lowered.py): a second process gets an earlier one's program without
lowering it again, and only where nothing that decides the program changed. Every test uses its own TG_CACHE_DIR."""
from __future__ import annotations
import dataclasses
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pytest

import tg_core.codegen.lowered as lowered
from tg_core.codegen import get_program
from tg_core.codegen.lowered import code_fingerprint, flush, lowered_key, lowered_program
from tg_core.dev import diskcache
from tg_core.device import Device
from tg_core.engine.realize import CompiledRunner, _runner_cache, linear_program
from tg_core.helpers import Context
from tg_core.renderer.python import PythonRenderer
from tg_core.schedule import create_schedule
from tg_core.tensor import Tensor
from tg_core.uop.ops import UOp

HAS_CPU = importlib.util.find_spec("tg_cpu_x86") is not None
DEVICES = ["PYTHON", pytest.param("CPU", marks=pytest.mark.skipif(not HAS_CPU, reason="needs the tg-cpu-x86 plugin"))]

@pytest.fixture
def cache(tmp_path, monkeypatch):
  flush()  # programs other tests lowered go to their cache, not this one
  monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path / "cache"))
  yield str(tmp_path / "cache")
  flush()

def _rows() -> int: return diskcache._db_run(lambda c: c.execute("SELECT COUNT(*) FROM lowered_v1").fetchone()[0])

def _ast(t: Tensor) -> UOp:
  items, _ = create_schedule(UOp.sink(t.uop))
  return items[-1].ast

@pytest.fixture
def counted(monkeypatch) -> list[UOp]:
  """The kernels lowered by get_program under the cache while the test runs."""
  seen: list[UOp] = []
  monkeypatch.setattr(lowered, "get_program", lambda ast, *a, **k: seen.append(ast) or get_program(ast, *a, **k))
  return seen

# *** across processes ***

# runs a matmul and a kernel over a Variable (a symbolic grid on PYTHON), prints what was lowered, the programs and the values
CHILD = textwrap.dedent("""
  import json, sys
  import numpy as np
  import tg_core.codegen.lowered as lowered
  from tg_core import Tensor, Variable
  from tg_core.engine.realize import _runner_cache
  dev = sys.argv[1]
  n = []
  real = lowered.get_program
  lowered.get_program = lambda *a, **k: n.append(1) or real(*a, **k)
  rng = np.random.default_rng(0)
  a, b, c = rng.standard_normal((9, 13), dtype=np.float32), rng.standard_normal((13, 5), dtype=np.float32), rng.standard_normal(12, dtype=np.float32)
  mm = (Tensor(a, device=dev) @ Tensor(b, device=dev)).numpy()
  k = int(sys.argv[2])
  x = (Tensor(c, device=dev)[:Variable("i", 1, 12).bind(k)] * 2 + 1).realize()  # a grid of i (on PYTHON) and
  sym = x.sum().numpy()  # a reduce over i: kernels that don't depend on i's value
  progs = sorted([r.p.name, r.p.src, [str(g) for g in r.p.global_size], [v.arg.name for v in r.p.vars], r.p.uops is None]
                 for r in _runner_cache.values())
  print(json.dumps({"lowered": len(n), "progs": progs, "mm_err": float(np.abs(mm - a @ b).max()), "sym": float(sym),
                    "sym_ref": float((c[:k] * 2 + 1).sum())}))
""")

def _child(dev: str, cache: str, k: int = 7, **env: str) -> dict:
  r = subprocess.run([sys.executable, "-c", CHILD, dev, str(k)], capture_output=True, text=True, timeout=300,
                     env={**os.environ, "TG_CACHE_DIR": cache, **env})
  assert r.returncode == 0, r.stderr
  return json.loads(r.stdout.strip().splitlines()[-1])

@pytest.mark.parametrize("dev", DEVICES)
def test_second_process_hits(dev: str, cache: str):
  first, second = _child(dev, cache), _child(dev, cache, k=5)  # the Variable's kernel is run for another value
  assert first["lowered"] >= 2 and second["lowered"] == 0
  # the same programs (names, sources, launch dims incl. a symbolic one on PYTHON, Variables), the second without its linear program
  assert [p[:4] for p in second["progs"]] == [p[:4] for p in first["progs"]] and all(p[4] for p in second["progs"])
  assert any(p[3] == ["i"] for p in second["progs"])
  for r in (first, second):
    assert r["mm_err"] < 1e-4
    np.testing.assert_allclose(r["sym"], r["sym_ref"], rtol=1e-6)
  assert _child(dev, cache, LOWER_CACHE="0")["lowered"] == first["lowered"]  # the knob turns it off
  assert _child(dev, cache, NOOPT="1")["lowered"] == first["lowered"]  # a codegen knob is in the key

# *** in process ***

@pytest.mark.parametrize("dev", DEVICES)
def test_hit_matches_fresh_lowering(dev: str, cache: str, counted: list[UOp]):
  ren = Device[dev].renderer
  ast = _ast(Tensor.empty(16, 8, device=dev).sum(axis=1) * 2)
  miss = lowered_program(ast, ren)
  assert _rows() == 0  # stored in batches (at exit, or flush)
  flush()
  hit = lowered_program(ast, ren)
  assert len(counted) == 1 and miss.uops is not None and hit.uops is None
  assert dataclasses.replace(miss, uops=None) == hit
  assert _rows() == 1

def test_key_covers_knobs_opts_renderer_and_target(cache: str):
  from tg_core.codegen.opt import Opt, OptOps
  ren, ast = PythonRenderer(), _ast(Tensor.empty(16, 16, device="PYTHON") + 1)
  base = lowered_key(ast, ren)
  assert base == lowered_key(ast, PythonRenderer())
  with Context(NOOPT=1): assert lowered_key(ast, ren) != base
  with Context(TRANSCENDENTAL=2): assert lowered_key(ast, ren) != base
  assert lowered_key(ast, ren, [Opt(OptOps.UPCAST, 0, 4)]) != lowered_key(ast, ren, [Opt(OptOps.UPCAST, 0, 2)]) != base
  assert lowered_key(ast, ren, target="cpu-a") != lowered_key(ast, ren, target="cpu-b")
  other = PythonRenderer()
  other.caps = dataclasses.replace(other.caps, vector_width=8)
  assert lowered_key(ast, other) != base
  flagged = PythonRenderer()
  flagged.avx2 = True  # type: ignore[attr-defined]  # a plain instance field (the CPU renderer's ISA flags)
  assert lowered_key(ast, flagged) != base
  assert lowered_key(_ast(Tensor.empty(16, 16, device="PYTHON") + 2), ren) != base

def test_ast_key_is_stable_across_processes():
  code = ("from tg_core import Tensor; from tg_core.uop.ops import UOp; from tg_core.schedule import create_schedule; "
          "from tg_core.codegen.lowered import lowered_key; from tg_core.renderer.python import PythonRenderer; "
          "t = (Tensor.empty(8, 8, device='PYTHON') @ Tensor.empty(8, 8, device='PYTHON')).exp2() * 0.5; "
          "ast = create_schedule(UOp.sink(t.uop))[0][-1].ast; print(ast.key.hex(), lowered_key(ast, PythonRenderer()))")
  outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": s}).stdout for s in ("1", "2")}
  assert len(outs) == 1

def test_fingerprint_change_misses(cache: str, tmp_path, monkeypatch, counted: list[UOp]):
  # a renderer in its own module: editing the module's source must miss, as editing tg_core's would
  mod = tmp_path / "lpc_renderer_mod.py"
  mod.write_text("from tg_core.renderer.python import PythonRenderer\nclass ModRenderer(PythonRenderer): pass\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  import lpc_renderer_mod
  ren = lpc_renderer_mod.ModRenderer()
  ren.device = "PYTHON"
  ast = _ast(Tensor.empty(4, 4, device="PYTHON") * 3)
  lowered_program(ast, ren); flush(); lowered_program(ast, ren)
  assert len(counted) == 1
  mod.write_text(mod.read_text() + "# edited\n")
  code_fingerprint.cache_clear()  # as a new process would
  lowered_program(ast, ren)
  assert len(counted) == 2

@pytest.mark.parametrize("bad", [b"not a pickle", zlib.compress(b"not a pickle"), zlib.compress(pickle.dumps({"src": "x"})),
                                 zlib.compress(pickle.dumps(("tg-lowered-1", "E_1", 3, [1], None, [], [], [], [], 0, 0))),
                                 zlib.compress(b"\x80\x04\x95"), zlib.compress(pickle.dumps(("tg-lowered-0",))), pickle.dumps(("tg-lowered-1",))])
def test_corrupt_row_is_a_miss(bad: bytes, cache: str, counted: list[UOp]):
  ren = Device["PYTHON"].renderer
  ast = _ast(Tensor.empty(6, 6, device="PYTHON") - 1)
  good = lowered_program(ast, ren)
  flush()
  diskcache._db_run(lambda c: (c.execute("UPDATE lowered_v1 SET val=?", (bad,)), c.commit()))
  again = lowered_program(ast, ren)  # lowered again (and stored again), never a crash or a wrong program
  assert len(counted) == 2 and again.src == good.src and again.uops is not None
  flush()
  assert lowered_program(ast, ren).uops is None  # the row it rewrote hits

def test_off_switches(cache: str, counted: list[UOp]):
  ren, ast = Device["PYTHON"].renderer, _ast(Tensor.empty(5, 5, device="PYTHON") + 7)
  with Context(LOWER_CACHE=0): lowered_program(ast, ren); lowered_program(ast, ren)
  with Context(CACHELEVEL=0): lowered_program(ast, ren)
  assert len(counted) == 3 and _rows() == 0
  lowered_program(ast, ren)
  with Context(DEBUG=5): assert lowered_program(ast, ren).uops is not None  # prints the linear program: lowers it
  with Context(CHECK_OOB=1): assert lowered_program(ast, ren).uops is not None

def test_runner_from_cache_rederives_its_linear_program(cache: str):
  a = np.arange(24, dtype=np.float32).reshape(4, 6)
  ast = _ast(Tensor(a, device="PYTHON").sum(axis=0))
  CompiledRunner("PYTHON", ast)
  flush()
  r = CompiledRunner("PYTHON", ast)
  assert r.p.uops is None and linear_program(r) == get_program(ast, Device["PYTHON"].renderer).uops
  with Context(NOOPT=1), pytest.raises(RuntimeError, match="knobs changed"): linear_program(r)

def test_beam_caches_only_the_choice(cache: str):
  _runner_cache.clear()
  a = np.arange(64, dtype=np.float32).reshape(8, 8)
  with Context(BEAM=1, IGNORE_BEAM_CACHE=1): np.testing.assert_allclose((Tensor(a, device="PYTHON") * 2).sum(axis=1).numpy(), (a * 2).sum(axis=1))
  flush()
  assert _rows() == 1  # the chosen program, not every candidate BEAM timed

def test_table_keeps_the_newest_rows(cache: str, monkeypatch):
  monkeypatch.setattr(diskcache, "LOWERED_ROWS", 3)
  ren = Device["PYTHON"].renderer
  asts = [_ast(Tensor.empty(4, 4, device="PYTHON") + i) for i in range(5)]
  for a in asts: lowered_program(a, ren); flush()
  assert _rows() == 3
  assert [lowered_program(a, ren).uops is None for a in reversed(asts)] == [True, True, True, False, False]  # the oldest two went

"""The declared renderer contract: RendererCaps is the only thing codegen reads about a target; the heuristic keys on it;
the compile cache keys on it and on every codegen knob; nothing probes renderers for undeclared attributes."""
from __future__ import annotations
import ast
import dataclasses
import importlib.util
import pathlib
import re

import numpy as np
import pytest

from tg_core.codegen import CODEGEN_KNOBS, get_program, program_key
from tg_core.codegen.opt import Opt, OptOps, hand_coded_optimizations
from tg_core.device import RENDERER_CONTRACT, Compiled, Device, Renderer, RendererCaps, TensorCore
from tg_core.dtype import dtypes
from tg_core.engine.realize import _runner_cache
from tg_core.helpers import (BEAM, CACHELEVEL, DEBUG, EMULATED_DTYPES, IGNORE_BEAM_CACHE, LOWER_CACHE, NOOPT, SPEC, TRACK_MATCH_STATS, TRANSCENDENTAL,
                             Context, ContextVar)
from tg_core.renderer.python import PythonRenderer
from tg_core.runtime.ops_python import PythonAllocator, PythonCompiler, PythonProgram
from tg_core.schedule import create_schedule
from tg_core.tensor import Tensor
from tg_core.testing.strict import RendererContractError, StrictRenderer
from tg_core.uop.ops import UOp

REPO = pathlib.Path(__file__).resolve().parents[1]
HAS_CPU = importlib.util.find_spec("tg_cpu_x86") is not None

# *** the strict wrapper itself ***

def test_strict_renderer_refuses_undeclared_attributes():
  s = StrictRenderer(PythonRenderer())
  assert s.caps is PythonRenderer.caps and s.target_name() == "PYTHON" and isinstance(s, Renderer)
  # probing with a default or hasattr must fail loudly, not quietly take the default
  with pytest.raises(RendererContractError, match="default_opts"): getattr(s, "default_opts", True)
  with pytest.raises(RendererContractError, match="global_max"): hasattr(s, "global_max")
  with pytest.raises(RendererContractError): s.supported_dtypes()
  with pytest.raises(RendererContractError): s.whatever = 1
  with pytest.raises(AttributeError): s.caps.vectorized_reduce_limit  # noqa: B018  (the record is a frozen dataclass: no extra fields either)

def test_contract_names_exist_on_the_base():
  for name in RENDERER_CONTRACT: assert hasattr(Renderer, name), name

def _strict_python_device(name: str) -> Compiled:
  return Compiled(name, PythonAllocator(), [StrictRenderer(PythonRenderer())], PythonCompiler(), PythonProgram)

@pytest.fixture
def strict_device():
  Device.register("TESTSTRICT", _strict_python_device, auto=False, origin="tests/test_renderer_contract.py")
  yield "TESTSTRICT"
  Device.unregister("TESTSTRICT")

def test_pipeline_reads_only_the_contract(strict_device):
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((9, 13), dtype=np.float32), rng.standard_normal((13, 5), dtype=np.float32)
  ta, tb = Tensor(a, device=strict_device), Tensor(b, device=strict_device)
  np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(ta.exp2().sin().sum(axis=1).numpy(), np.sin(np.exp2(a)).sum(axis=1), rtol=1e-5, atol=1e-5)
  h = Tensor(a.astype(np.float16), device=strict_device)
  np.testing.assert_allclose((h * 2).max(axis=0).numpy(), (a.astype(np.float16) * 2).max(axis=0), rtol=1e-3)
  with Context(BEAM=1, IGNORE_BEAM_CACHE=1):  # BEAM search reads the renderer too
    np.testing.assert_allclose((Tensor(a, device=strict_device) + 1).numpy(), a + 1)

@pytest.mark.skipif(not HAS_CPU, reason="needs the tg-cpu-x86 plugin (the LLVM renderer)")
def test_llvm_renderer_reads_only_the_contract():
  from tg_cpu_x86.device import CPUDevice
  def factory(d: str) -> Compiled:
    dev = CPUDevice(d)
    dev.use_renderer(StrictRenderer(dev.renderer))
    return dev
  Device.register("TESTSTRICTCPU", factory, auto=False)
  try:
    a = np.random.default_rng(1).standard_normal((64, 64), dtype=np.float32)
    t = Tensor(a, device="TESTSTRICTCPU")
    np.testing.assert_allclose((t @ t).numpy(), a @ a, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(t.exp().sum(axis=0).numpy(), np.exp(a).sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(t.T.contiguous().numpy(), a.T)
  finally: Device.unregister("TESTSTRICTCPU")

# *** the record ***

def test_caps_validation():
  with pytest.raises(ValueError, match="vector_width"): RendererCaps(vector_width=0)
  with pytest.raises(ValueError, match="global_max"): RendererCaps(has_grid=True, global_max=())
  with pytest.raises(ValueError, match="native_dtypes"): RendererCaps(native_dtypes=frozenset({"float32"}))  # type: ignore[arg-type]
  with pytest.raises(ValueError, match="big_reduce_tile"): RendererCaps(big_reduce_tile=(16,))  # type: ignore[arg-type]
  with pytest.raises(ValueError, match="cache_sizes"): RendererCaps(cache_sizes=(32768, 0))
  for bad in (0, -2, True, 2.0):
    with pytest.raises(ValueError, match="cores"): RendererCaps(cores=bad)  # type: ignore[arg-type]
  assert RendererCaps(cores=16).cores == 16 and RendererCaps().cores == 1
  with pytest.raises(ValueError, match="arch"): RendererCaps(archs=("sm_80",), arch="sm_90")
  with pytest.raises(ValueError, match="tensor_cores"): RendererCaps(tensor_cores=((16, 8, 16),))  # type: ignore[arg-type]
  with pytest.raises(ValueError, match="dims"): TensorCore((16, 8), dtypes.half, dtypes.float)  # type: ignore[arg-type]
  with pytest.raises(ValueError, match="DType"): TensorCore((16, 8, 16), "half", dtypes.float)  # type: ignore[arg-type]
  tc = TensorCore((16, 8, 16), dtypes.half, dtypes.float)
  assert RendererCaps(tensor_cores=(tc,)).tensor_cores[0].threads == 32
  assert RendererCaps(native_dtypes=frozenset({dtypes.float32})).emulated_dtypes() == {dtypes.float16, dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2}

def test_caps_cache_key_is_stable_across_processes():
  import subprocess
  import sys
  code = "from tg_core.runtime.ops_python import PythonRenderer as R; print(R.caps.cache_key())"
  outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": s, "PATH": ""}).stdout
          for s in ("1", "2")}
  assert len(outs) == 1 and outs.pop().strip() == PythonRenderer.caps.cache_key()

def test_legacy_renderer_attributes_are_refused():
  with pytest.raises(TypeError, match="global_max"):
    class OldRenderer(Renderer):  # noqa: F841
      global_max = None
  with pytest.raises(TypeError, match="native_dtypes"):
    class OldRenderer2(Renderer):  # noqa: F841
      def supported_dtypes(self) -> set: return set()

def test_local_opts_need_declared_workgroups():
  from tg_core.codegen import check_opts
  from tg_core.codegen.opt import KernelOptError
  class NoLocal(PythonRenderer):
    caps = dataclasses.replace(PythonRenderer.caps, has_local=False)
  class TwoLocal(PythonRenderer):
    caps = dataclasses.replace(PythonRenderer.caps, local_max=(8, 4))
  with pytest.raises(KernelOptError, match="has_local"): check_opts([Opt(OptOps.LOCAL, 0, 4)], NoLocal())
  with pytest.raises(KernelOptError, match="local_max"): check_opts([Opt(OptOps.LOCAL, 0, 16)], TwoLocal())
  with pytest.raises(KernelOptError, match="2 workgroup dims"): check_opts([Opt(OptOps.LOCAL, i, 2) for i in range(3)], TwoLocal())
  assert check_opts([Opt(OptOps.LOCAL, 0, 8), Opt(OptOps.UPCAST, 1, 4)], TwoLocal())
  x = Tensor.empty(16, 16, device="NULL")
  with pytest.raises(KernelOptError): get_program(_ast(x + 1), NoLocal(), [Opt(OptOps.LOCAL, 0, 4)])

# *** the heuristic keys on declared capabilities ***

def _ast(t: Tensor) -> UOp:
  from tg_core.uop.rewrite import graph_rewrite
  from tg_core.uop.symbolic import symbolic
  items, _ = create_schedule(UOp.sink(t.uop))
  return graph_rewrite(items[-1].ast, symbolic)

def test_heuristic_ignores_the_launch_model():
  # whether a target launches a grid says nothing about its registers: the same hints give the same opts
  x = Tensor.empty(512, 512, device="NULL")
  for t in (x @ x, x.T.contiguous(), x.sum(axis=1), x + 1):
    ast = _ast(t)
    for hints in ({}, {"big_reduce_tile": (16, 8), "transpose_tile": 4, "vector_width": 8}):
      assert hand_coded_optimizations(ast, RendererCaps(has_grid=False, **hints)) == hand_coded_optimizations(ast, RendererCaps(has_grid=True, **hints))

def test_heuristic_follows_the_hints():
  x = Tensor.empty(512, 512, device="NULL")
  mm = _ast(x @ x)
  assert [o.arg for o in hand_coded_optimizations(mm, RendererCaps(big_reduce_tile=(16, 8)))] == [16, 8]
  assert [o.arg for o in hand_coded_optimizations(mm, RendererCaps(big_reduce_tile=(8, 4)))] == [8, 4]
  assert OptOps.UNROLL in [o.op for o in hand_coded_optimizations(mm, RendererCaps())]
  tr = _ast(x.T.contiguous())
  assert len(hand_coded_optimizations(tr, RendererCaps(transpose_tile=4))) == 2 and len(hand_coded_optimizations(tr, RendererCaps())) == 1
  assert hand_coded_optimizations(_ast(x + 1), RendererCaps(vector_width=16)) == [Opt(OptOps.UPCAST, 1, 16)]

# *** the compile cache key ***

def test_program_key_covers_record_and_knobs():
  ren = PythonRenderer()
  base = program_key(ren)
  for knob, val in ((NOOPT, 1), (BEAM, 2), (TRANSCENDENTAL, 2), (EMULATED_DTYPES, "float16"), (IGNORE_BEAM_CACHE, 1)):
    with Context(**{knob.key: val}): assert program_key(ren) != base, knob.key
  other = PythonRenderer()
  other.caps = dataclasses.replace(other.caps, vector_width=8)
  assert program_key(other) != base

class _OptPythonRenderer(PythonRenderer):
  caps = dataclasses.replace(PythonRenderer.caps, default_opts=True)

def test_noopt_is_in_the_runner_cache_key():
  Device.register("TESTOPTS", lambda d: Compiled(d, PythonAllocator(), [_OptPythonRenderer], PythonCompiler(), PythonProgram), auto=False)
  try:
    a = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    _runner_cache.clear()
    srcs = []
    for noopt in (0, 1):
      with Context(NOOPT=noopt):
        np.testing.assert_allclose((Tensor(a, device="TESTOPTS") * 3).numpy(), a * 3)
        srcs.append({r.p.src for r in _runner_cache.values()})
    # one kernel, two programs: before NOOPT was in the key, NOOPT=1 reused the optimized program
    assert len(srcs[0]) == 1 and len(srcs[1]) == 2
    (opt_src,), (plain_src,) = srcs[0], srcs[1] - srcs[0]
    assert "UPCAST" not in plain_src and opt_src != plain_src
  finally: Device.unregister("TESTOPTS")

# knobs codegen and the engine read that only print or verify, or switch the caches of programs, never change the program
OUTPUT_NEUTRAL = (DEBUG, SPEC, TRACK_MATCH_STATS, CACHELEVEL, LOWER_CACHE)

def test_every_codegen_knob_is_in_the_key():
  """Every ContextVar the codegen and engine modules use is either a CODEGEN_KNOB (in the cache key) or output-neutral."""
  import tg_core.helpers as helpers
  knobs = {name: v for name, v in vars(helpers).items() if isinstance(v, ContextVar)}
  files = [*(REPO / "tg_core" / "codegen").rglob("*.py"), *(REPO / "tg_core" / "engine").rglob("*.py"), *(REPO / "tg_core" / "uop").rglob("*.py")]
  used: set[str] = set()
  for f in files:
    for node in ast.walk(ast.parse(f.read_text())):
      if isinstance(node, ast.Name) and node.id in knobs: used.add(node.id)
  assert used, "found no knobs at all: the scan is broken"
  missing = {n for n in used if not any(knobs[n] is k for k in (*CODEGEN_KNOBS, *OUTPUT_NEUTRAL))}  # by identity: ContextVars compare by value
  assert not missing, f"codegen reads {sorted(missing)} but the compile cache key (CODEGEN_KNOBS) does not include them"

# *** no probing ***

PROBE = re.compile(r"\b(getattr|hasattr)\(\s*(ren|renderer|r|dev|device|self\.renderer|self\.dev|Device\[[^\]]*\][.\w]*)\s*,")

def test_no_attribute_probing_of_renderers_or_devices():
  files = [*(REPO / "tg_core").rglob("*.py"), *(REPO / "plugins").rglob("*.py"), *(REPO / "examples").rglob("*.py")]
  hits = [f"{f.relative_to(REPO)}:{i}: {line.strip()}" for f in files if ".venv" not in f.parts
          for i, line in enumerate(f.read_text().splitlines(), 1) if PROBE.search(line)]
  assert not hits, "getattr/hasattr probing of a renderer or device (read the declared record instead):\n" + "\n".join(hits)

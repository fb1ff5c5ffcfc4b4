"""tg_cpu_x86.llvmcapi, the compiler's direct calls into llvmlite's library: the same host facts and byte-for-byte the same
objects and assembly as llvmlite.binding (quick and full tier), errors for bad IR, and the fallback to llvmlite.binding where
it isn't available."""
from __future__ import annotations
import functools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tg_core import Tensor
from tg_core.device import Device
from tg_cpu_x86 import compiler, llvmcapi

pytestmark = pytest.mark.skipif(not llvmcapi.available(), reason="llvmlite version not checked against llvmcapi's declarations")

@functools.cache
def _sources() -> tuple[str, ...]:
  """The LLVM IR of a few kernels tg renders for this host: a matmul, an elementwise chain with a transcendental, a reduce."""
  from tg_core.engine import realize
  r = np.random.default_rng(0)
  a, b = r.standard_normal((48, 40)).astype(np.float32), r.standard_normal((40, 24)).astype(np.float32)
  before = set(realize._runner_cache)
  np.testing.assert_allclose((Tensor(a, device="CPU") @ Tensor(b, device="CPU")).numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose((Tensor(a, device="CPU").exp() * 2 + 1).sum(1).numpy(), (np.exp(a.astype(np.float64)) * 2 + 1).sum(1), rtol=1e-4)
  srcs = tuple(r.p.src for k, r in realize._runner_cache.items() if k not in before and k[0].startswith("CPU"))
  assert len(srcs) >= 2
  return srcs

def test_host_facts_match_llvmlite_binding() -> None:
  import llvmlite.binding as llvm
  llvm.initialize_native_target()
  assert llvmcapi.process_triple() == llvm.get_process_triple()
  assert llvmcapi.host_cpu_name() == llvm.get_host_cpu_name()
  assert llvmcapi.host_cpu_features() == llvm.get_host_cpu_features().flatten()
  assert llvmcapi.version() == ".".join(map(str, llvm.llvm_version_info))

@pytest.mark.parametrize("tier", ["quick", "full"])
def test_objects_identical_to_llvmlite_binding(tier: str) -> None:
  comp = Device["CPU"].compiler
  assert isinstance(comp, compiler.LLVMCompiler)
  for src in _sources():
    assert compiler.pass_level(src, comp.opt) == 0  # small kernels: the quick tier unless marked full
    if tier == "full": src = compiler.full_tier(src)
    level = compiler.pass_level(src, comp.opt)
    assert level == (comp.opt if tier == "full" else 0)
    via_binding = bytes(comp.tm.emit_object(comp.optimize(src)))  # the pre-llvmcapi path: llvmlite.binding
    assert comp.capi_tm.compile(src, level) == via_binding
    assert comp.compile(src) == via_binding
    assert comp.to_asm(src) == str(comp.tm.emit_assembly(comp.optimize(src)))

def test_target_machine_for_another_cpu() -> None:
  # an AVX2-only target renders and compiles through the same path (a host without AVX-512)
  triple = llvmcapi.process_triple()
  tm = llvmcapi.TargetMachine(triple, "x86-64-v3", "", 3)
  src = "define float @f(float %a, float %b) {\n  %c = fmul float %a, %b\n  ret float %c\n}\n"
  assert tm.compile(src, 0)[:4] == tm.compile(src, 3)[:4] == b"\x7fELF"

def test_bad_ir_raises_with_llvm_message() -> None:
  tm = Device["CPU"].compiler.capi_tm  # type: ignore[attr-defined]
  with pytest.raises(RuntimeError, match="parsing error"): tm.compile("define void @f( {", 0)
  # parses, but the verifier refuses it: %x is used where it isn't defined on every path
  bad = "define i32 @f(i1 %c) {\nentry:\n  br i1 %c, label %a, label %b\na:\n  %x = add i32 1, 2\n  br label %b\nb:\n  ret i32 %x\n}\n"
  with pytest.raises(RuntimeError, match="dominate"): tm.compile(bad, 3)
  with pytest.raises(RuntimeError, match="no target"): llvmcapi.TargetMachine("nonsense-arch-none", "", "", 3)

def _run(code: str, env: dict[str, str]) -> str:
  out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600, env={**os.environ, **env})
  assert out.returncode == 0, out.stderr[-3000:]
  return out.stdout

def test_cold_kernel_without_llvmlite_binding(tmp_path: pytest.TempPathFactory) -> None:
  # a first process (empty compile cache) compiles its kernels (quick, and full once a kernel has run enough: UPGRADE_S=0)
  # without importing llvmlite.binding; where llvmcapi is refused (an unchecked llvmlite version) the same kernels compile
  # through llvmlite.binding, with the same result
  code = """
  import sys
  import numpy as np
  from tg_cpu_x86 import llvmcapi
  if sys.argv[1:] == ["refuse"]: llvmcapi.CHECKED_VERSIONS = ()
  levels = set()
  orig = llvmcapi.TargetMachine.compile
  def spy(self, src, level, asm=False):
    levels.add(level)
    return orig(self, src, level, asm)
  llvmcapi.TargetMachine.compile = spy
  from tg_core import Tensor
  a = (np.arange(64 * 48, dtype=np.float32).reshape(64, 48) % 7) / 10
  b = (np.arange(48 * 40, dtype=np.float32).reshape(48, 40) % 5) / 10
  from tg_cpu_x86 import runtime
  runtime.UPGRADE_S = 0.0  # the second run of a kernel compiles it at the full level
  ta, tb = Tensor(a, device="CPU"), Tensor(b, device="CPU")
  for _ in range(3): np.testing.assert_allclose((ta @ tb).relu().numpy(), np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-5)
  print("BINDING", "llvmlite.binding" in sys.modules, "CAPI", llvmcapi.available(), "LEVELS", sorted(levels))
  """
  assert "BINDING False CAPI True LEVELS [0, 3]" in _run(code, {"TG_CACHE_DIR": str(tmp_path / "a"), "CACHELEVEL": "2", "TG_CPU_OPT": "3"})
  refused = subprocess.run([sys.executable, "-c", textwrap.dedent(code), "refuse"], capture_output=True, text=True, timeout=600,
                           env={**os.environ, "TG_CACHE_DIR": str(tmp_path / "b"), "CACHELEVEL": "2"})
  assert refused.returncode == 0, refused.stderr[-3000:]
  assert "BINDING True CAPI False LEVELS []" in refused.stdout

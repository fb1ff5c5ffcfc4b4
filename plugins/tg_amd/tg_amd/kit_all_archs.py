"""pytest plugin (`-p tg_amd.kit_all_archs`): every kernel the AMD device compiles during the run is compiled for each arch of
ARCHS as well, and each code object is checked to be for that arch with the kernel in it (its wave size the arch's). A kernel
that fails for any arch fails the test that made it. Used with the conformance kit:

    pytest --pyargs tg_core.testing --tg-device=MOCKKFD+AMD -p tg_amd.kit_all_archs

The kernels' IR doesn't depend on the arch (the renderer's caps are the same for all of them), so this is every kit kernel
compiled for gfx1100, gfx1201, gfx942 and gfx950. The terminal summary counts the kernels."""
from __future__ import annotations
from typing import Any

ARCHS = ("gfx1100", "gfx1201", "gfx942", "gfx950")
_compiled: dict[str, int] = {a: 0 for a in ARCHS}

def check_code_object(lib: bytes, arch: str, src: str) -> None:
  """The code object is for `arch` and holds the kernel `src` defines, with the arch's wave size."""
  import re
  from tg_amd.emu.elf import read_code_object
  from tg_amd.renderer import wave_size
  co = read_code_object(lib)
  m = re.search(r"define amdgpu_kernel void @(\w+)\(", src)
  assert m is not None, "the IR defines no amdgpu_kernel"
  if co.arch != arch: raise AssertionError(f"compiled for {arch}, the code object says {co.arch}")
  if (ws := co.kernel(m.group(1)).wavefront_size) != wave_size(arch): raise AssertionError(f"{arch}: wave size {ws}, expected {wave_size(arch)}")

def pytest_configure(config: Any) -> None:
  from tg_amd.compiler import AMDCompiler
  orig = AMDCompiler.compile_cached
  others: dict[str, AMDCompiler] = {}
  def compile_cached(self: AMDCompiler, src: str) -> bytes:
    lib = orig(self, src)
    for arch in ARCHS:
      other = lib if arch == self.arch else orig(others.setdefault(arch, AMDCompiler(arch, self.opt)), src)
      check_code_object(other, arch, src)
      _compiled[arch] += 1
    return lib
  AMDCompiler.compile_cached = compile_cached  # type: ignore[method-assign]

def pytest_sessionfinish(session: Any) -> None:
  if (out := getattr(session.config, "workeroutput", None)) is not None: out["tg_amd_compiled"] = dict(_compiled)  # an xdist worker

def pytest_testnodedown(node: Any, error: Any) -> None:  # the xdist controller: add up the workers' counts
  for arch, n in node.workeroutput.get("tg_amd_compiled", {}).items(): _compiled[arch] += n

def pytest_terminal_summary(terminalreporter: Any) -> None:
  terminalreporter.write_line("tg_amd.kit_all_archs: kernels compiled per arch: " + ", ".join(f"{a} {n}" for a, n in _compiled.items()))

"""DEV is validated: a renderer, arch or interface the device can't serve is a typed error naming what it can serve."""
from __future__ import annotations
import importlib.util
import os
import subprocess
import sys

import pytest

from tg_core.device import (ArchUnsupportedError, Compiled, Device, DeviceError, DeviceNotFoundError, DevTargetError, InterfaceUnsupportedError,
                            Renderer, RendererCaps, RendererNotFoundError, did_you_mean)
from tg_core.helpers import Context
from tg_core.renderer.python import PythonRenderer
from tg_core.runtime.ops_python import PythonAllocator, PythonCompiler, PythonProgram
from tg_core.tensor import Tensor

HAS_CPU = importlib.util.find_spec("tg_cpu_x86") is not None

class GfxRenderer(Renderer):
  """A renderer that can target two archs; the chosen one lands in its caps."""
  caps = RendererCaps(archs=("gfx1100", "gfx90a"), arch="gfx1100")

class PtxRenderer(PythonRenderer): pass  # another renderer on the same device, no archs

@pytest.fixture(scope="module", autouse=True)
def testgpu():
  Device.register("TESTGPU", lambda d: Compiled(d, PythonAllocator(), [GfxRenderer, PtxRenderer], PythonCompiler(), PythonProgram), auto=False,
                  interfaces=("MOCK", "PCI"), origin="tests/test_dev_target.py")
  yield
  Device.unregister("TESTGPU")

def _open(dev_env: str, inst: str) -> Compiled:
  with Context(DEV=dev_env):
    Device.DEFAULT  # noqa: B018  (device selection validates the interface)
    return Device[inst]

def test_valid_targets():
  assert isinstance((d := _open("TESTGPU", "TESTGPU:1")).renderer, GfxRenderer) and d.renderer.caps.arch == "gfx1100"
  assert _open("TESTGPU:GFX:gfx90a", "TESTGPU:2").renderer.caps.arch == "gfx90a"
  assert _open("TESTGPU::gfx90a", "TESTGPU:3").renderer.caps.arch == "gfx90a"  # the default renderer, another arch
  assert isinstance(_open("MOCK+TESTGPU:PTX", "TESTGPU:4").renderer, PtxRenderer)
  assert isinstance(_open("pci:0,1+TESTGPU", "TESTGPU:5").renderer, GfxRenderer)  # interface indices and case don't matter

@pytest.mark.parametrize("dev_env, err, needles", [
  ("TESTGPU:GFX:gfx1101", ArchUnsupportedError, ["'gfx1101'", "gfx1100, gfx90a", "did you mean 'gfx1100'?"]),
  ("TESTGPU::sm_90", ArchUnsupportedError, ["'sm_90'", "gfx1100, gfx90a"]),
  ("TESTGPU:PTX:sm_90", ArchUnsupportedError, ["renderer PTX", "takes no arch"]),
  ("TESTGPU:X86", RendererNotFoundError, ["no renderer 'X86'", "it has GFX, PTX"]),
  ("TESTGPU:PXT", RendererNotFoundError, ["no renderer 'PXT'", "did you mean 'PTX'?"]),
  ("MOKC+TESTGPU", InterfaceUnsupportedError, ["no interface 'MOKC'", "MOCK, PCI", "did you mean 'MOCK'?"]),
  ("USB+TESTGPU:GFX", InterfaceUnsupportedError, ["no interface 'USB'", "MOCK, PCI"]),
  ("MOCK+PYTHON", InterfaceUnsupportedError, ["device PYTHON has no interface 'MOCK'", "declares none"]),
  ("PYTHON::x86-64", ArchUnsupportedError, ["renderer PYTHON", "takes no arch"]),
])
def test_bad_dev(dev_env: str, err: type, needles: list[str]):
  inst = dev_env.rpartition("+")[2].split(":")[0] + ":7"
  with pytest.raises(err) as e: _open(dev_env, inst)
  assert isinstance(e.value, DevTargetError) and isinstance(e.value, DeviceError) and isinstance(e.value, ValueError)
  msg = str(e.value)
  for n in needles: assert n in msg, (n, msg)
  assert e.value.valid is not None and e.value.wanted in msg

def test_bad_device_name_did_you_mean():
  with Context(DEV="TESTGUP:GFX"), pytest.raises(DeviceNotFoundError, match="Did you mean 'TESTGPU'"): Device.DEFAULT  # noqa: B018

def test_did_you_mean():
  assert did_you_mean("llmv", ["LLVM", "PTX"]) == " (did you mean 'LLVM'?)"
  assert did_you_mean("gfx1101", ["gfx1100", "gfx90a"]) == " (did you mean 'gfx1100'?)"
  assert did_you_mean("zzz", ["LLVM"]) == "" and did_you_mean("x", []) == ""

def _run(dev: str) -> subprocess.CompletedProcess:
  env = {**os.environ, "DEV": dev}
  return subprocess.run([sys.executable, "-c", "from tg_core import Tensor; Tensor([1]).realize()"], capture_output=True, text=True, env=env)

@pytest.mark.skipif(not HAS_CPU, reason="needs the tg-cpu-x86 plugin (device CPU)")
def test_cpu_bad_arch_exits_naming_valid_archs():
  from tg_cpu_x86.compiler import host_target
  r = _run("CPU:LLVM:gfx1100")
  assert r.returncode != 0
  assert "ArchUnsupportedError" in r.stderr and "'gfx1100'" in r.stderr and f"it can target {host_target()[1]}" in r.stderr, r.stderr
  assert _run(f"CPU:LLVM:{host_target()[1]}").returncode == 0

@pytest.mark.skipif(not HAS_CPU, reason="needs the tg-cpu-x86 plugin (device CPU)")
def test_cpu_unknown_renderer_and_interface():
  r = _run("CPU:X86")  # no x86 renderer exists yet
  assert r.returncode != 0 and "RendererNotFoundError" in r.stderr and "no renderer 'X86'; it has LLVM" in r.stderr, r.stderr
  r = _run("MOCK+CPU")
  assert r.returncode != 0 and "InterfaceUnsupportedError" in r.stderr, r.stderr

def test_tensor_on_bad_arch_fails_before_running():
  with Context(DEV="TESTGPU:GFX:gfx1"), pytest.raises(ArchUnsupportedError): Tensor([1.0], device="TESTGPU:8").realize()

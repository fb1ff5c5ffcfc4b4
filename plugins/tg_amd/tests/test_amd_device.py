"""The AMD device through tg_core's Device registry: DEV grammar (MOCKKFD+AMD, the arch, NULL:LLVM:gfxNNNN), no-KFD errors,
doctor, driver faults surfacing through Tensor ops, and the renderer's code objects for the four archs vs numpy/ELF facts."""
from __future__ import annotations
import errno
import os
import subprocess
import sys

import numpy as np
import pytest

import tg_amd.device as amd_device
from tg_core import Tensor
from tg_core.device import Device, DeviceUnavailableError
from tg_core.hcq import HCQTimeoutError
from tg_core.helpers import Context
from tg_amd.kfd import uapi
from tg_amd.kfd.errors import KFDDeviceFaultError, KFDIoctlError, KFDOutOfMemoryError
from tg_amd.kfd.mock import MockKFD
from tg_amd.kit_all_archs import ARCHS, check_code_object

_ENV = {k: v for k, v in os.environ.items() if k != "DEV"}

def _fresh(monkeypatch: pytest.MonkeyPatch, name: str, mock: MockKFD, dev: str = "MOCKKFD+AMD") -> str:
  """Open device `name` (an AMD:n not opened before in this process) on its own mock KFD."""
  monkeypatch.setattr(amd_device, "mock_kfd", lambda: mock)
  with Context(DEV=dev): Device[name]
  return name

def test_mockkfd_default_is_gfx1100_and_computes(monkeypatch: pytest.MonkeyPatch):
  name = _fresh(monkeypatch, "AMD:10", MockKFD())
  d = Device[name]
  assert d.arch == "gfx1100" and d.renderer.caps.arch == "gfx1100" and d.renderer.target_name() == "LLVM"
  a = np.arange(1000, dtype=np.float32)
  np.testing.assert_array_equal((Tensor(a, device=name) * 3 - 1).numpy(), a * 3 - 1)

def test_arch_in_dev_picks_the_gfx942_node(monkeypatch: pytest.MonkeyPatch):
  mock = MockKFD()
  name = _fresh(monkeypatch, "AMD:12", mock, "MOCKKFD+AMD:LLVM:gfx942")
  d = Device[name]
  assert d.arch == "gfx942" and d.renderer.caps.arch == "gfx942"
  a = np.arange(300, dtype=np.float32).reshape(10, 30)
  np.testing.assert_allclose((Tensor(a, device=name) @ Tensor(a.T, device=name)).numpy(), a @ a.T, rtol=1e-6)
  assert mock.dispatches >= 1  # it ran on the emulator, not elsewhere

def test_arch_no_node_has_is_unavailable_naming_the_compile_only_form(monkeypatch: pytest.MonkeyPatch):
  monkeypatch.setattr(amd_device, "mock_kfd", MockKFD)
  with Context(DEV="MOCKKFD+AMD:LLVM:gfx1201"):
    with pytest.raises(DeviceUnavailableError, match=r"no GPU node with arch gfx1201 .*gfx1100, gfx942.*NULL:LLVM:gfx1201"): Device["AMD:14"]

@pytest.mark.skipif(os.path.exists("/dev/kfd"), reason="this machine has a KFD: the no-KFD error can't be provoked")
def test_no_kfd_names_dev_kfd_and_suggests_the_mock():
  with Context(DEV="AMD"), pytest.raises(DeviceUnavailableError, match=r"/dev/kfd does not exist.*DEV=MOCKKFD\+AMD"): Device["AMD:16"]

@pytest.mark.skipif(os.path.exists("/dev/kfd"), reason="this machine has a KFD: doctor would show it usable")
def test_doctor_shows_why_amd_is_unavailable():
  r = subprocess.run([sys.executable, "-m", "tg_core", "doctor"], env={**_ENV, "DEV": "AMD"}, capture_output=True, text=True, timeout=120)
  assert r.returncode == 1, r.stdout + r.stderr
  assert "amd" in r.stdout and "/dev/kfd" in r.stdout and "DEV=MOCKKFD+AMD" in r.stdout, r.stdout

def test_null_compiles_for_gfx950_without_a_gpu():
  code = ("from tg_core import Tensor\nfrom tg_core.device import Device\n(Tensor.ones(8, 8).contiguous() @ Tensor.ones(8, 8)).realize()\n"
          "r = Device['NULL'].renderer\nprint(r.target_name(), r.caps.arch, type(r.compiler).__name__)")
  r = subprocess.run([sys.executable, "-c", code], env={**_ENV, "DEV": "NULL:LLVM:gfx950"}, capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stderr
  assert r.stdout.split() == ["LLVM", "gfx950", "AMDCompiler"]

# *** driver faults, through Device and Tensor ***
def test_failed_ioctl_at_open_is_typed_naming_the_ioctl(monkeypatch: pytest.MonkeyPatch):
  mock = MockKFD()
  mock.fail_ioctl("AMDKFD_IOC_CREATE_QUEUE", errno.EBUSY)
  monkeypatch.setattr(amd_device, "mock_kfd", lambda: mock)
  with Context(DEV="MOCKKFD+AMD"), pytest.raises(KFDIoctlError, match=r"AMDKFD_IOC_CREATE_QUEUE failed with EBUSY"): Device["AMD:18"]

def test_failed_ioctl_during_a_tensor_op_is_typed(monkeypatch: pytest.MonkeyPatch):
  mock = MockKFD()
  name = _fresh(monkeypatch, "AMD:20", mock)
  mock.fail_ioctl("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", errno.EFAULT)
  with pytest.raises(KFDIoctlError, match=r"AMDKFD_IOC_ALLOC_MEMORY_OF_GPU failed with EFAULT"):
    (Tensor(np.ones(7919, dtype=np.float32), device=name) + 1).numpy()

def test_queue_that_never_signals_times_out_through_a_tensor_op(monkeypatch: pytest.MonkeyPatch):
  mock = MockKFD()
  name = _fresh(monkeypatch, "AMD:22", mock)
  t = Tensor(np.ones(64, dtype=np.float32), device=name).realize()
  Device[name].kfd.timeout_s = 0.2  # type: ignore[attr-defined]
  mock.hang(uapi.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL)
  with pytest.raises(HCQTimeoutError, match=r"timeout after 0.2s waiting for signal timeline to reach \d+; it holds \d+"): (t * 2).numpy()

def test_out_of_memory_through_a_tensor_is_typed_and_names_the_size(monkeypatch: pytest.MonkeyPatch):
  name = _fresh(monkeypatch, "AMD:24", MockKFD(vram_size=64 << 20))
  with pytest.raises(KFDOutOfMemoryError, match=r"out of GPU memory allocating 134217728 bytes of VRAM"):
    Tensor.ones(1 << 25, device=name).contiguous().realize()

def test_kernel_fault_stops_the_queue_and_later_work_fails_fast(monkeypatch: pytest.MonkeyPatch):
  from tg_amd.kfd.mock import MockKFDError
  mock = MockKFD()
  name = _fresh(monkeypatch, "AMD:26", mock)
  t = Tensor(np.ones(64, dtype=np.float32), device=name).realize()
  monkeypatch.setattr(mock, "_dispatch", lambda *a: (_ for _ in ()).throw(MockKFDError("injected dispatch fault")))
  with pytest.raises(MockKFDError, match="injected dispatch fault"): (t + 1).realize()
  with pytest.raises(KFDDeviceFaultError, match=r"stopped at an earlier fault \(MockKFDError: injected dispatch fault\)"): (t + 2).realize()

# *** code objects for the four archs ***
@pytest.mark.parametrize("arch", ARCHS)
def test_renderer_code_objects_for_each_arch(arch: str):
  from tg_core.codegen import get_program
  from tg_amd.renderer import AMDGPURenderer
  ren = AMDGPURenderer(arch)
  a = Tensor.ones(16, 16).contiguous()
  outs = [(a @ a).sum(axis=0), a.half().exp2() + 1, (a.cast("int8") * 3).max(axis=1), a.bfloat16().sqrt()]
  n = 0
  for o in outs:
    for si in o.schedule():
      if si.ast.op.name != "SINK": continue
      p = get_program(si.ast, ren)
      check_code_object(ren.compiler.compile_cached(p.src), arch, p.src)  # type: ignore[union-attr]
      n += 1
  assert n >= len(outs)

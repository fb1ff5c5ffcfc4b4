"""TinyJit on MOCKKFD+AMD replays through tg_core.hcq.HCQGraph: every replay equals numpy (new inputs, a symbolic Variable), is
ONE compute-queue submission however many kernels it holds, and a fault during a replay surfaces as the driver's typed error."""
from __future__ import annotations
import numpy as np
import pytest

import tg_amd.device as amd_device
from tg_core import Tensor, TinyJit, Variable
from tg_core.device import Device
from tg_core.hcq import HCQGraph
from tg_core.helpers import Context
from tg_amd.kfd.errors import KFDDeviceFaultError
from tg_amd.kfd.mock import MockKFD, MockKFDError

rng = np.random.default_rng(14)
def rnd(*s: int) -> np.ndarray: return rng.standard_normal(s).astype(np.float32)

def _fresh(monkeypatch: pytest.MonkeyPatch, name: str) -> tuple[str, MockKFD, list[int]]:
  """Open `name` on its own mock KFD; returns it, the mock and a list that gets one entry per compute-queue submission."""
  mock = MockKFD()
  monkeypatch.setattr(amd_device, "mock_kfd", lambda: mock)
  with Context(DEV="MOCKKFD+AMD"): dev = Device[name]
  ring = dev.kfd.compute_queue  # type: ignore[attr-defined]
  pushes: list[int] = []
  push = ring.push
  def counted(packets: list[bytes]) -> None:
    pushes.append(len(packets))
    push(packets)
  monkeypatch.setattr(ring, "push", counted)
  return name, mock, pushes

def _three_kernels(x: Tensor, y: Tensor) -> Tensor:
  a = (x + y).realize()
  b = (a * x).realize()
  return (b - y).relu().realize()

def test_replay_is_one_submission_and_matches_numpy(monkeypatch: pytest.MonkeyPatch):
  name, mock, pushes = _fresh(monkeypatch, "AMD:40")
  jf = TinyJit(_three_kernels)
  for call in range(5):
    x, y = rnd(8, 24), rnd(8, 24)
    tx, ty = Tensor(x, device=name).realize(), Tensor(y, device=name).realize()
    pushes.clear()
    d0 = mock.dispatches
    out = jf(tx, ty)
    if call >= 2:  # a replay: the graph's one queue (a wait, the three dispatches, a signal)
      assert pushes == [5], pushes
      assert mock.dispatches - d0 == 3
    np.testing.assert_allclose(out.numpy(), np.maximum((x + y) * x - y, 0), rtol=1e-6, atol=1e-6)
  assert jf.captured is not None and len(jf.captured) == 3
  assert jf.plan is not None and len(jf.plan) == 1 and isinstance(jf.plan[0][0], HCQGraph) and jf.plan[0][1] == [0, 1, 2]

def test_replay_with_a_symbolic_variable_patches_vals_and_dims(monkeypatch: pytest.MonkeyPatch):
  name, _, pushes = _fresh(monkeypatch, "AMD:42")
  a = rnd(3, 300)
  ta = Tensor(a, device=name).realize()
  jf = TinyJit(lambda x: ((x + 1).realize() * 2).realize())
  for call, i in enumerate([5, 300, 1, 129, 300, 7]):  # the grid (FLAT_BLOCK workgroups) changes with i
    vi = Variable("i", 1, 300).bind(i)
    pushes.clear()
    out = jf(ta[:, :vi])
    if call >= 2: assert pushes == [4], pushes  # a replay: wait, the two dispatches, signal
    np.testing.assert_allclose(out[:3, :i].numpy(), (a[:, :i] + 1) * 2, rtol=1e-6)
  assert jf.plan is not None and len(jf.plan) == 1 and isinstance(jf.plan[0][0], HCQGraph)

def test_fault_during_a_graph_replay_is_typed(monkeypatch: pytest.MonkeyPatch):
  name, mock, _ = _fresh(monkeypatch, "AMD:44")
  jf = TinyJit(_three_kernels)
  x, y = rnd(4, 16), rnd(4, 16)
  for _ in range(3): jf(Tensor(x, device=name), Tensor(y, device=name))
  monkeypatch.setattr(mock, "_dispatch", lambda *a: (_ for _ in ()).throw(MockKFDError("injected dispatch fault")))
  with pytest.raises(MockKFDError, match="injected dispatch fault"): jf(Tensor(x, device=name), Tensor(y, device=name))
  with pytest.raises(KFDDeviceFaultError, match=r"stopped at an earlier fault \(MockKFDError: injected dispatch fault\)"):
    jf(Tensor(x, device=name), Tensor(y, device=name))

def test_copies_in_the_capture_split_it_into_graph_segments(monkeypatch: pytest.MonkeyPatch):
  name, _, _ = _fresh(monkeypatch, "AMD:46")
  def f(x: Tensor) -> Tensor:
    a = ((x + 1).realize() * 3).realize()  # two AMD kernels: one graph
    c = (a.to("CPU") * 2).realize()  # a copy, then a CPU kernel (a CPUGraph of its own: another device's graph)
    return (c.to(name) - x).realize()  # a copy back, then one AMD kernel: a graph of its own
  jf = TinyJit(f)
  for _ in range(4):
    x = rnd(5, 7)
    np.testing.assert_allclose(jf(Tensor(x, device=name)).numpy(), (x + 1) * 3 * 2 - x, rtol=1e-5, atol=1e-6)
  assert jf.plan is not None and jf.captured is not None
  kinds = [("graph", len(idx)) if g is not None else ("copy" if isinstance(jf.captured[idx[0]][0], str) else "kernel", 1) for g, idx in jf.plan]
  assert kinds == [("graph", 2), ("copy", 1), ("graph", 1), ("copy", 1), ("graph", 1)], kinds
  assert [type(g).__name__ for g, _ in jf.plan if g is not None] == ["HCQGraph", "CPUGraph", "HCQGraph"]

def test_a_submission_larger_than_the_aql_ring_goes_in_pieces(monkeypatch: pytest.MonkeyPatch):
  from tg_amd.kfd.driver import AMDComputeQueue
  name, _, pushes = _fresh(monkeypatch, "AMD:48")
  kfd = Device[name].kfd  # type: ignore[attr-defined]
  n = kfd.compute_queue.ring_size // 64
  q, start = AMDComputeQueue(), kfd.timeline_value
  for _ in range(n + 100): q.signal(kfd.timeline_signal, kfd.next_timeline())  # a graph's worth of packets, more than the ring holds
  q.submit(kfd)
  kfd.synchronize(5.0)
  assert pushes == [n + 100] and kfd.timeline_signal.value == start + n + 100

def test_a_ring_that_stops_reading_fails_typed_instead_of_hanging(monkeypatch: pytest.MonkeyPatch):
  from tg_core.hcq import HCQQueueError
  from tg_amd.kfd import uapi
  from tg_amd.kfd.driver import AMDComputeQueue
  name, mock, _ = _fresh(monkeypatch, "AMD:50")
  kfd = Device[name].kfd  # type: ignore[attr-defined]
  kfd.timeout_s = 0.2
  mock.hang(uapi.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL)
  q = AMDComputeQueue()
  for _ in range(kfd.compute_queue.ring_size // 64 + 1): q.signal(kfd.timeline_signal, kfd.next_timeline())
  with pytest.raises(HCQQueueError, match=r"AQL queue full for 0.2s: 1 packets wait .*stopped reading"): q.submit(kfd)

def test_a_collected_graph_gives_its_kernarg_area_back(monkeypatch: pytest.MonkeyPatch):
  import gc
  name, _, _ = _fresh(monkeypatch, "AMD:52")
  allocator = Device[name].kfd.allocator  # type: ignore[attr-defined]
  jf = TinyJit(_three_kernels)
  for _ in range(3): jf(Tensor(rnd(4, 16), device=name), Tensor(rnd(4, 16), device=name))
  assert jf.plan is not None and isinstance(jf.plan[0][0], HCQGraph)
  va = jf.plan[0][0].kernargs.va
  assert va in allocator.handles
  del jf
  gc.collect()
  assert va not in allocator.handles

def test_a_graph_whose_replay_faulted_keeps_its_kernarg_area(monkeypatch: pytest.MonkeyPatch):
  import gc
  name, mock, _ = _fresh(monkeypatch, "AMD:54")
  allocator = Device[name].kfd.allocator  # type: ignore[attr-defined]
  jf = TinyJit(_three_kernels)
  x, y = rnd(4, 16), rnd(4, 16)
  for _ in range(3): jf(Tensor(x, device=name), Tensor(y, device=name))
  assert jf.plan is not None
  va = jf.plan[0][0].kernargs.va
  monkeypatch.setattr(mock, "_dispatch", lambda *a: (_ for _ in ()).throw(MockKFDError("injected dispatch fault")))
  with pytest.raises(MockKFDError): jf(Tensor(x, device=name), Tensor(y, device=name))
  del jf
  gc.collect()
  assert va in allocator.handles  # the device may still read it: a leak, not a use after free

"""The native thread pool (tg_cpu_x86.pool): split kernels run by spinning workers and the calling thread, graph replays of
mixed tables in one native call, the caller finishing every chunk when the workers are parked, thread counts changing between
replays, and a clean exit. References are numpy's."""
from __future__ import annotations
import ctypes
import os
import subprocess
import sys
import textwrap
import time
from typing import Any, Callable

import numpy as np
import pytest
from cpu_testutil import c, compile_cpu, param, rng

from tg_core import Context, Tensor, TinyJit, dtypes
from tg_core.codegen.linearize import linearize
from tg_core.device import BufferSpec
from tg_core.uop.ops import KernelInfo, UOp

def _cover_kernel(n: int, name: str):  # noqa: ANN202
  """out[i] += 1 for i < n, split loop: a chunk run twice or skipped shows as a 2 or a 0."""
  out = param(0, dtypes.int32, n)
  r = rng(n)
  idx = out.index(r)
  prg, src = compile_cpu(linearize(UOp.sink(idx.store(idx.load() + c(1, dtypes.int32)).end(r), arg=KernelInfo(name=name))))
  assert "split loop: yes" in src
  return prg

def _axpy_kernel(n: int, name: str):  # noqa: ANN202
  """out[i] = a[i] * 3 + b[i]"""
  o, a, b = param(0, dtypes.float32, n), param(1, dtypes.float32, n), param(2, dtypes.float32, n)
  r = rng(n)
  st = o.index(r).store(a.index(r).load() * c(3.0, dtypes.float32) + b.index(r).load())
  prg, src = compile_cpu(linearize(UOp.sink(st.end(r), arg=KernelInfo(name=name))))
  assert "split loop: yes" in src
  return prg

class _Bufs:
  """Host buffers for a kernel, with the ctypes address array a launch takes."""
  def __init__(self, *arrays: np.ndarray):
    from tg_cpu_x86.allocator import CPUAllocator
    al = CPUAllocator()
    self.bufs = [al._alloc(a.nbytes, BufferSpec()) for a in arrays]
    for b, a in zip(self.bufs, arrays): b.mv[:] = a.tobytes()
    self.addrs = (ctypes.c_void_p * len(self.bufs))(*[b.addr for b in self.bufs])
    self.vals = (ctypes.c_int32 * 1)()
  def get(self, i: int, dt: type, n: int) -> np.ndarray: return np.frombuffer(self.bufs[i].mv, dtype=dt, count=n).copy()

@pytest.fixture
def pool():  # noqa: ANN201
  from tg_cpu_x86.pool import NativePool
  p = NativePool(2)
  yield p
  p.close()

def test_pool_split_matches_numpy(pool) -> None:  # noqa: ANN001
  n = 1001
  cover, axpy = _cover_kernel(n, "pool_cover"), _axpy_kernel(n, "pool_axpy")
  r = np.random.default_rng(0)
  a, b = r.standard_normal(n).astype(np.float32), r.standard_normal(n).astype(np.float32)
  cb, ab = _Bufs(np.zeros(n, np.int32)), _Bufs(np.zeros(n, np.float32), a, b)
  runs = 0
  for ncores in (2, 3, 4, 7, 64, 1000, 1001):  # more chunks than threads: the chunks are claimed, not assigned
    for _ in range(20):
      pool.run(cover.addr, ctypes.addressof(cb.addrs), ctypes.addressof(cb.vals), ncores)
      runs += 1
    pool.run(axpy.addr, ctypes.addressof(ab.addrs), ctypes.addressof(ab.vals), ncores)
    np.testing.assert_array_equal(cb.get(0, np.int32, n), np.full(n, runs, np.int32))
    np.testing.assert_array_equal(ab.get(0, np.float32, n), a * np.float32(3) + b)
  assert 0 < pool.handoff_s < 1.0

def test_pool_caller_runs_every_chunk_when_the_workers_are_parked(pool, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
  # workers that never wake (a loaded machine, or parked) must not stall a replay: the calling thread claims every chunk itself
  from tg_cpu_x86 import pool as pool_mod
  pool._word(pool_mod.IDLE_TICKS).value = 0  # park as soon as idle
  deadline = time.monotonic() + 30
  while any(pool.worker_state(w) != pool_mod.PARKED for w in range(pool.n)):
    assert time.monotonic() < deadline, [pool.worker_state(w) for w in range(pool.n)]
    time.sleep(1e-3)
  monkeypatch.setattr(pool, "wake", lambda k: None)  # never woken
  before = [pool.chunks_run(w) for w in range(pool.n)]
  n = 517
  cover = _cover_kernel(n, "pool_cover_parked")
  cb = _Bufs(np.zeros(n, np.int32))
  for ncores in (2, 3, 8):
    for _ in range(10): pool.run(cover.addr, ctypes.addressof(cb.addrs), ctypes.addressof(cb.vals), ncores)
  np.testing.assert_array_equal(cb.get(0, np.int32, n), np.full(n, 30, np.int32))
  assert [pool.chunks_run(w) for w in range(pool.n)] == before
  assert all(pool.worker_state(w) == pool_mod.PARKED for w in range(pool.n))

def test_pool_replays_a_mixed_table_without_a_pool() -> None:
  # a table whose split entries run without a pool (state null: their chunks in turn on this thread), entries with nothing to run
  from tg_cpu_x86.pool import _Entry, native
  n = 300
  cover = _cover_kernel(n, "pool_cover_nopool")
  cb = _Bufs(np.zeros(n, np.int32))
  tab = (_Entry * 4)()
  for e, nc in zip(tab, (1, 3, 0, 5)):
    e.fn, e.bufs, e.vals, e.ncores = cover.addr, ctypes.addressof(cb.addrs), ctypes.addressof(cb.vals), nc
  for _ in range(7): native().replay(tab, None, 0, 4)
  np.testing.assert_array_equal(cb.get(0, np.int32, n), np.full(n, 21, np.int32))

def _graph_fn(x: Tensor, big: Tensor) -> Tensor:
  a = (x + 1).realize()
  b = (big * 2).sum(1).realize()  # 4096 rows: split
  cc = (a * 3).realize()
  d = (big + 1).max(1).realize()  # split
  return ((cc + b[:8] + d[:8]).sum() + x[0]).realize()

def _graph_ref(x: np.ndarray, big: np.ndarray) -> np.ndarray:
  return ((x + 1) * 3 + (big * 2).sum(1)[:8] + (big + 1).max(1)[:8]).sum() + x[0]

def _jit_with_split_kernels(monkeypatch: pytest.MonkeyPatch, seed: int) -> Callable[[int], Any]:
  """_graph_fn under TinyJit with every kernel of 64 rows or more split over all threads: replays(n) runs it n times on new
  inputs, each checked against numpy, and returns its CPUGraph (None where it has none)."""
  from tg_cpu_x86 import runtime
  monkeypatch.setattr(runtime, "split_threads", lambda t1, trip, mx, handoff_s: min(mx, trip) if trip >= 64 else 1)
  r = np.random.default_rng(seed)
  big = r.standard_normal((4096, 10)).astype(np.float32)
  tb = Tensor(big, device="CPU")
  jf = TinyJit(_graph_fn)
  def replays(n: int) -> Any:
    for _ in range(n):
      x = r.standard_normal(8).astype(np.float32)
      np.testing.assert_allclose(jf(Tensor(x, device="CPU"), tb).numpy(), _graph_ref(x, big), rtol=1e-4, atol=1e-4)
    return jf.plan[0][0] if jf.plan is not None else None
  return replays

def test_graph_replays_split_and_single_kernels_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
  from tg_cpu_x86.graph import CPUGraph
  replays = _jit_with_split_kernels(monkeypatch, 11)
  with Context(NUM_CPU_THREADS=2): g = replays(60)  # many replays in a row, new inputs each
  assert isinstance(g, CPUGraph) and g.steps == [(0, len(g.kernels))], g and g.steps
  assert sorted({e.ncores for e in g.table}) == [1, 2], [e.ncores for e in g.table]

def test_graph_follows_num_cpu_threads_between_replays(monkeypatch: pytest.MonkeyPatch) -> None:
  from tg_cpu_x86 import runtime
  from tg_cpu_x86.graph import CPUGraph
  replays = _jit_with_split_kernels(monkeypatch, 12)
  for threads in (2, 3, 1, 4, 2):
    with Context(NUM_CPU_THREADS=threads):
      g = replays(runtime.TIMED_RUNS + 3)
      assert isinstance(g, CPUGraph) and max(e.ncores for e in g.table) == threads, [e.ncores for e in g.table]
  assert runtime.get_pool(1).n >= 3  # grown for 4 threads

def test_graph_replays_new_variable_values_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
  """A replay with a new value of a bound Variable (a decode step's start_pos) rebuilds only the kernels that read it, writing the
  value into their value arrays in place (the table's entries stay as they are), and every replay computes with its own value:
  checked against numpy for values across several of the thread decision's buckets, back and forth."""
  from tg_core import Variable
  from tg_cpu_x86 import runtime
  from tg_cpu_x86.graph import CPUGraph
  monkeypatch.setattr(runtime, "split_threads", lambda t1, trip, mx, handoff_s: min(mx, trip) if trip >= 64 else 1)
  r = np.random.default_rng(13)
  table = r.standard_normal((300, 16)).astype(np.float32)
  big = r.standard_normal((4096, 10)).astype(np.float32)
  tt, tb = Tensor(table, device="CPU").realize(), Tensor(big, device="CPU").realize()
  def f(x: Tensor, pos: Variable) -> Tensor:
    a = (x * 2).realize()  # no Variable
    s = (tt[:pos + 1] * a).sum(0).realize()  # reads pos (a symbolic axis)
    b = (tb * 3).sum(1).realize()  # no Variable, split
    return (s + b[:16]).realize()
  jf, v = TinyJit(f), Variable("pos", 0, 299)
  x = r.standard_normal(16).astype(np.float32)
  tx = Tensor(x, device="CPU").realize()
  arrays: dict[int, Any] = {}
  with Context(NUM_CPU_THREADS=2):
    for p in (3, 4, 5, 40, 41, 200, 7, 8, 299, 0, 100, 101, 102):
      got = jf(tx, v.bind(p)).numpy()
      np.testing.assert_allclose(got, (table[:p + 1] * x * 2).sum(0) + (big * 3).sum(1)[:16], rtol=1e-4, atol=1e-4)
      g = jf.plan[0][0] if jf.plan is not None else None
      if isinstance(g, CPUGraph):
        for i, k in enumerate(g.kernels):
          assert g.table[i].vals == ctypes.addressof(k.vals_arr)
          if k.names == () and i in arrays: assert k.vals_arr is arrays[i]  # a kernel without Variables: not rebuilt
          arrays[i] = k.vals_arr
  assert isinstance(g, CPUGraph) and any(k.names for k in g.kernels)

@pytest.mark.parametrize("arch", ["", "x86-64-v3"])
def test_pool_exits_cleanly_while_workers_spin(arch: str) -> None:
  # the interpreter exits with the workers spinning (just used) and parked: no hang, no crash on the unmapped code; also with the
  # pool and kernels compiled for an AVX2-only target (TG_CPU_ARCH), the fallback of hosts without AVX-512
  code = textwrap.dedent("""
  import numpy as np
  from tg_core import Context, Tensor
  from tg_cpu_x86 import runtime
  runtime.split_threads = lambda t1, trip, mx, handoff_s: min(mx, trip)
  x = np.arange(1 << 16, dtype=np.float32)
  with Context(NUM_CPU_THREADS=3):
    for _ in range(4): got = (Tensor(x, device="CPU") * 2).numpy()
  np.testing.assert_array_equal(got, x * 2)
  p = runtime.get_pool(2)
  assert p.n == 2 and all(t.is_alive() for t in p.threads)
  print("OK")
  """)
  env = {**os.environ, "TG_CPU_ARCH": arch} if arch else os.environ.copy()
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
  assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr[-3000:]

def test_pool_close_stops_its_threads() -> None:
  from tg_cpu_x86.pool import NativePool
  p = NativePool(2)
  p.close()
  assert p.closed and not any(t.is_alive() for t in p.threads)

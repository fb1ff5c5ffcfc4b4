"""The CPU device end to end: multi-core splitting, the on-disk compile cache, running without a C compiler, memory,
and plugin wiring."""
from __future__ import annotations
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from cpu_testutil import c, compile_cpu, param, rng

from tg_core import Context, Tensor, dtypes
from tg_core.codegen.linearize import linearize
from tg_core.device import Buffer, Device
from tg_core.uop import Ops
from tg_core.uop.ops import AxisType, KernelInfo, UOp

def _run(code: str, env: dict[str, str] | None = None, timeout: int = 600) -> str:
  out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **(env or {})})
  assert out.returncode == 0, f"stdout:\n{out.stdout[-3000:]}\nstderr:\n{out.stderr[-3000:]}"
  return out.stdout

# *** multi-core ***
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_split_matches_numpy(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
  from tg_cpu_x86 import runtime
  monkeypatch.setattr(runtime, "split_threads", lambda t1, trip, mx, handoff_s: min(mx, trip))  # split even small kernels
  used: list[int] = [1]
  orig = runtime.NativePool.run
  def spy(self: runtime.NativePool, fn: int, bufs: int, vals: int, ncores: int) -> None:
    used.append(ncores)
    orig(self, fn, bufs, vals, ncores)
  monkeypatch.setattr(runtime.NativePool, "run", spy)
  r = np.random.default_rng(threads)
  a, b = r.standard_normal((67, 45)).astype(np.float32), r.standard_normal((45, 31)).astype(np.float32)
  x = r.standard_normal((1001, 7)).astype(np.float32)
  with Context(NUM_CPU_THREADS=threads):
    for _ in range(runtime.TIMED_RUNS + 1):  # the first runs are timed on one thread, then the split is decided
      mm = (Tensor(a, device="CPU") @ Tensor(b, device="CPU")).numpy()
      ew = (Tensor(x, device="CPU") * 2 + 1).numpy()
      sm = Tensor(x, device="CPU").sum(1).numpy()
  np.testing.assert_allclose(mm, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
  np.testing.assert_array_equal(ew, x * 2 + 1)
  np.testing.assert_allclose(sm, x.sum(1), rtol=1e-5, atol=1e-5)
  assert used and max(used) == threads, used

def test_split_chunks_cover_the_loop_exactly() -> None:
  # out[i] += 1 for every i: each index must be written by exactly one chunk, for any core count and trip count
  for n in (1, 2, 5, 97, 1000):
    out = param(0, dtypes.int32, n)
    r = rng(n)
    idx = out.index(r)
    uops = linearize(UOp.sink(idx.store(idx.load() + c(1, dtypes.int32)).end(r), arg=KernelInfo(name=f"cover{n}")))
    prg, src = compile_cpu(uops)
    assert "split loop: yes" in src
    from tg_core.device import BufferSpec
    from tg_cpu_x86.allocator import CPUAllocator
    buf = CPUAllocator()._alloc(4 * n, BufferSpec())
    import ctypes
    addrs = (ctypes.c_void_p * 1)(buf.addr)
    vals = (ctypes.c_int32 * 1)()
    assert prg.fxn(addrs, vals, 0, 0) == n  # n_cores == 0: the query returns the trip count and writes nothing
    assert not np.frombuffer(buf.mv, dtype=np.int32).any()
    for cores in (1, 2, 3, 7, 16):
      for core in range(cores): prg.fxn(addrs, vals, core, cores)
    np.testing.assert_array_equal(np.frombuffer(buf.mv, dtype=np.int32), np.full(n, 5, dtype=np.int32))

def test_small_kernels_compile_quick_then_full(monkeypatch: pytest.MonkeyPatch) -> None:
  # the renderer writes the kernel's work into the IR header; below QUICK_WORK the first compile runs no optimization passes,
  # and the program compiles the kernel again at the full level once its runs add up to UPGRADE_S
  import ctypes
  from tg_core.device import BufferSpec
  from tg_cpu_x86 import runtime
  from tg_cpu_x86.abi import kernel_work
  from tg_cpu_x86.allocator import CPUAllocator
  from tg_cpu_x86.compiler import QUICK_WORK, full_tier, pass_level
  from tg_cpu_x86.device import _compiler
  from tg_cpu_x86.renderer import LLVMRenderer
  monkeypatch.setattr(runtime, "UPGRADE_S", 0.0)  # upgrade after the first run
  for n, quick in ((97, True), (QUICK_WORK // 3, True), (QUICK_WORK // 3 + 1, False)):
    out = param(0, dtypes.int32, n)
    r = rng(n)
    idx = out.index(r)
    src = LLVMRenderer().render(linearize(UOp.sink(idx.store(idx.load() + c(1, dtypes.int32)).end(r), arg=KernelInfo(name=f"work{n}"))))
    assert kernel_work(src) == 3 * n  # a load, an add and a store per iteration
    assert pass_level(src, 3) == (0 if quick else 3) and pass_level(full_tier(src), 3) == 3
    if n == 97: small = src
    prg = runtime.CPUProgram("CPU", f"work{n}", _compiler().compile_cached(src))  # as the realize path compiles (the quick IR is kept)
    assert prg.quick == quick
    buf = CPUAllocator()._alloc(4 * n, BufferSpec())
    addrs, vals = (ctypes.c_void_p * 1)(buf.addr), (ctypes.c_int32 * 1)()
    with Context(NUM_CPU_THREADS=1):
      quick_lib = prg.lib
      for _ in range(2): prg.launch(addrs, vals, ())
    assert not prg.quick and (prg.lib != quick_lib) == quick  # the second run ran the fully optimized object
    np.testing.assert_array_equal(np.frombuffer(buf.mv, dtype=np.int32), np.full(n, 2, dtype=np.int32))
  assert kernel_work("define void @f() {\n  ret void\n}") is None and pass_level("define void @f() {}", 3) == 3  # IR without the header
  with Context(BEAM=1):  # BEAM times candidates as they will run: at the full level
    assert _compiler().quick_source(_compiler().compile_cached(small.replace("work97", "beamwork97"))) is None
  assert _compiler().quick_source(_compiler().compile_cached(small.replace("work97", "nobeamwork97"))) == small.replace("work97", "nobeamwork97")

def test_a_captured_kernel_compiles_at_the_full_level(monkeypatch: pytest.MonkeyPatch) -> None:
  # a kernel TinyJit captures into a CPUGraph is replayed many times: one of at least TINY_WORK ops is upgraded when captured,
  # a tiny one stays quick; the replays compute the same values either way
  from tg_core import TinyJit
  from tg_cpu_x86 import runtime
  from tg_cpu_x86.compiler import TINY_WORK
  r = np.random.default_rng(3)
  a, b = r.standard_normal((64, 64)).astype(np.float32), r.standard_normal((64, 64)).astype(np.float32)
  x = r.standard_normal((8,)).astype(np.float32)
  @TinyJit
  def f(ta: Tensor, tb: Tensor, tx: Tensor) -> tuple[Tensor, Tensor]: return ((ta @ tb).realize(), ((tx * 3).realize() + 1).realize())
  for _ in range(4):
    mm, ew = f(Tensor(a, device="CPU"), Tensor(b, device="CPU"), Tensor(x, device="CPU"))
    np.testing.assert_allclose(mm.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(ew.numpy(), x * 3 + 1)
  from tg_cpu_x86.abi import kernel_work
  assert f.captured is not None
  progs = [(runner.prg, kernel_work(runner.p.src)) for runner, _, _ in f.captured]
  assert progs and all(prg.quick == (work < TINY_WORK) for prg, work in progs), progs
  assert any(work >= TINY_WORK for _, work in progs)
  # the tiny kernels, launched outside the graph until they are compiled again, and the graph replayed after: still the same
  # values (the + 1 kernel's buffers are the capture's own, so its table entry isn't rebuilt: it runs the quick code, kept loaded)
  tiny = [prg for prg, work in progs if work < TINY_WORK]
  assert len(tiny) == 2
  monkeypatch.setattr(runtime, "UPGRADE_S", 0.0)
  for _ in range(2): ((Tensor(x, device="CPU") * 3).realize() + 1).realize()
  assert not any(prg.quick for prg in tiny)
  for _ in range(2):
    mm, ew = f(Tensor(a, device="CPU"), Tensor(b, device="CPU"), Tensor(x, device="CPU"))
    np.testing.assert_array_equal(ew.numpy(), x * 3 + 1)

def test_split_with_a_hoisted_row_statistic(monkeypatch: pytest.MonkeyPatch) -> None:
  # an rms_norm fused into its matvec: the norm's reduce loop runs at top level (each core computes it), the output loop splits
  from tg_cpu_x86 import runtime
  from tg_core.engine.realize import get_runner, run_schedule
  monkeypatch.setattr(runtime, "split_threads", lambda t1, trip, mx, handoff_s: min(mx, trip))  # split even small kernels
  r = np.random.default_rng(7)
  x, w = r.standard_normal((1, 64)).astype(np.float32), r.standard_normal((97, 64)).astype(np.float32)
  ref = (x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5)) @ w.T
  with Context(NUM_CPU_THREADS=2):
    for _ in range(runtime.TIMED_RUNS + 1):
      xt = Tensor(x, device="CPU")
      t = (xt * (xt.square().mean(-1, keepdim=True) + 1e-5).rsqrt()) @ Tensor(w, device="CPU").T
      items = t.schedule()
      kernels = [si for si in items if si.ast.op is Ops.SINK]
      assert len(kernels) == 1
      assert "split loop: yes" in get_runner("CPU", kernels[0].ast).p.src
      run_schedule(items)
      np.testing.assert_allclose(t.numpy(), ref, rtol=1e-4, atol=1e-4)

def test_reduce_only_kernel_is_not_split() -> None:
  n = 100
  inp, out = param(1, dtypes.float32, n), param(0, dtypes.float32, 1)
  from tg_core.dtype import AddrSpace
  from tg_core.uop.ops import ParamArg
  acc = UOp(Ops.BUFFER, dtypes.float32, arg=ParamArg(0, dtypes.float32, 1, addrspace=AddrSpace.REG))
  r, zero = rng(n, 0, AxisType.REDUCE), c(0, dtypes.int32)
  cur = acc.after(acc.index(zero).store(c(0.0, dtypes.float32)), r).index(zero)
  st = out.index(zero).store(acc.after(cur.store(cur.load() + inp.index(r).load()).end(r)).index(zero).load())
  _, src = compile_cpu(linearize(UOp.sink(st, arg=KernelInfo(name="full_reduce"))))
  assert "split loop: no" in src

def test_split_threads_weighs_the_handoff() -> None:
  from tg_cpu_x86.runtime import split_threads
  assert split_threads(1e-3, 1000, 4, 0.0) == 4           # a free handoff: every core
  assert split_threads(1e-3, 3, 4, 0.0) == 3              # never more threads than iterations of the split loop
  assert split_threads(10e-6, 1000, 4, 20e-6) == 1        # a kernel shorter than the handoff stays on the calling thread
  assert split_threads(1e-3, 1000, 2, 100e-6) == 2        # saves 500 us for one 100 us handoff
  assert split_threads(1e-3, 1000, 8, 100e-6) == 2        # more threads would cost more handoffs than they save
  assert split_threads(1e-3, 1000, 1, 0.0) == 1

def test_large_elementwise_uses_threads() -> None:
  x = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
  with Context(NUM_CPU_THREADS=2):
    got = (Tensor(x, device="CPU") * 3 - 1).numpy()
  np.testing.assert_array_equal(got, x * 3 - 1)

# *** TinyJit replay through CPUGraph ***
def test_jit_replays_through_the_cpu_graph() -> None:
  from tg_core import TinyJit, Variable
  from tg_cpu_x86.graph import CPUGraph
  def f(x: Tensor, y: Tensor) -> Tensor:
    s = (x + y).realize()
    return (s * 2).sum(1).realize()
  jf = TinyJit(f)
  r = np.random.default_rng(3)
  for _ in range(5):  # new input buffers every call
    x, y = r.standard_normal((6, 9)).astype(np.float32), r.standard_normal((6, 9)).astype(np.float32)
    np.testing.assert_allclose(jf(Tensor(x, device="CPU"), Tensor(y, device="CPU")).numpy(), ((x + y) * 2).sum(1), rtol=1e-5, atol=1e-5)
  assert jf.plan is not None and len(jf.plan) == 1 and isinstance(jf.plan[0][0], CPUGraph) and jf.plan[0][1] == [0, 1]
  a = r.standard_normal((3, 10)).astype(np.float32)
  ta = Tensor(a, device="CPU")
  jv = TinyJit(lambda t: (t + 1).realize())
  for i in range(1, 7):  # a bound Variable: its value changes on every replay
    out = jv(ta[:, :Variable("i", 1, 10).bind(i)])
    np.testing.assert_array_equal(out[:3, :i].numpy(), a[:, :i] + 1)
  assert jv.plan is not None and isinstance(jv.plan[0][0], CPUGraph)
  with pytest.raises(ValueError, match="replayed with 1 buffer lists"): jf.plan[0][0]([[]], [{}])

def test_cpu_graph_loop_and_split_kernels_interleave(monkeypatch: pytest.MonkeyPatch) -> None:
  # small kernels and big ones split over the pool in one table; new inputs, a Variable and the thread count change between
  # replays, and every replay matches numpy
  from tg_core import TinyJit, Variable
  from tg_cpu_x86 import runtime
  from tg_cpu_x86.graph import CPUGraph
  monkeypatch.setattr(runtime, "split_threads", lambda t1, trip, mx, handoff_s: min(mx, trip) if trip >= 64 else 1)
  launched: list[str] = []
  orig = runtime.CPUProgram.launch
  monkeypatch.setattr(runtime.CPUProgram, "launch", lambda self, *a: launched.append(self.name) or orig(self, *a))
  def f(x: Tensor, big: Tensor, i: UOp) -> Tensor:
    a = (x + 1).realize()
    b = (big * 2).sum(1).realize()  # 4096 rows: split
    c = (a * 3).realize()
    v = (big[:, :i] + 1).sum(1).realize()  # sized by the Variable
    return ((c + b[:8] + v[:8]).sum() + x[0]).realize()
  r = np.random.default_rng(5)
  big = r.standard_normal((4096, 10)).astype(np.float32)
  tb = Tensor(big, device="CPU")
  jf = TinyJit(f)
  with Context(NUM_CPU_THREADS=2):
    for step in range(9):
      if step == 6: monkeypatch.setattr(runtime, "split_threads", lambda t1, trip, mx, handoff_s: 1)
      x = r.standard_normal(8).astype(np.float32)
      i = 1 + step % 10
      with Context(NUM_CPU_THREADS=2 if step < 6 else 1):
        got = jf(Tensor(x, device="CPU"), tb, Variable("i", 1, 10).bind(i)).numpy()
      want = ((x + 1) * 3 + (big * 2).sum(1)[:8] + (big[:8, :i] + 1).sum(1)).sum() + x[0]
      np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
      if step == 4: launched.clear()  # every thread count decided (the Variable's for i = 4, 5 just now)
      if step == 5:  # the whole table, small kernels and split ones, replayed in one native call
        g = jf.plan[0][0] if jf.plan is not None else None
        assert isinstance(g, CPUGraph) and g.steps == [(0, len(g.kernels))], g and g.steps
        assert sorted({e.ncores for e in g.table}) == [1, 2], [e.ncores for e in g.table]
  # after step 4: step 5 launched nothing from Python (i = 6: decided at i = 4, 5, the same power-of-two bucket), step 6 (a new
  # thread count) all five, step 7 only the Variable's (i = 8: a new bucket), step 8 none (i = 9: decided at 8)
  assert len(launched) == 0 + 5 + 1 + 0, launched

# *** compile cache ***
def test_disk_cache_hit(tmp_path: pytest.TempPathFactory) -> None:
  code = """
  import numpy as np
  from tg_cpu_x86 import compiler
  calls = []
  orig = compiler.LLVMCompiler.compile
  compiler.LLVMCompiler.compile = lambda self, src: calls.append(1) or orig(self, src)
  from tg_core import Tensor
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  got = (Tensor(a, device="CPU") * 3.25 + 7).sum(1).numpy()
  np.testing.assert_allclose(got, (a * 3.25 + 7).sum(1))
  print("COMPILES", len(calls))
  """
  env = {"TG_CACHE_DIR": str(tmp_path), "CACHELEVEL": "2"}
  first = _run(code, env)
  assert "COMPILES 0" not in first, first
  second = _run(code, env)
  assert "COMPILES 0" in second, second
  assert (tmp_path / "cache.db").exists()

def test_cache_hits_never_load_llvm(tmp_path: pytest.TempPathFactory) -> None:
  # a process whose kernels all come from the disk cache gets its host facts from there too: LLVM (neither llvmlite.binding nor
  # its library through llvmcapi) never loads
  code = """
  import sys
  import numpy as np
  from tg_core import Tensor
  from tg_cpu_x86 import llvmcapi
  a = (np.arange(64 * 48, dtype=np.float32).reshape(64, 48) % 7) / 10
  b = (np.arange(48 * 40, dtype=np.float32).reshape(48, 40) % 5) / 10
  np.testing.assert_allclose((Tensor(a, device="CPU") @ Tensor(b, device="CPU")).exp2().numpy(), np.exp2(a.astype(np.float64) @ b), rtol=1e-5)
  print("LLVM", "llvmlite.binding" in sys.modules or llvmcapi._lib is not None)
  """
  env = {"TG_CACHE_DIR": str(tmp_path), "CACHELEVEL": "2", "TRANSCENDENTAL": "0"}  # exp2 from libm: the loader resolves it without LLVM
  assert "LLVM True" in _run(code, env)
  assert "LLVM False" in _run(code, env)

def test_host_facts_cached_match_llvm(tmp_path: pytest.TempPathFactory) -> None:
  # what the disk cache hands back (second process) is what LLVM's host detection says; TG_CPU_ARCH is part of the key
  code = """
  import llvmlite.binding as llvm
  from tg_cpu_x86.compiler import host_facts, _host_key
  llvm.initialize_native_target()
  want = llvm.get_process_triple(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten(), ".".join(map(str, llvm.llvm_version_info))
  assert host_facts() == want, (host_facts(), want)
  print("KEY", _host_key())
  """
  env = {"TG_CACHE_DIR": str(tmp_path), "CACHELEVEL": "2"}
  keys = [next(ln for ln in _run(code, env).splitlines() if ln.startswith("KEY")) for _ in range(2)]
  assert keys[0] == keys[1]
  arch = _run("from tg_cpu_x86.compiler import host_facts, _host_key\nprint(host_facts()[1], _host_key())", {**env, "TG_CPU_ARCH": "x86-64-v2"})
  assert arch.startswith("x86-64-v2 ") and f"KEY {arch.split(' ', 1)[1].strip()}" != keys[0]

def test_cachekey_names_the_target() -> None:
  from tg_cpu_x86.compiler import host_target
  from tg_cpu_x86.device import _compiler
  triple, cpu, _ = host_target()
  key = _compiler().cachekey
  assert key is not None and triple in key and cpu in key and "llvm" in key and "-O" in key

# *** no C compiler ***
def test_runs_without_a_c_compiler() -> None:
  venv_bin = os.path.dirname(sys.executable)
  env = {"PATH": venv_bin, "TG_CACHE_DIR": os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tg-nocc-{os.getpid()}"), "CACHELEVEL": "0"}
  code = """
  import shutil
  import numpy as np
  for cc in ("cc", "gcc", "clang", "ld", "as"): assert shutil.which(cc) is None, cc
  from tg_core import Tensor, Device
  assert Device.DEFAULT == "CPU"
  r = np.random.default_rng(0)
  a, b = r.standard_normal((33, 65)).astype(np.float32), r.standard_normal((65, 17)).astype(np.float32)
  got = (Tensor(a) @ Tensor(b)).numpy()
  np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
  print("ok")
  """
  out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600, env=env)
  assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]
  shutil.rmtree(env["TG_CACHE_DIR"], ignore_errors=True)

# *** memory ***
def test_allocator_zero_copy_views_and_transfer() -> None:
  b = Buffer("CPU", 16, dtypes.float32).allocate()
  b.copyin(memoryview(np.arange(16, dtype=np.float32).tobytes()))
  mv = b.as_buffer(force_zero_copy=True)
  assert np.frombuffer(mv, dtype=np.float32)[5] == 5
  assert b._buf.addr % 4096 == 0  # page-aligned
  v = b.view(4, dtypes.float32, 8)
  np.testing.assert_array_equal(v.numpy(), [2, 3, 4, 5])
  np.frombuffer(v.as_buffer(force_zero_copy=True), dtype=np.float32)[:] = -1  # writes through to the base
  assert (b.numpy()[2:6] == -1).all()
  other = Buffer("CPU:1", 16, dtypes.float32).allocate().copy_from(b)
  np.testing.assert_array_equal(other.numpy(), b.numpy())
  del v

def test_large_buffer_starts_on_a_huge_page() -> None:
  from tg_cpu_x86.allocator import HUGE_PAGE
  n = HUGE_PAGE + 12  # floats: a buffer of 8 MiB and a bit, not a multiple of the huge page
  x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
  b = Buffer("CPU", n, dtypes.float32).allocate()
  assert b._buf.addr % HUGE_PAGE == 0 and b.nbytes == 4 * n
  b.copyin(memoryview(x).cast("B"))
  np.testing.assert_array_equal(np.frombuffer(b.as_buffer(force_zero_copy=True), dtype=np.float32), x)
  t = Tensor(x, device="CPU")
  np.testing.assert_allclose((t * 2).sum().item(), float((x.astype(np.float64) * 2).sum()), rtol=1e-4)

def test_large_buffer_keeps_no_memory_past_its_end() -> None:
  """The huge-page advice covers a buffer's whole huge pages only: filling it leaves nothing resident past its last 4 KiB page
  (a huge page over its partial tail would make up to 2 MiB beyond it resident)."""
  import ctypes
  import mmap
  import pathlib
  from tg_cpu_x86.allocator import HUGE_PAGE
  thp = pathlib.Path("/sys/kernel/mm/transparent_hugepage/enabled")
  if not thp.exists() or "[never]" in thp.read_text(): pytest.skip("no transparent huge pages on this host: nothing to waste")
  # one page short of two huge pages: the second huge page lies inside the mapping wherever the aligned buffer starts in it
  size = 2 * HUGE_PAGE - mmap.PAGESIZE
  b = Buffer("CPU", size, dtypes.uint8).allocate()
  b.copyin(memoryview(bytes(range(256)) * (size // 256)).cast("B"))  # every page of the buffer touched
  cb = b._buf
  end, past = cb.addr + size, mmap.PAGESIZE  # the page after the buffer, in the huge page of its tail
  vec = (ctypes.c_ubyte * (past // mmap.PAGESIZE))()
  libc = ctypes.CDLL(None, use_errno=True)
  assert libc.mincore(ctypes.c_void_p(end), ctypes.c_size_t(past), vec) == 0, ctypes.get_errno()
  assert sum(v & 1 for v in vec) == 0, f"{sum(v & 1 for v in vec)} pages resident past the buffer's end"
  np.testing.assert_array_equal(np.frombuffer(b.as_buffer(force_zero_copy=True), dtype=np.uint8)[-256:], np.arange(256, dtype=np.uint8))

def test_external_ptr_and_empty_buffer() -> None:
  from tg_core.device import BufferSpec
  host = np.arange(8, dtype=np.int32)
  b = Buffer("CPU", 8, dtypes.int32, options=BufferSpec(external_ptr=host.ctypes.data)).allocate()
  np.testing.assert_array_equal(b.numpy(), host)
  assert Buffer("CPU", 0, dtypes.float32).allocate().numpy().size == 0

def test_kernel_on_a_view_of_a_buffer() -> None:
  t = Tensor(np.arange(20, dtype=np.float32), device="CPU").realize()
  np.testing.assert_array_equal((t[5:15] * 2).numpy(), np.arange(5, 15, dtype=np.float32) * 2)

def test_copy_between_cpu_devices() -> None:
  a = np.arange(6, dtype=np.float32)
  np.testing.assert_array_equal((Tensor(a, device="CPU:1") + 1).to("CPU").numpy(), a + 1)

# *** plugin wiring ***
def test_default_device_is_cpu_and_renderer_listed_once() -> None:
  out = _run("""
  from tg_core import Device
  print(Device.DEFAULT, Device["CPU"].renderer_names(), type(Device["CPU"].renderer).__name__)
  """, env={"DEV": ""})
  assert out.split()[0] == "CPU" and "['LLVM']" in out and "LLVMRenderer" in out, out

def test_dev_cpu_llvm_selects_the_renderer() -> None:
  out = _run("""
  from tg_core import Tensor, Device
  from tg_cpu_x86.renderer import LLVMRenderer
  print((Tensor([1.0, 2.0]) * 2).tolist(), isinstance(Device["CPU"].renderer, LLVMRenderer), Device["CPU"].renderer.target_name())
  """, env={"DEV": "CPU:LLVM"})
  assert "[2.0, 4.0] True LLVM" in out, out

def test_manifest_is_light() -> None:
  out = _run("""
  import sys
  import tg_core
  before = set(sys.modules)
  import tg_cpu_x86.plugin
  new = set(sys.modules) - before
  assert not any(m.split(".")[0] in ("llvmlite", "ctypes", "numpy") for m in new), sorted(new)
  assert "tg_cpu_x86.device" not in new
  print(tg_cpu_x86.plugin.tg_api)
  """)
  assert "(1, 2)" in out

def test_renderer_does_not_import_the_runtime() -> None:
  out = _run("""
  import sys
  import tg_cpu_x86.renderer
  assert "llvmlite" not in sys.modules and "tg_cpu_x86.runtime" not in sys.modules
  print("ok")
  """)
  assert "ok" in out

def test_supported_dtypes_and_knobs() -> None:
  r = Device["CPU"].renderer
  from tg_cpu_x86.compiler import host_target
  from tg_cpu_x86.runtime import resolves
  # float16 is native where the host converts it in hardware and libgcc's double -> half helper links
  f16c = "+f16c" in host_target()[2].split(",") and resolves("__truncdfhf2")
  assert r.caps.native_dtypes == {dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
                                  dtypes.int64, dtypes.uint64, dtypes.float32, dtypes.float64, *([dtypes.float16] if f16c else [])}
  assert not r.caps.has_grid and not r.caps.has_local and r.caps.native_transcendentals == {Ops.SQRT, Ops.RECIPROCAL}
  assert r.caps.archs == (host_target()[1],) and r.caps.arch == host_target()[1]

@pytest.mark.parametrize("emulated", ["", "float16"])
def test_half_dtypes_work(emulated: str) -> None:
  # float16 native (F16C hosts) and emulated by the core: each op rounds to float16 as numpy's does
  a = np.random.default_rng(0).uniform(-2, 2, 64).astype(np.float16)
  b = np.random.default_rng(1).uniform(-2, 2, 64).astype(np.float16)
  with Context(EMULATED_DTYPES=emulated):
    got = (Tensor(a, device="CPU") * 3 + 1).numpy()
    prod = (Tensor(a, device="CPU") * Tensor(b, device="CPU") + Tensor(b, device="CPU")).numpy()
    dot = (Tensor(a, device="CPU").cast(dtypes.float32) * Tensor(b, device="CPU").cast(dtypes.float32)).sum().numpy()
    wide = np.concatenate([np.random.default_rng(2).uniform(-7e4, 7e4, 64), [2.98e-8, 5.97e-8, 65519.99, 65520.0, 1e-10]])
    narrowed = Tensor(wide, device="CPU").cast(dtypes.float16).numpy()  # double -> half: the one conversion F16C lacks
  np.testing.assert_array_equal(got, (a * np.float16(3) + np.float16(1)).astype(np.float16))
  np.testing.assert_array_equal(prod, a * b + b)
  np.testing.assert_allclose(dot, (a.astype(np.float32) * b.astype(np.float32)).sum(), rtol=1e-5)
  with np.errstate(over="ignore"): np.testing.assert_array_equal(narrowed, wide.astype(np.float16))
  bf = Tensor(a.astype(np.float32), device="CPU").cast(dtypes.bfloat16).cast(dtypes.float32).numpy()
  np.testing.assert_allclose(bf, a.astype(np.float32), rtol=1e-2)

"""The native thread pool: split kernels (see `tg_cpu_x86.abi`) run their chunks on spinning worker threads, and a graph's whole
table of kernels, split or not, replays in one foreign call.

Everything that runs per kernel is LLVM IR (`POOL_IR`, compiled once and cached on disk like a kernel), no Python:
- `tg_pool_replay(table, state, start, count)` walks table entries {fn, bufs, vals, ncores}: ncores == 1 calls fn(bufs, vals,
  0, 1); ncores > 1 publishes the kernel as a job in the state block and claims its chunks itself alongside the workers, then
  waits until every claimed chunk is done (the barrier) before the next entry; ncores == 0 is a kernel with nothing to run.
- `tg_pool_worker(state, 0, w, 0)` is worker w's loop: it spins (`pause`) on the state block, claims and runs chunks, and
  returns after spinning idle for `IDLE_SPIN_S` with no replay running (or at shutdown); its Python thread then blocks on a
  lock. While a replay runs the workers don't park, however long this thread spends on single-thread kernels or its own
  chunks between jobs. A worker that has seen no job for `YIELD_AFTER_S` yields its core at each check: where it shares a
  core with the calling thread (an oversubscribed machine) that hands the core back, instead of spinning through the caller's
  time slice (a caller that publishes no job while it waits for the core); on an idle core sched_yield returns at once.
- `tg_pool_kick(state, out, k, 0)` marks workers 0..k-1 kicked (they restart their idle timer) and reports which had parked, for
  Python to release their locks: done once per replay (`NativePool.wake`), not per kernel.

A job is claimed through one 64-bit ticket, generation << 32 | next chunk, with compare-and-swap: a worker that read an old job
can never claim a chunk of a newer one (the generation no longer matches). The caller claims chunks from the same ticket, so
a parked or late worker costs no more than running its chunks on the calling thread: correctness never waits on a worker,
only on chunks already claimed (a running chunk finishes). The caller yields its core (sched_yield) while it waits longer than
`YIELD_AFTER_S` on such a chunk: on an oversubscribed machine the worker running it may be waiting for that core."""
from __future__ import annotations
import atexit
import ctypes
import functools
import threading
import time
import _thread
from typing import Any

# seconds a worker spins with no job before it parks: covers the Python between a model's kernels and between decode steps
# (a wake from parked costs tens of microseconds), bounded so that an idle process burns no CPU
IDLE_SPIN_S = 2e-3
# seconds the caller spins on a chunk a worker claimed, or a worker spins without a job, before it yields its core to other
# threads at each check (sched_yield: returns at once on an idle core; on a loaded one the others run)
YIELD_AFTER_S = 50e-6
# the busy chunk timed to measure the handoff: long enough that a spinning worker claims its chunk before the caller would
PROBE_S = 4e-6

# state block: byte offsets; fields written by different threads are on their own 64-byte lines
TICKET, DONE, FN, BUFS, VALS, NCHUNKS, STOP, IDLE_TICKS, YIELD_TICKS, ACTIVE, WORKERS, LINE = 0, 64, 128, 136, 144, 152, 192, 200, 208, 216, 256, 64
# each worker's line: its state word (0 parked, 1 spinning, 2 kicked: restart the idle timer) and the chunks it ran
PARKED, SPINNING, KICKED = 0, 1, 2

# the addresses of the current job's fields in the state block %st, as the caller's and the workers' functions name them
_JOB_FIELDS = "\n".join(f"  %{name} = getelementptr i8, ptr %st, i64 {off}"
                        for name, off in (("pdone", DONE), ("pfn", FN), ("pbufs", BUFS), ("pvals", VALS), ("pn", NCHUNKS)))

POOL_IR = f"""
declare void @llvm.x86.sse2.pause()
declare i64 @llvm.readcyclecounter()
declare i32 @sched_yield()

define i64 @tg_pool_ticks(ptr %a, ptr %b, i32 %c, i32 %d) {{
  %t = call i64 @llvm.readcyclecounter()
  ret i64 %t
}}

; a probe chunk: spins for vals[0] ticks
define i64 @tg_pool_busy(ptr %bufs, ptr %vals, i32 %core, i32 %ncores) {{
entry:
  %d32 = load i32, ptr %vals, align 4
  %d = sext i32 %d32 to i64
  %t0 = call i64 @llvm.readcyclecounter()
  br label %spin
spin:
  call void @llvm.x86.sse2.pause()
  %t = call i64 @llvm.readcyclecounter()
  %el = sub i64 %t, %t0
  %more = icmp ult i64 %el, %d
  br i1 %more, label %spin, label %out
out:
  ret i64 0
}}

; the caller's side of one split kernel: publish the job, claim chunks, wait for the claimed ones
define internal void @tg_pool_split(ptr %st, ptr %fn, ptr %bufs, ptr %vals, i64 %n) {{
entry:
{_JOB_FIELDS}
  %pyield = getelementptr i8, ptr %st, i64 {YIELD_TICKS}
  %t0 = load atomic i64, ptr %st monotonic, align 8
  %g0 = lshr i64 %t0, 32
  %g1 = add i64 %g0, 1
  %tk = shl i64 %g1, 32
  store atomic ptr %fn, ptr %pfn monotonic, align 8
  store atomic ptr %bufs, ptr %pbufs monotonic, align 8
  store atomic ptr %vals, ptr %pvals monotonic, align 8
  store atomic i64 %n, ptr %pn monotonic, align 8
  store atomic i64 0, ptr %pdone monotonic, align 8
  store atomic i64 %tk, ptr %st release, align 8
  %n32 = trunc i64 %n to i32
  br label %claim
claim:
  %t = load atomic i64, ptr %st acquire, align 8
  %i = and i64 %t, 4294967295
  %left = icmp ult i64 %i, %n
  br i1 %left, label %try, label %wait
try:
  %t1 = add i64 %t, 1
  %r = cmpxchg ptr %st, i64 %t, i64 %t1 acq_rel monotonic
  %ok = extractvalue {{ i64, i1 }} %r, 1
  br i1 %ok, label %run, label %claim
run:
  %i32 = trunc i64 %i to i32
  %x = call i64 %fn(ptr %bufs, ptr %vals, i32 %i32, i32 %n32)
  %d0 = atomicrmw add ptr %pdone, i64 1 release
  br label %claim
wait:
  %w0 = call i64 @llvm.readcyclecounter()
  %ylim = load atomic i64, ptr %pyield monotonic, align 8
  br label %check
check:
  %d = load atomic i64, ptr %pdone acquire, align 8
  %fin = icmp uge i64 %d, %n
  br i1 %fin, label %out, label %pause
pause:
  call void @llvm.x86.sse2.pause()
  %now = call i64 @llvm.readcyclecounter()
  %el = sub i64 %now, %w0
  %long = icmp ugt i64 %el, %ylim
  br i1 %long, label %doyield, label %check
doyield:
  %y = call i32 @sched_yield()
  br label %check
out:
  ret void
}}

; entries start..start+count-1 of a table of {{fn, bufs, vals, ncores}}; st null: no pool (a split entry's chunks run here in turn)
define i64 @tg_pool_replay(ptr nocapture readonly %table, ptr %st, i32 %start, i32 %count) {{
entry:
  %s = sext i32 %start to i64
  %c = sext i32 %count to i64
  %end = add i64 %s, %c
  %nopool = icmp eq ptr %st, null
  %pactive = getelementptr i8, ptr %st, i64 {ACTIVE}
  br i1 %nopool, label %loop, label %activate
activate:
  store atomic i64 1, ptr %pactive monotonic, align 8
  br label %loop
loop:
  %i = phi i64 [ %s, %entry ], [ %s, %activate ], [ %next, %next.bb ]
  %more = icmp slt i64 %i, %end
  br i1 %more, label %body, label %finish
body:
  %e = getelementptr inbounds [4 x i64], ptr %table, i64 %i
  %fn = load ptr, ptr %e, align 8
  %pb = getelementptr inbounds [4 x i64], ptr %table, i64 %i, i64 1
  %bufs = load ptr, ptr %pb, align 8
  %pv = getelementptr inbounds [4 x i64], ptr %table, i64 %i, i64 2
  %vals = load ptr, ptr %pv, align 8
  %pc = getelementptr inbounds [4 x i64], ptr %table, i64 %i, i64 3
  %nc = load i64, ptr %pc, align 8
  %one = icmp eq i64 %nc, 1
  br i1 %one, label %single, label %multi
single:
  %r = call i64 %fn(ptr %bufs, ptr %vals, i32 0, i32 1)
  br label %next.bb
multi:
  %split = icmp sgt i64 %nc, 1
  br i1 %split, label %haspool, label %next.bb
haspool:
  br i1 %nopool, label %seq, label %pooled
pooled:
  call void @tg_pool_split(ptr %st, ptr %fn, ptr %bufs, ptr %vals, i64 %nc)
  br label %next.bb
seq:
  %j = phi i32 [ 0, %haspool ], [ %j1, %seq ]
  %nc32 = trunc i64 %nc to i32
  %r2 = call i64 %fn(ptr %bufs, ptr %vals, i32 %j, i32 %nc32)
  %j1 = add i32 %j, 1
  %jm = icmp slt i32 %j1, %nc32
  br i1 %jm, label %seq, label %next.bb
next.bb:
  %next = add i64 %i, 1
  br label %loop
finish:
  br i1 %nopool, label %done, label %deactivate
deactivate:
  store atomic i64 0, ptr %pactive monotonic, align 8
  br label %done
done:
  ret i64 0
}}

; worker w: claim and run chunks until idle for the state's idle ticks (returns 0, parked) or told to stop (returns 1)
define i64 @tg_pool_worker(ptr %st, ptr %unused, i32 %w, i32 %unused2) {{
entry:
  %seenp = alloca i64, align 8
  %lastp = alloca i64, align 8
  %jobp = alloca i64, align 8
  %w64 = sext i32 %w to i64
  %woff = mul i64 %w64, {LINE}
  %woff2 = add i64 %woff, {WORKERS}
  %pw = getelementptr i8, ptr %st, i64 %woff2
  %pcount = getelementptr i8, ptr %pw, i64 8
{_JOB_FIELDS}
  %pstop = getelementptr i8, ptr %st, i64 {STOP}
  %plimit = getelementptr i8, ptr %st, i64 {IDLE_TICKS}
  %pactive = getelementptr i8, ptr %st, i64 {ACTIVE}
  %limit = load atomic i64, ptr %plimit monotonic, align 8
  %pyield = getelementptr i8, ptr %st, i64 {YIELD_TICKS}
  %ylim = load atomic i64, ptr %pyield monotonic, align 8
  store atomic i64 {SPINNING}, ptr %pw monotonic, align 8
  store i64 -1, ptr %seenp, align 8
  %t00 = call i64 @llvm.readcyclecounter()
  store i64 %t00, ptr %lastp, align 8
  store i64 %t00, ptr %jobp, align 8
  br label %poll
poll:
  %t = load atomic i64, ptr %st acquire, align 8
  %g = lshr i64 %t, 32
  %seen = load i64, ptr %seenp, align 8
  %new = icmp ne i64 %g, %seen
  br i1 %new, label %look, label %idle
look:
  %fn = load atomic ptr, ptr %pfn acquire, align 8
  %bufs = load atomic ptr, ptr %pbufs acquire, align 8
  %vals = load atomic ptr, ptr %pvals acquire, align 8
  %n = load atomic i64, ptr %pn acquire, align 8
  %t2 = load atomic i64, ptr %st acquire, align 8
  %same = icmp eq i64 %t2, %t
  br i1 %same, label %check, label %poll
check:
  %i = and i64 %t, 4294967295
  %left = icmp ult i64 %i, %n
  br i1 %left, label %try, label %exhausted
exhausted:
  store i64 %g, ptr %seenp, align 8
  %te = call i64 @llvm.readcyclecounter()
  store i64 %te, ptr %jobp, align 8
  br label %idle
try:
  %t1 = add i64 %t, 1
  %r = cmpxchg ptr %st, i64 %t, i64 %t1 acq_rel monotonic
  %ok = extractvalue {{ i64, i1 }} %r, 1
  br i1 %ok, label %run, label %poll
run:
  %i32 = trunc i64 %i to i32
  %n32 = trunc i64 %n to i32
  %x = call i64 %fn(ptr %bufs, ptr %vals, i32 %i32, i32 %n32)
  %d0 = atomicrmw add ptr %pdone, i64 1 release
  %c0 = load atomic i64, ptr %pcount monotonic, align 8
  %c1 = add i64 %c0, 1
  store atomic i64 %c1, ptr %pcount monotonic, align 8
  %tr = call i64 @llvm.readcyclecounter()
  store i64 %tr, ptr %lastp, align 8
  store i64 %tr, ptr %jobp, align 8
  br label %poll
idle:
  %stop = load atomic i64, ptr %pstop monotonic, align 8
  %stopping = icmp ne i64 %stop, 0
  br i1 %stopping, label %quit, label %kickchk
kickchk:
  %wv = load atomic i64, ptr %pw monotonic, align 8
  %kicked = icmp eq i64 %wv, {KICKED}
  br i1 %kicked, label %rekick, label %timer
rekick:
  store atomic i64 {SPINNING}, ptr %pw monotonic, align 8
  %tk = call i64 @llvm.readcyclecounter()
  store i64 %tk, ptr %lastp, align 8
  br label %poll
timer:
  call void @llvm.x86.sse2.pause()
  %now0 = call i64 @llvm.readcyclecounter()
  %lj = load i64, ptr %jobp, align 8
  %ej = sub i64 %now0, %lj
  %lazy = icmp ugt i64 %ej, %ylim
  br i1 %lazy, label %doyield, label %timer1
doyield:
  %yr = call i32 @sched_yield()
  br label %timer1
timer1:
  %act = load atomic i64, ptr %pactive monotonic, align 8
  %busy = icmp ne i64 %act, 0
  br i1 %busy, label %rekick, label %timer2
timer2:
  %now = call i64 @llvm.readcyclecounter()
  %last = load i64, ptr %lastp, align 8
  %el = sub i64 %now, %last
  %over = icmp ugt i64 %el, %limit
  br i1 %over, label %park, label %poll
park:
  %pr = cmpxchg ptr %pw, i64 {SPINNING}, i64 {PARKED} acq_rel monotonic
  %parked = extractvalue {{ i64, i1 }} %pr, 1
  br i1 %parked, label %out, label %rekick
out:
  ret i64 0
quit:
  store atomic i64 {PARKED}, ptr %pw monotonic, align 8
  ret i64 1
}}

; workers 0..k-1: mark each kicked; out[w] = 1 where it had parked (its thread waits on its lock); returns how many had
define i64 @tg_pool_kick(ptr %st, ptr %out, i32 %k, i32 %unused) {{
entry:
  %k64 = sext i32 %k to i64
  br label %loop
loop:
  %w = phi i64 [ 0, %entry ], [ %w1, %body ]
  %cnt = phi i64 [ 0, %entry ], [ %cnt1, %body ]
  %more = icmp slt i64 %w, %k64
  br i1 %more, label %body, label %done
body:
  %woff = mul i64 %w, {LINE}
  %woff2 = add i64 %woff, {WORKERS}
  %pw = getelementptr i8, ptr %st, i64 %woff2
  %old = atomicrmw xchg ptr %pw, i64 {KICKED} acq_rel
  %was = icmp eq i64 %old, {PARKED}
  %was8 = zext i1 %was to i8
  %po = getelementptr i8, ptr %out, i64 %w
  store i8 %was8, ptr %po, align 1
  %wasi = zext i1 %was to i64
  %cnt1 = add i64 %cnt, %wasi
  %w1 = add i64 %w, 1
  br label %loop
done:
  ret i64 %cnt
}}
"""

class _Entry(ctypes.Structure):
  """One kernel of a replay table: fn(bufs, vals, core, ncores) for its `ncores` chunks (1: a plain call; 0: nothing to run)."""
  _fields_ = [("fn", ctypes.c_void_p), ("bufs", ctypes.c_void_p), ("vals", ctypes.c_void_p), ("ncores", ctypes.c_int64)]

_FN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32)
SYMBOLS = ("tg_pool_replay", "tg_pool_worker", "tg_pool_kick", "tg_pool_ticks", "tg_pool_busy")

class _Native:
  """POOL_IR's functions, loaded once per process (its object comes from the disk cache like a kernel's)."""
  def __init__(self) -> None:
    from tg_cpu_x86.device import _compiler
    from tg_cpu_x86.runtime import load_symbols
    self._image, addrs = load_symbols(_compiler().compile_cached(POOL_IR), SYMBOLS)
    if missing := [n for n, a in addrs.items() if not a]: raise RuntimeError(f"the pool's object lacks {missing}")
    self.replay, self.worker, self.kick, self.ticks, self.busy = (_FN(addrs[s]) for s in SYMBOLS)
    self.busy_addr = addrs["tg_pool_busy"]

@functools.cache
def native() -> _Native: return _Native()

def _ticks_per_s(nat: _Native) -> float:
  """The cycle counter's rate, timed against perf_counter over a short sleep (it runs at a constant rate on x86-64 hosts)."""
  t0, p0 = nat.ticks(None, None, 0, 0), time.perf_counter()
  time.sleep(5e-4)
  t1, p1 = nat.ticks(None, None, 0, 0), time.perf_counter()
  return max((t1 - t0) / max(p1 - p0, 1e-9), 1.0)

class NativePool:
  """`n` worker threads, each in `tg_pool_worker` while it spins and on its lock while parked. One caller at a time runs
  jobs (`lock`). `handoff_s` is the measured cost a split kernel pays per worker (see `_measure_handoff`)."""
  def __init__(self, n: int):
    self.nat = native()
    self.n = n
    words = (WORKERS + LINE * max(n, 1)) // 8 + 8
    self._mem = (ctypes.c_int64 * words)()
    self.state = ctypes.addressof(self._mem) + (-ctypes.addressof(self._mem) % LINE)  # fields on their own cache lines
    self.lock = threading.Lock()
    # a parked worker blocks on its lock (held: acquire blocks), released once by the kick that finds it parked. A raw lock, not a
    # threading.Semaphore: waking from that runs Python, needing the GIL several times, which a busy calling thread holds
    self._gates = [_thread.allocate_lock() for _ in range(n)]
    for g in self._gates: g.acquire()
    self._parked = (ctypes.c_int8 * max(n, 1))()
    self._one = (_Entry * 1)()
    self.closed = False
    self.ticks_per_s = _ticks_per_s(self.nat)
    self._word(IDLE_TICKS).value = int(IDLE_SPIN_S * self.ticks_per_s)
    self._word(YIELD_TICKS).value = int(YIELD_AFTER_S * self.ticks_per_s)
    self.threads = [threading.Thread(target=self._loop, args=(w,), name=f"tg_cpu_{w}", daemon=True) for w in range(n)]
    for t in self.threads: t.start()
    # before weakref.finalize's exit hook (registered earlier, run later) unmaps code a spinning worker may be running
    atexit.register(self.close)
    self.handoff_s = self._measure_handoff()

  def _word(self, off: int) -> Any: return ctypes.c_int64.from_address(self.state + off)
  def worker_state(self, w: int) -> int:
    """Worker w's state word: PARKED, SPINNING or KICKED."""
    return self._word(WORKERS + LINE * w).value
  def chunks_run(self, w: int) -> int:
    """How many chunks worker w has run (the calling thread's aren't counted)."""
    return self._word(WORKERS + LINE * w + 8).value

  def _loop(self, w: int) -> None:
    while True:
      self._gates[w].acquire()
      if self.closed or self.nat.worker(self.state, None, w, 0) == 1: return

  def wake(self, k: int) -> None:
    """Kick workers 0..k-1 (restart their idle timers) and release the parked ones' locks. Caller holds `lock`."""
    if (k := min(k, self.n)) <= 0 or self.closed: return
    if self.nat.kick(self.state, self._parked, k, 0):
      for w in range(k):
        if self._parked[w]: self._gates[w].release()

  def replay(self, table: Any, start: int, count: int, wake: int) -> None:
    """Entries start..start+count-1 of an `_Entry` table, after kicking `wake` workers."""
    with self.lock:
      self.wake(wake)
      self.nat.replay(table, self.state, start, count)

  def run(self, fn: int, bufs: int, vals: int, ncores: int) -> None:
    """One kernel (its function's address, the addresses of its buffer-address and value arrays) split into `ncores` chunks."""
    with self.lock:
      e = self._one[0]
      e.fn, e.bufs, e.vals, e.ncores = fn, bufs, vals, ncores
      self.wake(ncores - 1)
      self.nat.replay(self._one, self.state, 0, 1)

  def _measure_handoff(self, rounds: int = 9, jobs: int = 8) -> float:
    """What splitting costs per worker, timed as a split kernel runs inside a replay: a table of probe kernels that each spin
    PROBE_S per chunk, split over every thread (all chunks at once: PROBE_S) vs run on one (PROBE_S), the difference per worker.
    A worker slow to claim its chunk, or preempted while it runs one (a loaded machine), shows up as a larger cost: the mean of
    `rounds`, the expected cost, not the median, which would hide those stalls."""
    if self.n == 0: return 0.0
    d = (ctypes.c_int32 * 1)(max(int(PROBE_S * self.ticks_per_s), 1))
    split, single = (_Entry * jobs)(), (_Entry * jobs)()
    for tab, nc in ((split, self.n + 1), (single, 1)):
      for e in tab: e.fn, e.bufs, e.vals, e.ncores = self.nat.busy_addr, None, ctypes.addressof(d), nc
    with self.lock:
      self.wake(self.n)
      deadline = time.perf_counter() + 0.05  # let the workers reach their spin loop (bounded: a loaded machine may be slower)
      while any(self.worker_state(w) != SPINNING for w in range(self.n)) and time.perf_counter() < deadline: time.sleep(1e-4)
      ts = []
      for _ in range(rounds):
        self.wake(self.n)
        st = time.perf_counter()
        self.nat.replay(split, self.state, 0, jobs)
        mid = time.perf_counter()
        self.nat.replay(single, self.state, 0, jobs)
        ts.append(((mid - st) - (time.perf_counter() - mid)) / jobs / self.n)
    return max(sum(ts) / rounds, 1e-9)  # (positive: the split model weighs it)

  def close(self) -> None:
    """Stop the workers: spinning ones return from native code, parked ones wake and exit; waits (bounded) for them."""
    if self.closed: return
    with self.lock:
      self.closed = True
      self._word(STOP).value = 1
    for w, t in enumerate(self.threads):
      if t is threading.current_thread(): continue
      deadline = time.monotonic() + 1.0
      while t.is_alive() and time.monotonic() < deadline:
        # (again each time: a worker past its stop check may park just after the flag is set)
        if self.worker_state(w) == PARKED and self._gates[w].locked(): self._gates[w].release()
        t.join(timeout=0.01)
    atexit.unregister(self.close)

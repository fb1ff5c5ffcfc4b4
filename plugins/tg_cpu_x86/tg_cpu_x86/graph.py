"""CPUGraph: the kernels TinyJit captured on one CPU device, replayed as one batch (the `Compiled.graph` contract, see
docs/backend-authors.md: `supports(runner)`, `CPUGraph(items)`, `graph(bufs_per_item, var_vals_per_item)`).

Built once: each kernel's ctypes arrays of buffer addresses and Variable values, and a table of (kernel function, address array,
value array) entries, one per kernel. A replay rebuilds only the arrays whose buffers or Variable values changed (a jitted
function's inputs, a new `start_pos`) and patches their entries. Each run of consecutive kernels that run on the calling thread
(their thread count is decided and is 1, see `CPUProgram.threads_for`) is one foreign call of `replay_loop`, a compiled loop
that calls each entry's kernel in turn: no Python, no ctypes argument conversion per kernel. A kernel split over the worker
pool, or one whose first runs are still being timed, goes through its `CPUProgram.launch`."""
from __future__ import annotations
import ctypes
import functools
from dataclasses import dataclass
from typing import Any

from tg_core.helpers import NUM_CPU_THREADS
from tg_cpu_x86.runtime import CPUProgram

class _Entry(ctypes.Structure):
  """One kernel of the table `replay_loop` walks: fn(bufs, vals, 0, 1) (the kernel ABI, see tg_cpu_x86.abi)."""
  _fields_ = [("fn", ctypes.c_void_p), ("bufs", ctypes.c_void_p), ("vals", ctypes.c_void_p)]

# the loop is itself a kernel-ABI function (so it loads like one): entries start..start+count-1 of the table, each as core 0 of 1
REPLAY_LOOP_IR = """
define i64 @tg_replay_loop(ptr nocapture readonly %table, ptr nocapture readnone %unused, i32 %start, i32 %count) {
entry:
  %s = sext i32 %start to i64
  %n = sext i32 %count to i64
  %end = add i64 %s, %n
  br label %loop
loop:
  %i = phi i64 [ %s, %entry ], [ %next, %body ]
  %more = icmp slt i64 %i, %end
  br i1 %more, label %body, label %done
body:
  %e = getelementptr inbounds [3 x ptr], ptr %table, i64 %i
  %fn = load ptr, ptr %e, align 8
  %pb = getelementptr inbounds [3 x ptr], ptr %table, i64 %i, i64 1
  %bufs = load ptr, ptr %pb, align 8
  %pv = getelementptr inbounds [3 x ptr], ptr %table, i64 %i, i64 2
  %vals = load ptr, ptr %pv, align 8
  %r = call i64 %fn(ptr %bufs, ptr %vals, i32 0, i32 1)
  %next = add i64 %i, 1
  br label %loop
done:
  ret i64 0
}
"""

@functools.cache
def replay_loop() -> CPUProgram:
  """The compiled loop over a table of kernels, loaded once per process. Cached on disk like a kernel: compiling it in a process
  whose kernels all come from the cache would start LLVM's code generator for it alone (+28 MB resident for the process's life)."""
  from tg_cpu_x86.device import _compiler
  return CPUProgram("CPU", "replay_loop", _compiler().compile_cached(REPLAY_LOOP_IR))

@dataclass
class _Kernel:
  runner: Any  # tg_core.engine.realize.CompiledRunner
  prg: CPUProgram
  bufs: list[Any]  # the Buffers its address array was built for
  var_vals: dict[str, int]  # the Variable values its value array was built for
  addrs: Any = None
  vals_arr: Any = None
  vals: tuple[int, ...] = ()
  empty: bool = False  # a Variable sized its grid to nothing: nothing runs

  def set_bufs(self, bufs: list[Any]) -> None:
    self.bufs = list(bufs)
    self.addrs = (ctypes.c_void_p * max(len(bufs), 1))(*[b._buf.addr for b in bufs])

  def set_vals(self, var_vals: dict[str, int]) -> None:
    self.var_vals = var_vals
    self.vals, gs = self.runner.launch_args(var_vals)  # checks each value against its Variable's range
    self.vals_arr = (ctypes.c_int32 * max(len(self.vals), 1))(*self.vals)
    self.empty = self.runner.global_size is None and 0 in gs

class CPUGraph:
  """A batch of compiled kernels on the CPU (see the module docstring)."""
  @staticmethod
  def supports(runner: Any) -> bool:
    """Can this captured kernel (a CompiledRunner; TinyJit never offers copies) join a graph: its program is a CPUProgram."""
    return isinstance(runner.prg, CPUProgram)

  def __init__(self, items: list[tuple[Any, list[Any], dict[str, int]]]):
    if not items: raise ValueError("CPUGraph of no kernels: build it from at least one captured kernel")
    self.kernels: list[_Kernel] = []
    for runner, bufs, var_vals in items:
      if not self.supports(runner): raise TypeError(f"CPUGraph can't batch {runner!r}: only kernels whose program is a CPUProgram")
      runner.prg.captured()  # replayed many times: worth the full optimization level
      k = _Kernel(runner, runner.prg, [], {})
      k.set_bufs(bufs)
      k.set_vals(var_vals)
      self.kernels.append(k)
    self.loop = replay_loop()
    self.table = (_Entry * len(self.kernels))()
    for i in range(len(self.kernels)): self._patch(i)
    self.unsettled = set(range(len(self.kernels)))  # kernels whose way of running (in the loop or not) may have changed
    self.in_loop = [False] * len(self.kernels)
    self.steps: list[int | tuple[int, int]] = []  # a kernel's index (launched from Python) or (start, count) of a run of the loop
    self.knob = NUM_CPU_THREADS.value

  def _patch(self, i: int) -> None:
    k, e = self.kernels[i], self.table[i]
    # (the function too: a kernel launched from Python until its thread count was decided may have been compiled again since)
    e.fn, e.bufs, e.vals = ctypes.cast(k.prg.fxn, ctypes.c_void_p).value, ctypes.addressof(k.addrs), ctypes.addressof(k.vals_arr)

  def _settle(self) -> None:
    """Decide again, for the kernels that changed, which run in the loop; rebuild the steps where that changed."""
    if NUM_CPU_THREADS.value != self.knob:  # every decision was made for another thread count
      self.knob, self.unsettled = NUM_CPU_THREADS.value, set(range(len(self.kernels)))
    changed, still = False, set()
    for i in self.unsettled:
      k = self.kernels[i]
      self._patch(i)
      n = None if k.empty else k.prg.threads_for(k.vals)
      if n is None and not k.empty: still.add(i)  # not decided yet: launched (and timed) from Python, looked at again next replay
      if (loop := n == 1) != self.in_loop[i]: self.in_loop[i], changed = loop, True
    if changed or not self.steps:
      steps: list[int | tuple[int, int]] = []
      for i, (k, loop) in enumerate(zip(self.kernels, self.in_loop)):
        if loop:
          if steps and isinstance(last := steps[-1], tuple) and last[0] + last[1] == i: steps[-1] = (last[0], last[1] + 1)
          else: steps.append((i, 1))
        elif not k.empty or i in still: steps.append(i)
      self.steps = steps
    self.unsettled = still

  def __call__(self, bufs_per_item: list[list[Any]], var_vals_per_item: list[dict[str, int]]) -> None:
    """Replay on these buffers and Variable values (one list entry per kernel, in capture order); returns when all ran."""
    if len(bufs_per_item) != len(self.kernels) or len(var_vals_per_item) != len(self.kernels):
      raise ValueError(f"CPUGraph of {len(self.kernels)} kernels replayed with {len(bufs_per_item)} buffer lists and {len(var_vals_per_item)} value sets")
    for i, (k, bufs, vv) in enumerate(zip(self.kernels, bufs_per_item, var_vals_per_item)):
      if bufs != k.bufs:  # Buffers compare by identity
        k.set_bufs(bufs)
        self._patch(i)
      if vv is not k.var_vals and vv != k.var_vals:
        k.set_vals(vv)
        self._patch(i)
        self.unsettled.add(i)
    if self.unsettled or NUM_CPU_THREADS.value != self.knob: self._settle()
    table, fxn, kernels = self.table, self.loop.fxn, self.kernels
    for s in self.steps:
      if isinstance(s, tuple): fxn(table, None, s[0], s[1])
      elif not (k := kernels[s]).empty: k.prg.launch(k.addrs, k.vals_arr, k.vals)

"""CPUGraph: the kernels TinyJit captured on one CPU device, replayed as one batch (the `Compiled.graph` contract, see
docs/backend-authors.md: `supports(runner)`, `CPUGraph(items)`, `graph(bufs_per_item, var_vals_per_item)`).

Built once: each kernel's ctypes arrays of buffer addresses and Variable values, and a table of (kernel function, address array,
value array, thread count) entries, one per kernel. A replay rebuilds only the arrays whose buffers or Variable values changed
(a jitted function's inputs, a new `start_pos`) and patches their entries. Each run of consecutive kernels whose thread count is
decided (see `CPUProgram.threads_for`) is one foreign call of the native pool's replay (`tg_cpu_x86.pool`): single-thread
kernels called in turn, split ones run by this thread and the spinning workers, with a barrier after each; no Python, no ctypes
argument conversion per kernel. Once every thread count is decided that is the whole table in one call. The workers are woken
once per replay. A kernel whose first runs are still being timed goes through its `CPUProgram.launch`."""
from __future__ import annotations
import ctypes
from dataclasses import dataclass
from typing import Any

from tg_core.helpers import NUM_CPU_THREADS
from tg_cpu_x86.pool import _Entry, native
from tg_cpu_x86.runtime import CPUProgram, decision_key, get_pool, max_threads, wake_workers

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
  # the names of the Variables its values come from, None where its grid is symbolic (any change of the values is looked at)
  names: tuple[str, ...] | None = ()

  def set_bufs(self, bufs: list[Any]) -> None:
    self.bufs = list(bufs)
    self.addrs = (ctypes.c_void_p * max(len(bufs), 1))(*[b._buf.addr for b in bufs])

  def set_vals(self, var_vals: dict[str, int]) -> None:
    """Its values for these Variable values, written into its value array in place where it has one (the table's entry keeps
    pointing at it: a decode step's new start_pos patches nothing)."""
    self.var_vals = var_vals
    self.vals, gs = self.runner.launch_args(var_vals)  # checks each value against its Variable's range
    if self.vals_arr is not None and len(self.vals_arr) == max(len(self.vals), 1):
      for j, v in enumerate(self.vals): self.vals_arr[j] = v
    else: self.vals_arr = (ctypes.c_int32 * max(len(self.vals), 1))(*self.vals)
    self.empty = self.runner.global_size is None and 0 in gs

def _own_vals(var_vals: dict[str, int], names: tuple[str, ...]) -> tuple[int, ...] | None:
  """The values of `names` in `var_vals`; None where one is missing (set_vals then raises the runner's error for it)."""
  try: return tuple(var_vals[n] for n in names)
  except KeyError: return None

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
      k = _Kernel(runner, runner.prg, [], {}, names=tuple(v.arg.name for v in runner.p.vars) if runner.global_size is not None else None)
      k.set_bufs(bufs)
      k.set_vals(var_vals)
      self.kernels.append(k)
    self.table = (_Entry * len(self.kernels))()
    for i in range(len(self.kernels)): self._patch(i)
    self.unsettled = set(range(len(self.kernels)))  # kernels whose way of running (in the table or not) may have changed
    self.in_table = [False] * len(self.kernels)
    self.steps: list[int | tuple[int, int]] = []  # a kernel's index (launched from Python) or (start, count) of a run of the table
    self.split = 0  # the most threads an entry of the table runs on
    self.knob = NUM_CPU_THREADS.value

  def _patch(self, i: int, ncores: int | None = None) -> None:
    k, e = self.kernels[i], self.table[i]
    # (the function too: a kernel launched from Python until its thread count was decided may have been compiled again since)
    e.fn, e.bufs, e.vals = k.prg.addr, ctypes.addressof(k.addrs), ctypes.addressof(k.vals_arr)
    if ncores is not None: e.ncores = ncores

  def _settle(self) -> None:
    """Decide again, for the kernels that changed, which run in the table and on how many threads; rebuild the steps where
    that changed."""
    if NUM_CPU_THREADS.value != self.knob:  # every decision was made for another thread count
      self.knob, self.unsettled = NUM_CPU_THREADS.value, set(range(len(self.kernels)))
    changed, still = False, set()
    for i in self.unsettled:
      k = self.kernels[i]
      n = 0 if k.empty else k.prg.threads_for(k.vals)  # (an empty kernel: an entry with nothing to run)
      self._patch(i, n or 0)
      if n is None: still.add(i)  # not decided yet: launched (and timed) from Python, looked at again next replay
      if (tab := n is not None) != self.in_table[i]: self.in_table[i], changed = tab, True
    if changed or not self.steps:
      steps: list[int | tuple[int, int]] = []
      for i, tab in enumerate(self.in_table):
        if tab:
          if steps and isinstance(last := steps[-1], tuple) and last[0] + last[1] == i: steps[-1] = (last[0], last[1] + 1)
          else: steps.append((i, 1))
        else: steps.append(i)
      self.steps = steps
    self.split = max((e.ncores for e in self.table), default=1)
    self.unsettled = still

  def __call__(self, bufs_per_item: list[list[Any]], var_vals_per_item: list[dict[str, int]]) -> None:
    """Replay on these buffers and Variable values (one list entry per kernel, in capture order); returns when all ran."""
    if len(bufs_per_item) != len(self.kernels) or len(var_vals_per_item) != len(self.kernels):
      raise ValueError(f"CPUGraph of {len(self.kernels)} kernels replayed with {len(bufs_per_item)} buffer lists and {len(var_vals_per_item)} value sets")
    for i, (k, bufs, vv) in enumerate(zip(self.kernels, bufs_per_item, var_vals_per_item)):
      if bufs != k.bufs:  # Buffers compare by identity
        k.set_bufs(bufs)
        self._patch(i)
      # a replay's value dicts are new (TinyJit adds this call's values to each kernel's): only the kernel's own Variables are
      # compared, so a kernel that reads no start_pos isn't rebuilt and settled again at every decode step
      if vv is not k.var_vals and (k.names is None or _own_vals(vv, k.names) != k.vals):
        key, arr = decision_key(k.vals), k.vals_arr
        k.set_vals(vv)
        if k.vals_arr is not arr: self._patch(i)
        # its thread count is decided per decision_key: settled again only where that changed (or its grid is symbolic)
        if k.names is None or decision_key(k.vals) != key: self.unsettled.add(i)
    if self.unsettled or NUM_CPU_THREADS.value != self.knob: self._settle()
    table, kernels, replay = self.table, self.kernels, native().replay
    if self.split > 1 and max_threads() > 1:  # split entries: the pool's workers claim their chunks, woken once for the replay
      pool = get_pool(max_threads() - 1)
      with pool.lock:
        pool.wake(wake_workers())
        state = pool.state
    else: pool, state = None, None  # (a split entry decided for more threads than NUM_CPU_THREADS allows now runs its chunks in turn)
    for s in self.steps:
      if isinstance(s, tuple):
        if pool is None: replay(table, None, s[0], s[1])
        else:
          with pool.lock: replay(table, state, s[0], s[1])
      elif not (k := kernels[s]).empty: k.prg.launch(k.addrs, k.vals_arr, k.vals)

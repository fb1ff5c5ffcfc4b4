"""CPUGraph: the kernels TinyJit captured on one CPU device, replayed as one batch (the `Compiled.graph` contract, see
docs/backend-authors.md: `supports(runner)`, `CPUGraph(items)`, `graph(bufs_per_item, var_vals_per_item)`).

Built once: each kernel's ctypes arrays of buffer addresses and Variable values. A replay rebuilds only the arrays whose buffers
or Variable values changed (a jitted function's inputs, a new `start_pos`) and calls each kernel's `CPUProgram.launch` directly:
no per-launch array building, range checks or grid sizing for the kernels that did not change."""
from __future__ import annotations
import ctypes
from dataclasses import dataclass
from typing import Any

from tg_cpu_x86.runtime import CPUProgram

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
      k = _Kernel(runner, runner.prg, [], {})
      k.set_bufs(bufs)
      k.set_vals(var_vals)
      self.kernels.append(k)

  def __call__(self, bufs_per_item: list[list[Any]], var_vals_per_item: list[dict[str, int]]) -> None:
    """Replay on these buffers and Variable values (one list entry per kernel, in capture order); returns when all ran."""
    if len(bufs_per_item) != len(self.kernels) or len(var_vals_per_item) != len(self.kernels):
      raise ValueError(f"CPUGraph of {len(self.kernels)} kernels replayed with {len(bufs_per_item)} buffer lists and {len(var_vals_per_item)} value sets")
    for k, bufs, vv in zip(self.kernels, bufs_per_item, var_vals_per_item):
      if bufs != k.bufs: k.set_bufs(bufs)  # Buffers compare by identity
      if vv is not k.var_vals and vv != k.var_vals: k.set_vals(vv)
      if not k.empty: k.prg.launch(k.addrs, k.vals_arr, k.vals)

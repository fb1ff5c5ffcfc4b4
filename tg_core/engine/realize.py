"""Realize: compile each scheduled kernel for its device (cached) and run the schedule on buffers."""
from __future__ import annotations
import dataclasses
import time
import weakref

from tg_core.device import Buffer, Device
from tg_core.helpers import BEAM, DEBUG, GlobalCounters, all_int, colored, time_to_str
from tg_core.uop import Ops
from tg_core.uop.ops import UOp, VariableRangeError, sym_infer
from tg_core.schedule import ScheduleItem

# every BUFFER uop's device memory, alive as long as the uop is
buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()

def buffer_of(u: UOp, allocate: bool = True) -> Buffer:
  if u.op is not Ops.BUFFER: raise RuntimeError(f"expected a BUFFER, got {u.op}")
  if (b := buffers.get(u)) is None:
    b = buffers[u] = Buffer(u.arg.device, u.arg.size, u.dtype)
  if allocate and not b.is_allocated(): b.allocate()
  return b

class UnboundVariableError(RuntimeError):
  """A kernel over a Variable was run without a value for it."""

def _launch_dims(gs: list[int] | tuple[int, ...]) -> tuple[int, ...]: return tuple(gs) + (1,) * (3 - len(gs)) if len(gs) <= 3 else tuple(gs)

class CompiledRunner:
  """A kernel compiled for one device, callable on buffers."""
  def __init__(self, device: str, ast: UOp, opts: list | None = None, lower_cache: bool = True):
    from tg_core.codegen import get_program, program_key
    from tg_core.codegen.lowered import lowered_program
    dev = Device[device]
    st = time.perf_counter()
    self.program_key = program_key(dev.renderer)  # the renderer's record and the codegen knobs it was made under (linear_program)
    # lower_cache: the program from the on-disk lowered-program cache where an earlier process made it (BEAM's candidates don't use it)
    self.p = lowered_program(ast, dev.renderer, opts, dev.compiler.cachekey) if lower_cache else get_program(ast, dev.renderer, opts)
    self.lib = dev.compiler.compile_cached(self.p.src)
    self.prg = dev.runtime(device, self.p.name, self.lib)
    self.p = dataclasses.replace(self.p, uops=None)  # compiled: the linear program is not read again (ProgramSpec.uops)
    self.opts = opts  # BEAM's choice (None: the kernel's own or the heuristic's): with p.ast, what get_program re-derives it from
    self.compile_time = time.perf_counter() - st
    self.device = device
    gs = self.p.global_size
    self.global_size: tuple[int, ...] | None = _launch_dims(gs) if all_int(gs) else None
  def launch_args(self, var_vals: dict[str, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the kernel's Variable values, its global size) for these Variable values; checks each value against its range."""
    vals: tuple[int, ...] = ()
    if self.p.vars:
      try: vals = tuple(var_vals[v.arg.name] for v in self.p.vars)
      except KeyError as e: raise UnboundVariableError(f"kernel {self.p.name} needs Variable {e.args[0]!r}, which has no value: bind it, "
                                                       f"Variable(...).bind(n)") from None
      # the kernel was compiled for the Variables' ranges (buffers hold their largest sizes): a value outside reads out of bounds
      for v, x in zip(self.p.vars, vals):
        if not v.arg.vmin_vmax[0] <= x <= v.arg.vmin_vmax[1]:
          raise VariableRangeError(f"kernel {self.p.name}: Variable {v.arg.name!r} = {x} is outside its range {list(v.arg.vmin_vmax)}")
    # a symbolic grid is sized at launch
    gs = self.global_size if self.global_size is not None else _launch_dims([sym_infer(g, var_vals) for g in self.p.global_size])
    return vals, gs
  def __call__(self, bufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
    vals, gs = self.launch_args(var_vals)
    if self.global_size is None and 0 in gs: return 0.0 if wait else None  # a Variable sized the grid to nothing: no work (GPUs refuse an empty launch)
    return self.prg(*[b._buf for b in bufs], global_size=gs, local_size=tuple(self.p.local_size or (1, 1, 1)), vals=vals, wait=wait)

def linear_program(r: CompiledRunner) -> list[UOp]:
  """The linear program `r` was rendered from, re-derived (a runner drops it once compiled, ProgramSpec.uops). Raises
  RuntimeError where the codegen knobs (CODEGEN_KNOBS) or the renderer's record changed since `r` was made: the program
  re-derived then is another one. (Not a comparison of sources: one from the lowered-program cache was rendered by another
  process, and a renderer's source may differ in bytes for the same program, as the PYTHON renderer's pickle does.)"""
  from tg_core.codegen import get_program, program_key
  ren = Device[r.device].renderer
  if program_key(ren) != r.program_key:
    raise RuntimeError(f"{r.p.name}: the codegen knobs changed since this runner was compiled, so its linear program can't be "
                       "re-derived: call linear_program under the settings the runner was made with")
  if (uops := get_program(r.p.ast, ren, r.opts).uops) is None: raise RuntimeError(f"{r.p.name}: get_program made no linear program")
  return uops

_runner_cache: dict[tuple, CompiledRunner] = {}
def get_runner(device: str, ast: UOp) -> CompiledRunner:
  from tg_core.codegen import program_key
  key = (Device.canonicalize(device), ast, program_key(Device[device].renderer))  # the renderer's record and every codegen knob
  if (r := _runner_cache.get(key)) is None:
    opts = None
    if BEAM >= 1 and ast.arg is not None and ast.arg.opts_to_apply is None:
      from tg_core.codegen.opt.search import beam_search
      opts = beam_search(ast, device, BEAM.value)
    r = _runner_cache[key] = CompiledRunner(device, ast, opts)
  return r

def plan_memory(items: list[ScheduleItem], intermediates: set[UOp]) -> None:
  """Back the `intermediates` (BUFFERs nothing outside `items` uses) by views of shared arenas where their lifetimes allow."""
  from tg_core.schedule.memory import plan_buffers
  fresh = {u: Buffer(u.arg.device, u.arg.size, u.dtype) for u in intermediates if u not in buffers and isinstance(u.arg.device, str)}
  if len(fresh) < 2: return
  planned = plan_buffers([[fresh[b] for b in si.bufs if b in fresh] for si in items], set(fresh.values()))
  for u, b in fresh.items(): buffers[u] = planned.get(b, b)

def run_schedule(items: list[ScheduleItem], var_vals: dict[str, int] | None = None, intermediates: set[UOp] | None = None) -> None:
  """Run the items in order. `intermediates`: buffers only these items use (the memory planner may share their memory)."""
  from tg_core.engine.jit import capturing
  if capturing: capturing[-1].settle()  # a capture's buffers that died since its last kernels give their memory back first
  if intermediates: plan_memory(items, intermediates)
  for si in items:
    bufs = [buffer_of(b) for b in si.bufs]
    st = time.perf_counter()
    if si.ast.op is Ops.COPY:
      bufs[0].copy_from(bufs[1])
      if capturing: capturing[-1].record(("copy", bufs, {}), si.bufs)
      name, device = f"copy {bufs[1].nbytes:8d}, {bufs[0].device[:7]:>7s} <- {bufs[1].device[:7]:7s}", bufs[0].device
      GlobalCounters.global_mem += bufs[0].nbytes
    else:
      device = si.bufs[0].arg.device
      runner = get_runner(device, si.ast)
      vv = {**(var_vals or {}), **si.var_vals}
      runner(bufs, vv, wait=DEBUG >= 2)
      if capturing: capturing[-1].record((runner, bufs, vv), si.bufs)
      name = runner.p.name
      GlobalCounters.global_ops += runner.p.estimated_ops
      GlobalCounters.global_mem += sum(b.nbytes for b in bufs)
    et = time.perf_counter() - st
    GlobalCounters.kernel_count += 1
    GlobalCounters.time_sum_s += et
    if DEBUG >= 2:
      print(f"{colored(f'*** {device[:7]:7s} {GlobalCounters.kernel_count:4d}', 'magenta' if si.ast.op is Ops.COPY else 'green')} "
            f"{name:40s} tm {time_to_str(et)} ({GlobalCounters.time_sum_s*1e3:9.2f} ms total)")

__all__ = ["UnboundVariableError", "run_schedule", "plan_memory", "buffer_of", "buffers", "get_runner", "CompiledRunner"]

"""TinyJit: capture the kernels a function runs and replay them on new inputs without re-tracing.

Call 1 runs the function normally; call 2 runs it while recording every kernel with its buffers; later calls
swap the recorded input buffers for the new inputs' and replay the kernels. `TinyJit(fxn, capture_first=True)` records at
call 1 already (call 2 replays): for a function whose state (weights, caches, tables) is realized before it is first called,
so that its first run sets nothing up that a replay would then redo. Inputs must keep their shapes,
dtypes and devices; outputs live in the same buffers on every replay (copy them if you keep them).

Bound Variables are runtime arguments: one capture replays for every value. Their values come from the call's
arguments (a bound Variable, `start_pos`) and from the bound shapes of its input tensors (`cache[:, :i]`, a view of a
realized buffer: the kernels read that buffer through the view, so the view's structure is part of the signature).

A device that offers a graph (`Compiled.graph`, e.g. tg_core.hcq.HCQGraph) replays each run of consecutive kernels on it as one
batch; copies and kernels of devices without one replay item by item."""
from __future__ import annotations
import functools
import weakref
from typing import Any, Callable, Generic, TypeVar

from tg_core.device import Buffer
from tg_core.helpers import DEBUG, ContextVar
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp
from tg_core.schedule.memory import arenas
from tg_core.schedule.variables import bound_vars_in, rebind, unbind_arg, var_vals_of

JIT = ContextVar("JIT", 1)
R = TypeVar("R")

class JitError(RuntimeError):
  """A jitted function was called with inputs that don't match the captured ones."""

class Capture:
  """What one capture records: (runner or "copy", buffers, var_vals) per step, in order (`items`).

  A buffer the capture writes before it reads it whose BUFFER uop dies mid-capture can't be named by anything later in the
  trace: once nothing outside the capture holds the `Buffer` either, its memory goes back to the allocator (the next layer's
  intermediates of the same sizes reuse it), so the capture's peak is about one layer's intermediates, not the whole step's.
  Code that still holds the bare Buffer (a host read through `Tensor._buffer()`) keeps it: the capture lets go of its own
  references, then looks whether the Buffer is still alive. `_plan_captured` gives the released ones memory again."""
  def __init__(self) -> None:
    self.items: list[tuple[Any, list[Buffer], dict[str, int]]] = []
    self.first_written: dict[int, bool] = {}  # id(buffer) -> its first use in the capture is as an output (slot 0)
    self._spots: dict[int, list[tuple[int, int]]] = {}  # id(first-written buffer) -> its (item, position)s in `items`
    self._dead: list[int] = []  # first-written buffers whose uop died: released at the next `settle`
    self._watches: list[weakref.finalize] = []
    self._var_vals: dict[frozenset, dict[str, int]] = {}  # the distinct Variable values of the items: one dict each, shared
  def record(self, item: tuple[Any, list[Buffer], dict[str, int]], uops: tuple[UOp, ...]) -> None:
    # items with equal Variable values share one dict: a replay merges each distinct one with its values once, and what a
    # graph keeps per kernel is that shared dict (a step has ~1k kernels)
    item = (item[0], item[1], self._var_vals.setdefault(frozenset(item[2].items()), item[2]))
    self.items.append(item)
    for pos, (b, u) in enumerate(zip(item[1], uops)):
      if (spots := self._spots.get(id(b))) is not None: spots.append((len(self.items) - 1, pos))
      if id(b) in self.first_written: continue
      self.first_written[id(b)] = pos == 0
      if pos == 0:
        self._spots[id(b)] = [(len(self.items) - 1, pos)]
        # the finalizer names the buffer by id: holding it in its arguments would keep it alive; it fires before the uop's entry
        # in `realize.buffers` (which holds the Buffer too) is gone, so the release waits for the next settle
        self._watches.append(weakref.finalize(u, self._dead.append, id(b)))
  def settle(self) -> None:
    """Release the first-written buffers whose uops died, unless something outside the capture still holds the Buffer: each one's
    places in `items` get an unallocated twin (same device, size, dtype, view), and the Buffer, if nothing else held it, is gone
    with its memory. Called before the capture runs more kernels (run_schedule) and when it ends."""
    while self._dead:
      key = self._dead.pop()
      spots = self._spots[key]
      i, pos = spots[0]
      b = self.items[i][1][pos]
      if not b.is_allocated() or b.allocated_views or not (b.is_view or b._owned): continue  # nothing to give back (or not ours to)
      twin, base, alive = Buffer(b.device, b.size, b.dtype, options=None if b.is_view else b.options, base=b._base, offset=b.offset), b._base, weakref.ref(b)
      for i, pos in spots: self.items[i][1][pos] = twin
      del b
      if (b := alive()) is not None:  # held outside the capture: it keeps its memory and its places
        for i, pos in spots: self.items[i][1][pos] = b
        continue
      del self._spots[key], self.first_written[key]
      self._spots[id(twin)], self.first_written[id(twin)] = spots, True
      # an arena (schedule/memory.py) whose views are all freed gives its memory back too
      if base is not None and base in arenas and base.is_allocated() and not base.allocated_views: base.deallocate()
  def close(self) -> None:
    """Stop releasing: what the capture's uops still name after it is needed by the replays (outputs, held buffers)."""
    self.settle()
    for w in self._watches: w.detach()
    self._watches.clear()
    self._dead.clear()

# while a function is being captured, run_schedule records its steps here
capturing: list[Capture] = []

def _tensors_in(args: tuple, kwargs: dict) -> list[Any]:
  from tg_core.tensor import Tensor
  ts = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
  # a multi-device input (UNSHARD over its parts) counts as its parts: each part's buffer is swapped on replay
  if (multi := [t for t in ts if t.uop.op is Ops.UNSHARD and not t.is_realized()]): multi[0].realize(*multi[1:])
  return [p for t in ts for p in ([Tensor(u) for u in t.uop.src[0].src] if t.uop.op is Ops.UNSHARD else [t])]

class TinyJit(Generic[R]):
  def __init__(self, fxn: Callable[..., R], capture_first: bool = False):
    self.fxn, self.capture_first = fxn, capture_first
    self.cnt = 0
    self.captured: list[tuple[Any, list[Buffer], dict[str, int]]] | None = None
    self.input_sig: list[tuple] = []
    self.input_bufs: list[Buffer] = []
    self.ret: Any = None
    self.plan: list[tuple[Any, list[int]]] | None = None  # (graph or None, indices into captured), built at the first replay
    self.step_args: list[StepArgs] = []  # the arguments of each step of the plan
    self.last_call: tuple[tuple, dict[UOp, UOp], list[Buffer], dict[str, int]] | None = None  # (input UOps, binds, buffers, values)
    functools.update_wrapper(self, fxn)  # type: ignore[arg-type]
  def __get__(self, obj: Any, objtype: Any = None) -> Any: return functools.partial(self.__call__, obj) if obj is not None else self
  def reset(self) -> None: self.cnt, self.captured, self.ret, self.plan, self.step_args, self.last_call = 0, None, None, None, [], None

  def __call__(self, *args: Any, **kwargs: Any) -> R:
    from tg_core.tensor import Tensor
    inputs = _tensors_in(args, kwargs)
    for t in inputs: t.realize()
    if not JIT or (self.cnt == 0 and not self.capture_first):
      self.cnt += 1
      ret = self.fxn(*args, **kwargs)
      _realize_ret(ret)
      return ret
    # a replay on the very input UOps (and UOp arguments) of the last one (a caller that stages its inputs in fixed buffers, like
    # tg_onnx's runner) has its signature, bindings and buffers: UOps are immutable
    key = (*(t.uop for t in inputs), *(a for a in (*args, *kwargs.values()) if isinstance(a, UOp)))
    if self.cnt >= 2 and (last := self.last_call) is not None and len(key) == len(last[0]) and all(a is b for a, b in zip(key, last[0])):
      _, binds, now, new_vals = last
      self._replay(now, new_vals)
      return _fresh(self.ret, Tensor, binds)
    sig = [(_view_signature(t.uop), t.dtype, t.device) for t in inputs]
    binds = _call_binds(args, kwargs, inputs)
    if self.cnt <= 1:
      _free_caches({t.device for t in inputs if isinstance(t.device, str)})  # what the first call left cached: the capture's peak starts bare
      capturing.append(cap := Capture())
      try:
        ret = self.fxn(*args, **kwargs)
        _realize_ret(ret)
      finally:
        capturing.pop()
        cap.close()
      self.input_sig, self.input_bufs = sig, [_input_buffer(t) for t in inputs]
      self.captured = _plan_captured(cap, self.input_bufs)
      self.ret = ret
      self.cnt = 2
      if DEBUG >= 1: print(f"JIT captured {len(self.captured)} kernels with {len(inputs)} inputs")
      return ret
    if sig != self.input_sig: raise JitError(f"jitted function called with inputs {sig}, captured with {self.input_sig}; call .reset() to recapture")
    assert self.captured is not None
    now = [_input_buffer(t) for t in inputs]
    new_vals = var_vals_of(binds)
    self._replay(now, new_vals)
    self.last_call = (key, binds, now, new_vals)
    return _fresh(self.ret, Tensor, binds)

  def replay_in_place(self) -> None:
    """Replay the capture on the very buffers it was captured with and its Variable values, for a caller that writes each call's
    inputs into the captured input buffers itself and reads the outputs from the buffers of the captured return value (tg_onnx's
    runner): no Tensor is looked at or made."""
    if self.captured is None: raise JitError("replay_in_place before a capture: call the jitted function twice first (call 1 runs, call 2 captures)")
    self._replay(self.input_bufs, {})

  def _replay(self, now: list[Buffer], new_vals: dict[str, int]) -> None:
    """Run the captured kernels on these input buffers and Variable values."""
    assert self.captured is not None
    if self.plan is None:
      self.plan = _plan(self.captured)
      self.step_args = _step_args(self.captured, self.plan, self.input_bufs)
    for (graph, _), (runner, bufs_per_item, swaps, vvs) in zip(self.plan, self.step_args):
      for item, pos, inp in swaps: bufs_per_item[item][pos] = now[inp]  # this call's input buffers, written in place
      if new_vals:  # (a merged dict per distinct one: the capture shares them, Capture.record)
        merged: dict[int, dict[str, int]] = {}
        vvs = [merged[id(vv)] if id(vv) in merged else merged.setdefault(id(vv), {**vv, **new_vals}) for vv in vvs]
      if graph is not None: graph(bufs_per_item, vvs)
      elif isinstance(runner, str): bufs_per_item[0][0].copy_from(bufs_per_item[0][1])
      else: runner(bufs_per_item[0], vvs[0])  # one item, replayed as before graphs existed (devices without a graph)
    self.cnt += 1

def _plan(captured: list[tuple[Any, list[Buffer], dict[str, int]]]) -> list[tuple[Any, list[int]]]:
  """Split the capture into replay steps: each run of consecutive kernels its device's graph supports becomes one graph, every other
  item (a copy, a kernel of a device without a graph) a step of its own."""
  from tg_core.device import Device
  steps: list[tuple[Any, list[int]]] = []
  run: list[int] = []
  run_graph: Any = None
  def flush() -> None:
    nonlocal run
    if run: steps.append((run_graph([captured[i] for i in run]), run))
    run = []
  for i, (runner, _, _) in enumerate(captured):
    g = None if isinstance(runner, str) else Device[runner.device].graph
    if g is not None and g.supports(runner):
      if run and (g is not run_graph or captured[run[0]][0].device != runner.device): flush()
      run_graph = g
      run.append(i)
    else:
      flush()
      steps.append((None, [i]))
  flush()
  return steps

# what a replay step is called with: (the runner, or "copy", of a step without a graph; buffers per item; where this call's inputs
# go, as (item, position, input index); Variable values per item)
StepArgs = tuple[Any, list[list[Buffer]], list[tuple[int, int, int]], list[dict[str, int]]]

def _step_args(captured: list[tuple[Any, list[Buffer], dict[str, int]]], plan: list[tuple[Any, list[int]]], input_bufs: list[Buffer]) -> list[StepArgs]:
  """Each step's argument lists, built once at the first replay: a replay only writes the new input buffers into them."""
  inp = {id(b): i for i, b in enumerate(input_bufs)}
  ret: list[StepArgs] = []
  for _, idx in plan:
    bufs = [list(captured[i][1]) for i in idx]
    swaps = [(j, pos, inp[id(b)]) for j, bl in enumerate(bufs) for pos, b in enumerate(bl) if id(b) in inp]
    ret.append((captured[idx[0]][0], bufs, swaps, [captured[i][2] for i in idx]))
  return ret

def _plan_captured(cap: Capture, inputs: list[Buffer]) -> list[tuple[Any, list[Buffer], dict[str, int]]]:
  """The capture with its intermediates (buffers only the capture still uses: no live BUFFER uop names them, they aren't
  inputs) moved into memory shared where their lifetimes over the whole step allow. Every buffer of the result is allocated
  (those released mid-capture and not planned get memory again), and the allocators' caches of freed buffers are emptied:
  the capture's own buffers, freed, would otherwise stay there for as long as the process runs."""
  from tg_core.engine.realize import buffers
  from tg_core.schedule.memory import plan_buffers
  captured = cap.items
  held = {id(b) for b in buffers.values()} | {id(b) for b in inputs}
  # only a buffer the capture writes before it reads it (its first use is as a kernel's or copy's output, slot 0) holds nothing
  # from outside the step: one filled before or during the capture from the host (a constant uploaded mid-trace) keeps its memory
  cands = {b for _, bufs, _ in captured for b in bufs if id(b) not in held and cap.first_written[id(b)]}
  planned = plan_buffers([bufs for _, bufs, _ in captured], cands) if len(cands) >= 2 else {}
  if planned:
    captured = [(runner, [planned.get(b, b) for b in bufs], vv) for runner, bufs, vv in captured]
    if DEBUG >= 1: print(f"JIT memory planner: {len(planned)} intermediates share {sum({id(b.base): b.base.nbytes for b in planned.values()}.values())} bytes")
  cap.items = captured
  del cands, planned  # the replaced buffers die here: freed into the allocators' caches, emptied below
  for _, bufs, _ in captured:
    for b in bufs: b.ensure_allocated()
  _free_caches({b.device for _, bufs, _ in captured for b in bufs})
  return captured

def _free_caches(devices: set[str]) -> None:
  """Really free the buffers the devices' allocators keep for reuse."""
  from tg_core.device import Device, LRUAllocator
  for dev in devices:
    if isinstance(al := Device[dev].allocator, LRUAllocator): al.free_cache()

def _realize_ret(ret: Any) -> None:
  from tg_core.tensor import Tensor
  ts = [ret] if isinstance(ret, Tensor) else [r for r in ret if isinstance(r, Tensor)] if isinstance(ret, (tuple, list)) else []
  if ts: ts[0].realize(*ts[1:])

def _fresh(ret: Any, Tensor: Any, binds: dict[UOp, UOp]) -> Any:
  """New Tensor objects over the captured output buffers (so callers can't mutate the jit's own outputs' graphs), their
  symbolic shapes bound to this call's values."""
  if isinstance(ret, Tensor):
    u = ret.uop
    if binds and (old := bound_vars_in(u)): u = rebind(u, {b: binds[v] for v, b in old.items() if v in binds})
    return Tensor(u, device=ret.device)
  if isinstance(ret, (tuple, list)): return type(ret)(_fresh(r, Tensor, binds) for r in ret)
  return ret

def _input_buffer(t: Any) -> Buffer:
  """The buffer a jitted function's input is read from: the base buffer of a view (the kernels read through the view)."""
  from tg_core.engine.realize import buffer_of
  return buffer_of(t.uop.base) if t.is_realized() else t._buffer()

def _view_signature(u: UOp) -> tuple:
  """What captured kernels assume about an input: its movement ops (bound Variables as bare Variables) and base buffer."""
  chain = []
  while u.op in GroupOp.Movement:
    chain.append((u.op, unbind_arg(u.arg)))
    u = u.src[0]
  return tuple(chain), u.op, u.arg.size if u.op is Ops.BUFFER else None

def _call_binds(args: tuple, kwargs: dict, inputs: list[Any]) -> dict[UOp, UOp]:
  """{Variable: BIND} of this call: bound Variables passed as arguments and those in the input tensors' shapes."""
  binds: dict[UOp, UOp] = {}
  for a in (*args, *kwargs.values()):
    if isinstance(a, UOp) and a.op is Ops.BIND: bound_vars_in(a, binds)
  for t in inputs: bound_vars_in(t.uop, binds)
  return binds

"""HCQGraph: the kernels TinyJit captured on one HCQ device, recorded once as one compute queue and replayed by resubmitting it.

Built once: one host-visible kernarg area holds every kernel's segment (packed once), and each kernel's dispatch packets are
recorded on the device's `compute_queue_t`. A replay rewrites only the segments whose buffer addresses, Variable values or launch
dims changed (re-recording the dispatch when the dims did), then submits wait(timeline) + the recorded dispatches +
signal(timeline) as ONE submission and waits for it: the kernarg area is never rewritten while a replay may still read it.
The kernarg area goes back to the allocator when the graph is collected, unless a replay never finished (a fault or a timeout:
the device may still read it, so it stays allocated) or the device was closed (which freed it already).

The graph contract TinyJit reads (`Compiled.graph`, see docs/backend-authors.md): `supports(runner)`, `Graph(items)` and
`graph(bufs_per_item, var_vals_per_item)`."""
from __future__ import annotations
import weakref
from dataclasses import dataclass
from typing import Any
from tg_core.hcq.device import HCQBuffer, HCQCompiled
from tg_core.hcq.errors import HCQQueueError
from tg_core.hcq.program import HCQProgram, HCQRuntime

KERNARG_ALIGN = 64  # what AQL asks of a kernarg pointer; no HCQ backend asks more

@dataclass
class _Kernel:
  runner: Any  # tg_core.engine.realize.CompiledRunner
  prog: HCQProgram
  offset: int  # of its segment in the kernarg area
  key: tuple  # (buffer addresses, vals, grid, block) its segment and packets were built for
  packets: list[bytes]

class HCQGraph:
  """A batch of compiled kernels on one HCQ device (see the module docstring)."""
  @staticmethod
  def supports(runner: Any) -> bool:
    """Can this captured kernel (a CompiledRunner; TinyJit never offers copies) join a graph: its runtime program is an HCQ one."""
    return isinstance(runner.prg, HCQRuntime)

  def __init__(self, items: list[tuple[Any, list[Any], dict[str, int]]]):
    if not items: raise HCQQueueError("HCQGraph of no kernels: build it from at least one captured kernel")
    progs: list[HCQProgram] = []
    for runner, _, _ in items:
      if not self.supports(runner): raise HCQQueueError(f"HCQGraph can't batch {runner!r}: only kernels whose runtime is an HCQRuntime")
      progs.append(runner.prg.prog)
    self.dev: HCQCompiled = progs[0].dev
    if any(p.dev is not self.dev for p in progs): raise HCQQueueError("HCQGraph kernels must all run on one HCQ device; split the batch per device")
    keys = [self._key(r, b, vv) for r, b, vv in items]
    segs = [p.kernargs(*k) for p, k in zip(progs, keys)]
    offs, size = [], 0
    for s in segs:
      offs.append(size)
      size += -(-len(s) // KERNARG_ALIGN) * KERNARG_ALIGN
    self.kernargs: HCQBuffer = self.dev.allocator.alloc(size, host_visible=True)
    if self.kernargs.cpu_view is None:
      raise HCQQueueError(f"{type(self.dev.allocator).__name__}.alloc(host_visible=True) gave no host mapping for the kernarg area")
    self._pending = [False]  # a submission not yet waited for (shared with the finalizer, which must not hold self)
    weakref.finalize(self, HCQGraph._free_kernargs, self.dev, self.kernargs, self._pending).atexit = False
    self.kernels = [_Kernel(r, p, off, (), []) for (r, _, _), p, off in zip(items, progs, offs)]
    for k, key, seg in zip(self.kernels, keys, segs): self._update(k, key, seg)

  @staticmethod
  def _free_kernargs(dev: HCQCompiled, kernargs: HCQBuffer, pending: list[bool]) -> None:
    if dev.open and not pending[0]: dev.allocator.free(kernargs)

  @staticmethod
  def _key(runner: Any, bufs: list[Any], var_vals: dict[str, int]) -> tuple:
    vals, gs = runner.launch_args(var_vals)
    grid, block = runner.prg.launch_dims(gs, tuple(runner.p.local_size or (1, 1, 1)))
    return tuple(b._buf.va for b in bufs[:runner.prg.prog.layout.nbufs]), vals, grid, block

  def _update(self, k: _Kernel, key: tuple, seg: bytes | None = None) -> None:
    """Rewrite k's kernarg segment for `key`; re-record its dispatch only when the launch dims changed (its kernarg address never does)."""
    bufs, vals, grid, block = key
    view = self.kernargs.cpu_view
    assert view is not None
    seg = k.prog.kernargs(bufs, vals, grid, block) if seg is None else seg
    view[k.offset:k.offset + len(seg)] = seg
    if k.key[2:] != (grid, block):  # an empty grid (a Variable sized it to nothing) dispatches nothing
      k.packets = [] if 0 in grid else self.dev.compute_queue_t().exec(k.prog, self.kernargs.va + k.offset, grid, block).packets
    k.key = key

  def __call__(self, bufs_per_item: list[list[Any]], var_vals_per_item: list[dict[str, int]]) -> None:
    """Replay on these buffers and Variable values (one list entry per kernel, in capture order); returns once the device ran it."""
    for k, bufs, vv in zip(self.kernels, bufs_per_item, var_vals_per_item, strict=True):
      if (key := self._key(k.runner, bufs, vv)) != k.key: self._update(k, key)
    dev = self.dev
    q = dev.compute_queue_t().wait(dev.timeline_signal, dev.timeline_value)
    for k in self.kernels: q.packets.extend(k.packets)
    self._pending[0] = True
    q.signal(dev.timeline_signal, dev.next_timeline()).submit(dev)
    dev.synchronize()
    self._pending[0] = False

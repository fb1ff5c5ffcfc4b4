"""Schedule cache: the same computation over different buffers schedules the same way.

A training step or a decode loop builds the same graph every iteration, only over new buffers. The cache key is the
graph's structure with each BUFFER replaced by its position among the graph's buffers (its dtype, size and device
stay in the key: they shape the kernels). A hit reuses the kernel ASTs (they only name PARAM slots, never buffers),
binds the slots to this graph's buffers, and allocates fresh output buffers."""
from __future__ import annotations
from collections import OrderedDict
from dataclasses import dataclass

from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp, _key_arg
from tg_core.schedule import ScheduleItem, create_schedule

CACHE_SIZE = 1024

# a buffer reference in a template: (True, i) is the graph's i-th input buffer, (False, j) the j-th new buffer
BufRef = tuple[bool, int]

@dataclass(frozen=True)
class _Template:
  new_bufs: tuple[tuple, ...]                                       # (device, size, dtype) of each buffer the schedule creates
  items: tuple[tuple[UOp, tuple[BufRef, ...], dict[str, int]], ...]
  views: tuple[tuple[int, BufRef, tuple[tuple[Ops, object], ...]], ...]  # (topo index, buffer, movement ops bottom-up)

_cache: OrderedDict[tuple, _Template] = OrderedDict()
stats = {"hits": 0, "misses": 0, "uncacheable": 0}

def _structure(topo: list[UOp]) -> tuple[tuple, list[UOp]]:
  """The graph's structure with buffers numbered in order of appearance, and the buffers."""
  index: dict[UOp, int] = {}
  inputs: dict[UOp, int] = {}
  parts = []
  for i, u in enumerate(topo):
    index[u] = i
    if u.op is Ops.BUFFER and u.arg.slot >= 0:
      a = u.arg
      parts.append((Ops.BUFFER, u.dtype, a.size, a.device, a.image, inputs.setdefault(u, len(inputs))))
    else: parts.append((u.op, u.dtype, _key_arg(u.arg), u.tag, tuple([index[s] for s in u.src])))
  return tuple(parts), list(inputs)

def _view_chain(v: UOp) -> tuple[UOp, tuple[tuple[Ops, object], ...]] | None:
  chain = []
  while v.op in GroupOp.Movement:
    chain.append((v.op, v.arg))
    v = v.src[0]
  return (v, tuple(reversed(chain))) if v.op is Ops.BUFFER else None

def _make_template(topo: list[UOp], inputs: list[UOp], items: list[ScheduleItem], becomes: dict[UOp, UOp]) -> _Template | None:
  refs: dict[UOp, BufRef] = {b: (True, i) for i, b in enumerate(inputs)}
  new_bufs: list[tuple] = []
  def ref(b: UOp) -> BufRef:
    if (r := refs.get(b)) is None:
      r = refs[b] = (False, len(new_bufs))
      new_bufs.append((b.arg.device, b.arg.size, b.dtype))
    return r
  titems = []
  for si in items:
    if si.ast.op is Ops.COPY:
      if si.ast.src[0] is not si.bufs[1]: return None
    elif any(u.op is Ops.BUFFER for u in si.ast.toposort()): return None  # a kernel naming a buffer can't be reused
    titems.append((si.ast, tuple(ref(b) for b in si.bufs), si.var_vals))
  pos = {u: i for i, u in enumerate(topo)}
  views = []
  for node, view in becomes.items():
    if (i := pos.get(node)) is None: continue  # a node of the hazard-fixed copy of the graph: no tensor holds it
    if (vc := _view_chain(view)) is None: return None
    views.append((i, ref(vc[0]), vc[1]))
  return _Template(tuple(new_bufs), tuple(titems), tuple(views))

def _instantiate(t: _Template, topo: list[UOp], inputs: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  fresh = [UOp.new_buffer(dev, size, dtype) for dev, size, dtype in t.new_bufs]
  def buf(r: BufRef) -> UOp: return inputs[r[1]] if r[0] else fresh[r[1]]
  items = []
  for ast, refs, var_vals in t.items:
    bufs = tuple(buf(r) for r in refs)
    if ast.op is Ops.COPY: ast = ast.replace(src=(bufs[1], *ast.src[1:]))
    items.append(ScheduleItem(ast, bufs, var_vals))
  becomes: dict[UOp, UOp] = {}
  for i, r, chain in t.views:
    v = buf(r)
    for op, arg in chain: v = v._mop(op, arg)
    becomes[topo[i]] = v
  return items, becomes

def create_schedule_cached(sink: UOp, topo: list[UOp] | None = None) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  """`create_schedule`, reusing the result for graphs of the same structure. `topo`: sink.toposort(), if the caller has it."""
  if topo is None: topo = list(sink.toposort())
  key, inputs = _structure(topo)
  if (t := _cache.get(key)) is not None:
    _cache.move_to_end(key)
    stats["hits"] += 1
    return _instantiate(t, topo, inputs)
  items, becomes = create_schedule(sink, topo)
  if (t := _make_template(topo, inputs, items, becomes)) is None:
    stats["uncacheable"] += 1
    return items, becomes
  stats["misses"] += 1
  _cache[key] = t
  if len(_cache) > CACHE_SIZE: _cache.popitem(last=False)
  return items, becomes

__all__ = ["create_schedule_cached"]

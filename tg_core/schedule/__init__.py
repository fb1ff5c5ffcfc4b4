"""The scheduler: tensor graph -> an ordered list of kernels (and copies) over buffers.

1. Pick the realize points: the outputs, CONTIGUOUS, COPY (and its source), assigns, and reductions whose result is
   expanded, reduced again, or used more than once (recomputing those would repeat a whole reduction per element).
2. Every realize point gets a buffer; each becomes one kernel, built by rangeify from the graph between it and the
   realize points (or existing buffers) it reads. Elementwise chains and views fuse into their consumer."""
from __future__ import annotations
from dataclasses import dataclass, field

from tg_core.helpers import DEBUG
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp
from tg_core.schedule.rangeify import build_kernel

@dataclass(frozen=True)
class ScheduleItem:
  """One unit of work: `ast` is a kernel SINK (or a COPY) over `bufs` (BUFFER uops, output first)."""
  ast: UOp
  bufs: tuple[UOp, ...]
  var_vals: dict[str, int] = field(default_factory=dict)

def is_buffer_view(u: UOp) -> bool:
  while u.op in GroupOp.Movement: u = u.src[0]
  return u.op is Ops.BUFFER and not u.is_variable

def is_contiguous_buffer(u: UOp) -> bool:
  """A BUFFER, or a RESHAPE of one: its elements are the buffer's, in order."""
  return u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)

def _consumers(topo: list[UOp]) -> dict[UOp, list[UOp]]:
  children: dict[UOp, list[UOp]] = {}
  for u in topo:
    for s in u.src: children.setdefault(s, []).append(u)
  return children

def _users_through_views(u: UOp, children: dict[UOp, list[UOp]]) -> set[UOp]:
  """The nodes that use u's value, looking through chains of movement ops."""
  users: set[UOp] = set()
  stack = [u]
  while stack:
    for c in children.get(stack.pop(), []):
      if c.op in GroupOp.Movement: stack.append(c)
      else: users.add(c)
  return users

def get_realizes(sink: UOp, topo: list[UOp]) -> dict[UOp, None]:
  children = _consumers(topo)
  realizes: dict[UOp, None] = {}
  for out in sink.src:
    if not is_buffer_view(out): realizes[out] = None
  for u in topo:
    if u.op is Ops.CONTIGUOUS and not (is_contiguous_buffer(u.src[0])): realizes[u] = None
    elif u.op is Ops.AFTER: realizes[u] = None
    elif u.op is Ops.COPY:
      realizes[u] = None
      if not is_contiguous_buffer(u.src[0]): realizes[u.src[0]] = None
    elif u.op is Ops.REDUCE_AXIS:
      if len(_users_through_views(u, children)) > 1: realizes[u] = None
      else:
        # walk the single-consumer chain up to the next realize point: an EXPAND on the way means recompute
        stack = list(children.get(u, []))
        seen: set[UOp] = set()
        while stack:
          c = stack.pop()
          if c in seen or c.op in {Ops.SINK, Ops.CONTIGUOUS, Ops.COPY, Ops.AFTER, Ops.STORE}: continue
          seen.add(c)
          # an EXPAND means recompute per element; a consuming REDUCE_AXIS would run this whole reduction serially
          # inside each of its reduce iterations (and lose the parallelism of its output axes)
          if c.op in (Ops.EXPAND, Ops.REDUCE_AXIS):
            realizes[u] = None
            break
          stack.extend(children.get(c, []))
  return realizes

def _view_top_reads(sink: UOp) -> dict[UOp, list[tuple[UOp, UOp]]]:
  """For each BUFFER: the (consumer, view) pairs that read it, a view being the movement-op chain over the buffer.
  Assign targets (src[0] of AFTER and STORE) are writes, not reads."""
  reads: dict[UOp, list[tuple[UOp, UOp]]] = {}
  for n in sink.toposort():
    if n.op in GroupOp.Movement: continue
    for i, s in enumerate(n.src):
      if i == 0 and n.op in (Ops.AFTER, Ops.STORE): continue
      b = s
      while b.op in GroupOp.Movement: b = b.src[0]
      if b.op is Ops.BUFFER and not b.is_variable: reads.setdefault(b, []).append((n, s))
  return reads

def fix_write_hazards(sink: UOp, topo: list[UOp]) -> UOp:
  """An assign overwrites its buffer while other kernels (or itself, through another view, e.g. `a.assign(a.flip(0))`)
  may still need the old values. Those reads get a snapshot (a copy made before the assign runs)."""
  writers = [u for u in topo if u.op is Ops.AFTER and len(u.src) >= 2 and u.src[1].op is Ops.STORE]
  if not writers: return sink
  reads = _view_top_reads(sink)
  consumer_subs: dict[UOp, dict[UOp, UOp]] = {}
  snaps: dict[UOp, UOp] = {}
  for w in writers:
    buf, target = w.src[0].base, w.src[0]
    sites = reads.get(buf, [])
    own = set(w.src[1].src[1].toposort(gate=lambda u: u.op is not Ops.AFTER))
    if all(n in own and v is target for n, v in sites): continue  # only elementwise reads of itself at the written index
    snap = snaps.setdefault(buf, buf.copy_to_device(buf.device))  # a COPY always makes a new buffer
    for n, v in sites: consumer_subs.setdefault(n, {})[v] = v.substitute({buf: snap}) if v is not buf else snap
  if not snaps: return sink
  new_nodes = {n: n.replace(src=tuple(m.get(s, s) for s in n.src)) for n, m in consumer_subs.items()}
  sink = sink.substitute(new_nodes, walk=False)
  # every assign to a snapshotted buffer runs after its snapshot: the snapshot joins the AFTER's dependencies
  adds = {u: u.replace(src=(*u.src, snaps[u.src[0].base])) for u in sink.toposort()
          if u.op is Ops.AFTER and len(u.src) >= 2 and u.src[1].op is Ops.STORE and u.src[0].base in snaps}
  return sink.substitute(adds, walk=False) if adds else sink

def create_schedule(sink: UOp, topo: list[UOp] | None = None) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  """Schedule the tensors in `sink` (`topo`: sink.toposort(), if the caller has it). Returns the items in execution order
  and a map from every realized tensor node to the view of the buffer that now holds it."""
  orig, topo = sink, topo if topo is not None else list(sink.toposort())
  if (sink := fix_write_hazards(sink, topo)) is not orig: topo = list(sink.toposort())
  realizes = get_realizes(sink, topo)
  realized: dict[UOp, UOp] = {}
  items: list[ScheduleItem] = []
  for u in topo:
    if u not in realizes: continue
    if u.op is Ops.CONTIGUOUS and is_contiguous_buffer(u.src[0]):
      realized[u] = realized.get(u.src[0], u.src[0])
      continue
    device = u.device
    if u.op is Ops.AFTER:
      target = u.src[0]
      ast, bufs, var_vals = build_kernel(u, realized, target)
      items.append(ScheduleItem(ast, bufs, var_vals))
      realized[u] = target
      continue
    if (n := u.max_numel()) == 0:
      realized[u] = UOp.new_buffer(device, 0, u.dtype).reshape(u.shape)
      continue
    # a symbolic shape gets a buffer of its largest size, viewed (shrunk) to the shape
    buf = UOp.new_buffer(device, n, u.dtype)
    view = buf.view_as(u.shape) if u.shape != (buf.arg.size,) else buf
    if u.op is Ops.COPY:
      src = realized.get(u.src[0], u.src[0])
      src_buf = src if src.op is Ops.BUFFER else src.src[0]
      items.append(ScheduleItem(u.replace(src=(src_buf, u.src[1])), (buf, src_buf)))
    else:
      ast, bufs, var_vals = build_kernel(u, realized, view)
      items.append(ScheduleItem(ast, bufs, var_vals))
    realized[u] = view
  if DEBUG >= 3: print(f"scheduled {len(items)} items for {len(sink.src)} outputs")
  if sink is not orig: realized.update({o: realized[n] for o, n in zip(orig.src, sink.src) if n in realized})
  return items, realized

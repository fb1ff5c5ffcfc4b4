"""The scheduler: tensor graph -> an ordered list of kernels (and copies) over buffers.

1. Pick the realize points: the outputs, CONTIGUOUS, COPY (and its source), assigns, and reductions whose result is
   expanded, reduced again, or used more than once (recomputing those would repeat a whole reduction per element).
2. Every realize point gets a buffer; each becomes one kernel, built by rangeify from the graph between it and the
   realize points (or existing buffers) it reads. Elementwise chains and views fuse into their consumer."""
from __future__ import annotations
from dataclasses import dataclass, field

from tg_core.helpers import DEBUG, SPEC, ContextVar
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp
from tg_core.uop.pattern import PatternMatcher, UPat
from tg_core.uop.rewrite import graph_rewrite
from tg_core.schedule.rangeify import build_kernel

# 0: every reduction that is expanded or reduced again gets its own kernel (the rule before row-statistic fusion, for A/B runs)
ROW_REDUCE_FUSION = ContextVar("ROW_REDUCE_FUSION", 1)
# 0: a reduction reduced again with no broadcast between (a nested reduce) gets its own kernel, as before
NESTED_REDUCE_FUSION = ContextVar("NESTED_REDUCE_FUSION", 1)

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

# *** realize decisions: a pass that marks the nodes that get a buffer (ctx.realizes), rewriting nothing ***

@dataclass
class ScheduleCtx:
  """What the scheduler's passes share: the graph's consumers, the realize points, and (splitting) the items and the
  buffer view every realized node now lives in."""
  topo: list[UOp]
  children: dict[UOp, list[UOp]] = field(default_factory=dict)
  realizes: dict[UOp, None] = field(default_factory=dict)
  realized: dict[UOp, UOp] = field(default_factory=dict)
  items: list[ScheduleItem] = field(default_factory=list)
  def __post_init__(self) -> None: self.children = _consumers(self.topo)

def _realize(ctx: ScheduleCtx, *us: UOp) -> None: ctx.realizes.update((u, None) for u in us)

def _leading_axes(r: UOp) -> tuple:
  """r's shape up to its last axis longer than 1: the loops its value depends on."""
  n = max((i + 1 for i, s in enumerate(r.shape) if not (isinstance(s, int) and s == 1)), default=0)
  return r.shape[:n]

def _reduce_needs_realize(ctx: ScheduleCtx, r: UOp) -> bool:
  """A reduction used more than once, or expanded or reduced again before its next realize point in a way that would make
  the consumer recompute it: recomputing it would repeat the whole reduction per element (a consuming REDUCE_AXIS would run it
  serially in each of its iterations). A reduction whose value depends only on leading axes that every node up to the realize
  point keeps as its leading axes (a scalar, a row statistic broadcast along trailing axes: rms_norm, softmax) fuses on a
  device whose output axes are loops: its consumer's loops over those axes are outermost, so the reduction is hoisted out of
  the inner ones and runs once per row."""
  if len(_users_through_views(r, ctx.children)) > 1: return True
  chain: list[UOp] = []
  stack, seen = list(ctx.children.get(r, [])), set()
  while stack:  # the single-consumer chain up to the next realize point
    c = stack.pop()
    if c in seen or c.op in {Ops.SINK, Ops.CONTIGUOUS, Ops.COPY, Ops.AFTER, Ops.STORE}: continue
    seen.add(c)
    chain.append(c)
    stack.extend(ctx.children.get(c, []))
  if not any(c.op in (Ops.EXPAND, Ops.REDUCE_AXIS) for c in chain): return False
  # reduced again with no broadcast between (a quantized dot product's per-group sums, then their scaled sum): each of its values
  # feeds one term of the consumer, so fused it runs once per consumer iteration, nothing recomputed. Not into a consumer with a
  # single output (a total): its kernel would have no output axis to split across cores, where the inner reduce alone has one
  if NESTED_REDUCE_FUSION and _output_axes_are_loops(r.device) and not any(c.op is Ops.EXPAND for c in chain) and \
     all(any(not (isinstance(d, int) and d == 1) for d in c.shape) for c in chain if c.op is Ops.REDUCE_AXIS): return False
  lead = _leading_axes(r)
  return not (ROW_REDUCE_FUSION and _output_axes_are_loops(r.device)) or any(c.shape[:len(lead)] != lead for c in chain)

def _output_axes_are_loops(device: object) -> bool:
  """Whether the device runs a kernel's output axes as loops (a CPU: a reduce hoisted out of them runs once per core), not as
  grid indices (a GPU: it would run once per thread)."""
  from tg_core.device import Device
  return isinstance(device, str) and not Device[device].renderer.caps.has_grid

pm_realize = PatternMatcher([
  # the outputs, unless they are views of buffers already
  (UPat(Ops.SINK, name="s"), lambda ctx, s: _realize(ctx, *[o for o in s.src if not is_buffer_view(o)])),
  (UPat(Ops.CONTIGUOUS, name="c"), lambda ctx, c: None if is_contiguous_buffer(c.src[0]) else _realize(ctx, c)),
  (UPat(Ops.AFTER, name="a"), lambda ctx, a: _realize(ctx, a)),
  # a copy and its source (unless that is a buffer already)
  (UPat(Ops.COPY, name="c"), lambda ctx, c: _realize(ctx, c) if is_contiguous_buffer(c.src[0]) else _realize(ctx, c, c.src[0])),
  (UPat(Ops.REDUCE_AXIS, name="r"), lambda ctx, r: _realize(ctx, r) if _reduce_needs_realize(ctx, r) else None),
])

def get_realizes(sink: UOp, topo: list[UOp]) -> dict[UOp, None]:
  ctx = ScheduleCtx(topo)
  graph_rewrite(sink, pm_realize, ctx, enter_calls=True, name="schedule: realize decisions")
  return ctx.realizes

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

# *** kernel splitting: a pass over the graph in topological order; each realize point becomes one item ***

def _split_assign(ctx: ScheduleCtx, a: UOp) -> None:
  ast, bufs, var_vals = build_kernel(a, ctx.realized, target := a.src[0])
  ctx.items.append(ScheduleItem(ast, bufs, var_vals))
  ctx.realized[a] = target

def _new_buffer(ctx: ScheduleCtx, u: UOp) -> tuple[UOp, UOp] | None:
  """A buffer for realize point u and its view with u's shape (None for an empty u, which gets an empty buffer)."""
  if (n := u.max_numel()) == 0:
    ctx.realized[u] = UOp.new_buffer(u.device, 0, u.dtype).reshape(u.shape)
    return None
  # a symbolic shape gets a buffer of its largest size, viewed (shrunk) to the shape
  buf = UOp.new_buffer(u.device, n, u.dtype)
  return buf, buf.view_as(u.shape) if u.shape != (buf.arg.size,) else buf

def _split_copy(ctx: ScheduleCtx, c: UOp) -> None:
  if c not in ctx.realizes or (bv := _new_buffer(ctx, c)) is None: return
  src = ctx.realized.get(c.src[0], c.src[0])
  src_buf = src if src.op is Ops.BUFFER else src.src[0]
  ctx.items.append(ScheduleItem(c.replace(src=(src_buf, c.src[1])), (bv[0], src_buf)))
  ctx.realized[c] = bv[1]

def _split_kernel(ctx: ScheduleCtx, u: UOp) -> None:
  if u not in ctx.realizes: return
  if u.op is Ops.CONTIGUOUS and is_contiguous_buffer(u.src[0]):  # a contiguous buffer already: that buffer
    ctx.realized[u] = ctx.realized.get(u.src[0], u.src[0])
    return
  if (bv := _new_buffer(ctx, u)) is None: return
  ast, bufs, var_vals = build_kernel(u, ctx.realized, bv[1])
  ctx.items.append(ScheduleItem(ast, bufs, var_vals))
  ctx.realized[u] = bv[1]

pm_split_kernels = PatternMatcher([
  (UPat(Ops.AFTER, name="a"), lambda ctx, a: _split_assign(ctx, a) if a in ctx.realizes else None),
  (UPat(Ops.COPY, name="c"), _split_copy),
  (UPat(GroupOp.All - {Ops.SINK, Ops.AFTER, Ops.COPY}, name="u"), _split_kernel),
])

def kernel_graph(items: list[ScheduleItem]) -> UOp:
  """The schedule as a kernel graph (a SINK of CALLs of each item's kernel over its buffers), for spec_kernel_graph."""
  return UOp.sink(*[si.ast.call(*si.bufs) for si in items])

def create_schedule(sink: UOp, topo: list[UOp] | None = None) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  """Schedule the tensors in `sink` (`topo`: sink.toposort(), if the caller has it). Returns the items in execution order
  and a map from every realized tensor node to the view of the buffer that now holds it."""
  orig, topo = sink, topo if topo is not None else list(sink.toposort())
  if (sink := fix_write_hazards(sink, topo)) is not orig: topo = list(sink.toposort())
  ctx = ScheduleCtx(topo)
  graph_rewrite(sink, pm_realize, ctx, enter_calls=True, name="schedule: realize decisions")
  graph_rewrite(sink, pm_split_kernels, ctx, enter_calls=True, name="schedule: split kernels")
  items, realized = ctx.items, ctx.realized
  if SPEC:
    from tg_core.uop.spec import spec_kernel_graph, verify_if_spec
    verify_if_spec(kernel_graph(items), spec_kernel_graph, "kernel graph")
  if DEBUG >= 3: print(f"scheduled {len(items)} items for {len(sink.src)} outputs")
  if sink is not orig: realized.update({o: realized[n] for o, n in zip(orig.src, sink.src) if n in realized})
  return items, realized

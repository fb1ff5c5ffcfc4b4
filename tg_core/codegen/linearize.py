"""Linearize: order a lowered kernel graph into a list of UOps with properly nested RANGE ... END loops.

Each node belongs to the innermost loop among the ranges it depends on. A RANGE with no END is not a loop: renderers
that reduce whole axes at once (PYTHON) see it as an axis of values that a REDUCE folds. Loops nest as their ENDs say (the ranges
still open at a range's END enclose it). Inside one loop body, nodes and whole child loops are ordered
topologically, each child loop as one unit from its RANGE to its END."""
from __future__ import annotations
import heapq

from tg_core.uop import Ops
from tg_core.uop.ops import UOp

def linearize(sink: UOp) -> list[UOp]:
  topo = list(sink.toposort())
  order = {u: i for i, u in enumerate(topo)}
  ends: dict[UOp, UOp] = {}
  for u in topo:
    if u.op is Ops.END:
      for r in u.src[1:]:
        if r.op is Ops.RANGE: ends[r] = u
  # parent loop of each range: the innermost range still open at its END. The depth counts every enclosing loop,
  # transitively: a reduce loop whose body doesn't use an outer loop's index is still nested inside that loop
  anc: dict[UOp, set[UOp]] = {}
  def ancestors(r: UOp) -> set[UOp]:
    if r not in anc:
      anc[r] = set()
      for x in (ends[r].ranges if r in ends else {}): anc[r] |= {x} | ancestors(x)
    return anc[r]
  def rdepth(r: UOp) -> int: return len(ancestors(r))
  for r in ends: rdepth(r)
  parent: dict[UOp, UOp | None] = {}
  for r in ends:
    enc = [x for x in ends[r].ranges]
    parent[r] = max(enc, key=rdepth) if enc else None
  def block_of(u: UOp) -> UOp | None:
    if u.op is Ops.RANGE and u not in ends: return None
    if u.op is Ops.RANGE: return parent.get(u)
    if u.op is Ops.END: return parent.get(next(r for r in u.src[1:] if r.op is Ops.RANGE))
    rs = [r for r in u.ranges if r in ends]  # a RANGE without an END is a vector axis (reduced by a REDUCE), not a loop
    if not rs: return None
    return max(rs, key=rdepth)
  blk = {u: block_of(u) for u in topo}
  paths: dict[UOp | None, list[UOp]] = {}
  def path(b: UOp | None) -> list[UOp]:
    if (ret := paths.get(b)) is None:
      ret = paths[b] = [] if b is None else [*path(parent.get(b)), b]
    return ret
  # each node's loop path: the loops enclosing it, outermost first, and its own loop for a loop's RANGE and END
  full: dict[UOp, list[UOp]] = {}
  for u in topo:
    own = u if u.op is Ops.RANGE and u in ends else (next(r for r in u.src[1:] if r.op is Ops.RANGE) if u.op is Ops.END else None)
    full[u] = path(blk[u]) + [own] if own is not None else path(blk[u])
  # the item a node is in, seen from block B: the node itself or the child loop of B that contains it
  def item_in(u: UOp, b: UOp | None) -> UOp | tuple | None:
    p = full[u]
    if b is None: return ("loop", p[0]) if p else u
    if b not in p: return None
    i = p.index(b)
    return ("loop", p[i+1]) if i + 1 < len(p) else u
  members: dict[UOp | None, list[UOp]] = {}
  for u in topo:
    for b in [None, *full[u]]: members.setdefault(b, []).append(u)

  out: list[UOp] = []
  def emit_block(b: UOp | None) -> None:
    mem = members.get(b, [])
    items: dict[object, list[UOp]] = {}
    for u in mem:
      if b is not None and (u is b or u is ends.get(b)): continue  # the parent emits a loop's RANGE and END
      it = item_in(u, b)
      if it is None: continue
      items.setdefault(it, []).append(u)
    deps: dict[object, set] = {it: set() for it in items}
    users: dict[object, set] = {it: set() for it in items}
    for it, us in items.items():
      for u in us:
        for s in u.src:
          si = item_in(s, b)
          if si is not None and si != it and si in items:
            deps[it].add(si); users[si].add(it)  # noqa: E702
    prio = {it: min(order[u] for u in us) for it, us in items.items()}
    ready = [(prio[it], id(it), it) for it in items if not deps[it]]
    heapq.heapify(ready)
    done = 0
    while ready:
      _, _, it = heapq.heappop(ready)
      done += 1
      if isinstance(it, tuple):
        r = it[1]
        out.append(r)
        emit_block(r)
        out.append(ends[r])
      else: out.append(it)
      for nx in users[it]:
        deps[nx].discard(it)
        if not deps[nx]: heapq.heappush(ready, (prio[nx], id(nx), nx))
    if done != len(items): raise RuntimeError("linearize: cycle between loop bodies (a node depends on two sibling loops?)")
  emit_block(None)
  assert len(out) == len(set(out)) == len(topo), "linearize emitted a node twice or lost one"
  return out

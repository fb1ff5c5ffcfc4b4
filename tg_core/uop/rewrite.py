"""`graph_rewrite`: apply a PatternMatcher over a whole graph to a fixed point, without Python recursion."""
from __future__ import annotations
import atexit
from typing import Any

from tg_core.helpers import DEBUG, TRACK_MATCH_STATS
from tg_core.uop import Ops
from tg_core.uop.ops import UOp, _OPAQUE_CALL_BODIES
from tg_core.uop.pattern import PatternMatcher, UPat, match_stats

class BottomUpGate(Exception):
  """Raised by a bottom-up rule to keep a node as it is and not descend into its sources. Raised on what a rule made of
  the node, that result is kept (its sources not walked): the gate carries it in args[0]."""

class RewriteContext:
  def __init__(self, pm: PatternMatcher, ctx: Any, bottom_up: bool, walk: bool, enter_calls: bool):
    self.pm, self.ctx, self.bottom_up, self.walk, self.enter_calls = pm, ctx, bottom_up, walk, enter_calls
    self.replace: dict[UOp, UOp] = {}

  def _skip_body(self, n: UOp) -> bool:
    # calls with RETURNED inputs are inlined into the enclosing graph: their bodies are never rewritten separately
    return n.op is Ops.CALL and (n.num_returned > 0 or (not self.enter_calls and n.src[0].op in _OPAQUE_CALL_BODIES))

  def _bottom_up_fixed_point(self, n: UOp) -> UOp:
    cur = n
    while True:
      try: nxt = self.pm.rewrite(cur, self.ctx)
      except BottomUpGate:
        if cur is n: raise
        raise BottomUpGate(cur) from None
      if nxt is None: return cur
      cur = nxt
      if self.walk: return cur

  def _push_srcs(self, stack: list[tuple[UOp, int, UOp]], n: UOp, in_progress: set[UOp]) -> None:
    if self._skip_body(n): self.replace[n.src[0]] = n.src[0]
    for x in reversed(n.src):
      if x not in self.replace and x not in in_progress: stack.append((x, 0, x))

  def rewrite(self, root: UOp) -> UOp:
    replace = self.replace
    # stack entries: (node, stage, working node). stage 0: first visit; 1: sources done; 2: link node to its result;
    # 3: (bottom-up walk) the rule's result has its sources walked, then becomes the node's result without being offered again
    stack: list[tuple[UOp, int, UOp]] = [(root, 0, root)]
    # bottom-up walk: nodes a rule replaced whose result is still being walked. inside its own replacement such a node
    # stays as it is (substitute({x: x+1}) gives x+1, not an endless x+1+1+...)
    in_progress: set[UOp] = set()
    def get(x: UOp) -> UOp: return x if x in in_progress and x not in replace else replace[x]
    while stack:
      n, stage, new_n = stack.pop()
      if n in replace: continue
      if stage == 0:
        if self.bottom_up:
          try: new_n = self._bottom_up_fixed_point(n)
          except BottomUpGate as gate:
            replace[n] = gate.args[0] if gate.args and isinstance(gate.args[0], UOp) else n
            continue
          if new_n is not n:
            if self.walk:  # a walk offers each node to the rules once: the result's sources are still walked
              in_progress.add(n)
              stack.append((n, 3, new_n))
              self._push_srcs(stack, new_n, in_progress)
              continue
            stack.append((n, 2, new_n))
            # the fixed point ended at new_n: no rule matches it, so it goes straight on to its sources
            if new_n not in replace:
              stack.append((new_n, 1, new_n))
              self._push_srcs(stack, new_n, in_progress)
            continue
        stack.append((n, 1, new_n))
        self._push_srcs(stack, new_n, in_progress)
      elif stage == 1:
        new_src = tuple(get(x) for x in new_n.src) if in_progress else tuple(replace[x] for x in new_n.src)
        if new_src == new_n.src:
          if self.bottom_up or (rw := self.pm.rewrite(new_n, self.ctx)) is None:
            replace[n] = new_n
            continue
          if self.walk:
            replace[n] = rw
            continue
          stack.append((n, 2, rw))
          stack.append((rw, 0, rw))
        else:
          rebuilt = new_n.replace(src=new_src)
          if self.walk:  # each node is offered to the rules once (top-down: after its sources), results are final
            replace[n] = rebuilt if self.bottom_up or (rw := self.pm.rewrite(rebuilt, self.ctx)) is None else rw
            continue
          stack.append((n, 2, rebuilt))
          stack.append((rebuilt, 0, rebuilt))
      elif stage == 2:
        replace[n] = replace[new_n]
      else:
        replace[n] = new_n.replace(src=tuple(get(x) for x in new_n.src))
        in_progress.discard(n)
    return replace[root]

def graph_rewrite(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, walk: bool = False,
                  enter_calls: bool = False, name: str | None = None) -> UOp:
  """Rewrite every node of `sink`'s graph with `pm` until nothing matches.
  Default order rewrites sources first, then the node (and the result again). `bottom_up=True` tries the rules on a
  node before its sources. `walk=True` applies rules once per node (no fixed point). `enter_calls=True` also rewrites
  the bodies of opaque CALLs."""
  tracing = match_stats.enabled
  start = match_stats.begin() if tracing else None
  ret = RewriteContext(pm, ctx, bottom_up, walk, enter_calls).rewrite(sink)
  if tracing and start is not None: match_stats.end(name or "unnamed", start, len(sink.toposort()) if DEBUG >= 6 else 0, DEBUG >= 6)
  return ret

def graph_rewrite_map(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, name: str | None = None) -> dict[UOp, UOp]:
  """Like graph_rewrite, but returns what every node of the original graph became."""
  rc = RewriteContext(pm, ctx, bottom_up, False, False)
  rc.rewrite(sink)
  return {k: rc.replace[k] for k in sink.toposort() if k in rc.replace}

_substitute = PatternMatcher([(UPat(tuple(Ops), name="x"), lambda ctx, x: ctx.get(x, None))])

if TRACK_MATCH_STATS or DEBUG >= 6:
  match_stats.enabled = True
  if TRACK_MATCH_STATS >= 2: atexit.register(lambda: print(match_stats.report()))

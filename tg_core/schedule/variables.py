"""Bound Variables in the tensor graph: their values are runtime arguments, never part of what is scheduled or compiled.

A tensor graph holds a bound Variable as a BIND (Variable, value) node, as a value or inside the shape arguments of
movement ops (`t[:i]` is a SHRINK whose end is `i`). Before scheduling, `unbind_graph` replaces every BIND by its
Variable and returns the values, so the schedule (and its cache key) and the kernels are the same for every value;
kernels read the values as ALU params (DEFINE_VAR) at launch. After scheduling, `rebind` puts the BINDs back into the
views that the realized tensors now hold, so their shapes keep their bound values."""
from __future__ import annotations

from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp

class BindMismatchError(ValueError):
  """One Variable bound to two different values in one realize."""

def _arg_uops(arg: tuple) -> list[UOp]:
  """The symbolic sizes inside a movement op's arg (a tuple of sizes, or of (begin, end) pairs)."""
  ret: list[UOp] = []
  for a in arg:
    if isinstance(a, UOp): ret.append(a)
    elif isinstance(a, tuple): ret.extend(x for x in a if isinstance(x, UOp))
  return ret

def _substitute(x: UOp, m: dict[UOp, UOp]) -> UOp:
  """x with the nodes in m replaced (a size expression is a few nodes: a rebuild is cheaper than a graph_rewrite)."""
  new: dict[UOp, UOp] = {}
  for n in x.toposort(gate=lambda n: n not in m):
    new[n] = n.replace(src=tuple(m[s] if s in m else new[s] for s in n.src))
  return m[x] if x in m else new[x]

def _unbind_expr(x: UOp) -> UOp: return _substitute(x, {b: b.src[0] for b in x.toposort() if b.op is Ops.BIND})

def _map_arg(arg: tuple, fxn: dict[UOp, UOp]) -> tuple:
  return tuple(fxn.get(a, a) if isinstance(a, UOp) else tuple(fxn.get(x, x) if isinstance(x, UOp) else x for x in a) if isinstance(a, tuple) else a
               for a in arg)

def has_binds(topo: list[UOp]) -> bool:
  """A bound Variable is in the graph: a BIND node, or a symbolic size of a movement op (runs on every realize: kept lean)."""
  for u in topo:
    op = u.op
    if op is Ops.BIND: return True
    if op is Ops.RESHAPE or op is Ops.EXPAND:
      for a in u.arg:
        if a.__class__ is not int: return True
    elif op is Ops.SHRINK or op is Ops.PAD:
      for b, e in u.arg:
        if b.__class__ is not int or e.__class__ is not int: return True
  return False

def _record(b: UOp, binds: dict[UOp, UOp]) -> None:
  var = b.src[0]
  if (old := binds.setdefault(var, b)) is not b:
    raise BindMismatchError(f"Variable {var.arg.name!r} is bound to both {old.src[1].arg} and {b.src[1].arg} in one realize; "
                            "realize the tensors of each value separately")

def unbind_graph(sink: UOp, topo: list[UOp]) -> tuple[UOp, dict[UOp, UOp], dict[UOp, UOp]]:
  """`sink` with every BIND replaced by its Variable. Returns (new sink, {old node: new node} for every node that changed,
  {Variable: its BIND})."""
  binds: dict[UOp, UOp] = {}
  new: dict[UOp, UOp] = {}
  expr_cache: dict[UOp, UOp] = {}
  def unbind_expr(x: UOp) -> UOp:
    if (r := expr_cache.get(x)) is None:
      bs = [b for b in x.toposort() if b.op is Ops.BIND]
      for b in bs: _record(b, binds)
      r = expr_cache[x] = _substitute(x, {b: b.src[0] for b in bs}) if bs else x
    return r
  for u in topo:
    if u.op is Ops.BIND:
      _record(u, binds)
      new[u] = u.src[0]
      continue
    src = tuple(new.get(s, s) for s in u.src)
    arg = u.arg
    if u.op in GroupOp.Movement and (xs := _arg_uops(arg)): arg = _map_arg(arg, {x: unbind_expr(x) for x in xs})
    if src != u.src or arg is not u.arg: new[u] = u.replace(src=src, arg=arg)
  return new.get(sink, sink), new, binds

def rebind(view: UOp, binds: dict[UOp, UOp]) -> UOp:
  """A view (movement ops over a BUFFER) with its Variables bound again: `binds` maps each Variable (or an old BIND) to a BIND."""
  chain: list[UOp] = []
  u = view
  while u.op in GroupOp.Movement:
    chain.append(u)
    u = u.src[0]
  if not any(_arg_uops(c.arg) for c in chain): return view
  for c in reversed(chain):
    xs = _arg_uops(c.arg)
    u = u._mop(c.op, _map_arg(c.arg, {x: _substitute(x, binds) for x in xs}) if xs else c.arg)
  return u

def var_vals_of(binds: dict[UOp, UOp]) -> dict[str, int]: return {v.arg.name: b.src[1].arg for v, b in binds.items()}

def unbind_arg(arg: object) -> object:
  """A movement op's arg with its bound Variables as bare Variables."""
  if not isinstance(arg, tuple) or not (xs := _arg_uops(arg)): return arg
  return _map_arg(arg, {x: _unbind_expr(x) for x in xs})

def bound_vars_in(u: UOp, binds: dict[UOp, UOp] | None = None) -> dict[UOp, UOp]:
  """{Variable: BIND} for the bound Variables in a tensor's graph (values and shapes), added to `binds` if given."""
  if binds is None: binds = {}
  for n in u.toposort():
    if n.op is Ops.BIND: _record(n, binds)
    elif n.op in GroupOp.Movement:
      for x in _arg_uops(n.arg):
        for b in x.toposort():
          if b.op is Ops.BIND: _record(b, binds)
  return binds

__all__ = ["BindMismatchError", "has_binds", "unbind_graph", "unbind_arg", "rebind", "var_vals_of", "bound_vars_in"]

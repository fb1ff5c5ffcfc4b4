"""Rangeify: turn the tensor graph that one kernel computes into a kernel AST over explicit index arithmetic.

Movement ops disappear here: each one maps the index of its output to an index of its source (RESHAPE divides and
takes remainders, PERMUTE reorders, EXPAND zeroes, SHRINK offsets, FLIP mirrors, PAD offsets and adds a validity
gate). A REDUCE_AXIS opens one RANGE per reduced axis and becomes a REDUCE over them. Symbolic simplification then
folds the index arithmetic back to plain strides wherever the views line up."""
from __future__ import annotations
import itertools
import re
from typing import Callable
from dataclasses import dataclass, field

from tg_core.dtype import AddrSpace, dtypes
from tg_core.helpers import prod
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import AxisType, KernelInfo, ParamArg, UOp, same_numel, sint, svmax
from tg_core.uop.pattern import PatternMatcher, UPat
from tg_core.uop.rewrite import BottomUpGate, graph_rewrite

def strides_for_shape(shape: tuple[sint, ...]) -> tuple[sint, ...]:
  ret: list[sint] = []
  acc: sint = 1
  for s in reversed(shape):
    ret.append(acc if s != 1 else 0)
    acc = acc * s
  return tuple(reversed(ret))

def linear_index(idx: tuple[UOp, ...], shape: tuple[sint, ...]) -> UOp:
  ret = UOp.const(dtypes.weakint, 0)
  for i, st in zip(idx, strides_for_shape(shape)):
    if not (isinstance(st, int) and st == 0): ret = ret + i * st
  return ret

def _split_index(flat: UOp, shape: tuple[sint, ...]) -> list[UOp]:
  return [UOp.const(dtypes.weakint, 0) if s == 1 else (flat // st) % s if st != 0 else flat % s for s, st in zip(shape, strides_for_shape(shape))]

def reshape_groups(ins: tuple[sint, ...], outs: tuple[sint, ...]) -> list[tuple[list[int], list[int]]]:
  """Split a reshape into groups of consecutive input and output dims with equal element counts, in order (a size-1 dim
  is a group of its own). One group of everything when the dims don't line up."""
  groups: list[tuple[list[int], list[int]]] = []
  i = j = 0
  while i < len(ins) or j < len(outs):
    if i < len(ins) and ins[i] == 1: groups, i = groups + [([i], [])], i + 1
    elif j < len(outs) and outs[j] == 1: j += 1
    elif i == len(ins) or j == len(outs): return [(list(range(len(ins))), list(range(len(outs))))]
    else:
      gi, go = [i], [j]
      i, j = i + 1, j + 1
      while not same_numel([ins[k] for k in gi], [outs[k] for k in go]):
        # grow the side with fewer elements (a symbolic side counts its largest size)
        grow_in = prod(svmax(ins[k]) for k in gi) <= prod(svmax(outs[k]) for k in go)
        if grow_in and i < len(ins): gi, i = gi + [i], i + 1
        elif j < len(outs): go, j = go + [j], j + 1
        elif i < len(ins): gi, i = gi + [i], i + 1
        else: return [(list(range(len(ins))), list(range(len(outs))))]
      groups.append((gi, go))
  return groups

def _and(a: UOp | None, b: UOp | None) -> UOp | None:
  if a is None: return b
  if b is None: return a
  return a & b

# *** movement op -> index mapping: each maps an index of the op's output to an index of its source ***

def _reshape_idx(u: UOp, idx: tuple[UOp, ...]) -> tuple[UOp, ...]:
  new: list[UOp] = []
  for gi, go in reshape_groups(u.src[0].shape, u.shape):
    # each group of input dims is indexed by its group of output dims only: a dim kept whole (a symbolic one) passes
    # its index through, and no division by a symbolic stride is made
    if len(gi) == 1 and len(go) == 1: new.append(idx[go[0]])
    else: new.extend(_split_index(linear_index(tuple(idx[j] for j in go), tuple(u.shape[j] for j in go)), tuple(u.src[0].shape[i] for i in gi)))
  return tuple(new)

def _permute_idx(u: UOp, idx: tuple[UOp, ...]) -> tuple[UOp, ...]:
  inv = [0] * len(u.arg)
  for i, p in enumerate(u.arg): inv[p] = i
  return tuple(idx[inv[j]] for j in range(len(u.arg)))

def _expand_idx(u: UOp, idx: tuple[UOp, ...]) -> tuple[UOp, ...]:
  return tuple(UOp.const(dtypes.weakint, 0) if s == 1 and n != 1 else i for i, s, n in zip(idx, u.src[0].shape, u.shape))

def _is_zero(b: sint) -> bool: return isinstance(b, int) and b == 0

def _shrink_idx(u: UOp, idx: tuple[UOp, ...]) -> tuple[UOp, ...]: return tuple(i + b if not _is_zero(b) else i for i, (b, _) in zip(idx, u.arg))
def _flip_idx(u: UOp, idx: tuple[UOp, ...]) -> tuple[UOp, ...]: return tuple((s - 1) - i if f else i for i, s, f in zip(idx, u.src[0].shape, u.arg))

def _pad_idx(u: UOp, idx: tuple[UOp, ...]) -> tuple[tuple[UOp, ...], UOp | None]:
  """The source index and the gate that says the output index is inside the source (None: no padding)."""
  gate: UOp | None = None
  for i, s, (b, e) in zip(idx, u.src[0].shape, u.arg):
    if not (_is_zero(b) and _is_zero(e)): gate = _and(gate, (i >= b) & (i < b + s) if not _is_zero(b) else (i < s))
  return tuple(i - b if not _is_zero(b) else i for i, (b, _) in zip(idx, u.arg)), gate

movement_idx = {Ops.RESHAPE: _reshape_idx, Ops.PERMUTE: _permute_idx, Ops.EXPAND: _expand_idx, Ops.SHRINK: _shrink_idx, Ops.FLIP: _flip_idx}

def view_to_buffer(u: UOp, idx: tuple[UOp, ...], valid: UOp | None = None) -> tuple[UOp, UOp, UOp | None]:
  """Walk movement ops from `u` down to its BUFFER: the buffer, the flat index, and the validity gate."""
  while u.op in GroupOp.Movement or u.op in {Ops.DETACH, Ops.CONTIGUOUS_BACKWARD}:
    if u.op is Ops.PAD:
      idx, gate = _pad_idx(u, idx)
      valid = _and(valid, gate)
    elif u.op in movement_idx: idx = movement_idx[u.op](u, idx)
    u = u.src[0]
  if u.op is not Ops.BUFFER: raise RuntimeError(f"expected a BUFFER under the view, found {u.op}")
  return u, idx[0] if idx else UOp.const(dtypes.weakint, 0), valid

# *** rangeify: a pass over INDEX(tensor node, one index per axis[, gate]) nodes, pushing each index down to the buffers ***

# the arg of a tensor node's INDEX, rangeify's unit of work: the value of src[0] at src[1:] (one index per axis); a gated
# one's last src is the validity gate (from the PADs above) the loads under it take. Strings: they hash fast
INDEXED, INDEXED_GATED = "indexed", "indexed_gated"

def is_indexed(u: UOp) -> bool: return u.op is Ops.INDEX and (u.arg == INDEXED or u.arg == INDEXED_GATED)

def indexed(u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
  return UOp(Ops.INDEX, u.dtype, (u, *idx), INDEXED) if valid is None else UOp(Ops.INDEX, u.dtype, (u, *idx, valid), INDEXED_GATED)

def _unpack(x: UOp) -> tuple[UOp, tuple[UOp, ...], UOp | None]:
  return (x.src[0], x.src[1:-1], x.src[-1]) if x.arg == INDEXED_GATED else (x.src[0], x.src[1:], None)

@dataclass
class KernelCtx:
  """What rangeify collects for one kernel. `realized` maps tensor nodes that live in buffers to a view (movement ops
  over a BUFFER); `root` is the node the kernel computes (it is in `realized`: its own output)."""
  realized: dict[UOp, UOp]
  root: UOp
  params: dict[UOp, UOp] = field(default_factory=dict)        # BUFFER -> PARAM
  var_vals: dict[str, int] = field(default_factory=dict)
  variables: dict[UOp, UOp] = field(default_factory=dict)     # Variable BUFFER -> ALU PARAM
  rng_ids: itertools.count = field(default_factory=itertools.count)
  has_reduce: bool = False

  def param(self, buf: UOp) -> UOp:
    if (p := self.params.get(buf)) is None:
      p = self.params[buf] = UOp(Ops.PARAM, buf.dtype, arg=ParamArg(len(self.params), buf.dtype, buf.arg.size, device=buf.arg.device))
    return p

  def variable(self, v: UOp) -> UOp:
    if (p := self.variables.get(v)) is None:
      p = self.variables[v] = UOp(Ops.PARAM, v.dtype, arg=ParamArg(-1, v.dtype, None, v.arg.vmin_vmax, v.arg.multiple_of, v.arg.name, AddrSpace.ALU))
    return p

def _load(ctx: KernelCtx, b: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
  if b.is_variable: return ctx.variable(b)
  p, flat = ctx.param(b), idx[0] if idx else UOp.const(dtypes.weakint, 0)
  return (p.index(flat, valid) if valid is not None else p.index(flat)).load()

def _bind(ctx: KernelCtx, b: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
  var, val = b.unbind()
  ctx.var_vals[var.arg.name] = val
  return ctx.variable(var)

def _reduce(ctx: KernelCtx, r: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
  ctx.has_reduce = True
  new_idx, rngs = list(idx), []
  for a in r.arg[1]:
    rngs.append(rng := UOp.range(r.src[0].shape[a], next(ctx.rng_ids), AxisType.REDUCE))
    new_idx[a] = rng
  return UOp(Ops.REDUCE, r.dtype, (indexed(r.src[0], tuple(new_idx), valid), *rngs), r.arg[0])

def _movement(ctx: KernelCtx, m: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
  # a constant is the same at every index: skip the index math of its views
  if (c := m.src[0]).op is Ops.CONST and c not in ctx.realized: return UOp.const(c.dtype, c.arg)
  return indexed(c, movement_idx[m.op](m, idx), valid)

def _pad(ctx: KernelCtx, m: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
  nidx, gate = _pad_idx(m, idx)
  inner = indexed(m.src[0], nidx, _and(valid, gate))
  return gate.where(inner, inner.const_like(0)) if gate is not None else inner

def _elementwise(ctx: KernelCtx, e: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
  return UOp(e.op, e.dtype, tuple(indexed(s, idx, valid) for s in e.src), e.arg)

# the value of a tensor node at an index, by the node's op: (ctx, node, index, gate) -> the value
rangeify_rules: dict[Ops, Callable[[KernelCtx, UOp, tuple[UOp, ...], UOp | None], UOp]] = {
  Ops.BUFFER: _load,
  Ops.CONST: lambda ctx, c, idx, valid: UOp.const(c.dtype, c.arg),
  Ops.BIND: _bind,
  **{op: lambda ctx, u, idx, valid: indexed(u.src[0], idx, valid) for op in (Ops.DETACH, Ops.CONTIGUOUS_BACKWARD, Ops.CONTIGUOUS)},
  Ops.REDUCE_AXIS: _reduce,
  Ops.PAD: _pad,
  **{op: _movement for op in movement_idx},
  **{op: _elementwise for op in GroupOp.ALU | {Ops.CAST, Ops.BITCAST}},
}

def _rangeify(ctx: KernelCtx, x: UOp) -> UOp | None:
  if not is_indexed(x): return None  # a kernel's own INDEX (of a PARAM)
  u, idx, valid = _unpack(x)
  # a node that lives in a buffer (another kernel's output) is read from it
  if u is not ctx.root and (v := ctx.realized.get(u)) is not None: return indexed(v, idx, valid)
  if (f := rangeify_rules.get(u.op)) is None: raise NotImplementedError(f"rangeify: can't index {u.op}")
  return f(ctx, u, idx, valid)

def _done(x: UOp) -> None:
  # index arithmetic and loads hold no tensor nodes: don't walk them (a weakint tensor ALU's rangeified form has INDEX sources)
  if not any(is_indexed(s) for s in x.src): raise BottomUpGate

# PatternMatcher dispatches on the INDEX, the table above on what it indexes (one dict lookup, no matching)
pm_rangeify = PatternMatcher([
  (UPat(Ops.INDEX, name="x"), _rangeify),
  (UPat(GroupOp.ALU | {Ops.RANGE, Ops.CONST}, dtype=dtypes.weakint, name="x"), _done),
  (UPat((Ops.LOAD, Ops.PARAM), name="x"), _done),
])

def kernel_name(out_shape: tuple[sint, ...], has_reduce: bool, reduce_shape: tuple[sint, ...] = ()) -> str:
  # a symbolic dim is named by its expression's letters and digits (`E_3_i2` for (3, i+2)): kernel names are identifiers
  dims = "_".join(str(s) if isinstance(s, int) else re.sub(r"\W+", "", s.render(simplify=False)) for s in out_shape) or "1"
  return ("r_" if has_reduce else "E_") + dims

def build_kernel(root: UOp, realized: dict[UOp, UOp], out_view: UOp) -> tuple[UOp, tuple[UOp, ...], dict[str, int]]:
  """The kernel AST that computes `root` into the buffer under `out_view` (a view over a BUFFER with root's shape).
  Returns (ast, buffers in PARAM slot order, bound variable values)."""
  ctx = KernelCtx(realized, root)
  shape = root.shape
  rngs = tuple(UOp.range(s, next(ctx.rng_ids), AxisType.LOOP) if s != 1 else UOp.const(dtypes.weakint, 0) for s in shape)
  out_buf, flat, gate = view_to_buffer(out_view, rngs)
  ctx.param(out_buf)  # the output is slot 0
  val = graph_rewrite(indexed(root.src[1].src[1] if root.op is Ops.AFTER else root, rngs, None), pm_rangeify, ctx, bottom_up=True, name="rangeify")
  if val.dtype != out_buf.dtype: val = val.cast(out_buf.dtype)
  out_idx = ctx.params[out_buf].index(flat, gate) if gate is not None else ctx.params[out_buf].index(flat)
  store = out_idx.store(val)
  for r in reversed([r for r in rngs if r.op is Ops.RANGE]): store = UOp(Ops.END, dtypes.void, (store, r))
  ast = UOp.sink(store, arg=KernelInfo(name=kernel_name(shape, ctx.has_reduce)))
  # Variables in symbolic shapes (range ends, view offsets) are the kernel's ALU params too
  if vs := {u: ctx.variable(u) for u in ast.toposort() if u.is_variable}: ast = ast.substitute(vs)
  return ast, tuple(ctx.params), ctx.var_vals

__all__ = ["build_kernel", "linear_index", "strides_for_shape", "view_to_buffer", "pm_rangeify", "rangeify_rules", "indexed", "is_indexed", "KernelCtx"]

"""Rangeify: turn the tensor graph that one kernel computes into a kernel AST over explicit index arithmetic.

Movement ops disappear here: each one maps the index of its output to an index of its source (RESHAPE divides and
takes remainders, PERMUTE reorders, EXPAND zeroes, SHRINK offsets, FLIP mirrors, PAD offsets and adds a validity
gate). A REDUCE_AXIS opens one RANGE per reduced axis and becomes a REDUCE over them. Symbolic simplification then
folds the index arithmetic back to plain strides wherever the views line up."""
from __future__ import annotations
import itertools
import re
import sys
from dataclasses import dataclass, field

from tg_core.dtype import AddrSpace, dtypes
from tg_core.helpers import prod
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import AxisType, KernelInfo, ParamArg, UOp, same_numel, sint, svmax

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

@dataclass
class KernelBuilder:
  """Builds one kernel. `realized` maps tensor nodes that live in buffers to a view (movement ops over a BUFFER)."""
  realized: dict[UOp, UOp]
  root: UOp
  params: dict[UOp, UOp] = field(default_factory=dict)        # BUFFER -> PARAM
  var_vals: dict[str, int] = field(default_factory=dict)
  variables: dict[UOp, UOp] = field(default_factory=dict)     # Variable BUFFER -> ALU PARAM
  rng_ids: itertools.count = field(default_factory=itertools.count)
  memo: dict[tuple, UOp] = field(default_factory=dict)
  has_reduce: bool = False

  def param(self, buf: UOp) -> UOp:
    if (p := self.params.get(buf)) is None:
      p = self.params[buf] = UOp(Ops.PARAM, buf.dtype, arg=ParamArg(len(self.params), buf.dtype, buf.arg.size, device=buf.arg.device))
    return p

  def variable(self, v: UOp) -> UOp:
    if (p := self.variables.get(v)) is None:
      p = self.variables[v] = UOp(Ops.PARAM, v.dtype, arg=ParamArg(-1, v.dtype, None, v.arg.vmin_vmax, v.arg.multiple_of, v.arg.name, AddrSpace.ALU))
    return p

  def new_range(self, size: sint, axis_type: AxisType) -> UOp: return UOp.range(size, next(self.rng_ids), axis_type)

  def view_to_buffer(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> tuple[UOp, UOp, UOp | None]:
    """Walk movement ops from `u` down to its BUFFER: the buffer, the flat index, and the validity gate."""
    while u.op in GroupOp.Movement or u.op in {Ops.DETACH, Ops.CONTIGUOUS_BACKWARD}:
      idx, valid, u, _ = self.through_movement(u, idx, valid)
    if u.op is not Ops.BUFFER: raise RuntimeError(f"expected a BUFFER under the view, found {u.op}")
    return u, idx[0] if idx else UOp.const(dtypes.weakint, 0), valid

  def through_movement(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> tuple[tuple[UOp, ...], UOp | None, UOp, UOp | None]:
    """Map an index of movement op `u`'s output to an index of its source. Returns (idx, valid, src, pad_gate)."""
    src = u.src[0]
    if u.op in {Ops.DETACH, Ops.CONTIGUOUS_BACKWARD}: return idx, valid, src, None
    in_shape = src.shape
    match u.op:
      case Ops.RESHAPE:
        new: list[UOp] = []
        for gi, go in reshape_groups(in_shape, u.shape):
          # each group of input dims is indexed by its group of output dims only: a dim kept whole (a symbolic one) passes
          # its index through, and no division by a symbolic stride is made
          if len(gi) == 1 and len(go) == 1: new.append(idx[go[0]])
          else: new.extend(_split_index(linear_index(tuple(idx[j] for j in go), tuple(u.shape[j] for j in go)), tuple(in_shape[i] for i in gi)))
        return tuple(new), valid, src, None
      case Ops.PERMUTE:
        inv = [0] * len(u.arg)
        for i, p in enumerate(u.arg): inv[p] = i
        return tuple(idx[inv[j]] for j in range(len(u.arg))), valid, src, None
      case Ops.EXPAND:
        return tuple(UOp.const(dtypes.weakint, 0) if s == 1 and n != 1 else i for i, s, n in zip(idx, in_shape, u.shape)), valid, src, None
      case Ops.SHRINK:
        return tuple(i + b if not (isinstance(b, int) and b == 0) else i for i, (b, _) in zip(idx, u.arg)), valid, src, None
      case Ops.FLIP:
        return tuple((s - 1) - i if f else i for i, s, f in zip(idx, in_shape, u.arg)), valid, src, None
      case Ops.PAD:
        gate: UOp | None = None
        new = []
        for i, s, (b, e) in zip(idx, in_shape, u.arg):
          if not (isinstance(b, int) and b == 0 and isinstance(e, int) and e == 0):
            cond = (i >= b) & (i < b + s) if not (isinstance(b, int) and b == 0) else (i < s)
            gate = _and(gate, cond)
          new.append(i - b if not (isinstance(b, int) and b == 0) else i)
        return tuple(new), _and(valid, gate), src, gate
    raise RuntimeError(f"not a movement op: {u.op}")

  def load(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
    buf, flat, gate = self.view_to_buffer(u, idx, valid)
    p = self.param(buf)
    return (p.index(flat, gate) if gate is not None else p.index(flat)).load()

  def value(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
    key = (u, idx, valid)
    if (ret := self.memo.get(key)) is not None: return ret
    ret = self._value(u, idx, valid)
    self.memo[key] = ret
    return ret

  def _value(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
    if u is not self.root and u in self.realized: return self.value(self.realized[u], idx, valid)
    match u.op:
      case Ops.BUFFER:
        if u.is_variable: return self.variable(u)
        return self.load(u, idx, valid)
      case Ops.CONST: return UOp.const(u.dtype, u.arg)
      case Ops.BIND:
        var, val = u.unbind()
        self.var_vals[var.arg.name] = val
        return self.variable(var)
      case Ops.DETACH | Ops.CONTIGUOUS_BACKWARD | Ops.CONTIGUOUS: return self.value(u.src[0], idx, valid)
      case Ops.REDUCE_AXIS:
        op, axes = u.arg
        self.has_reduce = True
        src_shape = u.src[0].shape
        new_idx = list(idx)
        rngs = []
        for a in axes:
          r = self.new_range(src_shape[a], AxisType.REDUCE)
          rngs.append(r)
          new_idx[a] = r
        inner = self.value(u.src[0], tuple(new_idx), valid)
        return UOp(Ops.REDUCE, u.dtype, (inner, *rngs), op)
    if u.op in GroupOp.Movement:
      nidx, nvalid, src, gate = self.through_movement(u, idx, valid)
      inner = self.value(src, nidx, nvalid)
      return gate.where(inner, inner.const_like(0)) if gate is not None else inner
    if u.op in GroupOp.ALU or u.op in {Ops.CAST, Ops.BITCAST}:
      return UOp(u.op, u.dtype, tuple(self.value(s, idx, valid) for s in u.src), u.arg)
    raise NotImplementedError(f"rangeify: can't index {u.op}")

def kernel_name(out_shape: tuple[sint, ...], has_reduce: bool, reduce_shape: tuple[sint, ...] = ()) -> str:
  # a symbolic dim is named by its expression's letters and digits (`E_3_i2` for (3, i+2)): kernel names are identifiers
  dims = "_".join(str(s) if isinstance(s, int) else re.sub(r"\W+", "", s.render(simplify=False)) for s in out_shape) or "1"
  return ("r_" if has_reduce else "E_") + dims

def build_kernel(root: UOp, realized: dict[UOp, UOp], out_view: UOp) -> tuple[UOp, tuple[UOp, ...], dict[str, int]]:
  """The kernel AST that computes `root` into the buffer under `out_view` (a view over a BUFFER with root's shape).
  Returns (ast, buffers in PARAM slot order, bound variable values)."""
  old = sys.getrecursionlimit()
  sys.setrecursionlimit(max(old, 20000))
  try:
    kb = KernelBuilder(realized, root)
    shape = root.shape
    rngs = [kb.new_range(s, AxisType.LOOP) if s != 1 else UOp.const(dtypes.weakint, 0) for s in shape]
    out_buf, flat, gate = kb.view_to_buffer(out_view, tuple(rngs), None)
    kb.param(out_buf)  # the output is slot 0
    val = kb.value(root.src[1].src[1] if root.op is Ops.AFTER else root, tuple(rngs), None)
    if val.dtype != out_buf.dtype: val = val.cast(out_buf.dtype)
    out_idx = kb.params[out_buf].index(flat, gate) if gate is not None else kb.params[out_buf].index(flat)
    store = out_idx.store(val)
    for r in reversed([r for r in rngs if r.op is Ops.RANGE]): store = UOp(Ops.END, dtypes.void, (store, r))
    ast = UOp.sink(store, arg=KernelInfo(name=kernel_name(shape, kb.has_reduce)))
    # Variables in symbolic shapes (range ends, view offsets) are the kernel's ALU params too
    if vs := {u: kb.variable(u) for u in ast.toposort() if u.is_variable}: ast = ast.substitute(vs)
  finally: sys.setrecursionlimit(old)
  bufs = tuple(kb.params)
  return ast, bufs, kb.var_vals

__all__ = ["build_kernel", "linear_index", "strides_for_shape"]

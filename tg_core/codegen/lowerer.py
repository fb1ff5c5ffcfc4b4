"""Lowering passes of a kernel AST toward a linear program: grid dims, register accumulators, weak dtypes."""
from __future__ import annotations
import itertools
from typing import Callable

from tg_core.dtype import AddrSpace, DType, dtypes
from tg_core.uop import Ops
from tg_core.uop.ops import AxisType, ParamArg, UOp, identity_element
from tg_core.uop.pattern import PatternMatcher, UPat
from tg_core.uop.rewrite import graph_rewrite

# *** output (LOOP) ranges -> grid indices for renderers that launch a grid ***
def add_gpudims(ast: UOp, global_max: tuple[int, ...] | None) -> UOp:
  if global_max is None: return ast
  loops = [u for u in ast.toposort() if u.op is Ops.RANGE and u.arg[1] in (AxisType.LOOP, AxisType.GLOBAL)]
  # LOCAL ranges (from the LOCAL opt) become workgroup indices
  subs: dict[UOp, UOp] = {r: UOp.special(r.src[0], f"lidx{i}") for i, r in
                          enumerate(sorted([u for u in ast.toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.LOCAL], key=lambda r: r.arg[0]))}
  loops = sorted(loops, key=lambda r: r.arg[0])
  def fits(ls: list[UOp]) -> bool: return len(ls) <= len(global_max) and all(r.src[0].vmax <= m for r, m in zip(ls, global_max))
  # a loop of symbolic size (a bound Variable's) is a grid dim sized at launch; where the grid must be merged it stays a loop
  if not fits(loops): loops = [r for r in loops if r.src[0].op is Ops.CONST]
  if fits(loops):
    for i, r in enumerate(loops): subs[r] = UOp.special(r.src[0], f"gidx{i}")
  else:
    # merge the leading loops into the first grid dim until they fit
    n_keep = len(global_max) - 1
    merged, kept = loops[:len(loops) - n_keep], loops[len(loops) - n_keep:]
    total = 1
    for r in merged: total *= r.src[0].arg
    g0 = UOp.special(UOp.const(dtypes.weakint, total), "gidx0")
    rem = g0
    for r in reversed(merged):
      subs[r] = rem % r.src[0].arg
      rem = rem // r.src[0].arg
    for i, r in enumerate(kept): subs[r] = UOp.special(r.src[0], f"gidx{i+1}")
  if not subs: return ast
  # ENDs of replaced ranges go away
  ret = ast.substitute(subs)
  return graph_rewrite(ret, pm_drop_dead_ends, name="drop ends of grid dims")

pm_drop_dead_ends = PatternMatcher([
  (UPat(Ops.END, name="e"), lambda e: e.src[0] if all(s.op is not Ops.RANGE for s in e.src[1:]) else
     e.replace(src=(e.src[0], *[s for s in e.src[1:] if s.op is Ops.RANGE])) if any(s.op is not Ops.RANGE for s in e.src[1:]) else None),
])

# *** REDUCE -> a register accumulator updated inside the reduce loops ***
class ReduceContext:
  """`keep(red)` True leaves a REDUCE for the renderer (the PYTHON interpreter reduces whole axes with numpy)."""
  def __init__(self, keep: Callable[[UOp], bool] | None = None) -> None: self.acc_num, self.keep = itertools.count(), keep

def lower_reduce(ctx: ReduceContext, red: UOp) -> UOp | None:
  inp, rngs = red.src[0], [r for r in red.src[1:] if r.op is Ops.RANGE]
  op: Ops = red.arg
  if not rngs: return inp
  if ctx.keep is not None and ctx.keep(red): return None
  acc = UOp(Ops.BUFFER, red.dtype, arg=ParamArg(next(ctx.acc_num), red.dtype, 1, addrspace=AddrSpace.REG))
  outer = tuple(red.ranges)
  zero = UOp.const(dtypes.weakint, 0)
  init = (acc.after(*outer) if outer else acc).index(zero).store(UOp.const(red.dtype, identity_element(op, red.dtype)))
  cur = acc.after(init, *rngs).index(zero)
  old = cur.load()
  new = UOp(op, red.dtype, (old, inp)) if op is not Ops.MAX else old.maximum(inp) if not dtypes.is_float(red.dtype) else _float_max(old, inp)
  # a sum of WMMA(a, b, 0) (the TC opt's) accumulates in the instruction: WMMA(a, b, acc)
  if op is Ops.ADD and inp.op is Ops.WMMA and inp.src[2].op is Ops.CONST and inp.src[2].arg == 0: new = inp.replace(src=(*inp.src[:2], old))
  upd = cur.store(new)
  for r in reversed(rngs): upd = UOp(Ops.END, dtypes.void, (upd, r))
  return acc.after(upd).index(zero).load()

def _float_max(a: UOp, b: UOp) -> UOp:
  # torch's max propagates NaN: once the accumulator or an input is NaN the result is NaN
  return (b.ne(b)).where(b, a.maximum(b))

pm_lower_reduce = PatternMatcher([(UPat(Ops.REDUCE, name="red"), lower_reduce)])

def merge_ends(sink: UOp) -> UOp:
  """One loop per range: ENDs closing the same RANGE (upcast copies of one reduce) merge into END(GROUP(...), r)."""
  while True:
    by_range: dict[UOp, list[UOp]] = {}
    for u in sink.toposort():
      if u.op is Ops.END and len(u.src) == 2: by_range.setdefault(u.src[1], []).append(u)
    subs: dict[UOp, UOp] = {}
    for r, es in by_range.items():
      if len(es) < 2: continue
      merged = UOp(Ops.END, dtypes.void, (UOp(Ops.GROUP, dtypes.void, tuple(e.src[0] for e in es)), r))
      subs.update({e: merged for e in es})
    if not subs: return sink
    sink = sink.substitute(subs)

# *** weak dtypes -> concrete widths ***
def lower_weak(sink: UOp) -> UOp:
  """weakint (the index dtype) becomes int32, or int64 when some index value can exceed int32."""
  nodes = [u for u in sink.toposort() if u.dtype.scalar() == dtypes.weakint]
  if not nodes: return sink
  big = any(not (-2**31 <= u.vmin and u.vmax < 2**31) for u in nodes if u.dtype.count == 1)
  target: DType = dtypes.int64 if big else dtypes.int32
  def fix(x: UOp) -> UOp | None:
    if x.dtype.scalar() != dtypes.weakint: return None
    dt = target if x.dtype.count == 1 else target.vec(x.dtype.count)
    arg = x.arg
    if x.op in (Ops.PARAM, Ops.BUFFER): arg = ParamArg(**{**x.arg.__dict__, "dtype": dt})
    return x.replace(dtype=dt, arg=arg)
  return graph_rewrite(sink, PatternMatcher([(UPat(tuple(Ops), name="x"), fix)]), name="lower weak dtypes")

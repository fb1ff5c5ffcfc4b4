"""Simplify a gated index given its gate: the index of a gated access only matters where the gate holds.

Views of padded tensors give indices like `(r3*64 + r4*8 + r1*8 + r5 + r2 - 9) % 192`: the MOD keeps a masked-off
(negative) index inside the buffer, but where the gate `0 < r4+r1 < 9 and 0 < r5+r2 < 9` holds the value is already in
[0, 192). The gate's clauses bound linear forms of the loop indices; the index, a linear form of the same indices, gets
an interval from them (the rest of its terms from their own ranges), and a MOD the interval makes redundant goes. The
index is then affine in each loop index (vector code loads a whole row with one masked load)."""
from __future__ import annotations

from tg_core.dtype import dtypes
from tg_core.uop import Ops
from tg_core.uop.ops import UOp
from tg_core.uop.pattern import PatternMatcher, UPat

Linear = dict  # UOp (an atom) or None (the constant) -> int coefficient

def _linear(u: UOp) -> Linear:
  ret: Linear = {}
  todo = [(u, 1)]
  while todo:
    x, k = todo.pop()
    if x.op is Ops.ADD: todo.extend((s, k) for s in x.src)
    elif x.op is Ops.CONST and isinstance(x.arg, int): ret[None] = ret.get(None, 0) + k * x.arg
    elif x.op is Ops.MUL and x.src[1].op is Ops.CONST and isinstance(x.src[1].arg, int): todo.append((x.src[0], k * x.src[1].arg))
    else: ret[x] = ret.get(x, 0) + k
  return ret

def _clauses(gate: UOp) -> list[tuple[Linear, int, int]]:
  """(linear form without constant, lo, hi) for the `c < form` / `form < c` clauses of an AND of int comparisons,
  the two sides of one form merged."""
  bounds: dict[frozenset, list] = {}
  todo = [gate]
  while todo:
    g = todo.pop()
    if g.op is Ops.AND: todo.extend(g.src)
    elif g.op is Ops.CMPLT and dtypes.is_int(g.src[0].dtype):
      a, b = g.src
      if a.op is Ops.CONST and isinstance(a.arg, int): lin, lo, hi = _linear(b), a.arg + 1, None
      elif b.op is Ops.CONST and isinstance(b.arg, int): lin, lo, hi = _linear(a), None, b.arg - 1
      else: continue
      c0 = lin.pop(None, 0)
      m = bounds.setdefault(frozenset(lin.items()), [lin, None, None])
      if lo is not None: m[1] = lo - c0 if m[1] is None else max(m[1], lo - c0)
      if hi is not None: m[2] = hi - c0 if m[2] is None else min(m[2], hi - c0)
  return [(lin, lo, hi) for lin, lo, hi in bounds.values() if lo is not None and hi is not None]

def _bounds(x: UOp) -> tuple[int, int] | None:
  lo, hi = x.vmin, x.vmax
  return (lo, hi) if isinstance(lo, int) and isinstance(hi, int) else None

def interval_given(idx: UOp, gate: UOp) -> tuple[int, int] | None:
  """Bounds of `idx` where `gate` holds (None if unknown)."""
  lin = _linear(idx)
  lo = hi = lin.pop(None, 0)
  for cl, clo, chi in _clauses(gate):
    atoms = list(cl)
    if not atoms or any(a not in lin for a in atoms): continue
    k, rem = divmod(lin[atoms[0]], cl[atoms[0]])
    if rem or k == 0 or any(lin[a] != k * cl[a] for a in atoms): continue
    for a in atoms: del lin[a]
    a_lo, a_hi = clo * k, chi * k
    lo, hi = lo + min(a_lo, a_hi), hi + max(a_lo, a_hi)
  for a, k in lin.items():
    if (b := _bounds(a)) is None: return None
    lo, hi = lo + min(k * b[0], k * b[1]), hi + max(k * b[0], k * b[1])
  return lo, hi

def _drop_mod(idx: UOp) -> UOp | None:
  buf, x, gate = idx.src
  if x.op is not Ops.MOD or x.src[1].op is not Ops.CONST or not isinstance(n := x.src[1].arg, int) or n <= 0: return None
  if (iv := interval_given(x.src[0], gate)) is None or not (0 <= iv[0] and iv[1] < n): return None
  return idx.replace(src=(buf, x.src[0], gate))

pm_index_given_valid = PatternMatcher([
  (UPat(Ops.INDEX, src=(UPat(), UPat(Ops.MOD), UPat(dtype=dtypes.bool)), name="idx"), _drop_mod),
])

__all__ = ["pm_index_given_valid", "interval_given"]

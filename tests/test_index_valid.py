"""Simplifying a gated index given its gate (tg_core/codegen/valid.py): values checked against brute force over every
value of the loop indices."""
import itertools

from tg_core.codegen.valid import interval_given, pm_index_given_valid
from tg_core.dtype import dtypes
from tg_core.uop import Ops
from tg_core.uop.ops import ParamArg, UOp
from tg_core.uop.rewrite import graph_rewrite

def rng(n: int, i: int) -> UOp: return UOp.range(n, i)

def brute(idx: UOp, gate: UOp, rngs: list[UOp]) -> tuple[int, int]:
  vals = []
  for point in itertools.product(*[range(r.src[0].arg) for r in rngs]):
    sub = {r: r.const_like(v) for r, v in zip(rngs, point)}
    if gate.substitute(sub).simplify().arg: vals.append(idx.substitute(sub).simplify().arg)
  return min(vals), max(vals)

def conv_like() -> tuple[UOp, UOp, list[UOp]]:
  r1, r2, r3, r4 = rng(4, 1), rng(4, 2), rng(3, 3), rng(3, 4)
  idx = r1 * 8 + r3 * 8 + r2 + r4 + -9
  gate = (UOp.const(dtypes.weakint, 0) < r1 + r3) & (r1 + r3 < 5) & (UOp.const(dtypes.weakint, 0) < r2 + r4) & (r2 + r4 < 5)
  return idx, gate, [r1, r2, r3, r4]

def test_interval_contains_every_gated_value():
  idx, gate, rngs = conv_like()
  lo, hi = interval_given(idx, gate)
  blo, bhi = brute(idx, gate, rngs)
  assert lo <= blo and bhi <= hi and lo >= 0  # sound, and tight enough to prove the index non-negative

def test_redundant_mod_dropped_and_needed_mod_kept():
  idx, gate, _ = conv_like()
  buf = UOp(Ops.PARAM, dtypes.float32, arg=ParamArg(1, dtypes.float32, 64))
  ok = graph_rewrite(buf.index(idx % 64, gate), pm_index_given_valid)
  assert ok.src[1] is idx
  small = graph_rewrite(buf.index(idx % 16, gate), pm_index_given_valid)  # the gated values reach 36: the MOD matters
  assert small.src[1].op is Ops.MOD

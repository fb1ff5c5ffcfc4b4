"""Benchmark of symbolic rewriting: simplify thousands of random index expressions and report nodes/s.

The expressions look like the index math a kernel carries: `((a*16 + b*4 + c) // 4 % 8)`, with maxes, wheres on
comparisons and some negative ranges. They are built from recipes (nested tuples), so the same workload can be
built with PyPI tinygrad's UOp when it is installed, for a peer ratio.

  python bench/rewrite.py [--exprs N] [--reps R] [--seed S]
"""
from __future__ import annotations
import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tg_core.uop.ops import UOp
from tg_core.uop.rewrite import graph_rewrite
from tg_core.uop.symbolic import symbolic

Recipe = tuple
VARS = [("a", 0, 63), ("b", 0, 15), ("c", 0, 3), ("d", 0, 255), ("n", -8, 8)]

def gen_index(rng: random.Random) -> Recipe:
  """(v1*f1 + v2*f2 + ... + k) followed by a few of // c, % c, + v*f, * f."""
  names = rng.sample(range(len(VARS)), rng.randint(2, 4))
  e: Recipe = ("var", names[0])
  for i, v in enumerate(names):
    term = ("mul", ("var", v), ("const", rng.choice([1, 2, 4, 8, 16, 3, 6, 12])))
    e = term if i == 0 else ("add", e, term)
  e = ("add", e, ("const", rng.randint(-8, 24)))
  for _ in range(rng.randint(1, 3)):
    op = rng.choice(["div", "mod", "div", "mod", "addvar", "mul"])
    if op == "addvar": e = ("add", e, ("mul", ("var", rng.randrange(len(VARS))), ("const", rng.choice([1, 4, 16]))))
    elif op == "mul": e = ("mul", e, ("const", rng.choice([2, 4, 3])))
    else: e = (op, e, ("const", rng.choice([2, 4, 8, 16, 3, 6])))
  return e

def gen_expr(rng: random.Random) -> Recipe:
  e = gen_index(rng)
  r = rng.random()
  if r < 0.15: return ("max", e, ("const", rng.randint(-4, 4)))
  if r < 0.30: return ("where", ("lt", gen_index(rng), ("const", rng.randint(0, 64))), e, gen_index(rng))
  if r < 0.40: return ("add", e, gen_index(rng))
  return e

def build(recipe: Recipe, vs: list[Any]) -> Any:
  """Build a recipe with the UOp class the variables belong to (tg's or tinygrad's): only Python operators."""
  op = recipe[0]
  if op == "var": return vs[recipe[1]]
  if op == "const": return recipe[1]
  args = [build(r, vs) for r in recipe[1:]]
  fxns: dict[str, Callable[..., Any]] = {
    "add": lambda x, y: x + y, "mul": lambda x, y: x * y, "div": lambda x, y: x // y, "mod": lambda x, y: x % y,
    "max": lambda x, y: x.maximum(y), "lt": lambda x, y: x < y, "where": lambda c, x, y: c.where(x, y)}
  return fxns[op](*args)

def count_nodes(exprs: list[Any]) -> int: return sum(len(e.toposort()) for e in exprs)

def run(make_var: Callable[[str, int, int], Any], simplify: Callable[[Any], Any], recipes: list[Recipe], reps: int) -> tuple[float, int, int]:
  """Median seconds to simplify every expression (fresh variables each rep, so no cached value ranges carry over),
  the node count of the inputs and of the outputs."""
  times, nodes, out_nodes = [], 0, 0
  for rep in range(reps):
    vs = [make_var(f"{name}{rep}", lo, hi) for name, lo, hi in VARS]
    exprs = [build(r, vs) for r in recipes]
    nodes = count_nodes(exprs)
    st = time.perf_counter()
    outs = [simplify(e) for e in exprs]
    times.append(time.perf_counter() - st)
    out_nodes = count_nodes(outs)
  return statistics.median(times), nodes, out_nodes

def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--exprs", type=int, default=3000)
  parser.add_argument("--reps", type=int, default=3)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  rng = random.Random(args.seed)
  recipes = [gen_expr(rng) for _ in range(args.exprs)]

  sec, nodes, out_nodes = run(UOp.variable, lambda e: graph_rewrite(e, symbolic, name="bench"), recipes, args.reps)
  tg_rate = nodes / sec
  print(f"tg: {len(recipes)} expressions, {nodes} nodes -> {out_nodes} nodes in {sec*1e3:.1f} ms (median of {args.reps})")

  try:
    try: from tinygrad.uop.ops import UOp as TUOp
    except ImportError: from tinygrad.ops import UOp as TUOp  # older tinygrad
  except ImportError:
    print("tinygrad not installed, skipping peer")
  else:
    tsec, tnodes, tout = run(TUOp.variable, lambda e: e.simplify(), recipes, args.reps)
    print(f"tinygrad: {len(recipes)} expressions, {tnodes} nodes -> {tout} nodes in {tsec*1e3:.1f} ms (median of {args.reps})")
    print(f"peer ratio (tg nodes/s / tinygrad nodes/s): {tg_rate / (tnodes / tsec):.2f}")
  print(f"tg rewrite throughput: {tg_rate:,.0f} nodes/s")

if __name__ == "__main__":
  main()

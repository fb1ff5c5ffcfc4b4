"""Symbolic simplification: tables of `UPat -> UOp` rewrite rules for scalar integer (index) and boolean expressions.

`symbolic_simple` holds constant folding and the identities that need no value ranges; `symbolic` adds canonical
forms (constants last, sums of terms with combined coefficients), reassociation, and the range-based folding of
`//`, `%`, `max` and comparisons. `UOp.simplify()` is `graph_rewrite(x, symbolic)`.

Semantics every rule keeps (they are those of `exec_alu`/`sym_infer`):
  * IDIV and MOD are C-style: `a // b` truncates toward zero and `a % b` has the sign of `a`, so the floor-division
    identities of Python only hold when the signs involved agree. Rules that need that check it with vmin/vmax.
  * dtypes.weakint is an unbounded integer. Fixed-width ints wrap: `+`, `*` and negation are still a ring (so
    reassociating and combining terms is fine), but a rule that reasons about magnitudes (division, ordering) only
    runs on weakint, or where vmin/vmax show the values involved can't wrap.
  * Floats keep NaN, inf and rounding: only exact rewrites (x*1, x+0, x+x -> x*2, x<x -> False, max(x, x) -> x).
    `x+0 -> x` does turn `-0.0 + 0.0` into `-0.0`, the one liberty taken.
"""
from __future__ import annotations
import functools
import math
from typing import Callable

from tg_core.dtype import DType, dtypes
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp, alu_value, cdiv, cmod, exec_alu, python_alu
from tg_core.uop.pattern import PatternMatcher, UPat

ints_bool = dtypes.ints + (dtypes.bool,)

# *** helpers ***

def _weak(dt: DType) -> bool: return dt.scalar() == dtypes.weakint
def _fits(dt: DType, *vals: int) -> bool:
  """True when the values are representable in dt (always, for the unbounded weakint)."""
  return _weak(dt) or all(dt.min <= v <= dt.max for v in vals)
def _nonzero(x: UOp) -> bool: return x.vmin > 0 or x.vmax < 0

def split_add(x: UOp) -> list[UOp]:
  """The summands of a chain of ADDs, left to right."""
  out: list[UOp] = []
  stack = [x]
  while stack:
    u = stack.pop()
    if u.op is Ops.ADD and u.dtype == x.dtype: stack.extend(reversed(u.src))
    else: out.append(u)
  return out

def linear_terms(x: UOp) -> tuple[list[tuple[UOp, int]], int]:
  """x as `sum(t*f for t, f in terms) + const`: each summand split into its term and constant factor."""
  terms: list[tuple[UOp, int]] = []
  const = 0
  for u in split_add(x):
    if u.op is Ops.CONST: const += u.arg
    elif u.op is Ops.MUL and u.src[1].op is Ops.CONST: terms.append((u.src[0], u.src[1].arg))
    else: terms.append((u, 1))
  return terms, const

def _build_sum(like: UOp, terms: list[tuple[UOp, int]], const: int) -> UOp:
  ret: UOp | None = None
  for t, f in terms:
    if f == 0: continue
    term = t if f == 1 else t * f
    ret = term if ret is None else ret + term
  if ret is None: return like.const_like(const)
  return ret + const if const != 0 else ret

def _term_range(t: UOp, f: int) -> tuple[int, int]: return (f * t.vmin, f * t.vmax) if f >= 0 else (f * t.vmax, f * t.vmin)

# *** constant folding ***

def fold_consts(a: UOp) -> UOp | None:
  """An ALU op on constants is computed now, exactly as `exec_alu` would at run time (never dividing by zero)."""
  if a.dtype.count > 1 or a.op not in python_alu or any(s.arg.__class__ is tuple for s in a.src): return None
  if a.op in (Ops.IDIV, Ops.MOD) and a.src[1].arg == 0: return None
  try: return a.const_like(alu_value(a, [s.arg for s in a.src]))
  except (ArithmeticError, ValueError, TypeError): return None  # e.g. negative shift counts, 0 ** -1

def fold_range(x: UOp) -> UOp | None:
  """An int or bool node whose value range is a single value is that constant."""
  return x.const_like(x.vmin) if x.vmin == x.vmax and x.dtype.count == 1 else None

def fold_cast_const(c: UOp, x: UOp) -> UOp | None:
  if c.dtype.count > 1 or x.arg.__class__ is tuple or not (dtypes.is_int(c.dtype) or dtypes.is_float(c.dtype) or c.dtype == dtypes.bool): return None
  return c.const_like(x.arg)

# *** sums and products ***

def fold_add_chain(x: UOp) -> UOp | None:
  """Combine like terms of an int sum: `x*c + x*d -> x*(c+d)`, `x + x -> x*2`, `x - x -> 0`, `(x+c1)+c2 -> x+(c1+c2)`,
  with the one constant moved last, `(x+c)+y -> (x+y)+c`, and the chain nested to the left, `x+(y+z) -> (x+y)+z`.
  Also `(y//c)*c + y%c -> y` (always true of C-style division). Terms keep the order they first appear in."""
  parts = split_add(x)
  coeffs: dict[UOp, int] = {}
  const, nconst, has_mod = 0, 0, False
  for u in parts:
    if u.op is Ops.CONST: const, nconst = const + u.arg, nconst + 1
    else:
      t, f = (u.src[0], u.src[1].arg) if u.op is Ops.MUL and u.src[1].op is Ops.CONST else (u, 1)
      coeffs[t] = coeffs.get(t, 0) + f
      has_mod = has_mod or t.op is Ops.MOD
  divmod_pairs = False
  if has_mod and (divs := {t.src: t for t in coeffs if t.op is Ops.IDIV and t.src[1].op is Ops.CONST and t.src[1].arg != 0}):
    for t in [t for t in coeffs if t.op is Ops.MOD and t.src in divs]:
      if coeffs[divs[t.src]] == coeffs[t] * t.src[1].arg:   # (y//c)*(m*c) + (y%c)*m -> y*m
        m = coeffs.pop(t)
        del coeffs[divs.pop(t.src)]
        coeffs[t.src[0]] = coeffs.get(t.src[0], 0) + m
        divmod_pairs = True
  # already canonical: left-nested (the sources were canonicalized first), no repeated term, at most one constant and
  # it last (x+0 and x*0 are folded by earlier rules, so without repeats no coefficient or constant is 0)
  if not divmod_pairs and x.src[1].op is not Ops.ADD and len(coeffs) + nconst == len(parts) and \
     (nconst == 0 or (nconst == 1 and parts[-1].op is Ops.CONST)): return None
  if not _weak(x.dtype):  # fixed-width coefficients wrap: x*128 + x*128 is x*0 in int8
    coeffs, const = {t: dtypes.as_const(f, x.dtype) for t, f in coeffs.items()}, dtypes.as_const(const, x.dtype)
  return _build_sum(x, list(coeffs.items()), const)

# *** division and modulo ***

def _rem_whole(f: int, c: int) -> int: return 0 if f % c == 0 else f      # a term c doesn't divide stays whole
def _rem_trunc(f: int, c: int) -> int: return cmod(f, c)                    # remainder with the sign of f
def _rem_floor(f: int, c: int) -> int: return f % c                         # in [0, c)
def _rem_ceil(f: int, c: int) -> int: return f % c - c if f % c else 0      # in (-c, 0]
def _rem_near(f: int, c: int) -> int: return f % c - c if f % c > c // 2 else f % c
_TERM_SPLITS: tuple[Callable[[int, int], int], ...] = (_rem_whole, _rem_trunc, _rem_near, _rem_floor, _rem_ceil)
_CONST_SPLITS: tuple[Callable[[int, int], int], ...] = (_rem_trunc, _rem_floor, _rem_ceil)

def fold_divmod(d: UOp, x: UOp, c: UOp) -> UOp | None:
  """`x // c` and `x % c` for a weakint x and a constant c > 0.

  C-style division only splits over a sum with matching signs: if x = c*Q + R exactly, then x//c = Q + R//c and
  x%c = R%c hold when R and x have the same sign everywhere (both >= 0 or both <= 0). So x is written as its terms,
  and multiples of c are moved out of the remainder in the first of a few ways that keeps the signs matching."""
  op, cv = d.op, c.arg
  if cv <= 0: return None
  # the quotient is the same everywhere: x%c -> x - q*c (x//c -> q is fold_range)
  if op is Ops.MOD and (q := cdiv(x.vmin, cv)) == cdiv(x.vmax, cv): return x if q == 0 else x - q * cv
  terms, k = linear_terms(x)
  # one term that takes two values: the result is affine in it
  if len(terms) == 1 and (t := terms[0][0]).vmax - t.vmin == 1:
    fn = cdiv if op is Ops.IDIV else cmod
    f = terms[0][1]
    y0, y1 = fn(f * t.vmin + k, cv), fn(f * t.vmax + k, cv)
    return t * (y1 - y0) + (y0 - t.vmin * (y1 - y0))
  # a common factor: (g*x)//(g*c) -> x//c, (g*x)%(g*c) -> (x%c)*g
  if (g := math.gcd(cv, k, *(f for _, f in terms))) > 1:
    xs = _build_sum(x, [(t, f // g) for t, f in terms], k // g)
    return xs // (cv // g) if op is Ops.IDIV else (xs % (cv // g)) * g
  # a mod: a constant below the terms' common factor g (g | c) moves out, (g*y + k) % c -> (g*y) % c + k for 0 < k < g and
  # g*y >= 0, as (g*y) % c is a multiple of g below c (an upcast lane's index: (a*8 + 1) % 32 -> (a%4)*8 + 1)
  if op is Ops.MOD and terms and 0 < k < math.gcd(cv, *(f for _, f in terms)) and (ts := _build_sum(x, terms, 0)).vmin >= 0: return ts % cv + k
  # within a mod, a remainder (y % m) with c | m is congruent to (y % c)
  reduced_mods = False
  if op is Ops.MOD:
    for i, (t, f) in enumerate(terms):
      if t.op is Ops.MOD and t.src[1].op is Ops.CONST and t.src[1].arg > cv and t.src[1].arg % cv == 0:
        terms[i], reduced_mods = (t.src[0] % cv, f), True
  size = sum(abs(f) for _, f in terms) + abs(k)
  xlo, xhi = x.vmin, x.vmax
  for split_term in _TERM_SPLITS:
    rems = [split_term(f, cv) for _, f in terms]
    rranges = [_term_range(t, r) for (t, _), r in zip(terms, rems)]
    rlo, rhi = sum(r[0] for r in rranges), sum(r[1] for r in rranges)
    for split_const in _CONST_SPLITS:
      rk = split_const(k, cv)
      lo, hi = rlo + rk, rhi + rk
      if not ((lo >= 0 and xlo >= 0) or (hi <= 0 and xhi <= 0)): continue
      # a split that leaves no division is always taken. Otherwise the remainder must shrink (which also makes the
      # rewriting terminate), and for `//` only whole terms move out of it: (a*5+b)//4 isn't made a + (a+b)//4
      if not (one_quotient := (q := cdiv(lo, cv)) == cdiv(hi, cv)):
        if sum(abs(r) for r in rems) + abs(rk) >= size and not reduced_mods: continue
        if split_term is not _rem_whole and (op is Ops.IDIV or split_term not in (_rem_trunc, _rem_near)): continue
      rem = _build_sum(x, [(t, r) for (t, _), r in zip(terms, rems)], rk)
      if op is Ops.MOD: return (rem - q * cv if q else rem) if one_quotient else rem % cv
      quo = _build_sum(x, [(t, (f - r) // cv) for (t, f), r in zip(terms, rems)], (k - rk) // cv)
      return quo + q if one_quotient else quo + rem // cv
  # x//c = (x//f)//(c//f) for a factor f of c, worth it when x//f folds to something without a division
  if op is Ops.IDIV:
    for f in sorted({f for _, f in terms if 1 < f < cv and cv % f == 0}):
      if (sub := fold_divmod(x // f, x, x.const_like(f))) is not None and all(u.op is not Ops.IDIV for u in sub.toposort()):
        return sub // (cv // f)
  return None

def fold_nested_div(x: UOp, a: UOp, b: UOp) -> UOp | None:
  """(x//a)//b -> x//(a*b) for a, b > 0: true for C-style division whatever the sign of x."""
  if a.arg <= 0 or b.arg <= 0 or not _fits(x.dtype, a.arg * b.arg): return None
  return x // (a.arg * b.arg)

def fold_div_add_div(x: UOp, c: UOp, a: UOp, d: UOp) -> UOp | None:
  """(x//c + a)//d -> (x + a*c)//(c*d) for c, d > 0 when x and a have the same sign."""
  if c.arg <= 0 or d.arg <= 0: return None
  if not ((x.vmin >= 0 and a.arg >= 0) or (x.vmax <= 0 and a.arg <= 0)): return None
  return (x + a.arg * c.arg) // (c.arg * d.arg)

def fold_divmod_var(d: UOp, x: UOp, y: UOp) -> UOp | None:
  """x % y -> x - q*y when x // y is the same q over the ranges (x // y is fold_range's)."""
  if not _nonzero(y): return None
  qs = {cdiv(a, b) for a in (x.vmin, x.vmax) for b in (y.vmin, y.vmax)}
  if len(qs) != 1: return None
  q = qs.pop()
  return x if q == 0 else x - y * q

# *** comparisons ***

def _lt_bound(num: int, g: int) -> int: return -((-num) // g)  # ceil(num / g) for g > 0

def fold_lt_const(x: UOp, c: UOp) -> UOp | None:
  """sum(f_i*t_i) + k < c  ->  sum(f_i/g * t_i) < ceil((c-k)/g), g the gcd of the factors (weakint)."""
  terms, k = linear_terms(x)
  if not terms: return None
  if len(terms) == 1 and terms[0][1] < 0:  # t*f < d with f < 0  ->  floor(-d/|f|) < t
    t, f = terms[0]
    return t.const_like((k - c.arg) // -f) < t
  g = math.gcd(*(f for _, f in terms))
  if k == 0 and g == 1: return None
  return _build_sum(x, [(t, f // g) for t, f in terms], 0) < _lt_bound(c.arg - k, g)

def fold_const_lt(c: UOp, x: UOp) -> UOp | None:
  """c < sum(f_i*t_i) + k  ->  floor((c-k)/g) < sum(f_i/g * t_i) (weakint)."""
  terms, k = linear_terms(x)
  if not terms: return None
  if len(terms) == 1 and terms[0][1] < 0:  # d < t*f with f < 0  ->  t < ceil(-d/|f|)
    t, f = terms[0]
    return t < _lt_bound(k - c.arg, -f)
  g = math.gcd(*(f for _, f in terms))
  if k == 0 and g == 1: return None
  return c.const_like((c.arg - k) // g) < _build_sum(x, [(t, f // g) for t, f in terms], 0)

def fold_lt_add_fixed(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  """x + c1 < c2 -> x < c2 - c1 for fixed-width ints, when x + c1 can't wrap."""
  if _weak(x.dtype) or not _fits(x.dtype, x.vmin + c1.arg, x.vmax + c1.arg, c2.arg - c1.arg): return None
  return x < c2.arg - c1.arg

def fold_cmp_eq(cmp: UOp, x: UOp, c: UOp) -> UOp | None:
  """sum(f_i*t_i) + k != c (or ==) over weakint: move k over, divide by the gcd of the factors."""
  terms, k = linear_terms(x)
  if not terms: return None
  g = math.gcd(*(f for _, f in terms))
  if k == 0 and g == 1: return None
  if (c.arg - k) % g != 0: return cmp.const_like(cmp.op is Ops.CMPNE)
  return _build_sum(x, [(t, f // g) for t, f in terms], 0).alu(cmp.op, (c.arg - k) // g)

def fold_not_lt(x: UOp, c: UOp) -> UOp | None:
  """not (x < c) -> (c-1) < x for ints."""
  return (x.const_like(c.arg - 1) < x) if _fits(x.dtype, c.arg - 1) else None

def fold_not_gt(c: UOp, x: UOp) -> UOp | None:
  """not (c < x) -> x < (c+1) for ints."""
  return (x < c.arg + 1) if _fits(x.dtype, c.arg + 1) else None

# *** max ***

def fold_max_range(x: UOp, y: UOp) -> UOp | None:
  if x.vmin >= y.vmax: return x
  if y.vmin >= x.vmax: return y
  return None

# *** the rule tables ***

x_int = UPat.var("x", dtypes.ints)
x_weak = UPat.var("x", dtypes.weakint)
x_bool = UPat.var("x", dtypes.bool)
c1, c2, cc = UPat.cvar("c1", vec=False), UPat.cvar("c2", vec=False), UPat.cvar("c", vec=False)
TRUE, FALSE = UPat.const(dtypes.bool, True), UPat.const(dtypes.bool, False)

def _bool_bitcast(b: UOp, x: UOp) -> UOp | None:
  if dtypes.bool not in (b.dtype.scalar(), x.dtype.scalar()) or b.dtype == x.dtype or b.dtype.itemsize != x.dtype.itemsize: return None
  return x.cast(b.dtype)

symbolic_simple = PatternMatcher([
  # ** constant folding **
  (UPat(GroupOp.ALU, name="a", src=UPat(Ops.CONST)), fold_consts),
  (UPat(Ops.CAST, name="c", src=(UPat(Ops.CONST, name="x"),)), fold_cast_const),
  (UPat(Ops.CAST, name="c", src=(UPat.var("x"),)), lambda c, x: x if c.dtype == x.dtype else None),
  # a bool is a byte holding 0 or 1: its BITCAST to or from another 1-byte type is that CAST (a program's BITCAST keeps the bit width)
  (UPat(Ops.BITCAST, name="b", src=(UPat.var("x"),)), _bool_bitcast),
  # an int or bool node with a single possible value
  (UPat((*GroupOp.ALU, Ops.CAST), dtype=ints_bool, name="x"), fold_range),
  # ** identities **
  (UPat.var("x") + 0, lambda x: x),
  (UPat.var("x") * 1, lambda x: x),
  (UPat.var("x", ints_bool) * 0, lambda x: x.const_like(0)),
  (x_int // 1, lambda x: x),
  (x_int // -1, lambda x: x * -1),
  (x_int % 1, lambda x: x.const_like(0)),
  (x_int % -1, lambda x: x.const_like(0)),
  (x_int // UPat.var("x"), lambda x: x.const_like(1) if _nonzero(x) else None),
  (x_int % UPat.var("x"), lambda x: x.const_like(0) if _nonzero(x) else None),
  (UPat(GroupOp.Idempotent, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),    # x & x, x | x, max(x, x)
  (UPat.var("x", ints_bool) ^ 0, lambda x: x),
  (UPat.var("x", ints_bool) | 0, lambda x: x),
  (UPat.var("x", ints_bool) & 0, lambda x: x.const_like(0)),
  (UPat.var("x", ints_bool) ^ UPat.var("x"), lambda x: x.const_like(0)),
  (x_bool & TRUE, lambda x: x),
  (x_bool | TRUE, lambda x: x.const_like(True)),
  (UPat(Ops.CMPLT, name="cmp", src=(UPat.var("x"), UPat.var("x"))), lambda cmp, x: cmp.const_like(False)),  # floats too: NaN < NaN is False
  (UPat(Ops.CMPNE, name="cmp", src=(UPat.var("x", ints_bool), UPat.var("x"))), lambda cmp, x: cmp.const_like(False)),
  (UPat(Ops.CMPEQ, name="cmp", src=(UPat.var("x", ints_bool), UPat.var("x"))), lambda cmp, x: cmp.const_like(True)),
  # ** bools: `x.ne(True)` is `not x` **
  (x_bool.ne(TRUE).ne(TRUE), lambda x: x),
  (x_bool.ne(FALSE), lambda x: x),
  (x_bool.eq(TRUE), lambda x: x),
  (x_bool.eq(FALSE), lambda x: x.ne(True)),
  (x_bool & x_bool.ne(TRUE), lambda x: x.const_like(False)),
  (x_bool | x_bool.ne(TRUE), lambda x: x.const_like(True)),
  # ** where **
  (UPat(Ops.WHERE, src=(UPat(Ops.CONST, name="c"), UPat.var("a"), UPat.var("b"))),
   lambda c, a, b: (a if c.arg else b) if c.arg.__class__ is not tuple else None),
  (UPat.var("c").where(UPat.var("x"), UPat.var("x")), lambda c, x: x),
  (UPat.var("c", dtypes.bool).where(TRUE, FALSE), lambda c: c),
  (UPat.var("c", dtypes.bool).where(FALSE, TRUE), lambda c: c.ne(True)),
  (UPat.var("c", dtypes.bool).ne(TRUE).where(UPat.var("a"), UPat.var("b")), lambda c, a, b: c.where(b, a)),
  # ** negation and subtraction as multiplication by -1 (exact for floats too) **
  (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("x"),)),)), lambda x: x),
  (UPat(Ops.NEG, dtype=dtypes.ints, src=(UPat.var("x"),)), lambda x: x * -1),
  (UPat(Ops.SUB, dtype=dtypes.ints + dtypes.floats, src=(UPat.var("x"), UPat.var("y"))), lambda x, y: x + y * -1),
])

def scalar_only(rules: list[tuple[UPat, Callable]]) -> PatternMatcher:
  """A table whose rules decline vector nodes: they compute with constant args and value ranges of single lanes."""
  def wrap(fxn: Callable) -> Callable:
    @functools.wraps(fxn)
    def wrapper(**kw: UOp) -> UOp | None:
      for u in kw.values():
        if u.dtype.count != 1: return None
      return fxn(**kw)
    return wrapper
  return PatternMatcher([(pat, wrap(fxn)) for pat, fxn in rules])

symbolic = symbolic_simple + PatternMatcher([
  # ** canonical order: the constant of a commutative op goes last. The rules below rely on it **
  (UPat(GroupOp.Commutative, name="a", src=(UPat(Ops.CONST, name="c"), UPat.var("x"))),
   lambda a, c, x: a.replace(src=(x, c)) if x.op is not Ops.CONST else None),
  # ** x + x is exactly x*2, in floats too **
  (UPat.var("x", dtypes.floats) + UPat.var("x"), lambda x: x * 2),
  # ** where: a nested where on the same condition **
  (UPat.var("c").where(UPat.var("c").where(UPat.var("a"), UPat.var("b")), UPat.var("d")), lambda c, a, b, d: c.where(a, d)),
  (UPat.var("c").where(UPat.var("a"), UPat.var("c").where(UPat.var("b"), UPat.var("d"))), lambda c, a, b, d: c.where(a, d)),
]) + scalar_only([
  # ** sums: combine like terms and constants (ints) **
  (UPat(Ops.ADD, dtype=dtypes.ints, name="x"), fold_add_chain),
  # ** products (ints): reassociate constants, move them last, distribute them over sums **
  (UPat(Ops.MUL, src=(UPat(Ops.MUL, src=(x_int, c1)), c2)), lambda x, c1, c2: x * exec_alu(Ops.MUL, x.dtype, [c1.arg, c2.arg])),
  (UPat(Ops.MUL, src=[UPat(Ops.MUL, src=(x_int, c1)), UPat.var("y")]), lambda x, c1, y: (x * y) * c1 if y.op is not Ops.CONST else None),
  (UPat(Ops.MUL, src=(UPat(Ops.ADD, src=(x_int, UPat.var("y"))), cc)), lambda x, y, c: x * c + y * c),
  # ** max (ints): decided by ranges, constants combined **
  (UPat(Ops.MAX, dtype=ints_bool, src=(UPat.var("x"), UPat.var("y"))), fold_max_range),
  (UPat(Ops.MAX, src=[UPat(Ops.ADD, src=(x_int, cc)), UPat.var("x")]),
   lambda x, c: (x + c if c.arg >= 0 else x) if _fits(x.dtype, x.vmin + c.arg, x.vmax + c.arg) else None),
  (UPat(Ops.MAX, src=(UPat(Ops.MAX, src=(x_int, c1)), c2)), lambda x, c1, c2: x.maximum(max(c1.arg, c2.arg))),
  # ** division and modulo (see fold_divmod for when C-style division splits over a sum) **
  (x_int // UPat.var("y", dtypes.ints), lambda x, y: (x // (y * -1)) * -1 if _weak(x.dtype) and y.vmax < 0 else None),    # x//-y = -(x//y)
  (x_int // UPat.var("y", dtypes.ints), lambda x, y: ((x * -1) // y) * -1 if _weak(x.dtype) and x.vmax <= 0 < -x.vmin else None),   # -x//y = -(x//y)
  (x_int % UPat.var("y", dtypes.ints), lambda x, y: x % (y * -1) if _weak(x.dtype) and y.vmax < 0 else None),             # x%-y = x%y
  (x_int % UPat.var("y", dtypes.ints), lambda x, y: ((x * -1) % y) * -1 if _weak(x.dtype) and x.vmax <= 0 < -x.vmin else None),      # -x%y = -(x%y)
  ((x_weak // c1) // c2, lambda x, c1, c2: fold_nested_div(x, c1, c2)),
  (UPat(Ops.ADD, src=(x_weak // cc, UPat.cvar("a", vec=False))) // UPat.cvar("d", vec=False), fold_div_add_div),
  ((x_weak % c1) % c2, lambda x, c1, c2: x % c2 if c1.arg > 0 and c2.arg > 0 and c1.arg % c2.arg == 0 else None),
  ((x_weak * UPat.var("y")) // UPat.var("y"), lambda x, y: x if _nonzero(y) else None),
  ((x_weak * UPat.var("y")) % UPat.var("y"), lambda x, y: x.const_like(0) if _nonzero(y) else None),
  (UPat((Ops.IDIV, Ops.MOD), dtype=dtypes.weakint, name="d", src=(UPat.var("x"), UPat(Ops.CONST, name="c"))), fold_divmod),
  (UPat(Ops.MOD, dtype=dtypes.ints, name="d", src=(UPat.var("x"), UPat.var("y"))), fold_divmod_var),
  # ** comparisons of sums with constants **
  (x_weak < cc, fold_lt_const),
  (UPat(Ops.CMPLT, src=(cc, x_weak)), fold_const_lt),
  (UPat(Ops.ADD, src=(x_int, c1)) < c2, fold_lt_add_fixed),
  (UPat((Ops.CMPNE, Ops.CMPEQ), name="cmp", src=(UPat(Ops.ADD, src=(x_int, c1)), c2)),
   lambda cmp, x, c1, c2: x.alu(cmp.op, exec_alu(Ops.ADD, x.dtype, [c2.arg, -c1.arg]))),     # x + c1 != c2 -> x != c2 - c1 (ring: wraps fine)
  (UPat((Ops.CMPNE, Ops.CMPEQ), name="cmp", src=(x_weak, cc)), fold_cmp_eq),
  ((x_int < cc).ne(TRUE), fold_not_lt),
  (UPat(Ops.CMPLT, src=(cc, x_int)).ne(TRUE), fold_not_gt),
  # ** two bounds on the same int **
  ((x_int < c1) & (UPat.var("x") < c2), lambda x, c1, c2: x < min(c1.arg, c2.arg)),
  ((x_int < c1) | (UPat.var("x") < c2), lambda x, c1, c2: x < max(c1.arg, c2.arg)),
  ((x_int < c1) & UPat(Ops.CMPLT, src=(c2, UPat.var("x"))), lambda x, c1, c2: UOp.const(dtypes.bool, False) if c2.arg >= c1.arg - 1 else None),
  ((x_int < c1) | UPat(Ops.CMPLT, src=(c2, UPat.var("x"))), lambda x, c1, c2: UOp.const(dtypes.bool, True) if c2.arg < c1.arg else None),
])

__all__ = ["symbolic_simple", "symbolic", "scalar_only", "split_add", "linear_terms"]

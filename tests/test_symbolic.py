"""Tests of the symbolic rewrite rules (tg_core/uop/symbolic.py), of resolve() and of sym_infer().

Semantics the rules must keep (they are the IR's, as `exec_alu`/`sym_infer` compute them):
  * `a // b` (Ops.IDIV) and `a % b` (Ops.MOD) are C-style, NOT Python's: the quotient truncates toward zero and the
    remainder takes the sign of the dividend. In C, -7 / 2 == -3 and -7 % 2 == -1; in Python -7 // 2 == -4 and
    -7 % 2 == 1. `cdiv`/`cmod` in ops.py are the C versions; always a == cdiv(a, b)*b + cmod(a, b).
  * dtypes.weakint (the dtype of `UOp.variable`) is an unbounded integer; fixed-width ints wrap around like C's
    unsigned arithmetic (two's complement for the signed ones).
  * floats keep NaN and inf: x*0 is not 0 (inf*0 is NaN), x-x is not 0.

The property tests build random expressions over 2-4 bounded Variables (bounds may be negative) and check, at
sampled assignments, that (a) the simplified expression evaluates to the same value as the original and (b) every
node of both graphs evaluates within its [vmin, vmax]. They also check that simplify is idempotent.
"""
from __future__ import annotations
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tg_core.dtype import AddrSpace, DType, dtypes
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import ParamArg, UOp, cdiv, cmod, exec_alu, resolve, sym_infer
from tg_core.uop.rewrite import graph_rewrite
from tg_core.helpers import SPEC
from tg_core.uop.pattern import PatternMatcher, UPat
from tg_core.uop.spec import spec_program, type_verify
from tg_core.uop.symbolic import symbolic, symbolic_simple

# what the simplified expressions must be: well-typed program ALU, over variables (ALU-addrspace BUFFERs/PARAMs)
spec_symbolic = spec_program + PatternMatcher([(UPat((Ops.BUFFER, Ops.PARAM), name="x"), lambda x: x.arg.addrspace is AddrSpace.ALU or None)])

def V(name: str, lo: int, hi: int, dtype: DType = dtypes.weakint) -> UOp: return UOp.variable(name, lo, hi, dtype)
def fvar(name: str, dtype: DType = dtypes.float32) -> UOp:
  """A float scalar the evaluator can set (no value range: it may be NaN or inf)."""
  return UOp(Ops.PARAM, dtype, arg=ParamArg(-1, dtype, None, None, None, name, AddrSpace.ALU))
def S(x: UOp) -> str: return x.simplify().render(simplify=False)

def eval_all(root: UOp, vals: dict[str, int | float]) -> dict[UOp, int | float | bool]:
  """The value of every node of root's graph, with sym_infer's semantics (one pass)."""
  cache: dict[UOp, int | float | bool] = {}
  for u in root.toposort():
    if u.op is Ops.CONST: cache[u] = u.arg
    elif u.op in (Ops.BUFFER, Ops.PARAM): cache[u] = vals[u.arg.name]
    elif u.op is Ops.CAST: cache[u] = dtypes.as_const(cache[u.src[0]], u.dtype)
    else: cache[u] = exec_alu(u.op, u.dtype, [cache[s] for s in u.src])
  return cache

def same(a: int | float | bool, b: int | float | bool) -> bool:
  if isinstance(a, float) and isinstance(b, float) and math.isnan(a): return math.isnan(b)
  return a == b and type(a) is type(b) if isinstance(a, bool) or isinstance(b, bool) else a == b

# *** constant folding ***

class TestConstFold:
  def test_int_ops(self):
    for op, a, b in [(Ops.ADD, 3, 4), (Ops.MUL, -3, 4), (Ops.MAX, -3, 4), (Ops.IDIV, -7, 2), (Ops.MOD, -7, 2), (Ops.IDIV, 7, -2),
                     (Ops.MOD, 7, -2), (Ops.CMPLT, 3, 4), (Ops.CMPNE, 3, 3), (Ops.CMPEQ, 3, 3), (Ops.XOR, 6, 3), (Ops.AND, 6, 3), (Ops.OR, 6, 3),
                     (Ops.SHL, 3, 2), (Ops.SHR, -16, 2), (Ops.SUB, 3, 10)]:
      u = UOp(op, dtypes.bool if op in GroupOp.Comparison else dtypes.weakint, (UOp.const(dtypes.weakint, a), UOp.const(dtypes.weakint, b)))
      s = u.simplify()
      assert s.op is Ops.CONST and s.arg == exec_alu(op, u.dtype, [a, b]), (op, a, b, s)
  def test_c_style_division(self):
    c = lambda v: UOp.const(dtypes.weakint, v)
    assert (c(-7) // c(2)).simplify().arg == -3 and (c(-7) % c(2)).simplify().arg == -1
    assert (c(7) // c(-2)).simplify().arg == -3 and (c(7) % c(-2)).simplify().arg == 1
    assert (c(-7) // c(-2)).simplify().arg == 3 and (c(-7) % c(-2)).simplify().arg == -1
  def test_no_fold_div_by_zero(self):
    for op in (Ops.IDIV, Ops.MOD):
      u = UOp(op, dtypes.weakint, (UOp.const(dtypes.weakint, 5), UOp.const(dtypes.weakint, 0)))
      assert u.simplify() is u
  def test_fixed_width_wraps(self):
    a, b = UOp.const(dtypes.int8, 100), UOp.const(dtypes.int8, 100)
    assert (a + b).simplify().arg == -56
    assert (UOp.const(dtypes.uint8, 3) - UOp.const(dtypes.uint8, 5)).simplify().arg == 254
    assert (UOp.const(dtypes.int8, -128) // UOp.const(dtypes.int8, -1)).simplify().arg == -128
  def test_floats(self):
    f = lambda v: UOp.const(dtypes.float32, v)
    assert (f(1.5) + f(2.25)).simplify().arg == 3.75
    assert (f(0.1) + f(0.2)).simplify().arg == exec_alu(Ops.ADD, dtypes.float32, [0.1, 0.2])  # rounded to float32
    assert math.isnan((f(math.inf) * f(0.0)).simplify().arg)
    assert (f(math.nan) < f(1.0)).simplify().arg is False
    assert (f(math.nan).ne(f(math.nan))).simplify().arg is True
    assert (f(1.0) / f(0.0)).simplify().arg == math.inf
    assert f(1e30).cast(dtypes.float16).simplify().arg == math.inf
  def test_bools(self):
    t, f = UOp.const(dtypes.bool, True), UOp.const(dtypes.bool, False)
    assert (t & f).simplify().arg is False and (t | f).simplify().arg is True and (t ^ t).simplify().arg is False
    assert t.logical_not().simplify().arg is False
    assert t.where(UOp.const(dtypes.weakint, 3), UOp.const(dtypes.weakint, 4)).simplify().arg == 3
  def test_cast(self):
    assert UOp.const(dtypes.weakint, 300).cast(dtypes.uint8).simplify().arg == 44
    assert UOp.const(dtypes.float32, -2.7).cast(dtypes.int32).simplify().arg == -2
    assert UOp.const(dtypes.weakint, 3).cast(dtypes.bool).simplify().arg is True
    s = UOp.const(dtypes.int32, 3).cast(dtypes.float32).simplify()
    assert s.arg == 3.0 and isinstance(s.arg, float)
    x = V("x", 0, 5)
    assert UOp(Ops.CAST, dtypes.weakint, (x,)).simplify() is x

# *** identities ***

class TestIdentities:
  def setup_method(self): self.x, self.y = V("x", -10, 10), V("y", 1, 8)
  def test_int(self):
    x = self.x
    assert S(x + 0) == "x" and S(0 + x) == "x" and S(x * 1) == "x" and S(1 * x) == "x"
    assert S(x * 0) == "0" and S(x - x) == "0" and S(x // 1) == "x" and S(x % 1) == "0" and S(x // -1) == "(x*-1)"
    assert S(x.maximum(x)) == "x" and S(x < x) == "False" and S(x.ne(x)) == "False" and S(x.eq(x)) == "True"
    assert S(x ^ x) == "0"
  def test_div_self(self):
    assert S(self.y // self.y) == "1" and S(self.y % self.y) == "0"
    assert S(self.x // self.x) == "(x//x)"  # x may be 0
  def test_float_keeps_nan_semantics(self):
    f = fvar("f")
    for e in (f * 0, f - f, f * 0.0, f + f * -1):
      assert e.simplify().op is not Ops.CONST, e.simplify()
    assert S(f * 1) == "f" and S(f + 0) == "f" and S(f.maximum(f)) == "f" and S(f < f) == "False"
    assert S(f.ne(f)) == "(f!=f)" and S(f.eq(f)) == "(f==f)"
    assert S((f + 1.0) + 2.0) == "((f+1.0)+2.0)"  # float addition doesn't reassociate
    assert S(f + f) == "(f*2.0)"
  def test_bool(self):
    b = self.x < 3
    assert b.logical_not().logical_not().simplify() is b.simplify()
    assert S(b & b) == "(x<3)" and S(b | b) == "(x<3)" and S(b & b.logical_not()) == "False" and S(b | b.logical_not()) == "True"
    assert S(b.eq(True)) == "(x<3)" and S(b.ne(False)) == "(x<3)"
  def test_where(self):
    x, y = self.x, self.y
    b = x < 3
    assert S(b.where(x, x)) == "x"
    p = V("p", False, True, dtypes.bool)
    assert S(p.logical_not().where(x, y)) == "(y if p else x)"
    assert S(b.logical_not().where(x, y)) == "(x if (2<x) else y)"
    assert S(b.where(b.where(x, y), 5)) == "(x if (x<3) else 5)"
    assert S(b.where(True, False)) == "(x<3)"
    assert S((y < 20).where(x, y)) == "x"
  def test_canonical_order(self):
    x = self.x
    assert S(3 + x) == "(x+3)" and S(3 * x) == "(x*3)" and S(UOp.const(dtypes.weakint, 3).maximum(x)) == "max(x, 3)"

# *** sums and products ***

class TestCombine:
  def setup_method(self): self.a, self.b, self.c = V("a", 0, 10), V("b", -5, 5), V("c", 0, 3)
  def test_terms(self):
    a, b = self.a, self.b
    assert S((a + 2) + 3) == "(a+5)"
    assert S((a + 2) + b) == "((a+b)+2)"
    assert S(a * 2 + a * 3) == "(a*5)"
    assert S(a + a) == "(a*2)"
    assert S(a + b - a) == "b"
    assert S((a + b) - (b + a)) == "0"
    assert S((a * 3) * 4) == "(a*12)"
    assert S((a * 3) * b) == "((a*b)*3)"
    assert S((a + 1) * 3) == "((a*3)+3)"
    assert S(a - (b + 2)) == "((a+(b*-1))+-2)"
  def test_minimum(self):
    a, b = self.a, self.b
    assert S(a.minimum(a)) == "a"
    assert S(b.minimum(20)) == "b"
    assert S(b.minimum(-5)) == "-5"
  def test_ring_combining_wraps(self):
    x = V("x", -100, 100, dtypes.int8)
    assert S(x * 64 + x * 64 + x * 128) == "0"  # 256*x wraps to 0 in int8

# *** division and modulo ***

class TestDivMod:
  def setup_method(self): self.a, self.b, self.c = V("a", 0, 10), V("b", 0, 3), V("c", 0, 3)
  def test_index_folding(self):
    a, b, c = self.a, self.b, self.c
    assert S((a * 4 + b) // 4) == "a"
    assert S((a * 4 + b) % 4) == "b"
    assert S((a * 16 + b * 4 + c) // 4) == "((a*4)+b)"
    assert S((a * 16 + b * 4 + c) // 4 % 8) == "(((a*4)+b)%8)"
    assert S((a * 4 + b) // 8) == "(a//2)"
    assert S((a * 4 + 8) // 12) == "((a+2)//3)"
    assert S((a * 4 + 8) % 12) == "(((a+2)%3)*4)"
    assert S((a * 6 + 3) % 3) == "0"
  def test_range_folding(self):
    a, b = self.a, self.b
    assert S(a % 11) == "a" and S(a // 11) == "0" and S(b // 4) == "0"
    assert S((b + 8) % 4) == "b"
    assert S((b + 8) // 4) == "2"
    n = V("n", -3, 0)
    assert S(n % 4) == "n" and S(n // 4) == "0"  # C: -3 % 4 == -3, -3 // 4 == 0
  def test_negative_not_split(self):
    # with x = a*4 + b and a < 0 the floor identity (a*4+b)//4 == a is wrong in C: (-4+1)//4 == 0
    a, b = V("a", -3, 3), self.b
    e = (a * 4 + b) // 4
    assert S(e) == "(((a*4)+b)//4)"
    assert S((a * 4 + b) % 4) == "(((a*4)+b)%4)"
  def test_negative_numerator(self):
    a, b = self.a, self.b
    assert S((a * -4 - b) // 4) == "(a*-1)"   # -(4a+b)//4 = -(a) for 0 <= b < 4
    assert S((a * -4 - b) % 4) == "(b*-1)"
  def test_negative_divisor(self):
    a, b = self.a, self.b
    assert S((a * 4 + b) // -4) == "(a*-1)"
    assert S((a * 4 + b) % -4) == "b"
  def test_nested(self):
    a = V("a", -50, 50)
    assert S((a // 2) // 3) == "(a//6)"   # holds for C division whatever the sign
    assert S((a % 8) % 4) == "(a%4)"
    assert S((a // 4) * 4 + a % 4) == "a"
    p = V("p", 0, 50)
    assert S((p // 4 + 2) // 3) == "((p+8)//12)"
  def test_mod_constant_below_common_factor(self):
    # an upcast lane's index: (a*8 + lane) % 32 keeps its lanes apart as (a%4)*8 + lane, so loads of consecutive lanes stay
    # consecutive (the kernel gathered them through a srem per lane)
    a, b = V("a", 0, 31), self.b
    assert S((a * 8 + 1) % 32) == "(((a%4)*8)+1)"
    assert S((a * 16 + b * 4 + 1) % 32) == "(((((a*4)+b)%8)*4)+1)"
    assert S((a * 8 + 8) % 32) == "(((a+1)%4)*8)"        # a constant the factor divides goes with the terms, as before
    assert S((a * 16 + b * 4 + 5) % 32) == "((((a*16)+(b*4))+5)%32)"  # 5 is not below the common factor 4
    n = V("n", -10, 10)
    assert S((n * 8 + 1) % 32) == "(((n*8)+1)%32)"       # C-style: with n*8 < 0 the remainder's sign differs
  def test_two_values(self):
    t = V("t", 0, 1)
    assert S((t * 3 + 2) % 4) == "((t*-1)+2)"
    assert S((t * 3 + 2) // 4) == "t"
  def test_var_divisor(self):
    a, y = V("a", 0, 5), V("y", 6, 9)
    assert S(a % y) == "a" and S(a // y) == "0"
    assert S((a * y) // y) == "a" and S((a * y) % y) == "0"
  def test_fixed_width_no_range_split(self):
    # (x*4 + b)//4 isn't x in int8 when x*4 overflows
    x, b = V("x", 0, 100, dtypes.int8), V("b", 0, 3, dtypes.int8)
    e = (x * 4 + b) // 4
    s = e.simplify()
    for xv in (0, 40, 100):
      assert sym_infer(s, {"x": xv, "b": 3}) == sym_infer(e, {"x": xv, "b": 3})

# *** comparisons and max ***

class TestCompare:
  def setup_method(self): self.a, self.b = V("a", 0, 10), V("b", -5, 5)
  def test_range(self):
    a = self.a
    assert S(a < 11) == "True" and S(a < 0) == "False" and S(a.ne(20)) == "True" and S(a.eq(-1)) == "False"
    assert S(a.maximum(11)) == "11" and S(a.maximum(-1)) == "a" and S(a.maximum(0)) == "a"
  def test_linear(self):
    a, b = self.a, self.b
    assert S((a + 3) < 5) == "(a<2)"
    assert S((a * 4) < 9) == "(a<3)"
    assert S(3 < a * 2) == "(1<a)"
    assert S((a * -2) < -3) == "(1<a)"       # -2a < -3 <=> a > 1.5
    assert S(-3 < a * -2) == "(a<2)"         # -3 < -2a <=> a < 1.5
    assert S((a * 2 + b * 4) < 7) == "((a+(b*2))<4)"
    assert S((a + 1).ne(5)) == "(a!=4)" and S((a * 2).ne(5)) == "True" and S((a * 2).eq(6)) == "(a==3)"
  def test_not(self):
    a = self.a
    assert S((a < 3).logical_not()) == "(2<a)"
    assert S((3 < a).logical_not()) == "(a<4)"
    assert S(a >= 4) == "(3<a)" and S(a <= 4) == "(a<5)"
  def test_max(self):
    a, b = self.a, self.b
    assert S((a + 3).maximum(a)) == "(a+3)" and S((a - 3).maximum(a)) == "a"
    assert S(b.maximum(2).maximum(4)) == "max(b, 4)"
  def test_fixed_width_lt(self):
    x = V("x", 0, 100, dtypes.int8)
    assert S((x + 3) < 10) == "(x<7)"
    y = V("y", 0, 127, dtypes.int8)   # y + 3 can wrap: not rewritten
    assert S((y + 3) < 10) == "((y+3)<10)"

# *** resolve and sym_infer ***

class TestResolveSymInfer:
  def test_resolve(self):
    a = V("a", 1, 10)
    assert resolve(a < 11) is True and resolve(a < 1) is False
    assert resolve(a < 5) is True and resolve(a < 5, False) is False
    assert resolve((a * 4 + 3) // 4 < 11) is True
    assert resolve(a.ne(0)) is True and resolve(a.eq(0)) is False
    assert resolve(True) is True and resolve(0) is False
    with pytest.raises(ValueError): resolve(a)
  def test_sym_infer(self):
    a, b = V("a", -10, 10), V("b", 1, 5)
    assert sym_infer(a * 3 + b, {"a": 2, "b": 4}) == 10
    assert sym_infer(a // b, {"a": -7, "b": 2}) == -3 and sym_infer(a % b, {"a": -7, "b": 2}) == -1
    assert sym_infer((a < b).where(a, b), {a: 3, b: 2}) == 2
    assert sym_infer(a.minimum(b), {"a": -3, "b": 2}) == -3
    assert sym_infer(7, {}) == 7
    with pytest.raises(KeyError): sym_infer(a + b, {"a": 1})
  def test_cdiv_cmod(self):
    for x in range(-20, 21):
      for y in [-7, -3, -1, 1, 2, 5]:
        assert cdiv(x, y) * y + cmod(x, y) == x and abs(cmod(x, y)) < abs(y)
        assert cdiv(x, y) == int(x / y) and (cmod(x, y) == 0 or (cmod(x, y) < 0) == (x < 0))

class TestMatchers:
  def test_tables(self):
    assert len(symbolic) > len(symbolic_simple) > 10
    a = V("a", 0, 10)
    assert graph_rewrite(a * 1 + 0, symbolic_simple) is a
  def test_vectors(self):
    """Rules that compute with constant args skip vectors (per-lane args); structural ones still apply."""
    v = V("a", 0, 10, dtypes.int32).broadcast(4)
    c = lambda *xs: UOp.const(dtypes.int32.vec(4), xs)
    for e in [(v * c(1, 2, 3, 4)) * c(2, 2, 2, 2), (v + c(1, 2, 3, 4)) + c(1, 1, 1, 1), (v * c(4, 4, 4, 4) + v) // c(4, 4, 4, 4) % c(3, 3, 3, 3),
              v + c(1, 2, 3, 4) < c(5, 5, 5, 5), v.maximum(c(1, 2, 3, 4)).maximum(c(3, 0, 0, 0)), (v < c(1, 2, 3, 4)).where(v, v + 1),
              (v < c(1, 2, 3, 4)).logical_not() & (v < c(4, 3, 2, 1)), c(1, 0, 1, 0).ne(c(0, 0, 0, 0)).where(v, v * 2)]:
      s = e.simplify()
      assert s.dtype == e.dtype and s.simplify() is s
    assert (v * 1 + 0).simplify() is v
    assert (c(1, 2, 3, 4) + v).simplify() is v + c(1, 2, 3, 4)

  def test_idempotent(self):
    a, b, c = V("a", 0, 10), V("b", 0, 3), V("c", -4, 4)
    for e in ((a * 16 + b * 4 + c) // 4 % 8, (a + c) // 3 + (b - c) % 5, (a * 2 < c + 7).where(a, c.maximum(b))):
      s = e.simplify()
      assert s.simplify() is s

# *** exhaustive checks of rules on small ranges ***

TEMPLATES = [
  lambda x, y, k1, k2, k3: (x // k1 + k2) // k3,
  lambda x, y, k1, k2, k3: (x // k1) // k3,
  lambda x, y, k1, k2, k3: (x % k1) % k3,
  lambda x, y, k1, k2, k3: (x % k1 + k2) % k3,
  lambda x, y, k1, k2, k3: (x * k1 + y + k2) // k3,
  lambda x, y, k1, k2, k3: (x * k1 + y + k2) % k3,
  lambda x, y, k1, k2, k3: (x * k1 + y * k2) // k3 % k1,
  lambda x, y, k1, k2, k3: (x * k1 + k2 < k3).where(x // k3, y % k3),
  lambda x, y, k1, k2, k3: (k2 < x * k1 + y).where((x + k2) % k3, (y - k1) // k3),
  lambda x, y, k1, k2, k3: ((x + k2 < k1) & (k3 < x)) | ((x < k3) & (x + y < k2)),
  lambda x, y, k1, k2, k3: ((x < k1) | (k2 < x)).where(y, x) + (x < k3).logical_not().where(k1, k2) + ((x < k1) | (x < k3)).where(y, k2),
  lambda x, y, k1, k2, k3: ((x * k1 + k2).ne(k3) & (x + y).eq(k2)) | (k1 < x * k3).logical_not(),
  lambda x, y, k1, k2, k3: (x + k2).maximum(x) + (x * k1).maximum(k2).maximum(k3) + (y - x).minimum(k1),
  lambda x, y, k1, k2, k3: (x // k3) * k3 + x % k3 + ((x + y) // k1) * (k1 * k2) + ((x + y) % k1) * k2 + (y // k1) * k3 + y % k1,
]

def _check_templates(template: int, dtype: DType, ranges: list[tuple[int, int]], ys: tuple[int, int]) -> None:
  fn = TEMPLATES[template]
  for lo, hi in ranges:
    x, y = V("x", lo, hi, dtype), V("y", *ys, dtype=dtype)
    for k1 in (1, 2, 3, -2):
      for k2 in (-3, 0, 2):
        for k3 in (2, 4, -3):
          e = fn(x, y, k1, k2, k3)
          s = e.simplify()
          if SPEC: type_verify(s, spec_symbolic)
          for xv in range(lo, hi + 1):
            for yv in range(ys[0], ys[1] + 1):
              vals = {"x": xv, "y": yv}
              assert sym_infer(s, vals) == sym_infer(e, vals), f"{e.render(False)} -> {s.render(False)} at {vals}"

@pytest.mark.parametrize("template", range(len(TEMPLATES)))
def test_exhaustive_weakint(template: int):
  """Every value of x (and y) in small ranges of either sign, for nested and split division, bounds and max."""
  _check_templates(template, dtypes.weakint, [(0, 11), (-11, 0), (-6, 5), (3, 9)], (-1, 2))

@pytest.mark.parametrize("template", range(len(TEMPLATES)))
def test_exhaustive_fixed_width(template: int):
  """The same next to where int8/uint8 wrap around."""
  _check_templates(template, dtypes.int8, [(118, 127), (-128, -120)], (0, 2))
  _check_templates(template, dtypes.uint8, [(248, 255), (0, 5)], (0, 2))

# *** property tests ***

INT_OPS = ["add", "sub", "mul", "div", "mod", "max", "min", "where", "neg", "index", "index"]
FACTORS = [-8, -4, -3, -2, -1, 1, 2, 3, 4, 6, 8, 12, 16, 32]

def _bounds(draw, dtype: DType) -> tuple[int, int]:
  if dtype == dtypes.weakint: lo = draw(st.integers(-20, 20)); return lo, lo + draw(st.integers(0, 30))
  lo = draw(st.integers(int(dtype.min), int(dtype.max)))
  return lo, min(int(dtype.max), lo + draw(st.integers(0, 200)))

@st.composite
def int_expr(draw, vs: list[UOp], depth: int, dtype: DType = dtypes.weakint) -> UOp:
  c = lambda v: UOp.const(dtype, v)
  if depth == 0 or draw(st.integers(0, 4)) == 0:
    return draw(st.sampled_from(vs)) if draw(st.integers(0, 3)) else c(draw(st.integers(-12, 12)))
  op = draw(st.sampled_from(INT_OPS))
  x = draw(int_expr(vs, depth - 1, dtype))
  if op == "neg": return -x
  if op == "where": return draw(bool_expr(vs, depth - 1, dtype)).where(x, draw(int_expr(vs, depth - 1, dtype)))
  if op == "index": return draw(index_expr(vs, dtype))
  y = draw(int_expr(vs, depth - 1, dtype))
  if op in ("div", "mod"):  # never divide by something that can be zero
    if not (y.vmin > 0 or y.vmax < 0): y = c(draw(st.sampled_from([-9, -7, -4, -3, -2, -1, 1, 2, 3, 4, 5, 8, 16])))
    return x // y if op == "div" else x % y
  return {"add": x.__add__, "sub": x.__sub__, "mul": x.__mul__, "max": x.maximum, "min": x.minimum}[op](y)

@st.composite
def index_expr(draw, vs: list[UOp], dtype: DType = dtypes.weakint) -> UOp:
  """What index math looks like: (a*f1 + b*f2 + k) // c % d + ..."""
  x = UOp.const(dtype, draw(st.integers(-20, 20)))
  for _ in range(draw(st.integers(1, 3))): x = x + draw(st.sampled_from(vs)) * draw(st.sampled_from(FACTORS))
  for step in draw(st.lists(st.sampled_from(["div", "mod", "add", "mul", "var"]), min_size=1, max_size=4)):
    if step == "add": x = x + draw(st.integers(-10, 10))
    elif step == "mul": x = x * draw(st.sampled_from(FACTORS))
    elif step == "var": x = x + draw(st.sampled_from(vs)) * draw(st.sampled_from(FACTORS))
    else:
      d = draw(st.sampled_from([2, 3, 4, 8, 16, -4]))
      x = x // d if step == "div" else x % d
  return x

@st.composite
def bool_expr(draw, vs: list[UOp], depth: int, dtype: DType = dtypes.weakint) -> UOp:
  if draw(st.booleans()): x = draw(int_expr(vs, depth, dtype))
  else:  # a sum of scaled variables, the form comparisons are folded in
    x = UOp.const(dtype, draw(st.integers(-10, 10)))
    for _ in range(draw(st.integers(1, 3))): x = x + draw(st.sampled_from(vs)) * draw(st.sampled_from(FACTORS))
  y = draw(int_expr(vs, depth, dtype)) if draw(st.booleans()) else UOp.const(dtype, draw(st.integers(-30, 30)))
  cmp = draw(st.sampled_from(["lt", "gt", "le", "ge", "ne", "eq"]))
  ret = {"lt": x.__lt__, "gt": x.__gt__, "le": x.__le__, "ge": x.__ge__, "ne": x.ne, "eq": x.eq}[cmp](y)
  if draw(st.integers(0, 5)) == 0: ret = ret.logical_not()
  if depth > 0 and draw(st.integers(0, 5)) == 0:
    other = draw(bool_expr(vs, depth - 1, dtype))
    ret = ret & other if draw(st.booleans()) else ret | other
  return ret

@st.composite
def problem(draw, dtype: DType = dtypes.weakint, max_depth: int = 4):
  nv = draw(st.integers(2, 4))
  vs = [V("abcd"[i], *_bounds(draw, dtype), dtype=dtype) for i in range(nv)]
  kind = draw(st.sampled_from(["bool", "index", "int"]))
  expr = draw(bool_expr(vs, 2, dtype)) if kind == "bool" else draw(index_expr(vs, dtype)) if kind == "index" else \
         draw(int_expr(vs, draw(st.integers(1, max_depth)), dtype))
  assigns = [{v.arg.name: v.arg.vmin_vmax[0] for v in vs}, {v.arg.name: v.arg.vmin_vmax[1] for v in vs}]
  for _ in range(draw(st.integers(1, 4))): assigns.append({v.arg.name: draw(st.integers(*v.arg.vmin_vmax)) for v in vs})
  return expr, assigns

def check_problem(expr: UOp, assigns: list[dict[str, int]]) -> None:
  simple = expr.simplify()
  if SPEC: type_verify(simple, spec_symbolic)
  assert simple.simplify() is simple, f"not idempotent: {expr.render(False)} -> {simple.render(False)} -> {simple.simplify().render(False)}"
  for vals in assigns:
    want = sym_infer(expr, vals)
    got = sym_infer(simple, vals)
    assert same(got, want), f"{expr.render(False)} -> {simple.render(False)} at {vals}: {got} != {want}"
    for g in (expr, simple):
      for u, v in eval_all(g, vals).items():
        assert u.vmin <= v <= u.vmax, f"{u.render(False)} = {v} outside [{u.vmin}, {u.vmax}] at {vals} (in {g.render(False)})"

@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problem())
def test_property_weakint(p):
  check_problem(*p)

@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.sampled_from([dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32]).flatmap(lambda dt: problem(dt, 3)))
def test_property_fixed_width(p):
  check_problem(*p)

FLOAT_CONSTS = [0.0, -0.0, 1.0, -1.0, 2.5, 1e30, -3.0, math.inf, -math.inf, math.nan]

@st.composite
def float_expr(draw, vs: list[UOp], depth: int) -> UOp:
  if depth == 0 or draw(st.integers(0, 4)) == 0:
    return draw(st.sampled_from(vs)) if draw(st.integers(0, 2)) else UOp.const(dtypes.float32, draw(st.sampled_from(FLOAT_CONSTS)))
  op = draw(st.sampled_from(["add", "sub", "mul", "max", "where", "neg"]))
  x = draw(float_expr(vs, depth - 1))
  if op == "neg": return -x
  y = draw(float_expr(vs, depth - 1))
  if op == "where": return (x < y).where(x, draw(float_expr(vs, depth - 1)))
  return {"add": x.__add__, "sub": x.__sub__, "mul": x.__mul__, "max": x.maximum}[op](y)

@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_property_float(data):
  vs = [fvar("f"), fvar("g")]
  expr = data.draw(float_expr(vs, 4))
  simple = expr.simplify()
  if SPEC: type_verify(simple, spec_symbolic)
  for _ in range(4):
    vals = {"f": data.draw(st.sampled_from(FLOAT_CONSTS + [0.5, -7.25])), "g": data.draw(st.sampled_from(FLOAT_CONSTS))}
    vals = {k: dtypes.as_const(v, dtypes.float32) for k, v in vals.items()}  # a float32 variable holds float32 values
    want, got = sym_infer(expr, vals), sym_infer(simple, vals)
    assert same(got, want), f"{expr.render(False)} -> {simple.render(False)} at {vals}: {got} != {want}"

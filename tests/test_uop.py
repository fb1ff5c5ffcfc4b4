"""The IR core: hash-consed immutable UOps, graph walking, shapes/devices of buffers and params, variables, calls,
UPat/PatternMatcher, graph_rewrite (deep and wide graphs, bottom-up, walk, calls) and printing (repr, pyrender)."""
import gc
import math
import sys
import weakref

import pytest

from tg_core.dtype import AddrSpace, dtypes
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import AxisType, CallInfo, KernelInfo, ParamArg, UOp, UOpMetaClass, sym_infer
from tg_core.uop.pattern import PatternMatcher, UPat
from tg_core.uop.rewrite import BottomUpGate, graph_rewrite

f32, i32 = dtypes.float32, dtypes.int32
def buf(size=12, dtype=f32, device="CPU"): return UOp.new_buffer(device, size, dtype)

# *** hash-consing ***

def test_hash_consing_identical_construction():
  a, b = UOp.variable("a", 0, 10), UOp.variable("b", 0, 10)
  assert UOp.variable("a", 0, 10) is a
  assert (a + b) * 3 is (a + b) * 3
  assert UOp(Ops.ADD, dtypes.weakint, (a, b)) is a + b
  assert UOp.const(f32, 1.5) is UOp.const(f32, 1.5)
  # anything that differs makes a different node
  assert UOp.const(f32, 1.5) is not UOp.const(dtypes.float64, 1.5)
  assert a + b is not b + a
  assert UOp.const(f32, 1.5).rtag("t") is not UOp.const(f32, 1.5)
  assert UOp.const(f32, 1.5).rtag("t") is UOp.const(f32, 1.5).rtag("t")

def test_hash_consing_float_consts():
  pz, nz = UOp.const(f32, 0.0), UOp.const(f32, -0.0)
  assert pz is not nz  # 0.0 == -0.0 in Python, but they are different constants
  assert math.copysign(1.0, pz.arg) == 1.0 and math.copysign(1.0, nz.arg) == -1.0
  n1, n2 = UOp.const(f32, math.nan), UOp.const(f32, float("nan"))
  assert n1 is n2  # nan != nan, but it is one constant
  assert UOp(Ops.CONST, f32, arg=(0.0, -0.0)) is not UOp(Ops.CONST, f32, arg=(0.0, 0.0))
  assert UOp(Ops.CONST, f32.vec(2), arg=(math.nan, 1.0)) is UOp(Ops.CONST, f32.vec(2), arg=(math.nan, 1.0))
  assert UOp.const(f32, 1.0) is not UOp(Ops.CONST, f32, arg=1)  # 1.0 and 1 are different args

def test_dropped_graph_is_freed():
  gc.collect()
  n0 = len(UOpMetaClass.ucache)
  x = UOp.variable("freed_graph_var", 0, 1000)
  y = x
  for i in range(300): y = y * 3 + UOp.const(dtypes.weakint, 10_000 + i)
  r = UOp.range(y, 12345)
  _ = r.ranges  # a cached property that refers back to r (a cycle: only the cycle collector frees it)
  refs = [weakref.ref(u) for u in (x, y, r)]
  assert len(UOpMetaClass.ucache) >= n0 + 900
  del x, y, r, _
  gc.collect()
  assert all(w() is None for w in refs)
  assert len(UOpMetaClass.ucache) <= n0
  assert all(w() is not None for w in UOpMetaClass.ucache.values())  # no stale entries

def test_immutable():
  u = UOp.const(f32, 1.0)
  with pytest.raises(AttributeError): u.op = Ops.SUB
  with pytest.raises(AttributeError): u.arg = 2.0
  with pytest.raises(AttributeError): u.src = ()
  with pytest.raises(AttributeError): u.new_field = 1
  assert u.arg == 1.0 and u.op is Ops.CONST

# *** replace / substitute / toposort ***

def test_replace():
  a = UOp.variable("a", 0, 10)
  u = a + 1
  assert u.replace() is u and u.replace(op=Ops.ADD) is u
  assert u.replace(op=Ops.MUL) is a * 1
  assert u.replace(src=(a, a)) is a + a
  assert u.replace(tag=1).tag == 1
  with pytest.raises(TypeError): u.replace(bogus=1)

def test_substitute():
  a, b, c = UOp.variable("a", 0, 10), UOp.variable("b", 0, 10), UOp.variable("c", 0, 10)
  e = (a + b) * a
  assert e.substitute({a: c}) is (c + b) * c
  assert e.substitute({a + b: c}) is c * a
  # a replacement may contain the node it replaces: it is not substituted again
  assert e.substitute({a: a + 1}) is ((a + 1) + b) * (a + 1)
  # replacements are simultaneous: a swap swaps, a chain is not followed
  assert (a + b).substitute({a: b, b: a}) is b + a
  assert (a + b).substitute({a: b, b: c}) is b + c
  assert e.substitute({}) is e

def test_toposort_order_and_gate():
  a, b = UOp.variable("a", 0, 10), UOp.variable("b", 0, 10)
  s = a + b
  e = s * s + a
  order = list(e.toposort())
  assert order[-1] is e and len(order) == len(set(order)) == 5
  for i, u in enumerate(order):
    assert all(order.index(x) < i for x in u.src)
  assert s not in e.toposort(gate=lambda u: u is not s)
  assert a in e.toposort(gate=lambda u: u is not s)  # still reached through e's own src
  assert list(e.backward_slice) == order[:-1]

def test_toposort_enter_calls():
  p = UOp.param(0, f32, 4)
  body = UOp.sink(p.store(p.alu(Ops.EXP2)))
  b = buf(4)
  call = body.call(b)
  assert body in call.toposort() and p in call.toposort()
  ts = call.toposort(enter_calls=False)
  assert body not in ts and p not in ts and b in ts

# *** shapes and devices ***

def test_buffer_param_shape_device():
  b = buf(12)
  assert b.shape == (12,) and b.device == "CPU" and b.addrspace is AddrSpace.GLOBAL and b.dtype is f32
  assert b.reshape((3, 4)).shape == (3, 4) and b.reshape((3, 4)).device == "CPU"
  mb = UOp.new_buffer(("CPU:0", "CPU:1"), 8, i32)
  assert mb.device == ("CPU:0", "CPU:1")
  p = UOp.param(0, f32, 12, "CPU")
  assert p.op is Ops.PARAM and p.shape == (12,) and p.device == "CPU" and p.arg == ParamArg(0, f32, 12, device="CPU")
  s = UOp.param(1, i32)
  assert s.shape == () and s.arg.size is None and s.device is None
  assert UOp(Ops.PARAM, f32, arg=ParamArg(0, f32, 8, image=(1, 2))).shape == (1, 2, 4)
  assert UOp.const(f32, 1.0, device="CPU").device == "CPU" and UOp.const(f32, 1.0).device is None
  with pytest.raises(TypeError): UOp.new_buffer("CPU", UOp.variable("n", 1, 4), f32)  # type: ignore[arg-type]
  with pytest.raises(RuntimeError, match="weak"): UOp.param(0, dtypes.weakint, 4)

def test_param_multidim_is_reshape_of_flat():
  p = UOp.param(0, f32, (3, 4), "CPU")
  assert p.op is Ops.RESHAPE and p.arg == (3, 4) and p.shape == (3, 4)
  flat = p.src[0]
  assert flat.op is Ops.PARAM and flat.arg.size == 12 and flat.shape == (12,) and p.base is flat and p.buf_uop is flat

def test_param_symbolic_is_shrink_of_max_size():
  n = UOp.variable("n", 1, 10)
  p = UOp.param(0, f32, (n, 4))
  assert p.op is Ops.SHRINK and p.shape == (n, 4) and p.shape[0] is n
  assert p.src[0].op is Ops.RESHAPE and p.src[0].shape == (10, 4)
  flat = p.src[0].src[0]
  assert flat.op is Ops.PARAM and flat.arg.size == 40  # the arg stores the concrete max size, never a symbolic one
  p1 = UOp.param(1, f32, n)
  assert p1.op is Ops.SHRINK and p1.src[0].op is Ops.PARAM and p1.src[0].arg.size == 10 and p1.shape == (n,)
  assert p.max_numel() == 40

def test_movement_shapes():
  b = buf(24).reshape((2, 3, 4))
  assert b.permute((2, 0, 1)).shape == (4, 2, 3)
  assert b.pad(((1, 1), (0, 0), (2, 0))).shape == (4, 3, 6)
  assert b.shrink(((0, 1), (1, 3), (0, 4))).shape == (1, 2, 4)
  assert b.r(Ops.ADD, (1,)).shape == (2, 1, 4)
  assert b.shrink(((0, 1), (0, 3), (0, 4))).expand((5, 3, 4)).shape == (5, 3, 4)
  assert b.flip((True, False, True)).shape == (2, 3, 4)
  with pytest.raises(ValueError, match="bad reshape"): b.reshape((5, 5))
  with pytest.raises(ValueError): b.permute((0, 0, 1))
  with pytest.raises(ValueError): b.expand((2, 6, 4))
  with pytest.raises(ValueError, match="negative"): b.reshape((-1, 24))

def test_symbolic_reshape_allowed():
  pytest.importorskip("tg_core.uop.symbolic")
  n = UOp.variable("n", 1, 10)
  p = UOp.param(0, f32, (n, 4))
  assert p.reshape((4, n)).shape == (4, n)  # equal products that are different expressions are not "provably unequal"

# *** variables ***

def test_variable_bind_vmin_vmax():
  v = UOp.variable("v", 2, 9)
  assert v.op is Ops.BUFFER and v.is_variable and v.addrspace is AddrSpace.ALU and v.device is None and v.shape == ()
  assert (v.vmin, v.vmax) == (2, 9)
  e = v * 2 + 1
  assert (e.vmin, e.vmax) == (5, 19)
  assert ((v * -1).vmin, (v * -1).vmax) == (-9, -2)
  assert ((v < 5).vmin, (v < 5).vmax) == (False, True) and (v < 10).vmin is True
  b = v.bind(4)
  assert b.op is Ops.BIND and b.is_bound_var and b.unbind() == (v, 4) and (b.vmin, b.vmax) == (2, 9)
  assert sym_infer(e, {"v": 3}) == 7 and sym_infer(e, {v: 4}) == 9
  with pytest.raises(ValueError): v.bind(10)
  with pytest.raises(ValueError): UOp.variable("w", 5, 1)
  with pytest.raises(RuntimeError): (v + 1).bind(3)
  assert v.expr == "v"

# *** calls ***

def test_value_producing_call():
  pa, pb = UOp.param(0, f32, (3, 4), "CPU"), UOp.param(1, f32, (3, 4), "CPU")
  a, b = buf().reshape((3, 4)), buf()
  c = (pa * pb).call(a, b.reshape((3, 4)), name="mul")
  assert c.op is Ops.CALL and c.dtype == dtypes.void and isinstance(c.arg, CallInfo) and c.arg.name == "mul"
  assert c.num_returned == 1 and c.call_args == (a, b.reshape((3, 4)))
  (out,) = c.returned_outputs
  assert out.op is Ops.AFTER and out.src[1] is c and out.shape == (3, 4) and out.device == "CPU" and out.dtype is f32
  assert out.src[0].base.op is Ops.RETURNED
  # the body stores each value into an output PARAM slotted after the inputs
  body = c.src[0]
  assert body.op is Ops.SINK and body.src[0].op is Ops.STORE and body.src[0].src[0].buf_uop.arg.slot == 2

def test_call_outputs_multiple():
  pa = UOp.param(0, f32, 4, "CPU")
  c = UOp.call_outputs((pa.exp2(), pa.alu(Ops.CMPLT, pa)), buf(4))
  assert c.num_returned == 2
  o1, o2 = c.returned_outputs
  assert o1.dtype is f32 and o2.dtype is dtypes.bool and o1.shape == o2.shape == (4,)
  assert [st.src[0].buf_uop.arg.slot for st in c.src[0].src] == [1, 2]

def test_call_symbolic_output_shape():
  n = UOp.variable("n", 1, 10)
  p = UOp.param(0, f32, (n,), "CPU")
  c = (p * p).call(buf(10).shrink(((0, n),)))
  (out,) = c.returned_outputs
  assert out.shape == (n,)

def test_call_ranges_must_not_leak():
  r = UOp.range(4, 0)
  with pytest.raises(RuntimeError, match="leaking"): UOp.call_outputs((r + 1,))

def test_opaque_call():
  p0, p1 = UOp.param(0, f32, 4), UOp.param(1, f32, 4)
  body = UOp.sink(p0.store(p1))
  c = body.call(buf(4), buf(4))
  assert c.op is Ops.CALL and c.src[0] is body and c.num_returned == 0 and c.returned_outputs == () and c.dtype == dtypes.void
  assert c._shape is None  # a void CALL has no shape
  cf = UOp.custom_function("validate", buf(4)).call(buf(4))
  assert cf.src[0].op is Ops.CUSTOM_FUNCTION and cf.src[0].arg == "validate" and cf.num_returned == 0
  with pytest.raises(RuntimeError): _ = c.shape
  with pytest.raises(RuntimeError): _ = UOp.const(f32, 1.0).returned_outputs

# *** UPat ***

def _m(pat, u): return pat.match(u, {})

def test_upat_op_and_dtype_sets():
  a, b = UOp.variable("a", 0, 10, i32), UOp.variable("b", 0, 10, i32)
  p = UPat((Ops.ADD, Ops.MUL), name="x")
  assert _m(p, a + b) and _m(p, a * b) and not _m(p, a.maximum(b))
  assert _m(UPat(GroupOp.Binary), a.maximum(b)) and not _m(UPat(GroupOp.Unary), a + b)
  pd = UPat(dtype=(i32, dtypes.int64))
  assert _m(pd, a) and not _m(pd, UOp.const(f32, 1.0))
  assert _m(UPat(dtype=f32), UOp(Ops.STACK, f32.vec(2), (UOp.const(f32, 1.0),) * 2))  # a vector matches its scalar dtype
  assert _m(UPat(Ops.CONST, arg=3), UOp.const(i32, 3)) and not _m(UPat(Ops.CONST, arg=3), UOp.const(i32, 4))

def test_upat_ordered_and_any_order_src():
  a = UOp.variable("a", 0, 10, i32)
  u = a + UOp.const(i32, 2)
  ordered = UPat(Ops.ADD, src=(UPat(Ops.BUFFER, name="v"), UPat(Ops.CONST, name="c")))
  assert _m(ordered, u) == [{"v": a, "c": u.src[1]}]
  flipped = UPat(Ops.ADD, src=(UPat(Ops.CONST), UPat(Ops.BUFFER)))
  assert not _m(flipped, u)
  anyorder = UPat(Ops.ADD, src=[UPat(Ops.CONST, name="c"), UPat(Ops.BUFFER, name="v")])
  assert _m(anyorder, u) == [{"c": u.src[1], "v": a}]
  assert _m(anyorder, UOp.const(i32, 2) + a)
  # both orders can match: every match is returned
  assert len(_m(UPat(Ops.ADD, src=[UPat.var("x"), UPat.var("y")]), a + a)) == 2

def test_upat_repeated_src_and_any_len():
  a, b = UOp.variable("a", 0, 10), UOp.variable("b", 0, 10)
  s = UOp.sink(a, b, a)
  assert _m(UPat(Ops.SINK, src=UPat(Ops.BUFFER)), s)
  assert not _m(UPat(Ops.SINK, src=UPat(Ops.BUFFER)), UOp.sink(a, a + b))
  assert not _m(UPat(Ops.SINK, src=(UPat(Ops.BUFFER),)), s)
  assert _m(UPat(Ops.SINK, src=(UPat(Ops.BUFFER), UPat(Ops.BUFFER)), allow_any_len=True), s)
  assert not _m(UPat(Ops.SINK, src=(UPat(Ops.BUFFER),) * 4, allow_any_len=True), s)

def test_upat_named_captures_must_agree():
  a, b = UOp.variable("a", 0, 10), UOp.variable("b", 0, 10)
  same = UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x")))
  assert _m(same, a + a) == [{"x": a}]
  assert not _m(same, a + b)
  # a name bound outside the src must match the same node inside
  nested = UPat(Ops.MUL, src=(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("y"))), UPat.var("x")))
  assert _m(nested, (a + b) * a) and not _m(nested, (a + b) * b)

def test_upat_var_cvar_and_sugar():
  a = UOp.variable("a", 0, 10)
  one = UOp.const(dtypes.weakint, 1)
  pat = UPat.var("x") * 1
  assert _m(pat, a * 1) == [{"x": a}]
  assert _m(pat, UOp(Ops.MUL, dtypes.weakint, (one, a)))  # MUL is commutative: either order
  assert not _m(pat, a * 2)
  assert _m(UPat.var("x") + UPat.cvar("c"), a + 5)[0]["c"].arg == 5
  assert not _m(UPat.cvar("c"), a)
  assert _m(UPat.cvar("c", vec=True), UOp(Ops.STACK, f32.vec(2), (UOp.const(f32, 1.0),) * 2))
  assert _m(UPat.var("x", dtypes.weakint), a) and not _m(UPat.var("x", f32), a)
  assert _m(UPat.var("x").where(UPat.var("y"), UPat.var("z")), (a < 3).where(a, a + 1))
  assert _m(UPat.var("x").cast(f32), a.cast(f32)) and _m(UPat.var("x") < 3, a < 3)

def test_upat_or_after():
  b = buf(4)
  aft = b.after(UOp.sink())
  p = UPat(Ops.BUFFER).or_after(name="x")
  assert _m(p, b) == [{"x": b}] and _m(p, aft) == [{"x": aft}]
  assert not _m(p, b.reshape((2, 2)))
  pm = PatternMatcher([(UPat(Ops.BUFFER).or_after(name="x"), lambda x: UOp.const(f32, 7.0))])
  assert pm.rewrite(b) is UOp.const(f32, 7.0) and pm.rewrite(aft) is UOp.const(f32, 7.0)  # a top-level or_after pattern fires
  assert UPat(Ops.CONST).or_after().match(UOp.const(f32, 1.0), {})

def test_pattern_matcher_add_and_decline():
  a = UOp.variable("a", 0, 10)
  pm1 = PatternMatcher([(UPat.var("x") * 1, lambda x: x)])
  pm2 = PatternMatcher([(UPat.var("x") + 0, lambda x: x), (UPat(Ops.ADD, name="n"), lambda n: None)])
  both = pm1 + pm2
  assert len(both) == 3 and both.rewrite(a * 1) is a and both.rewrite(a + 0) is a
  assert pm1.rewrite(a + 0) is None and both.rewrite(a + 2) is None  # None declines
  ctx_pm = PatternMatcher([(UPat(Ops.BUFFER, name="b"), lambda ctx, b: ctx[b])])
  assert ctx_pm.rewrite(a, {a: a + 1}) is a + 1

def test_pattern_matcher_ctx_through_wrappers_and_partials():
  # whether a rule gets ctx is read through functools.wraps wrappers and partials (as inspect.signature would answer)
  import functools
  a = UOp.variable("a", 0, 10)
  def wrap(f):
    @functools.wraps(f)
    def w(**kw): return f(**kw)
    return w
  def with_ctx(ctx, x, add): return x + ctx + add
  def without(x, add): return x + add
  pm = PatternMatcher([(UPat(Ops.BUFFER, name="x"), wrap(lambda ctx, x: x + ctx))])
  assert pm.rewrite(a, 3) is a + 3
  pm = PatternMatcher([(UPat(Ops.BUFFER, name="x"), functools.partial(with_ctx, add=2))])
  assert pm.rewrite(a, 3) is a + 3 + 2
  pm = PatternMatcher([(UPat(Ops.BUFFER, name="x"), functools.partial(without, add=2))])
  assert pm.rewrite(a, 3) is a + 2  # no ctx argument: not passed
  pm = PatternMatcher([(UPat(Ops.BUFFER, name="x"), wrap(functools.partial(without, add=5)))])
  assert pm.rewrite(a, 3) is a + 5

# *** graph_rewrite ***

# graphs are built with UOp(...) directly: the sugar (x + 1) also derives shapes and broadcasts, which is not under test here
N = 200_000
_one, _two = UOp.const(dtypes.weakint, 1), UOp.const(dtypes.weakint, 2)
_inc = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c", vec=False))),
                        lambda x, c: UOp(Ops.ADD, x.dtype, (x, _two)) if c is _one else None)])

def test_rewrite_deep_chain():
  limit = sys.getrecursionlimit()
  x = UOp.variable("deep", 0, 10)
  c = x
  for _ in range(N): c = UOp(Ops.ADD, dtypes.weakint, (c, _one))
  r = graph_rewrite(c, _inc)
  assert sys.getrecursionlimit() == limit
  n, depth = r, 0
  while n is not x:
    assert n.op is Ops.ADD and n.src[1].arg == 2
    n, depth = n.src[0], depth + 1
  assert depth == N
  assert len(r.toposort()) == N + 2
  assert repr(r).startswith("<UOp Ops.ADD")  # repr summarises huge graphs

def test_rewrite_wide_fan_in():
  sink = UOp(Ops.SINK, dtypes.void, tuple(UOp(Ops.ADD, dtypes.weakint, (UOp.const(dtypes.weakint, -i), _one)) for i in range(N)))
  r = graph_rewrite(sink, _inc)
  assert len(r.src) == N and all(s.src[1] is _two for s in r.src)
  assert r.src[7].src[0] is sink.src[7].src[0] and r.src[7].src[0].arg == -7

def test_rewrite_fixed_point_and_order():
  a = UOp.variable("a", 0, 10)
  e = ((a + 0) + 0) * 1
  fold = PatternMatcher([(UPat.var("x") + 0, lambda x: x), (UPat.var("x") * 1, lambda x: x)])
  assert graph_rewrite(e, fold) is a and graph_rewrite(e, fold, bottom_up=True) is a
  # top-down offers a node after its (rewritten) sources; bottom-up offers it first
  for bu, first in ((False, a), (True, e)):
    seen: list = []
    graph_rewrite(e, PatternMatcher([(UPat(name="u"), lambda ctx, u: ctx.append(u))]), ctx=seen, bottom_up=bu)
    assert seen[0] is first and set(seen) == set(e.toposort())

def test_rewrite_bottom_up_sees_parent_first():
  a = UOp.variable("a", 0, 10)
  e = (a + 0) * 2
  pm = PatternMatcher([(UPat(Ops.MUL, src=(UPat(Ops.ADD, name="ad"), UPat.cvar("c"))), lambda ad, c: UOp.const(dtypes.weakint, 99)),
                       (UPat.var("x") + 0, lambda x: x)])
  assert graph_rewrite(e, pm, bottom_up=True).arg == 99  # MUL(ADD, 2) matched before its ADD was folded
  assert graph_rewrite(e, pm) is a * 2  # top-down: the ADD folds first, then the MUL rule no longer matches

def test_bottom_up_gate():
  a = UOp.variable("a", 0, 10)
  inner = a + 0
  e = UOp.sink(inner * 3, inner)
  def gate(x):
    if x.op is Ops.MUL: raise BottomUpGate()
  pm = PatternMatcher([(UPat(Ops.MUL, name="x"), gate), (UPat.var("x") + 0, lambda x: x)])
  r = graph_rewrite(e, pm, bottom_up=True)
  assert r.src[0] is inner * 3 and r.src[1] is a  # nothing under the gated MUL was rewritten, the other use was

def test_walk():
  a = UOp.variable("a", 0, 10)
  e = UOp.const(dtypes.weakint, 1) + UOp.const(dtypes.weakint, 2)
  inc = PatternMatcher([(UPat.cvar("c", vec=False), lambda c: c.const_like(c.arg + 10))])  # never reaches a fixed point
  assert graph_rewrite(e, inc, walk=True).src[0].arg == 11 and graph_rewrite(e, inc, walk=True).src[1].arg == 12
  assert graph_rewrite(e, inc, walk=True, bottom_up=True).src[0].arg == 11
  # a rule whose result contains the node it replaced: applied once per node
  wrap = PatternMatcher([(UPat(Ops.BUFFER, name="b"), lambda b: b + 1)])
  assert graph_rewrite(a * 2, wrap, walk=True) is (a + 1) * 2
  assert graph_rewrite(a * 2, wrap, walk=True, bottom_up=True) is (a + 1) * 2

def test_enter_calls():
  p = UOp.param(0, f32, 4)
  body = UOp.sink(p.store(p.alu(Ops.EXP2)))
  call = UOp.sink(body.call(buf(4)))
  to_sqrt = PatternMatcher([(UPat(Ops.EXP2, name="x"), lambda x: x.replace(op=Ops.SQRT))])
  assert graph_rewrite(call, to_sqrt) is call  # opaque bodies are not entered by default
  entered = graph_rewrite(call, to_sqrt, enter_calls=True)
  assert entered is not call and any(u.op is Ops.SQRT for u in entered.toposort())
  # a value-producing call's body is never rewritten separately, even with enter_calls
  pa = UOp.param(0, f32, 4, "CPU")
  vc = UOp.sink(*pa.exp2().call(buf(4)).returned_outputs)
  assert graph_rewrite(vc, to_sqrt, enter_calls=True) is vc
  # the call's args are rewritten either way
  args = UOp.sink(body.call(buf(4).alu(Ops.EXP2)))
  assert any(u.op is Ops.SQRT for u in graph_rewrite(args, to_sqrt).toposort(enter_calls=False))

# *** printing ***

def test_repr():
  a = UOp.variable("a", 0, 10)
  s = a + a
  r = repr(s)
  assert r.startswith("UOp(Ops.ADD, dtypes.weakint, arg=None, src=(") and "x1," in r  # the second use is a back-reference
  assert "ParamArg(-1, dtypes.weakint, vmin_vmax=(0, 10), name='a', addrspace=AddrSpace.ALU)" in r
  assert repr(UOp.const(f32, 1.0).rtag("t")) == "UOp(Ops.CONST, dtypes.float32, arg=1.0, tag='t', src=())"
  assert repr(ParamArg(0, f32, 12, device="CPU")) == "ParamArg(0, dtypes.float32, 12, device='CPU')"

def _graphs():
  n = UOp.variable("n", 1, 10)
  p0 = UOp.param(0, f32, (n, 4), "CPU")
  r = UOp.range(16, 3, AxisType.REDUCE)
  pv = UOp.param(1, i32.vec(4), 8, addrspace=AddrSpace.LOCAL)
  yield "alu", (UOp.variable("a", 0, 10) * 3 + 1) // 2
  yield "paramarg", UOp.sink(p0, UOp.param(1, i32), buf(6, dtypes.bfloat16), UOp.new_buffer(("A", "B"), 4, f32))
  yield "symbolic_shape", p0.shrink(((1, n), (0, 4))).pad(((0, n), (1, 1)))
  yield "float_consts", UOp.sink(*[UOp.const(f32, v) for v in (math.inf, -math.inf, math.nan, -0.0, 0.0, 1e-45, 3.5)],
                                 UOp(Ops.CONST, dtypes.float64.vec(2), arg=(math.inf, -0.0)))
  yield "reduce_axis", buf(12).reshape((3, 4)).r(Ops.MAX, (1,)).cast(dtypes.float16).bitcast(dtypes.int16)
  yield "call", UOp.sink(*UOp.param(0, f32, (2, 2)).exp2().call(buf(4).reshape((2, 2)), name="f", precompile=True).returned_outputs)
  yield "kernel", UOp.sink(pv.index(r).store(UOp.const(i32, 1).broadcast(4)).end(r), arg=KernelInfo(name="k", axis_types=(AxisType.LOOP,)))
  vec = UOp(Ops.STACK, f32.vec(2), (UOp.const(f32, 1.0),) * 2)
  yield "bind_copy_tag", UOp.sink(n.bind(3), buf(4).copy_to_device("CPU:1").rtag(("a", 1)), vec.gep(1))

@pytest.mark.parametrize("name,g", list(_graphs()), ids=[n for n, _ in _graphs()])
def test_pyrender_roundtrip(name, g):
  src = g.pyrender()
  ns: dict = {}
  exec(src, ns)
  assert ns["ast"] is g, src

def test_pyrender_refuses_python_grad_fxn():
  c = UOp.param(0, f32, 4, "CPU").exp2().call(buf(4), grad_fxn=lambda *g, call: g)
  with pytest.raises(NotImplementedError): c.pyrender()

"""Symbolic shapes: bound Variables in views, creation shapes, elementwise, reductions, matmul and attention, against numpy.

Cases follow tinygrad's test_symbolic_ops.py / test_symbolic_jit.py / test_symbolic_shapetracker.py: a tensor whose
shape holds a bound Variable is computed for the Variable's value, in a buffer of the Variable's largest size;
shrinking it to a concrete shape (`t[:3, :i]`) reads the result. Each kernel is compiled once for the Variable's range."""
from __future__ import annotations
import numpy as np
import pytest

from tg_core import Tensor, TinyJit, Variable, dtypes
from tg_core.uop import Ops
from tg_core.uop.ops import UOp, sint_eq, sym_infer

rng = np.random.default_rng(7)
def rnd(*s: int) -> np.ndarray: return rng.standard_normal(s).astype(np.float32)

def close(a: np.ndarray, b: np.ndarray, tol: float = 1e-5) -> None: np.testing.assert_allclose(a, b, atol=tol, rtol=tol)

# *** shapes ***

def test_issue_example_slice_plus_one():
  ones = Tensor.ones(10).contiguous()
  t = ones[:Variable("i", 1, 10).bind(2)] + 1
  assert isinstance(t.shape[0], UOp) and t.shape[0].op is Ops.BIND and t.shape[0].unbind()[1] == 2
  t.realize()
  assert isinstance(t.shape[0], UOp) and t.shape[0].unbind()[1] == 2  # realizing keeps the bound shape
  np.testing.assert_equal(t[:2].numpy(), np.full(2, 2.0, np.float32))

def test_shape_arithmetic_folds():
  vi = Variable("i", 1, 8).bind(3)
  a = Tensor(rnd(7, 11))
  assert a[3:5, vi:vi+2].shape == (2, 2)  # (i+2) - i is the int 2
  assert a[:, :vi].pad(((0, 0), (0, 10 - vi))).shape == (7, 10)

def test_numpy_of_symbolic_shape_raises():
  t = Tensor.ones(10).contiguous()[:Variable("i", 1, 10).bind(4)] * 2
  with pytest.raises(AssertionError, match="symbolic"): t.numpy()
  with pytest.raises(AssertionError, match="symbolic"): t.tolist()

def test_sym_infer_shape():
  v = Variable("n", 1, 100)
  x = Tensor.ones(100).contiguous()[:v.bind(37)].reshape(1, v.bind(37)).pad(((0, 0), (2, 3)))
  assert tuple(sym_infer(s, {v: 37}) for s in x.shape) == (1, 42)
  assert tuple(sym_infer(s, {"n": 5}) for s in x.shape) == (1, 10)
  assert sym_infer(x.shape[1], {}) == 42  # a bound Variable without a given value takes its bound value
  with pytest.raises(KeyError, match="n"): sym_infer(v * 2 + 5, {})

# *** ops (tinygrad's test_symbolic_ops) ***

def test_plus1():
  a = rnd(3, 10)
  ta = Tensor(a)
  for i in range(1, 5):
    vi = Variable("i", 1, 10).bind(i)
    close((ta[:, :vi] + 1).realize()[:3, :i].numpy(), a[:, :i] + 1)

def test_plus1_pad():
  a = rnd(3, 10)
  ta = Tensor(a)
  for i in range(1, 5):
    vi = Variable("i", 1, 10).bind(i)
    x = ta[:, :vi] + 1
    out = x.pad((None, (0, 10 - x.shape[1]))).realize()
    assert out.shape == (3, 10)
    close(out.numpy(), np.pad(a[:, :i] + 1, ((0, 0), (0, 10 - i))))

def test_add():
  a, b = rnd(3, 10), rnd(3, 10)
  ta, tb = Tensor(a), Tensor(b)
  for i in range(1, 5):
    vi = Variable("i", 1, 10).bind(i)
    close((ta[:, :vi] + tb[:, :vi]).realize()[:, :i].numpy(), a[:, :i] + b[:, :i])

def test_matmul_symbolic_inner_dim():
  a, b = rnd(3, 10), rnd(10, 5)
  ta, tb = Tensor(a), Tensor(b)
  for i in range(1, 5):
    vi = Variable("i", 1, 10).bind(i)
    close((ta[:, :vi] @ tb[:vi, :]).numpy(), a[:, :i] @ b[:i, :])

@pytest.mark.parametrize("order", ["ij", "ji"])
def test_two_vars_matmul_plus1(order: str):
  a, b = rnd(10, 3), rnd(3, 10)
  ta, tb = Tensor(a), Tensor(b)
  for i in range(2, 4):
    for j in range(2, 4):
      vi, vj = Variable("i", 1, 10).bind(i), Variable("j", 1, 10).bind(j)
      (p, q), (m, n) = ((vi, vj), (i, j)) if order == "ij" else ((vj, vi), (j, i))
      close((ta[:p, :] @ tb[:, :q] + 1).realize()[:m, :n].numpy(), a[:m] @ b[:, :n] + 1)

def test_attention():
  q, k, v = rnd(2, 1, 4, 8), rnd(2, 10, 4, 8), rnd(2, 10, 4, 8)
  tq, tk, tv = Tensor(q), Tensor(k), Tensor(v)
  def ref(i: int) -> np.ndarray:
    qq, kk, vv = q.transpose(0, 2, 1, 3), k[:, :i].transpose(0, 2, 1, 3), v[:, :i].transpose(0, 2, 1, 3)
    s = qq @ kk.transpose(0, 1, 3, 2) / np.sqrt(8)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ vv
  for i in range(1, 5):
    vi = Variable("i", 1, 10).bind(i)
    out = Tensor.scaled_dot_product_attention(tq.transpose(1, 2), tk[:, :vi].transpose(1, 2), tv[:, :vi].transpose(1, 2)).realize()
    assert out.shape == (2, 4, 1, 8)
    close(out.numpy(), ref(i))

def test_softmax_over_symbolic_axis():
  a = rnd(4, 10)
  ta = Tensor(a)
  for i in (1, 3, 10):
    x = ta[:, :Variable("i", 1, 10).bind(i)].softmax(-1).realize()
    e = np.exp(a[:, :i] - a[:, :i].max(-1, keepdims=True))
    close(x[:, :i].numpy(), e / e.sum(-1, keepdims=True))

@pytest.mark.parametrize("dim", [0, 1])
def test_cat(dim: int):
  a, b = rnd(10, 10), rnd(2, 3) if dim == 0 else rnd(3, 2)
  ta, tb = Tensor(a), Tensor(b)
  for i in range(1, 5):
    vi = Variable("i", 1, 10).bind(i)
    x = ta[:vi, :3] if dim == 0 else ta[:3, :vi]
    out = x.cat(tb, dim=dim).realize()
    ref = np.concatenate([a[:i, :3] if dim == 0 else a[:3, :i], b], axis=dim)
    close((out[:i+2, :3] if dim == 0 else out[:3, :i+2]).numpy(), ref)

def test_cat_two_vars():
  a, b = rnd(10, 3), rnd(10, 3)
  ta, tb = Tensor(a), Tensor(b)
  for i, j in [(2, 3), (4, 2)]:
    vi, vj = Variable("i", 1, 10).bind(i), Variable("j", 1, 10).bind(j)
    close(ta[:vi].cat(tb[:vj], dim=0).realize()[:i+j].numpy(), np.concatenate([a[:i], b[:j]]))

def test_shrink_and_slice_symbolic_start():
  a = rnd(7, 11)
  ta = Tensor(a)
  for i in range(1, 5):
    vi = Variable("i", 1, 8).bind(i)
    close(ta.shrink(((3, 5), (vi, vi + 2))).numpy(), a[3:5, i:i+2])
    close(ta[3:5, vi:vi+2].numpy(), a[3:5, i:i+2])
    close(ta[3:5, :vi:1][:2, :i].numpy(), a[3:5, :i])
    close(ta[:, vi].numpy(), a[:, i])

def test_expand_padded():
  a = Tensor(1).unsqueeze(0).pad((0, 1)).unsqueeze(0)
  for i in range(1, 5):
    vi = Variable("i", 1, 10).bind(i)
    close(a.expand(vi, 2)[:i, :2].numpy(), np.tile(np.array([[1, 0]]), (i, 1)))

def test_creation_with_symbolic_shape():
  for i in range(1, 5):
    vi = Variable("i", 1, 10).bind(i)
    a = Tensor.ones(vi, 11).contiguous()
    close(a[:, 1:2][:i, :1].numpy(), np.ones((i, 1), np.float32))
    z = Tensor.zeros(vi, 3) + Tensor.full((vi, 3), 2.5)
    close(z.realize()[:i].numpy(), np.full((i, 3), 2.5, np.float32))
    e = Tensor.empty(vi, 2)
    assert e.shape[0] is vi and e.shape[1] == 2
    close(e.assign(Tensor.ones(vi, 2) * 3).realize()[:i].numpy(), np.full((i, 2), 3.0, np.float32))

def test_reshape_keeps_symbolic_dim():
  a = rnd(10, 6)
  ta = Tensor(a)
  for i in (1, 4, 10):
    vi = Variable("i", 1, 10).bind(i)
    x = ta[:vi].reshape(vi, 2, 3).permute(1, 0, 2).reshape(2, vi * 3)
    close(x.realize()[:, :i*3].numpy(), a[:i].reshape(i, 2, 3).transpose(1, 0, 2).reshape(2, i * 3))
    close(ta[:vi].reshape(vi * 6).sum().numpy(), a[:i].sum())

def test_invalid_symbolic_reshape():
  vi = Variable("i", 1, 10).bind(3)
  with pytest.raises(ValueError): Tensor(rnd(30)).reshape((3, vi))
  with pytest.raises(ValueError): Tensor(rnd(30))[:vi * 3].reshape((3, 3))

def test_ones_sum():
  t = Tensor.ones(10)
  for i in range(1, 5):
    assert t[:Variable("i", 1, 10).bind(i)].sum().item() == i

@pytest.mark.parametrize("axis", [None, 0, 1])
def test_mean_var(axis: int | None):
  a = rnd(10, 3)
  ta = Tensor(a)
  for i in range(2, 5):
    vi = Variable("i", 1, 10).bind(i)
    for name, ref in (("mean", a[:i].mean(axis)), ("var", a[:i].var(axis, ddof=1))):
      out = getattr(ta[:vi], name)(axis)
      out = out.numpy() if axis != 1 else out[:i].numpy()
      close(out, ref)

@pytest.mark.parametrize("axis", [None, 0, 1])
def test_mean_2d_two_vars(axis: int | None):
  a = rnd(10, 10)
  ta = Tensor(a)
  for i, j in [(2, 3), (4, 2)]:
    vi, vj = Variable("i", 1, 10).bind(i), Variable("j", 1, 10).bind(j)
    out = ta[:vi, :vj].mean(axis)
    ref = a[:i, :j].mean(axis)
    close(out.numpy() if axis is None else out[:ref.shape[0]].numpy(), ref)

def test_bitcast():
  a = rnd(10, 3)
  ta = Tensor(a)
  for i in range(1, 4):
    vi = Variable("i", 1, 10).bind(i)
    np.testing.assert_equal(ta[:vi].bitcast(dtypes.uint32)[:i].numpy(), a[:i].view(np.uint32))

def test_bitcast_resize_needs_a_fixed_last_dim():
  vi = Variable("i", 1, 10).bind(4)
  with pytest.raises(RuntimeError, match="symbolic"): Tensor(rnd(10, 4)).reshape(40)[:vi].bitcast(dtypes.uint16)

# *** errors ***

def test_bind_out_of_range():
  v = Variable("i", 1, 10)
  for bad in (0, 11, -3):
    with pytest.raises(ValueError, match=r"\[1, 10\]"): v.bind(bad)
    with pytest.raises(AssertionError): v.bind(bad)  # tinygrad raises AssertionError

def test_slice_past_max_size():
  with pytest.raises(ValueError, match="shrink"): Tensor.ones(10)[:Variable("i", 1, 20).bind(3)]

def test_one_variable_two_values():
  v = Variable("i", 1, 10)
  t = Tensor.ones(10).contiguous()
  with pytest.raises(ValueError, match="bound to both"): (t[:v.bind(2)].sum() + t[:v.bind(3)].sum()).realize()

def test_unbound_variable():
  t = Tensor.ones(10).contiguous()[:Variable("u", 1, 10)] + 1
  with pytest.raises(RuntimeError, match="'u'.*bind"): t.realize()

# *** TinyJit (tinygrad's test_symbolic_jit): one capture replays for every value ***

def test_jit_plus1_view_input():
  a = rnd(3, 10)
  ta = Tensor(a)
  jf = TinyJit(lambda x: (x + 1).realize())
  for i in range(1, 6):
    vi = Variable("i", 1, 10).bind(i)
    out = jf(ta[:, :vi])
    assert out.shape[1].unbind() == (vi.src[0], i)  # the output's shape is bound to this call's value
    close(out[:3, :i].numpy(), a[:, :i] + 1)
  assert jf.captured is not None and len(jf.captured) == 1

def test_jit_matmul_and_mixed_kernels():
  a, b = rnd(3, 10), rnd(10, 5)
  ta, tb = Tensor(a), Tensor(b)
  def f(x: Tensor, y: Tensor) -> Tensor:
    s = (x @ y).realize()
    return (s + s).realize()  # a kernel with no Variable in it
  jf = TinyJit(f)
  for i in range(1, 6):
    vi = Variable("i", 1, 10).bind(i)
    close(jf(ta[:, :vi], tb[:vi, :]).numpy(), 2 * (a[:, :i] @ b[:i]))
  assert jf.captured is not None and len(jf.captured) == 2

def test_jit_attention():
  q, k, v = rnd(2, 1, 4, 8), rnd(2, 10, 4, 8), rnd(2, 10, 4, 8)
  tq, tk, tv = Tensor(q), Tensor(k), Tensor(v)
  jf = TinyJit(lambda q, k, v: Tensor.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).realize())
  for i in range(1, 6):
    vi = Variable("i", 1, 10).bind(i)
    kk, vv = k[:, :i].transpose(0, 2, 1, 3), v[:, :i].transpose(0, 2, 1, 3)
    s = q.transpose(0, 2, 1, 3) @ kk.transpose(0, 1, 3, 2) / np.sqrt(8)
    e = np.exp(s - s.max(-1, keepdims=True))
    close(jf(tq, tk[:, :vi], tv[:, :vi]).numpy(), (e / e.sum(-1, keepdims=True)) @ vv)

def test_jit_two_vars_cat():
  a, b = rnd(10, 3), rnd(10, 3)
  ta, tb = Tensor(a), Tensor(b)
  jf = TinyJit(lambda x, y: x.cat(y, dim=0).realize())
  for i, j in [(2, 2), (3, 4), (4, 3), (2, 5)]:
    vi, vj = Variable("i", 1, 10).bind(i), Variable("j", 1, 10).bind(j)
    close(jf(ta[:vi], tb[:vj])[:i+j, :3].numpy(), np.concatenate([a[:i], b[:j]]))
  assert jf.captured is not None and len(jf.captured) == 1

def test_jit_shrink_symbolic_start_and_sum():
  a = rnd(7, 11)
  ta = Tensor(a)
  jf = TinyJit(lambda x: (x + 1).realize())
  js = TinyJit(lambda x: x.sum().realize())
  for i in range(1, 6):
    vi = Variable("i", 1, 8).bind(i)
    close(jf(ta[3:5, vi:vi+2]).numpy(), a[3:5, i:i+2] + 1)
    close(js(ta[:, :vi]).numpy(), a[:, :i].sum())

def test_jit_symbolic_shape_mismatch():
  add = TinyJit(lambda x, y: (x + y).realize())
  a, b = Tensor(rnd(3, 10)), Tensor(rnd(3, 10))
  for i in range(1, 4):
    vi = Variable("i", 1, 10).bind(i)
    add(a[:, :vi], b[:, :vi])
  vi = Variable("i", 1, 10).bind(7)
  with pytest.raises(RuntimeError, match="captured with"): add(a[:, :vi], Tensor(rnd(4, 10))[:, :vi])

# *** a decode loop: attention over a KV cache whose valid length is a bound start_pos ***

MAX_LEN, DIM, HEADS = 128, 16, 2

class _CachedAttention:
  """One attention layer with a KV cache of MAX_LEN positions, written at `start_pos` and read as cache[:, :start_pos+1]."""
  def __init__(self, w: dict[str, np.ndarray]):
    self.w = {k: Tensor(v) for k, v in w.items()}
    self.cache_k = Tensor.zeros(1, MAX_LEN, HEADS, DIM // HEADS).contiguous().realize()
    self.cache_v = Tensor.zeros(1, MAX_LEN, HEADS, DIM // HEADS).contiguous().realize()
  def __call__(self, x: Tensor, start_pos: UOp) -> Tensor:
    hd = DIM // HEADS
    q, k, v = [(x @ self.w[n]).reshape(1, 1, HEADS, hd) for n in ("q", "k", "v")]
    self.cache_k[:, start_pos:start_pos+1].assign(k).realize()
    self.cache_v[:, start_pos:start_pos+1].assign(v).realize()
    keys, values = self.cache_k[:, :start_pos+1], self.cache_v[:, :start_pos+1]
    out = Tensor.scaled_dot_product_attention(q.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2))
    return (out.transpose(1, 2).reshape(1, 1, DIM) @ self.w["o"]).realize()

def _reference_decode(w: dict[str, np.ndarray], xs: list[np.ndarray]) -> list[np.ndarray]:
  hd, ks, vs, outs = DIM // HEADS, [], [], []
  for x in xs:
    q, k, v = [(x @ w[n]).reshape(HEADS, hd) for n in ("q", "k", "v")]
    ks.append(k)
    vs.append(v)
    K, V = np.stack(ks, 1), np.stack(vs, 1)                        # (HEADS, pos+1, hd)
    s = np.einsum("hd,hpd->hp", q, K) / np.sqrt(hd)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    outs.append(np.einsum("hp,hpd->hd", p, V).reshape(1, 1, DIM) @ w["o"])
  return outs

@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[UOp]:
  """The kernel ASTs compiled while the test runs (every runner-cache miss renders and compiles one)."""
  import tg_core.codegen
  from tg_core.helpers import LOWER_CACHE
  seen: list[UOp] = []
  monkeypatch.setattr(LOWER_CACHE, "value", 0)  # a kernel an earlier run lowered would come from the disk cache, uncounted
  real = tg_core.codegen.get_program
  def counting(ast: UOp, *args, **kwargs):  # type: ignore[no-untyped-def]
    seen.append(ast)
    return real(ast, *args, **kwargs)
  monkeypatch.setattr(tg_core.codegen, "get_program", counting)
  return seen

@pytest.fixture
def scheduled(monkeypatch: pytest.MonkeyPatch) -> list[int]:
  """The number of kernels each realize scheduled and ran while the test runs (TinyJit replays run none)."""
  import tg_core.engine.realize
  seen: list[int] = []
  real = tg_core.engine.realize.run_schedule
  def counting(items, *args, **kwargs):  # type: ignore[no-untyped-def]
    if items: seen.append(len(items))
    return real(items, *args, **kwargs)
  monkeypatch.setattr(tg_core.engine.realize, "run_schedule", counting)
  return seen

@pytest.mark.parametrize("jit", [True, False], ids=["jit", "nojit"])
def test_decode_loop_kv_cache(jit: bool, compiles: list[UOp], scheduled: list[int]):
  steps = 100 if jit else 30  # without TinyJit every step builds and schedules the graph: fewer steps show the same
  w = {n: (rnd(DIM, DIM) / np.sqrt(DIM)).astype(np.float32) for n in ("q", "k", "v", "o")}
  xs = [rnd(1, 1, DIM) for _ in range(steps)]
  ref = _reference_decode(w, xs)
  layer = _CachedAttention(w)
  step = TinyJit(layer.__call__) if jit else layer.__call__
  sp = Variable("start_pos", 0, MAX_LEN - 1)
  n_compiled, n_scheduled = 0, 0
  for pos in range(steps):
    out = step(Tensor(xs[pos]), sp.bind(pos))
    close(out.numpy(), ref[pos], 1e-4)
    if pos == 2: n_compiled, n_scheduled = len(compiles), len(scheduled)
  assert len(compiles) == n_compiled, "a kernel was compiled after the first steps"
  assert len({id(a) for a in compiles}) == len(compiles), "a kernel was compiled twice"
  if jit:
    assert isinstance(step, TinyJit) and step.captured is not None and len(step.captured) >= 4
    assert len(scheduled) == n_scheduled, "TinyJit replays must not schedule"
  else: assert len(scheduled) > n_scheduled
  # the cache holds the keys and values of every step
  np.testing.assert_allclose(layer.cache_k[:, :steps].numpy().reshape(steps, DIM), np.concatenate([x.reshape(1, DIM) @ w["k"] for x in xs]), atol=1e-4)

# *** edge cases ***

def test_zero_length_and_values():
  v0 = Variable("i", 0, 10).bind(0)
  assert Tensor.ones(10)[:v0].sum().item() == 0
  assert Tensor.ones(4, 10).contiguous()[:, :v0].softmax(-1).realize()[:, :0].numpy().shape == (4, 0)
  a = np.arange(10, dtype=np.float32)
  t = Tensor(a)
  vi = Variable("i", 0, 10).bind(4)
  close((t * vi).numpy(), a * 4)                     # a bound Variable as a value
  close((t[:vi] + vi).realize()[:4].numpy(), a[:4] + 4)

def test_arange_needs_concrete_bounds():
  with pytest.raises(TypeError, match="concrete"): Tensor.arange(Variable("i", 1, 10).bind(3))
  np.testing.assert_equal(Tensor.arange(10)[:Variable("i", 1, 10).bind(3)].realize()[:3].numpy(), np.arange(3))

def test_schedule_cache_ignores_bound_values():
  from tg_core.schedule import cache as schedule_cache
  a = rnd(4, 16)
  ta = Tensor(a)
  def f(i: int) -> np.ndarray: return (ta[:, :Variable("n", 1, 16).bind(i)].exp().sum(1) * 2).numpy()
  close(f(3), np.exp(a[:, :3]).sum(1) * 2)
  misses = schedule_cache.stats["misses"]
  for i in (1, 7, 16): close(f(i), np.exp(a[:, :i]).sum(1) * 2, 1e-4)
  assert schedule_cache.stats["misses"] == misses

def test_jit_view_inputs_read_their_buffer():
  # an input that is a view (here a transpose, no Variable) is read through the view from its own buffer on every replay
  jf = TinyJit(lambda x: (x * 2).realize())
  for _ in range(4):
    a = rnd(3, 5)
    close(jf(Tensor(a).T).numpy(), a.T * 2)
  with pytest.raises(RuntimeError, match="captured with"): jf(Tensor(rnd(5, 3)))  # not a transposed view: another signature

def test_setitem_symbolic_slot():
  cache = Tensor.zeros(2, 8, 3).contiguous().realize()
  ref = np.zeros((2, 8, 3), np.float32)
  sp = Variable("sp", 0, 7)
  for pos in range(8):
    kv = rnd(2, 1, 3)
    cache[:, sp.bind(pos):sp.bind(pos)+1] = Tensor(kv)
    ref[:, pos:pos+1] = kv
    close(cache.numpy(), ref)
  cache[1, sp.bind(3)] = Tensor(np.full(3, 9.0, np.float32))  # an int and a Variable index
  ref[1, 3] = 9.0
  close(cache.numpy(), ref)

def test_llm_style_gqa_rope_shapes():
  # the KV-cache reads of an LLM block: repeat_kv (GQA) and a RoPE table shrunk at start_pos, with numpy as the reference
  ck = rnd(1, 16, 2, 4)
  freqs = rnd(16, 4)
  tck, tfreqs = Tensor(ck), Tensor(freqs)
  for pos in (0, 5, 15):
    sp = Variable("start_pos", 0, 15).bind(pos)
    keys = tck[:, :sp+1]
    rep = keys.reshape(1, sp+1, 2, 1, 4).expand(1, sp+1, 2, 3, 4).reshape(1, sp+1, 6, 4)  # repeat_kv with n_rep 3
    out = (rep * tfreqs.shrink(((0, sp+1), None)).reshape(1, sp+1, 1, 4)).sum(1)          # a reduction over the positions
    ref = (np.repeat(ck[:, :pos+1], 3, axis=2) * freqs[:pos+1].reshape(1, pos+1, 1, 4)).sum(1)
    close(out.numpy(), ref)
    close(tfreqs[sp:sp+1].numpy(), freqs[pos:pos+1])  # the RoPE row of this position

def test_launch_checks_the_range():
  from tg_core.engine.realize import run_schedule
  from tg_core.uop.ops import VariableRangeError
  t = Tensor.ones(10).contiguous().realize()
  items, var_vals = (t[:Variable("i", 1, 10).bind(3)] * 2).schedule_with_vars()
  assert var_vals == {"i": 3}
  with pytest.raises(VariableRangeError, match="'i' = 11"): run_schedule(items, {"i": 11})

# *** shapes and bound values of views (tinygrad's test_symbolic_shapetracker) ***

def test_cat_shapes_and_values():
  i, j, k = (Variable(n, 1, 5).bind(3) for n in "ijk")
  a, b, c = rnd(5, 4), rnd(5, 4), rnd(5, 4)
  t = Tensor(a)[:i].cat(Tensor(b)[:j], dim=0).cat(Tensor(c)[:k], dim=0)
  assert sint_eq(t.shape[0], i + j + k) and t.shape[1] == 4
  close(t.realize()[:9].numpy(), np.concatenate([a[:3], b[:3], c[:3]]))
  t = Tensor(a)[:i, :3].cat(Tensor(b)[:i, :3], dim=0).cat(Tensor(c)[:3, :3], dim=0)
  assert sint_eq(t.shape[0], 2 * i + 3)
  close(t.realize()[:9].numpy(), np.concatenate([a[:3, :3], b[:3, :3], c[:3, :3]]))

def test_var_vals_of_views():
  x, y, z = Variable("x", 1, 6).bind(3), Variable("y", 1, 9).bind(4), Variable("z", 1, 8).bind(5)
  assert Tensor.ones(3, 4).contiguous().schedule_with_vars()[1] == {}
  assert (Tensor.empty(x, 3) + 1).schedule_with_vars()[1] == {"x": 3}
  a = rnd(9, 9, 9)
  t = Tensor(a).shrink(((0, x), (z, z + 1), (0, y)))
  assert t.shape[1] == 1 and t.contiguous().schedule_with_vars()[1] == {"x": 3, "y": 4, "z": 5}
  close(Tensor(a).shrink(((x, x + 3), (3, 7), (2, 5))).reshape(3 * 4 * 3).numpy(), a[3:6, 3:7, 2:5].reshape(-1))

def test_unbind_graph():
  from tg_core.schedule.variables import unbind_graph
  v, bv = Variable("v", 0, 2), Variable("v", 0, 2).bind(2)
  t = Tensor(rnd(3, 4)).shrink(((bv, bv + 1), (0, 4)))
  sink = UOp.sink(t.uop)
  unbound, _, binds = unbind_graph(sink, list(sink.toposort()))
  assert unbound.src[0].shape == (1, 4) and unbound.src[0].arg == ((v, v + 1), (0, 4)) and binds == {v: bv}

def test_two_symbol_reshape():
  a = rnd(5, 5)
  t = Tensor(a)
  for i, j in [(2, 3), (4, 1), (5, 5)]:
    vi, vj = Variable("i", 1, 5).bind(i), Variable("j", 1, 5).bind(j)
    x = t[:vi, :vj].reshape(vj, vi)
    assert x.shape == (vj, vi)
    close(x.realize()[:j, :i].numpy(), a[:i, :j].reshape(j, i))
    y = x.reshape(vi, vj)
    assert y.shape == (vi, vj) and x.reshape(1, vi * vj).shape[0] == 1
    close(y.realize()[:i, :j].numpy(), a[:i, :j])

def test_expand_into_symbols_and_pad():
  vi, vj = Variable("i", 1, 5).bind(3), Variable("j", 1, 5).bind(2)
  a = Tensor([[1], [2], [3]]).expand((3, vi))
  assert a.shape == (3, vi)
  b = a.reshape(3, vi, 1).expand((3, vi, vj))
  assert b.shape == (3, vi, vj)
  np.testing.assert_equal(b.contiguous().realize()[:3, :3, :2].numpy(), np.broadcast_to(np.array([1, 2, 3]).reshape(3, 1, 1), (3, 3, 2)))
  c = Tensor(1).unsqueeze(0).pad((0, 24)).unsqueeze(0).expand((vi, 25))
  assert c.shape == (vi, 25) and sint_eq(c.reshape(25 * vi).shape[0], vi * 25)
  v = Variable("v", 1, 100).bind(5)
  p = Tensor.ones(100)[:v].pad(((4, 0),))
  assert sint_eq(p.shape[0], v + 4)
  assert p.realize()[:9].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1]

def test_shrink_with_unbound_variable_shapes():
  vi = Variable("i", 1, 5)
  assert Tensor(rnd(5, 5)).shrink(((0, 5), (0, vi))).shape == (5, vi)
  assert Tensor(rnd(3, 6)).shrink(((0, 2), (vi, vi + 1))).shape == (2, 1)

def test_backward_through_symbolic_slice():
  a = rnd(10)
  for i in (1, 4, 10):
    x = Tensor(a, requires_grad=True)
    (x[:Variable("i", 1, 10).bind(i)] * x[:Variable("i", 1, 10).bind(i)]).sum().backward()
    close(x.grad.numpy(), np.where(np.arange(10) < i, 2 * a, 0))

def test_realize_symbolic_and_concrete_together():
  a = rnd(4, 10)
  ta = Tensor(a)
  x, y = ta[:, :Variable("i", 1, 10).bind(3)] + 1, ta * 2
  Tensor.realize(x, y)
  assert x.is_realized() and y.is_realized()
  close(x[:, :3].numpy(), a[:, :3] + 1)
  close(y.numpy(), a * 2)

"""The heuristic's size of a symbolic loop (`axis_size_estimate`): the middle of its bound's range, not 1, so a kernel over a
long symbolic axis (decode attention over a KV cache whose length is a bound Variable) is sized as the work it does."""
from __future__ import annotations
import numpy as np

from tg_core import Tensor, TinyJit, Variable
from tg_core.codegen.opt.apply import kernel_axes
from tg_core.codegen.opt.heuristic import axis_size_estimate
from tg_core.schedule import create_schedule
from tg_core.uop.ops import UOp
from tg_core.uop.rewrite import graph_rewrite
from tg_core.uop.symbolic import symbolic

def _axes(t: Tensor) -> list[UOp]:
  items, _ = create_schedule(UOp.sink(t.uop))
  return kernel_axes(graph_rewrite(items[-1].ast, symbolic))

def test_symbolic_axis_is_the_middle_of_its_range():
  v = Variable("n", 1, 4095)
  axes = _axes(Tensor.empty(8, 4096, device="NULL")[:, :v.bind(3)].sum(1))
  assert sorted(axis_size_estimate(r) for r in axes) == [8, (1 + 4095) // 2]
  # a bound that is an expression of the Variable: start_pos + 1
  sp = Variable("start_pos", 0, 999)
  axes = _axes(Tensor.empty(4, 1024, device="NULL")[:, :sp.bind(5) + 1].max(1))
  assert sorted(axis_size_estimate(r) for r in axes) == [4, (1 + 1000) // 2]

def test_constant_axes_keep_their_size():
  assert sorted(axis_size_estimate(r) for r in _axes(Tensor.empty(6, 10, device="NULL").sum(1))) == [6, 10]

def test_attention_over_a_symbolic_cache_matches_numpy():
  # scores, softmax and the weighted sum over cache[:, :start_pos+1] (now tiled and vectorized as a long kernel), one capture
  # replayed at positions across the range, vs numpy
  rng = np.random.default_rng(0)
  H, D, N = 4, 32, 300
  cache = rng.standard_normal((2, H, N, D)).astype(np.float32)
  tc = Tensor(cache).realize()
  def attend(q: Tensor, sp: UOp) -> Tensor:
    k, v = tc[0, :, :sp + 1], tc[1, :, :sp + 1]
    return (((q @ k.transpose(-1, -2)) * D ** -0.5).softmax(-1).contiguous() @ v).realize()
  jit = TinyJit(attend)
  sp = Variable("start_pos", 0, N - 1)
  for pos in (3, 4, 17, 150, 299):
    q = rng.standard_normal((H, 1, D)).astype(np.float32)
    got = jit(Tensor(q).realize(), sp.bind(pos)).numpy()
    s = q @ cache[0, :, :pos + 1].transpose(0, 2, 1) * D ** -0.5
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(got, (p / p.sum(-1, keepdims=True)) @ cache[1, :, :pos + 1], rtol=1e-4, atol=1e-5)

"""The scheduler as named rewrite passes: deep graphs schedule without Python recursion, the passes show in the rewrite
statistics, and the kernel graph passes spec_kernel_graph. Values are checked against numpy."""
from __future__ import annotations
import sys
import numpy as np
import pytest

from tg_core.engine.realize import run_schedule
from tg_core.schedule import create_schedule, kernel_graph
from tg_core.tensor import Tensor
from tg_core.uop import Ops
from tg_core.uop.ops import UOp
from tg_core.uop.pattern import match_stats
from tg_core.uop.spec import SpecError, spec_kernel_graph, type_verify

rng = np.random.default_rng(7)
def rnd(*s: int) -> np.ndarray: return rng.standard_normal(s).astype(np.float32)

@pytest.fixture
def no_recursion_limit_change(monkeypatch: pytest.MonkeyPatch):
  def refuse(n: int) -> None: raise AssertionError(f"the scheduler changed the recursion limit to {n}")
  monkeypatch.setattr(sys, "setrecursionlimit", refuse)
  assert sys.getrecursionlimit() <= 1000 or pytest.fail("the limit was raised before the test")

def test_deep_elementwise_chain(no_recursion_limit_change):
  x0 = rnd(4, 4)
  x, ref = Tensor(x0, device="PYTHON"), x0.copy()
  for i in range(2000):
    if i % 2: x, ref = x * 1.0001 + 0.5, ref * np.float32(1.0001) + np.float32(0.5)
    else: x, ref = (x * 0.5).sin(), np.sin(ref * np.float32(0.5))
  items = x.schedule()
  assert len(items) == 1  # all of it fuses into one kernel
  run_schedule(items)
  np.testing.assert_allclose(x.numpy(), ref, rtol=1e-4, atol=1e-5)

def test_deep_sequential_model(no_recursion_limit_change):
  layers = 150
  ws, bs = [rnd(8, 8) * 0.4 for _ in range(layers)], [rnd(8) * 0.1 for _ in range(layers)]
  x0 = rnd(2, 8)
  x, ref = Tensor(x0), x0
  for w, b in zip(ws, bs):
    x, ref = (x @ Tensor(w) + Tensor(b)).relu(), np.maximum(ref @ w + b, 0)
  items = x.schedule()
  assert len([si for si in items if si.ast.op is Ops.SINK]) == layers  # one kernel per layer: each matmul feeds a reduce
  run_schedule(items)
  np.testing.assert_allclose(x.numpy(), ref, rtol=1e-4, atol=1e-5)

def test_passes_in_rewrite_stats():
  was = match_stats.enabled
  match_stats.enabled = True
  try:
    a, b = rnd(6, 5), rnd(5, 7)
    t = (Tensor(a) @ Tensor(b)).exp().sum(1)
    before = {k: v[0] for k, v in match_stats.passes.items()}
    items, _ = create_schedule(UOp.sink(t.uop))
  finally: match_stats.enabled = was
  for name in ("schedule: realize decisions", "schedule: split kernels", "rangeify"):
    assert match_stats.passes[name][0] > before.get(name, 0), f"pass {name!r} did not run"
  assert match_stats.passes["rangeify"][1] > 0  # its rules fired
  run_schedule(items)

def test_kernel_graph_spec():
  a = rnd(4, 6)
  x = Tensor(a, device="CPU")
  t = (x.sum(0, keepdim=True) + x).exp().to("PYTHON")  # column sums expanded along the rows: realized apart
  items, _ = create_schedule(UOp.sink(t.uop))
  g = kernel_graph(items)
  type_verify(g, spec_kernel_graph)
  assert [c.src[0].op for c in g.src] == [Ops.SINK, Ops.SINK, Ops.COPY]  # the sum, the expanded add + exp, the copy
  # a call over a tensor-graph node (not a buffer) is not a kernel graph
  bad = UOp.sink(items[0].ast.call(*items[0].bufs[:1], Tensor(a).contiguous().uop))
  with pytest.raises(SpecError, match="spec_kernel_graph"): type_verify(bad, spec_kernel_graph)
  run_schedule(items)
  np.testing.assert_allclose(t.numpy(), np.exp(a.sum(0, keepdims=True) + a), rtol=1e-5)

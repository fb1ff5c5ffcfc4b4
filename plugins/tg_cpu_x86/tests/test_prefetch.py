"""Software prefetch of streamed loads (tg_cpu_x86.renderer, `_prefetch_stride`): a matvec's weights, read once each, are
prefetched an iteration ahead of the loop that reads at least a page of them; reused operands (a matmul's) and copies into
packed panels are not. Every kernel's values are checked against numpy, with and without the prefetch."""
from __future__ import annotations
import dataclasses
import re

import numpy as np
import pytest

from tg_core import Tensor
from tg_core.codegen import get_program
from tg_core.device import Device
from tg_core.engine.realize import buffer_of
from tg_core.renderer import Renderer
from tg_core.schedule import create_schedule
from tg_core.uop.ops import UOp
from tg_cpu_x86.renderer import PREFETCH_MIN_RUN

rng = np.random.default_rng(0)
PREFETCH = re.compile(r"getelementptr i8, ptr %t\d+, i64 (\d+)\n  call void @llvm\.prefetch\.p0\(ptr %t\d+, i32 0, i32 2, i32 1\)")

def run(t: Tensor, renderer: Renderer | None = None) -> tuple[np.ndarray, str]:
  """The last kernel of t's schedule (the matmul) rendered by `renderer` (default: the host's) with the heuristic's opts, run."""
  items, _ = create_schedule(UOp.sink(t.uop))
  si, dev = items[-1], Device["CPU"]
  p = get_program(si.ast, renderer or dev.renderer)
  prg = dev.runtime("CPU", p.name, dev.compiler.compile(p.src))
  bufs = [buffer_of(b) for b in si.bufs]
  prg(*[b._buf for b in bufs])
  return np.frombuffer(bytes(bufs[0].as_buffer()), dtype=np.float32).reshape(t.shape), p.src

def host_like(**caps: object) -> Renderer:
  """A fresh renderer of the host's class with some caps replaced (an AVX2 register file, no cache sizes)."""
  r = type(Device["CPU"].renderer)()
  r.caps = dataclasses.replace(r.caps, **caps)  # type: ignore[arg-type]
  return r

X = rng.standard_normal((1, 2048), dtype=np.float32)
W = rng.standard_normal((2048, 2048), dtype=np.float32)

@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("target", ["host", "avx2"])
def test_matvec_weights_prefetched(transposed: bool, target: str):
  # x @ W (column sums, K-blocked rows) and x @ W.T (row dot products): the weight loads are prefetched at least a page ahead,
  # into the L2, and the values are unchanged. "avx2": AVX2's 8-lane vectors and 16 x 6 register tile (a host without AVX-512)
  r = None if target == "host" else host_like(vector_width=8, big_reduce_tile=(16, 6))
  if len((r or Device["CPU"].renderer).caps.cache_sizes) < 2: pytest.skip("the host reports no L2 size")
  w = W.T.copy() if transposed else W
  tw = Tensor(w, device="CPU")
  out, src = run(Tensor(X, device="CPU") @ (tw.T if transposed else tw), r)
  np.testing.assert_allclose(out, X @ (w.T if transposed else w), rtol=1e-4, atol=1e-3)
  ahead = [int(d) for d in PREFETCH.findall(src)]
  assert ahead and all(d >= PREFETCH_MIN_RUN for d in ahead), ahead
  assert src.count("declare void @llvm.prefetch.p0(ptr nocapture readonly, i32 immarg, i32 immarg, i32 immarg)") == 1

def test_no_prefetch_without_cache_sizes():
  # where the host's caches aren't known (no sysfs) nothing is prefetched, and the matvec is the same
  out, src = run(Tensor(X, device="CPU") @ Tensor(W, device="CPU"), host_like(cache_sizes=()))
  np.testing.assert_allclose(out, X @ W, rtol=1e-4, atol=1e-3)
  assert "llvm.prefetch" not in src

@pytest.mark.parametrize("n", [256, 1024])
def test_matmul_not_prefetched(n: int):
  # a matmul reads each operand many times (A for every column panel, B for every row tile), and a big one copies B into
  # packed panels: none of its loads is a stream read once
  a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
  out, src = run(Tensor(a, device="CPU") @ Tensor(b, device="CPU"))
  np.testing.assert_allclose(out, a @ b, rtol=1e-3, atol=1e-2 * n ** 0.5)
  assert "llvm.prefetch" not in src

"""The memory planner: intermediates with disjoint lifetimes share memory; results (vs numpy) don't change."""
from __future__ import annotations
import numpy as np
import pytest

from tg_core import GlobalCounters, Tensor, TinyJit
from tg_core.engine.realize import buffer_of, run_schedule
from tg_core.helpers import Context
from tg_core.schedule.memory import ALIGN, assign_offsets, lifetimes

rng = np.random.default_rng(5)
def rnd(*s: int) -> np.ndarray: return rng.standard_normal(s).astype(np.float32)

LAYERS, WIDTH, BATCH = 20, 64, 32
WS = [rnd(WIDTH, WIDTH) * 0.2 for _ in range(LAYERS)]

def mlp(x: Tensor, ws: list[Tensor]) -> Tensor:
  for w in ws: x = (x @ w).relu().contiguous()
  return x

def mlp_ref(x: np.ndarray) -> np.ndarray:
  for w in WS: x = np.maximum(x @ w, 0)
  return x

def _peak_and_intermediates(planner: bool) -> tuple[int, int, np.ndarray]:
  x = rnd(BATCH, WIDTH)
  ws = [Tensor(w).realize() for w in WS]
  xt = Tensor(x).realize()
  out = mlp(xt, ws)
  items, var_vals, first_new = out._schedule()
  inter = {b for si in items for b in si.bufs if b.arg.slot >= first_new and b is not out.uop.base}
  with Context(NO_MEMORY_PLANNER=int(not planner)):
    GlobalCounters.reset()
    base = GlobalCounters.mem_used
    run_schedule(items, var_vals, inter)
    peak = GlobalCounters.mem_peak - base
  np.testing.assert_allclose(out.numpy(), mlp_ref(x), rtol=1e-4, atol=1e-4)
  return peak, sum(b.arg.size * b.dtype.itemsize for b in inter), out.numpy()

def test_mlp_peak_memory_planned():
  peak, inter_bytes, _ = _peak_and_intermediates(True)
  assert inter_bytes >= (LAYERS - 1) * BATCH * WIDTH * 4
  assert peak <= 0.4 * inter_bytes, f"peak {peak} bytes, intermediates {inter_bytes} bytes"

def test_no_memory_planner_knob():
  peak, inter_bytes, _ = _peak_and_intermediates(False)
  assert peak >= inter_bytes  # every intermediate has memory of its own

def test_realize_plans_and_keeps_outputs():
  x = rnd(BATCH, WIDTH)
  ws = [Tensor(w).realize() for w in WS]
  a = mlp(Tensor(x), ws[:10])
  b = mlp(a, ws[10:])
  a2 = (a * 2).contiguous()
  GlobalCounters.reset()
  base = GlobalCounters.mem_used
  Tensor.realize(b, a2)
  assert GlobalCounters.mem_peak - base <= 0.4 * LAYERS * BATCH * WIDTH * 4
  # the outputs are never shared: they hold their own memory, and keep it
  assert not buffer_of(b.uop.base).is_view and not buffer_of(a2.uop.base).is_view
  ref_a = x
  for w in WS[:10]: ref_a = np.maximum(ref_a @ w, 0)
  np.testing.assert_allclose(b.numpy(), mlp_ref(x), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(a2.numpy(), ref_a * 2, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(a.numpy(), ref_a, rtol=1e-4, atol=1e-4)  # a held by the user: recomputed, unaffected

def test_assign_target_not_shared():
  x = rnd(8, 16)
  t = Tensor.empty(8, 16)
  y = ((Tensor(x) + 1).contiguous() * 2).contiguous()
  t.assign((y + 1).contiguous() - 1).realize()
  z = ((Tensor(x) * 3).contiguous() + 1).contiguous().realize()
  np.testing.assert_allclose(t.numpy(), (x + 1) * 2, rtol=1e-6)
  np.testing.assert_allclose(z.numpy(), x * 3 + 1, rtol=1e-6)

@pytest.mark.parametrize("planner", [True, False])
def test_jit_replay_with_planned_buffers(planner: bool):
  with Context(NO_MEMORY_PLANNER=int(not planner)):
    ws = [Tensor(w).realize() for w in WS]
    @TinyJit
    def step(x: Tensor) -> Tensor:
      h = x
      for i in range(0, LAYERS, 5): h = mlp(h, ws[i:i + 5]).realize()  # several realizes in one step
      return (h * 1).contiguous()
    for _ in range(4):
      x = rnd(BATCH, WIDTH)
      np.testing.assert_allclose(step(Tensor(x)).numpy(), mlp_ref(x), rtol=1e-4, atol=1e-4)
    assert step.captured is not None
    bufs = {id(b) for _, bs, _ in step.captured for b in bs}
    bases = {id(b.base) for _, bs, _ in step.captured for b in bs}
    assert (len(bases) < len(bufs)) == planner

def test_assign_offsets_disjoint_and_aligned():
  r = np.random.default_rng(1)
  for _ in range(20):
    n = int(r.integers(1, 40))
    lives = {}
    for i in range(n):
      s = int(r.integers(0, 30))
      lives[i] = (s, s + int(r.integers(0, 10)))
    nbytes = {i: int(r.integers(1, 5000)) for i in range(n)}
    offsets, size = assign_offsets(lives, nbytes)
    for i in range(n):
      assert offsets[i] % ALIGN == 0 and offsets[i] + nbytes[i] <= size
      for j in range(i):
        if lives[i][0] <= lives[j][1] and lives[j][0] <= lives[i][1]:  # alive at the same step: no overlap
          assert offsets[i] + nbytes[i] <= offsets[j] or offsets[j] + nbytes[j] <= offsets[i], (lives[i], lives[j])
    assert size <= sum(-(-max(b, 1) // ALIGN) * ALIGN for b in nbytes.values())

def test_lifetimes():
  assert lifetimes([["a", "b"], ["b", "c"], ["c"], ["a"]], {"a", "b", "c"}) == {"a": (0, 3), "b": (0, 1), "c": (1, 2)}

def test_jit_keeps_buffers_filled_from_the_host_during_the_capture():
  """A constant uploaded while the function is traced is read, never written, by the captured kernels: it holds data from
  outside the step, so the planner must not move it into shared memory (its contents would be lost and overwritten)."""
  rng = np.random.default_rng(3)
  consts = [rng.standard_normal(256).astype(np.float32) for _ in range(4)]
  @TinyJit
  def f(x: Tensor) -> Tensor:
    for c in consts: x = (x * Tensor(c) + 1).contiguous().realize()  # each Tensor(c): a host upload, then dead after the trace
    return x.sum()
  for i in range(4):
    x = rng.standard_normal(256).astype(np.float32)
    want = x.copy()
    for c in consts: want = want * c + 1
    np.testing.assert_allclose(f(Tensor(x)).numpy(), want.sum(dtype=np.float64), rtol=1e-4, err_msg=f"call {i}")

def test_jit_capture_frees_dead_intermediates():
  """While a step is captured, an intermediate whose tensor is gone (nothing later in the trace can name it) gives its memory
  back at once: the capture's peak is a few layers' buffers, not one per realize of the step. Once the capture is planned
  the allocator's cache of freed buffers is emptied (those buffers would otherwise stay mapped for as long as the process runs)."""
  from tg_core import Device
  ws = [Tensor(w).realize() for w in WS]
  @TinyJit
  def step(x: Tensor) -> Tensor:
    h = x
    for w in ws: h = (h @ w).relu().contiguous().realize()  # one realize per layer: each output dies at the next
    return (h * 1).contiguous()
  layer_bytes, out = BATCH * WIDTH * 4, None
  for i in range(4):
    x = rnd(BATCH, WIDTH)
    xt = Tensor(x).realize()
    out = None  # the last call's output, freed before this one
    GlobalCounters.reset()
    base = GlobalCounters.mem_used
    out = step(xt)
    if i == 1:  # the capture
      assert GlobalCounters.mem_peak - base <= 4 * layer_bytes, f"capture peak {GlobalCounters.mem_peak - base} bytes, a layer is {layer_bytes}"
      al = Device[xt.device].allocator
      assert al.cached_bytes == 0, f"{al.cached_bytes} bytes left in the allocator's cache after the capture"
    np.testing.assert_allclose(out.numpy(), mlp_ref(x), rtol=1e-4, atol=1e-4, err_msg=f"call {i}")

def test_host_read_of_a_view_during_a_capture():
  # reading a non-contiguous value to the host in a capture goes through a contiguous copy whose uop dies before the read
  # ends: the capture must not free that copy's memory under the reader (silero-vad's If reads its condition this way)
  seen: list[np.ndarray] = []
  @TinyJit
  def f(x: Tensor) -> Tensor:
    y = (x + 1).realize()
    seen.append(y.T.numpy())
    return (y * 2).realize()
  for i in range(3):
    x = np.arange(12, dtype=np.float32).reshape(4, 3) + i
    out = f(Tensor(x)).numpy()
    np.testing.assert_allclose(out, (x + 1) * 2)
  for i, v in enumerate(seen): np.testing.assert_allclose(v, (np.arange(12, dtype=np.float32).reshape(4, 3) + i + 1).T)

def test_bare_buffer_kept_across_a_capture():
  # code may hold a Buffer without its BUFFER uop (Tensor._buffer(), then the tensor dropped): the capture frees a first-written
  # buffer's memory only once nothing outside it holds the Buffer, so the held one keeps its memory and its contents
  kept: list = []
  @TinyJit
  def f(x: Tensor) -> Tensor:
    y = (x + 1).realize()
    kept.append(y._buffer())
    del y  # its uop dies: only the bare Buffer names the memory now
    z = (x * 3).realize()  # same size: it would get the freed memory
    return (z * 2).realize()
  xs = [np.arange(64, dtype=np.float32) + i for i in range(3)]
  for x in xs: np.testing.assert_allclose(f(Tensor(x)).numpy(), x * 6)
  for i, b in enumerate(kept): np.testing.assert_allclose(np.frombuffer(b.as_buffer(), dtype=np.float32), xs[i] + 1, err_msg=f"call {i}")

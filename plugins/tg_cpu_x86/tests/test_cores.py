"""The matmul heuristic plans the loop the cores share (the split loop, see tg_cpu_x86.renderer `_split_range`) for the declared
`caps.cores`, and the CPU renderer declares the runtime's thread count there."""
import ctypes
import dataclasses
import math

import numpy as np
import pytest

from tg_core import Tensor
from tg_core.codegen import full_rewrite_to_sink, get_program, program_key, simplified_kernel
from tg_core.codegen.linearize import linearize
from tg_core.codegen.opt.heuristic import hand_coded_optimizations
from tg_core.device import Device, RendererCaps
from tg_core.engine.realize import buffer_of
from tg_core.helpers import Context
from tg_core.schedule import create_schedule
from tg_core.uop.ops import UOp
from tg_cpu_x86.renderer import LLVMRenderer, _split_range

# two x86 hosts' records: AVX-512 (a 32 x 8 register tile, 1 MB L2) and AVX2 (16 x 6, 512 KB L2), each with a 32 MB L3
AVX512 = dataclasses.replace(LLVMRenderer.caps, vector_width=16, big_reduce_tile=(32, 8), cache_sizes=(32 << 10, 1 << 20, 32 << 20))
AVX2 = dataclasses.replace(LLVMRenderer.caps, vector_width=8, big_reduce_tile=(16, 6), cache_sizes=(32 << 10, 512 << 10, 32 << 20))
SHAPES = [(1000, 1000, 1000), (1024, 1024, 1024), (2048, 2048, 2048), (512, 512, 512), (64, 4096, 64), (4096, 64, 4096)]
# the slowest core's share of the split loop's iterations over the mean (each core runs trip/cores of them, rounded) at most
MAX_IMBALANCE = 1.25

def _matmul_ast(m: int, k: int, n: int) -> UOp:
  items, _ = create_schedule(UOp.sink((Tensor.empty(m, k, device="CPU") @ Tensor.empty(k, n, device="CPU")).uop))
  return simplified_kernel(items[-1].ast)

def split_trip(ast: UOp, caps: RendererCaps) -> tuple[int, list]:
  """(the split loop's trip count, the heuristic's opts) of a kernel planned for `caps`."""
  ren = LLVMRenderer()
  ren.caps = caps
  opts = hand_coded_optimizations(ast, caps)
  split = _split_range(linearize(full_rewrite_to_sink(ast, ren, opts)))
  assert split is not None and split.src[0].op.name == "CONST", opts
  return int(split.src[0].arg), opts

@pytest.mark.parametrize("cores", [8, 16])
@pytest.mark.parametrize("caps", [AVX512, AVX2], ids=["avx512", "avx2"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_split_loop_gives_every_core_work(shape: tuple[int, int, int], caps: RendererCaps, cores: int):
  trip, opts = split_trip(_matmul_ast(*shape), dataclasses.replace(caps, cores=cores))
  assert trip >= cores, (trip, opts)
  assert math.ceil(trip / cores) * cores / trip <= MAX_IMBALANCE, (trip, opts)

@pytest.mark.parametrize("caps", [AVX512, AVX2], ids=["avx512", "avx2"])
def test_one_and_two_cores_keep_the_cache_plan(caps: RendererCaps):
  # a shared loop the cache blocking already balances for 2 cores is planned as for 1
  for shape in SHAPES:
    ast = _matmul_ast(*shape)
    assert hand_coded_optimizations(ast, dataclasses.replace(caps, cores=2)) == hand_coded_optimizations(ast, caps), shape

def _run_chunks(t: Tensor, opts: list, ncores: int) -> np.ndarray:
  """Run the kernel of `t` with `opts` as `ncores` chunks, one after another on this thread (each chunk is what one core runs)."""
  items, _ = create_schedule(UOp.sink(t.uop))
  si = items[-1]
  dev = Device["CPU"]
  p = get_program(si.ast, dev.renderer, opts)
  prg = dev.runtime("CPU", p.name, dev.compiler.compile(p.src))
  bufs = [buffer_of(b) for b in si.bufs]
  addrs = (ctypes.c_void_p * len(bufs))(*[b._buf.addr for b in bufs])
  vals = (ctypes.c_int32 * 1)()
  for core in range(ncores): prg.fxn(addrs, vals, core, ncores)
  return np.frombuffer(bytes(bufs[0].as_buffer()), dtype=np.float32).reshape(t.shape)

@pytest.mark.parametrize("cores", [8, 16])
@pytest.mark.parametrize("caps", [AVX512, AVX2], ids=["avx512", "avx2"])
@pytest.mark.parametrize("shape", [(1000, 1000, 1000), (1024, 1024, 1024), (512, 512, 512), (64, 4096, 64), (4096, 64, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
def test_many_core_plans_match_numpy(shape: tuple[int, int, int], caps: RendererCaps, cores: int):
  # the plans for 8 and 16 cores (smaller blocks, the rows split outermost and padded, a smaller register tile), run as their chunks
  m, k, n = shape
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
  opts = hand_coded_optimizations(_matmul_ast(m, k, n), dataclasses.replace(caps, cores=cores))
  out = _run_chunks(Tensor(a, device="CPU") @ Tensor(b, device="CPU"), opts, cores)
  np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-3, atol=1e-3)

def test_num_cpu_threads_sets_the_declared_cores_and_the_results_stay_right():
  ren = Device["CPU"].renderer
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((1000, 1000), dtype=np.float32), rng.standard_normal((1000, 1000), dtype=np.float32)
  keys = set()
  for n in (8, 1):
    with Context(NUM_CPU_THREADS=n):
      assert ren.caps.cores == n
      keys.add(program_key(ren))
      # (the first runs are timed on one thread, later ones split across the pool: oversubscribed on a small host, still correct)
      for _ in range(4): np.testing.assert_allclose((Tensor(a, device="CPU") @ Tensor(b, device="CPU")).numpy(), a.astype(np.float64) @ b, rtol=1e-3, atol=1e-3)
  assert len(keys) == 2  # programs planned for 8 threads aren't reused for 1
  # assigning a record keeps the thread count's cores
  old = ren.caps
  try:
    ren.caps = dataclasses.replace(old, cores=3)
    with Context(NUM_CPU_THREADS=5): assert ren.caps.cores == 5
  finally: ren.caps = old

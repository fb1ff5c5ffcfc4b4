"""Kernel optimizations (UPCAST / UNROLL and their expansion) never change results: every candidate BEAM would time
and the hand-written heuristic, run on the device the tensors live on (the default device), match numpy."""
from __future__ import annotations
from typing import Callable

import dataclasses
import numpy as np
import pytest

from tg_core.codegen import get_program
from tg_core.codegen.opt import KernelOptError, Opt, OptOps, apply_opt, hand_coded_optimizations
from tg_core.codegen.opt.search import beam_candidates
from tg_core.device import Device
from tg_core.dtype import _to_np_storage, dtypes
from tg_core.engine.realize import buffer_of
from tg_core.schedule import create_schedule
from tg_core.tensor import Tensor
from tg_core.uop.ops import UOp

rng = np.random.default_rng(1)
def rnd(*s: int) -> np.ndarray: return rng.standard_normal(s).astype(np.float32)

def run_with_opts(t: Tensor, opts: list[Opt]) -> np.ndarray:
  items, _ = create_schedule(UOp.sink(t.uop))
  assert len(items) == 1
  si = items[0]
  device = si.bufs[0].arg.device
  dev = Device[device]
  p = get_program(si.ast, dev.renderer, opts)
  prg = dev.runtime(device, p.name, dev.compiler.compile(p.src))
  bufs = [buffer_of(b) for b in si.bufs]
  prg(*[b._buf for b in bufs])
  return np.frombuffer(bytes(bufs[0].as_buffer()), dtype=_to_np_storage(t.dtype)).reshape(t.shape)

CASES: dict[str, tuple[Callable[[], Tensor], Callable[[], np.ndarray]]] = {}
def case(name: str, *arrays: np.ndarray) -> Callable:
  def deco(f: Callable) -> Callable:
    CASES[name] = (lambda: f(*[Tensor(a) for a in arrays]), lambda: f(*arrays))
    return f
  return deco

A, B = rnd(8, 12), rnd(12, 6)
case("matmul", A, B)(lambda a, b: a @ b)
C = rnd(6, 10)
case("sum_rows", C)(lambda c: c.sum(1))
case("max_cols", C)(lambda c: c.max(0))
D, E = rnd(4, 8), rnd(4, 8)
case("elementwise", D, E)(lambda d, e: d * e + d)
F = rnd(2, 6, 4)
case("reduce_two_axes", F)(lambda f: f.sum((0, 2)) if isinstance(f, np.ndarray) else f.sum((0, 2)))

@pytest.mark.parametrize("name", list(CASES))
def test_all_beam_candidates_match_numpy(name: str):
  make_tg, make_np = CASES[name]
  ref = make_np()
  t = make_tg()
  items, _ = create_schedule(UOp.sink(t.uop))
  cands = beam_candidates(items[0].ast)
  assert len(cands) > 1
  for opts in cands:
    np.testing.assert_allclose(run_with_opts(make_tg(), opts), ref, rtol=1e-5, atol=1e-5, err_msg=str(opts))

@pytest.mark.parametrize("name", list(CASES))
def test_hand_coded_matches_numpy(name: str):
  make_tg, make_np = CASES[name]
  t = make_tg()
  items, _ = create_schedule(UOp.sink(t.uop))
  opts = hand_coded_optimizations(items[0].ast)
  np.testing.assert_allclose(run_with_opts(make_tg(), opts), make_np(), rtol=1e-5, atol=1e-5, err_msg=str(opts))

def test_matmul_heuristic_tiles_both_axes_and_unrolls():
  a = np.ones((128, 128), np.float32)  # 2^21 multiply-adds: a mid-size kernel
  items, _ = create_schedule(UOp.sink((Tensor(a) @ Tensor(a)).uop))
  ops = [o.op for o in hand_coded_optimizations(items[0].ast)]
  assert ops.count(OptOps.UPCAST) == 2 and ops.count(OptOps.UNROLL) == 1

def test_tiny_matmul_heuristic_skips_unroll():
  # below 2^19 multiply-adds compile time dominates: smaller tiles and no unroll
  items, _ = create_schedule(UOp.sink((Tensor(A) @ Tensor(B)).uop))
  opts = hand_coded_optimizations(items[0].ast)
  assert [o.op for o in opts].count(OptOps.UPCAST) >= 1 and all(o.op is not OptOps.UNROLL for o in opts)
  np.testing.assert_allclose(run_with_opts(Tensor(A) @ Tensor(B), opts), A @ B, rtol=1e-5, atol=1e-5)

def test_wide_column_reduce_takes_the_big_tile_on_its_one_axis():
  # a matvec x @ W (W is K x N): each reduce step reads a run of a weight row from the register tile, at most ROW_RUN bytes
  # (one cache line, 16 floats): AVX2's 16 x 8 tile and AVX-512's 32 x 8 both round down to 16
  from tg_core.renderer import RendererCaps
  from tg_core.codegen.opt.heuristic import ROW_RUN
  assert ROW_RUN == 64
  x, w = rnd(1, 2048), rnd(2048, 2048)  # 2^22 multiply-adds: a big kernel
  items, _ = create_schedule(UOp.sink((Tensor(x) @ Tensor(w)).uop))
  for width, tile, want in ((8, (16, 8), [Opt(OptOps.UPCAST, 0, 16)]), (16, (32, 8), [Opt(OptOps.UPCAST, 0, 16)])):
    opts = hand_coded_optimizations(items[0].ast, RendererCaps(vector_upcast=True, vector_width=width, big_reduce_tile=tile))
    assert opts == want, opts
    np.testing.assert_allclose(run_with_opts(Tensor(x) @ Tensor(w), opts), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)
  # the same shape without big_reduce_tile keeps the two-vector tile and the unroll
  assert [o.op for o in hand_coded_optimizations(items[0].ast, RendererCaps(vector_upcast=True, vector_width=8))] == [OptOps.UPCAST, OptOps.UNROLL]

SWAP_CASES = [[Opt(OptOps.SWAP, 0, 1)], [Opt(OptOps.UPCAST, 1, 3), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.SWAP, 0, 1)],
              [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.SWAP, 1, 0), Opt(OptOps.UNROLL, 3, 4)],
              [Opt(OptOps.SPLIT, 0, 2), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.SWAP, 1, 2)]]
@pytest.mark.parametrize("opts", SWAP_CASES, ids=str)
@pytest.mark.parametrize("device", [None, "PYTHON"])
def test_swap_changes_the_loop_order_not_the_values(opts: list[Opt], device: str | None):
  np.testing.assert_allclose(run_with_opts(Tensor(A, device=device) @ Tensor(B, device=device), opts), A @ B, rtol=1e-5, atol=1e-5)
  from tg_core.codegen.linearize import linearize
  from tg_core.codegen import full_rewrite_to_sink
  items, _ = create_schedule(UOp.sink((Tensor(A, device="PYTHON") @ Tensor(B, device="PYTHON")).uop))
  from tg_core.renderer import Renderer, RendererCaps
  class Loops(Renderer): caps = RendererCaps(has_grid=False, has_local=False, local_max=(1,))  # output axes stay loops
  def loop_order(o: list[Opt]) -> list[int]:  # the axis ids of the loops in the order the program opens them
    return [u.arg[0] for u in linearize(full_rewrite_to_sink(items[0].ast, Loops(), o)) if u.op.name == "RANGE"]
  unswapped = loop_order([o for o in opts if o.op is not OptOps.SWAP])
  assert loop_order(opts) != unswapped and sorted(loop_order(opts)) == sorted(unswapped)

@pytest.mark.parametrize("device", [None, "PYTHON"])
def test_cache_block_of_the_streamed_operand_matches_numpy(device: str | None):
  # the register tile, then A's rows in blocks of 4 tiles: block > B's column panels > the tiles of a block
  x, w = rnd(64, 256), rnd(256, 64)
  opts = [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.SPLIT, 0, 4), Opt(OptOps.SWAP, 1, 0)]
  np.testing.assert_allclose(run_with_opts(Tensor(x, device=device) @ Tensor(w, device=device), opts), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("opt", [Opt(OptOps.SPLIT, 0, 8), Opt(OptOps.SPLIT, 0, 3), Opt(OptOps.SPLIT, 2, 2)])
def test_bad_splits_raise(opt: Opt):
  items, _ = create_schedule(UOp.sink((Tensor(A) @ Tensor(B)).uop))  # axes 8, 6 and the reduce, 12
  with pytest.raises(KernelOptError): apply_opt(items[0].ast, opt)

@pytest.mark.parametrize("opt", [Opt(OptOps.SWAP, 0, 0), Opt(OptOps.SWAP, 0, 2), Opt(OptOps.SWAP, 0, None), Opt(OptOps.SWAP, 0, 7)])
def test_bad_swaps_raise(opt: Opt):
  items, _ = create_schedule(UOp.sink((Tensor(A) @ Tensor(B)).uop))
  with pytest.raises(KernelOptError, match="SWAP"): apply_opt(items[0].ast, opt)

def test_matmul_loop_order_follows_the_declared_l2():
  # B (strided along the reduce) stays in cache while A streams, once B outgrows the L2 and is at least as big as the output
  from tg_core.renderer import RendererCaps
  cpu = {"vector_upcast": True, "vector_width": 8, "big_reduce_tile": (16, 8)}
  def opts(m: int, k: int, n: int, **caps: object) -> list[Opt]:
    items, _ = create_schedule(UOp.sink((Tensor.empty(m, k, device="NULL") @ Tensor.empty(k, n, device="NULL")).uop))
    return hand_coded_optimizations(items[0].ast, RendererCaps(**{**cpu, **caps}))  # type: ignore[arg-type]
  assert OptOps.SWAP in [o.op for o in opts(1024, 1024, 1024, cache_sizes=(32768, 524288))]
  assert OptOps.SWAP in [o.op for o in opts(64, 4096, 64, cache_sizes=(32768, 524288))]
  # the output dominates: the rows stay outside the columns, only a block loop of the columns goes outside them
  assert [o.op for o in opts(4096, 64, 4096, cache_sizes=(32768, 524288))][-2:] == [OptOps.SPLIT, OptOps.SWAP]
  assert all(o.op is not OptOps.SWAP for o in opts(1024, 1024, 1024, cache_sizes=(32768, 8 << 20)))  # B fits the L2
  assert all(o.op is not OptOps.SWAP for o in opts(1024, 1024, 1024))  # caches unknown

def test_wide_output_matmul_blocks_the_strided_operand_to_the_declared_l2():
  # 256x64x256: B (64 KB) outgrows a 32 KB L2 while the output (256 KB) keeps the rows outside: the columns split into the
  # fewest blocks whose slice of B fits half the L2 (4 blocks of 4 tiles), the block loop outside the rows
  from tg_core.renderer import RendererCaps
  caps = RendererCaps(vector_upcast=True, vector_width=8, big_reduce_tile=(16, 6), cache_sizes=(32 << 10, 32 << 10))
  x, w = rnd(256, 64), rnd(64, 256)
  items, _ = create_schedule(UOp.sink((Tensor(x) @ Tensor(w)).uop))
  opts = hand_coded_optimizations(items[0].ast, caps)
  assert opts[-2:] == [Opt(OptOps.SPLIT, 1, 4), Opt(OptOps.SWAP, 0, 1)], opts
  np.testing.assert_allclose(run_with_opts(Tensor(x) @ Tensor(w), opts), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)
  # B fits the L2, or no L2 is declared: no blocks
  for cache_sizes in ((32 << 10, 512 << 10), (32 << 10,)):
    assert OptOps.SPLIT not in [o.op for o in hand_coded_optimizations(items[0].ast, dataclasses.replace(caps, cache_sizes=cache_sizes))]

@pytest.mark.parametrize("opt", [Opt(OptOps.UPCAST, 0, 5), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.UPCAST, 9, 2), Opt(OptOps.UPCAST, 2, 2)])
def test_bad_opts_raise(opt: Opt):
  items, _ = create_schedule(UOp.sink((Tensor(A) @ Tensor(B)).uop))
  with pytest.raises(KernelOptError): apply_opt(items[0].ast, opt)

LOCAL_CASES = [[Opt(OptOps.LOCAL, 0, 4)], [Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.UPCAST, 0, 2)], [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UNROLL, 3, 4)]]
@pytest.mark.parametrize("opts", LOCAL_CASES,
                         ids=str)
def test_local_opts_match_numpy(opts: list[Opt]):
  # LOCAL splits an output axis into a workgroup dimension (lidx); results don't change. On PYTHON, which declares
  # workgroups (caps.has_local); a renderer without them refuses LOCAL (tests/test_renderer_contract.py)
  np.testing.assert_allclose(run_with_opts(Tensor(A, device="PYTHON") @ Tensor(B, device="PYTHON"), opts), A @ B, rtol=1e-5, atol=1e-5)
  items, _ = create_schedule(UOp.sink((Tensor(A, device="PYTHON") @ Tensor(B, device="PYTHON")).uop))
  p = get_program(items[0].ast, Device["PYTHON"].renderer, opts)
  assert p.local_size is not None and p.local_size[0] == opts[0].arg

def test_conv_heuristic_tiles_cout_and_width():
  # an (h, w) tile would load a block of input per weight; (cout, w) loads a row of input and a column of weights
  x, w = np.ones((2, 8, 16, 16), np.float32), np.ones((16, 8, 3, 3), np.float32)
  items, _ = create_schedule(UOp.sink(Tensor(x).conv2d(Tensor(w), padding=1).uop))
  from tg_core.uop.symbolic import symbolic
  from tg_core.uop.rewrite import graph_rewrite
  opts = hand_coded_optimizations(graph_rewrite(items[-1].ast, symbolic))  # as choose_opts sees it: index math simplified
  assert {o.axis for o in opts if o.op is OptOps.UPCAST} == {1, 3}

def test_beam_search_times_candidates_and_caches(monkeypatch, tmp_path):
  # BEAM times real candidates on the device, picks one that is among them, and a second search of the kernel is a cache hit
  from tg_core.codegen.opt import search
  monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
  items, _ = create_schedule(UOp.sink((Tensor(A) @ Tensor(B)).uop))
  ast, device = items[0].ast, items[0].bufs[0].arg.device
  timed: list = []
  real = search._time_program
  monkeypatch.setattr(search, "_time_program", lambda *a, **k: timed.append(a[2]) or real(*a, **k))
  picked = search.beam_search(ast, device, 1)
  assert timed and picked in timed
  n = len(timed)
  assert search.beam_search(ast, device, 1) == picked and len(timed) == n
  np.testing.assert_allclose(run_with_opts(Tensor(A) @ Tensor(B), picked), A @ B, rtol=1e-5, atol=1e-5)

# K blocking and padded tails: the opts of a big matmul's cache blocking, on shapes no tile divides
KB_CASES = [[Opt(OptOps.KBLOCK, 2, 24)],
            [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.PADTO, 0, 6), Opt(OptOps.UPCAST, 0, 6), Opt(OptOps.KBLOCK, 4, 32)],
            [Opt(OptOps.PADTO, 1, 16), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.PADTO, 0, 6), Opt(OptOps.UPCAST, 0, 6), Opt(OptOps.SWAP, 0, 1),
             Opt(OptOps.KBLOCK, 4, 48)]]
@pytest.mark.parametrize("opts", KB_CASES, ids=str)
@pytest.mark.parametrize("device", [None, "PYTHON"])
def test_kblock_and_padto_match_numpy(opts: list[Opt], device: str | None):
  x, w = rnd(50, 96), rnd(96, 36)  # 50 rows, 36 columns: tiles of 6 and 16 leave tails
  np.testing.assert_allclose(run_with_opts(Tensor(x, device=device) @ Tensor(w, device=device), opts), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)

def test_kblock_puts_its_loop_inside_the_outermost_output_loop():
  from tg_core.codegen.linearize import linearize
  from tg_core.codegen import full_rewrite_to_sink
  from tg_core.renderer import Renderer, RendererCaps
  from tg_core.uop.ops import AxisType
  class Loops(Renderer): caps = RendererCaps(has_grid=False, has_local=False, local_max=(1,))
  items, _ = create_schedule(UOp.sink((Tensor(A, device="PYTHON") @ Tensor(B, device="PYTHON")).uop))
  kinds = [u.arg[1] for u in linearize(full_rewrite_to_sink(items[0].ast, Loops(), [Opt(OptOps.KBLOCK, 2, 4)])) if u.op.name == "RANGE"]
  assert kinds == [AxisType.LOOP, AxisType.KBLOCK, AxisType.LOOP, AxisType.REDUCE]

@pytest.mark.parametrize("opt, make", [(Opt(OptOps.KBLOCK, 0, 2), lambda a, b: a @ b),  # not a reduce axis
                                       (Opt(OptOps.KBLOCK, 2, 5), lambda a, b: a @ b),  # 5 doesn't divide 12
                                       (Opt(OptOps.KBLOCK, 2, 12), lambda a, b: a @ b),  # one block: nothing to block
                                       (Opt(OptOps.KBLOCK, 2, 4), lambda a, b: (a @ b) * 2 + 1),  # the sum isn't stored as it is
                                       (Opt(OptOps.KBLOCK, 2, 4), lambda a, b: (a.reshape(8, 12, 1) * b.reshape(1, 12, 6)).max(1)),  # not a sum
                                       (Opt(OptOps.PADTO, 0, 4), lambda a, b: a @ b),  # 4 divides 8: no tail
                                       (Opt(OptOps.PADTO, 2, 5), lambda a, b: a @ b)])  # a reduce axis
def test_bad_kblock_and_padto_raise(opt: Opt, make: Callable):
  items, _ = create_schedule(UOp.sink(make(Tensor(A), Tensor(B)).uop))
  with pytest.raises(KernelOptError, match=opt.op.name): apply_opt(items[-1].ast, opt)

def test_big_matmul_heuristic_pads_tails_and_blocks_k_from_the_declared_l1():
  from tg_core.renderer import RendererCaps
  from tg_core.uop.symbolic import symbolic
  from tg_core.uop.rewrite import graph_rewrite
  def opts(m: int, k: int, n: int, l1: int, l3: int | None = None, l2: int = 512 << 10) -> list[Opt]:
    items, _ = create_schedule(UOp.sink((Tensor.empty(m, k, device="NULL") @ Tensor.empty(k, n, device="NULL")).uop))
    caps = RendererCaps(vector_upcast=True, vector_width=8, big_reduce_tile=(16, 6), cache_sizes=(l1, l2, *((l3,) if l3 else ())))
    return hand_coded_optimizations(graph_rewrite(items[0].ast, symbolic), caps)
  o = opts(1024, 1024, 1024, 32 << 10)
  # 1024 rows in tiles of 6: padded to 1026; K blocked so a row tile's 6 x 512 floats of A fill half the L1, in blocks of
  # 16 column panels (16 x 512 x 16 floats of B: the 512 KB L2), both operands packed
  tiles = [Opt(OptOps.SWAP, 0, 1), Opt(OptOps.SPLIT, 1, 16), Opt(OptOps.SWAP, 0, 2), Opt(OptOps.KBLOCK, 5, 512), Opt(OptOps.PACK, 5, 2),
           Opt(OptOps.PACKROWS, 6)]
  assert Opt(OptOps.PADTO, 0, 6) in o and o[-6:] == tiles, o
  # a 48 KB L1 holds the tile's whole K (6 x 1024 floats): no K blocks, and blocks of 8 panels of 1024 rows fill the L2
  assert opts(1024, 1024, 1024, 48 << 10)[-5:] == [Opt(OptOps.SWAP, 0, 1), Opt(OptOps.SPLIT, 1, 8), Opt(OptOps.SWAP, 0, 2), Opt(OptOps.PACK, 5, 2),
                                                   Opt(OptOps.PACKROWS, 6)]
  # 63 panels (1008 padded columns), 8 of 1000 rows fill the L2: 8 blocks of 8 panels, the last with one masked panel (no
  # divisor of 63 near 8: blocks of 7 before, 9 of them)
  o48 = opts(1000, 1000, 1000, 48 << 10)
  assert o48[o48.index(Opt(OptOps.SWAP, 0, 1)) + 1:][:2] == [Opt(OptOps.PADTO, 1, 8), Opt(OptOps.SPLIT, 1, 8)], o48
  assert Opt(OptOps.KBLOCK, 5, 500) in opts(1000, 1000, 1000, 32 << 10)
  assert opts(512, 512, 512, 32 << 10)[-4:] == [Opt(OptOps.SPLIT, 1, 16), Opt(OptOps.SWAP, 0, 2), Opt(OptOps.PACK, 5, 2), Opt(OptOps.PACKROWS, 6)]
  for shape in ((2048, 2048, 2048), (4096, 4096, 4096), (2048, 8192, 2048)): assert opts(*shape, 32 << 10, 32 << 20)[-6:] == tiles
  # a 2 MB L2 holds 64 panels of 512 rows, but a packed block lives on the stack: at most MAX_PACKED_BLOCK (1 MB, 32 panels)
  assert Opt(OptOps.SPLIT, 1, 32) in opts(4096, 4096, 4096, 32 << 10, 32 << 20, 2 << 20)
  # 6 column panels (96 columns) can't reuse a packed row tile MIN_TILE_REUSE times: B alone packed, K blocked so 256 rows of
  # B's 16 columns (64 bytes) fill half the L1; A's K-block slab (1 MB) fits twice the L2, so one panel a block
  assert opts(1024, 8192, 96, 32 << 10)[-3:] == [Opt(OptOps.SWAP, 0, 1), Opt(OptOps.KBLOCK, 4, 256), Opt(OptOps.PACK, 4)]
  assert all(x.op is not OptOps.KBLOCK for x in opts(4096, 64, 4096, 32 << 10))  # the reduce fits the L1 already
  # 64 rows (11 row tiles) reuse a packed panel too little: the unpacked K-blocked loop
  o64 = opts(64, 4096, 64, 32 << 10)
  assert all(x.op not in (OptOps.PACK, OptOps.PACKROWS) for x in o64) and o64[-1] == Opt(OptOps.KBLOCK, 4, 256), o64
  assert Opt(OptOps.PADTO, 1, 16) in opts(1000, 1000, 1000, 32 << 10)  # 1000 columns: one masked vector tile at the end

def test_few_tile_rows_pack_a_strided_operand_that_fits_the_l2():
  # B (1 MB) fits a 1 MB L2, but AVX2's 6-row tile reuses each of its strided vectors too few times (MIN_STRIDED_REUSE) to
  # re-read it from the L2 for every row tile: its loop goes outside and it is packed; AVX-512's 8-row tile keeps the order
  from tg_core.codegen.opt.heuristic import MIN_STRIDED_REUSE
  from tg_core.renderer import RendererCaps
  from tg_core.uop.symbolic import symbolic
  from tg_core.uop.rewrite import graph_rewrite
  def opts(m: int, k: int, n: int, width: int, tile: tuple[int, int]) -> list[Opt]:
    items, _ = create_schedule(UOp.sink((Tensor.empty(m, k, device="NULL") @ Tensor.empty(k, n, device="NULL")).uop))
    caps = RendererCaps(vector_upcast=True, vector_width=width, big_reduce_tile=tile, cache_sizes=(32 << 10, 1 << 20, 32 << 20))
    return hand_coded_optimizations(graph_rewrite(items[0].ast, symbolic), caps)
  assert 6 < MIN_STRIDED_REUSE <= 8
  o = opts(512, 512, 512, 8, (16, 6))
  assert o[:4] == [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.PADTO, 0, 6), Opt(OptOps.UPCAST, 0, 6), Opt(OptOps.SWAP, 0, 1)], o
  assert [x.op for x in o[-2:]] == [OptOps.PACK, OptOps.PACKROWS], o
  assert opts(512, 512, 512, 16, (32, 8)) == [Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.KBLOCK, 4, 128)]
  # 64 rows: too few row tiles to pack (MIN_PANEL_REUSE), B's loop outside and K blocked
  assert opts(64, 4096, 64, 8, (16, 6))[-2:] == [Opt(OptOps.SWAP, 0, 1), Opt(OptOps.KBLOCK, 4, 256)]
  # the output dominates (4096x64x4096): its order stays whatever the tile
  assert all(x.op is not OptOps.SWAP for x in opts(4096, 64, 4096, 8, (16, 6)))

# PACK: B's slice copied into a kernel-local panel (with the column panels of a block, and masked tails), same values
PACK_CASES = [[Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.PADTO, 0, 6), Opt(OptOps.UPCAST, 0, 6), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.KBLOCK, 4, 32),
               Opt(OptOps.PACK, 4)],
              [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.PADTO, 0, 6), Opt(OptOps.UPCAST, 0, 6), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.SPLIT, 1, 3),
               Opt(OptOps.SWAP, 0, 2), Opt(OptOps.KBLOCK, 5, 24), Opt(OptOps.PACK, 5, 2)],
              [Opt(OptOps.PADTO, 1, 16), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.PADTO, 0, 6), Opt(OptOps.UPCAST, 0, 6), Opt(OptOps.SWAP, 0, 1),
               Opt(OptOps.PACK, 4)],
              [Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.PACK, 3)]]  # packed inside the row loop: re-copied per row, still right
# PACKROWS: A's row tile copied into contiguous rows (per row tile, per block of row tiles; K = 96 copies 16-lane
# vectors, a K block of 24 8-lane ones, of 3 scalars), with B packed too or not, with a padded (clamped) row tail
PACK_CASES += [[Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.PADTO, 0, 6), Opt(OptOps.UPCAST, 0, 6), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.SPLIT, 1, 3),
                Opt(OptOps.SWAP, 0, 2), Opt(OptOps.KBLOCK, 5, 24), Opt(OptOps.PACK, 5, 2), Opt(OptOps.PACKROWS, 6)],
               [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.PADTO, 0, 6), Opt(OptOps.UPCAST, 0, 6), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.SPLIT, 1, 3),
                Opt(OptOps.SWAP, 0, 2), Opt(OptOps.PACKROWS, 5)],
               [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 5), Opt(OptOps.SPLIT, 0, 2), Opt(OptOps.PACKROWS, 5, 2)],
               [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.PADTO, 0, 6), Opt(OptOps.UPCAST, 0, 6), Opt(OptOps.KBLOCK, 4, 3), Opt(OptOps.PACKROWS, 4)]]
@pytest.mark.parametrize("opts", PACK_CASES, ids=str)
def test_pack_matches_numpy(opts: list[Opt]):
  # on CPU whatever DEV is: PACK needs a target that runs loops (test_pack_needs_a_loop_target)
  x, w = rnd(50, 96), rnd(96, 36)
  np.testing.assert_allclose(run_with_opts(Tensor(x, device="CPU") @ Tensor(w, device="CPU"), opts), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)

def test_packed_matmul_heuristic_matches_numpy():
  # the heuristic's whole blocking (tiles, column-panel blocks, K blocks, PACK, PACKROWS) for declared Zen 3 caches
  from tg_core.renderer import RendererCaps
  # small declared caches so a small matmul gets every opt: K blocks of 160 (6 x 160 floats of A in half an 8 KB L1), blocks
  # of 6 column panels (6 x 160 x 16 floats of B in the 64 KB L2)
  caps = RendererCaps(vector_upcast=True, vector_width=8, big_reduce_tile=(16, 6), cache_sizes=(8 << 10, 64 << 10))
  from tg_core.uop.symbolic import symbolic
  from tg_core.uop.rewrite import graph_rewrite
  x, w = rnd(600, 640), rnd(640, 384)
  items, _ = create_schedule(UOp.sink((Tensor(x, device="CPU") @ Tensor(w, device="CPU")).uop))
  opts = hand_coded_optimizations(graph_rewrite(items[0].ast, symbolic), caps)
  assert opts[-5:] == [Opt(OptOps.SPLIT, 1, 6), Opt(OptOps.SWAP, 0, 2), Opt(OptOps.KBLOCK, 5, 160), Opt(OptOps.PACK, 5, 2), Opt(OptOps.PACKROWS, 6)], opts
  np.testing.assert_allclose(run_with_opts(Tensor(x, device="CPU") @ Tensor(w, device="CPU"), opts), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)

def test_packed_matmul_with_a_cast_store_takes_all_of_k_in_one_block():
  # a matmul whose sum the store casts (to float16) can't add K blocks up in its output: the packed plan without KBLOCK
  # (it used to fall back to the unpacked loop, 1.6x slower at 2048^3 on one Zen 4 core)
  from tg_core.renderer import RendererCaps
  from tg_core.uop.symbolic import symbolic
  from tg_core.uop.rewrite import graph_rewrite
  # (declared caches: uncast, K blocks of 160 for 6 rows of A in half the L1; cast, all of K, packed panels in the L2)
  caps = RendererCaps(vector_upcast=True, vector_width=8, big_reduce_tile=(16, 6), cache_sizes=(8 << 10, 256 << 10))
  x, w = rnd(600, 640), rnd(640, 384)
  mm = lambda: (Tensor(x, device="CPU") @ Tensor(w, device="CPU")).cast(dtypes.float16)  # noqa: E731
  items, _ = create_schedule(UOp.sink((Tensor(x, device="CPU") @ Tensor(w, device="CPU")).uop))
  assert Opt(OptOps.KBLOCK, 5, 160) in hand_coded_optimizations(graph_rewrite(items[0].ast, symbolic), caps)
  items, _ = create_schedule(UOp.sink(mm().uop))
  opts = hand_coded_optimizations(graph_rewrite(items[0].ast, symbolic), caps)
  # (no PACKROWS either: over all of K, the tile's rows of A already lie back to back as its copy would lay them)
  assert OptOps.PACK in [o.op for o in opts] and not {OptOps.PACKROWS, OptOps.KBLOCK} & {o.op for o in opts}, opts
  got = run_with_opts(mm(), opts).astype(np.float32)
  np.testing.assert_allclose(got, (x.astype(np.float64) @ w).astype(np.float16).astype(np.float32), rtol=2e-3, atol=2e-3)

def test_panel_block_pads_to_blocks_near_the_target():
  from tg_core.codegen.opt.heuristic import _panel_block
  assert _panel_block(64, 16) == (16, 64) and _panel_block(48, 16) == (16, 48)  # a divisor at the target: no padding
  assert _panel_block(63, 16) == (16, 64)  # 2000 columns in tiles of 32: 4 blocks of 16, one masked panel (not 7 blocks of 9)
  assert _panel_block(40, 16) == (10, 40)  # 3 blocks of 14 would mask 2 panels: 4 blocks of 10
  assert _panel_block(31, 15) == (8, 32) and _panel_block(125, 16) == (16, 128)  # a prime count; 4000 columns
  assert _panel_block(7, 3) == (2, 8) and _panel_block(5, 1) == (1, 5)  # 3 blocks of 3 would mask 2 panels

def test_padded_panel_blocks_match_numpy():
  # 365 columns in tiles of 16: 23 panels, blocks of at most 6 (6 x 160 x 16 floats of B in a declared 64 KB L2): 4 blocks of
  # 6, the last panel masked (PADTO on the panel loop); values against numpy
  from tg_core.renderer import RendererCaps
  from tg_core.uop.symbolic import symbolic
  from tg_core.uop.rewrite import graph_rewrite
  caps = RendererCaps(vector_upcast=True, vector_width=8, big_reduce_tile=(16, 6), cache_sizes=(8 << 10, 64 << 10))
  x, w = rnd(601, 640), rnd(640, 365)
  items, _ = create_schedule(UOp.sink((Tensor(x, device="CPU") @ Tensor(w, device="CPU")).uop))
  opts = hand_coded_optimizations(graph_rewrite(items[0].ast, symbolic), caps)
  assert opts[-6:] == [Opt(OptOps.PADTO, 1, 6), Opt(OptOps.SPLIT, 1, 6), Opt(OptOps.SWAP, 0, 2), Opt(OptOps.KBLOCK, 5, 160), Opt(OptOps.PACK, 5, 2),
                       Opt(OptOps.PACKROWS, 6)], opts
  np.testing.assert_allclose(run_with_opts(Tensor(x, device="CPU") @ Tensor(w, device="CPU"), opts), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)

def test_whole_k_panel_heuristic_matches_numpy():
  # 3 column panels: too few to pack A's row tiles (MIN_TILE_REUSE), B alone packed. Outputs (38 KB) over half a declared
  # 64 KB L3, B's whole-K panel (512 x 16 floats: 32 KB) in half the 64 KB L2: PACK without KBLOCK (the 8 KB L1 alone
  # would block K by 64); one panel a block
  from tg_core.renderer import RendererCaps
  from tg_core.uop.symbolic import symbolic
  from tg_core.uop.rewrite import graph_rewrite
  caps = RendererCaps(vector_upcast=True, vector_width=8, big_reduce_tile=(16, 6), cache_sizes=(8 << 10, 64 << 10, 64 << 10))
  x, w = rnd(200, 512), rnd(512, 48)
  items, _ = create_schedule(UOp.sink((Tensor(x, device="CPU") @ Tensor(w, device="CPU")).uop))
  opts = hand_coded_optimizations(graph_rewrite(items[0].ast, symbolic), caps)
  assert opts[-2:] == [Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 4)] and all(o.op is not OptOps.KBLOCK for o in opts), opts
  np.testing.assert_allclose(run_with_opts(Tensor(x, device="CPU") @ Tensor(w, device="CPU"), opts), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)

ROW_DOT_CASES = [((1, 1024), (4096, 1024), True), ((1, 4099), (1024, 4099), True), ((1031, 1), (4096, 1031), False), ((1, 4200), (1004, 4200), True),
                 ((1, 4200), (1001, 4200), True)]
@pytest.mark.parametrize("xs, ws, tr", ROW_DOT_CASES, ids=str)
def test_row_dot_matvec_reads_row_streams_rows_at_once(xs: tuple[int, int], ws: tuple[int, int], tr: bool):
  # x @ W.T (and W @ x): each output a dot of a weight row, contiguous along the reduce. A big one reads ROW_STREAMS rows at
  # once (one vector accumulator a row, within the register tile's accumulators: AVX-512's 32 x 8 and AVX2's 16 x 6 both hold 8)
  from tg_core.codegen.opt.heuristic import ROW_STREAMS
  from tg_core.renderer import RendererCaps
  from tg_core.uop.symbolic import symbolic
  from tg_core.uop.rewrite import graph_rewrite
  x, w = rnd(*xs), rnd(*ws)
  def mv(dev: str) -> Tensor: return Tensor(x, device=dev) @ Tensor(w, device=dev).T if tr else Tensor(w, device=dev) @ Tensor(x, device=dev)
  ref = x.astype(np.float64) @ w.T.astype(np.float64) if tr else w.astype(np.float64) @ x.astype(np.float64)
  items, _ = create_schedule(UOp.sink(mv("CPU").uop))
  ast = graph_rewrite(items[0].ast, symbolic)
  rows = ws[0]  # the weight rows, the output axis either way
  for width, tile in ((16, (32, 8)), (8, (16, 6))):
    opts = hand_coded_optimizations(ast, RendererCaps(vector_upcast=True, vector_width=width, big_reduce_tile=tile, cache_sizes=(32 << 10, 1 << 20)))
    ups = [o.arg for o in opts if o.op is OptOps.UPCAST]
    assert ups == ([max(a for a in (ROW_STREAMS, 4, 2) if rows % a == 0)] if rows % 2 == 0 else []), opts
    np.testing.assert_allclose(run_with_opts(mv("CPU"), opts), ref, rtol=1e-4, atol=1e-3)
  # a mid-size one (under 2^22 multiply-adds) keeps the 4-row tile
  small = hand_coded_optimizations(create_schedule(UOp.sink((Tensor.empty(1, 1024, device="NULL") @ Tensor.empty(1024, 1024, device="NULL").T).uop))[0][0].ast,
                                   RendererCaps(vector_upcast=True, vector_width=16, big_reduce_tile=(32, 8), cache_sizes=(32 << 10, 1 << 20)))
  assert [o.arg for o in small if o.op is OptOps.UPCAST] == [4], small

def test_pack_needs_a_loop_target():
  # the PYTHON reference reduces whole axes at once: a copy loop into a kernel-local panel has no form there
  with pytest.raises(KernelOptError, match="PACK"): run_with_opts(Tensor(A, device="PYTHON") @ Tensor(B, device="PYTHON"), PACK_CASES[-1])

@pytest.mark.parametrize("opts, make", [([Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.PACK, 0)], lambda a, b: a @ b),  # not a reduce axis
                                        ([Opt(OptOps.PACK, 2)], lambda a, b: a @ b),  # no upcast: no load contiguous along one
                                        ([Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.PACK, 3)], lambda a, b: a @ b.T.contiguous().T),  # B^T: read along K
                                        ([Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.PACK, 3, 2)], lambda a, b: a @ b),  # arg not an output axis
                                        ([Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.PACK, 3, 0)], lambda a, b: a @ b),  # B doesn't depend on A's rows
                                        ([Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.PACKROWS, 0)], lambda a, b: a @ b),  # not a reduce axis
                                        ([Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.PACKROWS, 3)], lambda a, b: a @ b),  # A's rows not upcast
                                        ([Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.PACKROWS, 3)], lambda a, b: a.T.contiguous().T @ b),  # A^T: strided along K
                                        ([Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.PACKROWS, 3, 1)], lambda a, b: a @ b)])  # A doesn't depend on B's columns
def test_bad_pack_raises(opts: list[Opt], make: Callable):
  items, _ = create_schedule(UOp.sink(make(Tensor(A), Tensor(B)).uop))
  ast = items[-1].ast
  for o in opts[:-1]: ast = apply_opt(ast, o)
  with pytest.raises(KernelOptError, match="PACK"): apply_opt(ast, opts[-1])

def test_beam_blocking_candidates_match_numpy():
  # BEAM's blocking choices: the heuristic's tile with the reduce K-blocked by each power of two (or not)
  from tg_core.codegen.opt.search import blocking_candidates
  from tg_core.renderer import RendererCaps
  x, w = rnd(40, 256), rnd(256, 24)
  items, _ = create_schedule(UOp.sink((Tensor(x) @ Tensor(w)).uop))
  cands = blocking_candidates(items[0].ast, RendererCaps(vector_upcast=True, vector_width=8, big_reduce_tile=(16, 6), cache_sizes=(32 << 10,)))
  assert [o.arg for c in cands for o in c if o.op is OptOps.KBLOCK] == [32, 64, 128]
  for opts in cands: np.testing.assert_allclose(run_with_opts(Tensor(x) @ Tensor(w), opts), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4, err_msg=str(opts))

def test_beam_blocking_candidates_start_from_the_heuristics_own_choice():
  # BEAM gets the scheduled kernel unsimplified: its first candidate is still what the heuristic picks in codegen (for a
  # padded 1000^3 matmul: the loop order, K blocks of 500, not a power of two, PACK and PACKROWS, which the unsimplified row index hid)
  from tg_core.codegen.opt.search import blocking_candidates
  from tg_core.renderer import RendererCaps
  from tg_core.uop.symbolic import symbolic
  from tg_core.uop.rewrite import graph_rewrite
  from tg_core.codegen.valid import pm_index_given_valid
  caps = RendererCaps(vector_upcast=True, vector_width=8, big_reduce_tile=(16, 6), cache_sizes=(32 << 10, 512 << 10))
  items, _ = create_schedule(UOp.sink((Tensor.empty(1000, 1000, device="NULL") @ Tensor.empty(1000, 1000, device="NULL")).uop))
  own = hand_coded_optimizations(graph_rewrite(graph_rewrite(items[0].ast, symbolic), pm_index_given_valid), caps)
  assert [o.op for o in own[-3:]] == [OptOps.KBLOCK, OptOps.PACK, OptOps.PACKROWS] and blocking_candidates(items[0].ast, caps)[0] == own, own

@pytest.mark.parametrize("width,tile", [(8, (16, 6)), (16, (32, 8))], ids=["avx2", "avx512"])
def test_matvec_heuristic_blocks_columns_and_rows_from_the_declared_l1(width: int, tile: tuple[int, int]):
  # x @ W on AVX2's and AVX-512's caps: a tile of one cache line of a row (16 floats, ROW_RUN), column blocks whose partial sums
  # fill a quarter of the L1 (32 KB: 128 tiles, capped at half the 128 tiles of 2048 columns; 8 KB: 32 tiles), the reduce
  # K-blocked by ROW_STREAMS rows inside each; half-precision weights take twice the elements in the same bytes
  from tg_core.dtype import dtypes
  from tg_core.renderer import RendererCaps
  from tg_core.codegen.opt.heuristic import ROW_STREAMS
  def caps(l1: int) -> RendererCaps: return RendererCaps(vector_upcast=True, vector_width=width, big_reduce_tile=tile, cache_sizes=(l1, 512 << 10))
  x, w = rnd(1, 2048), rnd(2048, 2048)
  items, _ = create_schedule(UOp.sink((Tensor(x) @ Tensor(w)).uop))
  opts = hand_coded_optimizations(items[0].ast, caps(32 << 10))
  assert opts == [Opt(OptOps.UPCAST, 0, 16), Opt(OptOps.SPLIT, 0, 64), Opt(OptOps.KBLOCK, 3, ROW_STREAMS)], opts
  np.testing.assert_allclose(run_with_opts(Tensor(x) @ Tensor(w), opts), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)
  assert hand_coded_optimizations(items[0].ast, caps(8 << 10))[1] == Opt(OptOps.SPLIT, 0, 32)
  half = Tensor.empty(1, 2048, device="NULL", dtype=dtypes.float16) @ Tensor.empty(2048, 2048, device="NULL", dtype=dtypes.float16)
  items, _ = create_schedule(UOp.sink(half.uop))
  want = [Opt(OptOps.UPCAST, 0, 16), Opt(OptOps.UPCAST, 0, 2)] if tile[0] == 16 else [Opt(OptOps.UPCAST, 0, 32)]
  assert [o for o in hand_coded_optimizations(items[-1].ast, caps(32 << 10)) if o.op is OptOps.UPCAST] == want

def test_bf16_matmul_heuristic_skips_kblock():
  # the fp32 sum is cast to bf16 before the store: partial sums can't accumulate in the output, so no KBLOCK
  from tg_core.dtype import dtypes
  from tg_core.renderer import RendererCaps
  from tg_core.uop.symbolic import symbolic
  from tg_core.uop.rewrite import graph_rewrite
  a = Tensor.empty(1024, 1024, device="NULL").cast(dtypes.bfloat16)
  items, _ = create_schedule(UOp.sink((a @ a).uop))
  caps = RendererCaps(vector_upcast=True, vector_width=8, big_reduce_tile=(16, 6), cache_sizes=(32 << 10, 512 << 10))
  opts = hand_coded_optimizations(graph_rewrite(items[-1].ast, symbolic), caps)
  assert opts and all(o.op is not OptOps.KBLOCK for o in opts), opts

def test_conv_with_output_channel_innermost_weights_takes_the_conv_register_tile():
  # weights stored (cin, kh, kw, cout) (tg-onnx stores Conv initializers so): a vector tile of output channels times a run of output
  # columns up to the register tile's rows + 1 (14 columns -> 7); weights in the (cout, cin, kh, kw) order keep the generic tiles
  from tg_core.renderer import RendererCaps
  from tg_core.uop.symbolic import symbolic
  from tg_core.uop.rewrite import graph_rewrite
  caps = RendererCaps(vector_upcast=True, vector_width=8, big_reduce_tile=(16, 6))
  x, w = rnd(2, 8, 14, 14), rnd(32, 8, 3, 3)
  wt = Tensor(np.ascontiguousarray(w.transpose(1, 2, 3, 0))).realize().permute(3, 0, 1, 2)
  out = Tensor(x).conv2d(wt, padding=1)
  items, _ = create_schedule(UOp.sink(out.uop))
  opts = hand_coded_optimizations(graph_rewrite(items[-1].ast, symbolic), caps)
  assert opts == [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 3, 7)]
  import torch
  ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy()
  np.testing.assert_allclose(run_with_opts(out, opts), ref, rtol=1e-4, atol=1e-4)
  items, _ = create_schedule(UOp.sink(Tensor(x).conv2d(Tensor(w), padding=1).uop))
  assert Opt(OptOps.UPCAST, 1, 16) not in hand_coded_optimizations(graph_rewrite(items[-1].ast, symbolic), caps)

# WINDOW: a padded conv's input read from a kernel-local copy of its window (the padding gate applied once per element)
def _conv_case(stride: int = 1, dilation: int = 1, padding: int | tuple[int, ...] = 1, bs: int = 2):
  import torch
  x, w = rnd(bs, 8, 12, 16), rnd(12, 8, 3, 3)
  pt = padding if isinstance(padding, int) else (0, 0)
  xt = torch.nn.functional.pad(torch.tensor(x), padding) if not isinstance(padding, int) else torch.tensor(x)
  ref = torch.nn.functional.conv2d(xt, torch.tensor(w), stride=stride, dilation=dilation, padding=pt).numpy()
  return Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), stride=stride, dilation=dilation, padding=padding), ref

# axes: 0 batch, 1 cout, 2 rows, 3 columns, then the upcasts, then cin, kh, kw
WINDOW_CASES = [([Opt(OptOps.SWAP, 1, 2), Opt(OptOps.WINDOW, 2)], {}),  # one row's window, the channels inside it
                ([Opt(OptOps.UPCAST, 3, 8), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.SWAP, 1, 2), Opt(OptOps.WINDOW, 2)], {}),  # vector copies
                ([Opt(OptOps.UPCAST, 3, 8), Opt(OptOps.PADTO, 1, 5), Opt(OptOps.UPCAST, 1, 5), Opt(OptOps.SWAP, 1, 2), Opt(OptOps.WINDOW, 2)],
                 {"stride": 2}),  # a padded channel tail, strided
                ([Opt(OptOps.UPCAST, 3, 4), Opt(OptOps.SWAP, 1, 3), Opt(OptOps.WINDOW, 3)], {"dilation": 2, "padding": 2}),  # a column block's
                ([Opt(OptOps.SWAP, 0, 1), Opt(OptOps.WINDOW, 0)], {"padding": (2, 0, 1, 3)}),  # a whole image's, asymmetric padding
                ([Opt(OptOps.UPCAST, 3, 8), Opt(OptOps.WINDOW, 3)], {"bs": 1})]  # inside the channel loop: copied again per channel, still right
@pytest.mark.parametrize("opts, conv", WINDOW_CASES, ids=str)
def test_window_matches_torch(opts: list[Opt], conv: dict):
  out, ref = _conv_case(**conv)
  if conv.get("bs") == 1: opts = [Opt(o.op, o.axis - 1 if o.axis is not None else None, o.arg) for o in opts]  # no batch axis
  np.testing.assert_allclose(run_with_opts(out, opts), ref, rtol=1e-4, atol=1e-4)

def test_padded_conv_heuristic_copies_the_input_window():
  # channels-first weights, a big conv (2 x 32 x 32 x 32 outputs, 144 multiply-adds each): the generic 16 x 6 tile, then the
  # channel tiles' loop inside the row loop (SWAP) and each row's window (16 cin x 3 x 3 x 32 columns: 18 KB, with the 18 KB of
  # weights in a quarter of the L2) copied once for the 6 channel tiles. No WINDOW where a 16 KB L2 holds no window, where 24
  # channels make 4 tiles (too few to pay for the copy), where 24 columns take a one-vector tile (its masked load is cheap)
  # or unpadded (nothing to copy)
  import torch
  from tg_core.codegen import simplified_kernel
  from tg_core.renderer import RendererCaps
  x, w = rnd(2, 16, 32, 32), rnd(32, 16, 3, 3)
  def opts(l2: int, padding: int = 1, cout: int = 32, cols: int = 32) -> list[Opt]:
    xs = Tensor(np.ascontiguousarray(x[..., :cols]), device="CPU")
    items, _ = create_schedule(UOp.sink(xs.conv2d(Tensor(w[:cout], device="CPU"), padding=padding).uop))
    caps = RendererCaps(vector_upcast=True, vector_width=8, big_reduce_tile=(16, 6), cache_sizes=(32 << 10, l2))
    return hand_coded_optimizations(simplified_kernel(items[0].ast), caps)
  o = opts(512 << 10)
  assert o[-2:] == [Opt(OptOps.SWAP, 1, 2), Opt(OptOps.WINDOW, 2)], o
  assert all(x.op is not OptOps.WINDOW for x in opts(16 << 10) + opts(512 << 10, cout=24) + opts(512 << 10, cols=24) + opts(512 << 10, padding=0))
  ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy()
  np.testing.assert_allclose(run_with_opts(Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=1), o), ref, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("opt, make", [(Opt(OptOps.WINDOW, 0), lambda a, b: a @ b),  # no gated load
                                       (Opt(OptOps.WINDOW, 4), lambda a, b: a.conv2d(b, padding=1)),  # a reduce axis
                                       (Opt(OptOps.WINDOW, 1), lambda a, b: a.conv2d(b, padding=1)),  # the input doesn't depend on cout
                                       (Opt(OptOps.WINDOW, 2), lambda a, b: a.conv2d(b))])  # unpadded: no gate
def test_bad_window_raises(opt: Opt, make: Callable):
  a, b = (Tensor(A), Tensor(B)) if opt.axis == 0 else (Tensor(rnd(2, 4, 6, 6)), Tensor(rnd(3, 4, 3, 3)))
  items, _ = create_schedule(UOp.sink(make(a, b).uop))
  with pytest.raises(KernelOptError, match="WINDOW"): apply_opt(items[-1].ast, opt)

def test_window_needs_a_loop_target():
  out, _ = _conv_case()
  items, _ = create_schedule(UOp.sink(Tensor(rnd(2, 4, 6, 6), device="PYTHON").conv2d(Tensor(rnd(3, 4, 3, 3), device="PYTHON"), padding=1).uop))
  with pytest.raises(KernelOptError, match="WINDOW"): get_program(items[0].ast, Device["PYTHON"].renderer, [Opt(OptOps.SWAP, 1, 2), Opt(OptOps.WINDOW, 2)])

# *** affine: an index's stride along a range ***

def _eval(u: UOp, env: dict[UOp, int]) -> int:
  """u evaluated with Python ints (the independent check of affine's answer)."""
  from tg_core.uop import Ops
  if u in env: return env[u]
  if u.op is Ops.CONST: return u.arg
  vals = [_eval(s, env) for s in u.src]
  if u.op is Ops.ADD: return vals[0] + vals[1]
  if u.op is Ops.MUL: return vals[0] * vals[1]
  if u.op is Ops.IDIV: return int(vals[0] / vals[1])
  raise NotImplementedError(u.op)

@pytest.mark.parametrize("case", ["flat", "scaled_sum", "nested_scaled", "two_terms", "not_affine", "free"])
def test_affine_stride_and_base(case: str) -> None:
  import itertools
  from tg_core.codegen.vectorize import affine
  from tg_core.dtype import dtypes
  from tg_core.uop import Ops
  from tg_core.uop.ops import AxisType
  r0, r1, r4 = (UOp(Ops.RANGE, dtypes.weakint, (UOp.const(dtypes.weakint, n),), (i, AxisType.LOOP)) for i, n in ((0, 4), (1, 8), (4, 2)))
  idx = {"flat": r0 * 128 + r4 * 64 + r1 * 8,
         "scaled_sum": (r0 * 2 + r4) * 64 + r1 * 8,                     # the range inside a scaled sum: what a 64x64 matmul's upcast index is
         "nested_scaled": ((r4 + r0) * 3 + r1 * 5 + r4 * 2) * 7 + r1,
         "two_terms": (r0 + r4) * 16 + r4 * 4 + 3,
         "not_affine": (r4 * r4) * 8 + r0,
         "free": r0 * 8 + r1}[case]
  got = affine(idx, r4)
  if case == "not_affine": assert got is None; return  # noqa: E702
  assert got is not None
  base, stride = got
  for v0, v1, v4 in itertools.product(range(4), range(8), range(2)):
    env = {r0: v0, r1: v1, r4: v4}
    assert _eval(idx, env) == _eval(base, env) + v4 * stride, (case, v0, v1, v4)
  assert r4 not in base.toposort()

"""BEAM search: time candidate optimizations of a kernel on its device and keep the fastest (cached on disk, keyed by the
kernel, the renderer and its declared caps, which name the host's arch and caches)."""
from __future__ import annotations
import itertools
import time

import numpy as np

from tg_core.codegen.opt.apply import KernelOptError, Opt, OptOps, apply_opt, apply_opts, axis_index, kernel_axes
from tg_core.device import Buffer, Device, diskcache_get, diskcache_put
from tg_core.dtype import AddrSpace, _to_np_storage
from tg_core.helpers import DEBUG, IGNORE_BEAM_CACHE, tqdm_iter
from tg_core.uop import Ops
from tg_core.uop.ops import AxisType, UOp
from tg_core.renderer import RendererCaps

def beam_candidates(ast: UOp) -> list[list[Opt]]:
  """Opt lists BEAM search times: combinations of upcasts of the last two output axes and an unroll of the last
  reduce axis, each also with those two output loops swapped (the loop order decides which operand stays in cache).
  Each list is valid for `ast` (built by applying it)."""
  axes = kernel_axes(ast)
  out_ids = [r.arg[0] for r in axes if r.arg[1] in (AxisType.LOOP, AxisType.GLOBAL)][-2:]
  red_ids = [r.arg[0] for r in axes if r.arg[1] is AxisType.REDUCE][-1:]
  cands: list[list[Opt]] = []
  amts = (1, 2, 4, 8)
  for ups in itertools.product(amts, repeat=len(out_ids)):
    for un in (amts if red_ids else (1,)):
      cur, opts = ast, []
      try:
        for aid, n in [*zip(out_ids, ups)] + ([(red_ids[0], un)] if red_ids else []):
          if n == 1: continue
          o = Opt(OptOps.UNROLL if red_ids and aid == red_ids[0] else OptOps.UPCAST, axis_index(cur, aid), n)
          cur = apply_opt(cur, o)
          opts.append(o)
      except KernelOptError: continue
      cands.append(opts)
      if len(out_ids) == 2:
        try:  # (an output axis upcast whole has no loop left to swap)
          apply_opt(cur, swap := Opt(OptOps.SWAP, axis_index(cur, out_ids[0]), axis_index(cur, out_ids[1])))
          cands.append(opts + [swap])
        except KernelOptError: pass
  return cands

def blocking_candidates(ast: UOp, caps: RendererCaps) -> list[list[Opt]]:
  """Opt lists for the cache blocking of a reduce kernel with one reduce axis: the heuristic's own choice for `caps`, and
  the same register tile and loop order with the reduce K-blocked by each power of two from 32 to K/2 (or not at all),
  each K block with the heuristic's packed panels and row tiles if it packs them (PACK, PACKROWS). Each list is valid for `ast`. The heuristic sees
  the kernel simplified as codegen gives it (the scheduled index of a padded axis is affine only then: unsimplified, a
  1000^3 matmul's candidates had no loop order and no PACK)."""
  from tg_core.codegen import simplified_kernel
  from tg_core.codegen.opt.heuristic import hand_coded_optimizations
  ast = simplified_kernel(ast)
  own = hand_coded_optimizations(ast, caps)
  base = [o for o in own if o.op not in (OptOps.KBLOCK, OptOps.PACK, OptOps.PACKROWS)]
  pack = [o for o in own if o.op in (OptOps.PACK, OptOps.PACKROWS)]  # packed panels and row tiles go with each K block (unblocked they would hold all of K)
  cur = apply_opts(ast, base)
  reds = [i for i, r in enumerate(kernel_axes(cur)) if r.arg[1] is AxisType.REDUCE]
  if len(reds) != 1: return [base]
  k = kernel_axes(cur)[reds[0]].src[0].arg if kernel_axes(cur)[reds[0]].src[0].op is Ops.CONST else 0
  cands = [base]
  for kc in (1 << i for i in range(5, max(k.bit_length() - 1, 5))):
    try: apply_opts(cur, [o := Opt(OptOps.KBLOCK, reds[0], kc), *pack])
    except KernelOptError: continue
    cands.append(base + [o, *pack])
  # the heuristic's own list goes first where no candidate above is it (a K block that isn't a power of two: 1000^3's
  # 500; PACK without KBLOCK: whole-K panels)
  return cands if own in cands else [own, *cands]

def _time_program(device: str, ast: UOp, opts: list[Opt], bufs: list[Buffer], var_vals: dict[str, int], runs: int = 3) -> float:
  from tg_core.engine.realize import CompiledRunner
  r = CompiledRunner(device, ast, opts, lower_cache=False)  # candidates are lowered here, not cached: only the choice is
  vals = {v.arg.name: var_vals.get(v.arg.name, v.arg.vmin_vmax[0] if v.arg.vmin_vmax else 0) for v in r.p.vars}
  best = float("inf")
  for _ in range(runs):
    st = time.perf_counter()
    t = r(bufs, vals, wait=True)
    best = min(best, t if t is not None else time.perf_counter() - st)
  return best

def beam_search(ast: UOp, device: str, amt: int, var_vals: dict[str, int] | None = None) -> list[Opt]:
  """The fastest opt list among `beam_candidates(ast)` (at most `amt`*8 of them), timed on scratch buffers."""
  ren = Device[device].renderer  # the timings hold for this renderer and target only
  key = (device, type(ren).__qualname__, ren.caps.cache_key(), ast.key.hex(), amt)
  if not IGNORE_BEAM_CACHE and (cached := diskcache_get("beam_search", key)) is not None: return cached
  params = sorted({u.arg.slot: u for u in ast.toposort() if u.op is Ops.PARAM and u.arg.addrspace is AddrSpace.GLOBAL}.items())
  rng = np.random.default_rng(0)
  bufs = []
  for _, p in params:
    b = Buffer(device, p.arg.size or 1, p.dtype).allocate()
    raw = rng.integers(0, 4, size=p.arg.size or 1).astype(_to_np_storage(p.dtype))
    b.copyin(memoryview(np.ascontiguousarray(raw)).cast("B"))
    bufs.append(b)
  # the blocking choices first (the heuristic's register tile with each K block), then the small-tile grid
  cands = (blocking_candidates(ast, ren.caps) + beam_candidates(ast))[:max(1, amt) * 8]
  timed: list[tuple[float, list[Opt]]] = []
  for opts in tqdm_iter(cands, desc=f"BEAM {ast.arg.name if ast.arg else ''}", disable=DEBUG < 1):
    try: timed.append((_time_program(device, ast, opts, bufs, var_vals or {}), opts))
    except Exception as e:  # a candidate that fails to compile or run is skipped, never chosen
      if DEBUG >= 3: print(f"BEAM: {opts} failed: {e}")
  if not timed: return []
  best = min(timed, key=lambda x: x[0])
  if DEBUG >= 2: print(f"BEAM picked {best[1]} in {best[0]*1e6:.1f} us out of {len(timed)} candidates")
  return diskcache_put("beam_search", key, best[1])

"""The hand-written heuristic: which opts a kernel gets when it brings none, from the target's declared RendererCaps."""
from __future__ import annotations
import dataclasses
import functools
from typing import TYPE_CHECKING, Callable

from tg_core.uop import Ops
from tg_core.uop.ops import AxisType, UOp
from tg_core.codegen.opt.apply import KernelOptError, Opt, OptOps, apply_opt, kernel_axes, nesting, packed_value
from tg_core.codegen.vectorize import access_strides, affine, loads_contiguous

if TYPE_CHECKING:
  from tg_core.renderer import RendererCaps

TINY_TILE = 16  # accumulators of a tiny reduce kernel's register tile

def hand_coded_optimizations(ast: UOp, caps: RendererCaps | None = None) -> list[Opt]:
  """Register tiling, driven by the target's declared caps (default: `RendererCaps()`). Reduce kernels upcast the last two
  output axes and unroll the last reduce axis (4x4 tiles, unroll 4). Targets that declare `big_reduce_tile` (CPUs: from the register file, 16 x 6
  on AVX2) give big reduce kernels that tile without unroll: the accumulators fill the vector registers (measured on a
  512x512 fp32 matmul: 21 -> 113 GFLOPS on one core with AVX-512), while small kernels keep 4x4 tiles, which compile ~3x faster; tiny ones
  (< 2^19 multiply-adds, e.g. a 64x64 matmul) take 4x2 tiles without unroll, which halve codegen time again. Elementwise
  kernels upcast the innermost axis by `vector_width` (at least 4); with `transpose_tile`, a transpose also upcasts an
  axis its loads are contiguous in. A big single-output-axis reduce whose loads are contiguous along the output (a matvec
  `x @ W` with W K x N, column sums) takes the `big_reduce_tile` on that axis, up to ROW_RUN bytes: each reduce step then
  reads one cache line of a weight row (16 floats: two AVX2 vectors, one AVX-512 vector), and the rows of a K block advance
  together, which the prefetchers stream. A big one-output-axis reduce over rows contiguous along it (x @ W.T, each output a
  weight row's dot with x) reads ROW_STREAMS rows at once (`_row_streams`). Targets that
  declare their `cache_sizes` also get the loop order of a big matmul chosen for cache reuse (`_loop_order`) and, where B's
  column loop ended up outside A's rows, both operands packed, A's row tiles inside blocks of B's panels (`_packed_tiles`), or
  where too few panels would reuse a packed row tile, B alone packed into contiguous panels around A's row loop (`_packed_panels`); else,
  knowing the L1, its reduce K-blocked (`_reduce_block`), or for a wide-output one its strided operand blocked to the L2
  (`_strided_operand_blocks`). A big kernel's tile that doesn't divide its axis pads the axis (`_tail_pad`: 1024 rows in
  tiles of 6, 1000 columns in tiles of 16) rather than halving the tile. A big padded convolution whose input tile spans
  several vector registers reads a copy of each row's input window instead of masked loads (`_windowed_input`). The loop
  the cores share (a big matmul's outermost, split across `caps.cores` threads) gets `_balanced` iterations for them: the
  cache blocks above are counted for the cores, the row tiles split into blocks outermost where they can't be (`_shares`),
  and as a last resort the register tile takes fewer rows."""
  if caps is None:
    from tg_core.renderer import RendererCaps
    caps = RendererCaps()
  if (tc := _apply_tc(ast, caps)) is not None: return tc
  if (conv := _conv_tile(ast, caps)) is not None: return conv
  if (lanes := _row_lanes_reduce(ast, caps)) is not None: return lanes
  opts, cur, matmul = _tiled(ast, caps)
  # a big matmul whose shared loop is still short of the cores (64x4096x64 on 16: 8 row tiles, 2 column panels, no split of
  # either gives 16): a register tile of half the rows, down to two (fewer accumulators, but every core busy)
  if not (matmul and (tile := caps.big_reduce_tile) is not None and (t := _shared_trip(cur)) is not None and not _balanced(t, caps.cores)):
    return opts
  while tile[1] > 2:
    tile = (tile[0], max(2, tile[1] // 2))
    half, cur_half, _ = _tiled(ast, dataclasses.replace(caps, big_reduce_tile=tile))
    if _balanced(_shared_trip(cur_half) or 0, caps.cores): return half
  return opts

def _tiled(ast: UOp, caps: RendererCaps) -> tuple[list[Opt], UOp, bool]:
  """The generic heuristic (see hand_coded_optimizations): (opts, the kernel with them applied, whether it is a big
  two-output-loop reduce, a matmul)."""
  width = caps.vector_width
  opts: list[Opt] = []
  axes = kernel_axes(ast)
  out_axes = [i for i, r in enumerate(axes) if r.arg[1] in (AxisType.LOOP, AxisType.GLOBAL)]
  # a reduction no output axis reaches (a row statistic the scheduler fused into its consumer, e.g. an rms_norm into its matvec)
  # runs once, hoisted above the output loops: its axes take no part in tiling
  hoisted = {r for u in ast.toposort() if u.op is Ops.REDUCE and not any(axes[i] in u.src[0].ranges for i in out_axes) for r in u.src[1:]}
  red_axes = [i for i, r in enumerate(axes) if r.arg[1] is AxisType.REDUCE and r not in hoisted]
  sizes = [1 if r in hoisted else axis_size_estimate(r) for r in axes]
  # a DP4A is 4 multiply-adds, and a reduce body written out op by op (a quantized block's words) holds many: sized by its loops
  # alone, a matmul over int8 words (16 DP4As a block) looked like a mid-size kernel and got the small tile on 4 lanes
  dp4as = sum(1 for u in ast.toposort() if u.op is Ops.DP4A)
  work = functools.reduce(lambda a, b: a * b, sizes, 1) * max(1, 4 * dp4as)
  # a kernel with a symbolic axis takes neither a big kernel's padded register tiles, loop order and packed panels nor the
  # mid-size 4x3 tiles (both measured slower on attention against a symbolic-length cache): it keeps the tiny tile set, and is
  # otherwise sized by its estimate
  symbolic = any(axes[i].src[0].op is not Ops.CONST for i in out_axes + red_axes)
  big = caps.big_reduce_tile is not None and bool(red_axes) and len(out_axes) >= 2 and work >= 1 << 22 and not symbolic
  # tiny kernels run in microseconds: their compile time (Python codegen and LLVM, both growing with the tile) dominates
  tiny = work < 1 << 19
  tiny_tiles = tiny or symbolic
  def first_fit(cur: UOp, op: OptOps, axis: int, amts: tuple[int, ...]) -> UOp:
    for amt in amts:
      try:
        cand = Opt(op, axis, amt)
        nxt = apply_opt(cur, cand)
        opts.append(cand)
        return nxt
      except KernelOptError: continue
    return cur
  cur = ast
  # one output axis (row/column sums, max, matvec) on a vector target: the axis the loads are contiguous in goes a vector wide
  col_reduce = red_axes and len(out_axes) == 1 and width > 4 and not tiny and \
    loads_contiguous(ast, axes[out_axes[0]], [axes[i] for i in red_axes])
  wide_col = col_reduce and caps.big_reduce_tile is not None and work >= 1 << 22 and not symbolic
  if wide_col and caps.big_reduce_tile is not None:
    # the register tile along the one output axis: both upcasts split it (the outer part keeps its place, out_axes[0]); a
    # row count that isn't a power of two (16 x 6 on AVX2) rounds down, as the axis is a power of two more often than not and
    # rounding up spills: 16 x 8 is 16 accumulator vectors, all of AVX2's registers with none left for the broadcast. The
    # tile reads at most ROW_RUN bytes of a row per reduce step (`_row_run`): AVX-512's whole 32 x 8 tile would read 1 KB
    # of one row before the next, and the rows a K block reads then advance unevenly
    budget = _row_run(ast, axes[out_axes[0]])
    for t in caps.big_reduce_tile:
      amts = tuple(a for a in _halvings(1 << (t.bit_length() - 1)) if a <= budget)
      before = cur
      cur = first_fit(cur, OptOps.UPCAST, out_axes[0], amts)
      if cur is not before: budget //= opts[-1].arg or 1
    if len(red_axes) == 1 and caps.cache_sizes:
      for o in _column_reduce_blocks(cur, caps.cache_sizes[0], caps.cores):
        cur = apply_opt(cur, o)
        opts.append(o)
  elif red_axes:
    # (a column reduce takes two vectors per step: each strided row visit reads two cache lines, half the page walks)
    tiles = tuple(_tile_sizes(t) for t in caps.big_reduce_tile) if big and caps.big_reduce_tile else ((8, 4, 2), (8, 4, 2)) if tiny_tiles else \
      (_halvings(min(2 * width, 32)),) if col_reduce else ((4, 3, 2), (4, 3, 2))
    if (rows := _row_streams(ast, caps, axes, out_axes, red_axes, hoisted, work)) is not None: tiles = (rows,)
    if big and caps.big_reduce_tile and (_accumulators(ast, hoisted) >= 3 or dp4as >= 8):
      # the big tile holds one accumulator an output; a reduce nested in another (a quantized matmul's int32 block sums inside
      # its float sum over blocks) holds one each as well: with three (a matmul over x in two int8 levels) the big tile
      # spilled, half its columns did not (and ran faster). A reduce step of many DP4As (a quantized block's words, each
      # unpacked into a register of the tile's column vector for all its rows) holds those too: half the columns ran faster
      tiles = (tuple(a for a in tiles[0] if a <= caps.big_reduce_tile[0] // 2), *tiles[1:])
    for i, amts in zip(_tile_axes(ast, axes, out_axes), tiles):
      if big and (pad := _tail_pad(cur, axes[i], amts[0])) is not None:
        cur = apply_opt(cur, pad)
        opts.append(pad)
      # a tiny kernel's tile holds at most TINY_TILE accumulators (compile time), whichever axes they come from
      if tiny_tiles: amts = tuple(a for a in amts if a * functools.reduce(lambda x, o: x * o.arg, [o for o in opts if o.op is OptOps.UPCAST], 1) <= TINY_TILE)
      cur = first_fit(cur, OptOps.UPCAST, kernel_axes(cur).index(_same_axis(cur, axes[i])), amts)
    # a kernel whose loads are all contiguous (or constant) along its last reduce axis unrolls it a vector wide: vector loads and
    # multiplies, one horizontal sum per step (tiny ones, a 512x128 matvec, an STFT as a 256-tap conv: 4-7x faster than the scalar
    # sum; a mid-size one too: a batch of STFT frames, 990K multiply-adds, 90 -> 59 us)
    red = axes[red_axes[-1]]
    contig_red = set(st := access_strides(ast, red, Ops.LOAD)) <= {0, 1} and 1 in st
    if tiny and contig_red and red in (cur_axes := kernel_axes(cur)): cur = first_fit(cur, OptOps.UNROLL, cur_axes.index(red), _halvings(max(width, 4)))
    if not big and not tiny and red in (cur_axes := kernel_axes(cur)):
      amts = _halvings(width) if (len(out_axes) == 1 and width > 4 and not col_reduce) or contig_red else (4, 2)
      cur = first_fit(cur, OptOps.UNROLL, cur_axes.index(axes[red_axes[-1]]), amts)
    if big and len(red_axes) == 1 and len(caps.cache_sizes) >= 2:
      for o in _loop_order(cur, caps.cache_sizes):
        cur = apply_opt(cur, o)
        opts.append(o)
    if big and len(red_axes) == 1 and len(caps.cache_sizes) >= 2 and (packed := _packed_tiles(cur, caps.cache_sizes, caps.cores) or
                                                                        _packed_panels(cur, caps.cache_sizes, caps.cores)):
      for o in packed: cur = apply_opt(cur, o)
      opts.extend(packed)
    elif big and len(red_axes) == 1 and caps.cache_sizes and (kb := _reduce_block(cur, caps.cache_sizes)) is not None:
      cur = apply_opt(cur, kb)
      opts.append(kb)
    elif big and len(red_axes) == 1 and len(caps.cache_sizes) >= 2:
      for o in _strided_operand_blocks(cur, caps.cache_sizes, caps.cores):
        cur = apply_opt(cur, o)
        opts.append(o)
    if big and len(out_axes) == 2:
      for o in _shares(cur, caps.cores):
        cur = apply_opt(cur, o)
        opts.append(o)
    if big and len(caps.cache_sizes) >= 2: opts.extend(_windowed_input(cur, caps.cache_sizes, width))
  elif out_axes:
    cur = first_fit(cur, OptOps.UPCAST, out_axes[-1], _halvings(max(width, 4)))
    # loads strided along the stores (a transpose): a few steps of an axis they are contiguous in share their cache lines
    if caps.transpose_tile > 1 and len(out_axes) > 1 and _loads_strided(ast, axes[out_axes[-1]]):
      for a in reversed(out_axes[:-1]):
        if loads_contiguous(ast, axes[a]):
          cur = first_fit(cur, OptOps.UPCAST, a, _halvings(caps.transpose_tile))
          break
  return opts, cur, big and len(out_axes) == 2

def _row_streams(ast: UOp, caps: RendererCaps, axes: list[UOp], out_axes: list[int], red_axes: list[int], hoisted: set[UOp],
                 work: int) -> tuple[int, ...] | None:
  """The rows a big one-output-axis reduce over rows contiguous in memory (a matvec `x @ W.T` with W N x K, each output the
  dot of a weight row with x; row sums) reads at once: ROW_STREAMS rows (the register tile's outer axis, one vector
  accumulator each), so ROW_STREAMS streams advance together for the hardware prefetchers and the renderer's software
  prefetch fetches the next group of rows a whole group ahead; the default 4-row tile leaves bandwidth unused. Fewer where
  the rows' accumulators (one vector per row and reduce) would outgrow the register tile `big_reduce_tile` holds. None for
  any other kernel (small, symbolic, several output axes, a column reduce, a load strided along the reduce)."""
  if caps.big_reduce_tile is None or len(out_axes) != 1 or len(red_axes) != 1 or work < 1 << 22: return None
  if any(axes[i].src[0].op is not Ops.CONST for i in out_axes + red_axes): return None
  st = access_strides(ast, axes[red_axes[0]], Ops.LOAD)
  if not set(st) <= {0, 1} or 1 not in st or loads_contiguous(ast, axes[out_axes[0]], [axes[red_axes[0]]]): return None
  budget = max(1, caps.big_reduce_tile[0] // max(caps.vector_width, 1)) * caps.big_reduce_tile[1] // max(_accumulators(ast, hoisted), 1)
  rows = tuple(a for a in _halvings(ROW_STREAMS) if a <= budget)
  return rows or None

def _accumulators(ast: UOp, hoisted: set[UOp]) -> int:
  """Accumulators an output of the kernel holds: its reduces, not counting the hoisted ones (run once, above the output loops)."""
  return sum(1 for u in ast.toposort() if u.op is Ops.REDUCE and not all(r in hoisted for r in u.src[1:]))

def axis_size_estimate(r: UOp) -> int:
  """A loop's trip count as the heuristic sizes kernels: its constant, or for a symbolic bound (a KV cache's valid length,
  start_pos + 1 with start_pos a bound Variable) the middle of the bound's range. The kernel is compiled once for every value;
  counted as 1, an attention kernel over a 4096-position cache was sized "tiny" and got no vectorized or tiled loops."""
  b = r.src[0]
  return int(b.arg) if b.op is Ops.CONST else max(1, (int(b.vmin) + int(b.vmax)) // 2)

# bytes of the lanes' rows one step of a row-lanes reduce reads (_row_lanes_reduce) from which it isn't unrolled: such a step
# (a pair of 8-bit quantized blocks or a 256-element super-block for 16 rows) is already many independent loads and dot chains, and
# unrolled the compiler hoisted the copies' loads out of order across their lines (the weights stream from memory slower)
ROW_LANES_UNROLL_MAX_BYTES = 1024

def _row_lanes_reduce(ast: UOp, caps: RendererCaps) -> list[Opt] | None:
  """A one-output-axis reduce whose loads are contiguous along `vector_width` (or fewer, at least 4) consecutive outputs but not along the whole
  axis (a matvec over weights stored with that many rows interleaved byte by byte, as packed quantized blocks) runs
  those outputs in the vector lanes (UPCAST, the vectorized axis) with the innermost reduce unrolled by 4 (or 2) where one
  step of it reads less than ROW_LANES_UNROLL_MAX_BYTES of the rows: each load then reads one vector for all the lanes'
  rows, and whatever a row decodes once per block (its fp16 scales) is done once per vector of rows. None when the kernel
  isn't one (an ordinary matvec's rows are a row apart along the axis)."""
  width = caps.vector_width
  axes = kernel_axes(ast)
  outs = [r for r in axes if r.arg[1] in (AxisType.LOOP, AxisType.GLOBAL)]
  reds = [r for r in axes if r.arg[1] is AxisType.REDUCE]
  if width < 4 or len(outs) != 1 or not reds or outs[0].src[0].op is not Ops.CONST or loads_contiguous(ast, outs[0], reds): return None
  for amt in (a for a in _halvings(width) if a >= 4):  # the widest lane count the rows are interleaved by
    try: cur = apply_opt(ast, up := Opt(OptOps.UPCAST, axes.index(outs[0]), amt))
    except KernelOptError: continue
    lane = next(r for r in kernel_axes(cur) if r.arg[1] is AxisType.UPCAST)
    if loads_contiguous(cur, lane, [r for r in kernel_axes(cur) if r.arg[1] is AxisType.REDUCE]): break
  else: return None
  opts = [up]
  cur_axes = kernel_axes(cur)
  last = max((r for r in cur_axes if r.arg[1] is AxisType.REDUCE), key=lambda r: r.arg[0])
  # the loads of the lanes' rows one step of `last` reads (each a vector of `up.arg` lanes)
  rows_loads = {u for u in cur.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and
                {lane, last} <= set(u.src[0].src[1].toposort())}
  if sum(u.dtype.itemsize * up.arg for u in rows_loads) >= ROW_LANES_UNROLL_MAX_BYTES: return opts
  for amt in (4, 2):
    try:
      apply_opt(cur, unroll := Opt(OptOps.UNROLL, cur_axes.index(last), amt))
      return opts + [unroll]
    except KernelOptError: continue
  return opts

def _apply_tc(ast: UOp, caps: RendererCaps) -> list[Opt] | None:
  """A matmul the target has a tensor core for (the first of caps.tensor_cores that applies, see codegen/opt/tc.py) runs on
  it; None when none applies (no tensor cores, not a matmul of its dtypes, a dimension smaller than its tile)."""
  if not caps.has_local: return None
  for i in range(len(caps.tensor_cores)):
    try:
      apply_opt(ast, opt := Opt(OptOps.TC, None, i), caps)
      return [opt]
    except KernelOptError: continue
  return None

def _conv_tile(ast: UOp, caps: RendererCaps) -> list[Opt] | None:
  """The register tile of a direct convolution whose weights are stored output channel innermost (tg-onnx stores them so at
  load): a vector tile over the output channels `c` (`big_reduce_tile[0]`, the weight loads then read whole vectors) times
  a run of output columns `w` (each input element read once and broadcast against the weight vectors), so per reduce step
  (cin, kh, kw) the tile loads its weight vectors and one input element per column for rows x vectors multiply-adds. Rows:
  the largest divisor of the column axis up to `big_reduce_tile[1] + 1` (the matmul tile's rows plus the register it keeps
  for the broadcast: the conv's broadcast can come from memory), so 7, 14, 28, 56 and 112 columns all take 7. The kernel
  is a conv when every load that varies with the reduce either steps by 1 along one output axis `c` and depends on no other
  output axis (the weights) or doesn't depend on `c` and depends on at least two output axes (the input's rows and columns);
  a matmul's A depends on one. None for anything else (depthwise convs, whose input depends on `c`; weights in the
  (cout, cin, kh, kw) order; channels-first outputs whose columns a vector width divides; no register tile declared), which the
  generic heuristic then tiles."""
  if caps.big_reduce_tile is None: return None
  axes = kernel_axes(ast)
  outs = [r for r in axes if r.arg[1] in (AxisType.LOOP, AxisType.GLOBAL) and r.src[0].op is Ops.CONST and r.src[0].arg > 1]
  reds = [r for r in axes if r.arg[1] is AxisType.REDUCE]
  if not reds or len(outs) < 3: return None
  loads = [u for u in ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and any(r in u.src[0].src[1].toposort() for r in reds)]
  def deps(u: UOp) -> list[UOp]: return [r for r in outs if r in u.src[0].src[1].toposort()]
  for c in outs:
    strides = access_strides(ast, c, Ops.LOAD, reds)
    weights = [u for u, st in zip(loads, strides) if st == 1 and deps(u) == [c]]
    inputs = [u for u, st in zip(loads, strides) if st == 0 and len(deps(u)) >= 2]
    if weights and inputs and len(weights) + len(inputs) == len(loads): break
  else: return None
  # the expander vectorizes the axis the stores are contiguous in: a conv stored channels-first runs the tile's columns as the vector
  # and its channels as broadcast weights. Where a vector width divides the columns, the generic tile (a full vector of columns
  # times big_reduce_tile[1] channels) does better than a partial vector of columns; other column counts keep this tile
  w = [r for r in deps(inputs[0]) if r is not c][-1]  # the innermost spatial axis of the input: the output columns
  if access_strides(ast, c, Ops.STORE) != [1] and w.src[0].arg % caps.vector_width == 0: return None
  cols, rows = caps.big_reduce_tile
  opts: list[Opt] = []
  cur = ast
  for ax, amts in ((c, _halvings(cols)), (w, tuple(d for d in range(rows + 1, 1, -1) if w.src[0].arg % d == 0))):
    for amt in amts:
      try: cur = apply_opt(cur, o := Opt(OptOps.UPCAST, kernel_axes(cur).index(_same_axis(cur, ax)), amt))
      except KernelOptError: continue
      opts.append(o)
      break
  return opts

# output-channel tiles that read each copied window at least: the copy is a gated read and a write of every element, and
# the loop order it needs re-reads the weights from the L2 in every window's iteration (fewer tiles, a 24-channel conv's 4,
# measured slower than the masked reads)
MIN_WINDOW_REUSE = 6

def _windowed_input(ast: UOp, caches: tuple[int, ...], width: int) -> list[Opt]:
  """A padded convolution's input copied once per window (WINDOW) instead of masked at every reduce step: its load's gate
  (the padding border) varies with the reduce, so each multiply-add paid a compare and a masked load. The output loops the
  input doesn't depend on (the output channels' tiles) move inside (SWAP) the window loop o: the outermost loop of the input's
  but its innermost whose window (the input's values over the ranges inside o: a row's cin x kh x kw x columns) fits a quarter of the L2
  (`caches[1]`) together with what those tiles read (the weights), so both stay cached while the tiles read the window.
  Only where the input's masked loads are wider than a vector register (`width` lanes contiguous along the upcast columns):
  their mask is then legalized through packs and unpacks per register at every reduce step, where a one-register masked load
  costs about as little as the window's copy saves. Where fewer than MIN_WINDOW_REUSE tiles read a window, or no window fits, []."""
  axes = kernel_axes(ast)
  loops = [r for r in axes if r.arg[1] in (AxisType.LOOP, AxisType.GLOBAL) and r.src[0].op is Ops.CONST]
  reds = [r for r in axes if r.arg[1] is AxisType.REDUCE]
  gated = [u for u in ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and len(u.src[0].src) == 3 and
           any(r in u.src[0].src[2].ranges for r in reds)]
  if len(gated) != 1 or len(loops) < 2: return []
  ld = gated[0]
  lanes = [r.src[0].arg for r in ld.src[0].ranges if r.arg[1] is AxisType.UPCAST and (a := affine(ld.src[0].src[1], r)) is not None and a[1] == 1]
  if functools.reduce(lambda a, b: a * b, lanes, 1) <= width: return []
  # the loops outermost first (each nests in the one before), else the loop order isn't one chain and nothing moves
  order = sorted(loops, key=lambda r: sum(1 for x in loops if x is not r and nesting(ast, r, x) == (r, x)))
  if any(nesting(ast, b, a) != (b, a) for a, b in zip(order, order[1:])): return []
  uses = [r for r in order if r in ld.src[0].ranges]
  others = [r for r in order if r not in ld.src[0].ranges]
  if not uses or functools.reduce(lambda a, b: a * b, [r.src[0].arg for r in others], 1) < MIN_WINDOW_REUSE: return []
  inner = functools.reduce(lambda a, b: a * b, [r.src[0].arg for r in ld.src[0].ranges if r not in loops], 1) * ld.dtype.itemsize
  def window(i: int) -> int: return functools.reduce(lambda a, b: a * b, [r.src[0].arg for r in uses[i + 1:]], inner)  # bytes inside uses[i]
  # the loops moved inside o read their operand (the weights) whole in every iteration of o: it shares the L2 with the window
  loads = {u.src[0].src[0]: u for u in ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u is not ld and
           u.src[0].src[0].op is Ops.PARAM and any(r in u.src[0].ranges for r in others)}
  shared = sum((p.arg.size or 0) * p.dtype.itemsize for p in loads)
  # (not the innermost of the input's loops: one of them inside the moved tiles reuses each tile's weights from the L1)
  at = next((i for i in range(len(uses) - 1) if window(i) + shared <= caches[1] // 4), None)
  if at is None: return []
  target = uses[:at + 1] + others + uses[at + 1:]
  opts: list[Opt] = []
  cur, cur_order = ast, list(order)
  try:
    for i, want in enumerate(target):
      if cur_order[i] is want: continue
      j = cur_order.index(want)
      cur = apply_opt(cur, o := Opt(OptOps.SWAP, kernel_axes(cur).index(cur_order[i]), kernel_axes(cur).index(want)))
      opts.append(o)
      cur_order[i], cur_order[j] = cur_order[j], cur_order[i]
    apply_opt(cur, o := Opt(OptOps.WINDOW, kernel_axes(cur).index(uses[at])))
  except KernelOptError: return []
  return opts + [o]

def _one_operand(ast: UOp, strided: list[UOp]) -> tuple[UOp, int] | None:
  """The operand read by the loads `strided` (those strided along the reduce): (one of them, the bytes they read per element
  of it per reduce step), or None. Usually one load; a bf16 matmul's B can be two, the rows of a K pair joined into one
  uint32 value in the kernel (apply.packed_value: the join PACK copies); loads that aren't one value are no one operand."""
  if len(strided) == 1: return strided[0], strided[0].dtype.itemsize
  if packed_value(ast, strided) is None: return None
  return strided[0], sum(u.dtype.itemsize for u in strided)

# rows of the register tile that each vector of the strided operand (B's row, read with a stride along the reduce) feeds:
# from fewer, re-reading B from the L2 for every row tile costs more than packing it (`_loop_order`). AVX2's 16 x 6 tile,
# 512^3 fp32 on one Zen 4 core (x86-64-v3 code, thread CPU time): 0.77x numpy unpacked, 1.05x packed; AVX-512's 8 rows: 1.1x
MIN_STRIDED_REUSE = 8

def _loop_order(ast: UOp, caches: tuple[int, ...]) -> list[Opt]:
  """Loop order for cache reuse in a tiled kernel with two output loops and one reduce (a matmul): the operand read with
  a stride along the reduce (B's columns in A @ B) should stay in cache while the operand read contiguously along it (A's
  rows, which prefetchers stream) walks past, so the output loop the strided operand depends on goes outside (SWAP). Only
  when that operand outgrows the L2 (`caches[1]`; else re-reading it is cheap), or the register tile has fewer than
  MIN_STRIDED_REUSE rows (each row tile then re-reads B's strided rows, a few L1 sets and a page apart, at a rate the L2
  doesn't keep up with), and is at least as big as the output
  (else the output's stores dominate and keep the order that writes them contiguously). 1024^3 fp32, same run: 3x;
  4096x64x4096 (the output dominates): keeps its order. (A block of the streamed operand around this, SPLIT + SWAP so
  it stays in the last cache level while every panel of the strided one passes, measured no faster at 4096^3 on a
  shared 2-core VM: without packing, the strided operand then comes from memory once per block. Not applied.)"""
  axes = kernel_axes(ast)
  loops = [r for r in axes if r.arg[1] in (AxisType.LOOP, AxisType.GLOBAL)]
  reds = [r for r in axes if r.arg[1] is AxisType.REDUCE]
  if len(loops) != 2 or len(reds) != 1: return []
  if (nest := nesting(ast, *loops)) is None: return []
  inner, outer = nest
  mem = [u for u in ast.toposort() if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]
  def nbytes(u: UOp) -> int: return (u.src[0].src[0].arg.size or 0) * u.src[0].src[0].dtype.itemsize
  def uses(u: UOp, r: UOp) -> bool: return r in u.src[0].src[1].toposort()
  out_bytes = sum(nbytes(u) for u in mem if u.op is Ops.STORE)
  loads = [(u, access_strides(u, reds[0], Ops.LOAD)[-1]) for u in mem if u.op is Ops.LOAD]
  strided = [u for u, st in loads if st not in (0, 1)]
  # (sizes per K row: a DPBF16 step takes two K rows in each element of its strided operand, where an fp32 matmul's takes one)
  per_step = 2 if any(u.op is Ops.DPBF16 for u in ast.toposort()) else 1
  if (one := _one_operand(ast, strided)) is None: return []
  b = one[0]
  # (a joined operand, apply.packed_value, goes outside whatever the sizes: its packed panels then join each pair once, where
  # in the other order the join runs again for every row tile)
  streamed = [u for u, st in loads if st == 1]
  rows = _upcast_extent(streamed[0]) if streamed else 0
  fits = nbytes(b) <= caches[1] and not 1 < rows < MIN_STRIDED_REUSE
  if len(strided) == 1 and (fits or per_step * nbytes(b) < out_bytes): return []
  if not uses(b, inner) or uses(b, outer): return []
  # the loop of the strided operand (`inner` now) goes outside the streamed operand's loop (`outer` now)
  return [Opt(OptOps.SWAP, axes.index(outer), axes.index(inner))]

def _strided_operand_blocks(ast: UOp, caches: tuple[int, ...], cores: int = 1) -> list[Opt]:
  """Cache blocks for a tiled matmul whose output dominates (wide and short: 4096x64x4096, where `_loop_order` keeps
  the rows outside): the operand strided along the reduce (B, K x N) outgrows the L2 (`caches[1]`), so every row tile
  reads all of it again from the L3 (683 times for 4096 rows in tiles of 6; 512 times with the 8-row tile before, which
  is why the 6-row tile regressed there with both cores sharing the L3). Its loop (the columns, inner) is split into the
  fewest blocks whose slice of B fits half the L2 (SPLIT) and the block loop goes outside the rows (SWAP): B comes from
  the L3 once and the streamed operand (A) once per block. Only where that moves fewer bytes (blocks x A < row tiles x
  B). The block loop is the one the cores share: the fewest blocks `_balanced` for them where a divisor is. 4096x64x4096
  fp32 on one Zen 3 core (thread CPU time, a loaded VM): 49-54 -> 44-48 ms, numpy 48-60. [] where it doesn't apply."""
  axes = kernel_axes(ast)
  loops = [r for r in axes if r.arg[1] in (AxisType.LOOP, AxisType.GLOBAL)]
  reds = [r for r in axes if r.arg[1] is AxisType.REDUCE]
  if len(loops) != 2 or len(reds) != 1 or any(r.src[0].op is not Ops.CONST for r in loops): return []
  if (nest := nesting(ast, *loops)) is None: return []
  inner, outer = nest
  loads = [u for u in ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]
  def nbytes(u: UOp) -> int: return (u.src[0].src[0].arg.size or 0) * u.src[0].src[0].dtype.itemsize
  def uses(u: UOp, r: UOp) -> bool: return r in u.src[0].src[1].toposort()
  # (a padded axis clamps A's row index, min(r, s-1): its stride along the reduce can read as unknown, None)
  strided = [u for u in loads if access_strides(u, reds[0], Ops.LOAD)[-1] not in (0, 1, None)]
  if (one := _one_operand(ast, strided)) is None or nbytes(b := one[0]) <= caches[1] or not uses(b, inner) or uses(b, outer): return []
  n = inner.src[0].arg
  fits = [c for c in range(2, n + 1) if n % c == 0 and nbytes(b) // c <= caches[1] // 2]
  blocks = _first_balanced(fits, lambda c: c, cores)
  if blocks is None or blocks * sum(nbytes(u) for u in loads if u not in strided) >= outer.src[0].arg * nbytes(b): return []
  split = Opt(OptOps.SPLIT, axes.index(inner), n // blocks)
  try:
    cur = apply_opt(ast, split)
    cur_axes = kernel_axes(cur)
    apply_opt(cur, swap := Opt(OptOps.SWAP, cur_axes.index(outer), cur_axes.index(_same_axis(cur, inner))))
  except KernelOptError: return []
  return [split, swap]

def _balanced(trip: int, cores: int) -> bool:
  """Does a shared loop of `trip` iterations keep `cores` threads evenly busy? The runtime gives each thread a contiguous run
  of trip/cores iterations, rounded (a CPU runtime's split loop), so the slowest runs ceil(trip/cores): balanced where cores
  divides trip, else where each core gets at least 4 (the slowest then runs at most 1/4 over the mean)."""
  return cores <= 1 or trip % cores == 0 or trip >= 4 * cores

def _first_balanced(cands: list[int], blocks: Callable[[int], int], cores: int) -> int | None:
  """The first of `cands` (block sizes in the caches' order of preference) whose block count `blocks(c)` is `_balanced` for the
  cores, else the first of them; None where there are none."""
  return next((c for c in cands if _balanced(blocks(c), cores)), cands[0] if cands else None)

def _loop_chain(ast: UOp) -> list[UOp] | None:
  """The kernel's constant output loops outermost first, when each nests in the one before (else None)."""
  loops = [r for r in kernel_axes(ast) if r.arg[1] in (AxisType.LOOP, AxisType.GLOBAL)]
  if not loops or any(r.src[0].op is not Ops.CONST for r in loops): return None
  order = sorted(loops, key=lambda r: sum(1 for x in loops if x is not r and nesting(ast, r, x) == (r, x)))
  return order if all(nesting(ast, b, a) == (b, a) for a, b in zip(order, order[1:])) else None

def _shared_trip(ast: UOp) -> int | None:
  """Iterations of the loop the cores share (the outermost output loop), None where the loops don't form one chain."""
  return None if (chain := _loop_chain(ast)) is None else int(chain[0].src[0].arg)

def _shares(ast: UOp, cores: int) -> list[Opt]:
  """Work for every core where the cache blocking left the shared (outermost) loop too few iterations (`_balanced`; a
  packed 1024^3 matmul's 2 column blocks on 16 cores): the loop nested in it (A's row tiles) split into the fewest balanced
  blocks of 2 or more, padded to whole blocks (PADTO) where that wastes at most 1/8 of it as `_tail_pad` does, the block loop outermost
  (SPLIT, SWAP). Each row block then packs B's panels itself (the copy sits in the loops it depends on): B is copied once
  per row block, and a K block re-reads a row block's share of the outputs. [] where the shared loop is balanced or no
  loop inside it splits so."""
  if (chain := _loop_chain(ast)) is None or _balanced(int(chain[0].src[0].arg), cores): return []
  for inner in chain[1:]:
    size = int(inner.src[0].arg)
    # (at least 2 tiles a block: a block of one row tile would pack B's panels for every tile)
    for per in range(-(-size // cores), 1, -1):
      if not _balanced(blocks := -(-size // per), cores) or blocks * per - size > size // 8: continue
      opts: list[Opt] = [Opt(OptOps.PADTO, kernel_axes(ast).index(inner), per)] if blocks * per > size else []
      try:
        cur = apply_opt(ast, opts[0]) if opts else ast
        cur = apply_opt(cur, o := Opt(OptOps.SPLIT, kernel_axes(cur).index(_same_axis(cur, inner)), per))
        opts.append(o)
        cur = apply_opt(cur, o := Opt(OptOps.SWAP, kernel_axes(cur).index(_same_axis(cur, inner)), kernel_axes(cur).index(_same_axis(cur, chain[0]))))
        opts.append(o)
      except KernelOptError: continue
      if _shared_trip(cur) == blocks: return opts
  return []

def _upcast_extent(ld: UOp) -> int:
  """Elements of the register tile the load `ld` reads per reduce step: the sizes of the UPCAST ranges its index uses."""
  return functools.reduce(lambda a, r: a * r.src[0].arg, [r for r in ld.src[0].ranges if r.arg[1] is AxisType.UPCAST], 1)

def _same_axis(ast: UOp, r: UOp) -> UOp:
  """The range of `ast` with r's axis id (padding an axis replaces its range by a longer one with the same id)."""
  return next(x for x in kernel_axes(ast) if x.arg[0] == r.arg[0])

def _tail_pad(ast: UOp, r: UOp, tile: int) -> Opt | None:
  """PADTO for a register tile that doesn't divide its axis, when the padded tail wastes at most 1/8 of the axis (1000
  columns in tiles of 16, 1024 rows in tiles of 6); else None, and the tile halves until it divides."""
  r = _same_axis(ast, r)
  size = r.src[0].arg if r.src[0].op is Ops.CONST else 0
  if size < tile or size % tile == 0 or (-size % tile) * 8 > size: return None
  return Opt(OptOps.PADTO, kernel_axes(ast).index(r), tile)

def _reduce_block(ast: UOp, caches: tuple[int, ...]) -> Opt | None:
  """KBLOCK for a tiled matmul whose reduce outgrows the L1 (`l1` bytes): per reduce step the register tile reads a
  vector row of the operand strided along the reduce (B's row in A @ B, `tile` elements), so a block of kc steps keeps
  kc such rows; kc is the largest divisor of the reduce with kc rows in half the L1 (the other half for the streamed
  operand's rows and the output tile). Each block re-reads the outputs one iteration of the outermost loop writes, so
  only when those fit a quarter of the L2 (`caches[1]`, where known): 4096^3 fp32 (256 KB of outputs per column panel,
  512 KB L2) measured 24 -> 17 GFLOPS with it on one Zen 3 core, 1024^3 and 2048^3 gain. None when the reduce already
  fits, no divisor of at least 32 does, the outputs don't fit, or KBLOCK doesn't apply."""
  l1 = caches[0]
  axes = kernel_axes(ast)
  reds = [r for r in axes if r.arg[1] is AxisType.REDUCE]
  if len(reds) != 1 or reds[0].src[0].op is not Ops.CONST: return None
  k = reds[0].src[0].arg
  loads = [u for u in ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
  strided = [u for u, st in zip(loads, access_strides(ast, reds[0], Ops.LOAD)) if st not in (0, 1)]
  if (one := _one_operand(ast, strided)) is None: return None
  ups = [r for r in axes if r.arg[1] is AxisType.UPCAST and r in one[0].src[0].src[1].toposort()]
  row = functools.reduce(lambda a, b: a * b, [r.src[0].arg for r in ups], 1) * one[1]
  kmax = (l1 // 2) // row
  if k <= kmax: return None
  loops = [r for r in axes if r.arg[1] in (AxisType.LOOP, AxisType.GLOBAL)]
  stores = [u for u in ast.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]
  if len(caches) >= 2 and len(loops) == 2 and len(stores) == 1 and (nest := nesting(ast, *loops)) is not None and nest[1].src[0].op is Ops.CONST:
    out_bytes = (stores[0].src[0].src[0].arg.size or 0) * stores[0].src[1].dtype.itemsize
    if out_bytes // nest[1].src[0].arg > caches[1] // 4: return None
  kc = next((d for d in range(kmax, 31, -1) if k % d == 0), None)
  if kc is None: return None
  try: apply_opt(ast, kb := Opt(OptOps.KBLOCK, axes.index(reds[0]), kc))
  except KernelOptError: return None  # e.g. a bf16 matmul: its fp32 sum is cast before the store, so can't accumulate there
  return kb

# row tiles that read each packed panel at least (the copy then costs a few percent of the multiply-adds); fewer rows
# (64 x 4096 x 64) keep the unpacked K-blocked loop
MIN_PANEL_REUSE = 16

def _panel_matmul(ast: UOp) -> tuple[list[UOp], UOp, UOp, list[UOp], list[UOp], list[UOp]] | None:
  """A tiled matmul whose packing `_packed_panels`/`_packed_tiles` decide: two constant output loops that nest, B's column
  panels outside A's row tiles (at least MIN_PANEL_REUSE of them), one constant reduce. (axes, rows, cols, [reduce], its
  global loads, those read with a stride along the reduce), else None."""
  axes = kernel_axes(ast)
  loops = [r for r in axes if r.arg[1] in (AxisType.LOOP, AxisType.GLOBAL)]
  reds = [r for r in axes if r.arg[1] is AxisType.REDUCE]
  if len(loops) != 2 or len(reds) != 1 or any(r.src[0].op is not Ops.CONST for r in (*loops, *reds)): return None
  if (nest := nesting(ast, *loops)) is None: return None
  rows, cols = nest  # the inner loop (A's row tiles) and the outer one (B's column panels)
  if rows.src[0].arg < MIN_PANEL_REUSE: return None
  loads = [u for u in ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]
  strided = [u for u in loads if (st := access_strides(u, reds[0], Ops.LOAD)) and st[-1] not in (0, 1, None)]
  return axes, rows, cols, reds, loads, strided

def _panel_operand(ast: UOp, strided: list[UOp], rows: UOp, cols: UOp) -> tuple[UOp, int] | None:
  """The packed operand of a panel matmul (`_one_operand` of its strided loads) when it depends on the column panels and not
  on the row tiles, else None."""
  if (one := _one_operand(ast, strided)) is None or cols not in one[0].src[0].ranges or rows in one[0].src[0].ranges: return None
  return one

def _packed_panels(ast: UOp, caches: tuple[int, ...], cores: int = 1) -> list[Opt]:
  """Cache blocking of a tiled matmul (A @ B, register tile U columns x R rows) whose loop over B's column panels runs
  outside the loop over A's row tiles (`_loop_order`): B's rows are a stride apart, a power of two maps them all to a
  few cache sets, so without a copy the slice a reduce block reads doesn't stay in any cache (4096^3 fell to 0.29x
  numpy). Opts: a block of p column panels (SPLIT, where A outgrows twice the L2; its loop outermost, the one the cores share), the row loop outside
  the panels of a block (SWAP), the reduce K-blocked by kc (KBLOCK, kc*U floats of a panel in half the L1), and B's
  kc x (p*U) slice copied into a contiguous buffer once per block (PACK: p panels of kc*U, in a quarter of the L2),
  which every row tile then reads at unit stride: the row tile's slice of A (R x kc) is reused from the L1 by the p
  panels, a panel from the L1 by the row tile. Where the outputs outgrow half the last cache level and a whole-K panel
  fits half the L2 (`_whole_k_panel`), no KBLOCK: kc = K, panels read from the L2, blocks of them sized by `_whole_k_block`. [] where
  the loops don't nest so, A has fewer than MIN_PANEL_REUSE row tiles, or PACK doesn't apply."""
  l1, l2 = caches[0], caches[1]
  if (m := _panel_matmul(ast)) is None: return []
  axes, rows, cols, reds, loads, strided = m
  if (one := _panel_operand(ast, strided, rows, cols)) is None: return []
  panel = _upcast_extent(one[0]) * one[1]  # bytes of one panel row
  k, n = reds[0].src[0].arg, cols.src[0].arg
  kc = k if (whole := _whole_k_panel(ast, k * panel, caches)) else next((d for d in range(min(k, (l1 // 2) // panel), 31, -1) if k % d == 0), None)
  if kc is None: return []
  # A's rows are swept once per column block: one panel a block (B's panel then stays in the L1) while the slab of A one
  # K block reads fits twice the L2 (1000^3, 1024^3: 1 MB; same run, one Zen 3 core: 55-60 vs 48-52 GFLOPS with blocks
  # of 7), else blocks of p panels (2048^3: 2 MB, a page a row, 57 vs 44 GFLOPS with blocks of 8)
  others = [u for u in loads if u not in strided]
  a_slab = sum((u.src[0].src[0].arg.size or 0) * u.dtype.itemsize for u in others) * kc // k
  if whole: p = _whole_k_block(n, a_slab, k * panel, caches)
  else:
    top = max(1, min(n // 2, (l2 // 4) // (kc * panel)))
    p = 1 if a_slab <= 2 * l2 else _first_balanced([d for d in range(top, 0, -1) if n % d == 0], lambda d: n // d, cores)
  opts: list[Opt] = []
  cur = ast
  try:
    if p > 1:
      cur = apply_opt(cur, o := Opt(OptOps.SPLIT, axes.index(cols), p))
      opts.append(o)
      inner = next(r for r in kernel_axes(cur) if r.arg[1] is cols.arg[1] and r.arg[0] not in {x.arg[0] for x in axes})
      cur = apply_opt(cur, o := Opt(OptOps.SWAP, kernel_axes(cur).index(_same_axis(cur, rows)), kernel_axes(cur).index(inner)))
      opts.append(o)
    red = kernel_axes(cur).index(_same_axis(cur, reds[0]))
    if kc < k:
      cur = apply_opt(cur, o := Opt(OptOps.KBLOCK, red, kc))
      opts.append(o)
    red = next(i for i, r in enumerate(kernel_axes(cur)) if r.arg[1] is AxisType.REDUCE)
    cur = apply_opt(cur, o := Opt(OptOps.PACK, red, kernel_axes(cur).index(inner) if p > 1 else None))
    opts.append(o)
  except KernelOptError: return []  # e.g. a bf16 matmul: KBLOCK can't accumulate its fp32 sum in the output
  return opts

# column panels a packed row tile is reused by at least: below, copying the tile (its rows come from memory, unprefetched)
# costs more than its unit-stride reads save
MIN_TILE_REUSE = 4
# bytes of B a block of packed panels holds at most, whatever the L2: kernel-local buffers live on the stack of the thread
# that runs the kernel (LLVM allocas), and a worker thread's stack is 8 MB with the usual stack limit, 2 MB (glibc) without one
MAX_PACKED_BLOCK = 1 << 20

def _packed_tiles(ast: UOp, caches: tuple[int, ...], cores: int = 1) -> list[Opt]:
  """Both operands of a tiled matmul (A @ B, register tile U columns x R rows, B's column panels outside A's row tiles,
  see `_loop_order`) packed: the columns in blocks of p panels (SPLIT, the block loop outermost: the one the cores share),
  A's row tiles outside the panels of a block (SWAP), the reduce K-blocked by kc (KBLOCK), B's kc x (p*U) slice copied into
  p contiguous panels once per block and K block (PACK) and the row tile's R x kc slice of A into R contiguous rows once per
  row tile (PACKROWS). The register tile then reads A's tile from the L1 for each of the p panels, which stream from the L2.
  kc: the largest divisor of K (at least 32) whose A tile fits half the L1 (R x kc, `caches[0]`): unpacked, the R rows of a
  power-of-two row length share a few L1 sets and evict each other; all of K where the store casts the sum (`_sum_stored`:
  KBLOCK adds the blocks up in the output). p: near the most panels whose block of B fits the L2 (p x kc x U, `caches[1]`,
  and MAX_PACKED_BLOCK) leaving at least 2 blocks, and blocks enough for the `cores` (`_balanced`) where that leaves
  MIN_TILE_REUSE panels a block, the panel loop padded to whole blocks where no divisor comes close (`_panel_block`); at
  least MIN_TILE_REUSE. [] where the loops don't nest so, A has fewer than MIN_PANEL_REUSE row tiles, p or kc has no such
  value, or an opt doesn't apply."""
  l1, l2 = caches[0], caches[1]
  if (m := _panel_matmul(ast)) is None: return []
  axes, rows, cols, reds, loads, strided = m
  streamed = [u for u in loads if u not in strided and access_strides(u, reds[0], Ops.LOAD)[-1] == 1]
  if (one := _panel_operand(ast, strided, rows, cols)) is None or len(streamed) != 1: return []
  panel_row, tile_col = _upcast_extent(one[0]) * one[1], _upcast_extent(streamed[0]) * streamed[0].dtype.itemsize  # bytes a reduce step reads of each
  k, n = reds[0].src[0].arg, cols.src[0].arg
  # a sum the store casts (a bf16 matmul's bf16 result) can't add its K blocks up in the output (KBLOCK): one block, all of K
  kc = next((d for d in range(min(k, (l1 // 2) // tile_col), 31, -1) if k % d == 0), None) if _sum_stored(ast, reds[0]) else k
  if kc is None: return []
  target = min(n // 2, min(l2, MAX_PACKED_BLOCK) // (kc * panel_row))
  # blocks for the cores; where that leaves too few panels a block, the cache's blocks, and `_shares` splits the rows instead
  if (pp := _panel_block(n, target, cores))[0] < MIN_TILE_REUSE: pp = _panel_block(n, target)
  p, padded = pp
  if p < MIN_TILE_REUSE: return []
  try:
    opts: list[Opt] = []
    cur = ast
    if padded > n:
      cur = apply_opt(cur, pad := Opt(OptOps.PADTO, axes.index(cols), p))
      opts.append(pad)
    cur = apply_opt(cur, split := Opt(OptOps.SPLIT, kernel_axes(cur).index(_same_axis(cur, cols)), p))
    inner = next(r for r in kernel_axes(cur) if r.arg[1] is cols.arg[1] and r.arg[0] not in {x.arg[0] for x in axes})
    cur = apply_opt(cur, swap := Opt(OptOps.SWAP, kernel_axes(cur).index(_same_axis(cur, rows)), kernel_axes(cur).index(inner)))
    opts += [split, swap]
    if kc < k:
      cur = apply_opt(cur, o := Opt(OptOps.KBLOCK, kernel_axes(cur).index(_same_axis(cur, reds[0])), kc))
      opts.append(o)
    # (A's tile already lies as PACKROWS would copy it where it reads all of K from rows a row apart: R x K back to back)
    for op, arg in ((OptOps.PACK, inner), (OptOps.PACKROWS, None))[:1 if kc == k and _rows_back_to_back(streamed[0], k) else 2]:
      red = next(i for i, r in enumerate(kernel_axes(cur)) if r.arg[1] is AxisType.REDUCE)
      cur = apply_opt(cur, o := Opt(op, red, kernel_axes(cur).index(arg) if arg is not None else None))
      opts.append(o)
  except KernelOptError: return []
  return opts

def _rows_back_to_back(ld: UOp, k: int) -> bool:
  """Whether the register tile's rows the load `ld` reads (its one UPCAST range) are `k` elements apart, each row read along
  the reduce at unit stride: the tile's rows over all of K are then one contiguous run."""
  ups = [r for r in ld.src[0].ranges if r.arg[1] is AxisType.UPCAST]
  return len(ups) == 1 and (aff := affine(ld.src[0].src[1], ups[0])) is not None and aff[1] == k

def one_k_block(caps: RendererCaps, k: int, itemsize: int) -> bool:
  """Whether a big matmul over K = `k` elements of A (`itemsize` bytes each) runs as well without K blocks on this target:
  its register tile's rows of A over all of K fit the L1 (`_packed_tiles` packs them whole). A result that is cast (a bf16
  matmul's bf16 result) can be stored by the matmul itself only then: K blocks add up in the output, which must hold the
  float32 sum. (One Zen 4 core, bf16 2048x4096x2048, 64 KB rows in a 32 KB L1: 187 ms whole, 174 ms in K blocks.)"""
  return caps.big_reduce_tile is not None and len(caps.cache_sizes) >= 2 and caps.big_reduce_tile[1] * k * itemsize <= caps.cache_sizes[0]

def _sum_stored(ast: UOp, r: UOp) -> bool:
  """Whether the one reduce over `r` is stored as it is (what KBLOCK needs to add each K block's sum to the output)."""
  reds = [u for u in ast.toposort() if u.op is Ops.REDUCE and r in u.src[1:]]
  return len(reds) == 1 and all(u.op is Ops.STORE for u in ast.toposort() if reds[0] in u.src)

def _panel_block(n: int, target: int, cores: int = 1) -> tuple[int, int]:
  """(p, padded): column panels per block for `_packed_tiles`, n panels at most `target` (from the caches) a block. The
  fewest blocks whose even share of the panels rounds up by at most one panel or 1/32 of them (the last block then has
  masked panels: PADTO), so a panel count no good block size divides (63 panels of 2000 padded columns: blocks of 9, 7
  of them) still gets blocks near the target (16, 4 of them), each packed row tile reused by as many panels and the
  blocks (the loop the cores share) few and even, and `_balanced` for `cores`. Where no block count pads that little, the
  largest divisor of n up to `target` (padded = n) whose block count is balanced, else 1."""
  if target >= 1:
    for b in range(-(-n // target), n + 1):
      p = -(-n // b)
      if b * p - n <= max(1, n // 32) and _balanced(b, cores): return p, b * p
  return next((d for d in range(target, 0, -1) if n % d == 0 and _balanced(n // d, cores)), 1), n

def _whole_k_panel(ast: UOp, panel_bytes: int, caches: tuple[int, ...]) -> bool:
  """Does a packed matmul keep the whole reduce in its panels (no KBLOCK)? Each K block's pass re-reads and re-writes
  the outputs a row tile at a time, rows a stride apart (short runs the prefetchers don't follow): from the last cache
  level while they fit half of it (`caches[-1]`), from memory once they don't. Then, if B's whole-K panel
  (`panel_bytes`) fits half the L2, the panel is read from the L2 instead and each output is written once. Where the
  outputs fit the last level, whole K measured no better than K blocks: they stay K-blocked."""
  stores = [u for u in ast.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM]
  out_bytes = sum((u.src[0].src[0].arg.size or 0) * u.src[0].src[0].dtype.itemsize for u in stores)
  return len(caches) >= 3 and out_bytes > caches[-1] // 2 and panel_bytes <= caches[1] // 2

def _whole_k_block(n: int, a_bytes: int, panel_bytes: int, caches: tuple[int, ...]) -> int:
  """Column panels per block for whole-K panels: A streams past once per block, from the last cache level while it fits a
  quarter of it (one panel a block), else as many panels as fit half the L2 (a divisor of the n panels)."""
  if a_bytes <= caches[-1] // 4: return 1
  return next(d for d in range(max(1, min(n // 2, (caches[1] // 2) // panel_bytes)), 0, -1) if n % d == 0)

# rows of a column reduce read together: each is a stream the hardware prefetcher follows, and prefetchers track some 8-16
ROW_STREAMS = 8
# bytes of one row a column reduce's register tile reads per reduce step (one 64-byte cache line): the ROW_STREAMS rows of
# a K block then advance together, a line each in turn. A wider tile reads a long run of one row before the next row's
# (measured slower the wider, with AVX2 and AVX-512 code alike)
ROW_RUN = 64

def _row_run(ast: UOp, out: UOp) -> int:
  """Elements of the widest global load that varies with the output axis `out` in ROW_RUN bytes (at least 1)."""
  sizes = [u.dtype.scalar().itemsize for u in ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and out in u.src[0].ranges]
  return max(1, ROW_RUN // max(sizes, default=4))

def _column_reduce_blocks(ast: UOp, l1: int, cores: int = 1) -> list[Opt]:
  """Cache blocks for a tiled column reduce (a matvec x @ W, W K x N): the columns in blocks whose partial sums fill a
  quarter of the L1 (`l1` bytes), an outer loop over the blocks (SPLIT, the loop the cores share: at least 2 blocks, and
  `_balanced` for `cores` where a divisor allows), and inside it the
  reduce K-blocked by ROW_STREAMS rows (KBLOCK), so each step reads ROW_STREAMS runs of a quarter L1 of contiguous weights
  while the partial sums stay in the L1. Without it each reduce step reads one register tile of a row (512 bytes) a
  row apart. 1x4096x4096 fp32 on one Zen 3 core (thread CPU time, a loaded VM): 4.9-6.9 -> 7.3-8.8 GFLOPS, numpy 10.7.
  Blocks as wide as a quarter L1 allows even if that leaves only 2 (a 64-column tile: 2048 columns, 8 KB of each weight
  row): the prefetchers stop at a 4 KB page, and 4 blocks of 1024 columns read each row in one-page runs (same Zen 3
  core: 4.2-5.4 ms -> 4.2-4.7 ms, with the 16 x 4 tile). [] where the axis has no such blocks or the reduce doesn't divide."""
  axes = kernel_axes(ast)
  outs = [r for r in axes if r.arg[1] in (AxisType.LOOP, AxisType.GLOBAL)]
  reds = [r for r in axes if r.arg[1] is AxisType.REDUCE]
  if len(outs) != 1 or len(reds) != 1 or outs[0].src[0].op is not Ops.CONST or reds[0].src[0].op is not Ops.CONST: return []
  stores = [u for u in ast.toposort() if u.op is Ops.STORE]
  tile = functools.reduce(lambda a, b: a * b, [r.src[0].arg for r in axes if r.arg[1] is AxisType.UPCAST], 1)
  n = outs[0].src[0].arg
  # at most a quarter L1 of partial sums per block, and at least 2 blocks, balanced for the cores to share where the axis allows
  bound = min((l1 // 4) // (tile * (stores[0].src[1].dtype.itemsize if stores else 4)), n // 2)
  block = _first_balanced([d for d in range(bound, 1, -1) if n % d == 0], lambda d: n // d, cores) or 0
  if block < 2 or reds[0].src[0].arg % ROW_STREAMS != 0: return []
  split = Opt(OptOps.SPLIT, axes.index(outs[0]), block)
  try: cur = apply_opt(ast, split)
  except KernelOptError: return []
  red = kernel_axes(cur).index(next(r for r in kernel_axes(cur) if r.arg[0] == reds[0].arg[0]))
  try: apply_opt(cur, kb := Opt(OptOps.KBLOCK, red, ROW_STREAMS))
  except KernelOptError: return []
  return [split, kb]

def _loads_strided(x: UOp, r: UOp) -> bool:
  """Does some load in x step through memory with a stride other than 0 or 1 along r?"""
  return any(st not in (0, 1) for st in access_strides(x, r, Ops.LOAD))

def _tile_sizes(n: int) -> tuple[int, ...]:
  """n, then the powers of two below it: 16 -> (16, 8, 4, 2), 6 -> (6, 4, 2)."""
  return tuple(dict.fromkeys((n, *_halvings(1 << (n.bit_length() - 1)))))

def _halvings(n: int) -> tuple[int, ...]: return tuple(n >> i for i in range(n.bit_length() - 1))  # 16 -> (16, 8, 4, 2)

def _tile_axes(ast: UOp, axes: list[UOp], out_axes: list[int]) -> list[int]:
  """The two output axes to tile (the inner one, which gets the bigger tile, first). A tile's loads per step are, for each
  load, the product of the tile sizes of the axes its index depends on: a matmul's (i, j) tile loads a column of A and a
  row of B, and a convolution's (cout, w) tile loads a row of input and a column of weights, where an (h, w) tile would
  load a whole input block for one weight. Pick the pair with the fewest loads per multiply-add; ties go to later axes
  (contiguous in memory)."""
  if len(out_axes) < 2: return list(reversed(out_axes))
  deps = [{a for a in out_axes if axes[a] in u.src[0].ranges} for u in ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
  def cost(pair: tuple[int, int]) -> tuple[int, int, int]:
    return (sum((4 if pair[0] in d else 1) * (4 if pair[1] in d else 1) for d in deps), -pair[1], -pair[0])
  return list(min(((b, a) for a in out_axes for b in out_axes if a < b), key=cost))

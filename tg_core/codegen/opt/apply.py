"""Applying kernel optimizations: a list of `Opt`s applied to a kernel AST's ranges.

Ranges are numbered in `kernel_axes` order: output (LOOP) ranges first, then reduce ranges, each by axis id.
UPCAST splits an output range and computes `amt` outputs per thread; UNROLL splits a reduce range and folds `amt`
reduce steps into one loop iteration; LOCAL splits an output range into a workgroup dimension; SPLIT splits an output
range into an outer loop and an inner loop of `amt` iterations (a cache block around the register tile); SWAP exchanges the
nesting of two output loops (`axis` and `arg`, both output ranges): the loop order decides which operand a cache keeps
while the other streams past it (values don't change, only the order the outputs are computed in). TC (`arg`: an index into
`caps.tensor_cores`, axis None; the first opt) computes the kernel's matmul on that tensor core (codegen/opt/tc.py). KBLOCK blocks a reduce
axis (`axis`, a REDUCE range) by `arg`: an outer loop over its blocks (AxisType.KBLOCK) goes just inside the outermost
output loop and the register accumulators sum one block, which is added to the output buffer (the first block stores), so
the operand slices one block reads stay in cache while the output loops inside it pass over them. PADTO rounds an output
axis up to a multiple of `arg`, gating every access that depends on it, so a tile that doesn't divide it can still apply.
PACK (`axis`: a REDUCE range, after KBLOCK) copies the slice of the one operand read with a stride along that reduce
(B's rows in A @ B; or the one value several loads of one buffer make, a bf16 matmul's B rows joined in pairs, see
`packed_value`) into a contiguous kernel-local buffer, once per iteration of the loops that slice depends on, and
the reduce reads the copy at unit stride (see `_pack_operand`). WINDOW (`axis`: an output loop) copies the window a gated load
(a padded convolution's input) reads inside that loop into a kernel-local buffer, gate applied once per element, and the
reduce reads the copy ungated (see `_copy_window`). PACKROWS (same axis and arg) copies the register tile's rows
of the one operand read contiguously along that reduce and strided along an upcast axis (A's rows in A @ B) into a contiguous
block, row after row (see `_pack_rows`)."""
from __future__ import annotations
import functools
from dataclasses import dataclass
from enum import Enum, auto
from typing import TYPE_CHECKING

from tg_core.dtype import AddrSpace, dtypes
from tg_core.uop import Ops
from tg_core.uop.ops import AxisType, KernelInfo, ParamArg, UOp
from tg_core.uop.pattern import PatternMatcher, UPat
from tg_core.uop.rewrite import graph_rewrite
from tg_core.codegen.opt.tc import TCNotApplicable, apply_tc
from tg_core.codegen.vectorize import affine

if TYPE_CHECKING:
  from tg_core.renderer import RendererCaps

class OptOps(Enum):
  UPCAST = auto(); UNROLL = auto(); LOCAL = auto(); NOLOCALS = auto()  # noqa: E702
  SWAP = auto(); SPLIT = auto(); TC = auto(); KBLOCK = auto(); PADTO = auto(); PACK = auto(); PACKROWS = auto(); WINDOW = auto()  # noqa: E702
  def __repr__(self) -> str: return f"OptOps.{self.name}"

@dataclass(frozen=True, order=True)
class Opt:
  op: OptOps
  axis: int | None = None
  arg: int | None = None
  def __repr__(self) -> str: return f"Opt(op={self.op!r}, axis={self.axis}, arg={self.arg})"

class KernelOptError(Exception):
  """An Opt that does not apply to this kernel (bad axis, size not divisible, ...)."""

_KIND_ORDER = {AxisType.GLOBAL: 0, AxisType.LOOP: 0, AxisType.LOCAL: 1, AxisType.UPCAST: 2, AxisType.REDUCE: 3, AxisType.UNROLL: 4, AxisType.KBLOCK: 5}

def kernel_axes(ast: UOp) -> list[UOp]:
  """The kernel's RANGEs: output ranges, then reduce ranges; in each kind by axis id."""
  rngs = [u for u in ast.toposort() if u.op is Ops.RANGE]
  return sorted(rngs, key=lambda r: (_KIND_ORDER.get(r.arg[1], 5), r.arg[0]))

def _range_size(r: UOp) -> int:
  if r.src[0].op is not Ops.CONST: raise KernelOptError("symbolic range size")
  return int(r.src[0].arg)

_OUT = (AxisType.LOOP, AxisType.GLOBAL)
def apply_opt(ast: UOp, opt: Opt, caps: RendererCaps | None = None) -> UOp:
  """`ast` with `opt` applied; TC reads the tensor cores of `caps` (the target's), every other opt only the kernel."""
  axes = kernel_axes(ast)
  if opt.op is OptOps.NOLOCALS: return ast.replace(arg=_with_opts(ast.arg, opt, dont_use_locals=True))
  if opt.op is OptOps.TC:
    tcs = caps.tensor_cores if caps is not None else ()
    if opt.axis is not None or not isinstance(opt.arg, int) or not 0 <= opt.arg < len(tcs):
      raise KernelOptError(f"{opt}: TC takes axis None and arg an index into the target's {len(tcs)} tensor cores (caps.tensor_cores)")
    try: ret = apply_tc(ast, tcs[opt.arg], _OUT)
    except TCNotApplicable as e: raise KernelOptError(f"{opt}: {e}") from None
    return ret.replace(arg=_with_opts(ret.arg, opt))
  if opt.axis is None or not 0 <= opt.axis < len(axes): raise KernelOptError(f"axis {opt.axis} out of range for {len(axes)} axes")
  r = axes[opt.axis]
  if opt.op is OptOps.SWAP: return _swap_loops(ast, opt, axes)
  if opt.op is OptOps.KBLOCK: return _block_reduce(ast, opt, axes)
  if opt.op is OptOps.PACK: return _pack_operand(ast, opt, axes)
  if opt.op is OptOps.WINDOW: return _copy_window(ast, opt, axes)
  if opt.op is OptOps.PACKROWS: return _pack_rows(ast, opt, axes)
  size, amt = _range_size(r), opt.arg or 0
  want = {OptOps.UPCAST: _OUT, OptOps.LOCAL: _OUT, OptOps.SPLIT: _OUT, OptOps.PADTO: _OUT, OptOps.UNROLL: (AxisType.REDUCE,)}[opt.op]
  if r.arg[1] not in want: raise KernelOptError(f"{opt.op} needs an axis of type {want}, axis {opt.axis} is {r.arg[1]}")
  if opt.op is OptOps.PADTO: return _pad_axis(ast, opt, r)
  if amt == 0: amt = size
  if amt <= 1 or size % amt != 0: raise KernelOptError(f"{opt.op} by {amt} doesn't divide axis {opt.axis} of size {size}")
  if opt.op in (OptOps.UPCAST, OptOps.UNROLL) and amt > 32: raise KernelOptError(f"{opt.op} by {amt} is too large")
  if opt.op is OptOps.SPLIT and amt == size: raise KernelOptError(f"SPLIT by {amt} leaves axis {opt.axis} of size {size} whole")
  new_type = {OptOps.UPCAST: AxisType.UPCAST, OptOps.UNROLL: AxisType.UNROLL, OptOps.LOCAL: AxisType.LOCAL, OptOps.SPLIT: r.arg[1]}[opt.op]
  next_id = max(x.arg[0] for x in axes) + 1
  inner = UOp.range(amt, next_id, new_type, r.dtype)
  if amt == size: repl, outer = inner, None
  else:
    outer = UOp.range(size // amt, r.arg[0], r.arg[1], r.dtype)
    repl = outer * amt + inner
  ret = ast.substitute({r: repl})
  # the ENDs that closed r now close the new ranges (outer first)
  ret = graph_rewrite(ret, PatternMatcher([(UPat(Ops.END, name="e"), functools.partial(_fix_end, old=repl, new=(outer, inner))),
                                           (UPat(Ops.REDUCE, name="e"), functools.partial(_fix_reduce, old=repl, new=(outer, inner)))]), name="fix ends")
  return ret.replace(arg=_with_opts(ret.arg, opt))

def nesting(ast: UOp, a: UOp, b: UOp) -> tuple[UOp, UOp] | None:
  """(inner, outer) of ranges a and b when each is closed by exactly one END and one loop nests in the other, else None."""
  ends = {r: [u for u in ast.toposort() if u.op is Ops.END and r in u.src[1:]] for r in (a, b)}
  if len(ends[a]) != 1 or len(ends[b]) != 1: return None
  if ends[a][0] in ends[b][0].toposort(): return a, b
  if ends[b][0] in ends[a][0].toposort(): return b, a
  return None

def _swap_loops(ast: UOp, opt: Opt, axes: list[UOp]) -> UOp:
  """SWAP: the ENDs that close axis `opt.axis` close axis `opt.arg` and the other way round (loops nest as their ENDs do,
  see codegen/linearize.py); the bodies are untouched."""
  if opt.arg is None or not 0 <= opt.arg < len(axes) or opt.arg == opt.axis: raise KernelOptError(f"SWAP needs a second axis, got {opt.arg}")
  a, b = axes[opt.axis], axes[opt.arg]  # type: ignore[index]
  if a.arg[1] not in _OUT or b.arg[1] not in _OUT: raise KernelOptError(f"SWAP needs two output axes, got {a.arg[1]} and {b.arg[1]}")
  # one loop each, nested one in the other: then swapping which END closes which keeps every loop around what uses it
  if nesting(ast, a, b) is None: raise KernelOptError(f"SWAP needs axes {opt.axis} and {opt.arg} to be one loop each, one nested in the other")
  memo: dict[UOp, UOp] = {}
  def fix(u: UOp) -> UOp:
    if (ret := memo.get(u)) is not None: return ret
    if u.op is Ops.END: ret = UOp(Ops.END, u.dtype, (fix(u.src[0]), *[b if s is a else a if s is b else s for s in u.src[1:]]), u.arg)
    elif u.op in (Ops.SINK, Ops.GROUP): ret = u.replace(src=tuple(fix(s) for s in u.src))
    else: ret = u
    memo[u] = ret
    return ret
  ret = fix(ast)
  return ret.replace(arg=_with_opts(ret.arg, opt))

def _pad_axis(ast: UOp, opt: Opt, r: UOp) -> UOp:
  """PADTO: output range r (size s) runs to the next multiple of `arg`, so an UPCAST or SPLIT by `arg` then divides it:
  the tail of a size no tile divides (1000 rows in tiles of 6) runs as one masked tile instead of forcing a small tile on
  the whole axis. Stores that depend on r are gated by r < s. A load contiguous along r is gated too (a vector axis: a
  masked load); any other load reads at min(r, s-1) instead, which needs no gate in its loop (a row of A in a matmul:
  the padded rows compute values that are never stored)."""
  size, amt = _range_size(r), opt.arg or 0
  if amt <= 1 or size % amt == 0 or amt > size: raise KernelOptError(f"PADTO by {amt}: axis {opt.axis} of size {size} has no tail to pad")
  new = UOp.range(-(-size // amt) * amt, r.arg[0], r.arg[1], r.dtype)
  ret = ast.substitute({r: new})
  valid = new < size
  stored = {u.src[0] for u in ret.toposort() if u.op is Ops.STORE}
  subs = {}
  for u in ret.toposort():
    if u.op is not Ops.INDEX or new not in u.src[1].toposort(): continue
    if len(u.src) > 3 or (len(u.src) == 3 and u.src[2].dtype.scalar() is not dtypes.bool):
      raise KernelOptError(f"PADTO: can't gate an INDEX with {len(u.src)} sources")
    if u not in stored and (aff := affine(u.src[1], new)) is not None and aff[1] != 1:
      subs[u] = u.replace(src=(u.src[0], u.src[1].substitute({new: new.minimum(size - 1)}), *u.src[2:]))
    else: subs[u] = u.replace(src=(u.src[0], u.src[1], u.src[2] & valid if len(u.src) == 3 else valid))
  ret = ret.substitute(subs)
  return ret.replace(arg=_with_opts(ret.arg, opt))

def _block_reduce(ast: UOp, opt: Opt, axes: list[UOp]) -> UOp:
  """KBLOCK: reduce range r (size K) -> an outer loop r0 over K/amt blocks and a reduce r1 over one block. The one REDUCE
  over r must be an ADD stored as it is into a global buffer the kernel doesn't read; the store then adds the block's sum
  to what the previous blocks left there (a load gated off in the first block reads 0). r0 nests just inside the
  outermost loop around the store (which a multi-core split or a grid may divide: its iterations own disjoint outputs)."""
  r = axes[opt.axis]  # type: ignore[index]
  if r.arg[1] is not AxisType.REDUCE: raise KernelOptError(f"KBLOCK needs a REDUCE axis, axis {opt.axis} is {r.arg[1]}")
  size, amt = _range_size(r), opt.arg or 0
  if amt <= 1 or amt >= size or size % amt != 0: raise KernelOptError(f"KBLOCK by {amt} doesn't block axis {opt.axis} of size {size}")
  topo = ast.toposort()
  reds = [u for u in topo if u.op is Ops.REDUCE and r in u.src[1:]]
  stores = [u for u in topo if u.op is Ops.STORE and len(reds) == 1 and u.src[1] is reds[0]]
  users = [u for u in topo if len(reds) == 1 and reds[0] in u.src]
  if len(reds) != 1 or reds[0].arg is not Ops.ADD or len(stores) != 1 or users != stores:
    raise KernelOptError(f"KBLOCK needs axis {opt.axis} in one ADD reduce whose value is stored as it is")
  red, st = reds[0], stores[0]
  idx = st.src[0]
  if idx.op is not Ops.INDEX or idx.src[0].op is not Ops.PARAM or len(idx.src) not in (2, 3) or st.src[2:]:
    raise KernelOptError("KBLOCK needs a store into a global buffer (gated by its INDEX only)")
  if any(u.op is Ops.INDEX and u is not idx and u.src[0] is idx.src[0] for u in topo): raise KernelOptError("KBLOCK: the kernel reads its output buffer")
  tops = [e for e in ast.src if e.op is Ops.END and st in e.toposort()]
  if len(tops) != 1: raise KernelOptError("KBLOCK needs the store inside an output loop")
  top = tops[0]
  next_id = max(x.arg[0] for x in axes) + 1
  r0, r1 = UOp.range(size // amt, r.arg[0], AxisType.KBLOCK, r.dtype), UOp.range(amt, next_id, AxisType.REDUCE, r.dtype)
  # the partial sum so far: gated by r0 != 0 (and the store's own gate), which also keeps the load inside r0's loop
  prev = UOp(Ops.INDEX, idx.dtype, (idx.src[0], idx.src[1], idx.src[2] & r0.ne(0) if len(idx.src) == 3 else r0.ne(0))).load()
  new_top = UOp(Ops.END, dtypes.void, (UOp(Ops.END, dtypes.void, (top.src[0], r0)), *top.src[1:]))
  ret = ast.substitute({top: new_top}).substitute({red: prev + red}).substitute({r: r0 * amt + r1})
  ret = graph_rewrite(ret, PatternMatcher([(UPat(Ops.REDUCE, name="e"), functools.partial(_fix_reduce, old=r0 * amt + r1, new=(None, r1)))]),
                      name="fix kblock reduce")
  return ret.replace(arg=_with_opts(ret.arg, opt))

# kernel-local buffers the PACK opt adds are numbered from here (register accumulators count from 0)
PACK_SLOT = 1 << 16

def _pack_operand(ast: UOp, opt: Opt, axes: list[UOp]) -> UOp:
  """PACK: the one global load in the REDUCE over reduce range r (size K) whose index steps by a stride other than 0 or 1
  along r and by 1 along one UPCAST range u (size U; B[k, j] in A @ B, r = k, u = the register tile's columns) reads a
  kernel-local buffer P instead. With `arg` an output loop c (size C) B's index also depends on (a block of column
  panels), P holds C*K*U elements, P[(cc*K + kk)*U + ju] = B[.. cc .. kk .. ju ..]: each panel's K rows of U columns one
  contiguous run; without, K*U. The copy, a loop over (kk, cc, ju), sits in the innermost loop it depends on (the
  linearizer places it; it runs before the loops that read P in the same iteration) and reads B's rows C*U elements at
  a time; the reduce reads P[(c*K + r)*U + u]. The values are the same: B's rows, a stride apart (a power of two maps
  them all to a few cache sets), become panels that stay in cache while the loops inside pass over them. Gated loads
  (PADTO's masked tail) are copied with their gate (masked lanes read 0)."""
  return _pack(ast, opt, axes, rows=False)

def _pack_rows(ast: UOp, opt: Opt, axes: list[UOp]) -> UOp:
  """PACKROWS: the one global load in the REDUCE over reduce range r (size K) whose index steps by 1 along r and depends
  on one UPCAST range u (size U; A[i, k] in A @ B, u = the register tile's rows, a row apart or clamped by PADTO) reads a
  kernel-local buffer P instead: P[(cc*U + ju)*K + kk], the tile's U rows of K (one K block) back to back, with `arg` an
  output loop c (a block of row tiles) as in PACK. The copy reads each row a vector at a time (kk split by the widest
  power of two up to 16 that divides K) in the innermost loop it depends on; the reduce reads P[(c*U + u)*K + r]. The
  rows of A are a row apart: with a power-of-two row length (4 KB at K = 1024) all U rows of a tile map to the same few
  L1 sets and evict each other while the loops inside reuse them; copied back to back they don't collide."""
  return _pack(ast, opt, axes, rows=True)

def _pack(ast: UOp, opt: Opt, axes: list[UOp], rows: bool) -> UOp:
  r = axes[opt.axis]  # type: ignore[index]
  if r.arg[1] is not AxisType.REDUCE: raise KernelOptError(f"{opt.op} needs a REDUCE axis, axis {opt.axis} is {r.arg[1]}")
  if opt.arg is not None and (not 0 <= opt.arg < len(axes) or axes[opt.arg].arg[1] not in _OUT):
    raise KernelOptError(f"{opt.op}'s arg is None or an output axis the packed operand depends on, got {opt.arg}")
  c = axes[opt.arg] if opt.arg is not None else None
  k = _range_size(r)
  reds = [u for u in ast.toposort() if u.op is Ops.REDUCE and r in u.src[1:]]
  if len(reds) != 1: raise KernelOptError(f"{opt.op} needs axis {opt.axis} in one REDUCE, it is in {len(reds)}")
  cands: list[tuple[UOp, UOp]] = []
  for u in reds[0].src[0].toposort():
    if u.op is not Ops.LOAD or len(u.src) != 1 or u.src[0].op is not Ops.INDEX or len(u.src[0].src) not in (2, 3): continue
    idx = u.src[0]
    if idx.src[0].op is not Ops.PARAM or idx.src[0].arg.addrspace is not AddrSpace.GLOBAL: continue
    if (aff := affine(idx.src[1], r)) is None or (aff[1] != 1 if rows else aff[1] in (0, 1)): continue
    ups = [x for x in idx.ranges if x.arg[1] is AxisType.UPCAST]
    if len(ups) != 1: continue
    # (a PADTO'd row axis clamps A's row, min(i, s-1): its stride along the rows isn't affine, and needn't be for the copy)
    if rows or ((ua := affine(idx.src[1], ups[0])) is not None and ua[1] == 1): cands.append((u, ups[0]))
  what = "contiguous along axis {} and strided along an upcast axis" if rows else "strided along axis {} and contiguous along an upcast axis"
  if len(cands) != 1 and (rows or (ld := packed_value(reds[0].src[0], [u for u, _ in cands])) is None or len({x for _, x in cands}) != 1):
    raise KernelOptError(f"{opt.op} needs one load {what.format(opt.axis)} (or several of one buffer, one value), found {len(cands)}")
  if len(cands) == 1: ld = cands[0][0]
  up = cands[0][1]
  if c is not None and c not in (ld.src[0] if ld.op is Ops.LOAD else ld).ranges:
    raise KernelOptError(f"{opt.op}: the packed load doesn't depend on axis {opt.arg}")
  n_up, n_c = _range_size(up), _range_size(c) if c is not None else 1
  next_id = max(x.arg[0] for x in axes) + 1
  cc = UOp.range(n_c, next_id + 2, AxisType.REDUCE, c.dtype) if c is not None else None
  npack = sum(1 for u in ast.toposort() if u.op is Ops.BUFFER and u.arg.addrspace is AddrSpace.REG)
  panel = UOp(Ops.BUFFER, ld.dtype, arg=ParamArg(PACK_SLOT + npack, ld.dtype, n_c * k * n_up, addrspace=AddrSpace.REG))
  if rows:
    # the copy's loop along a row: vectors of the widest power of two that divides K (a plain loop where none does)
    vec = next((v for v in (16, 8, 4, 2) if k % v == 0), 1)
    ju = UOp.range(n_up, next_id + 1, AxisType.REDUCE, up.dtype)
    kv = UOp.range(vec, next_id + 3, AxisType.UPCAST, r.dtype) if vec > 1 else None
    ko = UOp.range(k // vec, next_id, AxisType.REDUCE, r.dtype)
    kk = ko * vec + kv if kv is not None else ko
    def at(c_: UOp | None, k_: UOp, u_: UOp) -> UOp: return ((c_ * n_up + u_) if c_ is not None else u_) * k + k_
    loops: tuple[UOp | None, ...] = (kv, ko, ju, cc)
  else:
    kk, ju = UOp.range(k, next_id, AxisType.REDUCE, r.dtype), UOp.range(n_up, next_id + 1, AxisType.UPCAST, up.dtype)
    def at(c_: UOp | None, k_: UOp, u_: UOp) -> UOp: return ((c_ * k + k_) if c_ is not None else k_) * n_up + u_
    loops = (ju, cc, kk)
  fresh = {r: kk, up: ju, **({c: cc} if c is not None else {})}
  copy: UOp = panel.index(at(cc, kk, ju)).store(ld.src[0].substitute(fresh).load() if ld.op is Ops.LOAD else ld.substitute(fresh))
  for rng in loops:
    if rng is not None: copy = UOp(Ops.END, dtypes.void, (copy, rng))
  ret = ast.substitute({ld: panel.after(copy).index(at(c, r, up)).load()})
  return ret.replace(arg=_with_opts(ret.arg, opt))

def packed_value(body: UOp, loads: list[UOp]) -> UOp | None:
  """The one value of `body` made of `loads` (global loads of one buffer) and constants alone, which PACK copies in their
  place: the smallest node over all of them (a bf16 matmul's B read as two rows, B[2k, j] | B[2k+1, j] << 16, joined
  into its uint32 pair in the copy instead of in a kernel of its own). None when they read different buffers or no such
  node holds only them (their values meet only in the multiply-add with the other operand)."""
  if not loads or any(u.src[0].src[0] is not loads[0].src[0].src[0] for u in loads): return None
  want = set(loads)
  for v in body.toposort():
    if v.op in (Ops.LOAD, Ops.INDEX) or not want <= set(top := v.toposort()): continue
    return v if all(u in want for u in top if u.op is Ops.LOAD) else None
  return None

def _copy_window(ast: UOp, opt: Opt, axes: list[UOp]) -> UOp:
  """WINDOW: the one global load in a REDUCE whose gate varies with its reduce ranges (a padded convolution's input: the
  gate is the padding border, tested at every reduce step) reads a kernel-local buffer S instead. S holds the load's values for every value of
  the ranges it varies with inside output loop o = `axis` (its reduce, upcast and unroll ranges and the output loops
  nested in o), laid out in the order of the load's own strides, largest first (an upcast range last), so the reduce reads S
  as contiguously as the source. The copy, a loop over fresh ranges mirroring those (upcast ones stay upcast: vector
  copies), applies the gate once per element of S (masked lanes read 0) and sits in the innermost loop it depends on, o or
  one outside it; every output loop the load doesn't depend on that runs inside o (the other operand's tiles) then reads
  S with unmasked loads. The values are the same."""
  o = axes[opt.axis]  # type: ignore[index]
  if o.arg[1] not in _OUT: raise KernelOptError(f"WINDOW needs an output loop, axis {opt.axis} is {o.arg[1]}")
  reds = [u for u in ast.toposort() if u.op is Ops.REDUCE]
  cands = [u for red in reds for u in red.src[0].toposort() if u.op is Ops.LOAD and len(u.src) == 1 and u.src[0].op is Ops.INDEX
           and len(u.src[0].src) == 3 and u.src[0].src[0].op is Ops.PARAM and u.src[0].src[0].arg.addrspace is AddrSpace.GLOBAL
           and any(r in u.src[0].src[2].ranges for r in red.src[1:])]
  if len(set(cands)) != 1: raise KernelOptError(f"WINDOW needs one load whose gate varies with a reduce, found {len(set(cands))}")
  ld = cands[0]
  if o not in ld.src[0].ranges: raise KernelOptError(f"WINDOW: the gated load doesn't depend on axis {opt.axis}")
  inner = [r for r in ld.src[0].ranges if r.arg[1] not in _OUT or (r is not o and nesting(ast, r, o) == (r, o))]
  outer = [r for r in ld.src[0].ranges if r not in inner and r is not o]
  if any(nesting(ast, o, r) != (o, r) for r in outer): raise KernelOptError(f"WINDOW: the gated load's other output loops don't nest around axis {opt.axis}")
  if any(r.src[0].op is not Ops.CONST for r in inner): raise KernelOptError("WINDOW needs constant sizes for the staged ranges")
  def stride(r: UOp) -> int:
    aff = affine(ld.src[0].src[1], r)
    return aff[1] if aff is not None and isinstance(aff[1], int) else 0
  order = sorted(inner, key=lambda r: (r.arg[1] is AxisType.UPCAST, -stride(r), r.arg[0]))
  next_id = max(x.arg[0] for x in axes) + 1
  fresh = {r: UOp.range(_range_size(r), next_id + i, AxisType.UPCAST if r.arg[1] is AxisType.UPCAST else AxisType.REDUCE, r.dtype)
           for i, r in enumerate(order)}
  def at(rngs: list[UOp]) -> UOp:
    ret: UOp = UOp.const(o.dtype, 0)
    for r in rngs: ret = ret * _range_size(r) + r
    return ret
  n = functools.reduce(lambda a, b: a * b, [_range_size(r) for r in order], 1)
  npack = sum(1 for u in ast.toposort() if u.op is Ops.BUFFER and u.arg.addrspace is AddrSpace.REG)
  buf = UOp(Ops.BUFFER, ld.dtype, arg=ParamArg(PACK_SLOT + npack, ld.dtype, n, addrspace=AddrSpace.REG))
  # the padding's select around the load (where(gate, load, 0)) is copied with it: else the reduce still computes the gate
  val = next((u for u in ast.toposort() if u.op is Ops.WHERE and u.src[0] is ld.src[0].src[2] and u.src[1] is ld), ld)
  copy: UOp = buf.index(at([fresh[r] for r in order])).store(val.substitute(fresh))
  for r in reversed(order):
    if fresh[r].arg[1] is AxisType.UPCAST: copy = UOp(Ops.END, dtypes.void, (copy, fresh[r]))
  for r in reversed(order):
    if fresh[r].arg[1] is not AxisType.UPCAST: copy = UOp(Ops.END, dtypes.void, (copy, fresh[r]))
  ret = ast.substitute({val: buf.after(copy).index(at(order)).load()})
  return ret.replace(arg=_with_opts(ret.arg, opt))

def _fix_end(e: UOp, old: UOp, new: tuple[UOp | None, UOp]) -> UOp | None:
  if old not in e.src[1:]: return None
  body = e.src[0]
  rest = [s for s in e.src[1:] if s is not old]
  if rest: body = UOp(Ops.END, dtypes.void, (body, *rest))
  if (outer := new[0]) is None: return UOp(Ops.END, dtypes.void, (body, new[1]))
  return UOp(Ops.END, dtypes.void, (UOp(Ops.END, dtypes.void, (body, new[1])), outer))

def _fix_reduce(e: UOp, old: UOp, new: tuple[UOp | None, UOp]) -> UOp | None:
  if old not in e.src[1:]: return None
  rngs = [x for s in e.src[1:] for x in ((s,) if s is not old else tuple(n for n in new if n is not None))]
  return UOp(Ops.REDUCE, e.dtype, (e.src[0], *rngs), e.arg)

def _with_opts(info: KernelInfo | None, opt: Opt, **kw: object) -> KernelInfo:
  info = info or KernelInfo()
  return KernelInfo(info.name, info.axis_types, kw.get("dont_use_locals", info.dont_use_locals), info.applied_opts + (opt,), info.opts_to_apply)  # type: ignore[arg-type]

def apply_opts(ast: UOp, opts: list[Opt] | tuple[Opt, ...], caps: RendererCaps | None = None) -> UOp:
  for o in opts: ast = apply_opt(ast, o, caps)
  return ast

def axis_index(ast: UOp, axis_id: int) -> int:
  """The current index (in kernel_axes order) of the range with this axis id; splitting keeps the outer range's id."""
  for i, r in enumerate(kernel_axes(ast)):
    if r.arg[0] == axis_id: return i
  raise KernelOptError(f"no range with axis id {axis_id}")

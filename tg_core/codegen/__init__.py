"""Codegen: kernel AST -> linear program -> source code, for one renderer, driven by its declared `RendererCaps`.

`full_rewrite_to_sink` runs the passes (simplification, opts, the UPCAST/UNROLL expander, grid dims, reduce lowering,
weak dtypes, transcendental approximations, dtype emulation, renderer rules); `get_program` linearizes the result and
renders it. `program_key` is what, besides the AST, decides the program: the runner cache keys on it; `lowered.py` keeps
programs on disk for later processes under a process-stable form of it."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tg_core.dtype import AddrSpace, dtypes
from tg_core.helpers import BEAM, CHECK_OOB, DEBUG, EMULATED_DTYPES, IGNORE_BEAM_CACHE, NOOPT, SPEC, TRANSCENDENTAL, ContextVar, prod
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp, sint, svmax
from tg_core.uop.rewrite import graph_rewrite
from tg_core.codegen.linearize import linearize
from tg_core.codegen.transcendental import rewrite_transcendental
from tg_core.codegen.dp4a import fold_dp4a, lower_dp4a
from tg_core.codegen.dpbf16 import rewrite_dpbf16
from tg_core.codegen.dtype_emulation import emulated_dtypes, rewrite_emulated_dtypes
from tg_core.codegen.lowerer import ReduceContext, add_gpudims, lower_weak, merge_ends, pm_lower_reduce
from tg_core.codegen.valid import pm_index_given_valid
from tg_core.codegen.expander import expand_upcasts
from tg_core.codegen.opt import KernelOptError, Opt, OptOps, apply_opts, hand_coded_optimizations

if TYPE_CHECKING:
  from tg_core.device import Renderer

@dataclass
class ProgramSpec:
  """A compiled-ready program: its source, launch dims and what it reads and writes."""
  name: str
  src: str
  device: str
  ast: UOp
  # the linear program rendered to `src`; None in a CompiledRunner's spec, which drops it once compiled (a model's kernels kept
  # ~5k UOps, MBs, that nothing reads after render): get_program(p.ast, renderer) under the same knobs re-derives it
  uops: list[UOp] | None
  global_size: list[sint] = field(default_factory=lambda: [1, 1, 1])
  local_size: list[int] | None = None
  vars: list[UOp] = field(default_factory=list)
  globals: list[int] = field(default_factory=list)
  outs: list[int] = field(default_factory=list)
  ins: list[int] = field(default_factory=list)
  estimated_ops: int = 0
  estimated_mem: int = 0

def _symbolic():
  from tg_core.uop.symbolic import symbolic
  return symbolic

# The knobs whose value changes the program codegen (and the engine's choice of opts: BEAM, IGNORE_BEAM_CACHE) produces
# for a kernel: the compile and lowered-program caches key on them (`program_key`, codegen/lowered.py). DEBUG, SPEC and
# TRACK_MATCH_STATS are read too but only print or check, CACHELEVEL and LOWER_CACHE only switch caches
# (tests/test_renderer_contract.py scans codegen, engine and uop for any other).
CODEGEN_KNOBS: tuple[ContextVar, ...] = (NOOPT, BEAM, IGNORE_BEAM_CACHE, TRANSCENDENTAL, EMULATED_DTYPES, CHECK_OOB)

def program_key(ren: Renderer) -> tuple:
  """What, besides the kernel AST, decides the program made for `ren`: its class, its declared record and the codegen knobs."""
  return (type(ren).__module__, type(ren).__qualname__, ren.caps, *(k.value for k in CODEGEN_KNOBS))

def choose_opts(ast: UOp, ren: Renderer) -> list[Opt]:
  """The optimizations for this kernel: the kernel's own `opts_to_apply`, else the heuristic (unless NOOPT or the
  renderer opts out with `caps.default_opts`, as the PYTHON reference does). BEAM search happens in the engine, which can time candidates."""
  if ast.arg is not None and ast.arg.opts_to_apply is not None: return list(ast.arg.opts_to_apply)
  if NOOPT or not ren.caps.default_opts: return []
  return hand_coded_optimizations(ast, ren.caps)

def check_opts(opts: list[Opt], ren: Renderer) -> list[Opt]:
  """Opts the target can run: LOCAL needs workgroups (`caps.has_local`), at most len(caps.local_max) of them, each at most
  local_max[i] threads; PACK and WINDOW a target that runs loops (no `caps.native_reduce_limit`). Raises KernelOptError naming the cap otherwise."""
  locs = [o for o in opts if o.op is OptOps.LOCAL]
  if locs and not ren.caps.has_local: raise KernelOptError(f"{ren.target_name()} has no workgroups (caps.has_local is False): can't apply {locs[0]}")
  if len(locs) > len(lm := ren.caps.local_max): raise KernelOptError(f"{len(locs)} LOCAL opts, {ren.target_name()} has {len(lm)} workgroup dims")
  for o, m in zip(locs, lm):
    if o.arg is not None and o.arg > m: raise KernelOptError(f"{o} exceeds {ren.target_name()}'s caps.local_max {lm}")
  if ren.caps.native_reduce_limit and (packs := [o for o in opts if o.op in (OptOps.PACK, OptOps.PACKROWS, OptOps.WINDOW)]):
    raise KernelOptError(f"{ren.target_name()} reduces whole axes (caps.native_reduce_limit): {packs[0]} needs a target that runs its copy as a loop")
  return opts

def _native_reduce_filter(sink: UOp, ren: Renderer):  # type: ignore[no-untyped-def]
  """For renderers that reduce whole axes at once (`caps.native_reduce_limit`: the most elements one REDUCE may span,
  grid included), which REDUCEs to leave unlowered. None: lower them all into loops."""
  if not (limit := ren.caps.native_reduce_limit): return None
  grid = prod(u.src[0].vmax for u in sink.toposort() if u.op is Ops.SPECIAL)  # a symbolic grid dim counts its largest size
  emu = emulated_dtypes(ren)  # emulated dtypes need the lowered (register accumulator) form
  def keep(red: UOp) -> bool:
    if red.dtype.scalar() in emu: return False
    sizes = [r.src[0].vmax for r in red.src[1:] if r.op is Ops.RANGE]  # a symbolic size counts its largest value
    nested = any(u.op is Ops.REDUCE for u in red.src[0].toposort())  # a reduce inside a reduce stays a loop
    return not nested and grid * prod(sizes) <= limit
  return keep

def _vector_dtypes(ren: Renderer) -> set | None:
  """The dtypes the expander may make vectors of: the target's native ones, those the core emulates for it (their vectors
  are emulated lane-wise in vector ops: a bfloat16 store of a float32 sum encodes a whole vector) and the weak index int;
  None without vector_upcast."""
  return set(ren.caps.native_dtypes) | emulated_dtypes(ren) | {dtypes.weakint} if ren.caps.vector_upcast else None

def simplified_kernel(ast: UOp) -> UOp:
  """The kernel AST as the opts see it: its index arithmetic simplified, and index math its validity implies dropped."""
  return graph_rewrite(graph_rewrite(ast, _symbolic(), name="simplify kernel"), pm_index_given_valid, name="index given valid")

def full_rewrite_to_sink(ast: UOp, ren: Renderer, opts: list[Opt] | None = None) -> UOp:
  """Kernel AST -> the program the linearizer orders, for `ren`. One named pass per line, in order:
  simplify the index arithmetic; drop index math its validity implies; apply the opts (`opts`, else the kernel's own or
  the heuristic's, checked against `ren.caps`); expand UPCAST/UNROLL into straight-line code (vectors with
  caps.vector_upcast); output loops -> grid indices (caps.has_grid); REDUCE -> register accumulators, except the ones
  the renderer reduces whole (caps.native_reduce_limit); merge the ENDs of one range; simplify again; fold a reduce's
  accumulator into its DPBF16 steps and lower them where the target doesn't render them (caps.native_dpbf16), and into its DP4A
  steps where it renders those (caps.native_dp4a); the weak
  index int -> int32/int64; approximate the EXP2/LOG2/SIN the target lacks (caps.native_transcendentals); emulate the small
  floats it lacks (caps.native_dtypes); the renderer's own rules (caps.extra_matcher). With SPEC the result is checked
  against spec_program."""
  sink = simplified_kernel(ast)
  if not ren.caps.native_dp4a: sink = lower_dp4a(sink)
  sink = apply_opts(sink, check_opts(choose_opts(sink, ren) if opts is None else opts, ren), ren.caps)
  sink = expand_upcasts(sink, _vector_dtypes(ren))
  sink = add_gpudims(sink, ren.caps.global_max if ren.caps.has_grid else None)
  sink = graph_rewrite(sink, pm_lower_reduce, ctx=ReduceContext(_native_reduce_filter(sink, ren)), name="lower reduce")
  sink = merge_ends(sink)
  sink = graph_rewrite(sink, _symbolic(), name="simplify lowered")
  sink = rewrite_dpbf16(sink, ren.caps.native_dpbf16)
  if ren.caps.native_dp4a: sink = fold_dp4a(sink)
  sink = lower_weak(sink)
  sink = rewrite_transcendental(sink, ren)
  sink = rewrite_emulated_dtypes(sink, ren)
  if (extra := ren.caps.extra_matcher) is not None: sink = graph_rewrite(sink, extra, ctx=ren, name="renderer rewrites")
  if SPEC:
    from tg_core.uop.spec import spec_program, verify_if_spec
    verify_if_spec(sink, spec_program, "program")
  return sink

def get_program(ast: UOp, ren: Renderer, opts: list[Opt] | None = None) -> ProgramSpec:
  sink = full_rewrite_to_sink(ast, ren, opts)
  uops = linearize(sink)
  if CHECK_OOB:
    from tg_core.codegen.oob import check_static_bounds
    check_static_bounds(uops, ast.arg.name if ast.arg is not None else "kernel")
  if DEBUG >= 5:
    from tg_core.uop.render import print_uops
    print_uops(uops)
  src = ren.render(uops)
  name = ast.arg.name if ast.arg is not None else "kernel"
  specials = sorted([u for u in uops if u.op is Ops.SPECIAL and u.arg.startswith("gidx")], key=lambda u: u.arg)
  global_size = [u.src[0].arg if u.src[0].op is Ops.CONST else u.src[0] for u in specials] or [1]  # symbolic: sym_infer at launch
  lspecials = sorted([u for u in uops if u.op is Ops.SPECIAL and u.arg.startswith("lidx")], key=lambda u: u.arg)
  local_size = [int(u.src[0].arg) for u in lspecials] or None
  params = [u for u in uops if u.op is Ops.PARAM and u.arg.addrspace is AddrSpace.GLOBAL]
  outs = sorted({u.src[0].src[0].arg.slot for u in uops if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM})
  ins = sorted({u.src[0].src[0].arg.slot for u in uops if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM})
  vars_ = sorted([u for u in uops if u.op is Ops.PARAM and u.arg.addrspace is AddrSpace.ALU], key=lambda v: v.arg.name)
  ops = sum(1 for u in uops if u.op in GroupOp.ALU) * max(1, int(prod(svmax(g) for g in global_size)))
  if DEBUG >= 4: print(src)
  return ProgramSpec(name, src, ren.device, ast, uops, global_size, local_size, vars_, [p.arg.slot for p in params], outs, ins, ops)

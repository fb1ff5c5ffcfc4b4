"""Codegen: kernel AST -> linear program -> source code, for one renderer.

Passes, in order: symbolic simplification of the index arithmetic, grid dims (output loops become SPECIAL grid
indices on renderers that launch a grid), REDUCE -> register accumulators, weak dtypes -> concrete widths,
renderer-specific rewrites, then linearization and rendering."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tg_core.dtype import AddrSpace, dtypes
from tg_core.helpers import DEBUG, NOOPT, SPEC, prod
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp, sint, svmax
from tg_core.uop.rewrite import graph_rewrite
from tg_core.codegen.linearize import linearize
from tg_core.codegen.transcendental import rewrite_transcendental
from tg_core.codegen.dtype_emulation import emulated_dtypes, rewrite_emulated_dtypes
from tg_core.codegen.lowerer import ReduceContext, add_gpudims, lower_weak, merge_ends, pm_lower_reduce
from tg_core.codegen.valid import pm_index_given_valid
from tg_core.codegen.opt import Opt, apply_opts, expand_upcasts, hand_coded_optimizations

if TYPE_CHECKING:
  from tg_core.device import Renderer

@dataclass
class ProgramSpec:
  """A compiled-ready program: its source, launch dims and what it reads and writes."""
  name: str
  src: str
  device: str
  ast: UOp
  uops: list[UOp]
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

def choose_opts(ast: UOp, ren: Renderer) -> list[Opt]:
  """The optimizations for this kernel: the kernel's own `opts_to_apply`, else the heuristic (unless NOOPT or the
  renderer opts out, as the PYTHON reference does). BEAM search happens in the engine, which can time candidates."""
  if ast.arg is not None and ast.arg.opts_to_apply is not None: return list(ast.arg.opts_to_apply)
  if NOOPT or not getattr(ren, "default_opts", True): return []
  return hand_coded_optimizations(ast, ren.has_local, loops_only=ren.global_max is None, width=ren.vector_width)

def _native_reduce_filter(sink: UOp, ren: Renderer):  # type: ignore[no-untyped-def]
  """For renderers that reduce whole axes at once (`vectorized_reduce_limit`: the most elements one REDUCE may span,
  grid included), which REDUCEs to leave unlowered. None: lower them all into loops."""
  if not (limit := getattr(ren, "vectorized_reduce_limit", 0)): return None
  grid = prod(u.src[0].vmax for u in sink.toposort() if u.op is Ops.SPECIAL)  # a symbolic grid dim counts its largest size
  from tg_core.codegen.dtype_emulation import emulated_dtypes
  emu = emulated_dtypes(ren)  # emulated dtypes need the lowered (register accumulator) form
  def keep(red: UOp) -> bool:
    if red.dtype.scalar() in emu: return False
    sizes = [r.src[0].vmax for r in red.src[1:] if r.op is Ops.RANGE]  # a symbolic size counts its largest value
    nested = any(u.op is Ops.REDUCE for u in red.src[0].toposort())  # a reduce inside a reduce stays a loop
    return not nested and grid * prod(sizes) <= limit
  return keep

def full_rewrite_to_sink(ast: UOp, ren: Renderer, opts: list[Opt] | None = None) -> UOp:
  sink = graph_rewrite(graph_rewrite(ast, _symbolic(), name="simplify kernel"), pm_index_given_valid, name="index given valid")
  vector_dtypes = (set(ren.supported_dtypes()) - emulated_dtypes(ren)) | {dtypes.weakint} if ren.vector_upcast else None
  sink = expand_upcasts(apply_opts(sink, choose_opts(sink, ren) if opts is None else opts), vector_dtypes)
  sink = add_gpudims(sink, ren.global_max)
  sink = merge_ends(graph_rewrite(sink, pm_lower_reduce, ctx=ReduceContext(_native_reduce_filter(sink, ren)), name="lower reduce"))
  sink = graph_rewrite(sink, _symbolic(), name="simplify lowered")
  sink = lower_weak(sink)
  sink = rewrite_emulated_dtypes(rewrite_transcendental(sink, ren), ren)  # approximate missing EXP2/LOG2/SIN, emulate missing dtypes
  if (extra := getattr(ren, "extra_matcher", None)) is not None: sink = graph_rewrite(sink, extra, ctx=ren, name="renderer rewrites")
  if SPEC:
    from tg_core.uop.spec import spec_program, verify_if_spec
    verify_if_spec(sink, spec_program, "program")
  return sink

def get_program(ast: UOp, ren: Renderer, opts: list[Opt] | None = None) -> ProgramSpec:
  sink = full_rewrite_to_sink(ast, ren, opts)
  uops = linearize(sink)
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

"""Kernel optimizations: applying `Opt`s (apply.py), the heuristic that picks them from the target's declared caps
(heuristic.py), and BEAM search, which times candidates on the device (search.py). The UPCAST/UNROLL expander that
turns the result into straight-line code is a lowering pass: codegen/expander.py."""
from tg_core.codegen.opt.apply import KernelOptError, Opt, OptOps, apply_opt, apply_opts, axis_index, kernel_axes
from tg_core.codegen.opt.heuristic import hand_coded_optimizations

__all__ = ["KernelOptError", "Opt", "OptOps", "apply_opt", "apply_opts", "axis_index", "kernel_axes", "hand_coded_optimizations"]

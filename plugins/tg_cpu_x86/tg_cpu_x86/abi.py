"""The calling convention shared by the renderer (which writes it) and the runtime (which calls it). No heavy imports.

Each kernel is one exported function, named `symbol_name(kernel_name)`:

    i64 KERNEL(i8** bufs, i32* vals, i32 core_id, i32 n_cores)

`bufs[slot]` is the address of the buffer of PARAM slot `slot`; `vals` holds the scalar int variables sorted by name.
With n_cores >= 1 the call runs chunk `core_id` of the kernel's outermost output loop (split into `n_cores`
contiguous chunks) and returns 0. With n_cores == 0 nothing is written: the call returns the trip count of that loop,
or 0 when the kernel can't be split (then it must run as core 0 of 1).
The global `i64 work_symbol(kernel_name)` holds a static estimate of the ops run per iteration of the split loop.
The IR's header has a line `WORK_COMMENT` + the estimate for the whole kernel, which the compiler reads."""
from __future__ import annotations
import re

def symbol_name(kernel_name: str) -> str:
  """The exported symbol of a kernel: its name made a plain C identifier."""
  s = re.sub(r"[^A-Za-z0-9_]", "_", kernel_name) or "kernel"
  return "tg_" + s

def work_symbol(kernel_name: str) -> str: return symbol_name(kernel_name) + "_work"

# the IR header line with the static estimate of the whole kernel's ops (the renderer writes it, the compiler reads it)
WORK_COMMENT = "; tg kernel work: "
def kernel_work(src: str) -> int | None:
  """The whole-kernel work estimate in the header of the IR `src`, None where it has none (IR written by hand)."""
  m = re.search(rf"^{re.escape(WORK_COMMENT)}(\d+)$", src[:1024], re.M)
  return int(m.group(1)) if m is not None else None

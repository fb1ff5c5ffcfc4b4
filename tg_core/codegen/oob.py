"""CHECK_OOB=1: out-of-bounds checks for the global buffer accesses of a kernel, raising `OutOfBoundsError` naming the kernel,
the buffer (its param slot, dtype and size) and the index.

Two parts: `check_static_bounds` (codegen, every renderer) refuses a program whose ungated index can leave [0, size) by its
symbolic range, before it is compiled; `check_indices` (the PYTHON interpreter) checks the index values of every gated and
ungated access while the kernel runs, so it also catches what the symbolic range can't decide. A gated access is only checked
where its gate is on (masked-off lanes read index 0 in every renderer). The knob is part of the compile-cache key."""
from __future__ import annotations
from typing import Any

import numpy as np

from tg_core.dtype import AddrSpace
from tg_core.uop import Ops
from tg_core.uop.ops import UOp

class OutOfBoundsError(IndexError):
  """A kernel indexes a buffer outside [0, size) (found by CHECK_OOB=1)."""

def _describe(kernel: str, param: UOp) -> str:
  return f"kernel {kernel}: buffer {param.arg.slot} ({param.dtype}, {param.arg.size} elements)"

def check_static_bounds(uops: list[UOp], kernel: str) -> None:
  """Raise if an ungated LOAD/STORE into a global buffer of known size can leave [0, size) by its index's vmin/vmax (a vector
  access of n elements at index i covers i..i+n-1)."""
  for u in uops:
    if u.op not in (Ops.LOAD, Ops.STORE) or (x := u.src[0]).op is not Ops.INDEX or len(x.src) != 2: continue
    param = x.src[0]
    while param.op is Ops.AFTER: param = param.src[0]  # an access after a store into the same param
    if param.op is not Ops.PARAM or param.arg.addrspace is not AddrSpace.GLOBAL or param.arg.size is None: continue
    idx, width = x.src[1], (u.dtype if u.op is Ops.LOAD else u.src[1].dtype).count
    if idx.dtype.count != 1: continue  # a gather of lanes: only the interpreter checks it
    lo, hi = idx.vmin, idx.vmax
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and (lo < 0 or hi + width - 1 >= param.arg.size):
      what = f"{idx.render()} in [{lo}, {hi}]" + (f" (a {width}-wide access)" if width > 1 else "")
      raise OutOfBoundsError(f"CHECK_OOB: {_describe(kernel, param)} is indexed by {what}, outside [0, {param.arg.size})")

def check_indices(kernel: str, slot: int, dtype: Any, size: int, idx: Any, gate: Any) -> None:
  """Raise if any index value (where the gate is on) is outside [0, size): the PYTHON interpreter calls this per access."""
  i = np.asarray(idx)
  bad = (i < 0) | (i >= size)
  if gate is not None: bad = bad & np.asarray(gate)
  if np.any(bad):
    first = int(np.broadcast_to(i, np.shape(bad))[bad].reshape(-1)[0])
    raise OutOfBoundsError(f"CHECK_OOB: kernel {kernel}: buffer {slot} ({dtype}, {size} elements) is indexed at {first}, outside [0, {size})")

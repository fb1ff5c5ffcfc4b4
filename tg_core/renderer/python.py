"""The PYTHON renderer: the linear program as a pickled list of (op, dtype, src indices, arg) tuples, with a readable
listing in front. The PYTHON device (tg_core/runtime/ops_python.py) interprets it with numpy."""
from __future__ import annotations
import base64
import pickle

from tg_core.renderer import Renderer, RendererCaps
from tg_core.uop.ops import UOp

class PythonRenderer(Renderer):
  device = "PYTHON"
  # every dtype natively (numpy storage, bfloat16/fp8 rounded on every produce); the grid and workgroup indices are
  # numpy axes; no shared memory; kernels run as written (upcasting only adds interpreted ops); a REDUCE spanning at
  # most 2^24 elements (grid included) runs as one numpy reduction over extra axes
  caps = RendererCaps(global_max=(1 << 31,) * 16, local_max=(1 << 31,) * 3, shared_max=0, default_opts=False, native_reduce_limit=1 << 24)
  def render(self, uops: list[UOp]) -> str:
    idx = {u: i for i, u in enumerate(uops)}
    prog = [(u.op, u.dtype, tuple(idx[s] for s in u.src), u.arg) for u in uops]
    listing = "\n".join(f"# {i:4d} {op.name:12s} {dt!r:28s} {src} {arg!r}" for i, (op, dt, src, arg) in enumerate(prog))
    return listing + "\n" + base64.b64encode(pickle.dumps(prog)).decode()

"""NULL: a device that compiles nothing and runs nothing. Its memory is bookkeeping only (sizes are tracked, no bytes exist),
which makes it useful to test scheduling and codegen without a real device."""
from __future__ import annotations
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tg_core.device import Allocator, BufferSpec, Compiled, Compiler, Renderer
from tg_core.uop.ops import UOp

@dataclass(eq=False)
class NullBuffer:
  """A stand-in for device memory: how many bytes, at what offset of which base."""
  size: int
  offset: int = 0
  base: NullBuffer | None = None

class NullAllocator(Allocator[NullBuffer]):
  def __init__(self, dev: Compiled | None = None):
    super().__init__(dev)
    self.allocated_bytes = 0
    self.peak_bytes = 0
  def _alloc(self, size: int, options: BufferSpec) -> NullBuffer:
    self.allocated_bytes += size
    self.peak_bytes = max(self.peak_bytes, self.allocated_bytes)
    return NullBuffer(size)
  def _free(self, opaque: NullBuffer, options: BufferSpec) -> None: self.allocated_bytes -= opaque.size
  def _copyin(self, dest: NullBuffer, src: memoryview) -> None: pass
  def _copyout(self, dest: memoryview, src: NullBuffer) -> None: pass  # the host memory is left as it was
  def _offset(self, buf: NullBuffer, size_bytes: int, offset_bytes: int) -> NullBuffer:
    return NullBuffer(size_bytes, buf.offset + offset_bytes, buf.base if buf.base is not None else buf)
  def _transfer(self, dest: NullBuffer, src: NullBuffer, sz: int, src_dev: Compiled, dest_dev: Compiled) -> None: pass

class NullRenderer(Renderer):
  device = "NULL"
  def render(self, uops: list) -> str:
    """A summary of the kernel instead of code: the number of uops and how many of each op."""
    ops = Counter(u.op.name if isinstance(u, UOp) else type(u).__name__ for u in uops)
    return f"// NULL kernel: {len(uops)} uops\n" + "".join(f"// {cnt:5d} {op}\n" for op, cnt in sorted(ops.items(), key=lambda x: (-x[1], x[0])))

class NullCompiler(Compiler):
  def compile(self, src: str) -> bytes: return b""

class NullProgram:
  def __init__(self, device: Any, name: str, lib: bytes, **kwargs: Any): self.device, self.name, self.lib = device, name, lib
  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    return 0.0 if wait else None

class NullDevice(Compiled):
  def __init__(self, device: str):
    super().__init__(device, NullAllocator(), [NullRenderer], NullCompiler(), NullProgram)

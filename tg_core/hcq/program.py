"""The kernel-argument segment of an HCQ program and the program base that fills it and dispatches."""
from __future__ import annotations
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING
from tg_core.hcq.errors import HCQQueueError
if TYPE_CHECKING: from tg_core.hcq.device import HCQCompiled

@dataclass(frozen=True)
class KernargLayout:
  """Where each argument lives in the kernarg segment: `nbufs` 64-bit buffer addresses, then `nvals` 32-bit integers, each
  naturally aligned (the C ABI the kernels' LLVM signature implies); `size` is the segment size the code object declares."""
  nbufs: int
  nvals: int
  size: int

  @property
  def explicit_size(self) -> int: return 8 * self.nbufs + 4 * self.nvals

  def __post_init__(self) -> None:
    if self.size < self.explicit_size:
      raise HCQQueueError(f"kernarg segment of {self.size} bytes can't hold {self.nbufs} buffers and {self.nvals} values "
                          f"({self.explicit_size} bytes): the layout doesn't match the kernel's signature")

  def pack(self, bufs: tuple[int, ...], vals: tuple[int, ...] = ()) -> bytes:
    """The explicit arguments; bytes past them (hidden arguments) are the backend's to fill."""
    if len(bufs) != self.nbufs or len(vals) != self.nvals:
      raise HCQQueueError(f"kernel takes {self.nbufs} buffers and {self.nvals} values, got {len(bufs)} and {len(vals)}")
    return struct.pack(f"<{self.nbufs}Q{self.nvals}I", *bufs, *(v & 0xffffffff for v in vals))

class HCQProgram:
  """A loaded kernel on `dev`: its name and kernarg layout. The backend's subclass owns the loaded code and records the dispatch."""
  dev: HCQCompiled
  def __init__(self, name: str, layout: KernargLayout):
    self.name, self.layout = name, layout

  def kernargs(self, bufs: tuple[int, ...], vals: tuple[int, ...], grid: tuple[int, int, int], block: tuple[int, int, int]) -> bytes:
    """The whole kernarg segment of one dispatch; a backend whose kernels read hidden arguments (grid sizes...) fills them here."""
    return self.layout.pack(bufs, vals).ljust(self.layout.size, b"\0")

class HCQRuntime:
  """The runtime program (a device's `runtime`) of an HCQ device: the loaded `prog` and how a kernel's global/local size maps to
  the queue's (grid, block). HCQGraph reads these to record a kernel's dispatch itself."""
  prog: HCQProgram
  def launch_dims(self, global_size: tuple[int, ...], local_size: tuple[int, ...]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    g, loc = (tuple(global_size) + (1, 1, 1))[:3], (tuple(local_size) + (1, 1, 1))[:3]
    return (g[0], g[1], g[2]), (loc[0], loc[1], loc[2])

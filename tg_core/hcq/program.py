"""The kernel-argument segment of an HCQ program and the program base that fills it and dispatches."""
from __future__ import annotations
import struct
from dataclasses import dataclass
from tg_core.hcq.errors import HCQQueueError

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
  """A loaded kernel: its name and kernarg layout. The backend's subclass owns the loaded code and records the dispatch."""
  def __init__(self, name: str, layout: KernargLayout):
    self.name, self.layout = name, layout

"""The memory planner: intermediate buffers whose lifetimes don't overlap share memory.

A buffer lives from the first step (kernel or copy) that uses it to the last. Per device, the planner lays the
intermediates out in one arena (a linear scan over the steps with a first-fit free list, offsets aligned to `ALIGN`
bytes, a multiple of every dtype's alignment) and gives each a sub-buffer view of the arena. Buffers anything outside
the plan can still see (outputs, inputs, buffers a tensor holds) are never planned: the callers name which are free
to share. Only devices whose allocator implements sub-buffers (`Allocator._offset`) are planned.

`NO_MEMORY_PLANNER=1` turns it off."""
from __future__ import annotations
import weakref
from typing import Hashable, Sequence, TypeVar

from tg_core.device import Buffer, Device
from tg_core.dtype import dtypes
from tg_core.helpers import DEBUG, ContextVar

NO_MEMORY_PLANNER = ContextVar("NO_MEMORY_PLANNER", 0)
ALIGN = 256  # bytes: covers every scalar and vector dtype, and the widest vector loads a backend emits

K = TypeVar("K", bound=Hashable)

# the arenas the planner made: a view of one is planner memory (the JIT may plan it again), a view of anything else isn't
arenas: weakref.WeakSet[Buffer] = weakref.WeakSet()

def _round_up(n: int, a: int) -> int: return (n + a - 1) // a * a

def lifetimes(steps: Sequence[Sequence[K]], candidates: set[K]) -> dict[K, tuple[int, int]]:
  """(first step, last step) that uses each candidate."""
  ret: dict[K, tuple[int, int]] = {}
  for i, bufs in enumerate(steps):
    for b in bufs:
      if b in candidates: ret[b] = (ret[b][0], i) if b in ret else (i, i)
  return ret

def assign_offsets(lives: dict[K, tuple[int, int]], nbytes: dict[K, int]) -> tuple[dict[K, int], int]:
  """Byte offsets for buffers with these lifetimes (inclusive step ranges) so that no two alive at once overlap, and
  the arena size. Linear scan over the steps; each buffer takes the first free block that fits (blocks coalesce)."""
  starts: dict[int, list[K]] = {}
  ends: dict[int, list[K]] = {}
  for b, (s, e) in lives.items():
    starts.setdefault(s, []).append(b)
    ends.setdefault(e, []).append(b)
  free: list[tuple[int, int]] = []  # (offset, size) of free blocks below `top`, sorted by offset
  top, offsets = 0, {}
  for step in sorted(set(starts) | set(ends)):
    for b in sorted(starts.get(step, []), key=lambda b: -nbytes[b]):  # larger first: fewer holes
      need = _round_up(max(nbytes[b], 1), ALIGN)
      for i, (off, size) in enumerate(free):
        if size >= need:
          offsets[b] = off
          if size == need: free.pop(i)
          else: free[i] = (off + need, size - need)
          break
      else:
        offsets[b], top = top, top + need  # nothing fits: grow the arena (a free tail was already given back to top)
    for b in ends.get(step, []):
      off, size = offsets[b], _round_up(max(nbytes[b], 1), ALIGN)
      free.append((off, size))
      free.sort()
      merged: list[tuple[int, int]] = []
      for o, s in free:
        if merged and merged[-1][0] + merged[-1][1] == o: merged[-1] = (merged[-1][0], merged[-1][1] + s)
        else: merged.append((o, s))
      free = merged
      if free and free[-1][0] + free[-1][1] == top: top = free.pop()[0]  # the arena's tail is free again: shrink it
  return offsets, max([offsets[b] + _round_up(max(nbytes[b], 1), ALIGN) for b in offsets], default=0)

def plannable_device(device: str) -> bool:
  return not NO_MEMORY_PLANNER and Device[device].allocator.supports_offset

def plan_buffers(steps: Sequence[Sequence[Buffer]], candidates: set[Buffer]) -> dict[Buffer, Buffer]:
  """For each candidate Buffer (a plain buffer or a view of an earlier plan's arena), a view of a new shared arena on its
  device to use instead (not yet allocated). A candidate's contents are not carried over."""
  by_device: dict[str, set[Buffer]] = {}
  for b in candidates:
    if b.options is None and (not b.is_view or b.base in arenas) and plannable_device(b.device): by_device.setdefault(b.device, set()).add(b)
  ret: dict[Buffer, Buffer] = {}
  for device, bufs in by_device.items():
    lives = lifetimes(steps, bufs)
    if len(lives) < 2: continue
    offsets, size = assign_offsets(lives, {b: b.nbytes for b in lives})
    if size >= sum(b.nbytes for b in lives): continue  # nothing shares: keep the buffers as they are
    arena = Buffer(device, size, dtypes.uint8)
    arenas.add(arena)
    for b, off in offsets.items(): ret[b] = Buffer(device, b.size, b.dtype, base=arena, offset=off)
    if DEBUG >= 2: print(f"memory planner: {len(lives)} buffers, {sum(b.nbytes for b in lives)} bytes -> {size} bytes on {device}")
  return ret

__all__ = ["NO_MEMORY_PLANNER", "ALIGN", "arenas", "lifetimes", "assign_offsets", "plan_buffers", "plannable_device"]

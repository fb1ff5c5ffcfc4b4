"""A job of processes (MPI ranks) running the same tg program: which rank this process is, a tensor's shard on it, and the
collectives over tensors (allreduce, allgather, broadcast), which move realized buffers through host memory with MPI's
buffer calls and put the result back on the tensor's device.

The transport is MPI through mpi4py (imported on first use) over the MPI library it finds (Debian's Open MPI in CI):
`mpirun -np 2 python script.py` starts two ranks; a plain `python script.py` is a world of one rank (MPI's singleton init).
Every collective first exchanges what each rank passed (a small pickled tuple, the data itself moves unpickled), so ranks
that disagree on a shape, dtype, op or root all raise RankMismatchError instead of hanging or returning a wrong result.
A rank that never calls the collective its peers are in still hangs them: MPI has no way to tell it from a slow one."""
from __future__ import annotations
import functools
import itertools
import time
from typing import Any, Callable, Literal, Sequence

import numpy as np

from tg_core.device import Device
from tg_core.dtype import DType, _to_np_storage, dtypes
from tg_core.helpers import ceildiv, prod
from tg_core.tensor import Tensor

MPI_FIX = "pip install mpi4py (or tg-core[mpi]) over an MPI library: apt-get install openmpi-bin libopenmpi-dev"
ReduceOp = Literal["sum", "mean", "max"]
REDUCE_OPS: tuple[str, ...] = ("sum", "mean", "max")
# MPI counts are C ints: a message of more elements (allreduce) or bytes (allgather, broadcast) than this needs splitting
MAX_COUNT = 2**31 - 1
# the dtypes MPI reduces natively (mpi4py maps their numpy storage's format); other float types (float16, bfloat16 and fp8, whose
# storage is a uint of their width) reduce in float32
_MPI_NATIVE = (dtypes.float32, dtypes.float64, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32,
               dtypes.uint64)

class MPIUnavailableError(ImportError):
  """mpi4py, or the MPI library it loads, is missing."""

class RankMismatchError(ValueError):
  """The ranks called a collective with arguments that don't fit together (shapes, dtypes, op, root, or different collectives)."""

class World:
  """The job: this process's `rank` among `size` ranks, and the MPI communicator (`comm`) that joins them."""
  def __init__(self, mpi: Any):
    self.mpi, self.comm = mpi, mpi.COMM_WORLD
    self.rank: int = self.comm.Get_rank()
    self.size: int = self.comm.Get_size()
  def barrier(self, poll_s: float = 1e-3) -> None:
    """Wait for every rank, sleeping between polls: MPI's blocking wait spins a core, which a rank computing alone (on a
    machine with fewer cores than ranks) needs."""
    req = self.comm.Ibarrier()
    while not req.Test(): time.sleep(poll_s)
  def __repr__(self) -> str: return f"<World rank {self.rank} of {self.size}>"

@functools.cache
def world() -> World:
  """The job this process belongs to (MPI is initialized on the first call)."""
  try: from mpi4py import MPI
  except (ImportError, RuntimeError, OSError) as e:  # the mpi4py wheel raises RuntimeError when it finds no libmpi
    raise MPIUnavailableError(f"tg_core.distributed needs MPI: {e}. Fix: {MPI_FIX}") from e
  return World(MPI)

def shard_bounds(n: int, parts: int) -> list[tuple[int, int]]:
  """[start, end) of each of `parts` shards of `n` elements, as Tensor.shard splits: ceil(n/parts) each, the last ones smaller (or empty)."""
  sz = ceildiv(n, parts)
  return [(min(i * sz, n), min((i + 1) * sz, n)) for i in range(parts)]

def shard_over_ranks(t: Tensor, axis: int) -> Tensor:
  """This rank's shard of `t` (the same full tensor on every rank) along `axis`. Local: no communication."""
  ax = t._resolve_dim(axis)
  if not isinstance(n := t.shape[ax], int): raise ValueError(f"shard_over_ranks: axis {axis} of shape {t.shape} is symbolic; shard a concrete axis")
  w = world()
  return t.shrink(tuple(shard_bounds(n, w.size)[w.rank] if i == ax else None for i in range(t.ndim)))

def _describe(sig: tuple) -> str:
  kind, shape, dtype, args = sig
  return f"{kind}({', '.join(f'{k}={v!r}' for k, v in args)}) with shape {shape} {dtype}"

def _agree(w: World, kind: str, t: Tensor, free_axis: int | None = None, **args: Any) -> list[tuple[int, ...]]:
  """Exchange what every rank passed; raise RankMismatchError on every rank when they differ (in shape only on `free_axis`).
  Returns every rank's shape. Runs before any local validation, so a bad argument on one rank can't leave the others waiting."""
  shape = tuple(s if isinstance(s, int) else str(s) for s in t.shape)
  if not isinstance(t.device, str): args["sharded"] = True  # refused below on every rank, or a mismatch if only some ranks pass one
  everyone = w.comm.allgather((kind, shape, t.dtype.name, tuple(sorted(args.items()))))
  def key(sig: tuple) -> tuple:
    kind, shape, dtype, a = sig
    return (kind, dtype, a, len(shape), tuple(s for i, s in enumerate(shape) if i != free_axis))
  for r, sig in enumerate(everyone):
    if key(sig) != key(everyone[0]):
      need = "the same shape except on the gathered axis" if free_axis is not None else "the same shape"
      raise RankMismatchError(f"ranks disagree on a collective: rank 0 called {_describe(everyone[0])}, rank {r} called {_describe(sig)}; "
                              f"every rank must call the same collective with {need}, the same dtype and the same arguments")
  if any(isinstance(s, str) for s in shape): raise ValueError(f"{kind}: shape {t.shape} is symbolic; collectives need a concrete shape")
  return [sig[1] for sig in everyone]

def _check_count(kind: str, n: int, unit: str) -> None:
  if n > MAX_COUNT: raise ValueError(f"{kind}: {n} {unit} is more than one MPI message holds ({MAX_COUNT}); split the tensor and call it per piece")

def _host_bytes(src: Tensor) -> memoryview:
  """A flat realized tensor's bytes (`Tensor._flat_realized`: the caller keeps it alive while MPI reads its memory, else a freed
  buffer goes back to the allocator's cache and the collective's result could land in the same memory): a view of its device
  memory where the device gives one (after a sync), else a host copy."""
  buf = src._buffer()
  if buf.allocator.supports_as_buffer: Device[buf.device].synchronize()
  return buf.as_buffer(allow_zero_copy=True)

def _received(shape: tuple[int, ...], dtype: DType, device: str, fill: Callable[[memoryview], None]) -> Tensor:
  """A fresh tensor that `fill` writes as flat bytes: into its device memory where that is writable host memory, else into host
  memory copied in after."""
  from tg_core.engine.realize import buffer_of
  out = Tensor.empty(*shape, dtype=dtype, device=device)
  buf = buffer_of(out.uop.base)
  if buf.allocator.supports_as_buffer and not (mv := buf.as_buffer(force_zero_copy=True)).readonly: fill(mv)
  else:
    host = memoryview(bytearray(buf.nbytes))
    fill(host)
    buf.copyin(host)
  return out

def _single_device(kind: str, t: Tensor) -> str:
  if not isinstance(t.device, str): raise ValueError(f"{kind}: the tensor is sharded over {t.device}; a collective across ranks takes a tensor on one device")
  return t.device

def allreduce(t: Tensor, op: ReduceOp = "sum") -> Tensor:
  """The elementwise `op` ("sum", "mean" or "max") of `t` over all ranks, on every rank, on `t`'s device. float16, bfloat16 and
  fp8 reduce in float32; "mean" of an int tensor is float (like Tensor.mean); bool takes "max" (any) only."""
  w = world()
  shapes = _agree(w, "allreduce", t, op=op)
  device = _single_device("allreduce", t)
  if op not in REDUCE_OPS: raise ValueError(f"allreduce: unknown op {op!r}; use one of {', '.join(REDUCE_OPS)}")
  if t.dtype == dtypes.bool and op != "max": raise TypeError(f"allreduce: op {op!r} on a bool tensor; cast it to an int dtype first (or use op='max' for any)")
  if t.dtype != dtypes.bool and t.dtype not in _MPI_NATIVE:
    if not dtypes.is_float(t.dtype): raise TypeError(f"allreduce: MPI can't reduce {t.dtype}; cast the tensor to a supported dtype first")
    return allreduce(t.cast(dtypes.float32), op).cast(t.dtype)
  npdt = np.dtype(np.uint8) if t.dtype == dtypes.bool else np.dtype(_to_np_storage(t.dtype))  # bool: bytes of 0/1, whose max is any
  _check_count("allreduce", n := prod(shapes[0]), "elements")
  mpi_op = w.mpi.MAX if op == "max" else w.mpi.SUM
  if n == 0: total = Tensor.empty(*t.shape, dtype=t.dtype, device=device)
  else:
    src = t._flat_realized()  # a local: alive until the collective is done
    send = np.frombuffer(_host_bytes(src), dtype=npdt)
    total = _received(shapes[0], t.dtype, device, lambda mv: w.comm.Allreduce(send, np.frombuffer(mv, dtype=npdt), op=mpi_op))
  return total / w.size if op == "mean" else total

def allgather(t: Tensor, axis: int = 0) -> Tensor:
  """Every rank's `t` concatenated along `axis` in rank order, on every rank. Sizes on `axis` may differ (uneven shards)."""
  w = world()
  shapes = _agree(w, "allgather", t, free_axis=t._resolve_dim(axis) if -max(1, t.ndim) <= axis < max(1, t.ndim) else None, axis=axis)
  device = _single_device("allgather", t)
  if t.ndim == 0: raise ValueError("allgather: a 0-d tensor has no axis to gather on; reshape it to (1,) first")
  ax = t._resolve_dim(axis)
  # gather along the first axis, where every rank's part is one contiguous block, then move the axis back (a free view)
  perm = (ax, *[i for i in range(t.ndim) if i != ax])
  moved = t.permute(perm) if ax else t
  counts = [prod(s) * t.dtype.itemsize for s in shapes]
  _check_count("allgather", sum(counts), "bytes")
  out_shape = (sum(s[ax] for s in shapes), *moved.shape[1:])
  if sum(counts) == 0: out = Tensor.empty(*out_shape, dtype=t.dtype, device=device)
  else:
    src = moved._flat_realized()  # a local: alive until the collective is done
    send = _host_bytes(src) if counts[w.rank] else memoryview(bytearray(0))
    displs = list(itertools.accumulate(counts, initial=0))[:-1]
    out = _received(out_shape, t.dtype, device, lambda mv: w.comm.Allgatherv([send, w.mpi.BYTE], [mv, (counts, displs), w.mpi.BYTE]))
  return out.permute(tuple(perm.index(i) for i in range(t.ndim))) if ax else out

def broadcast(t: Tensor, root: int = 0) -> Tensor:
  """Rank `root`'s `t` on every rank (each rank passes a tensor of the same shape and dtype; only root's values count)."""
  w = world()
  shapes = _agree(w, "broadcast", t, root=root)
  device = _single_device("broadcast", t)
  if not (isinstance(root, int) and 0 <= root < w.size): raise ValueError(f"broadcast: root {root!r} is not a rank of this {w.size}-rank job")
  _check_count("broadcast", nbytes := prod(shapes[0]) * t.dtype.itemsize, "bytes")
  if w.rank == root:
    src = t._flat_realized()  # what root sent is what it keeps (a lazy random tensor is drawn once)
    if nbytes: w.comm.Bcast([_host_bytes(src), w.mpi.BYTE], root=root)
    return src
  if nbytes == 0: return Tensor.empty(*t.shape, dtype=t.dtype, device=device)
  return _received(shapes[0], t.dtype, device, lambda mv: w.comm.Bcast([mv, w.mpi.BYTE], root=root))

def average_gradients(params: Sequence[Tensor]) -> None:
  """Data parallel, after backward and before the optimizer step: replace each param's grad by its mean over the ranks. The
  grads of one dtype and device travel together as one flat buffer (one allreduce per dtype and device, not per param)."""
  for i, p in enumerate(params):
    if p.grad is None: raise RuntimeError(f"average_gradients: param {i} (shape {p.shape}) has no gradient; call backward() first")
  groups: dict[tuple[DType, str | tuple[str, ...]], list[Tensor]] = {}
  for p in params: groups.setdefault((p.grad.dtype, p.grad.device), []).append(p)  # type: ignore[union-attr]
  for group in groups.values():
    grads: list[Tensor] = [p.grad for p in group]  # type: ignore[misc]
    mean = allreduce(Tensor.cat(*[g.flatten() for g in grads]), "mean")
    offsets = itertools.accumulate([int(g.numel()) for g in grads], initial=0)
    for p, g, (lo, hi) in zip(group, grads, itertools.pairwise(offsets)): p.grad = mean.shrink(((lo, hi),)).reshape(g.shape)

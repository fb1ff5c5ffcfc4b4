"""Run under mpirun (tests/test_distributed.py does, with -np 2): every collective of tg_core.distributed against numpy (torch for
the bfloat16 rounding) on the devices named as arguments (default: the default device and PYTHON), and the mismatch errors
on every rank. Each rank derives every rank's inputs from the rank's seed, so it computes the reference itself. Prints
"collectives ok on rank R of N" at the end; any failure raises."""
from __future__ import annotations
import sys

import numpy as np
import torch

from tg_core import Device, Tensor, dtypes
from tg_core.distributed import RankMismatchError, allgather, allreduce, average_gradients, broadcast, shard_over_ranks, world

w = world()
R, N = w.rank, w.size

def data(rank: int, shape: tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
  rng = np.random.default_rng(1000 + rank)
  return rng.integers(-50, 50, shape).astype(dtype) if np.issubdtype(dtype, np.integer) else rng.standard_normal(shape).astype(dtype)

def ceil_shard(n: int, r: int) -> slice:
  sz = -(-n // N)
  return slice(min(r * sz, n), min((r + 1) * sz, n))

def expect_mismatch(fn, *needles: str) -> None:
  try: fn()
  except RankMismatchError as e:
    for s in needles: assert s in str(e), f"rank {R}: {s!r} not in {e}"
    return
  raise AssertionError(f"rank {R}: no RankMismatchError")

def check(dev: str) -> None:
  # allreduce: sum, mean, max over float32, float64, int32; the results on the tensor's device
  for npdt in (np.float32, np.float64, np.int32):
    every = np.stack([data(r, (5, 7), npdt) for r in range(N)])
    t = Tensor(data(R, (5, 7), npdt), device=dev)
    for op, ref in (("sum", every.sum(0)), ("max", every.max(0)), ("mean", every.mean(0))):
      got = allreduce(t, op)
      assert got.device == dev
      np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12 if npdt == np.float64 else 1e-6, err_msg=f"allreduce {op} {npdt.__name__} on {dev}")
  # a lazy non-contiguous input, and a 0-d one
  every = np.stack([data(r, (4, 6)) for r in range(N)])
  np.testing.assert_allclose(allreduce(Tensor(data(R, (4, 6)), device=dev).T[1:] * 2).numpy(), (every.transpose(0, 2, 1)[:, 1:] * 2).sum(0), rtol=1e-6)
  np.testing.assert_allclose(allreduce(Tensor(float(R + 1), device=dev)).numpy(), sum(range(1, N + 1)))
  # bfloat16 and float16 reduce in float32 and round once (torch does the rounding for the reference)
  for tdt, torch_dt in ((dtypes.bfloat16, torch.bfloat16), (dtypes.float16, torch.float16)):
    ins = [torch.from_numpy(data(r, (33,))).to(torch_dt) for r in range(N)]
    ref = torch.stack([x.float() for x in ins]).sum(0).to(torch_dt).float().numpy()
    got = allreduce(Tensor(ins[R].float().numpy(), device=dev).cast(tdt))
    assert got.dtype == tdt
    np.testing.assert_array_equal(got.cast(dtypes.float32).numpy(), ref, err_msg=f"allreduce {tdt} on {dev}")
  # bool: max is any
  bools = [np.array([r == 0, r == N - 1, False, True]) for r in range(N)]
  np.testing.assert_array_equal(allreduce(Tensor(bools[R], device=dev), "max").numpy(), np.stack(bools).any(0))

  # shard over the ranks on every axis (uneven: ceil-divided, the last shard smaller or empty), allgather puts it back
  for shape in ((5, 3), (3, 7), (1, 4)):
    full = data(99, shape)  # the same on every rank
    for ax in (0, 1, -1):
      shard = shard_over_ranks(Tensor(full, device=dev), ax)
      np.testing.assert_array_equal(shard.numpy(), full[(slice(None),) * (ax % 2) + (ceil_shard(shape[ax], R),)], err_msg=f"shard {shape} axis {ax}")
      back = allgather(shard, ax)
      assert back.device == dev
      np.testing.assert_array_equal(back.numpy(), full, err_msg=f"allgather of shards {shape} axis {ax} on {dev}")
  # allgather of different sizes on the axis, int64 and bfloat16 (bytes move as they are)
  parts = [data(r, (2, r + 1, 3), np.int64) for r in range(N)]
  np.testing.assert_array_equal(allgather(Tensor(parts[R], device=dev), 1).numpy(), np.concatenate(parts, 1))
  bf = [torch.from_numpy(data(r, (3,))).to(torch.bfloat16) for r in range(N)]
  np.testing.assert_array_equal(allgather(Tensor(bf[R].float().numpy(), device=dev).cast(dtypes.bfloat16)).cast(dtypes.float32).numpy(),
                                torch.cat(bf).float().numpy())

  # broadcast from the last rank
  root = N - 1
  for npdt in (np.float32, np.int64):
    got = broadcast(Tensor(data(R, (3, 4), npdt), device=dev), root)
    assert got.device == dev
    np.testing.assert_array_equal(got.numpy(), data(root, (3, 4), npdt), err_msg=f"broadcast {npdt.__name__} on {dev}")

  # average_gradients: grad of sum(p * x_r) is x_r, so the average is the mean of the ranks' x
  p, q = Tensor.zeros(4, 3, device=dev, requires_grad=True).contiguous(), Tensor.zeros(5, device=dev, requires_grad=True).contiguous()
  ((p * Tensor(data(R, (4, 3)), device=dev)).sum() + (q * Tensor(data(R + 7, (5,)), device=dev)).sum()).backward()
  average_gradients([p, q])
  np.testing.assert_allclose(p.grad.numpy(), np.mean([data(r, (4, 3)) for r in range(N)], 0), rtol=1e-6)
  np.testing.assert_allclose(q.grad.numpy(), np.mean([data(r + 7, (5,)) for r in range(N)], 0), rtol=1e-6)

  if N > 1:
    # ranks that disagree all raise, naming each side; nothing hangs, and the job goes on afterwards
    expect_mismatch(lambda: allreduce(Tensor.ones(3 + R, device=dev)),
                    "rank 0 called allreduce(op='sum') with shape (3,)", "rank 1 called allreduce(op='sum') with shape (4,)")
    expect_mismatch(lambda: allreduce(Tensor.ones(3, device=dev, dtype=dtypes.int32 if R else dtypes.float32)), "(3,) float", "(3,) int")
    expect_mismatch(lambda: allreduce(Tensor.ones(3, device=dev), "sum" if R else "max"), "op='max'", "op='sum'")
    expect_mismatch(lambda: (broadcast if R else allreduce)(Tensor.ones(3, device=dev)), "allreduce", "broadcast")
    expect_mismatch(lambda: broadcast(Tensor.ones(3, device=dev), root=R), "root=0", "root=1")
    expect_mismatch(lambda: allgather(Tensor.ones(2, 3 + R, device=dev), 0), "(2, 3)", "(2, 4)", "except on the gathered axis")
    # a bad argument on one rank only: the others get the mismatch, not a hang
    try: allreduce(Tensor.ones(3, device=dev), "prod" if R == 0 else "sum")
    except RankMismatchError: pass
    else: raise AssertionError(f"rank {R}: no RankMismatchError for an op only rank 0 got wrong")
    np.testing.assert_array_equal(allreduce(Tensor.ones(3, device=dev)).numpy(), np.full(3, N, np.float32))

if __name__ == "__main__":
  for dev in dict.fromkeys(sys.argv[1:] or [Device.DEFAULT, "PYTHON"]): check(dev)
  w.barrier()
  print(f"collectives ok on rank {R} of {N}", flush=True)
  sys.exit(0)

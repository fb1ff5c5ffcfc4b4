"""Train digits_cnn.py's CNN data-parallel over MPI ranks: every rank holds the same model (rank 0's initial weights), computes
on its shard of every batch, and the gradients are averaged across the ranks before the same Adam step on every rank.

  mpirun --allow-run-as-root --oversubscribe -np 2 python examples/data_parallel_mpi.py            # 40 steps of batch 64
  mpirun --allow-run-as-root --oversubscribe -np 2 python examples/data_parallel_mpi.py --check    # + the single-process check

With --check, rank 0 then trains one process on the combined batches and asserts the same test accuracy and the same weights
(within --rtol/--atol), and every rank asserts it holds exactly rank 0's weights.
"""
from __future__ import annotations
import argparse
import sys
import time

import numpy as np

from digits_cnn import DigitsNet, load_digits  # this script's directory is on sys.path
from tg_core import Device, Tensor, nn
from tg_core.distributed import World, allgather, average_gradients, broadcast, shard_over_ranks, world

def train(steps: int, batch: int, lr: float, seed: int, w: World | None) -> tuple[list[Tensor], float]:
  """Train for `steps` batches; data-parallel over `w`'s ranks, or in this process alone when `w` is None. Returns the
  parameters and the test accuracy."""
  Tensor.manual_seed(seed)
  xtr, ytr, xte, yte = load_digits(seed)
  model = DigitsNet()
  params = nn.state.get_parameters(model)
  if w is not None:
    for p in params: p.replace(broadcast(p))  # one start for every rank, whatever each one drew
  opt = nn.optim.Adam(params, lr=lr)
  rng = np.random.default_rng(seed)
  per_epoch = len(xtr) // batch
  for i in range(steps):
    if i % per_epoch == 0: perm = rng.permutation(len(xtr))
    idx = perm[(i % per_epoch) * batch:(i % per_epoch + 1) * batch]
    x, y = Tensor(xtr[idx]), Tensor(ytr[idx])
    if w is not None: x, y = shard_over_ranks(x, 0), shard_over_ranks(y, 0)
    Tensor.training = True
    opt.zero_grad()
    # the mean loss of this rank's shard: with equal shards the mean of the ranks' gradients is the whole batch's gradient
    model(x).sparse_categorical_crossentropy(y).backward()
    if w is not None: average_gradients(opt.params)
    opt.step()
    Tensor.training = False
  acc = float((model(Tensor(xte)).argmax(1).numpy() == yte).mean())
  return params, acc

def flat(params: list[Tensor]) -> np.ndarray: return np.concatenate([p.numpy().reshape(-1) for p in params])

def main() -> None:
  ap = argparse.ArgumentParser(description="Train the digits CNN data-parallel over MPI ranks (start it with mpirun).")
  ap.add_argument("--steps", type=int, default=40, help="batches to train on (default 40)")
  ap.add_argument("--batch", type=int, default=64, help="global batch size, split over the ranks (default 64)")
  ap.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate (default 1e-2)")
  ap.add_argument("--seed", type=int, default=0, help="seed for init, split and shuffling (default 0)")
  ap.add_argument("--check", action="store_true", help="rank 0 also trains single-process on the combined batches and compares")
  # the two runs sum the same float32 products in another order (two half-batch sums, then their mean), so weights differ in
  # the last bits (measured: <= 1.5e-7 absolute after 40 steps, weights ~0.1, float32 eps 1.2e-7); the bounds allow ~10x
  # that, and stay below what a bug moves even through Adam, which is nearly blind to the gradient's scale (measured: a sum
  # instead of a mean moves 166 of the 3818 weights by up to 1e-3 in 3 steps, both ranks on the same half up to 0.06)
  ap.add_argument("--rtol", type=float, default=1e-5, help="--check: relative weight tolerance (default 1e-5)")
  ap.add_argument("--atol", type=float, default=2e-6, help="--check: absolute weight tolerance (default 2e-6)")
  args = ap.parse_args()
  w = world()
  if args.batch % w.size: sys.exit(f"--batch {args.batch} must split evenly over the {w.size} ranks (the gradient mean assumes equal shards)")
  st = time.perf_counter()
  params, acc = train(args.steps, args.batch, args.lr, args.seed, w)
  if w.rank == 0:
    print(f"data parallel over {w.size} ranks: {args.steps} steps of batch {args.batch} ({args.batch // w.size} per rank) in "
          f"{time.perf_counter() - st:.1f} s, test accuracy {acc * 100:.2f}% (device {Device.DEFAULT})", flush=True)
  if not args.check: return
  mine = flat(params)
  every = allgather(Tensor(mine[None]), 0).numpy()
  if not (every == mine).all(): sys.exit(f"rank {w.rank}: the ranks' weights differ (max {np.abs(every - mine).max():.3g}): the ranks diverged")
  ok = 1
  if w.rank == 0:
    ref_params, ref_acc = train(args.steps, args.batch, args.lr, args.seed, None)
    ref = flat(ref_params)
    err = np.abs(mine - ref)
    print(f"single process, batch {args.batch}: test accuracy {ref_acc * 100:.2f}%; weights max abs diff {err.max():.3g}, "
          f"max rel diff {(err / np.maximum(np.abs(ref), 1e-30)).max():.3g} (rtol {args.rtol}, atol {args.atol})", flush=True)
    if acc != ref_acc: print(f"FAIL: accuracy {acc} (data parallel) != {ref_acc} (single process)", flush=True); ok = 0
    if not np.allclose(mine, ref, rtol=args.rtol, atol=args.atol):
      print(f"FAIL: {(~np.isclose(mine, ref, rtol=args.rtol, atol=args.atol)).sum()} of {mine.size} weights differ", flush=True); ok = 0
  w.barrier()  # rank 1 waits here without spinning a core while rank 0 trains the reference
  if not broadcast(Tensor([ok]), 0).item(): sys.exit(1)
  if w.rank == 0: print("check passed: same accuracy and weights as one process on the combined batches")

if __name__ == "__main__": main()

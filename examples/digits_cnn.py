"""Train a small CNN on scikit-learn's 8x8 digits with Adam and report test accuracy.

  python examples/digits_cnn.py                # defaults: 8 epochs, batch 64, Adam lr 1e-2, on the default device
  DEV=PYTHON python examples/digits_cnn.py --epochs 4
"""
from __future__ import annotations
import argparse
import sys
import time

import numpy as np

from tg_core import Device, Tensor, TinyJit, nn

class DigitsNet:
  def __init__(self) -> None:
    self.c1 = nn.Conv2d(1, 8, 3, padding=1)
    self.c2 = nn.Conv2d(8, 16, 3, padding=1)
    self.fc = nn.Linear(16 * 4 * 4, 10)
  def __call__(self, x: Tensor) -> Tensor:
    x = self.c1(x).relu()
    x = self.c2(x).relu().max_pool2d(2)
    return self.fc(x.flatten(1))

def load_digits(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  try: from sklearn.datasets import load_digits as sk_load
  except ImportError: sys.exit("scikit-learn is needed for the digits dataset: pip install scikit-learn")
  d = sk_load()
  x, y = (d.images / 16.0).astype(np.float32)[:, None], d.target.astype(np.int32)
  perm = np.random.default_rng(seed).permutation(len(x))
  n_test = len(x) // 5
  te, tr = perm[:n_test], perm[n_test:]
  return x[tr], y[tr], x[te], y[te]

def train(epochs: int = 8, batch: int = 64, lr: float = 1e-2, seed: int = 0, verbose: bool = True) -> float:
  """Train and return the test accuracy in [0, 1]."""
  Tensor.manual_seed(seed)
  xtr, ytr, xte, yte = load_digits(seed)
  model = DigitsNet()
  opt = nn.optim.Adam(nn.state.get_parameters(model), lr=lr)

  @TinyJit
  def step(x: Tensor, y: Tensor) -> Tensor:
    Tensor.training = True
    opt.zero_grad()
    loss = model(x).sparse_categorical_crossentropy(y).backward()
    opt.step()
    Tensor.training = False
    return loss

  rng = np.random.default_rng(seed)
  steps = len(xtr) // batch
  st = time.perf_counter()
  for ep in range(epochs):
    perm = rng.permutation(len(xtr))
    losses = []
    for i in range(steps):
      idx = perm[i * batch:(i + 1) * batch]
      losses.append(step(Tensor(xtr[idx]), Tensor(ytr[idx])).item())
      if verbose and sys.stdout.isatty(): print(f"\repoch {ep+1}/{epochs} step {i+1}/{steps} loss {losses[-1]:.3f}", end="", flush=True)
    if verbose: print(f"\repoch {ep+1}/{epochs}: mean loss {np.mean(losses):.4f} ({time.perf_counter()-st:.1f} s)" + " " * 20, flush=True)
  preds = model(Tensor(xte)).argmax(1).numpy()
  acc = float((preds == yte).mean())
  if verbose: print(f"test accuracy: {acc*100:.2f}% on {len(yte)} held-out digits (device {Device.DEFAULT})")
  return acc

def main() -> None:
  ap = argparse.ArgumentParser(description="Train a small CNN on scikit-learn's digits with Adam.")
  ap.add_argument("--epochs", type=int, default=8, help="passes over the training set (default 8)")
  ap.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
  ap.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate (default 1e-2)")
  ap.add_argument("--seed", type=int, default=0, help="seed for init, split and shuffling (default 0)")
  args = ap.parse_args()
  train(args.epochs, args.batch, args.lr, args.seed)

if __name__ == "__main__": main()

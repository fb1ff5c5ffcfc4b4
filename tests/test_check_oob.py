"""CHECK_OOB=1: out-of-bounds buffer accesses in kernels raise OutOfBoundsError naming the kernel, the buffer and the index.
Hand-built kernels (the scheduler never makes an out-of-bounds one) read in[f(r)] for r in range(4) from a 4-element buffer."""
from __future__ import annotations
from typing import Callable

import numpy as np
import pytest

from tg_core.codegen.oob import OutOfBoundsError
from tg_core.device import Buffer, Device
from tg_core.dtype import dtypes
from tg_core.engine.realize import get_runner
from tg_core.helpers import Context
from tg_core.tensor import Tensor
from tg_core.uop.ops import KernelInfo, UOp

N = 4

def kernel(dev: str, idx: Callable[[UOp], UOp], gate: Callable[[UOp], UOp] | None = None, name: str = "oob_probe") -> UOp:
  out, inp = UOp.param(0, dtypes.float32, N, dev), UOp.param(1, dtypes.float32, N, dev)
  r = UOp.range(N, 0)
  ld = (inp.index(idx(r), gate(r)) if gate is not None else inp.index(idx(r))).load()
  return UOp.sink(out.index(r).store(ld + 1).end(r), arg=KernelInfo(name=name))

def run(dev: str, ast: UOp) -> np.ndarray:
  out, inp = Buffer(dev, N, dtypes.float32).allocate(), Buffer(dev, N, dtypes.float32).allocate()
  inp.copyin(memoryview(np.arange(N, dtype=np.float32)).cast("B"))
  get_runner(dev, ast)([out, inp], {}, wait=True)
  return np.frombuffer(bytes(out.as_buffer()), dtype=np.float32)

@pytest.fixture(params=["PYTHON", "CPU"])
def dev(request: pytest.FixtureRequest) -> str:
  if request.param not in Device: pytest.skip(reason=f"device {request.param} is not registered (its plugin is not installed)")
  return Device.canonicalize(request.param)

def test_in_bounds_kernel_runs(dev: str) -> None:
  with Context(CHECK_OOB=1):
    np.testing.assert_equal(run(dev, kernel(dev, lambda r: (r + 1) % N)), np.roll(np.arange(N), -1) + 1)
    np.testing.assert_equal(run(dev, kernel(dev, lambda r: r + 1, lambda r: r < N - 1)), [2, 3, 4, 1])  # the gate keeps r+1 in bounds

@pytest.mark.parametrize("idx,bad", [(lambda r: r + 1, "[1, 4]"), (lambda r: r - 2, "[-2, 1]"), (lambda r: r * 2, "[0, 6]")])
def test_static_out_of_bounds_raises(dev: str, idx: Callable, bad: str) -> None:
  with Context(CHECK_OOB=1):
    with pytest.raises(OutOfBoundsError) as e: run(dev, kernel(dev, idx, name=f"oob_static_{bad}"))
  msg = str(e.value)
  assert f"kernel oob_static_{bad}" in msg and "buffer 1 (dtypes.float32, 4 elements)" in msg, msg

def test_runtime_out_of_bounds_raises_on_python() -> None:
  # a gate that lets r + 1 reach 4: only the running interpreter sees the value
  dev = "PYTHON"
  with Context(CHECK_OOB=1):
    with pytest.raises(OutOfBoundsError, match=r"kernel oob_runtime: buffer 1 \(dtypes.float32, 4 elements\) is indexed at 4"):
      run(dev, kernel(dev, lambda r: r + 1, lambda r: r < N + 5, name="oob_runtime"))
    with pytest.raises(OutOfBoundsError, match="is indexed at -1"):
      run(dev, kernel(dev, lambda r: r - 1, lambda r: r < N + 5, name="oob_runtime_neg"))

def test_knob_is_in_the_compile_cache_key(dev: str) -> None:
  ast = kernel(dev, lambda r: r + 1, name="oob_key")
  with Context(CHECK_OOB=0): unchecked = get_runner(dev, kernel(dev, lambda r: (r + 1) % N, name="oob_key_ok"))
  with Context(CHECK_OOB=1):
    assert get_runner(dev, kernel(dev, lambda r: (r + 1) % N, name="oob_key_ok")) is not unchecked
    with pytest.raises(OutOfBoundsError): get_runner(dev, ast)
  # compiled without the knob, the same kernel is not checked (and its runner is not reused with the knob on)
  with Context(CHECK_OOB=0): get_runner(dev, ast)
  with Context(CHECK_OOB=1):
    with pytest.raises(OutOfBoundsError): get_runner(dev, ast)

@pytest.mark.parametrize("fn", [lambda x: x[1:3] + 1, lambda x: x.reshape(2, 3).T.contiguous(), lambda x: x.pad((2, 1)).sum(), lambda x: x.flip(0)[::2],
                                lambda x: x.reshape(1, 1, 2, 3).max_pool2d((2, 2), stride=1, padding=1), lambda x: x.cumsum(0), lambda x: x[Tensor([5, 0, 2])],
                                lambda x: x.reshape(2, 3) @ x.reshape(3, 2)])
def test_real_kernels_pass_the_checks(dev: str, fn: Callable) -> None:
  # the kernels the scheduler makes are in bounds: the checks must not fire on them
  x = np.arange(6, dtype=np.float32) - 2
  want = fn(Tensor(x, device=dev)).numpy()
  with Context(CHECK_OOB=1): got = fn(Tensor(x, device=dev)).numpy()
  np.testing.assert_equal(got, want)

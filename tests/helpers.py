"""Shared test helpers: compare tg ops against torch CPU (forward values, dtype, shape, gradients)."""
from __future__ import annotations
from typing import Any, Callable, Sequence

import numpy as np
import pytest

from tg_core.dtype import DType, dtypes
from tg_core.tensor import Tensor

torch = pytest.importorskip("torch")

TORCH_TO_TG: dict[Any, DType] = {
  torch.bool: dtypes.bool, torch.int8: dtypes.int8, torch.uint8: dtypes.uint8, torch.int16: dtypes.int16, torch.uint16: dtypes.uint16,
  torch.int32: dtypes.int32, torch.uint32: dtypes.uint32, torch.int64: dtypes.int64, torch.uint64: dtypes.uint64,
  torch.float16: dtypes.float16, torch.bfloat16: dtypes.bfloat16, torch.float32: dtypes.float32, torch.float64: dtypes.float64}
TG_TO_TORCH = {v: k for k, v in TORCH_TO_TG.items()}

def to_numpy(t: Any) -> np.ndarray:
  if isinstance(t, Tensor): return t.numpy()
  if t.dtype == torch.bfloat16: t = t.float()
  return t.detach().cpu().numpy()

def compare(name: str, tg_val: Any, torch_val: Any, atol: float, rtol: float, check_dtype: bool = True) -> None:
  assert tuple(tg_val.shape) == tuple(torch_val.shape), f"{name}: shape mismatch tg={tg_val.shape} torch={tuple(torch_val.shape)}"
  if check_dtype and isinstance(tg_val, Tensor):
    assert tg_val.dtype == TORCH_TO_TG[torch_val.dtype], f"{name}: dtype mismatch tg={tg_val.dtype} torch={torch_val.dtype}"
  a, b = to_numpy(tg_val), to_numpy(torch_val)
  if a.dtype == np.bool_ or b.dtype == np.bool_: np.testing.assert_equal(a, b, err_msg=name)
  else: np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), atol=atol, rtol=rtol, err_msg=name, equal_nan=True)

def prepare_inputs(shapes: Sequence[tuple[int, ...]] | None, vals: Sequence[Any] | None, low: float, high: float, dtype: Any, requires_grad: bool,
                   seed: int = 0) -> tuple[list[Any], list[Tensor]]:
  rng = np.random.default_rng(seed)
  if vals is not None: arrs = [np.asarray(v) for v in vals]
  else:
    assert shapes is not None
    npdt = np.dtype(dtype) if dtype is not None else np.float32
    if np.issubdtype(npdt, np.integer): arrs = [rng.integers(int(low), int(high), size=s).astype(npdt) for s in shapes]
    elif npdt == np.bool_: arrs = [rng.random(s) > 0.5 for s in shapes]
    else: arrs = [rng.uniform(low, high, size=s).astype(npdt) for s in shapes]
  ts = [torch.tensor(a, requires_grad=requires_grad and np.issubdtype(a.dtype, np.floating)) for a in arrs]
  tgs = [Tensor(a, requires_grad=requires_grad and np.issubdtype(a.dtype, np.floating)) for a in arrs]
  return ts, tgs

def helper_test_op(shapes: Sequence[tuple[int, ...]] | None, torch_fxn: Callable, tg_fxn: Callable | None = None, atol: float = 1e-6,
                   rtol: float = 1e-3, grad_atol: float = 1e-4, grad_rtol: float = 1e-3, forward_only: bool = False, vals: Sequence[Any] | None = None,
                   low: float = -2, high: float = 2, dtype: Any = None, check_dtype: bool = True) -> None:
  """Run `torch_fxn` on torch CPU tensors and `tg_fxn` (default: the same function) on tg Tensors holding the same data;
  compare output shape, dtype (exactly) and values, then the gradients of the inputs for sum(output)."""
  tg_fxn = tg_fxn or torch_fxn
  ts, tgs = prepare_inputs(shapes, vals, low, high, dtype, not forward_only)
  out = torch_fxn(*ts)
  ret = tg_fxn(*tgs)
  compare("forward", ret, out, atol, rtol, check_dtype)
  if forward_only or not out.dtype.is_floating_point or not any(t.requires_grad for t in ts): return
  (out.float().square().mean() if out.numel() else out.sum()).backward()
  grads = [t for t in tgs if t.requires_grad]
  tg_grads = (ret.float().square().mean() if ret.numel() else ret.sum()).gradient(*grads, materialize_grads=True)
  for i, (tt, tgg) in enumerate(zip([t for t in ts if t.requires_grad], tg_grads)):
    if tt.grad is None: continue
    compare(f"grad {i}", tgg, tt.grad, grad_atol, grad_rtol, check_dtype=False)

def helper_test_exception(shapes: Sequence[tuple[int, ...]] | None, torch_fxn: Callable, tg_fxn: Callable, expected: type[BaseException] | tuple,
                          vals: Sequence[Any] | None = None) -> None:
  """Both torch and tg must raise `expected` (the same exception class torch raises) for this bad input."""
  ts, tgs = prepare_inputs(shapes, vals, -2, 2, None, False)
  with pytest.raises(expected): torch_fxn(*ts)
  with pytest.raises(expected): tg_fxn(*tgs)

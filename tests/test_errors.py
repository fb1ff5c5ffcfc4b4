"""Bad input raises the exception class torch raises (checked against torch itself, case by case)."""
from __future__ import annotations
from typing import Callable

import pytest

from tg_core import Tensor

torch = pytest.importorskip("torch")

CASES: dict[str, tuple[Callable, Callable]] = {
  "broadcast_mismatch": (lambda m: m.ones(2, 3) + m.ones(4, 3), None),
  "sum_bad_dim": (lambda m: m.ones(2, 3).sum(5), None),
  "matmul_mismatch": (lambda m: m.ones(2, 3) @ m.ones(2, 3), None),
  "reshape_numel": (lambda m: m.ones(2, 3).reshape(4, 2), None),
  "permute_repeat": (lambda m: m.ones(2, 3).permute(0, 0), None),
  "bitwise_float": (lambda m: m.ones(2, 3).float() & 1, None),
  "expand_bad": (lambda m: m.ones(2, 3).expand(3, 3), None),
  "transpose_bad_dim": (lambda m: m.ones(2, 3).transpose(0, 5), None),
  "index_out_of_range": (lambda m: m.ones(2, 3)[5], None),
  "too_many_indices": (lambda m: m.ones(2, 3)[0, 0, 0], None),
  "cat_shape_mismatch": (lambda m: m.cat([m.ones(2, 3), m.ones(2, 4)], 0), None),
  "stack_shape_mismatch": (lambda m: m.stack([m.ones(2, 3), m.ones(2, 4)]), None),
  "squeeze_bad_dim": (lambda m: m.ones(2, 3).squeeze(4), None),
  "unsqueeze_bad_dim": (lambda m: m.ones(2, 3).unsqueeze(5), None),
  "flatten_bad_order": (lambda m: m.ones(2, 3, 4).flatten(2, 1), None),
  "max_empty": (lambda m: m.ones(0).max(), None),
  "argmax_bad_dim": (lambda m: m.ones(2, 3).argmax(3), None),
  "gather_bad_dim": (lambda m: m.ones(2, 3).gather(4, m.zeros(2, 3, dtype=m.int64 if m is torch else None).long()), None),
  # note: `-bool_tensor` is logical not in tinygrad (and tg), an error in torch: tg keeps tinygrad's meaning
  "bool_sub": (lambda m: m.ones(2, dtype=m.bool) - m.ones(2, dtype=m.bool), None),
  "int_pow_negative": (lambda m: m.ones(2, dtype=m.int32) ** -1, None),
  "softmax_bad_dim": (lambda m: m.ones(2, 3).softmax(3), None),
  "conv_channels": (lambda m: (m.nn.functional.conv2d if m is torch else Tensor.conv2d)(m.ones(1, 3, 5, 5), m.ones(2, 4, 3, 3)), None),
  "split_bad_dim": (lambda m: m.ones(2, 3).split(1, 4), None),
}

class _TG:
  """The torch names the cases use, mapped to tg."""
  bool, int32, int64, float32 = "bool", "int32", "int64", "float32"
  ones, zeros = staticmethod(Tensor.ones), staticmethod(Tensor.zeros)
  cat, stack = staticmethod(lambda ts, dim=0: ts[0].cat(*ts[1:], dim=dim)), staticmethod(lambda ts, dim=0: Tensor.stack(*ts, dim=dim))

@pytest.mark.parametrize("name", list(CASES))
def test_same_exception_as_torch(name: str):
  fn = CASES[name][0]
  with pytest.raises(Exception) as te: fn(torch)
  expected = type(te.value)
  with pytest.raises(expected): fn(_TG)

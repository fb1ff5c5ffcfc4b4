"""Tensor methods: reduce ops. Built only from Tensor's core primitives (see tg_core/tensor.py).

Index outputs (argmax, argmin, cummax/cummin indices, sort/argsort/topk indices) are int32, tinygrad's default int (torch: int64).
Scans (cumsum, cumprod) accumulate in `sum_acc_dtype` like `sum`/`prod` (int8/bool -> int32, tinygrad; torch: int64).
"""
from __future__ import annotations
import functools
import math
import string
from typing import TYPE_CHECKING, Sequence

from tg_core.dtype import DTypeLike, dtypes, least_upper_float, sum_acc_dtype
from tg_core.helpers import argsort, prod, round_up
from tg_core.uop import Ops
from tg_core.uop.ops import identity_element, smax

if TYPE_CHECKING:
  from tg_core.tensor import Tensor

def _axes(t: Tensor, axis: int | Sequence[int] | None) -> tuple[int, ...]:
  """Normalized reduce axes (None -> all); resolving raises IndexError like torch."""
  if axis is None: return tuple(range(t.ndim))
  axes = tuple(t._resolve_dim(a) for a in ((axis,) if isinstance(axis, int) else axis))
  return () if t.ndim == 0 else axes

def _isnan(t: Tensor) -> Tensor: return t.ne(t) if dtypes.is_float(t.dtype) else t.full_like(False, dtype=dtypes.bool)

def _inverse(t: Tensor) -> Tensor:
  """An order-reversing map (x -> -x, ~x for ints, not for bool), its own inverse."""
  return -t if dtypes.is_float(t.dtype) else ~t if dtypes.is_int(t.dtype) else t.logical_not()

def _arange_along(n: int, axis: int, ndim: int, start: int = 0, step: int = 1) -> Tensor:
  """start + step*i laid along `axis` of an ndim-dim tensor (1 elsewhere), int32."""
  from tg_core.tensor import Tensor
  return Tensor.arange(start, start + step * n, step).reshape(tuple(n if i == axis else 1 for i in range(ndim)))

def _windows(x: Tensor, k: int) -> Tensor:
  """Sliding windows of size k, stride 1, over the last axis: (..., L) -> (..., L-k+1, k), out[..., i, j] = x[..., i+j].
  Lazily, with movement ops only: repeat k+1 times, flatten, and cut rows of length L+1 so each row shifts by one."""
  pre, L = x.shape[:-1], x.shape[-1]
  keep = (None,) * len(pre)
  x = x.reshape(*pre, 1, L).expand(*pre, k + 1, L).reshape(*pre, (k + 1) * L).shrink(keep + ((0, k * (L + 1)),))
  return x.reshape(*pre, k, L + 1).shrink(keep + ((0, k), (0, L - k + 1))).transpose(-1, -2)

def _cumalu(x: Tensor, axis: int, op: Ops) -> Tensor:
  """Inclusive scan along `axis` as a windowed reduce (O(n^2) work, one kernel)."""
  n = x.shape[axis]
  t = x.transpose(axis, -1).pad(((0, 0),) * (x.ndim - 1) + ((n - 1, 0),), value=identity_element(op, x.dtype))
  w = _windows(t, n)
  red = w.sum(-1) if op is Ops.ADD else w.prod(-1) if op is Ops.MUL else w.max(-1)
  return red.transpose(axis, -1)

_SPLIT = 256
def _split_cumalu(x: Tensor, axis: int, op: Ops) -> Tensor:
  """Scan along `axis`; long axes scan in blocks of _SPLIT, then add the scanned block totals (two stages, like tinygrad)."""
  axis = x._resolve_dim(axis)
  if op in (Ops.ADD, Ops.MUL): x = x.cast(sum_acc_dtype(x.dtype))
  if x.ndim == 0 or 0 in x.shape: return x
  if (s := x.shape[axis]) <= _SPLIT * 2: return _cumalu(x, axis, op)
  v, t = identity_element(op, x.dtype), x.transpose(axis, -1)
  pre = t.shape[:-1]
  nb = round_up(s, _SPLIT) // _SPLIT
  ret = _cumalu(t.pad(((0, 0),) * len(pre) + ((nb * _SPLIT - s, 0),), value=v).reshape(*pre, nb, _SPLIT), -1, op)
  # exclusive scan of the block totals, broadcast over each block
  base = _cumalu(ret.shrink((None,) * (len(pre) + 1) + ((_SPLIT - 1, _SPLIT),)).reshape(*pre, nb), -1, op)
  base = base.pad(((0, 0),) * len(pre) + ((1, 0),), value=v).shrink((None,) * len(pre) + ((0, nb),))
  base = base.reshape(*pre, nb, 1).expand(*pre, nb, _SPLIT)
  def fix(y: Tensor) -> Tensor: return y.reshape(*pre, nb * _SPLIT).shrink((None,) * len(pre) + ((nb * _SPLIT - s, nb * _SPLIT),)).transpose(axis, -1)
  a, b = fix(ret), fix(base)
  return a + b if op is Ops.ADD else a * b if op is Ops.MUL else a.maximum(b)

class ReduceMixin:
  __slots__ = ()

  # *** arg reductions ***
  def argmax(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
    """Index (int32) of the first maximum along `axis` (flattened if None); NaN counts as the maximum, like torch.
    `Tensor([1, 3, 3]).argmax() -> 1`"""
    from tg_core.tensor import Tensor
    if axis is None:
      if self.numel() == 0: raise IndexError("argmax(): Expected reduction dim to be specified for input.numel() == 0.")
      ret = self.flatten().argmax(0)
      return ret.reshape((1,) * self.ndim) if keepdim else ret
    axis = self._resolve_dim(axis)
    if self.ndim == 0: return Tensor.zeros((), dtype=dtypes.int32, device=self.device)
    if (n := self.shape[axis]) == 0: raise IndexError(f"argmax(): Expected reduction dim {axis} to have non-zero size.")
    m = self.eq(self.max(axis, keepdim=True))
    if dtypes.is_float(self.dtype): m = m | _isnan(self)
    # first index wins: score n-i at index i, take the max score
    idx = m.where(_arange_along(n, axis, self.ndim, n, -1), 0).max(axis, keepdim=keepdim)
    return (n - idx).cast(dtypes.int32)

  def argmin(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
    """Index (int32) of the first minimum along `axis` (flattened if None); NaN counts as the minimum, like torch.
    `Tensor([3, 1, 1]).argmin() -> 1`"""
    return _inverse(self).argmax(axis, keepdim)

  # *** boolean reductions ***
  def any(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
    """True where any element along `axis` is nonzero (an empty reduction is False). `Tensor([0, 2]).any() -> True`"""
    b = self.cast(dtypes.bool)
    if self.numel() == 0: return b.sum(axis, keepdim).ne(0)  # max has no identity on empty dims; a sum does
    return b.max(axis, keepdim)

  def all(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
    """True where every element along `axis` is nonzero (an empty reduction is True). `Tensor([0, 2]).all() -> False`"""
    return self.logical_not().any(axis, keepdim).logical_not()

  # *** scans ***
  def cumsum(self: Tensor, axis: int = 0, dtype: DTypeLike | None = None) -> Tensor:  # type: ignore[misc]
    """Cumulative sum along `axis`; ints and bool accumulate in `sum`'s dtype (int32 for small ints, tinygrad; torch: int64), or in
    `dtype` (a DType or its name) when given, like torch. `Tensor([1, 2, 3]).cumsum() -> [1, 3, 6]`"""
    return _split_cumalu(self, axis, Ops.ADD) if dtype is None else _split_cumalu(self.cast(dtype), axis, Ops.ADD).cast(dtype)

  def cumprod(self: Tensor, axis: int, dtype: DTypeLike | None = None) -> Tensor:  # type: ignore[misc]
    """Cumulative product along `axis` (accumulating in `prod`'s dtype, or in `dtype`). `Tensor([1, 2, 3]).cumprod(0) -> [1, 2, 6]`"""
    return _split_cumalu(self, axis, Ops.MUL) if dtype is None else _split_cumalu(self.cast(dtype), axis, Ops.MUL).cast(dtype)

  def cummax(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """Cumulative max along `axis`: (values, int32 indices). Like torch, a tie takes the latest index and NaN propagates.
    `Tensor([1, 3, 2]).cummax(0) -> ([1, 3, 3], [0, 1, 1])`"""
    from tg_core.tensor import Tensor
    axis = self._resolve_dim(axis)
    if self.ndim == 0 or 0 in self.shape: return self, Tensor.zeros(self.shape, dtype=dtypes.int32, device=self.device)
    values = _split_cumalu(self.detach(), axis, Ops.MAX)
    n = self.shape[axis]
    x, v = self.transpose(axis, -1), values.transpose(axis, -1)
    # match[..., i, j]: x[i] is the running max at j (NaN matches NaN), for i <= j; take the largest such i
    match = x.detach().unsqueeze(-1).eq(v.unsqueeze(-2))
    if dtypes.is_float(self.dtype): match = match | (_isnan(x.detach()).unsqueeze(-1) & _isnan(v).unsqueeze(-2))
    i_idx, j_idx = Tensor.arange(n).reshape(n, 1), Tensor.arange(n).reshape(1, n)
    idx = (match & (i_idx <= j_idx)).where(i_idx, -1).max(-2)
    if dtypes.is_float(self.dtype) and self.requires_grad:
      # gather the values at the indices, so the gradient goes to that one element (like torch), not split between ties
      values = i_idx.eq(idx.unsqueeze(-2)).where(x.unsqueeze(-1), 0.0).sum(-2).transpose(-1, axis)
    return values, idx.cast(dtypes.int32).transpose(-1, axis)

  def cummin(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """Cumulative min along `axis`: (values, int32 indices); ties take the latest index, like torch.
    `Tensor([3, 1, 2]).cummin(0) -> ([3, 1, 1], [0, 1, 1])`"""
    values, indices = _inverse(self).cummax(axis)
    return _inverse(values), indices

  def logcumsumexp(self: Tensor, axis: int = 0) -> Tensor:  # type: ignore[misc]
    """log(cumsum(exp(x))) along `axis`, computed stably (shifted by the running max). Ints promote to float (tinygrad; torch raises)."""
    from tg_core.tensor import Tensor
    x = self if dtypes.is_float(self.dtype) else self.cast(least_upper_float(self.dtype))
    axis = x._resolve_dim(axis)
    if x.ndim == 0 or 0 in x.shape: return x
    x = x.transpose(axis, -1)
    n = x.shape[-1]
    cm = x.cummax(-1)[0].detach()
    cm = cm.abs().eq(math.inf).where(0.0, cm)  # all -inf (or an inf) so far: shift by 0 instead of making inf-inf=NaN
    tril = Tensor.arange(n).reshape(n, 1) >= Tensor.arange(n).reshape(1, n)  # [i, j]: j <= i
    xj = x.unsqueeze(-2).expand(*x.shape[:-1], n, n)
    ret = tril.where(xj - cm.unsqueeze(-1), -math.inf).exp().sum(-1).log() + cm
    return ret.transpose(-1, axis)

  # *** softmax family ***
  def _softmax(self: Tensor, axis: int, dtype: DTypeLike | None = None) -> tuple[Tensor, Tensor, Tensor]:  # type: ignore[misc]
    # ints become floats first: subtracting the max in a narrow int type would wrap
    x = self._as_float()
    m = x - x.max(axis, keepdim=True).detach() if x.numel() != 0 else x
    if dtype is not None: m = m.cast(dtype)
    e = m.exp()
    return m, e, e.sum(axis, keepdim=True)

  def softmax(self: Tensor, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:  # type: ignore[misc]
    """exp(x) / sum(exp(x)) along `axis`, shifted by the max for stability. `Tensor([0., 0.]).softmax() -> [0.5, 0.5]`"""
    _, e, ss = self._softmax(axis, dtype)
    return e.div(ss)

  def log_softmax(self: Tensor, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:  # type: ignore[misc]
    """x - logsumexp(x) along `axis`, stably."""
    m, _, ss = self._softmax(axis, dtype)
    return m - ss.log()

  def softmin(self: Tensor, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:  # type: ignore[misc]
    """softmax(-x) along `axis`."""
    return (-self).softmax(axis, dtype)

  def logsumexp(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
    """log(sum(exp(x))) over `axis`, stably (an empty reduction is -inf). `Tensor([0., 0.]).logsumexp() -> log(2)`"""
    x = self if dtypes.is_float(self.dtype) else self.cast(least_upper_float(self.dtype))
    axes = _axes(x, axis)
    if any(x.shape[a] == 0 for a in axes): return x.exp().sum(axes, keepdim).log()
    m = x.max(axes, keepdim=True).detach()
    m = m.abs().eq(math.inf).where(0.0, m)  # like torch: don't shift by an infinite max
    ret = (x - m).exp().sum(axes, keepdim).log()
    return ret + m.reshape(ret.shape)

  # *** moments ***
  def var(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int | float = 1) -> Tensor:  # type: ignore[misc]
    """Variance over `axis` with Bessel's `correction` (divides by max(0, N - correction), like torch).
    `Tensor([1., 2., 3.]).var() -> 1.0`"""
    axes = _axes(self, axis)
    squares = (self - self.mean(axes, keepdim=True)).square()
    n = prod([self.shape[a] for a in axes])
    return squares.sum(axes, keepdim).div(smax(0, n - correction))  # smax: n may be symbolic

  def var_mean(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False,  # type: ignore[misc]
               correction: int | float = 1) -> tuple[Tensor, Tensor]:
    """(var, mean) over `axis`, like torch.var_mean."""
    return self.var(axis, keepdim, correction), self.mean(_axes(self, axis), keepdim)

  def std(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int | float = 1) -> Tensor:  # type: ignore[misc]
    """Standard deviation over `axis`: sqrt(var). `Tensor([1., 2., 3.]).std() -> 1.0`"""
    return self.var(axis, keepdim, correction).sqrt()

  def std_mean(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False,  # type: ignore[misc]
               correction: int | float = 1) -> tuple[Tensor, Tensor]:
    """(std, mean) over `axis`, like torch.std_mean."""
    return self.std(axis, keepdim, correction), self.mean(_axes(self, axis), keepdim)

  # *** sorting ***
  def sort(self: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """Sort along `dim` with a bitonic network over the size padded to a power of 2: (values, int32 indices).
    Equal elements keep their original order (stable); NaN sorts as the largest value, like torch.
    `Tensor([3, 1, 2]).sort() -> ([1, 2, 3], [1, 2, 0])`"""
    from tg_core.tensor import Tensor
    dim = self._resolve_dim(dim)
    if self.ndim == 0 or (orig_len := self.shape[dim]) <= 1: return self, Tensor.zeros(self.shape, dtype=dtypes.int32, device=self.device)
    is_float = dtypes.is_float(self.dtype)
    def gt(a: Tensor, b: Tensor) -> Tensor: return (a > b) | (_isnan(a) & _isnan(b).logical_not()) if is_float else a > b
    def same(a: Tensor, b: Tensor) -> Tensor: return a.eq(b) | (_isnan(a) & _isnan(b)) if is_float else a.eq(b)
    # pad to a power of 2 with values that sort last (NaN is the largest float)
    n_stages = (orig_len - 1).bit_length()
    pad_v = dtypes.min(self.dtype) if descending else math.nan if is_float else dtypes.max(self.dtype)
    x = self.detach().pad(tuple((0, 2**n_stages - orig_len) if i == dim else (0, 0) for i in range(self.ndim)), value=pad_v)
    x = x.reshape(self.shape[:dim] + (2,) * n_stages + self.shape[dim+1:])
    ndim = x.ndim
    def second(d: int) -> Tensor: return _arange_along(2, d, ndim).eq(1)  # True on the second half along the size-2 dim d
    # https://en.wikipedia.org/wiki/Bitonic_sorter: each stage merges sorted runs of 2**(stage-1) into runs of 2**stage.
    # Each layer is realized: every element reads two of the previous layer's, so a fused graph would grow exponentially with the depth.
    def layer(t: Tensor) -> Tensor: return t.contiguous()
    for stage in range(1, n_stages + 1):
      if stage != n_stages:
        # reverse the second half of each run so all comparators point the same way
        crossover = dim + n_stages - stage - 1
        flip_dims = tuple(range(crossover + 1, dim + n_stages))
        x = layer(second(crossover).where(x.flip(flip_dims), x))
      for substage in range(stage - 1, -1, -1):
        # compare-exchange with the partner across the size-2 dim: the first takes the smaller, the second the larger
        partner = dim + n_stages - substage - 1
        other, sec = x.flip(partner), second(partner)
        take_other = sec.where(gt(x, other), gt(other, x)) if descending else sec.where(gt(other, x), gt(x, other))
        x = layer(take_other.where(other, x))
      if stage != n_stages: x = second(crossover).where(x.flip(flip_dims), x)
    x = x.reshape(self.shape[:dim] + (2**n_stages,) + self.shape[dim+1:])
    x = x.shrink(tuple((0, orig_len) if i == dim else None for i in range(self.ndim)))
    # indices: the k-th occurrence of a value in the output is the k-th occurrence of it in the input
    tril = (Tensor.arange(orig_len).reshape(orig_len, 1) >= Tensor.arange(orig_len).reshape(1, orig_len))
    tril = tril.reshape((orig_len, orig_len) + (1,) * (self.ndim - dim - 1))
    def occurrence(t: Tensor) -> Tensor: return (tril & same(t.unsqueeze(dim), t.unsqueeze(dim + 1))).sum(dim + 1)
    xd, sd = x.detach(), self.detach()
    cond = same(sd.unsqueeze(dim + 1), xd.unsqueeze(dim)) & occurrence(sd).unsqueeze(dim + 1).eq(occurrence(xd).unsqueeze(dim))
    idx = cond.where(_arange_along(orig_len, dim, self.ndim + 1), 0).sum(dim)
    if is_float and self.requires_grad:
      # differentiable values: gather the input at the indices, so each output's gradient goes to its source element like torch
      x = cond.where(self.unsqueeze(dim + 1), 0.0).sum(dim)
    return x, idx.cast(dtypes.int32)

  def argsort(self: Tensor, dim: int = -1, descending: bool = False) -> Tensor:  # type: ignore[misc]
    """Indices (int32) that sort the tensor along `dim` (stable). `Tensor([3, 1, 2]).argsort() -> [1, 2, 0]`"""
    return self.sort(dim, descending)[1]

  def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """The k largest (or smallest) elements along `dim`, sorted: (values, int32 indices).
    k out of range raises ValueError (tinygrad; torch: RuntimeError). `Tensor([1, 3, 2]).topk(2) -> ([3, 2], [1, 2])`"""
    if not sorted_: raise NotImplementedError("topk with sorted_=False is not supported")
    dim = self._resolve_dim(dim)
    if not 0 <= k <= (self.shape[dim] if self.ndim else 1): raise ValueError(f"selected index {k=} is out of range")
    x, idx = self.sort(dim, descending=largest)
    if self.ndim == 0: return x, idx
    shrink = tuple((0, k) if i == dim else None for i in range(self.ndim))
    return x.shrink(shrink), idx.shrink(shrink)

  # *** einsum ***
  @staticmethod
  def einsum(formula: str, *operands: Tensor | Sequence[Tensor], dtype: DTypeLike | None = None) -> Tensor:
    """Einstein summation: explicit ("ij,jk->ik") or implicit ("ij,jk") output, repeated letters in one operand take the
    diagonal ("ii->i", "ii" is the trace), "..." broadcasts. `Tensor.einsum("ij,j->i", A, v)` is A @ v."""
    xs: list[Tensor] = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)  # type: ignore[arg-type]
    formula = formula.replace(" ", "")
    lhs, has_rhs = formula.split("->")[0], "->" in formula
    inputs = lhs.split(",")
    if len(xs) != len(inputs): raise ValueError(f"number of operands doesn't match, expected {len(inputs)}, got {len(xs)}")
    ell = ""
    if "..." in formula:
      # name the ellipsis dims with unused letters, right-aligned across operands
      free = "".join(c for c in string.ascii_letters if c not in formula)
      ell_n = [x.ndim - (len(s) - 3) if "..." in s else 0 for s, x in zip(inputs, xs)]
      if any(e < 0 for e in ell_n): raise RuntimeError("einsum(): the number of subscripts in the equation exceeds the operand's dimensions")
      ell = free[:max(ell_n)]
      inputs = [s.replace("...", ell[len(ell) - e:]) for s, e in zip(inputs, ell_n)]
    for s, x in zip(inputs, xs):
      if not all(c.isalpha() for c in s): raise RuntimeError(f"einsum(): invalid subscript in {s!r}")
      if len(s) != x.ndim: raise RuntimeError(f"einsum(): the number of subscripts in {s!r} does not match the number of dimensions ({x.ndim})")
    joined = "".join(inputs)
    if has_rhs: rhs = formula.split("->")[1].replace("...", ell)
    else: rhs = ell + "".join(sorted(c for c in set(joined) if joined.count(c) == 1 and c not in ell))
    if len(set(rhs)) != len(rhs) or any(c not in joined for c in rhs): raise RuntimeError(f"einsum(): invalid output subscripts {rhs!r}")
    # repeated letter within one operand: take that diagonal
    for i, (s, x) in enumerate(zip(inputs, xs)):
      for c in dict.fromkeys(s):
        while s.count(c) > 1:
          j, k = s.index(c), s.index(c, s.index(c) + 1)
          if (n := x.shape[j]) != x.shape[k]: raise RuntimeError(f"einsum(): subscript {c} is repeated for operand {i} but the sizes don't match")
          rest = [d for d in range(x.ndim) if d not in (j, k)]
          x = x.permute(rest + [j, k])
          pre, keep = x.shape[:-2], (None,) * (x.ndim - 2)
          x = x.reshape(*pre, n * n).pad(((0, 0),) * len(pre) + ((0, n),)).reshape(*pre, n, n + 1).shrink(keep + ((0, n), (0, 1))).reshape(*pre, n)
          s = "".join(s[d] for d in rest) + c
      inputs[i], xs[i] = s, x
    # size of each letter (size-1 dims broadcast, like torch)
    sz: dict[str, int] = {}
    for i, (s, x) in enumerate(zip(inputs, xs)):
      for c, n in zip(s, x.shape):
        if sz.get(c, 1) != 1 and n != 1 and sz[c] != n:
          raise RuntimeError(f"einsum(): subscript {c} has size {n} for operand {i} which does not broadcast with previously seen size {sz[c]}")
        sz[c] = n if c not in sz or sz[c] == 1 else sz[c]
    alpha = sorted(sz)
    aligned = [x.permute([s.index(c) for c in sorted(s)]).reshape([x.shape[s.index(c)] if c in s else 1 for c in alpha])
               .expand([sz[c] for c in alpha]) for s, x in zip(inputs, xs)]
    out = functools.reduce(lambda a, b: a * b, aligned).sum([i for i, c in enumerate(alpha) if c not in rhs], dtype=dtype)
    return out.permute(argsort(argsort(list(rhs)))) if out.ndim else out

"""Tensor methods: movement ops. Built only from Tensor's core primitives (see tg_core/tensor.py)."""
from __future__ import annotations
import functools
import itertools
from typing import TYPE_CHECKING, Any, Sequence

from tg_core.dtype import least_upper_dtype, strong_dtype
from tg_core.helpers import argfix, argsort, ceildiv, make_tuple

if TYPE_CHECKING:
  from tg_core.tensor import Tensor
  from tg_core.uop.ops import sint

def pad_mode(t: Tensor, pX: tuple[tuple[sint, sint], ...], mode: str) -> Tensor:
  """Pad `t` with grouped pads `pX` (one (before, after) per dim, negative pads crop) in mode reflect, replicate or circular."""
  if not all(isinstance(s, int) for s in t.shape): raise ValueError(f"{mode} padding does not support the symbolic shape {t.shape}")
  if not all(isinstance(p, int) for pp in pX for p in pp): raise ValueError(f"{mode} padding needs integer pads, got {pX}")
  pads = tuple((max(pB, 0), max(pA, 0)) for pB, pA in pX)
  X = t
  if mode == "circular":
    if any(pB > s or pA > s for (pB, pA), s in zip(pX, X.shape)): raise ValueError("Padding value causes wrapping around more than once.")
    if any(pB < 0 or pA < 0 for pB, pA in pX): raise NotImplementedError("Negative pads with circular pads is not supported")
    orig_shape = X.shape
    X = X.repeat(tuple(1 + bool(pB) + bool(pA) for pB, pA in pads))
    return X.shrink(tuple((0 if pB == 0 else osh - pB, xsh if pA == 0 else xsh - osh + pA) for (pB, pA), osh, xsh in zip(pads, orig_shape, X.shape)))
  for d, (pB, pA) in enumerate(pads):
    if pB == 0 and pA == 0: continue
    s, nd = X.shape[d], X.ndim
    def along(rng: tuple[int, int], d: int = d, nd: int = nd) -> tuple: return tuple(rng if i == d else None for i in range(nd))
    if mode == "reflect":
      if pB >= s or pA >= s: raise ValueError(f"Padding ({pB}, {pA}) should be less than the input size={s} for dim={d}.")
      # reflect excludes the edge element: before gets x[pB..1] and after gets x[s-2..s-1-pA]
      xB = X.shrink(along((1, pB + 1))).flip(d) if pB > 0 else None
      xA = X.shrink(along((s - 1 - pA, s - 1))).flip(d) if pA > 0 else None
    else:  # replicate
      if s == 0: raise ValueError(f"can't replicate-pad dim {d} of size 0")
      xB = X.shrink(along((0, 1))).expand(tuple(pB if i == d else -1 for i in range(X.ndim))) if pB > 0 else None
      xA = X.shrink(along((s - 1, s))).expand(tuple(pA if i == d else -1 for i in range(X.ndim))) if pA > 0 else None
    parts = [x for x in (xB, X, xA) if x is not None]
    X = parts[0].cat(*parts[1:], dim=d)
  # negative pads crop afterwards
  return X.shrink(tuple((-min(pB, 0), s + min(pA, 0)) for (pB, pA), s in zip(pX, X.shape)))

class MovementMixin:
  __slots__ = ()

  # *** helpers ***
  def pad_to(self: Any, shape: Any, *args: Any) -> Tensor:
    """Pad each dim at its end up to `shape` (None keeps the dim). `Tensor.ones(2).pad_to(4)` -> [1, 1, 0, 0]."""
    new_shape = argfix(shape, *args)
    if len(new_shape) != self.ndim: raise ValueError(f"dim mismatch, cannot pad {self.shape} to {new_shape}")
    return self.pad(tuple(None if ns is None else (0, ns - s) for s, ns in zip(self.shape, new_shape)))

  def shrink_to(self: Any, shape: Any, *args: Any) -> Tensor:
    """Keep the first `shape[i]` elements of each dim (None keeps the dim)."""
    new_shape = argfix(shape, *args)
    if len(new_shape) != self.ndim: raise ValueError(f"dim mismatch, cannot shrink {self.shape} to {new_shape}")
    return self.shrink(tuple(None if ns is None else (0, ns) for ns in new_shape))

  # *** joining and splitting ***
  def cat(self: Any, *args: Tensor, dim: int = 0) -> Tensor:
    """Concatenate self and `args` along `dim`. `Tensor.cat(a, b, dim=1)` or `a.cat(b, dim=1)`."""
    tensors = list(argfix(self, *args))  # Tensor.cat((a, b)) and Tensor.cat([a, b]) too, like tinygrad's argfix
    self = tensors[0]
    for i, t in enumerate(tensors):
      if t.ndim == 0: raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    dim = self._resolve_dim(dim)
    for i, t in enumerate(tensors[1:], start=1):
      if t.ndim != self.ndim: raise RuntimeError(f"Tensors must have same number of dimensions: got {self.ndim} and {t.ndim}")
      for d, (a, b) in enumerate(zip(self.shape, t.shape)):
        if d != dim and a != b:
          raise RuntimeError(f"Sizes of tensors must match except in dimension {dim}. "
                             f"Expected size {a} but got size {b} for tensor number {i} in the list.")
    # like torch, mixed dtypes promote
    if len({t.dtype for t in tensors}) > 1:
      out = strong_dtype(least_upper_dtype(*[t.dtype for t in tensors]))
      tensors = [t.cast(out) for t in tensors]
    if len(tensors) == 1: return tensors[0]
    offsets = list(itertools.accumulate([t.shape[dim] for t in tensors], initial=0))
    padded = [t.pad(tuple((offsets[i], offsets[-1] - offsets[i + 1]) if j == dim else None for j in range(t.ndim))) for i, t in enumerate(tensors)]
    return functools.reduce(lambda a, b: a + b, padded)

  def stack(self: Any, *args: Tensor, dim: int = 0) -> Tensor:
    """Stack self and `args` along a new dim `dim`. `Tensor.stack(a, b)`."""
    tensors = list(argfix(self, *args))  # Tensor.stack((a, b)) and Tensor.stack([a, b]) too, like tinygrad's argfix
    self = tensors[0]
    for i, t in enumerate(tensors[1:], start=1):
      if t.shape != self.shape:
        raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(self.shape)} at entry 0 and {list(t.shape)} at entry {i}")
    dim = self._resolve_dim(dim, extra=True)
    return tensors[0].unsqueeze(dim).cat(*[t.unsqueeze(dim) for t in tensors[1:]], dim=dim)

  def split(self: Any, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """Split into chunks of `sizes` (an int: equal chunks, the last may be smaller) along `dim`."""
    dim = self._resolve_dim(dim)
    dim_sz = self.shape[dim]
    if not isinstance(dim_sz, int): raise ValueError(f"does not support symbolic shape in split dimension {dim}: {self.shape}")
    if isinstance(sizes, int):
      if sizes < 0 or (sizes == 0 and dim_sz != 0):
        raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {dim_sz}")
      sizes = [min(sizes, dim_sz - i) for i in range(0, max(1, dim_sz), max(1, sizes))]
    sizes = list(sizes)
    if any(s < 0 for s in sizes) or sum(sizes) != dim_sz:
      raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {dim_sz} (input tensor's size at dimension {dim}), "
                         f"but got split_sizes={sizes}")
    offs = list(itertools.accumulate(sizes, initial=0))
    return tuple(self.shrink(tuple((offs[i], offs[i + 1]) if j == dim else None for j in range(self.ndim))) for i in range(len(sizes)))

  def chunk(self: Any, chunks: int, dim: int = 0) -> list[Tensor]:
    """Split into `chunks` pieces of ceil(size/chunks) along `dim` (may return fewer)."""
    if chunks <= 0: raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    dim = self._resolve_dim(dim)
    dim_sz = self.shape[dim]
    if not isinstance(dim_sz, int): raise ValueError(f"does not support symbolic shape in split dimension {dim}: {self.shape}")
    return list(self.split(ceildiv(dim_sz, chunks) if dim_sz else [0] * chunks, dim=dim))

  def meshgrid(self: Any, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 0-D/1-D tensors. `x.meshgrid(y, indexing="xy")`."""
    if indexing not in ("ij", "xy"): raise RuntimeError(f'indexing must be in ("ij", "xy"), got {indexing}')
    tensors = (self, *args)
    for t in tensors:
      if t.ndim > 1: raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {t.shape}")
    if len(tensors) == 1: return (tensors[0].reshape(-1),)
    basis = tuple(range(len(tensors))) if indexing == "ij" else (1, 0) + tuple(range(2, len(tensors)))
    shaped = [t.reshape(tuple(t.numel() if j == i else 1 for j in range(len(tensors)))) for i, t in zip(basis, tensors)]
    out_shape = tuple(max(s) if 0 not in s else 0 for s in zip(*(t.shape for t in shaped)))
    return tuple(t.expand(out_shape) for t in shaped)

  # *** repeating ***
  def repeat(self: Any, repeats: Any, *args: Any) -> Tensor:
    """Tile the tensor `repeats[i]` times along each dim (leading repeats add dims). `Tensor([1, 2]).repeat(2, 2)`."""
    reps = argfix(repeats, *args)
    if len(reps) < self.ndim: raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    if any(r < 0 for r in reps): raise RuntimeError(f"Trying to create tensor with negative dimension: {reps}")
    base = (1,) * (len(reps) - self.ndim) + tuple(self.shape)
    unsq = [x for r, s in zip(reps, base) for x in ((s,) if r == 1 else (1, s))]
    expd = [x for r, s in zip(reps, base) for x in ((s,) if r == 1 else (r, s))]
    return self.reshape(unsq).expand(expd).reshape(tuple(r * s for r, s in zip(reps, base)))

  def repeat_interleave(self: Any, repeats: int, dim: int | None = None) -> Tensor:
    """Repeat each element `repeats` times along `dim` (flattened when None). `Tensor([1, 2]).repeat_interleave(2)` -> [1, 1, 2, 2]."""
    if not isinstance(repeats, int): raise TypeError(f"repeats must be an int, got {type(repeats).__name__}")
    if repeats < 0: raise RuntimeError("repeats can not be negative")
    x, d = (self.flatten(), 0) if dim is None else (self, self._resolve_dim(dim))
    shp = x.shape
    x = x.reshape(*shp[:d + 1], 1, *shp[d + 1:]).expand(*shp[:d + 1], repeats, *shp[d + 1:])
    return x.reshape(*shp[:d], shp[d] * repeats, *shp[d + 1:])

  def roll(self: Any, shifts: int | tuple[int, ...], dims: int | tuple[int, ...] | None = None) -> Tensor:
    """Roll elements circularly along `dims` (the flattened tensor when None). `Tensor([1, 2, 3]).roll(1)` -> [3, 1, 2]."""
    if dims is None:
      if isinstance(shifts, (tuple, list)) and len(shifts) != 1:
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims: 0")
      return self.flatten().roll(make_tuple(shifts, 1)[0], 0).reshape(self.shape)
    dims_, shifts_ = tuple(self._resolve_dim(d) for d in make_tuple(dims, 1)), make_tuple(shifts, 1)
    if len(dims_) != len(shifts_): raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts_)}, dims: {len(dims_)}")
    total = [0] * self.ndim
    for d, s in zip(dims_, shifts_): total[d] += s
    arg: list[tuple[int, int] | None] = [None] * self.ndim
    for d in range(self.ndim):
      if (n := self.shape[d]) == 0 or total[d] % n == 0: continue
      arg[d] = (n - total[d] % n, 2 * n - total[d] % n)
    if all(a is None for a in arg): return self
    return self.repeat(tuple(1 if a is None else 2 for a in arg)).shrink(tuple(arg))

  # *** triangles and diagonals ***
  def _tri_mask(self: Any, diagonal: int) -> Tensor:
    from tg_core.tensor import Tensor
    if self.ndim < 2: raise RuntimeError(f"tril/triu: input tensor must have at least 2 dimensions, got {self.ndim}")
    r, c = self.shape[-2], self.shape[-1]
    # True on and above the `diagonal`-th diagonal: col - row >= diagonal
    return Tensor.arange(r, device=self.device).reshape(r, 1) + diagonal <= Tensor.arange(c, device=self.device).reshape(1, c)

  def triu(self: Any, diagonal: int = 0) -> Tensor:
    """Upper triangle of the last two dims (elements below the `diagonal`-th diagonal set to 0)."""
    return self._tri_mask(diagonal).where(self, self.zeros_like())

  def tril(self: Any, diagonal: int = 0) -> Tensor:
    """Lower triangle of the last two dims (elements above the `diagonal`-th diagonal set to 0)."""
    return self._tri_mask(diagonal + 1).where(self.zeros_like(), self)

  def diag(self: Any, diagonal: int = 0) -> Tensor:
    """1-D: a square matrix with self on the `diagonal`-th diagonal; 2-D: that diagonal of self. `Tensor([1, 2]).diag()`."""
    if self.ndim == 2: return self.diagonal(diagonal)
    if self.ndim != 1: raise ValueError(f"expect input to be 1-D or 2-D, getting {self.ndim}-D")
    n = self.shape[0]
    ret = self.unsqueeze(-1).pad((None, (0, n))).flatten().shrink(((0, n * n),)).reshape(n, n)
    if diagonal > 0: return ret.pad(((0, diagonal), (diagonal, 0)))
    if diagonal < 0: return ret.pad(((-diagonal, 0), (0, -diagonal)))
    return ret

  def diagonal(self: Any, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The `offset`-th diagonal over dims `dim1`, `dim2`, appended as the last dim."""
    if self.ndim < 2: raise RuntimeError(f"diagonal dimensions requires ndim larger than 1, got {self.ndim}")
    d1, d2 = self._resolve_dim(dim1), self._resolve_dim(dim2)
    if d1 == d2: raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    x = self.permute(*[i for i in range(self.ndim) if i not in (d1, d2)], d1, d2)
    rows, cols = x.shape[-2], x.shape[-1]
    keep = (None,) * (x.ndim - 2)
    r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
    d = max(min(rows - r0, cols - c0), 0)
    x = x.shrink(keep + ((min(r0, rows), min(r0, rows) + d), (min(c0, cols), min(c0, cols) + d)))
    if d == 0: return x.reshape(*x.shape[:-2], 0)
    # a (d, d) square flattened and padded to d*(d+1) puts the diagonal in column 0 of a (d, d+1) view
    x = x.flatten(-2).pad(keep + ((0, d),)).reshape(*x.shape[:-2], d, d + 1)
    return x.shrink(keep + (None, (0, 1))).reshape(*x.shape[:-2], d)

  # *** windows ***
  def unfold(self: Any, dim: int, size: int, step: int) -> Tensor:
    """Windows of length `size` every `step` along `dim` (torch's Tensor.unfold): dim becomes the window count and a last dim `size` is added."""
    if self.ndim == 0:
      self._resolve_dim(dim)
      if size > 1: raise RuntimeError(f"maximum size for tensor at dimension {dim} is 1 but size is {size}")
      if step <= 0: raise RuntimeError(f"step is {step} but must be > 0")
      return self.reshape(size)
    d = self._resolve_dim(dim)
    n = self.shape[d]
    if size < 0: raise RuntimeError(f"size is {size} but must be >= 0")
    if size > n: raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0: raise RuntimeError(f"step is {step} but must be > 0")
    nw = (n - size) // step + 1
    perm = tuple(i for i in range(self.ndim) if i != d) + (d,)
    x = self.permute(perm)
    keep = x.shape[:-1]
    if size == 0 or nw * size == 0:
      w = x.shrink(tuple(None for _ in keep) + ((0, 0),)).reshape(*keep, nw, size)
    else:
      # windows from movement ops only: repeat the dim, reshape so that row k holds x[k:], then take every step-th column
      f = max(1, ceildiv(nw * step - 1, n))
      row = n * f + 1
      w = x.repeat(*[1] * len(keep), ceildiv(size * row, n)).shrink(tuple(None for _ in keep) + ((0, size * row),)).reshape(*keep, size, row)
      w = w.shrink(tuple(None for _ in keep) + (None, (0, nw * step))).reshape(*keep, size, nw, step)
      w = w.shrink(tuple(None for _ in keep) + (None, None, (0, 1))).reshape(*keep, size, nw)
      w = w.permute(*range(len(keep)), len(keep) + 1, len(keep))
    # w is (*keep, nw, size): move the window-count dim back to position d
    return w.permute(*argsort(perm), self.ndim)

  def rearrange(self: Any, formula: str, **sizes: int) -> Tensor:
    """einops-style rearrange with named axes, parentheses and `...`. `x.rearrange("b c h w -> b (c h w)")`."""
    def parse_side(s: str) -> tuple[list[str], list[tuple[int, int]]]:
      tokens = f" {s} ".replace("…", "...").replace("(", " ( ").replace(")", " ) ").replace(" ", "  ").replace(" 1 ", " ( ) ").split()
      names, groups, start = [], [], None
      for tok in tokens:
        if tok == "(":
          if start is not None: raise ValueError(f"nested parentheses in {formula}")
          start = len(names)
        elif tok == ")":
          if start is None: raise ValueError(f"bracket mismatch in {formula}")
          groups.append((start, len(names)))
          start = None
        else: names.append(tok)
      if start is not None: raise ValueError(f"bracket mismatch in {formula}")
      return names, groups
    if formula.count("->") != 1: raise ValueError(f'need exactly one "->" in formula {formula}')
    (lhs, unflat), (rhs, flat) = (parse_side(s) for s in formula.split("->"))
    for name in sizes:
      if name not in lhs: raise ValueError(f"axis {name} is not used in transform")
    if sorted(lhs) != sorted(rhs) or len(lhs) != len(set(lhs)): raise ValueError(f"name mismatch in {formula}")
    if lhs.count("...") > 1: raise ValueError(f"too many ellipses in {formula}")
    if "..." in lhs:
      ell = self.ndim - len(lhs) + 1 + sum(e - s - 1 for s, e in unflat)
      def expand_ell(names: list[str]) -> list[str]:
        i = names.index("...")
        return names[:i] + [f"...{j}" for j in range(ell)] + names[i + 1:]
      def shift(names: list[str], groups: list[tuple[int, int]]) -> list[tuple[int, int]]:
        i = names.index("...")
        return [(s + (ell - 1 if s > i else 0), e + (ell - 1 if e > i else 0)) for s, e in groups]
      unflat, flat = shift(lhs, unflat), shift(rhs, flat)
      lhs, rhs = expand_ell(lhs), expand_ell(rhs)
    t = self
    for start, end in unflat: t = t.unflatten(start, tuple(sizes.get(lhs[i], -1) for i in range(start, end)))
    if t.ndim != len(lhs): raise ValueError(f"rearrange: {formula} does not match shape {self.shape}")
    for i, name in enumerate(lhs):
      if name in sizes and sizes[name] != t.shape[i]: raise ValueError(f"size provided for dimension {name} incorrect")
    t = t.permute([lhs.index(name) for name in rhs])
    for start, end in reversed(flat): t = t.flatten(start, end - 1) if start < end else t.unsqueeze(start)
    return t

__all__ = ["MovementMixin", "pad_mode"]

"""Tensor methods: indexing ops. Built only from Tensor's core primitives (see tg_core/tensor.py).

Like tinygrad, tensor ("fancy") indexing, gather and scatter are lazy and differentiable: an index tensor is compared
with an arange to make a one-hot mask, and a masked sum picks the values. So an out-of-bounds index tensor value
selects nothing and reads 0 (torch raises; tinygrad returns 0, and so does tg). Integer index tensors of any dtype
are indices (a uint8 index tensor too, where torch would treat it as a mask); bool masks are not supported in
getitem (tinygrad raises IndexError): use masked_select / where."""
from __future__ import annotations
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from tg_core.dtype import DType, dtypes
from tg_core.uop.ops import UOp, sint, sint_diff, ssimplify

from tg_core.frontend import tensor_class

if TYPE_CHECKING:
  from tg_core.tensor import Tensor

_T = tensor_class

def all_live_tensors() -> Any:
  from tg_core.tensor import all_tensors
  return all_tensors

def _broadcast_index_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
  n = max(len(s) for s in shapes)
  aligned = [(1,) * (n - len(s)) + tuple(s) for s in shapes]
  out = []
  for dims in zip(*aligned):
    nz = {d for d in dims if d != 1}
    if len(nz) > 1:
      raise IndexError(f"shape mismatch: indexing tensors could not be broadcast together with shapes {', '.join(str(list(s)) for s in shapes)}")
    out.append(nz.pop() if nz else 1)
  return tuple(out)

def _index_dtype(dt: DType) -> DType:
  # small index dtypes widen so that `idx + size` (negative index fix-up) and the arange compare can't overflow
  return dtypes.int64 if dt in (dtypes.int64, dtypes.uint64, dtypes.uint32) else dtypes.int32

def _broadcast_value(v: Tensor, shape: tuple[int, ...]) -> Tensor:
  try: return v._broadcast_to(shape)
  except ValueError as e:
    raise RuntimeError(f"shape mismatch: value tensor of shape {list(v.shape)} cannot be broadcast to indexing result of shape {list(shape)}") from e

def _symbolic_basic(indices: Any) -> bool:
  """Basic indices (ints, slices, None, ...) of which some bound is a bound Variable."""
  idx = indices if isinstance(indices, tuple) else (indices,)
  if any(not (x is None or x is Ellipsis or isinstance(x, (int, slice, UOp))) for x in idx): return False
  return any(isinstance(x, UOp) or (isinstance(x, slice) and (isinstance(x.start, UOp) or isinstance(x.stop, UOp))) for x in idx)

def _symbolic_int_index(i: sint, size: sint, dim: int) -> _Idx:
  """An int index that is a bound Variable, or an index into a symbolic dim: no wrap-around, checked against the max size."""
  if (i.vmin if isinstance(i, UOp) else i) < 0 or (i.vmax if isinstance(i, UOp) else i) >= (size.vmax if isinstance(size, UOp) else size):
    raise IndexError(f"index {i} can be out of bounds for dimension {dim} with size {size}: a symbolic index or dim takes no negative or wrapped indices")
  return _Idx("int", 1, (i, i + 1), 1)

def _symbolic_slice(index: slice, size: sint, dim: int) -> _Idx:
  """A slice with a bound Variable end (or over a symbolic dim): step 1, no negative or clamped ends (as tinygrad)."""
  if index.step not in (None, 1): raise IndexError(f"slicing dim {dim} symbolically ({index}) needs step 1, got {index.step}")
  start, stop = 0 if index.start is None else index.start, size if index.stop is None else index.stop
  for x in (start, stop):
    if isinstance(x, int) and x < 0: raise IndexError(f"slice {index} of symbolic dim {dim} (size {size}) can't have negative ends")
  return _Idx("slice", d if (d := sint_diff(stop, start)) is not None else ssimplify(stop - start), (start, stop), 1)

@dataclass
class _Idx:
  """One parsed index: kind is 'none', 'int', 'slice' or 'tensor'. For int/slice: the (start, end) `boundary` of the
  shrink, the `stride` (negative: flipped) and the resulting `size`. For tensor: the index Tensor."""
  kind: str
  size: sint = 1
  boundary: tuple[sint, sint] = (0, 1)
  stride: int = 1
  tensor: Any = None

class IndexingMixin:
  __slots__ = ()

  # *** parsing ***
  def _parse_indices(self: Any, indices: Any) -> list[_Idx]:
    Tensor = _T()
    # a tuple holds one index per dim; anything else (a list too: an index array) is a single index
    idx = list(indices) if isinstance(indices, tuple) else [indices]
    ell = [i for i, x in enumerate(idx) if x is Ellipsis]
    if len(ell) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
    n_real = sum(1 for x in idx if x is not None and x is not Ellipsis)
    if n_real > self.ndim: raise IndexError(f"too many indices for tensor of dimension {self.ndim}")
    fill = ell[0] if ell else len(idx)
    idx[fill:fill + 1] = [slice(None)] * (self.ndim - n_real)
    ret: list[_Idx] = []
    dim = 0
    for index in idx:
      if index is None:
        ret.append(_Idx("none"))
        continue
      size = self.shape[dim]
      if isinstance(index, (list, tuple)) and not isinstance(index, Tensor):
        arr = np.asarray(index)
        if arr.size == 0: arr = arr.astype(np.int32)
        if arr.dtype == np.object_ or not np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_:
          raise IndexError(f"index {index} must contain only integers")
        index = Tensor(arr.astype(np.int64) if arr.dtype.itemsize == 8 or arr.dtype == np.uint32 else arr.astype(np.int32), device=self.device)
      if isinstance(index, np.ndarray): index = Tensor(index, device=self.device)
      if isinstance(index, Tensor):
        if not dtypes.is_int(index.dtype):
          raise IndexError(f"tensors used as indices must be integer tensors, got {index.dtype} (bool masks are not supported, as in tinygrad)")
        t = index.to(self.device).cast(_index_dtype(index.dtype))
        if not dtypes.is_unsigned(index.dtype): t = (t < 0).where(t + size, t)
        ret.append(_Idx("tensor", size, (0, size), 1, t))
      elif isinstance(index, (bool, np.bool_)):
        raise IndexError("bool indices are not supported (as in tinygrad)")
      elif isinstance(index, UOp): ret.append(_symbolic_int_index(index, size, dim))
      elif isinstance(index, (int, np.integer)):
        if not isinstance(size, int): ret.append(_symbolic_int_index(int(index), size, dim))
        else:
          i = int(index)
          if not -size <= i < size: raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
          i = i + size if i < 0 else i
          ret.append(_Idx("int", 1, (i, i + 1), 1))
      elif isinstance(index, slice) and (not isinstance(size, int) or any(isinstance(x, UOp) for x in (index.start, index.stop, index.step))):
        ret.append(_symbolic_slice(index, size, dim))
      elif isinstance(index, slice):
        start, stop, step = index.indices(size)  # raises ValueError for step 0, like torch
        n = len(range(start, stop, step))
        if n == 0: ret.append(_Idx("slice", 0, (0, 0), 1))
        elif step > 0: ret.append(_Idx("slice", n, (start, start + (n - 1) * step + 1), step))
        else: ret.append(_Idx("slice", n, (start + (n - 1) * step, start + 1), step))
      else: raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and integer tensors are valid indices, got {type(index).__name__}")
      dim += 1
    return ret

  def _basic_view(self: Any, parsed: list[_Idx]) -> Tensor:
    """Apply the int/slice/None part of `parsed` (tensor-indexed dims are kept whole)."""
    mops = [p for p in parsed if p.kind != "none"]
    x = self
    if mops:
      x = x.shrink(tuple(p.boundary for p in mops))
      if flips := tuple(i for i, p in enumerate(mops) if p.stride < 0): x = x.flip(flips)
      strides = tuple(abs(p.stride) for p in mops)
      if any(st != 1 for st in strides):
        # every st-th element: pad each dim to a multiple of its stride, split it into (n, st) and keep column 0
        x = x.pad(tuple((0, (-s) % st) for s, st in zip(x.shape, strides)))
        x = x.reshape(tuple(v for s, st in zip(x.shape, strides) for v in (s // st, st)))
        x = x.shrink(tuple(r for s in x.shape[::2] for r in ((0, s), (0, 1)))).reshape(x.shape[::2])
    return x.reshape(tuple(p.size for p in parsed if p.kind != "int"))

  def _basic_blend(self: Any, parsed: list[_Idx], vb: Tensor) -> Tensor:
    """self with the region picked by the basic (int/slice/None) indices `parsed` replaced by `vb` (that region's shape)."""
    Tensor = _T()
    mops = [p for p in parsed if p.kind != "none"]
    # back to one dim per self dim, then undo the stride, the flip and the shrink
    vb = vb.reshape(tuple(p.size for p in mops))
    for d, p in enumerate(mops):
      st = abs(p.stride)
      if st != 1 and p.size > 1:
        vb = vb.unsqueeze(d + 1).pad(tuple((0, st - 1) if j == d + 1 else None for j in range(vb.ndim + 1)))
        vb = vb.reshape(vb.shape[:d] + (vb.shape[d] * st,) + vb.shape[d + 2:])
        vb = vb.shrink(tuple((0, p.boundary[1] - p.boundary[0]) if j == d else None for j in range(vb.ndim)))
    if flips := tuple(d for d, p in enumerate(mops) if p.stride < 0): vb = vb.flip(flips)
    vb = vb.pad(tuple((p.boundary[0], s - p.boundary[1]) for p, s in zip(mops, self.shape)))
    mask: Tensor | None = None
    for d, (p, s) in enumerate(zip(mops, self.shape)):
      if p.boundary == (0, s) and abs(p.stride) == 1: continue
      m = np.zeros(s, dtype=np.bool_)
      m[p.boundary[0]:p.boundary[1]:abs(p.stride)] = True
      md = Tensor(m, device=self.device).reshape(tuple(s if j == d else 1 for j in range(self.ndim)))
      mask = md if mask is None else mask & md
    return vb if mask is None else mask.where(vb, self)

  def _tensor_index_mask(self: Any, x: Tensor, parsed_x: list[_Idx]) -> tuple[Tensor, list[int], tuple[int, ...]]:
    """For x (the basic view) and the tensor indices on its dims: the one-hot mask of shape x.shape[:d0] + big + x.shape[d0:],
    the tensor-indexed dims of x and the broadcast index shape `big`."""
    tdims = [d for d, p in enumerate(parsed_x) if p.kind == "tensor"]
    tensors = [parsed_x[d].tensor for d in tdims]
    big = _broadcast_index_shapes(*[t.shape for t in tensors])
    nb = len(big)
    masks = []
    Tensor = _T()
    for d, t in zip(tdims, tensors):
      n = x.shape[d]
      tb = t.reshape((1,) * (tdims[0]) + (1,) * (nb - t.ndim) + tuple(t.shape) + (1,) * (x.ndim - tdims[0]))
      ar_shape = (1,) * (tdims[0] + nb) + tuple(n if j == d else 1 for j in range(tdims[0], x.ndim))
      ar = Tensor.arange(n, dtype=t.dtype, device=self.device).reshape(ar_shape)
      masks.append(tb.eq(ar))
    mask = functools.reduce(lambda a, b: a & b, masks)
    full = x.shape[:tdims[0]] + big + x.shape[tdims[0]:]
    return mask._broadcast_to(full) if mask.shape != full else mask, tdims, big

  def _getitem(self: Any, indices: Any, v: Tensor | None = None) -> Tensor:
    """getitem; with `v`, the whole tensor with the indexed region replaced by `v` (broadcast) instead."""
    parsed = self._parse_indices(indices)
    x = self._basic_view(parsed)
    parsed_x = [p for p in parsed if p.kind != "int"]
    has_tensor = any(p.kind == "tensor" for p in parsed)
    if not has_tensor:
      if v is None: return x
      return self._basic_blend(parsed, _broadcast_value(v.cast(self.dtype), x.shape))
    xd = x.cast(dtypes.uint8) if x.dtype == dtypes.bool else x  # masked sums need a numeric dtype
    mask, tdims, big = self._tensor_index_mask(xd, parsed_x)
    d0, nb = tdims[0], len(big)
    sum_axes = tuple(nb + d for d in tdims)
    # torch puts the index dims first when the tensor indices are not next to each other
    permuted = tdims != list(range(d0, d0 + len(tdims)))
    xe = xd.reshape(xd.shape[:d0] + (1,) * nb + xd.shape[d0:])
    if v is None:
      ret = mask.where(xe, xe.zeros_like()).sum(sum_axes, dtype=xd.dtype)
      if permuted: ret = ret.permute(*range(d0, d0 + nb), *range(d0), *range(d0 + nb, ret.ndim))
      return ret.cast(x.dtype)
    # setitem: for every position of x the last (in index order) matching index entry wins, as torch on CPU
    out_shape = xd.shape[:d0] + big + tuple(s for d, s in enumerate(xd.shape) if d >= d0 and d not in tdims)
    if permuted: out_shape = big + xd.shape[:d0] + out_shape[d0 + nb:]
    vb = _broadcast_value(v.cast(xd.dtype), out_shape)
    if permuted: vb = vb.permute(*range(nb, nb + d0), *range(nb), *range(nb + d0, vb.ndim))
    for a in sum_axes: vb = vb.unsqueeze(a)
    Tensor = _T()
    n_big = int(np.prod(big, dtype=np.int64))
    rank = Tensor.arange(1, n_big + 1, dtype=dtypes.int32, device=self.device).reshape((1,) * d0 + big + (1,) * (xd.ndim - d0))
    big_axes = tuple(range(d0, d0 + nb))
    win = mask.where(rank, 0).max(big_axes, keepdim=True) if nb else mask.where(rank, 0)
    sel = mask & rank.eq(win)
    val = sel.where(vb, vb.zeros_like()).sum(big_axes, dtype=xd.dtype).reshape(xd.shape)
    hit = win.reshape(xd.shape) > 0
    new_x = hit.where(val, xd).cast(self.dtype)
    # write the updated basic view back into self (tensor-indexed dims count as whole slices)
    return self._basic_blend(parsed, new_x)

  def __getitem__(self: Any, indices: Any) -> Tensor:
    """Index with ints, slices (any step), None, Ellipsis, and integer tensors/lists (lazy one-hot gather; out of bounds reads 0).
    `t[1:, ::-1]`, `t[Tensor([2, 0]), None]`."""
    return self._getitem(indices)

  def __setitem__(self: Any, indices: Any, v: Any) -> None:
    """Assign `v` (broadcast) into the indexed region, in place: self becomes a where-blend of itself and `v`, assigned to
    its buffer. `t[0, 1:] = 5`. Like tinygrad, needs a matching dtype for a Tensor `v`. With autograd (self or `v` requires
    grad) the blend replaces self's graph instead, so the gradient flows to `v` and to the elements of self not overwritten."""
    Tensor = _T()
    from tg_core.uop import GroupOp, Ops
    if isinstance(v, Tensor) and v.dtype != self.dtype: raise RuntimeError(f"setitem dtype mismatch: self.dtype={self.dtype} != v.dtype={v.dtype}")
    if not isinstance(v, Tensor): v = Tensor(v if not isinstance(v, (list, tuple)) else np.asarray(v), device=self.device, dtype=self.dtype)
    base = self.uop
    while base.op in GroupOp.Movement: base = base.src[0]
    # an unrealized view of another (lazy) tensor: writing into it can't reach that tensor, so refuse (realize it first)
    if base.op is not Ops.BUFFER and self.uop.op in GroupOp.Movement and base.op is not Ops.CONST:
      raise RuntimeError("setitem target is an unrealized view of another tensor; call .contiguous().realize() on it first")
    if not Tensor.no_grad and (self.requires_grad or v.requires_grad): return self._setitem_with_grad(indices, v)
    if base.op is not Ops.BUFFER: self.realize()
    # v and index tensors must not read the buffer being written (at other positions): materialize them first when they do
    self_bufs = {u for u in self.uop.toposort() if u.op is Ops.BUFFER}
    def detach_from_self(t: Any) -> Any:
      # a host round trip: .contiguous() of the buffer itself would not copy
      if isinstance(t, Tensor) and any(u in self_bufs for u in t.uop.toposort()): return Tensor(t.numpy(), device=t.device, dtype=t.dtype)
      return t
    v = detach_from_self(v)
    indices = tuple(detach_from_self(i) for i in indices) if isinstance(indices, tuple) else detach_from_self(indices)
    if _symbolic_basic(indices):
      # bounds with bound Variables (a KV cache slot, t[:, i:i+1] = k) are written in place through the view, for every value
      view = self._getitem(indices)
      view.assign(_broadcast_value(v, view.shape)).realize()
      return
    self.assign(self._getitem(indices, v)).realize()

  def _setitem_with_grad(self: Any, indices: Any, v: Tensor) -> None:
    Tensor = _T()
    from tg_core.uop import GroupOp, Ops
    base = self.uop
    while base.op in GroupOp.Movement: base = base.src[0]
    if self.requires_grad and base.op in (Ops.BUFFER, Ops.CONST):
      # NotImplementedError: tinygrad's class, and a RuntimeError (torch's)
      raise NotImplementedError("a leaf tensor that requires grad (or a view of one) can't be written in place: write into a copy (t = t.clone()) "
                         "or under Tensor.no_grad")
    # `t[i] += v` runs t[i].assign(t[i] + v) first: the sum, not the assign (a gradient leaf), is the value to write
    if v.uop.op is Ops.AFTER and len(v.uop.src) > 1 and v.uop.src[1].op is Ops.STORE:
      v = Tensor(v.uop.src[1].src[1], device=v.device, requires_grad=v.requires_grad)
    # other live views of self would keep the old values, where an in-place write would change them (tinygrad raises too)
    for t in list(all_live_tensors()):
      if t is self or t is v or t.uop is self.uop or t.uop.op not in GroupOp.Movement: continue
      u = t.uop
      while u.op in GroupOp.Movement and u is not self.uop: u = u.src[0]
      if u is self.uop: raise RuntimeError("can't setitem on a tensor with other uses (a view of it is alive): write into a copy (t = t.clone())")
    ret = self._getitem(indices, v)
    self.uop, self.requires_grad = ret.uop, True

  def __delitem__(self: Any, indices: Any) -> None: raise TypeError("Tensor does not support deleting items")

  # *** one-hot ***
  def _one_hot_along_dim(self: Any, num_classes: int, dim: int = -1) -> Tensor:
    if not dtypes.is_int(self.dtype): raise RuntimeError(f"_one_hot_along_dim expects int index tensor, getting {self.dtype}")
    offset = self.ndim - self._resolve_dim(dim) - 1
    dt = dtypes.int64 if num_classes > 2**31 - 1 else dtypes.int32
    return self.eq(_T().arange(num_classes, dtype=dt, device=self.device).reshape((num_classes,) + (1,) * offset))

  def one_hot(self: Any, num_classes: int = -1) -> Tensor:
    """One-hot encode along a new last dim (num_classes=-1: max+1). Like tinygrad the result is int32 (torch: int64).
    `Tensor([0, 2]).one_hot(3)` -> [[1, 0, 0], [0, 0, 1]]."""
    if not dtypes.is_int(self.dtype): raise RuntimeError(f"one_hot is only applicable to index tensors, getting {self.dtype}")
    if num_classes == -1: num_classes = int((self.max() + 1).item()) if self.numel() else 0
    if num_classes < 0: raise ValueError(f"num_classes must be non-negative, got {num_classes}")
    return self.unsqueeze(-1)._one_hot_along_dim(num_classes).where(1, 0)

  # *** gather / scatter ***
  def gather(self: Any, dim: int, index: Tensor) -> Tensor:
    """out[i][j] = self[index[i][j]][j] (dim=0). Lazy one-hot gather; out-of-bounds indices read 0 (torch raises)."""
    if not dtypes.is_int(index.dtype): raise RuntimeError(f"gather(): Expected an integer dtype for index, got {index.dtype}")
    if index.ndim != self.ndim: raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    d = self._resolve_dim(dim)
    if self.ndim == 0: return self.reshape(1).gather(0, index.reshape(1)).reshape(())
    for i, (s, n) in enumerate(zip(self.shape, index.shape)):
      if i != d and n > s:
        raise RuntimeError(f"Size does not match at dimension {i} expected index {list(index.shape)} to be no larger than self {list(self.shape)} "
                           f"apart from dimension {d}")
    x = self.cast(dtypes.uint8) if self.dtype == dtypes.bool else self
    x = x.shrink(tuple((0, n) if i != d else None for i, n in enumerate(index.shape))).unsqueeze(-1).transpose(-1, d)
    mask = index.to(self.device).unsqueeze(-1)._one_hot_along_dim(self.shape[d])
    return mask.where(x, x.zeros_like()).sum(-1, dtype=x.dtype).cast(self.dtype)

  def _pre_scatter(self: Any, dim: int, index: Tensor, src: Tensor) -> tuple[Tensor, Tensor]:
    """src and the one-hot mask, both of shape self.shape + (index.shape[dim],): mask[..., p, ..., j] = index[..., j, ...] == p."""
    if not dtypes.is_int(index.dtype): raise RuntimeError(f"scatter(): Expected an integer dtype for index, got {index.dtype}")
    d = self._resolve_dim(dim)
    if not index.ndim == self.ndim == src.ndim: raise RuntimeError("Index tensor must have the same number of dimensions as self and src tensors")
    for i, (s, n, sr) in enumerate(zip(self.shape, index.shape, src.shape)):
      if (i != d and n > s) or n > sr:
        raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than self {list(self.shape)} apart from dimension {d} "
                           f"and to be no larger than src {list(src.shape)}")
    if self.dtype != src.dtype: raise RuntimeError(f"Expected self.dtype to be equal to src.dtype, got {self.dtype} and {src.dtype}")
    index = index.to(self.device)
    src = src.shrink(tuple((0, n) for n in index.shape))
    src = src.unsqueeze(-1).expand(*src.shape, self.shape[d]).transpose(-1, d)
    mask = index.unsqueeze(-1)._one_hot_along_dim(self.shape[d]).transpose(-1, d)
    pads = tuple((0, s - n) for s, n in zip(self.shape, src.shape[:-1])) + ((0, 0),)
    return src.pad(pads), mask.pad(pads)

  def scatter(self: Any, dim: int, index: Tensor, src: Tensor | float | int | bool, reduce: Literal["multiply", "add"] | None = None) -> Tensor:
    """self with self[index[i][j]][j] = src[i][j] (dim=0); reduce='add'/'multiply' combines instead. Out-of-bounds indices write nothing."""
    if reduce not in {None, "add", "multiply"}: raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce}")
    if not isinstance(src, _T()): src = index.full_like(src, device=self.device, dtype=self.dtype)
    if reduce == "add": return self.scatter_reduce(dim, index, src, "sum", include_self=True)
    if reduce == "multiply": return self.scatter_reduce(dim, index, src, "prod", include_self=True)
    if self.ndim == 0: return self.reshape(1).scatter(0, index.reshape(1), src.reshape(1)).reshape(())
    is_bool = self.dtype == dtypes.bool
    x, s = (self.cast(dtypes.uint8), src.cast(dtypes.uint8)) if is_bool else (self, src)
    s, mask = x._pre_scatter(dim, index, s)
    # duplicates: the last index entry wins, as torch on CPU
    rank = _T().arange(1, mask.shape[-1] + 1, dtype=dtypes.int32, device=self.device)
    win = mask.where(rank, 0).max(-1, keepdim=True)
    val = (mask & rank.eq(win)).where(s, s.zeros_like()).sum(-1, dtype=s.dtype)
    ret = (win.squeeze(-1) > 0).where(val, x)
    return ret.cast(dtypes.bool) if is_bool else ret

  def scatter_reduce(self: Any, dim: int, index: Tensor, src: Tensor, reduce: Literal["sum", "prod", "mean", "amax", "amin"],
                     include_self: bool = True) -> Tensor:
    """Reduce `src` values into self at `index` along `dim` with sum/prod/mean/amax/amin (include_self: self takes part)."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
      raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    if self.ndim == 0: return self.reshape(1).scatter_reduce(0, index.reshape(1), src.reshape(1), reduce, include_self).reshape(())
    src, mask = self._pre_scatter(dim, index, src)
    hit = mask.max(-1)
    def keep(a: Any) -> Any: return self if include_self else hit.logical_not().where(self, a)
    if reduce == "sum": return mask.where(src, src.zeros_like()).sum(-1, dtype=self.dtype).add(keep(0))
    if reduce == "prod": return mask.where(src, src.ones_like()).prod(-1, dtype=self.dtype).mul(keep(1))
    if reduce == "amax": return mask.where(src, src.full_like(dtypes.min(self.dtype))).max(-1).maximum(keep(dtypes.min(self.dtype)))
    if reduce == "amin": return mask.where(src, src.full_like(dtypes.max(self.dtype))).min(-1).minimum(keep(dtypes.max(self.dtype)))
    count = mask.where(1, 0).sum(-1).add(1 if include_self else hit.logical_not().where(1, 0))
    total = mask.where(src, src.zeros_like()).sum(-1, dtype=self.dtype).add(keep(0))
    # like torch, integer means round down (floor division)
    return total.div(count.cast(total.dtype), rounding_mode="floor") if dtypes.is_int(self.dtype) else total.div(count).cast(self.dtype)

  # *** masks ***
  def masked_fill(self: Any, mask: Tensor, value: Tensor | float | int | bool) -> Tensor:
    """Where `mask` is True use `value`, else self; the result keeps self's dtype (as torch). `t.masked_fill(t < 0, 0)`."""
    if mask.dtype != dtypes.bool: raise RuntimeError(f"masked_fill only supports boolean masks, but got mask with dtype {mask.dtype}")
    return mask.where(value, self).cast(self.dtype)

  def _nonzero_flat(self: Any, size: int) -> tuple[Tensor, Tensor]:
    """For the flattened self: the flat positions of the first `size` nonzero elements (int32) and whether each of the `size`
    slots is filled. Lazy: slot k holds the number of elements before the (k+1)-th nonzero one."""
    Tensor = _T()
    if not isinstance(size, int) or size < 0: raise ValueError(f"size must be a non-negative int, got {size!r}")
    nz = self.flatten().ne(0)
    count = nz.cast(dtypes.int32).cumsum()
    k = Tensor.arange(size, dtype=dtypes.int32, device=self.device).reshape(size, 1)
    pos = (count.reshape(1, -1) <= k).cast(dtypes.int32).sum(1, dtype=dtypes.int32) if self.numel() else Tensor.zeros(size, dtype=dtypes.int32)
    return pos, k.reshape(size) < nz.cast(dtypes.int32).sum(dtype=dtypes.int32)

  def masked_select(self: Any, mask: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:
    """The elements of self (broadcast with mask) where mask is True, as a 1-D tensor. Without `size` eager (the result size
    depends on the data); with `size` lazy like tinygrad: exactly `size` elements, padded with `fill_value` or truncated."""
    if mask.dtype != dtypes.bool: raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {mask.dtype}")
    Tensor = _T()
    from tg_core.tensor import _broadcast_shape
    shape = _broadcast_shape(self.shape, mask.shape)
    x, m = self._broadcast_to(shape).flatten(), mask._broadcast_to(shape).flatten()
    if size is not None:
      pos, filled = m._nonzero_flat(size)
      return filled.where(x[pos] if x.numel() else x.zeros_like().pad(((0, size),)), fill_value).cast(self.dtype)
    idx = np.nonzero(m.numpy())[0].astype(np.int32)
    return x[Tensor(idx, device=self.device)]

  def nonzero(self: Any, size: int | None = None, fill_value: Any = 0) -> Tensor:
    """Indices of the non-zero elements, shape (n, ndim), int32 (torch: int64). Without `size` eager; with `size` lazy like
    tinygrad (torch.nonzero_static): (size, ndim), padded with `fill_value` (tinygrad's default 0; torch's -1) or truncated."""
    Tensor = _T()
    if size is not None:
      pos, filled = self._nonzero_flat(size)
      coords = []
      for d in range(self.ndim):
        stride = int(np.prod(self.shape[d + 1:], dtype=np.int64))
        coords.append((pos // stride) % self.shape[d] if self.shape[d] else pos)
      ret = Tensor.stack(*coords, dim=1) if coords else Tensor.zeros(size, 0, dtype=dtypes.int32, device=self.device)
      return filled.reshape(size, 1).where(ret, fill_value).cast(dtypes.int32)
    if self.ndim == 0: return Tensor(np.zeros((int(self.item() != 0), 0), dtype=np.int32), device=self.device)
    return Tensor(np.argwhere(self.numpy() != 0).astype(np.int32).reshape(-1, self.ndim), device=self.device)

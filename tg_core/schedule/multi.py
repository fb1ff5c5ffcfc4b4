"""Multi-device tensors: the sharding rules (`multi_pm`) that map a tensor graph over sharded values to per-device graphs.

A multi-device value is `UNSHARD(MSTACK(v_0, ..., v_{n-1}), arg=axes)`: v_i is the part on device i (an ordinary single-device
tensor graph); axes is () when every v_i holds the whole value (replicated) or (axis,) when v_i holds a contiguous slice of that
axis (slices in device order; sizes may differ: `shard` ceil-divides, the last slice is smaller). The front end builds ordinary
ops over UNSHARD nodes. `multi_pm` rewrites them sources first, pushing every op inside the MSTACK (one op per device), resharding
operands that are split differently, and turning a reduction over the sharded axis into an ALLREDUCE of the per-device partials.
`pm_allreduce` lowers an ALLREDUCE to per-device COPY + ADD graphs: ring (reduce-scatter and all-gather over chunks) or all-to-all.
What remains is a graph of single-device values the scheduler handles as before; `lift_becomes` puts the buffers it made back
under UNSHARD(MSTACK(...)) for the tensors that hold multi-device values."""
from __future__ import annotations
import functools
import itertools
from typing import Sequence

from tg_core.dtype import dtypes
from tg_core.helpers import ALLREDUCE_RING, RING_ALLREDUCE_THRESHOLD, SPEC, ceildiv, prod
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp, identity_element
from tg_core.uop.pattern import PatternMatcher, UPat
from tg_core.uop.rewrite import graph_rewrite


class MultiDeviceError(RuntimeError):
  """An operation on multi-device tensors that can't be mapped to per-device graphs (the message says what to do instead)."""

# *** building multi-device values ***

def shard_sizes(n: int, ndev: int) -> list[int]:
  """Sizes of the slices of an axis of size n over ndev devices: ceil-divided, the last ones smaller (possibly empty)."""
  sz = ceildiv(n, ndev)
  return [max(0, min(sz, n - i * sz)) for i in range(ndev)]

def make_multi(parts: Sequence[UOp], axes: tuple[int, ...]) -> UOp:
  """UNSHARD(MSTACK(parts), axes): the multi-device value whose part on device i is parts[i]."""
  if len(parts) < 1: raise MultiDeviceError("a multi-device value needs at least one device")
  return UOp(Ops.UNSHARD, parts[0].dtype, (UOp(Ops.MSTACK, parts[0].dtype, tuple(parts)),), axes)

def shard_uop(u: UOp, devices: tuple[str, ...], axis: int | None) -> UOp:
  """A single-device value copied to `devices`: whole (axis None) or split along `axis`."""
  if len(set(devices)) != len(devices): raise MultiDeviceError(f"shard devices must be distinct, got {devices}")
  if axis is None: return make_multi([u.copy_to_device(d) for d in devices], ())
  offs = list(itertools.accumulate(shard_sizes(int(u.shape[axis]), len(devices)), initial=0))
  return make_multi([_slice(u, axis, lo, hi).copy_to_device(d) for d, lo, hi in zip(devices, offs, offs[1:])], (axis,))

def is_multi(u: UOp) -> bool: return u.op is Ops.UNSHARD and u.src[0].op is Ops.MSTACK
def parts(m: UOp) -> tuple[UOp, ...]: return m.src[0].src
def devices_of(m: UOp) -> tuple[str, ...]: return tuple(str(p.device) for p in parts(m))
def axis_of(m: UOp) -> int | None: return m.arg[0] if m.arg else None
def bounds(m: UOp) -> tuple[tuple[int, int], ...] | None:
  """The (start, end) of each part along the sharded axis, None for a replicated value."""
  if (a := axis_of(m)) is None: return None
  offs = list(itertools.accumulate([int(p.shape[a]) for p in parts(m)], initial=0))
  return tuple(zip(offs, offs[1:]))

def _slice(u: UOp, axis: int, lo: int, hi: int) -> UOp: return u.shrink(tuple((lo, hi) if i == axis else (0, s) for i, s in enumerate(u.shape)))

def _combine(a: UOp, b: UOp) -> UOp: return a.alu(Ops.OR if a.dtype == dtypes.bool else Ops.ADD, b)

def _cat(pieces: Sequence[UOp], axis: int) -> UOp:
  """Concatenate same-device values along axis (each padded with zeros to the full size, then summed: the pieces are disjoint)."""
  live = [p for p in pieces if p.shape[axis] != 0] or list(pieces[:1])
  if len(live) == 1: return live[0]
  offs = list(itertools.accumulate([int(p.shape[axis]) for p in live], initial=0))
  padded = [p.pad(tuple((lo, offs[-1] - hi) if i == axis else (0, 0) for i in range(len(p.shape)))) for p, lo, hi in zip(live, offs, offs[1:])]
  return functools.reduce(_combine, padded)

def gather_to(m: UOp, device: str) -> UOp:
  """The whole value of multi-device m on one device (copies of the parts that live elsewhere)."""
  ps, devs = parts(m), devices_of(m)
  def local(i: int) -> UOp: return ps[i] if devs[i] == device else ps[i].copy_to_device(device)
  if (a := axis_of(m)) is None: return local(devs.index(device) if device in devs else 0)
  return _cat([local(i) for i in range(len(ps))], a)

def reshard(m: UOp, axis: int | None, bnds: tuple[tuple[int, int], ...] | None, devices: tuple[str, ...]) -> UOp:
  """m split like (axis, bnds) over devices. A replicated value is sliced where it is; anything else is gathered first."""
  if devices_of(m) == devices and axis_of(m) == axis and bounds(m) == bnds: return m
  if axis is None: return make_multi([gather_to(m, d) for d in devices], ())
  assert bnds is not None
  src = parts(m) if axis_of(m) is None and devices_of(m) == devices else [gather_to(m, d) for d in devices]
  return make_multi([_slice(p, axis, lo, hi) for p, (lo, hi) in zip(src, bnds)], (axis,))

# *** the rules ***

def const_multi(c: UOp, d: UOp) -> UOp | None:
  """A constant on a device tuple is the same constant on every device."""
  if not isinstance(d.arg, tuple): return None
  return make_multi([UOp.const(c.dtype, c.arg, dev) for dev in d.arg], ())

def alu_multi(root: UOp) -> UOp | None:
  """Elementwise: the operands are resharded like the first sharded one (replicated ones are sliced locally), then one op per device."""
  if not any(is_multi(s) for s in root.src): return None
  multis = [s for s in root.src if is_multi(s)]
  if (single := next((s for s in root.src if not is_multi(s) and s.device is not None), None)) is not None:
    raise MultiDeviceError(f"{root.op} mixes a tensor on {single.device} with one on {devices_of(multis[0])}: move one of them with "
                           f".to(...) or .shard(...) first")
  devs = devices_of(multis[0])
  if any(devices_of(m) != devs for m in multis):
    raise MultiDeviceError(f"{root.op} of tensors on different device tuples {sorted({devices_of(m) for m in multis})}: use .to(devices) first")
  lead = next((m for m in multis if axis_of(m) is not None), multis[0])
  srcs = [reshard(s, axis_of(lead), bounds(lead), devs) if is_multi(s) else s for s in root.src]
  return make_multi([root.replace(src=tuple(parts(s)[i] if is_multi(s) else s for s in srcs)) for i in range(len(devs))], lead.arg)

def reduce_multi(root: UOp, m: UOp) -> UOp:
  """A reduction off the sharded axis stays sharded; one over it reduces each part and then ALLREDUCEs the partials."""
  op, axes = root.arg
  # a part with an empty reduced axis contributes the identity
  red = [p.r(op, axes) if all(p.shape[i] != 0 for i in axes) else
         UOp.const(p.dtype, identity_element(op, p.dtype), p.device, tuple(1 if i in axes else s for i, s in enumerate(p.shape))) for p in parts(m)]
  if (a := axis_of(m)) is None or a not in axes: return make_multi(red, m.arg)
  return allreduce(red, op)

def allreduce(red: Sequence[UOp], op: Ops) -> UOp:
  return make_multi([UOp(Ops.MSELECT, red[0].dtype, (UOp(Ops.ALLREDUCE, red[0].dtype, (UOp(Ops.MSTACK, red[0].dtype, tuple(red)),), (op,)),), i)
                     for i in range(len(red))], ())

def _reshape_axis(old: tuple, new: tuple, axis: int, bnds: tuple[tuple[int, int], ...]) -> int | None:
  """The axis of `new` that the sharded `axis` of `old` becomes, when every part stays a contiguous block of whole rows of it."""
  before, rest = prod(old[:axis]), prod(old[axis + 1:])
  for na in range(len(new)):
    if prod(new[:na]) != before or (rest2 := prod(new[na + 1:])) == 0: continue
    if all((lo * rest) % rest2 == 0 and (hi * rest) % rest2 == 0 for lo, hi in bnds): return na
  return None

def reshape_multi(root: UOp, m: UOp) -> UOp:
  if (a := axis_of(m)) is None: return make_multi([p.reshape(root.arg) for p in parts(m)], ())
  bnds = bounds(m)
  assert bnds is not None
  if (na := _reshape_axis(tuple(m.shape), tuple(root.arg), a, bnds)) is None:
    raise MultiDeviceError(f"reshape {m.shape} -> {root.arg} splits the sharded axis {a} across parts: shard on another axis, "
                           f"or replicate first with .to(devices)")
  rest, rest2 = prod(m.shape[a + 1:]), prod(root.arg[na + 1:])
  return make_multi([p.reshape(tuple((hi - lo) * rest // rest2 if i == na else s for i, s in enumerate(root.arg)))
                     for p, (lo, hi) in zip(parts(m), bnds)], (na,))

def expand_multi(root: UOp, m: UOp) -> UOp:
  if (a := axis_of(m)) is not None and root.arg[a] != m.shape[a]:
    raise MultiDeviceError(f"expand {m.shape} -> {root.arg} expands the sharded axis {a}: replicate first with .to(devices)")
  return make_multi([p.expand(tuple(p.shape[i] if i == a else s for i, s in enumerate(root.arg))) for p in parts(m)], m.arg)

def permute_multi(root: UOp, m: UOp) -> UOp:
  a = axis_of(m)
  return make_multi([p.permute(root.arg) for p in parts(m)], () if a is None else (root.arg.index(a),))

def pad_multi(root: UOp, m: UOp) -> UOp:
  """Padding the sharded axis pads the first part in front and the last part at the end."""
  a, n = axis_of(m), len(parts(m))
  def arg(i: int) -> tuple:
    return tuple(((b if i == 0 else 0), (e if i == n - 1 else 0)) if j == a else (b, e) for j, (b, e) in enumerate(root.arg))
  return make_multi([p.pad(arg(i)) for i, p in enumerate(parts(m))], m.arg)

def shrink_multi(root: UOp, m: UOp) -> UOp:
  """Shrinking the sharded axis keeps each part's overlap with the kept range (parts outside it become empty)."""
  if (a := axis_of(m)) is None: return make_multi([p.shrink(root.arg) for p in parts(m)], ())
  assert (bnds := bounds(m)) is not None
  b, e = root.arg[a]
  if not isinstance(b, int) or not isinstance(e, int): raise MultiDeviceError(f"a symbolic shrink {root.arg[a]} of the sharded axis {a}")
  def arg(lo: int, hi: int) -> tuple:
    s, t = min(max(b, lo), hi), max(min(e, hi), lo)
    return tuple((s - lo, max(s, t) - lo) if j == a else x for j, x in enumerate(root.arg))
  return make_multi([p.shrink(arg(lo, hi)) for p, (lo, hi) in zip(parts(m), bnds)], m.arg)

def flip_multi(root: UOp, m: UOp) -> UOp:
  """Flipping the sharded axis would reverse the device order: the value is gathered to every device (replicated) first."""
  if (a := axis_of(m)) is not None and root.arg[a]: m = reshard(m, None, None, devices_of(m))
  return make_multi([p.flip(root.arg) for p in parts(m)], m.arg)

def passthrough_multi(root: UOp, m: UOp) -> UOp:
  return make_multi([root.replace(src=(p, *root.src[1:])) for p in parts(m)], m.arg)

def copy_multi(c: UOp, x: UOp, d: UOp) -> UOp | None:
  """COPY of a multi-device value to one device gathers it; to a device tuple copies part by part (or regathers)."""
  if is_multi(x):
    if isinstance(d.arg, str): return gather_to(x, d.arg)
    if len(d.arg) == len(parts(x)): return make_multi([p.copy_to_device(dev) for p, dev in zip(parts(x), d.arg)], x.arg)
    return make_multi([gather_to(x, dev) for dev in d.arg], ())
  return shard_uop(x, d.arg, None) if isinstance(d.arg, tuple) else None

def assign_multi(after: UOp, t: UOp, st: UOp) -> UOp:
  """An assign into a multi-device buffer is one assign per device, the value split like the target."""
  if not is_multi(st.src[1]): raise MultiDeviceError(f"assign of a {st.src[1].device} value to a tensor on {devices_of(t)}: use .to(devices) first")
  v = reshard(st.src[1], axis_of(t), bounds(t), devices_of(t))
  return make_multi([tp.after(tp.store(vp), *after.src[2:]) for tp, vp in zip(parts(t), parts(v))], t.arg)

def refuse_call(root: UOp) -> UOp | None:
  if any(is_multi(s) for s in root.src[1:]):
    raise MultiDeviceError("a CALL over multi-device tensors: call it per device on the parts, or gather the args with .to(device) first")
  return None

multi_pm = PatternMatcher([
  (UPat(Ops.CONST, src=(UPat(Ops.DEVICE, name="d"),), name="c"), const_multi),
  (UPat(GroupOp.ALU, name="root"), alu_multi),
  (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.UNSHARD, name="m"),), name="root"), reduce_multi),
  (UPat(Ops.RESHAPE, src=(UPat(Ops.UNSHARD, name="m"),), name="root"), reshape_multi),
  (UPat(Ops.EXPAND, src=(UPat(Ops.UNSHARD, name="m"),), name="root"), expand_multi),
  (UPat(Ops.PERMUTE, src=(UPat(Ops.UNSHARD, name="m"),), name="root"), permute_multi),
  (UPat(Ops.PAD, src=(UPat(Ops.UNSHARD, name="m"),), name="root"), pad_multi),
  (UPat(Ops.SHRINK, src=(UPat(Ops.UNSHARD, name="m"),), name="root"), shrink_multi),
  (UPat(Ops.FLIP, src=(UPat(Ops.UNSHARD, name="m"),), name="root"), flip_multi),
  (UPat((Ops.CAST, Ops.BITCAST, Ops.CONTIGUOUS, Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), src=(UPat(Ops.UNSHARD, name="m"),), allow_any_len=True,
        name="root"), passthrough_multi),
  (UPat(Ops.COPY, src=(UPat.var("x"), UPat(Ops.DEVICE, name="d")), name="c"), copy_multi),
  (UPat(Ops.AFTER, src=(UPat(Ops.UNSHARD, name="t"), UPat(Ops.STORE, src=(UPat(Ops.UNSHARD), UPat()), name="st")), allow_any_len=True,
        name="after"), assign_multi),
  (UPat(Ops.CALL, name="root"), refuse_call),
])

# *** ALLREDUCE lowering ***

def allreduce_naive(bufs: Sequence[UOp], op: Ops) -> list[UOp]:
  """All-to-all: every device copies every other device's partial and reduces them (n-1 copies of the whole buffer per device)."""
  devs = [str(b.device) for b in bufs]
  return [functools.reduce(lambda a, b: a.alu(op, b), [b if j == i else b.copy_to_device(d) for j, b in enumerate(bufs)]) for i, d in enumerate(devs)]

def allreduce_ring(bufs: Sequence[UOp], op: Ops) -> list[UOp]:
  """Ring: each buffer is viewed as n rows (chunks; zero-padded to a multiple of n). Reduce-scatter: chunk c travels the ring from
  device c+1 to device c, each device combining its own row, so device c ends with the reduced chunk c. All-gather: each reduced
  chunk travels the ring once more. Every device sends and receives 2(n-1)/n of the buffer. (Rows, not flat slices: the
  concatenation's padding then masks whole rows, which the renderers turn into in-bounds loads.)"""
  n, shape, numel = len(bufs), bufs[0].shape, prod(bufs[0].shape)
  m = ceildiv(numel, n)
  rows = [(b.reshape((numel,)).pad(((0, n * m - numel),)) if n * m != numel else b.reshape((numel,))).reshape((n, m)) for b in bufs]
  devs = [str(b.device) for b in bufs]
  gathered: list[list[UOp]] = [[] for _ in range(n)]
  for c in range(n):
    acc: UOp | None = None
    for k in range(1, n + 1):
      d = (c + k) % n
      piece = rows[d].shrink(((c, c + 1), (0, m)))
      acc = piece if acc is None else acc.copy_to_device(devs[d]).alu(op, piece)
    assert acc is not None
    gathered[c].append(acc)
    for k in range(1, n):
      gathered[(c + k) % n].append(gathered[(c + k - 1) % n][-1].copy_to_device(devs[(c + k) % n]))
  # device i appended chunk c at step c: they are in order
  return [_cat(g, 0).reshape((n * m,)).shrink(((0, numel),)).reshape(shape) for g in gathered]

def use_ring(n: int, numel: int) -> bool: return ALLREDUCE_RING.value >= 2 or (ALLREDUCE_RING.value >= 1 and n > 2 and numel > RING_ALLREDUCE_THRESHOLD.value)

def lower_allreduce(red: UOp, ms: UOp) -> UOp:
  bufs, op = ms.src, red.arg[0]
  if len(bufs) == 1: return ms
  n, numel = len(bufs), prod(bufs[0].shape)
  out = (allreduce_ring if use_ring(n, numel) else allreduce_naive)(bufs, op)
  return UOp(Ops.MSTACK, red.dtype, tuple(out))

pm_allreduce = PatternMatcher([
  (UPat(Ops.ALLREDUCE, src=(UPat(Ops.MSTACK, name="ms"),), name="red"), lower_allreduce),
  (UPat(Ops.MSELECT, src=(UPat(Ops.MSTACK, name="ms"),), name="x"), lambda x, ms: ms.src[x.arg]),
])

# *** the pass over a schedule's tensor graph ***

def has_multi(topo: Sequence[UOp]) -> bool:
  """Whether the graph holds a multi-device value (it runs on every realize: a plain loop, the ops in locals)."""
  unshard, device = Ops.UNSHARD, Ops.DEVICE
  for u in topo:
    if (op := u.op) is unshard or (op is device and u.arg.__class__ is tuple): return True
  return False

def multi_to_per_device(sink: UOp, topo: Sequence[UOp]) -> tuple[UOp, dict[UOp, UOp]]:
  """The sink with every multi-device value mapped to its per-device values, and what each output (and each assign, which tensors
  may hold) became. The parts of a multi-device output are outputs of the new sink."""
  keys = list(dict.fromkeys([*sink.src, *(u for u in topo if u.op is Ops.AFTER and isinstance(u.device, tuple))]))
  out = graph_rewrite(UOp.sink(*keys), multi_pm, name="multi")
  out = graph_rewrite(out, pm_allreduce, name="allreduce")
  mapping = dict(zip(keys, out.src))
  flat: dict[UOp, None] = {}
  for r in out.src:
    for p in (parts(r) if is_multi(r) else (r,)): flat[p] = None
  new_sink = UOp.sink(*flat)
  if (left := next((u for u in new_sink.toposort() if u.op in (Ops.UNSHARD, Ops.MSTACK, Ops.MSELECT, Ops.ALLREDUCE)), None)) is not None:
    raise MultiDeviceError(f"no sharding rule maps {left.op} here to per-device graphs: {str(left)[:300]}")
  if SPEC:
    from tg_core.uop.spec import spec_tensor, verify_if_spec
    verify_if_spec(new_sink, spec_tensor, "per-device tensor graph")
  return new_sink, mapping

def lift_becomes(mapping: dict[UOp, UOp], becomes: dict[UOp, UOp]) -> None:
  """Add to `becomes` what each multi-device output now is: UNSHARD(MSTACK(the buffers its parts became))."""
  for orig, r in mapping.items():
    if is_multi(r): becomes[orig] = make_multi([becomes.get(p, p) for p in parts(r)], r.arg)
    elif r in becomes: becomes[orig] = becomes[r]

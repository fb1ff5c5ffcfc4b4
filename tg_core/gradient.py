"""Autograd: derivative rules on UOps (a PatternMatcher) and the reverse walk that applies them."""
from __future__ import annotations
import math

from tg_core.dtype import dtypes, sum_acc_dtype
from tg_core.uop import Ops
from tg_core.uop.ops import UOp
from tg_core.uop.pattern import PatternMatcher, UPat

def reduce_gradient(ctx: UOp, ret: UOp) -> tuple[UOp | None, ...]:
  op, axes = ret.arg
  x = ret.src[0]
  if op is Ops.ADD: return (ctx.expand(x.shape),)
  if op is Ops.MAX:
    # the gradient is split evenly between all positions that hold the max
    mask = x.eq(ret.expand(x.shape)).cast(ctx.dtype)
    count = mask.r(Ops.ADD, axes)
    return ((mask * (ctx / count).expand(x.shape)),)
  if op is Ops.MUL:
    # d(prod x)/dx_j = prod_{i!=j} x_i: ret/x_j where x_j != 0, else the product of the others when x_j is the only zero (like torch)
    is_zero = x.eq(0)
    safe_x = is_zero.where(x.const_like(1), x)
    zero_count = is_zero.cast(dtypes.int32).r(Ops.ADD, axes)
    others = zero_count.eq(1).where(safe_x.r(Ops.MUL, axes), ret.const_like(0)).expand(x.shape)
    return (ctx.expand(x.shape) * is_zero.where(others, ret.expand(x.shape) / safe_x),)
  raise NotImplementedError(f"no gradient for reduce {op}")

def _unbroadcast_pad(ctx: UOp, ret: UOp) -> UOp:
  return ctx.shrink(tuple((b, b + s) for s, (b, _) in zip(ret.src[0].shape, ret.arg)))

pm_gradient = PatternMatcher([
  (UPat(Ops.CAST, name="ret"), lambda ctx, ret: (ctx.cast(ret.src[0].dtype),) if dtypes.is_float(ret.src[0].dtype) else (None,)),
  (UPat(Ops.RECIPROCAL, name="ret"), lambda ctx, ret: (-ctx * ret * ret,)),
  (UPat(Ops.SIN, name="ret"), lambda ctx, ret: (((ret.src[0] * -1) + math.pi / 2).sin() * ctx,)),
  (UPat(Ops.LOG2, name="ret"), lambda ctx, ret: (ctx / (ret.src[0] * math.log(2)),)),
  (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (ret * ctx * math.log(2),)),
  (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: (ctx / (ret * 2),)),
  (UPat(Ops.NEG, name="ret"), lambda ctx, ret: (ctx * -1,)),
  (UPat(Ops.TRUNC, name="ret"), lambda ctx, ret: (ctx.const_like(0),)),
  (UPat((Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.THREEFRY, Ops.BITCAST), name="ret"),
   lambda ctx, ret: (None,) * len(ret.src)),
  (UPat(Ops.WHERE, name="ret"), lambda ctx, ret: (None, ret.src[0].where(ctx, ctx.const_like(0)), ret.src[0].where(ctx.const_like(0), ctx))),
  (UPat(Ops.ADD, name="ret"), lambda ctx, ret: (ctx, ctx)),
  (UPat(Ops.SUB, name="ret"), lambda ctx, ret: (ctx, ctx * -1)),
  (UPat(Ops.MUL, name="ret"), lambda ctx, ret: (ret.src[1] * ctx, ret.src[0] * ctx)),
  (UPat(Ops.FDIV, name="ret"), lambda ctx, ret: (ctx / ret.src[1], (ctx * -1) * ret.src[0] / (ret.src[1] * ret.src[1]))),
  (UPat(Ops.MAX, name="ret"), lambda ctx, ret: (
    (ret.src[0] > ret.src[1]).where(ctx, (ret.src[0].ne(ret.src[1])).where(ctx.const_like(0), ctx * 0.5)),
    (ret.src[0] < ret.src[1]).where(ctx, (ret.src[0].ne(ret.src[1])).where(ctx.const_like(0), ctx * 0.5)))),
  (UPat(Ops.POW, name="ret"), lambda ctx, ret: (ctx * ret.src[1] * ret.src[0].alu(Ops.POW, ret.src[1] - 1),
                                                 ctx * ret * ret.src[0].log2() * math.log(2))),
  (UPat(Ops.MULACC, name="ret"), lambda ctx, ret: (ret.src[1] * ctx, ret.src[0] * ctx, ctx)),
  (UPat(Ops.REDUCE_AXIS, name="ret"), reduce_gradient),
  (UPat((Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD), name="ret"), lambda ctx, ret: (ctx,) + (None,) * (len(ret.src) - 1)),
  (UPat(Ops.DETACH, name="ret"), lambda ctx, ret: (None,)),
  # an assigned tensor is a leaf: the gradient doesn't flow into the buffer or the stored value (tinygrad doesn't flow through ASSIGN)
  (UPat(Ops.AFTER, name="ret"), lambda ctx, ret: (None,) * len(ret.src)),
  (UPat(Ops.COPY, name="ret"), lambda ctx, ret: (ctx.copy_to_device(ret.src[0].device), None)),
  (UPat(Ops.RESHAPE, name="ret"), lambda ctx, ret: (ctx.reshape(ret.src[0].shape),)),
  (UPat(Ops.EXPAND, name="ret"), lambda ctx, ret: (
    ctx.cast(sum_acc_dtype(ctx.dtype)).r(Ops.ADD, tuple(i for i, (s, n) in enumerate(zip(ret.src[0].shape, ret.shape)) if s != n)).cast(ctx.dtype),)),
  (UPat(Ops.PAD, name="ret"), lambda ctx, ret: (_unbroadcast_pad(ctx, ret),)),
  (UPat(Ops.SHRINK, name="ret"), lambda ctx, ret: (ctx.pad(tuple((b, s - e) for s, (b, e) in zip(ret.src[0].shape, ret.arg))),)),
  (UPat(Ops.PERMUTE, name="ret"), lambda ctx, ret: (ctx.permute(tuple(ret.arg.index(i) for i in range(len(ret.arg)))),)),
  (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (ctx.flip(ret.arg),)),
  # multi-device: the gradient of UNSHARD(MSTACK(parts)) is split like it, each part's piece on the part's device
  (UPat(Ops.UNSHARD, name="ret"), lambda ctx, ret: (_split_like_parts(ctx, ret),)),
  (UPat(Ops.MSTACK, name="ret"), lambda ctx, ret: ctx.src + (None,) * (len(ret.src) - len(ctx.src)) if ctx.op is Ops.MSTACK else None),
])

def _split_like_parts(ctx: UOp, ret: UOp) -> UOp:
  """The MSTACK of each part's gradient. A replicated value is one value seen on every device: its gradient goes to the first part only
  (a shorter MSTACK: the other parts get none)."""
  parts, pieces, off = ret.src[0].src, [], 0
  if not ret.arg: return UOp(Ops.MSTACK, ctx.dtype, (ctx.copy_to_device(parts[0].device),))
  for p in parts:
    g = ctx
    if ret.arg:
      a, n = ret.arg[0], p.shape[ret.arg[0]]
      g, off = ctx.shrink(tuple((off, off + n) if i == a else (0, s) for i, s in enumerate(ctx.shape))), off + n
    pieces.append(g.copy_to_device(p.device))
  return UOp(Ops.MSTACK, ctx.dtype, tuple(pieces))

def _add_grads(a: UOp, b: UOp) -> UOp:
  if a.op is Ops.GROUP: return UOp(Ops.GROUP, src=tuple(x if y.op is Ops.NOOP else y if x.op is Ops.NOOP else x + y for x, y in zip(a.src, b.src)))
  return a + b

def _deepwalk(root: UOp, targets: set[UOp]) -> list[UOp]:
  """The nodes on a path from a target to root, in topological order (stops at DETACH and non-differentiable leaves)."""
  in_path: dict[UOp, bool] = {}
  order = list(root.toposort(gate=lambda u: u.op is not Ops.DETACH))
  for u in order: in_path[u] = u in targets or any(in_path.get(s, False) for s in u.src)
  return [u for u in order if in_path[u]]

def _call_gradient(ctx: UOp, ret: UOp) -> tuple[UOp | None, ...] | None:
  """AFTER(RETURNED, CALL) with a custom grad_fxn: the call's args get grad_fxn's gradients (the body gets none)."""
  call = ret.src[1]
  if call.op is not Ops.CALL or not call.num_returned or call.arg is None or call.arg.grad_fxn is None: return None
  arg_grads = call.arg.grad_fxn(ctx, call=call)
  n_args = len(call.call_args)
  if len(arg_grads) != n_args: raise RuntimeError(f"grad_fxn of {call.arg.name} returned {len(arg_grads)} gradients for {n_args} args")
  # gradients flow through the CALL to its args: AFTER's srcs are (RETURNED view, CALL); we return grads for both and
  # attach the arg grads to the CALL node, whose rule below hands them out
  return (None, UOp(Ops.GROUP, src=tuple(g if g is not None else UOp(Ops.NOOP) for g in arg_grads)))

def _call_args_gradient(ctx: UOp, ret: UOp) -> tuple[UOp | None, ...]:
  n_args = len(ret.call_args)
  grads = [None if g.op is Ops.NOOP else g for g in ctx.src]
  return (None, *grads) + (None,) * (len(ret.src) - 1 - n_args)

pm_call_gradient = PatternMatcher([
  (UPat(Ops.AFTER, name="ret"), _call_gradient),
  (UPat(Ops.CALL, name="ret"), _call_args_gradient),
])

def _inline_implicit_calls(root: UOp) -> UOp:
  """Differentiate through calls without a grad_fxn by inlining their bodies."""
  from tg_core.function import returned_value
  subs = {u: returned_value(u) for u in root.toposort() if u.op is Ops.AFTER and len(u.src) == 2 and u.src[1].op is Ops.CALL
          and u.src[1].num_returned and (u.src[1].arg is None or u.src[1].arg.grad_fxn is None)}
  return root.substitute(subs, walk=False) if subs else root

def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
  root = _inline_implicit_calls(root)
  grads: dict[UOp, UOp] = {root: root_grad}
  for t0 in reversed(_deepwalk(root, targets)):
    if t0 not in grads: continue
    if not t0.src: continue
    lgrads = pm_call_gradient.rewrite(t0, ctx=grads[t0]) if t0.op in (Ops.AFTER, Ops.CALL) else None
    if lgrads is None: lgrads = pm_gradient.rewrite(t0, ctx=grads[t0])
    if lgrads is None: raise RuntimeError(f"failed to compute gradient for {t0.op}\n\nin {str(t0)[0:1000]}...")
    assert len(lgrads) == len(t0.src), f"got {len(lgrads)} gradient, expected {len(t0.src)}"
    for k, v in zip(t0.src, lgrads):
      if v is None: continue
      if k in grads: grads[k] = _add_grads(grads[k], v)
      else: grads[k] = v
  return grads

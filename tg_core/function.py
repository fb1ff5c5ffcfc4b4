"""Value-producing calls: `@function` traces a Python function over Tensors into a CALL whose body computes the
outputs from PARAM placeholders; `Tensor.call` calls a prebuilt body. Calls are differentiable: through a custom
`grad_fxn`, or by inlining the body. Before scheduling, calls are inlined (`resolve_calls`)."""
from __future__ import annotations
import functools
import time
from typing import Any, Callable, Generic, TypeVar, overload

from tg_core.helpers import DEBUG
from tg_core.uop import Ops
from tg_core.uop.ops import UOp
from tg_core.uop.pattern import PatternMatcher, UPat
from tg_core.uop.rewrite import graph_rewrite

def _param_subs(call: UOp) -> dict[UOp, UOp]:
  """Each input PARAM of the call's body -> the argument it stands for (flattened to the PARAM's flat shape)."""
  args = call.call_args
  subs: dict[UOp, UOp] = {}
  for u in call.src[0].toposort(enter_calls=False):
    if u.op is Ops.PARAM and 0 <= u.arg.slot < len(args):
      a = args[u.arg.slot]
      if u.arg.size is None:
        if a.shape != (): raise TypeError(f"arg {u.arg.slot} shape mismatch: expected scalar, got {a.shape}")
        subs[u] = a
      else:
        if a.max_numel() != u.arg.size: raise TypeError(f"arg {u.arg.slot} size mismatch: expected {u.arg.size} elements, got {a.shape}")
        subs[u] = a.reshape((u.arg.size,)) if a.shape != (u.arg.size,) else a
  return subs

def returned_value(ret: UOp) -> UOp:
  """The value an AFTER(RETURNED, CALL) output stands for: the call body's stored value with PARAMs replaced by args."""
  rview, call = ret.src[0], ret.src[1]
  placement = rview.base.arg.slot
  out_slot = placement - 1  # RETURNED placement is its position among the call's srcs (src[0] is the body)
  store = next((s for s in call.src[0].src if s.op is Ops.STORE and s.src[0].base.arg.slot == out_slot), None)
  if store is None: raise RuntimeError(f"call has no output stored at slot {out_slot}")
  val = store.src[1]
  subs = _param_subs(call)
  return val.substitute(subs, walk=False) if subs else val

def _inline(ret: UOp) -> UOp | None:
  if len(ret.src) != 2 or ret.src[1].op is not Ops.CALL or not ret.src[1].num_returned or ret.src[0].base.op is not Ops.RETURNED: return None
  return returned_value(ret)

pm_resolve_calls = PatternMatcher([(UPat(Ops.AFTER, name="ret"), _inline)])

def resolve_calls(sink: UOp) -> UOp:
  """Inline every value-producing call (bottom-up, so nested calls resolve too)."""
  if not any(u.op is Ops.CALL for u in sink.toposort()): return sink
  return graph_rewrite(sink, pm_resolve_calls, bottom_up=True, name="resolve calls")

R = TypeVar("R")

class _function(Generic[R]):
  def __init__(self, fxn: Callable[..., R], grad_fxn: Callable | None = None, precompile: bool = False, allow_implicit: bool = False):
    self.fxn, self.grad_fxn, self.precompile, self.allow_implicit = fxn, grad_fxn, precompile, allow_implicit
    self.name = getattr(fxn, "__qualname__", type(fxn).__qualname__)
    functools.update_wrapper(self, fxn)  # type: ignore[arg-type]
  def __get__(self, obj: Any, objtype: Any = None) -> Any: return functools.partial(self.__call__, obj) if obj is not None else self
  def __call__(self, *args: Any, **kwargs: Any) -> R:
    from tg_core.tensor import Tensor
    st = time.perf_counter()
    targs = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
    params = {id(t): Tensor(t.uop.param_like(i), device=t.device) for i, t in enumerate(targs)}
    call_args = [params[id(a)] if isinstance(a, Tensor) else a for a in args]
    call_kwargs = {k: params[id(v)] if isinstance(v, Tensor) else v for k, v in kwargs.items()}
    ret = self.fxn(*call_args, **call_kwargs)
    outs = (ret,) if isinstance(ret, Tensor) else ret
    if not isinstance(outs, tuple) or not all(isinstance(o, Tensor) for o in outs):
      raise RuntimeError(f"function return type {type(ret).__name__} not supported: return a Tensor or a tuple of Tensors")
    implicit = [u for o in outs for u in o.uop.toposort() if u.op is Ops.BUFFER and not u.is_variable]
    implicit = list(dict.fromkeys(implicit))
    if implicit and not self.allow_implicit:
      lines = "\n".join(f"  {i}: dtype={u.dtype}, size={u.arg.size}, device={u.arg.device}" for i, u in enumerate(implicit))
      raise RuntimeError(f"function {self.name} has {len(implicit)} implicit buffer(s), but allow_implicit=False\n{lines}")
    call = UOp.call_outputs([o.uop for o in outs], *[t.uop for t in targs], grad_fxn=self.grad_fxn, name=self.name, precompile=self.precompile)
    res = tuple(Tensor(r, device=o.device) for r, o in zip(call.returned_outputs, outs))
    for r in res: r.requires_grad = any(t.requires_grad for t in targs) or None
    if DEBUG >= 2: print(f"function {call.src[0].key.hex()[:8]} in {(time.perf_counter()-st)*1e3:.2f} ms: {self.name}")
    return res[0] if isinstance(ret, Tensor) else res  # type: ignore[return-value]

@overload
def function(fxn: Callable[..., R]) -> _function[R]: ...
@overload
def function(*, grad_fxn: Callable | None = None, precompile: bool = False, allow_implicit: bool = False) -> Callable[[Callable[..., R]], _function[R]]: ...
def function(fxn: Callable[..., R] | None = None, *, grad_fxn: Callable | None = None, precompile: bool = False, allow_implicit: bool = False) -> Any:
  """Trace `fxn` (Tensors in, a Tensor or tuple of Tensors out) into a value-producing CALL.
  `grad_fxn(*grad_outputs, call=CALL)` returns the gradients of the call's args (UOps)."""
  if fxn is not None: return _function(fxn, grad_fxn, precompile, allow_implicit)
  return lambda f: _function(f, grad_fxn, precompile, allow_implicit)

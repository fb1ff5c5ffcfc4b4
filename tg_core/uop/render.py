"""Printing UOps: a readable nested repr, infix rendering of symbolic expressions, and `pyrender`, which prints
Python that rebuilds a graph."""
from __future__ import annotations
from typing import Any

from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp

def uop_repr(u: UOp, max_nodes: int = 2000) -> str:
  """Nested `UOp(op, dtype, arg=..., src=(...))`. A node printed before shows again as a back-reference `x<n>`."""
  if len(u.toposort()) > max_nodes: return f"<UOp {u.op} {u.dtype!r} with {len(u.toposort())} nodes>"
  seen: dict[UOp, int] = {}
  lines: list[str] = []
  # events: ("open", node, depth) prints a node (and schedules its sources); ("close", text) closes its src tuple
  stack: list[tuple] = [("open", u, 0)]
  while stack:
    ev = stack.pop()
    if ev[0] == "close":
      lines[-1] += ev[1]
      continue
    _, n, depth = ev
    pad = " " * depth
    if n in seen:
      lines.append(f"{pad}x{seen[n]},")
      continue
    seen[n] = len(seen)
    tag = f", tag={n.tag!r}" if n.tag is not None else ""
    if not n.src:
      lines.append(f"{pad}UOp({n.op}, {n.dtype!r}, arg={n.arg!r}{tag}, src=()),")
      continue
    lines.append(f"{pad}UOp({n.op}, {n.dtype!r}, arg={n.arg!r}{tag}, src=(")
    stack.append(("close", ")),"))
    for s in reversed(n.src): stack.append(("open", s, depth + 2))
  out = "\n".join(lines)
  return out[:-1] if out.endswith(",") else out

_infix = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "==",
          Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>", Ops.FDIV: "/"}

def render_expr(u: UOp) -> str:
  """An infix string for a symbolic expression, e.g. `((a*4)+(b//2))`."""
  out: dict[UOp, str] = {}
  for n in u.toposort():
    s = [out.get(x, "?") for x in n.src]
    if n.op is Ops.CONST: out[n] = repr(n.arg)
    elif n.is_variable or (n.op is Ops.PARAM and n.arg.name is not None): out[n] = str(n.arg.name)
    elif n.op is Ops.BIND: out[n] = f"{s[0]}={n.src[1].arg}"
    elif n.op in (Ops.RANGE, Ops.SPECIAL): out[n] = f"r{n.arg[0]}" if n.op is Ops.RANGE else str(n.arg)
    elif n.op in _infix: out[n] = f"({s[0]}{_infix[n.op]}{s[1]})"
    elif n.op is Ops.MAX: out[n] = f"max({s[0]}, {s[1]})"
    elif n.op is Ops.NEG: out[n] = f"(-{s[0]})"
    elif n.op is Ops.WHERE: out[n] = f"({s[1]} if {s[0]} else {s[2]})"
    elif n.op is Ops.CAST: out[n] = f"{n.dtype!r}({s[0]})"
    else: out[n] = f"{n.op.name}({', '.join(s)})"
  return out[u]

def _arg_src(arg: Any, names: dict[UOp, str]) -> str:
  if isinstance(arg, UOp): return names[arg]
  if isinstance(arg, tuple):
    return "(" + "".join(_arg_src(a, names) + ", " for a in arg).rstrip(" ") + ")" if len(arg) != 1 else f"({_arg_src(arg[0], names)},)"
  if isinstance(arg, float) and arg != arg: return "math.nan"
  if isinstance(arg, float) and arg in (float("inf"), float("-inf")): return "math.inf" if arg > 0 else "-math.inf"
  return repr(arg)

def _arg_uops(arg: Any) -> list[UOp]:
  if isinstance(arg, UOp): return [arg]
  return [u for a in arg for u in _arg_uops(a)] if isinstance(arg, tuple) else []

def pyrender(root: UOp) -> str:
  """Python source that rebuilds `root`; it ends by binding the result to `ast`. Shared nodes become variables."""
  names: dict[UOp, str] = {}
  lines = ["import math", "from tg_core.uop import Ops", "from tg_core.uop.ops import UOp, ParamArg, CallInfo, KernelInfo, AxisType",
           "from tg_core.dtype import dtypes, AddrSpace"]
  # UOps can also sit in args (symbolic shapes of RESHAPE/SHRINK/...): those are rendered, with their graphs, before their user
  todo: list[tuple[UOp, bool]] = [(root, False)]
  while todo:
    u, ready = todo.pop()
    if u in names: continue
    if not ready:
      todo.append((u, True))
      todo.extend((a, False) for a in reversed(_arg_uops(u.arg)) if a not in names)
      continue
    for n in u.toposort():
      if n in names: continue
      if (pending := [a for a in _arg_uops(n.arg) if a not in names]):  # render n's arg UOps first, then come back to u
        todo.append((u, True))
        todo.extend((a, False) for a in reversed(pending))
        break
      if n.op is Ops.CALL and n.arg is not None and n.arg.grad_fxn is not None:
        raise NotImplementedError("a call with a Python grad_fxn can't be pyrendered")
      names[n] = f"c{len(names)}"
      src = ", ".join(names[s] for s in n.src)
      extra = f", tag={n.tag!r}" if n.tag is not None else ""
      lines.append(f"{names[n]} = UOp({n.op!r}, {n.dtype!r}, ({src}{',' if len(n.src) == 1 else ''}), {_arg_src(n.arg, names)}{extra})")
  lines.append(f"ast = {names[root]}")
  return "\n".join(lines)

def print_uops(uops: list[UOp]) -> None:
  """One line per UOp of a linear program: index, op, dtype, source indices, arg."""
  idx = {u: i for i, u in enumerate(uops)}
  for i, u in enumerate(uops):
    srcs = [idx.get(s, "--") for s in u.src]
    arg = u.arg if u.op not in GroupOp.ALU else ""
    print(f"{i:4d} {str(u.op):20s}: {str(u.dtype):30s} {str(srcs):32s} {arg!r}")

"""`UPat` patterns over UOps and the `PatternMatcher` that applies a table of `UPat -> function` rules."""
from __future__ import annotations
import functools
import inspect
import itertools
import time
from collections import defaultdict
from typing import Any, Callable, Iterable, Sequence

from tg_core.dtype import DType, dtypes
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp

class UPat:
  """A pattern. `op`/`dtype` accept one value or a collection; `src` is a tuple (ordered), a list (any order: every
  permutation is tried), or a single UPat (every src matches it, any number). `name` captures the matched UOp."""
  __slots__ = ("op", "dtype", "arg", "name", "src", "allow_any_len", "custom_early_reject", "location", "early_reject")

  def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
               src: UPat | Sequence[UPat] | None = None, arg: Any = None, name: str | None = None, allow_any_len: bool = False,
               custom_early_reject: set[Ops] | None = None, location: Any = None):
    self.op: tuple[Ops, ...] | None = (op,) if isinstance(op, Ops) else (tuple(op) if op is not None else None)
    self.dtype: tuple[DType, ...] | None = (dtype,) if isinstance(dtype, DType) else (tuple(dtype) if dtype is not None else None)
    self.arg, self.name, self.allow_any_len = arg, name, allow_any_len
    # src is stored as: None (anything), a list of candidate orderings (tuples), or a UPat repeated over all srcs
    self.src: Any
    if isinstance(src, list): self.src = list(itertools.permutations(src)) if len(src) <= 4 else [tuple(src)]
    elif isinstance(src, tuple): self.src = [src]
    elif isinstance(src, UPat): self.src = src
    elif src is None: self.src = None
    else: raise TypeError(f"UPat src must be a tuple, list or UPat, got {type(src).__name__}")
    self.location = location if location is not None else _caller_location()
    # a src UPat with exactly one op tells us, cheaply, an op that must be among the matched node's sources
    if custom_early_reject is not None: self.early_reject = set(custom_early_reject)
    else:
      self.early_reject = set()
      if isinstance(self.src, list) and len(self.src) == 1 and not isinstance(self, UPatAny):  # UPatAny's src are alternatives
        self.early_reject = {p.op[0] for p in self.src[0] if p.op is not None and len(p.op) == 1}

  @staticmethod
  def any(*src: UPat) -> UPatAny: return UPatAny(src=src)
  def or_after(self, name: str | None = None) -> UPat:
    return UPat.any(self if name is None else self.named(name), UPat(Ops.AFTER, name=name, src=(self,), allow_any_len=True))
  def named(self, name: str) -> UPat:
    ret = type(self).__new__(type(self))  # keep UPatAny an UPatAny
    for k in UPat.__slots__: setattr(ret, k, getattr(self, k, None))  # custom_early_reject may be unset
    ret.name = name
    return ret
  @staticmethod
  def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat: return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None, vec: bool = True, arg: Any = None) -> UPat:
    if arg is not None and vec: return UPat(Ops.CONST, dtype, name=name, arg=arg)
    return UPat((Ops.CONST, Ops.STACK) if vec else Ops.CONST, dtype, name=name, arg=arg)
  @staticmethod
  def const(dtype: DType | Iterable[DType] | None, b: Any) -> UPat: return UPat(Ops.CONST, dtype=dtype, arg=b)

  # *** builders mirroring UOp's, so rules read like the graphs they match ***
  def _alu(self, op: Ops, *src: UPat | Any, commutative: bool | None = None) -> UPat:
    srcs = (self, *(s if isinstance(s, UPat) else UPat.const(None, s) for s in src))
    if commutative is None: commutative = op in GroupOp.Commutative
    return UPat(op, src=list(srcs) if commutative else srcs)
  def alu(self, op: Ops, *src: UPat | Any) -> UPat: return self._alu(op, *src)
  def __add__(self, x: UPat | Any) -> UPat: return self._alu(Ops.ADD, x)
  def __radd__(self, x: UPat | Any) -> UPat: return self._alu(Ops.ADD, x)
  def __mul__(self, x: UPat | Any) -> UPat: return self._alu(Ops.MUL, x)
  def __rmul__(self, x: UPat | Any) -> UPat: return self._alu(Ops.MUL, x)
  def __floordiv__(self, x: UPat | Any) -> UPat: return self._alu(Ops.IDIV, x)
  def __mod__(self, x: UPat | Any) -> UPat: return self._alu(Ops.MOD, x)
  def __lt__(self, x: UPat | Any) -> UPat: return self._alu(Ops.CMPLT, x)
  def __xor__(self, x: UPat | Any) -> UPat: return self._alu(Ops.XOR, x)
  def __and__(self, x: UPat | Any) -> UPat: return self._alu(Ops.AND, x)
  def __or__(self, x: UPat | Any) -> UPat: return self._alu(Ops.OR, x)
  def ne(self, x: UPat | Any) -> UPat: return self._alu(Ops.CMPNE, x)
  def eq(self, x: UPat | Any) -> UPat: return self._alu(Ops.CMPEQ, x)
  def maximum(self, x: UPat | Any) -> UPat: return self._alu(Ops.MAX, x)
  def where(self, x: UPat | Any, y: UPat | Any) -> UPat: return self._alu(Ops.WHERE, x, y, commutative=False)
  def cast(self, dtype: DType | Iterable[DType] | None = None, name: str | None = None) -> UPat: return UPat(Ops.CAST, dtype, (self,), name=name)
  def bitcast(self, dtype: DType | Iterable[DType] | None = None) -> UPat: return UPat(Ops.BITCAST, dtype, (self,))
  def load(self, *src: UPat, **kwargs: Any) -> UPat: return UPat(Ops.LOAD, src=(self, *src), **kwargs)
  def store(self, *src: UPat, **kwargs: Any) -> UPat: return UPat(Ops.STORE, dtypes.void, (self, *src), **kwargs)
  def index(self, *idx: UPat, **kwargs: Any) -> UPat: return UPat(Ops.INDEX, src=(self, *idx), **kwargs)
  def after(self, *src: UPat, **kwargs: Any) -> UPat: return UPat(Ops.AFTER, src=(self, *src), **kwargs)
  def reciprocal(self) -> UPat: return UPat(Ops.RECIPROCAL, src=(self,))
  def f(self, op: Ops, **kwargs: Any) -> UPat: return UPat(op, src=(self,), **kwargs)

  # *** matching ***
  def match(self, uop: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
    """All the ways this pattern matches `uop`, each a dict of named captures (extending `store`)."""
    if (self.op is not None and uop.op not in self.op) or (self.dtype is not None and uop.dtype not in self.dtype and uop.dtype.scalar() not in self.dtype) or \
       (self.arg is not None and self.arg != uop.arg): return []
    if self.name is not None:
      if (prev := store.get(self.name)) is not None:
        if prev is not uop: return []
      else: store = {**store, self.name: uop}
    if self.src is None: return [store]
    if isinstance(self.src, UPat):  # repeated: every src matches the same pattern
      stores = [store]
      for s in uop.src:
        stores = [m for st in stores for m in self.src.match(s, st)]
        if not stores: return []
      return stores
    res: list[dict[str, UOp]] = []
    for order in self.src:
      if len(uop.src) != len(order) and not (self.allow_any_len and len(uop.src) >= len(order)): continue
      stores = [store]
      for p, s in zip(order, uop.src):
        stores = [m for st in stores for m in p.match(s, st)]
        if not stores: break
      res.extend(stores)
    return res
  def __repr__(self) -> str:
    parts = []
    if self.op is not None: parts.append("(" + ", ".join(map(repr, self.op)) + ")" if len(self.op) > 1 else repr(self.op[0]))
    if self.dtype is not None: parts.append(f"dtype={self.dtype}")
    if self.arg is not None: parts.append(f"arg={self.arg!r}")
    if self.name is not None: parts.append(f"name={self.name!r}")
    if self.src is not None: parts.append(f"src={self.src!r}" if isinstance(self.src, UPat) else f"src={self.src[0]!r}")
    return f"UPat({', '.join(parts)})"

class UPatAny(UPat):
  """Matches if any of its alternatives matches."""
  def match(self, uop: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
    return [m for alt in self.src[0] for m in alt.match(uop, store)]

def _caller_location() -> tuple[str, int]:
  f = inspect.currentframe()
  while f is not None and f.f_code.co_filename == __file__: f = f.f_back
  return (f.f_code.co_filename, f.f_lineno) if f is not None else ("?", 0)

def _wants_ctx(fxn: Callable) -> bool:
  """Does the rule function take a `ctx` argument? Plain functions answer from their code object: inspect.signature costs
  ~50 us per rule, and some passes build their matchers per call."""
  if (code := getattr(fxn, "__code__", None)) is not None and not hasattr(fxn, "__wrapped__"):  # signature() follows __wrapped__
    return "ctx" in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
  # a wrapper (functools.wraps, e.g. symbolic's scalar_only): signature() answers for the function it wraps, so do we
  if (inner := getattr(fxn, "__wrapped__", None)) is not None and not hasattr(fxn, "__signature__"): return _wants_ctx(inner)
  # a partial of a plain function (apply.py's per-opt rules): its function's answer, unless the partial binds ctx itself
  if isinstance(fxn, functools.partial) and not fxn.args and "ctx" not in fxn.keywords: return _wants_ctx(fxn.func)
  return "ctx" in inspect.signature(fxn).parameters

class _Rule:
  __slots__ = ("pat", "fxn", "early_reject", "wants_ctx", "name", "only_name", "dtypes")
  def __init__(self, pat: UPat, fxn: Callable):
    self.pat, self.fxn = pat, fxn
    self.wants_ctx = _wants_ctx(fxn)
    self.early_reject = frozenset(pat.early_reject)
    self.name = f"{pat.location[0].rsplit('/', 1)[-1]}:{pat.location[1]}"
    # a pattern that only checks the op (already done by the op index) and names the node: no matching needed
    simple = type(pat) is UPat and pat.src is None and pat.dtype is None and pat.arg is None
    self.only_name: str | None = (pat.name or "") if simple else None
    self.dtypes: frozenset[DType] | None = _pattern_dtypes(pat)

class PatternMatcher:
  """A table of (UPat, function) rules, indexed by op. A function gets the pattern's named captures (and `ctx` if it
  asks for it) and returns the replacement UOp, or None to decline. Tables combine with `+`."""
  def __init__(self, patterns: Sequence[tuple[UPat, Callable]]):
    self.patterns: list[tuple[UPat, Callable]] = list(patterns)
    self.pdict: dict[Ops, list[_Rule]] = defaultdict(list)
    for p, fxn in self.patterns:
      if not isinstance(p, UPat): raise TypeError(f"pattern must be a UPat, got {type(p).__name__}")
      rule = _Rule(p, fxn)
      for op in _pattern_ops(p): self.pdict[op].append(rule)
    # the rules that can match a node of this (op, dtype): a pass over float math skips the integer index rules at once
    self._rules_for: dict[tuple[Ops, DType], list[_Rule]] = {}
  def __add__(self, more: PatternMatcher) -> PatternMatcher: return PatternMatcher(self.patterns + more.patterns)
  def __len__(self) -> int: return len(self.patterns)
  def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
    if (rules := self._rules_for.get(key := (uop.op, uop.dtype))) is None:
      dt, sdt = uop.dtype, uop.dtype.scalar()
      rules = self._rules_for[key] = [r for r in self.pdict.get(uop.op, ()) if r.dtypes is None or dt in r.dtypes or sdt in r.dtypes]
    if not rules: return None
    src_ops: set[Ops] | None = None
    for rule in rules:
      if (nm := rule.only_name) is not None:
        kw = {nm: uop} if nm else {}
        ret = rule.fxn(ctx=ctx, **kw) if rule.wants_ctx else rule.fxn(**kw)
        if ret is not None and ret is not uop:
          if match_stats.enabled: match_stats.hit(rule.name)
          return ret
        continue
      if rule.early_reject:
        if src_ops is None: src_ops = {s.op for s in uop.src}
        if not rule.early_reject <= src_ops: continue
      for match in rule.pat.match(uop, {}):
        ret = rule.fxn(ctx=ctx, **match) if rule.wants_ctx else rule.fxn(**match)
        if ret is not None and ret is not uop:
          if match_stats.enabled: match_stats.hit(rule.name)
          return ret
    return None

def _pattern_dtypes(p: UPat) -> frozenset[DType] | None:
  """The dtypes a node must have (itself or as its scalar) for `p` to match it; None: any."""
  if isinstance(p, UPatAny):
    alts = [_pattern_dtypes(a) for a in p.src[0]]
    return None if any(a is None for a in alts) else frozenset().union(*alts)  # type: ignore[arg-type]
  return frozenset(p.dtype) if p.dtype is not None else None

def _pattern_ops(p: UPat) -> tuple[Ops, ...]:
  if isinstance(p, UPatAny): return tuple(dict.fromkeys(op for alt in p.src[0] for op in _pattern_ops(alt)))
  return p.op if p.op is not None else tuple(Ops)

class _MatchStats:
  """Counts of rules fired and time per named pass, collected when TRACK_MATCH_STATS or DEBUG>=6 is set."""
  def __init__(self) -> None:
    self.enabled = False
    self.rule_hits: dict[str, int] = defaultdict(int)
    self.passes: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0])  # calls, rules fired, seconds
    self._cur = 0
  def hit(self, rule: str) -> None:
    self.rule_hits[rule] += 1
    self._cur += 1
  def begin(self) -> tuple[int, float]: return self._cur, time.perf_counter()
  def end(self, name: str, start: tuple[int, float], nodes: int, verbose: bool) -> None:
    fired, dt = self._cur - start[0], time.perf_counter() - start[1]
    st = self.passes[name]
    st[0] += 1; st[1] += fired; st[2] += dt  # noqa: E702
    if verbose: print(f"rewrite {name:30s}: {fired:6d} rules fired on {nodes:7d} nodes in {dt*1e3:8.2f} ms")
  def report(self) -> str:
    lines = [f"{'pass':30s} {'calls':>6s} {'fired':>8s} {'ms':>10s}"]
    for k, (calls, fired, sec) in sorted(self.passes.items(), key=lambda kv: -kv[1][2]): lines.append(f"{k:30s} {calls:6d} {fired:8d} {sec*1e3:10.2f}")
    lines.append(f"{'rule':30s} {'fired':>8s}")
    for k, v in sorted(self.rule_hits.items(), key=lambda kv: -kv[1])[:30]: lines.append(f"{k:30s} {v:8d}")
    return "\n".join(lines)
match_stats = _MatchStats()

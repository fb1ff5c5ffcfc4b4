"""PTX text -> `Module`: kernels with their parameters, registers (scoped names resolved to slots), variables and an
instruction list whose operands are parsed once. `ptx_interp` compiles that list into closures."""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from tg_cuda.mock.errors import PTXParseError, PTXUnsupportedError

# byte size of every PTX fundamental type (and the packed ones registers and mma use)
TYPE_SIZE = {"pred": 1, "b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2, "b32": 4, "u32": 4, "s32": 4, "f32": 4,
             "f16x2": 4, "bf16x2": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8, "b128": 16}
SPECIAL_REGS = {f"%{n}.{c}" for n in ("tid", "ntid", "ctaid", "nctaid") for c in "xyz"} | {
  "%laneid", "%warpid", "%nwarpid", "%smid", "%nsmid", "%gridid", "%clock", "%clock64", "%globaltimer", "%lanemask_eq", "%lanemask_lt",
  "%lanemask_le", "%lanemask_gt", "%lanemask_ge", "%dynamic_smem_size", "%total_smem_size", "%warpsz"}
# directives inside a body that carry no semantics for execution
_IGNORED_BODY_DIRECTIVES = (".loc", ".file", ".pragma", ".section", ".maxnreg", ".maxntid", ".reqntid", ".minnctapersm")

# operands: ("reg", slot) ("imm", text) ("sreg", name) ("sym", name, offset) ("addr", base, offset) with base a reg/sym operand
# or None, ("vec", [operands]) ("not", reg) ("pair", reg, reg) ("sink",)
Operand = tuple


@dataclass(frozen=True)
class Instr:
  op: str                       # "ld", "mma", ...
  mods: tuple[str, ...]         # the dot-separated rest: ("global", "nc", "v4", "f32")
  operands: tuple[Operand, ...]
  guard: tuple[int, bool] | None  # (predicate slot, negated)
  line: int
  text: str


@dataclass
class Variable:
  name: str
  space: str                    # "shared" / "local" / "global" / "const"
  size: int                     # bytes; 0 for an extern (dynamic) shared array
  align: int
  init: bytes | None = None
  offset: int = 0               # within its space (shared/local); globals get an address when a module is loaded


@dataclass
class Param:
  name: str
  type: str
  size: int
  align: int
  offset: int = 0


@dataclass
class Kernel:
  name: str
  params: list[Param]
  reg_types: list[str] = field(default_factory=list)   # slot -> PTX type
  reg_names: list[str] = field(default_factory=list)
  variables: dict[str, Variable] = field(default_factory=dict)
  instrs: list[Instr] = field(default_factory=list)
  labels: dict[str, int] = field(default_factory=dict)
  shared_size: int = 0          # static shared bytes; a dynamic extern array starts at this offset
  local_size: int = 0
  rets: list[Param] = field(default_factory=list)   # a .func's return parameters
  cc_slot: int | None = None    # the register slot holding the carry flag (CC.CF) of add.cc/addc/... chains, when used

  @property
  def param_size(self) -> int: return max((p.offset + p.size for p in self.params), default=0)


@dataclass
class Module:
  version: str
  target: str
  kernels: dict[str, Kernel]
  globals: dict[str, Variable]
  functions: set[str]           # .func names (calls to them are not supported)


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_MODULE_DIRECTIVE = re.compile(r"\.(version|target|address_size)[ \t]+[^\n]*")
_LINE_DIRECTIVE = re.compile(r"\.(loc|file)[ \t][^\n;]*;?")
_LABEL = re.compile(r"([A-Za-z_$][\w$]*)\s*:(?!:)")
_VARDECL = re.compile(r"^\.(shared|local|global|const)\s+(.*)$", re.S)
_INT = re.compile(r"^-?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)U?$")
_FLOAT = re.compile(r"^-?(0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}|[0-9]+\.[0-9]*(e[+-]?[0-9]+)?|[0-9]+e[+-]?[0-9]+)$")


def parse_int(text: str) -> int:
  t = text.rstrip("U")
  neg = t.startswith("-")
  t = t.lstrip("-")
  v = int(t, 16) if t[:2] in ("0x", "0X") else int(t, 8) if len(t) > 1 and t[0] == "0" else int(t)
  return -v if neg else v


def _split_top(s: str, sep: str = ",") -> list[str]:
  out, depth, cur = [], 0, []
  for ch in s:
    if ch in "[{(": depth += 1
    elif ch in "]})": depth -= 1
    if ch == sep and depth == 0: out.append("".join(cur).strip()); cur = []
    else: cur.append(ch)
  if "".join(cur).strip(): out.append("".join(cur).strip())
  return out


class _Parser:
  def __init__(self, text: str):
    # comments become spaces of the same length so that offsets still map to lines
    self.src = _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    self.line_starts = [0] + [i + 1 for i, c in enumerate(self.src) if c == "\n"]

  def line(self, off: int) -> int: return bisect.bisect_right(self.line_starts, off)

  def error(self, off: int, msg: str) -> PTXParseError: return PTXParseError(f"PTX line {self.line(off)}: {msg}")

  def match_brace(self, i: int) -> int:
    depth = 0
    for j in range(i, len(self.src)):
      if self.src[j] == "{": depth += 1
      elif self.src[j] == "}":
        depth -= 1
        if depth == 0: return j
    raise self.error(i, "unbalanced '{'")

  def parse(self) -> Module:
    s, i, n = self.src, 0, len(self.src)
    version, target, kernels, gvars, funcs = "", "", {}, {}, set()
    bodies: dict[str, Kernel] = {}
    while i < n:
      while i < n and s[i].isspace(): i += 1
      if i >= n: break
      if _LINE_DIRECTIVE.match(s, i):   # .file at module level (debug line tables)
        i = _LINE_DIRECTIVE.match(s, i).end(); continue
      dm = _MODULE_DIRECTIVE.match(s, i)
      if dm:   # .version / .target / .address_size end at the line's end, not at a ';'
        words = dm.group(0).split()
        if words[0] == ".version": version = words[1]
        elif words[0] == ".target": target = words[1].rstrip(",")
        elif words[1] != "64": raise PTXUnsupportedError(f"PTX line {self.line(i)}: .address_size {words[1]} (only 64 is supported)")
        i = dm.end()
        continue
      j = i
      while j < n and s[j] not in ";{": j += 1
      head = s[i:j].strip()
      if j < n and s[j] == "{" and "=" not in head:   # a function body
        end = self.match_brace(j)
        words = head.replace("(", " ( ").split()
        if ".entry" in words:
          k = self.parse_kernel(head, i, j, end)
          kernels[k.name] = k
        elif ".func" in words:
          f = self.parse_func(head, i, j, end)
          funcs.add(f.name)
          bodies[f.name] = f
        elif words[0] == ".section": pass   # debug sections (-G / -lineinfo): nothing to execute
        else: raise self.error(i, f"unknown top-level block {head[:60]!r}")
        i = end + 1
        continue
      if j < n and s[j] == "{":     # initializer: .global .b8 x[4] = {1, 2, 3, 4};
        j = self.match_brace(j)
        while j < n and s[j] != ";": j += 1
      stmt = s[i:j].strip()
      i = j + 1
      words = stmt.split()
      if not words: continue
      decl = re.sub(r"^(\.(visible|extern|weak|common)\s+)+", "", stmt)
      if decl.startswith(".func") or ".func" in decl.split(): funcs.add(decl.split("(")[-2].split()[-1] if "(" in decl else decl.split()[-1]); continue
      m = _VARDECL.match(decl)
      if not m: raise self.error(i, f"unknown module-level statement {stmt[:60]!r}")
      v = self.parse_var(m.group(1), m.group(2), i)
      gvars[v.name] = v
    # calls to .func bodies are inlined (NVRTC emits them for f64 sin/cos/pow's slow paths and __noinline__ functions)
    for name in list(kernels): kernels[name] = _Inliner(bodies, funcs).expand(kernels[name])
    # module-level .shared variables belong to every kernel's shared window
    shared = {n: v for n, v in gvars.items() if v.space == "shared"}
    for k in kernels.values():
      for n, v in shared.items(): k.variables.setdefault(n, Variable(v.name, v.space, v.size, v.align))
      self.layout(k)
    return Module(version, target, kernels, {n: v for n, v in gvars.items() if v.space != "shared"}, funcs)

  def parse_var(self, space: str, rest: str, off: int) -> Variable:
    init = None
    if "=" in rest: rest, init_text = rest.split("=", 1)
    else: init_text = None
    words = rest.split()
    align = 0
    if words and words[0] == ".align": align = int(words[1]); words = words[2:]
    if words and words[0].startswith(".v"): raise PTXUnsupportedError(f"PTX line {self.line(off)}: vector variable {rest.strip()!r}")
    if not words or words[0][1:] not in TYPE_SIZE: raise self.error(off, f"variable declaration without a type: {rest.strip()!r}")
    t = words[0][1:]
    decl = "".join(words[1:])
    m = re.match(r"^([\w$]+)((?:\[\d*\])*)$", decl)
    if not m: raise self.error(off, f"cannot parse variable {decl!r}")
    name, dims = m.group(1), re.findall(r"\[(\d*)\]", m.group(2))
    count = 1
    for d in dims: count *= int(d) if d else 0
    size = TYPE_SIZE[t] * count
    if init_text is not None:
      vals = [parse_int(x) for x in re.findall(r"-?0[xX][0-9a-fA-F]+|-?\d+", init_text)]
      if t.startswith("f"): raise PTXUnsupportedError(f"PTX line {self.line(off)}: float initializers of {name}")
      init = b"".join((v & ((1 << (8 * TYPE_SIZE[t])) - 1)).to_bytes(TYPE_SIZE[t], "little") for v in vals).ljust(size, b"\0")
    return Variable(name, space, size, align or TYPE_SIZE[t], init)

  def parse_func(self, head: str, start: int, lbrace: int, rbrace: int) -> Kernel:
    m = re.search(r"\.func\s*(\((.*?)\))?\s*([\w$]+)\s*(\((.*?)\))?\s*$", head, re.S)
    if not m: raise self.error(start, "cannot parse .func header")
    f = Kernel(m.group(3), self.parse_params(m.group(5) or "", start))
    f.rets = self.parse_params(m.group(2) or "", start)
    self.parse_body(f, lbrace + 1, rbrace)
    return f

  def parse_kernel(self, head: str, start: int, lbrace: int, rbrace: int) -> Kernel:
    m = re.search(r"\.entry\s+([\w$]+)\s*(\((.*?)\))?", head, re.S)
    if not m: raise self.error(start, "cannot parse .entry header")
    k = Kernel(m.group(1), self.parse_params(m.group(3) or "", start))
    self.parse_body(k, lbrace + 1, rbrace)
    return k

  def parse_params(self, text: str, start: int) -> list[Param]:
    params, off = [], 0
    for p in _split_top(text):
      words = p.split()
      if words[0] != ".param": raise self.error(start, f"kernel parameter {p!r}")
      # `.param .u64 .ptr .global .align 16 name`: the pointer attributes say nothing an interpreter needs
      words = [w for w in words[1:] if not w.startswith(".ptr") and w not in (".global", ".shared", ".const", ".local")]
      align = 0
      if ".align" in words:
        i = words.index(".align")
        align = int(words[i + 1]); words = words[:i] + words[i + 2:]
      t, decl = words[0][1:], "".join(words[1:])
      pm = re.match(r"^([\w$]+)(?:\[(\d+)\])?$", decl)
      if t not in TYPE_SIZE or not pm: raise self.error(start, f"kernel parameter {p!r}")
      size = TYPE_SIZE[t] * (int(pm.group(2)) if pm.group(2) else 1)
      align = align or TYPE_SIZE[t]
      off = (off + align - 1) // align * align
      params.append(Param(pm.group(1), t, size, align, off))
      off += size
    return params

  def parse_body(self, k: Kernel, i: int, end: int) -> None:
    s = self.src
    scopes: list[dict[str, int]] = [{}]
    pending: list[tuple[str, int, _Scope]] = []   # (stmt, offset, index) parsed after all labels are known
    while i < end:
      while i < end and s[i].isspace(): i += 1
      if i >= end: break
      if s[i] == "{": scopes.append({}); i += 1; continue
      if s[i] == "}":
        if len(scopes) == 1: raise self.error(i, "unbalanced '}'")
        scopes.pop(); i += 1; continue
      dm = _LINE_DIRECTIVE.match(s, i, end)
      if dm:   # .loc / .file end at the line's end (no ';'): skipping to a ';' would swallow the next instruction
        i = dm.end(); continue
      lm = _LABEL.match(s, i, end)
      if lm:
        k.labels[lm.group(1)] = len(k.instrs) + len(pending)
        i = lm.end(); continue
      j = s.find(";", i, end)
      if j < 0: raise self.error(i, f"statement without ';': {s[i:end].strip()[:60]!r}")
      stmt = " ".join(s[i:j].split())
      if stmt.startswith(".reg"): self.declare_regs(k, scopes[-1], stmt, i)
      elif stmt.split()[0] in _IGNORED_BODY_DIRECTIVES: pass
      elif _VARDECL.match(stmt) or stmt.startswith(".param "):
        vm = _VARDECL.match(stmt)
        # a `.param` in a body is a call argument / return slot: per thread, so it lives in local memory
        v = self.parse_var(vm.group(1), vm.group(2), i) if vm else self.parse_var("local", stmt[len(".param "):], i)
        old = k.variables.get(v.name)
        if old is not None and old.space == v.space:   # callseq blocks redeclare param0/retval0: one slot of the largest size
          v.size, v.align = max(v.size, old.size), max(v.align, old.align)
        k.variables[v.name] = v
      elif stmt.startswith("."): raise PTXUnsupportedError(f"PTX line {self.line(i)}: directive {stmt.split()[0]} in a kernel body")
      else: pending.append((stmt, i, _Scope(tuple(scopes))))
      i = j + 1
    for stmt, off, scope in pending: k.instrs.append(self.parse_instr(k, stmt, off, scope))
    if not k.instrs or k.instrs[-1].op not in ("ret", "exit", "bra"):
      k.instrs.append(Instr("ret", (), (), None, self.line(end), "ret (implicit at the end of the body)"))

  @staticmethod
  def layout(k: Kernel) -> None:
    """Static shared / local offsets; extern (dynamic) shared arrays start after the static ones."""
    sh = lo = 0
    for v in k.variables.values():
      if v.space == "shared" and v.size:
        sh = (sh + v.align - 1) // v.align * v.align; v.offset = sh; sh += v.size
      elif v.space == "local":
        lo = (lo + v.align - 1) // v.align * v.align; v.offset = lo; lo += v.size
    k.shared_size, k.local_size = (sh + 15) // 16 * 16, (lo + 15) // 16 * 16
    for v in k.variables.values():
      if v.space == "shared" and not v.size: v.offset = k.shared_size

  def declare_regs(self, k: Kernel, scope: dict[str, int], stmt: str, off: int) -> None:
    words = re.sub(r"^\.reg\.", ".reg .", stmt).replace(",", " ").split()   # inline asm writes `.reg.b16 lo, hi`
    if len(words) < 3 or words[1][1:] not in TYPE_SIZE:
      raise PTXUnsupportedError(f"PTX line {self.line(off)}: register declaration {stmt!r} (vector registers are not supported)")
    t = words[1][1:]
    for w in words[2:]:
      m = re.match(r"^([%\w$]+)<(\d+)>$", w)
      names = [f"{m.group(1)}{n}" for n in range(int(m.group(2)))] if m else [w]
      for name in names:
        scope[name] = len(k.reg_types)
        k.reg_types.append(t); k.reg_names.append(name)

  def parse_instr(self, k: Kernel, stmt: str, off: int, scope: _Scope) -> Instr:
    guard = None
    if stmt.startswith("@"):
      g, stmt = stmt[1:].split(None, 1)
      neg = g.startswith("!")
      slot = scope.get(g.lstrip("!"))
      if slot is None: raise self.error(off, f"unknown guard predicate {g!r}")
      guard = (slot, neg)
    parts = stmt.split(None, 1)
    # `.shared::cta` is the CTA's own shared window, i.e. plain `.shared`
    opcode = parts[0].replace(".shared::cta", ".shared").split(".")
    ops = tuple(self.parse_operand(x, scope, k, off) for x in _split_top(parts[1])) if len(parts) > 1 else ()
    return Instr(opcode[0], tuple(opcode[1:]), ops, guard, self.line(off), ("@" + ("!" if guard and guard[1] else "") + "p " if guard else "") + stmt)

  def parse_operand(self, x: str, scope: _Scope, k: Kernel, off: int) -> Operand:
    x = x.strip()
    if x.startswith("["):
      inner = x[1:-1].replace(" ", "")
      m = re.match(r"^([%\w$.]+?)?(?:([+-])(-?(?:0[xX][0-9a-fA-F]+|\d+)))?$", inner)
      if not m: raise self.error(off, f"cannot parse address {x!r}")
      base_txt, sign, num = m.groups()
      disp = parse_int(num) * (-1 if sign == "-" else 1) if num else 0
      if base_txt is None: return ("addr", None, disp)
      if _INT.match(base_txt): return ("addr", None, parse_int(base_txt) + disp)
      return ("addr", self.parse_operand(base_txt, scope, k, off), disp)
    if x.startswith("{"): return ("vec", [self.parse_operand(e, scope, k, off) for e in _split_top(x[1:-1])])
    if x.startswith("("): return ("plist", [e.strip() for e in _split_top(x[1:-1])])   # call (ret), f, (args)
    if x.startswith("!"): return ("not", self.parse_operand(x[1:], scope, k, off))
    if "|" in x: a, b = x.split("|"); return ("pair", self.parse_operand(a, scope, k, off), self.parse_operand(b, scope, k, off))
    if x == "_": return ("sink",)
    if x in scope: return ("reg", scope[x])
    if x in SPECIAL_REGS: return ("sreg", x)
    if _INT.match(x) or _FLOAT.match(x): return ("imm", x)
    if x.startswith("%"): raise self.error(off, f"unknown register {x!r}")
    m = re.match(r"^([\w$]+)(?:\+(\d+))?$", x)
    if m: return ("sym", m.group(1), int(m.group(2) or 0))
    raise self.error(off, f"cannot parse operand {x!r}")


class _Inliner:
  """Replaces each `call` by a copy of the callee's body: fresh register slots, its variables renamed per call site, its
  formal parameters bound to the caller's argument slots, `ret` turned into a branch to the return point."""
  MAX_DEPTH = 8

  def __init__(self, bodies: dict[str, Kernel], declared: set[str]):
    self.bodies, self.declared, self.sites = bodies, declared, 0

  def expand(self, k: Kernel, depth: int = 0) -> Kernel:
    if not any(ins.op == "call" for ins in k.instrs): return k
    if depth > self.MAX_DEPTH: raise PTXUnsupportedError(f"calls nested deeper than {self.MAX_DEPTH} (recursion?) in {k.name}")
    out = Kernel(k.name, k.params, list(k.reg_types), list(k.reg_names), dict(k.variables), [], {}, rets=k.rets)
    at: dict[int, list[str]] = {}
    for name, i in k.labels.items(): at.setdefault(i, []).append(name)
    for i, ins in enumerate(k.instrs):
      for name in at.get(i, []): out.labels[name] = len(out.instrs)
      if ins.op == "call": self.inline(out, ins, depth)
      else: out.instrs.append(ins)
    for name in at.get(len(k.instrs), []): out.labels[name] = len(out.instrs)
    return out

  def inline(self, out: Kernel, ins: Instr, depth: int) -> None:
    ops = list(ins.operands)
    rets = ops.pop(0)[1] if ops and ops[0][0] == "plist" else []
    if not ops or ops[0][0] != "sym": raise PTXUnsupportedError(f"PTX line {ins.line}: indirect call in `{ins.text}`")
    name = ops.pop(0)[1]
    args = ops.pop(0)[1] if ops and ops[0][0] == "plist" else []
    if name not in self.bodies:
      why = "declared without a body (e.g. vprintf, malloc)" if name in self.declared else "not defined in this module"
      raise PTXUnsupportedError(f"PTX line {ins.line}: call of {name}, {why}, in `{ins.text}`")
    if ins.guard is not None: raise PTXUnsupportedError(f"PTX line {ins.line}: predicated call in `{ins.text}`")
    f = self.expand(self.bodies[name], depth + 1)
    if len(args) != len(f.params) or len(rets) != len(f.rets): raise PTXUnsupportedError(f"PTX line {ins.line}: argument count of `{ins.text}`")
    self.sites += 1
    tag = f"#{name}#{self.sites}"
    base = len(out.reg_types)
    out.reg_types += f.reg_types
    out.reg_names += [n + tag for n in f.reg_names]
    rename = {p.name: a for p, a in zip(f.params, args)} | {p.name: r for p, r in zip(f.rets, rets)}
    for v in f.variables.values():
      rename[v.name] = v.name + tag
      out.variables[v.name + tag] = Variable(v.name + tag, v.space, v.size, v.align, v.init)
    rename |= {lab: lab + tag for lab in f.labels}
    ret_label = "ret" + tag
    at: dict[int, list[str]] = {}
    for lab, i in f.labels.items(): at.setdefault(i, []).append(lab)

    def op(o: Operand) -> Operand:
      kind = o[0]
      if kind == "reg": return ("reg", o[1] + base)
      if kind == "sym": return ("sym", rename.get(o[1], o[1]), o[2])
      if kind == "addr": return ("addr", None if o[1] is None else op(o[1]), o[2])
      if kind == "vec": return ("vec", [op(e) for e in o[1]])
      if kind in ("not",): return (kind, op(o[1]))
      if kind == "pair": return ("pair", op(o[1]), op(o[2]))
      return o
    for i, fi in enumerate(f.instrs):
      for lab in at.get(i, []): out.labels[lab + tag] = len(out.instrs)
      guard = None if fi.guard is None else (fi.guard[0] + base, fi.guard[1])
      if fi.op in ("ret",): out.instrs.append(Instr("bra", (), (("sym", ret_label, 0),), guard, fi.line, f"{fi.text} (return from {name})"))
      else: out.instrs.append(Instr(fi.op, fi.mods, tuple(op(o) for o in fi.operands), guard, fi.line, fi.text))
    out.labels[ret_label] = len(out.instrs)


class _Scope:
  """The register names visible at one statement: the enclosing `{ }` blocks' dicts, innermost last (shared, not copied)."""
  def __init__(self, chain: tuple[dict[str, int], ...]): self.chain = chain
  def get(self, name: str) -> int | None:
    for sc in reversed(self.chain):
      if name in sc: return sc[name]
    return None
  def __contains__(self, name: str) -> bool: return self.get(name) is not None
  def __getitem__(self, name: str) -> int:
    v = self.get(name)
    if v is None: raise KeyError(name)
    return v


def parse_ptx(text: str) -> Module:
  """Parses PTX text (as NVRTC / nvcc -ptx or a renderer emits it) into a `Module`."""
  return _Parser(text).parse()

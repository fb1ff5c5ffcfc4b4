"""PTX straight from tg's linear program (renderer `PTX`): no NVRTC. The semantics are the CUDA C renderer's
(tg_cuda.renderer, itself the PYTHON reference's): float16/bfloat16 are 16 bits in memory and float32 in registers,
rounded back after every ALU op; integer x/0, INT_MIN/-1, shifts by the width or more and float -> int of NaN/inf follow
the reference; float MAX propagates NaN; float arithmetic carries an explicit rounding mode (`add.rn`, `mul.rn`), so
ptxas never contracts it into an fma (only the register-accumulator update `acc + a*b` is one `fma.rn`, as CUDA C's).

Registers: bool is a `.pred`; integers up to 32 bits live in `.b32` registers (8/16-bit values kept sign- or zero-extended
by a `bfe` after every op that can leave their range), 64-bit integers in `.b64`, float16/bfloat16/float32 in `.f32`,
float64 in `.f64`. PTX has no accurate exp2/log2/sin (only `.approx`), so the caps leave them to the core's
approximations (tg_core/codegen/transcendental.py); SQRT and RECIPROCAL are the IEEE `sqrt.rn`/`rcp.rn`.

A value is a register named by the uop that makes it; a pass over the program is a table `Ops -> template` (`_ALU`,
`_FLOAT_ALU`, `_INT_ALU`, `_BOOL_ALU`) whose entries emit PTX lines. REG buffers are `.local` arrays (ptxas promotes
constant-indexed ones to registers), LOCAL buffers `.shared`, BARRIER `bar.sync 0`. Launch contract: the same as the CUDA C
renderer's (variables as .u32 params, then a .u64 pointer per buffer slot; `.maxntid` is the block of a kernel without
LOCAL dims)."""
from __future__ import annotations
import dataclasses
import math
import struct
from collections import defaultdict
from typing import Callable

import numpy as np

from tg_core.device import Renderer, TensorCore
from tg_core.dtype import AddrSpace, DType, dtypes
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp
from tg_cuda.renderer import ARCHS, FLAT_BLOCK, CUDARenderer, _contractible, _scalar, mma_instruction, tensor_cores_of

# the lowest PTX ISA version that knows each arch (the driver JIT and ptxas accept any version up to their own)
PTX_VERSION = {"sm_75": "7.0", "sm_80": "7.0", "sm_86": "7.1", "sm_87": "7.4", "sm_89": "7.8", "sm_90": "7.8", "sm_90a": "8.0", "sm_100": "8.6",
               "sm_100a": "8.6", "sm_101": "8.6", "sm_103": "8.8", "sm_110": "9.0", "sm_120": "8.7", "sm_121": "8.8"}

# register kind of each scalar dtype: (register prefix, .reg type)
_KINDS = {"p": ".pred", "h": ".b16", "r": ".b32", "rd": ".b64", "f": ".f32", "fd": ".f64"}
_SMALL_FLOATS = (dtypes.float16, dtypes.bfloat16)

def kind(dt: DType) -> str:
  s = _scalar(dt)
  if dt.count != 1: raise NotImplementedError(f"the PTX renderer has no vector types (caps.vector_upcast is off), got {dt}")
  if s == dtypes.bool: return "p"
  if s == dtypes.float64: return "fd"
  if dtypes.is_float(s):
    if s not in (dtypes.float32, *_SMALL_FLOATS): raise NotImplementedError(f"the PTX renderer has no type for {dt} (emulated by the core)")
    return "f"
  return "rd" if s.itemsize == 8 else "r"

def _bits(dt: DType) -> int: return 1 if _scalar(dt) == dtypes.bool else _scalar(dt).itemsize * 8
def _signed(dt: DType) -> bool: return dtypes.is_int(_scalar(dt)) and not dtypes.is_unsigned(_scalar(dt))
def _is_float(dt: DType) -> bool: return dtypes.is_float(_scalar(dt))

def atype(dt: DType) -> str:
  """The PTX type of arithmetic on a register of `dt` (8/16-bit integers compute in 32 bits)."""
  s = _scalar(dt)
  if s == dtypes.float64: return "f64"
  if _is_float(s): return "f32"
  return f"{'s' if _signed(s) else 'u'}{64 if s.itemsize == 8 else 32}"

def mtype(dt: DType) -> str:
  """The PTX type of `dt` in memory (ld/st)."""
  s = _scalar(dt)
  if s == dtypes.bool: return "u8"
  if s in _SMALL_FLOATS: return "b16" if s == dtypes.float16 else "u16"
  if _is_float(s): return f"f{s.itemsize * 8}"
  return f"{'s' if _signed(s) else 'u'}{s.itemsize * 8}"

def imm(v: object, dt: DType) -> str:
  """An immediate with the reference's value in the register type of `dt` (float16: rounded to half, as the CUDA C renderer)."""
  s = _scalar(dt)
  if s == dtypes.float64: return "0d" + struct.pack(">d", float(v)).hex().upper()  # type: ignore[arg-type]
  if _is_float(s):
    f = float(np.float16(float(v))) if s == dtypes.float16 else float(v)  # type: ignore[arg-type]
    return "0f" + np.array(f, np.float32).tobytes()[::-1].hex().upper()
  b = 64 if s.itemsize == 8 else 32
  iv = int(v) & ((1 << _bits(s)) - 1) if s != dtypes.bool else int(bool(v))  # type: ignore[call-overload]
  if _signed(s) and iv >= 1 << (_bits(s) - 1): iv -= 1 << _bits(s)  # sign-extended, as the register holds it
  return f"{iv & ((1 << b) - 1):#x}"

class PTXRenderer(Renderer):
  """PTX text for `caps.arch`. `check` (NULL's compile-only target) assembles every kernel with ptxas (else parses it with the
  interpreter's parser); otherwise the compiler hands the PTX to the driver (its JIT on a GPU, the interpreter on MOCK+CUDA)."""
  caps = dataclasses.replace(CUDARenderer.caps, native_transcendentals=frozenset({Ops.SQRT, Ops.RECIPROCAL}))

  def __init__(self, check: bool = True) -> None:
    from tg_cuda.compiler import PTXCompiler
    self._check = check
    self.compiler = PTXCompiler(self.caps.arch, check)

  def select_arch(self, arch: str) -> None:
    from tg_cuda.compiler import PTXCompiler
    self.caps = dataclasses.replace(self.caps, arch=arch, tensor_cores=tensor_cores_of(arch))
    self.compiler = PTXCompiler(arch, self._check)

  def render(self, uops: list[UOp]) -> str: return _PTXWriter(uops, self.caps.arch).render()

# *** ALU templates: each takes the writer, the destination register, the source registers and the operands' dtype ***
Template = Callable[..., None]

def _fmax(w: _PTXWriter, d: str, s: list[str], t: str) -> None:  # NaN in either gives NaN, as numpy.maximum
  p, q = w.new("p"), w.new("p")
  w.ins(f"setp.gt.{t} {p}, {s[0]}, {s[1]}", f"setp.nan.{t} {q}, {s[0]}, {s[0]}", f"or.pred {p}, {p}, {q}", f"selp.{t} {d}, {s[0]}, {s[1]}, {p}")

def _fmulacc(w: _PTXWriter, d: str, s: list[str], t: str) -> None:  # two roundings, as the reference
  m = w.new("fd" if t == "f64" else "f")
  w.ins(f"mul.rn.{t} {m}, {s[0]}, {s[1]}", f"add.rn.{t} {d}, {m}, {s[2]}")

_FLOAT_ALU: dict[Ops, Template] = {
  Ops.ADD: lambda w, d, s, t: w.ins(f"add.rn.{t} {d}, {s[0]}, {s[1]}"), Ops.SUB: lambda w, d, s, t: w.ins(f"sub.rn.{t} {d}, {s[0]}, {s[1]}"),
  Ops.MUL: lambda w, d, s, t: w.ins(f"mul.rn.{t} {d}, {s[0]}, {s[1]}"), Ops.FDIV: lambda w, d, s, t: w.ins(f"div.rn.{t} {d}, {s[0]}, {s[1]}"),
  Ops.MAX: _fmax, Ops.MULACC: _fmulacc, Ops.NEG: lambda w, d, s, t: w.ins(f"neg.{t} {d}, {s[0]}"),
  Ops.RECIPROCAL: lambda w, d, s, t: w.ins(f"rcp.rn.{t} {d}, {s[0]}"), Ops.SQRT: lambda w, d, s, t: w.ins(f"sqrt.rn.{t} {d}, {s[0]}"),
  Ops.TRUNC: lambda w, d, s, t: w.ins(f"cvt.rzi.{t}.{t} {d}, {s[0]}"),
}

def _safe_divisor(w: _PTXWriter, b: str, t: str) -> tuple[str, str, str]:
  """(divisor with 0 and -1 replaced by 1, b == 0, b == -1): PTX leaves x/0 and INT_MIN/-1 unspecified."""
  z, m1, bad, sb = w.new("p"), w.new("p"), w.new("p"), w.new("rd" if t.endswith("64") else "r")
  w.ins(f"setp.eq.{t} {z}, {b}, 0")
  if t[0] == "s": w.ins(f"setp.eq.{t} {m1}, {b}, -1")
  else: w.ins(f"setp.ne.{t} {m1}, {b}, {b}")  # unsigned: never -1
  w.ins(f"or.pred {bad}, {z}, {m1}", f"selp.{t} {sb}, 1, {b}, {bad}")
  return sb, z, m1

def _idiv(w: _PTXWriter, d: str, s: list[str], t: str) -> None:  # x/0 -> 0, x/-1 -> -x (wrapping)
  sb, z, m1 = _safe_divisor(w, s[1], t)
  n = w.new(d_kind(t))
  w.ins(f"div.{t} {d}, {s[0]}, {sb}", f"neg.s{t[1:]} {n}, {s[0]}", f"selp.{t} {d}, {n}, {d}, {m1}", f"selp.{t} {d}, 0, {d}, {z}")

def _imod(w: _PTXWriter, d: str, s: list[str], t: str) -> None:  # x%0 -> x, x%-1 -> 0
  sb, z, m1 = _safe_divisor(w, s[1], t)
  w.ins(f"rem.{t} {d}, {s[0]}, {sb}", f"selp.{t} {d}, 0, {d}, {m1}", f"selp.{t} {d}, {s[0]}, {d}, {z}")

def _shift(op: Ops) -> Template:
  def f(w: _PTXWriter, d: str, s: list[str], t: str) -> None:
    # shift counts are unsigned and PTX clamps them at the width: >= width shifts everything out (SHR of a signed value fills)
    amt = s[1]
    if t.endswith("64"):
      c, amt = w.new("rd"), w.new("r")
      w.ins(f"min.u64 {c}, {s[1]}, 64", f"cvt.u32.u64 {amt}, {c}")
    w.ins(f"{'shl' if op is Ops.SHL else 'shr'}.{('b' if op is Ops.SHL else t[0]) + t[1:]} {d}, {s[0]}, {amt}")
  return f

def d_kind(t: str) -> str: return "rd" if t.endswith("64") else "r"

_INT_ALU: dict[Ops, Template] = {
  Ops.ADD: lambda w, d, s, t: w.ins(f"add.{t} {d}, {s[0]}, {s[1]}"), Ops.SUB: lambda w, d, s, t: w.ins(f"sub.{t} {d}, {s[0]}, {s[1]}"),
  Ops.MUL: lambda w, d, s, t: w.ins(f"mul.lo.{t} {d}, {s[0]}, {s[1]}"),
  Ops.MULACC: lambda w, d, s, t: w.ins(f"mul.lo.{t} {d}, {s[0]}, {s[1]}", f"add.{t} {d}, {d}, {s[2]}"),
  Ops.NEG: lambda w, d, s, t: w.ins(f"neg.s{t[1:]} {d}, {s[0]}"), Ops.IDIV: _idiv, Ops.MOD: _imod,
  Ops.MAX: lambda w, d, s, t: w.ins(f"max.{t} {d}, {s[0]}, {s[1]}"),
  Ops.AND: lambda w, d, s, t: w.ins(f"and.b{t[1:]} {d}, {s[0]}, {s[1]}"), Ops.OR: lambda w, d, s, t: w.ins(f"or.b{t[1:]} {d}, {s[0]}, {s[1]}"),
  Ops.XOR: lambda w, d, s, t: w.ins(f"xor.b{t[1:]} {d}, {s[0]}, {s[1]}"), Ops.SHL: _shift(Ops.SHL), Ops.SHR: _shift(Ops.SHR),
  Ops.TRUNC: lambda w, d, s, t: w.ins(f"mov.b{t[1:]} {d}, {s[0]}"),
}

def _bool_where(w: _PTXWriter, d: str, s: list[str]) -> None:
  x, y = w.new("p"), w.new("p")
  w.ins(f"and.pred {x}, {s[0]}, {s[1]}", f"not.pred {y}, {s[0]}", f"and.pred {y}, {y}, {s[2]}", f"or.pred {d}, {x}, {y}")

def _pred_op(o: str) -> Template: return lambda w, d, s: w.ins(f"{o}.pred {d}, {s[0]}, {s[1]}")

_BOOL_ALU: dict[Ops, Template] = {
  **{op: _pred_op(o) for op, o in
     ((Ops.ADD, "or"), (Ops.MAX, "or"), (Ops.OR, "or"), (Ops.MUL, "and"), (Ops.AND, "and"), (Ops.SUB, "xor"), (Ops.XOR, "xor"), (Ops.CMPNE, "xor"))},
  Ops.NEG: lambda w, d, s: w.ins(f"not.pred {d}, {s[0]}"),
  Ops.MULACC: lambda w, d, s: w.ins(f"and.pred {d}, {s[0]}, {s[1]}", f"or.pred {d}, {d}, {s[2]}"),
  Ops.CMPLT: lambda w, d, s: w.ins(f"not.pred {d}, {s[0]}", f"and.pred {d}, {d}, {s[1]}"),
  Ops.CMPEQ: lambda w, d, s: w.ins(f"xor.pred {d}, {s[0]}, {s[1]}", f"not.pred {d}, {d}"),
  Ops.WHERE: _bool_where,
}

_ZERO = {"h": "b16", "r": "b32", "rd": "b64", "f": "f32", "fd": "f64"}
_ZERO_IMM = {"h": "0", "r": "0", "rd": "0", "f": "0f00000000", "fd": "0d0000000000000000"}
_CMP = {Ops.CMPLT: ("lt", "lt"), Ops.CMPNE: ("ne", "neu"), Ops.CMPEQ: ("eq", "eq")}  # (integer, float: NaN != x is true)

def _threefry(w: _PTXWriter, d: str, x: str, key: str) -> None:
  """threefry2x32 with 20 rounds, as tg_core.runtime.ops_python.threefry2x32, on the 32-bit halves."""
  x0, x1, k0, k1, k2, t = (w.new("r") for _ in range(6))
  w.ins(f"mov.b64 {{{x0}, {x1}}}, {x}", f"mov.b64 {{{k0}, {k1}}}, {key}", f"xor.b32 {k2}, {k0}, {k1}", f"xor.b32 {k2}, {k2}, 0x1BD11BDA",
        f"add.u32 {x0}, {x0}, {k0}", f"add.u32 {x1}, {x1}, {k1}")
  ks, rot = [k0, k1, k2], [[13, 15, 26, 6], [17, 29, 16, 24]]
  for i in range(5):
    for r in rot[i % 2]:
      w.ins(f"add.u32 {x0}, {x0}, {x1}", f"shl.b32 {t}, {x1}, {r}", f"shr.u32 {x1}, {x1}, {32 - r}", f"or.b32 {x1}, {x1}, {t}", f"xor.b32 {x1}, {x1}, {x0}")
    w.ins(f"add.u32 {x0}, {x0}, {ks[(i + 1) % 3]}", f"add.u32 {x1}, {x1}, {ks[(i + 2) % 3]}", f"add.u32 {x1}, {x1}, {i + 1}")
  w.ins(f"mov.b64 {d}, {{{x0}, {x1}}}")

class _PTXWriter:
  def __init__(self, uops: list[UOp], arch: str):
    self.uops, self.arch = uops, arch
    sink = uops[-1] if uops and uops[-1].op is Ops.SINK else None
    self.name = sink.arg.name if sink is not None and sink.arg is not None else "kernel"
    self.r: dict[UOp, str] = {}
    self.lines: list[str] = []
    self.decls: list[str] = []
    self.cnt: dict[str, int] = defaultdict(int)
    self.labels = 0
    self.loops: list[tuple[str, str, str, str]] = []  # (counter register, its type, top label, end label) of the open RANGEs
    self.ifs: list[str] = []
    self.space: dict[UOp, str] = {}  # buffer uop -> its state space (global, shared, local)
    self.vr: dict[UOp, list[str]] = {}  # vector uop -> its registers

  def new(self, k: str) -> str:
    n = self.cnt[k]
    self.cnt[k] += 1
    return f"%{k}{n}"
  def label(self, what: str) -> str:
    self.labels += 1
    return f"$L_{what}{self.labels}"
  def ins(self, *lines: str) -> None: self.lines.extend(f"\t{ln};" for ln in lines)

  # *** small-float rounding and integer normalization (the register invariants) ***
  def round_to(self, d: str, dt: DType) -> None:
    """Round the f32 register `d` to float16/bfloat16 precision in place (no-op for other dtypes)."""
    s = _scalar(dt)
    if s == dtypes.float16:
      h = self.new("h")
      self.ins(f"cvt.rn.f16.f32 {h}, {d}", f"cvt.f32.f16 {d}, {h}")
    elif s == dtypes.bfloat16:
      b = self.f2bf(d)
      self.ins(f"shl.b32 {b}, {b}, 16", f"mov.b32 {d}, {b}")

  def f2bf(self, f: str) -> str:
    """The bfloat16 bits (in a .b32) of the f32 register `f`: round to nearest even; NaN -> 0x7fc0 as the reference."""
    u, t, p = self.new("r"), self.new("r"), self.new("p")
    self.ins(f"mov.b32 {u}, {f}", f"shr.u32 {t}, {u}, 16", f"and.b32 {t}, {t}, 1", f"add.u32 {t}, {t}, 0x7fff", f"add.u32 {t}, {u}, {t}",
             f"shr.u32 {t}, {t}, 16", f"setp.nan.f32 {p}, {f}, {f}", f"selp.u32 {t}, 0x7fc0, {t}, {p}")
    return t

  def normalize(self, d: str, dt: DType) -> None:
    """Keep an 8/16-bit integer in its .b32 register sign/zero-extended from its width (wrapping as the reference)."""
    if kind(dt) == "r" and (b := _bits(dt)) < 32: self.ins(f"bfe.{'s' if _signed(dt) else 'u'}32 {d}, {d}, 0, {b}")

  # *** the program ***
  def render(self) -> str:
    uops = self.uops
    bufs = sorted({u.arg.slot: u for u in uops if u.op is Ops.PARAM and u.arg.addrspace is AddrSpace.GLOBAL}.items())
    var_uops = sorted([u for u in uops if u.op is Ops.PARAM and u.arg.addrspace is AddrSpace.ALU], key=lambda v: v.arg.name)
    self.has_local = any(u.op is Ops.SPECIAL and u.arg.startswith("lidx") for u in uops)
    params = []
    for i, v in enumerate(var_uops):  # the variables (int32 each, sorted by name), then a pointer per buffer slot (see tg_cuda.renderer)
      params.append(f".param .u32 var{i}")
      r = self.new("r")
      self.ins(f"ld.param.u32 {r}, [var{i}]")
      self.r[v] = self.convert(r, dtypes.int32, v.dtype)
    by_slot = dict(bufs)
    for slot in range(max(by_slot) + 1 if by_slot else 0):
      params.append(f".param .u64 data{slot}")
      if (p := by_slot.get(slot)) is None: continue
      r = self.new("rd")
      self.ins(f"ld.param.u64 {r}, [data{slot}]", f"cvta.to.global.u64 {r}, {r}")
      self.r[p], self.space[p] = r, "global"
    block = math.prod(int(u.src[0].arg) for u in uops if u.op is Ops.SPECIAL and u.arg.startswith("lidx")) if self.has_local else FLAT_BLOCK
    self.contract = _contractible(uops)
    for u in uops: self.render_uop(u)
    regs = [f"\t.reg {_KINDS[k]} %{k}<{n}>;" for k, n in sorted(self.cnt.items()) if n]
    plist = ",\n".join(f"\t{p}" for p in params)
    head = [f"//\n// generated by tg_cuda.renderer_ptx\n//\n.version {PTX_VERSION[self.arch]}", f".target {self.arch}", ".address_size 64", ""]
    return "\n".join([*head, f".visible .entry {self.name}(\n{plist}\n)", f".maxntid {block}, 1, 1", "{", *regs, *self.decls, *self.lines,
                      "$L_exit:", "\tret;", "}", ""])

  @staticmethod
  def _root(u: UOp) -> UOp:
    while u.op is Ops.AFTER: u = u.src[0]
    return u

  def define(self, u: UOp) -> str:
    self.r[u] = d = self.new(kind(u.dtype))
    return d

  def render_uop(self, u: UOp) -> None:
    op, r = u.op, self.r
    if op in (Ops.SINK, Ops.GROUP, Ops.NOOP): return
    if op in (Ops.STACK, Ops.GEP, Ops.WMMA) or (op in (Ops.CONST, Ops.LOAD) and u.dtype.count > 1): return self.render_vector(u)
    if op is Ops.STORE and u.src[1].dtype.count > 1: return self.render_vector_store(u)
    if op is Ops.PARAM:
      if u not in r: raise NotImplementedError(f"PARAM with addrspace {u.arg.addrspace} is not supported by the PTX renderer")
      return
    if op is Ops.BUFFER:
      name = f"{'reg' if u.arg.addrspace is AddrSpace.REG else 'smem'}{len(self.decls)}"
      space = "local" if u.arg.addrspace is AddrSpace.REG else "shared"
      self.decls.append(f"\t.{space} .align 16 .b8 {name}[{max(u.arg.size or 1, 1) * self.elem_size(u)}];")
      d = self.new("rd")
      self.ins(f"mov.u64 {d}, {name}")
      r[u], self.space[u] = d, space
      return
    if op is Ops.AFTER:
      r[u] = r[u.src[0]]
      return
    if op is Ops.CONST:
      d = self.define(u)
      if kind(u.dtype) == "p":
        t = self.new("r")
        self.ins(f"mov.u32 {t}, {int(bool(u.arg))}", f"setp.ne.u32 {d}, {t}, 0")
      else: self.ins(f"mov.{'b' + atype(u.dtype)[1:] if not _is_float(u.dtype) else atype(u.dtype)} {d}, {imm(u.arg, u.dtype)}")
      return
    if op is Ops.SPECIAL: return self.render_special(u)
    if op is Ops.INDEX:
      if len(u.src) > 3: raise NotImplementedError("the PTX renderer supports INDEX(buf, idx[, gate]) only")
      buf = self._root(u.src[0])
      idx = r[u.src[1]] if kind(u.src[1].dtype) == "rd" else self.convert(r[u.src[1]], u.src[1].dtype, dtypes.int64)
      d = self.new("rd")
      self.ins(f"mad.lo.s64 {d}, {idx}, {self.elem_size(buf)}, {r[u.src[0]]}")
      r[u] = d
      return
    if op is Ops.LOAD: return self.render_load(u)
    if op is Ops.STORE: return self.render_store(u)
    if op is Ops.RANGE:
      d, t = self.define(u), atype(u.dtype)
      top, end, p = self.label("loop"), self.label("endloop"), self.new("p")
      self.ins(f"mov.b{t[1:]} {d}, 0")
      self.lines.append(f"{top}:")
      self.ins(f"setp.ge.{t} {p}, {d}, {r[u.src[0]]}", f"@{p} bra {end}")
      self.loops.append((d, t, top, end))
      return
    if op is Ops.END:
      for _ in [s for s in u.src[1:] if s.op is Ops.RANGE]:
        d, t, top, end = self.loops.pop()
        self.ins(f"add.{t} {d}, {d}, 1", f"bra {top}")
        self.lines.append(f"{end}:")
      return
    if op is Ops.IF:
      end = self.label("endif")
      self.ins(f"@!{r[u.src[0]]} bra {end}")
      self.ifs.append(end)
      return
    if op is Ops.ENDIF:
      self.lines.append(f"{self.ifs.pop()}:")
      return
    if op is Ops.BARRIER:
      self.ins("bar.sync 0")
      return
    if op is Ops.CAST:
      r[u] = self.convert(r[u.src[0]], u.src[0].dtype, u.dtype)
      return
    if op is Ops.BITCAST:
      r[u] = self.bitcast(r[u.src[0]], u.src[0].dtype, u.dtype)
      return
    if op is Ops.ADD and u in self.contract:  # an accumulator update a*b + c: one fma (see tg_cuda.renderer._contractible)
      m, c = (u.src[0], u.src[1]) if u.src[0].op is Ops.MUL else (u.src[1], u.src[0])
      d = self.define(u)
      self.ins(f"fma.rn.{atype(u.dtype)} {d}, {r[m.src[0]]}, {r[m.src[1]]}, {r[c]}")
      return self.round_to(d, u.dtype)
    if op in GroupOp.ALU: return self.render_alu(u)
    raise NotImplementedError(f"the PTX renderer can't render {op}")

  def elem_size(self, buf: UOp) -> int:
    """Bytes per element of a buffer: its storage dtype (REG buffers hold the register value: small floats as f32, bool as u8)."""
    s = _scalar(buf.dtype)
    if buf.op is Ops.BUFFER and buf.arg.addrspace is AddrSpace.REG and s in _SMALL_FLOATS: return 4 * buf.dtype.count
    return (1 if s == dtypes.bool else s.itemsize) * buf.dtype.count

  # *** vectors (what tg_cuda.devectorize keeps): a vector is a list of registers, one per lane. A REG buffer of vectors (a
  # vector reduction's or a WMMA's accumulator) is read and written lane by lane; a global one moves with one ld/st.v<n>
  # where the address is aligned to its size (tested at run time: a buffer may be a view at any offset), else lane by lane ***
  def render_vector(self, u: UOp) -> None:
    op, r = u.op, self.r
    if op is Ops.STACK: self.vr[u] = [r[s] for s in u.src]
    elif op is Ops.GEP: r[u] = self.vr[u.src[0]][u.arg[0]]
    elif op is Ops.CONST:
      d = self.vr[u] = [self.new(kind(u.dtype.scalar())) for _ in range(u.dtype.count)]
      vals = u.arg if isinstance(u.arg, tuple) else (u.arg,) * u.dtype.count
      if kind(u.dtype.scalar()) == "p": raise NotImplementedError("the PTX renderer has no vector constant of bools (tg_cuda.devectorize splits them)")
      self.ins(*[f"mov.{'b' + atype(u.dtype)[1:] if not _is_float(u.dtype) else atype(u.dtype)} {x}, {imm(v, u.dtype)}" for x, v in zip(d, vals)])
    elif op is Ops.LOAD: self.render_vector_load(u)
    else: self.render_wmma(u)

  def _vector_access(self, space: str, addr: str, n: int, size: int, mt: str, regs: list[str], load: bool) -> None:
    one = (lambda x, a: f"ld.{space}.{mt} {x}, [{a}]") if load else (lambda x, a: f"st.{space}.{mt} [{a}], {x}")
    lanes = [one(x, f"{addr}+{i * size}" if i else addr) for i, x in enumerate(regs)]
    if space != "global":
      self.ins(*lanes)
      return
    t, p = self.new("rd"), self.new("p")
    grp = "{" + ", ".join(regs) + "}"
    self.ins(f"and.b64 {t}, {addr}, {n * size - 1}", f"setp.eq.u64 {p}, {t}, 0",
             f"@{p} ld.{space}.v{n}.{mt} {grp}, [{addr}]" if load else f"@{p} st.{space}.v{n}.{mt} [{addr}], {grp}", *[f"@!{p} {x}" for x in lanes])

  def render_vector_load(self, u: UOp) -> None:
    idx = u.src[0]
    space, buf = self._buf(idx)
    if len(u.src) != 1 or len(idx.src) != 2: raise NotImplementedError("the PTX renderer has no gated vector loads (tg_cuda.devectorize splits them)")
    reg, s, n = space == "local", _scalar(u.dtype), u.dtype.count
    k = kind(s)
    if reg and k == "f": rk, mt = "f", "f32"
    elif k in ("p", "r") or s == dtypes.bfloat16: rk, mt = "r", mtype(s)
    elif s == dtypes.float16: rk, mt = "h", "b16"
    else: rk, mt = k, mtype(s)
    raws = [self.new(rk) for _ in range(n)]
    self._vector_access(space, self.r[idx], n, self.elem_size(buf) // buf.dtype.count if reg else self.elem_size(buf), mt, raws, True)
    vals = []
    for raw in raws:
      if k == "p":
        vals.append(self.new("p"))
        self.ins(f"setp.ne.u32 {vals[-1]}, {raw}, 0")
      elif reg or k != "f" or s == dtypes.float32: vals.append(raw)
      elif s == dtypes.float16:
        vals.append(self.new("f"))
        self.ins(f"cvt.f32.f16 {vals[-1]}, {raw}")
      else: vals.append(self.from_bits(raw, s))
    self.vr[u] = vals

  def render_vector_store(self, u: UOp) -> None:
    idx = u.src[0]
    space, buf = self._buf(idx)
    if len(u.src) != 2 or len(idx.src) != 2: raise NotImplementedError("the PTX renderer has no gated vector stores (tg_cuda.devectorize splits them)")
    reg, dt, n = space == "local", u.src[1].dtype.scalar(), u.src[1].dtype.count
    raws = []
    for v in self.vr[u.src[1]]:
      v, mt = self._stored_value(v, dt, reg)
      raws.append(v)
    self._vector_access(space, self.r[idx], n, self.elem_size(buf) // buf.dtype.count if reg else self.elem_size(buf), mt, raws, False)

  def render_wmma(self, u: UOp) -> None:
    """mma.sync on the fragments: A's and B's 16-bit elements packed two to a .b32 register (low half first)."""
    tc: TensorCore = u.arg
    regs: list[list[str]] = []
    for frag in u.src[:2]:
      bits = []
      for f in self.vr[frag]:
        if tc.dtype_in == dtypes.float16:
          h = self.new("h")
          self.ins(f"cvt.rn.f16.f32 {h}, {f}")
          bits.append(h)
        else:
          h = self.new("h")
          self.ins(f"cvt.u16.u32 {h}, {self.f2bf(f)}")
          bits.append(h)
      packed = [self.new("r") for _ in range(len(bits) // 2)]
      self.ins(*[f"mov.b32 {d}, {{{bits[2 * i]}, {bits[2 * i + 1]}}}" for i, d in enumerate(packed)])
      regs.append(packed)
    d = self.vr[u] = [self.new("f") for _ in range(u.dtype.count)]
    def grp(x: list[str]) -> str: return "{" + ", ".join(x) + "}"
    self.ins(f"{mma_instruction(tc)} {grp(d)}, {grp(regs[0])}, {grp(regs[1])}, {grp(self.vr[u.src[2]])}")

  def render_special(self, u: UOp) -> None:
    dim = int(u.arg[-1])
    xyz = "xyz"[dim]
    d = self.new("r")
    if u.arg.startswith("lidx"): self.ins(f"mov.u32 {d}, %tid.{xyz}")
    elif not self.has_local and dim == 0:
      a, b = self.new("r"), self.new("r")
      self.ins(f"mov.u32 {a}, %ctaid.x", f"mov.u32 {b}, %ntid.x", f"mov.u32 {d}, %tid.x", f"mad.lo.s32 {d}, {a}, {b}, {d}")
    else: self.ins(f"mov.u32 {d}, %ctaid.{xyz}")
    self.r[u] = v = self.convert(d, dtypes.int32, u.dtype)
    if not self.has_local and u.arg == "gidx0":
      p = self.new("p")
      self.ins(f"setp.ge.{atype(u.dtype)} {p}, {v}, {self.r[u.src[0]]}", f"@{p} bra $L_exit")

  def render_alu(self, u: UOp) -> None:
    op, sdt = u.op, u.src[0].dtype
    srcs = [self.r[s] for s in u.src]
    d = self.define(u)
    if op in GroupOp.Comparison:
      if kind(sdt) == "p": return _BOOL_ALU[op](self, d, srcs)
      c = _CMP[op][1 if _is_float(sdt) else 0]
      return self.ins(f"setp.{c}.{atype(sdt)} {d}, {srcs[0]}, {srcs[1]}")
    if kind(u.dtype) == "p":
      if op not in _BOOL_ALU: raise NotImplementedError(f"the PTX renderer can't render {op} on {u.dtype}")
      return _BOOL_ALU[op](self, d, srcs)
    t = atype(u.dtype)
    if op is Ops.WHERE: return self.ins(f"selp.{t if _is_float(u.dtype) else 'b' + t[1:]} {d}, {srcs[1]}, {srcs[2]}, {srcs[0]}")
    if _is_float(u.dtype):
      if op not in _FLOAT_ALU: raise NotImplementedError(f"the PTX renderer can't render {op} on {u.dtype} (PTX has no accurate {op.name.lower()})")
      _FLOAT_ALU[op](self, d, srcs, t)
      return self.round_to(d, u.dtype)
    if op is Ops.THREEFRY:
      if _scalar(u.dtype) != dtypes.uint64: raise NotImplementedError(f"THREEFRY on {u.dtype}")
      return _threefry(self, d, srcs[0], srcs[1])
    if op in (Ops.SHL, Ops.SHR) and _scalar(u.src[1].dtype) != _scalar(u.dtype): srcs[1] = self.convert(srcs[1], u.src[1].dtype, u.dtype)
    if op not in _INT_ALU: raise NotImplementedError(f"the PTX renderer can't render {op} on {u.dtype}")
    _INT_ALU[op](self, d, srcs, t)
    if op not in (Ops.MAX, Ops.AND, Ops.OR, Ops.XOR, Ops.TRUNC, Ops.SHR): self.normalize(d, u.dtype)  # (these stay in range)

  # *** conversions, with the reference's semantics (tg_core.runtime.ops_python._cast / _bitcast, tg_cuda.renderer.render_cast) ***
  def convert(self, v: str, src: DType, dst: DType) -> str:
    s, t = _scalar(src), _scalar(dst)
    if s == t: return v
    ks, kd = kind(src), kind(dst)
    d = self.new(kd)
    if kd == "p":
      if ks == "p": self.ins(f"mov.pred {d}, {v}")
      else: self.ins(f"setp.{'neu' if _is_float(src) else 'ne'}.{atype(src)} {d}, {v}, {imm(0, src)}")
      return d
    if ks == "p":
      self.ins(f"selp.{atype(dst) if _is_float(dst) else 'b' + atype(dst)[1:]} {d}, {imm(1, dst)}, {imm(0, dst)}, {v}")
      return d
    if _is_float(src) and not _is_float(dst):  # NaN/inf -> 0, else truncate, clamp to [-2^63, 2^63-1024], wrap to the width
      x, ok, i = v, self.new("p"), self.new("rd")
      if ks == "f":
        x = self.new("fd")
        self.ins(f"cvt.f64.f32 {x}, {v}")
      c = self.new("fd")
      self.ins(f"testp.finite.f64 {ok}, {x}", f"min.f64 {c}, {x}, 0d43DFFFFFFFFFFFFF", f"cvt.rzi.s64.f64 {i}, {c}", f"selp.b64 {i}, {i}, 0, {ok}")
      if kd == "rd": return i
      self.ins(f"cvt.u32.u64 {d}, {i}")
      self.normalize(d, dst)
      return d
    if not _is_float(src) and not _is_float(dst):
      if ks == "r" and kd == "r": self.ins(f"mov.b32 {d}, {v}")
      elif ks == "rd" and kd == "rd": self.ins(f"mov.b64 {d}, {v}")
      elif ks == "rd": self.ins(f"cvt.u32.u64 {d}, {v}")
      else: self.ins(f"cvt.{'s64.s32' if _signed(src) else 'u64.u32'} {d}, {v}")
      self.normalize(d, dst)
      return d
    if not _is_float(src):  # int -> float
      if t == dtypes.float16:  # straight to half through double, one rounding as the CUDA C renderer (numpy astype(float16))
        x, h = self.new("fd"), self.new("h")
        self.ins(f"cvt.rn.f64.{atype(src)} {x}, {v}", f"cvt.rn.f16.f64 {h}, {x}", f"cvt.f32.f16 {d}, {h}")
        return d
      self.ins(f"cvt.rn.{atype(dst)}.{atype(src)} {d}, {v}")
      self.round_to(d, dst)
      return d
    # float -> float
    if t == dtypes.float16 and ks == "fd":
      h = self.new("h")
      self.ins(f"cvt.rn.f16.f64 {h}, {v}", f"cvt.f32.f16 {d}, {h}")
      return d
    if ks == kd: self.ins(f"mov.f32 {d}, {v}")
    elif kd == "fd": self.ins(f"cvt.f64.f32 {d}, {v}")
    else: self.ins(f"cvt.rn.f32.f64 {d}, {v}")
    self.round_to(d, dst)
    return d

  def bits_of(self, v: str, dt: DType) -> str:
    """The raw bits of a register value: a .b32 for dtypes up to 32 bits, a .b64 for 64-bit ones."""
    s = _scalar(dt)
    if s == dtypes.float16:
      h, d = self.new("h"), self.new("r")
      self.ins(f"cvt.rn.f16.f32 {h}, {v}", f"cvt.u32.u16 {d}, {h}")
      return d
    if s == dtypes.bfloat16: return self.f2bf(v)
    if s == dtypes.bool:
      d = self.new("r")
      self.ins(f"selp.u32 {d}, 1, 0, {v}")
      return d
    if kind(dt) in ("f", "fd"):
      d = self.new("r" if kind(dt) == "f" else "rd")
      self.ins(f"mov.b{_bits(dt)} {d}, {v}")
      return d
    return v

  def from_bits(self, b: str, dt: DType) -> str:
    s, d = _scalar(dt), self.new(kind(dt))
    if s == dtypes.float16:
      h = self.new("h")
      self.ins(f"cvt.u16.u32 {h}, {b}", f"cvt.f32.f16 {d}, {h}")
    elif s == dtypes.bfloat16:
      t = self.new("r")
      self.ins(f"shl.b32 {t}, {b}, 16", f"mov.b32 {d}, {t}")
    elif s == dtypes.bool:
      t = self.new("r")
      self.ins(f"and.b32 {t}, {b}, 255", f"setp.ne.u32 {d}, {t}, 0")
    elif kind(dt) in ("f", "fd"): self.ins(f"mov.b{_bits(dt)} {d}, {b}")
    else:
      self.ins(f"mov.b{64 if kind(dt) == 'rd' else 32} {d}, {b}")
      self.normalize(d, dt)
    return d

  def bitcast(self, v: str, src: DType, dst: DType) -> str:
    if _scalar(src) == _scalar(dst): return v
    if (_bits(src) > 32) != (_bits(dst) > 32):
      raise NotImplementedError(f"the PTX renderer bitcasts between dtypes of one register size, got {src} -> {dst}")
    return self.from_bits(self.bits_of(v, src), dst)

  # *** memory ***
  def _gates(self, u: UOp) -> list[str]:
    idx = u.src[0]
    return [g for g in (self.r[idx.src[2]] if idx.op is Ops.INDEX and len(idx.src) > 2 else None, self.r[u.src[2]] if len(u.src) == 3 else None)
            if g is not None]

  def _gate(self, gates: list[str]) -> str | None:
    if not gates: return None
    if len(gates) == 1: return gates[0]
    p = self.new("p")
    self.ins(f"and.pred {p}, {gates[0]}, {gates[1]}")
    return p

  def _buf(self, idx: UOp) -> tuple[str, UOp]:
    buf = self._root(idx.src[0])
    return self.space[buf], buf

  def render_load(self, u: UOp) -> None:
    idx = u.src[0]
    space, buf = self._buf(idx)
    gate = self._gate(self._gates(u))
    pre = f"@{gate} " if gate else ""
    reg = buf.op is Ops.BUFFER and buf.arg.addrspace is AddrSpace.REG
    s, addr = _scalar(u.dtype), self.r[idx]
    k = kind(u.dtype)
    # the raw load (predicated off when gated: a masked-off lane reads nothing, its register stays 0), then the value in the register type
    if reg and k == "f": rk, mt = "f", "f32"
    elif k in ("p", "r") or s == dtypes.bfloat16: rk, mt = "r", mtype(u.dtype)
    elif s == dtypes.float16: rk, mt = "h", "b16"
    else: rk, mt = k, mtype(u.dtype)
    raw = self.new(rk)
    if gate: self.ins(f"mov.{_ZERO[rk]} {raw}, {_ZERO_IMM[rk]}")
    self.ins(f"{pre}ld.{space}.{mt} {raw}, [{addr}]")
    if k == "p":
      val = self.new("p")
      self.ins(f"setp.ne.u32 {val}, {raw}, 0")
    elif reg or k != "f" or s == dtypes.float32: val = raw
    elif s == dtypes.float16:
      val = self.new("f")
      self.ins(f"cvt.f32.f16 {val}, {raw}")
    else: val = self.from_bits(raw, u.dtype)
    if not gate:
      self.r[u] = val
      return
    other = self.r[u.src[1]] if len(u.src) == 3 else None
    if other is None:
      self.r[u] = val  # masked-off lanes read 0 (the register was zeroed; the conversions keep 0 as 0)
      return
    d = self.define(u)
    if k == "p": _bool_where(self, d, [gate, val, other])
    else: self.ins(f"selp.{atype(u.dtype) if _is_float(u.dtype) else 'b' + atype(u.dtype)[1:]} {d}, {val}, {other}, {gate}")

  def render_store(self, u: UOp) -> None:
    idx = u.src[0]
    if idx.op is not Ops.INDEX: raise NotImplementedError(f"the PTX renderer stores through INDEX only, got {idx.op}")
    space, buf = self._buf(idx)
    gate = self._gate(self._gates(u))
    pre = f"@{gate} " if gate else ""
    reg = buf.op is Ops.BUFFER and buf.arg.addrspace is AddrSpace.REG
    v, mt = self._stored_value(self.r[u.src[1]], u.src[1].dtype, reg)
    self.ins(f"{pre}st.{space}.{mt} [{self.r[idx]}], {v}")

  def _stored_value(self, v: str, dt: DType, reg: bool) -> tuple[str, str]:
    """A register holding a value of `dt` as a store writes it, and the st type: bools as bytes, halves narrowed from their f32
    registers (REG buffers keep floats as f32)."""
    s, k = _scalar(dt), kind(dt)
    if k == "p": return self.bits_of(v, dt), "u8"
    if reg and k == "f": return v, "f32"
    if s == dtypes.float16:
      h = self.new("h")
      self.ins(f"cvt.rn.f16.f32 {h}, {v}")
      return h, "b16"
    if s == dtypes.bfloat16: return self.f2bf(v), "u16"
    return v, mtype(dt)

__all__ = ["PTXRenderer", "PTX_VERSION", "ARCHS"]

"""A PTX interpreter in numpy. Each kernel is compiled once into a list of closures with pre-resolved register slots;
a launch runs a batch of blocks at a time with every thread of the batch a numpy lane. Lanes keep their own program
counter: while all live lanes agree the interpreter runs straight (one scalar pc); on a divergent branch it switches to
running the lanes at the lowest pc, which executes each thread's path exactly and reconverges them where the paths
meet again. Registers are immutable numpy arrays (a write replaces the array), so a masked write is one np.where.

Anything it does not implement raises PTXUnsupportedError naming the instruction and line, at module load."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tg_cuda.mock import ptx_numerics as nx
from tg_cuda.mock.errors import PTXError, PTXRuntimeError, PTXUnsupportedError
from tg_cuda.mock.memory import GLOBAL_BASE, LOCAL_GENERIC, SHARED_GENERIC, WINDOW, DeviceMemory
from tg_cuda.mock.ptx_parser import Instr, Kernel, Module, Operand, parse_int

NP: dict[str, type] = {"pred": np.bool_, "b8": np.uint8, "u8": np.uint8, "s8": np.int8, "b16": np.uint16, "u16": np.uint16, "s16": np.int16,
                       "f16": np.float16, "bf16": np.uint16, "b32": np.uint32, "u32": np.uint32, "s32": np.int32, "f32": np.float32,
                       "f16x2": np.uint32, "bf16x2": np.uint32, "tf32": np.uint32, "b64": np.uint64, "u64": np.uint64, "s64": np.int64, "f64": np.float64}
FLOATS = {"f16", "bf16", "f32", "f64"}
INTS = {t for t in NP if t[0] in "bus" and t != "pred" and "x2" not in t}   # (tf32 is a float stored in .b32)
SIGNED = {"s8", "s16", "s32", "s64"}
BITS = {t: np.dtype(v).itemsize * 8 for t, v in NP.items()}
UNSIGNED_OF = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
SIGNED_OF = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
# modifiers that change nothing an interpreter can observe (cache and eviction hints, memory-model qualifiers: memory is
# sequentially consistent here)
HINTS = {"nc", "ca", "cg", "cs", "lu", "cv", "wb", "wt", "weak", "volatile", "relaxed", "acquire", "release", "acq_rel", "sc", "cta", "gpu", "sys",
         "cluster", "L1::evict_normal", "L1::evict_unchanged", "L1::evict_first", "L1::evict_last", "L1::no_allocate", "L2::evict_normal",
         "L2::evict_first", "L2::evict_last", "L2::64B", "L2::128B", "L2::256B", "L2::cache_hint", "aligned", "uni", "sync"}
SPACES = {"global", "shared", "local", "param", "const"}
NORMAL, BRANCH, EXIT, BARRIER = range(4)
DEFAULT_MAX_STEPS = 20_000_000
MAX_LANES = 8192      # blocks are batched until a batch holds this many threads


@dataclass
class Step:
  run: Callable | None
  kind: int
  guard: tuple[int, bool] | None
  target: int
  instr: Instr


class State:
  """The registers and memories of one batch of blocks."""
  __slots__ = ("R", "L", "nt", "sreg", "shared", "sh_size", "blk", "local", "lo_size", "param", "mem")


def _dt(t: str) -> np.dtype: return np.dtype(NP[t])


def _imm(text: str, t: str):
  """An immediate of type t as a numpy scalar (integers wrap into the type, 0fXXXXXXXX / 0dX... are bit patterns)."""
  low = text.lower().lstrip("-")
  neg = text.startswith("-")
  if low.startswith("0f") or low.startswith("0d"):
    v = float(np.uint32(int(low[2:], 16)).view(np.float32)) if low[1] == "f" else float(np.uint64(int(low[2:], 16)).view(np.float64))
    v = -v if neg else v
    if t in INTS: raise PTXUnsupportedError(f"float literal {text} used as .{t}")
    return _fenc(t)(np.float64(v).astype(np.float32 if t in ("f16", "bf16") else NP[t]))
  if any(c in low for c in ".e") and not low.startswith("0x"):
    return _fenc(t)(np.float64(float(text)).astype(np.float32 if t in ("f16", "bf16") else NP[t]))
  v = parse_int(text)
  if t in FLOATS: return _fenc(t)(np.float64(v).astype(np.float32 if t in ("f16", "bf16") else NP[t]))
  if t == "pred": return np.bool_(v != 0)
  return np.array(v & ((1 << BITS[t]) - 1), dtype=UNSIGNED_OF[BITS[t]]).view(NP[t])[()]


def _fdec(t: str) -> Callable:
  """Stored float bits -> the value arithmetic runs on (f16/bf16 compute in f32, which is exact for them)."""
  if t == "bf16": return nx.bf16_to_f32
  if t == "f16": return lambda x: np.asarray(x, np.float16).astype(np.float32)
  return lambda x: x


def _fenc(t: str, mode: str = "rn") -> Callable:
  if t == "bf16": return lambda x: nx.f32_to_bf16(x, mode)
  if t == "f16":
    if mode == "rn": return lambda x: np.asarray(x, np.float32).astype(np.float16)
    return lambda x: nx.round_f64_directed(np.asarray(x, np.float64), np.float16, mode)
  return lambda x: x


class _Ctx:
  """What compiling one instruction needs: the kernel (register types, variables), symbol addresses, the instruction."""
  def __init__(self, kernel: Kernel, symbols: dict[str, tuple[str, int]], ins: Instr):
    self.k, self.symbols, self.ins = kernel, symbols, ins

  def unsupported(self, what: str) -> PTXUnsupportedError:
    return PTXUnsupportedError(f"PTX line {self.ins.line}: {what} in `{self.ins.text}` is not supported by the PTX interpreter")

  def reg(self, op: Operand) -> int:
    if op[0] != "reg": raise self.unsupported(f"operand {op!r} where a register is required")
    return op[1]

  def rd(self, op: Operand, t: str) -> Callable:
    """A reader of operand op as type t: (State) -> array or numpy scalar of NP[t]."""
    want = _dt(t)
    if op[0] == "reg":
      slot, have = op[1], _dt(self.k.reg_types[op[1]])
      if have == want: return lambda st: st.R[slot]
      if have.itemsize == want.itemsize: return lambda st: st.R[slot].view(want)
      if have.itemsize > want.itemsize and want.kind in "ui" and have.kind in "ui": return lambda st: st.R[slot].astype(want)
      if have.itemsize < want.itemsize and want.kind in "ui" and have.kind in "ui" and self.ins.op in ("cvt",):
        return lambda st: st.R[slot].astype(want)
      raise self.unsupported(f"register {self.k.reg_names[slot]} (.{self.k.reg_types[slot]}) read as .{t}")
    if op[0] == "imm":
      c = _imm(op[1], t)
      return lambda st: c
    if op[0] == "not":
      r = self.rd(op[1], "pred")
      return lambda st: ~r(st)
    if op[0] == "sreg":
      name = op[1]
      if want.kind not in "ui": raise self.unsupported(f"special register {name} read as .{t}")
      return lambda st: st.sreg[name].astype(want)
    if op[0] == "sym":
      if op[1] not in self.symbols: raise self.unsupported(f"unknown symbol {op[1]!r}")
      space, addr = self.symbols[op[1]]
      c = _imm(str(addr + op[2]), t)
      return lambda st: c
    raise self.unsupported(f"operand {op!r}")

  def wr(self, op: Operand, t: str) -> Callable:
    """A writer of type-t values into register op: (State, value, mask) -> None."""
    if op[0] == "sink": return lambda st, v, m: None
    slot = self.reg(op)
    have, want = _dt(self.k.reg_types[slot]), _dt(t)
    if have == want: conv = None
    elif have.itemsize == want.itemsize: conv = lambda v: np.asarray(v).view(have)
    elif have.itemsize > want.itemsize and have.kind in "ui" and want.kind in "uib":
      ext = SIGNED_OF[have.itemsize * 8] if want.kind == "i" else UNSIGNED_OF[have.itemsize * 8]
      conv = lambda v: np.asarray(v).astype(ext).view(have)
    else: raise self.unsupported(f"register {self.k.reg_names[slot]} (.{self.k.reg_types[slot]}) written as .{t}")

    def w(st: State, v, m) -> None:
      if conv is not None: v = conv(v)
      # a value all lanes share stays a 0-d array (uniform register): numpy broadcasts it wherever it meets per-lane values
      if m is None: st.R[slot] = v if isinstance(v, np.ndarray) else np.asarray(v)
      else: st.R[slot] = np.where(m, v, st.R[slot])
    return w

  def type_of(self, allowed: set[str] | None = None) -> str:
    ts = [m for m in self.ins.mods if m in NP]
    if not ts: raise self.unsupported("a missing instruction type")
    if allowed is not None and ts[-1] not in allowed: raise self.unsupported(f"type .{ts[-1]}")
    return ts[-1]

  def check_mods(self, known: set[str]) -> None:
    for m in self.ins.mods:
      if m not in known and m not in NP and m not in HINTS: raise self.unsupported(f"modifier .{m}")


# ---------------------------------------------------------------- arithmetic

def _ftz_if(on: bool) -> Callable: return nx.ftz if on else (lambda x: x)


def _sat01(x):
  return np.where(np.isnan(x), np.zeros((), x.dtype), np.clip(x, 0, 1)).astype(x.dtype)


def _fmin(a, b, nan: bool):
  if nan: r = np.minimum(a, b)
  else: r = np.fmin(a, b)
  both0 = (a == 0) & (b == 0)
  return np.where(both0, np.where(np.signbit(a) | np.signbit(b), -np.abs(a), np.abs(a)), r)


def _fmax(a, b, nan: bool):
  if nan: r = np.maximum(a, b)
  else: r = np.fmax(a, b)
  both0 = (a == 0) & (b == 0)
  return np.where(both0, np.where(np.signbit(a) & np.signbit(b), -np.abs(a), np.abs(a)), r)


def _mulhi(a, b, t: str):
  n = BITS[t]
  if n <= 32:
    wide = SIGNED_OF[64] if t in SIGNED else UNSIGNED_OF[64]
    return ((np.asarray(a).astype(wide) * np.asarray(b).astype(wide)) >> wide(n)).astype(NP[t])
  # 64x64 -> high 64 bits from 32-bit limbs
  u = np.uint64
  ua, ub = np.asarray(a).view(u), np.asarray(b).view(u)
  m32 = u(0xFFFFFFFF)
  al, ah, bl, bh = ua & m32, ua >> u(32), ub & m32, ub >> u(32)
  ll, lh, hl, hh = al * bl, al * bh, ah * bl, ah * bh
  mid = (ll >> u(32)) + (lh & m32) + (hl & m32)
  hi = hh + (lh >> u(32)) + (hl >> u(32)) + (mid >> u(32))
  if t in SIGNED:   # signed correction: hi(a*b) = hi_u - (a<0)*b - (b<0)*a
    hi = hi - np.where(np.asarray(a) < 0, ub, u(0)) - np.where(np.asarray(b) < 0, ua, u(0))
  return hi.view(NP[t])


def _wide(t: str) -> str:
  return {"u16": "u32", "s16": "s32", "u32": "u64", "s32": "s64"}[t]


def _shift(kind: str, t: str) -> Callable:
  n = BITS[t]
  dt = NP[t]

  def f(a, b):
    s = np.minimum(np.asarray(b).astype(np.uint32), np.uint32(n))
    big = s >= n
    sh = np.where(big, np.uint32(0), s).astype(dt)
    if kind == "shl": return np.where(big, np.zeros((), dt), np.left_shift(a, sh))
    if t in SIGNED: return np.where(big, np.where(a < 0, np.array(-1, dt), np.zeros((), dt)), np.right_shift(a, sh))
    return np.where(big, np.zeros((), dt), np.right_shift(a, sh))
  return f


def _bfe(a, pos, ln, t: str):
  n = BITS[t]
  u = np.uint64
  ua = np.asarray(a).astype(UNSIGNED_OF[n]).astype(u)
  pos = np.asarray(pos).astype(u) & u(0xFF)
  ln = np.asarray(ln).astype(u) & u(0xFF)
  val = np.where(pos >= n, u(0), ua >> np.minimum(pos, u(n - 1)))
  avail = np.where(pos >= n, u(0), u(n) - np.minimum(pos, u(n)))
  eff = np.minimum(ln, avail)
  mask = np.where(eff >= 64, ~u(0), (u(1) << np.minimum(eff, u(63))) - u(1))
  d = val & mask
  if t in SIGNED:
    idx = np.minimum(pos + ln - u(1), u(n - 1))
    sbit = np.where(ln == 0, u(0), (ua >> np.where(ln == 0, u(0), idx)) & u(1))
    d = np.where(sbit == 1, d | ~mask, d)
  return d.astype(UNSIGNED_OF[n]).view(NP[t])


def _bfi(a, b, pos, ln, t: str):
  n = BITS[t]
  u = np.uint64
  ua, ub = np.asarray(a).astype(UNSIGNED_OF[n]).astype(u), np.asarray(b).astype(UNSIGNED_OF[n]).astype(u)
  pos = np.asarray(pos).astype(u) & u(0xFF)
  ln = np.asarray(ln).astype(u) & u(0xFF)
  eff = np.where(pos >= n, u(0), np.minimum(ln, u(n) - np.minimum(pos, u(n))))
  ps = np.minimum(pos, u(63))
  mask = np.where(eff >= 64, ~u(0), (u(1) << np.minimum(eff, u(63))) - u(1)) << ps
  return ((ub & ~mask) | ((ua << ps) & mask)).astype(UNSIGNED_OF[n]).view(NP[t])


def _prmt(a, b, c):
  u = np.uint64
  tmp = (np.asarray(b).astype(u) << u(32)) | np.asarray(a).astype(u)
  c = np.asarray(c).astype(u)
  out = np.zeros(np.broadcast(tmp, c).shape, u)
  for i in range(4):
    sel = (c >> u(4 * i)) & u(0xF)
    byte = (tmp >> ((sel & u(7)) * u(8))) & u(0xFF)
    byte = np.where((sel & u(8)) != 0, np.where((byte & u(0x80)) != 0, u(0xFF), u(0)), byte)
    out = out | (byte << u(8 * i))
  return out.astype(np.uint32)


def _clz(a, t: str):
  n = BITS[t]
  x = np.asarray(a).astype(UNSIGNED_OF[n]).astype(np.uint64)
  cnt = np.zeros(x.shape, np.uint32)
  # binary search on the highest set bit
  rem = np.full(x.shape, n, np.uint32)
  v = x.copy()
  for s in (32, 16, 8, 4, 2, 1):
    if s >= n: continue
    has = (v >> np.uint64(s)) != 0
    v = np.where(has, v >> np.uint64(s), v)
    cnt = cnt + np.where(has, np.uint32(s), np.uint32(0))
  return np.where(x == 0, rem, np.uint32(n - 1) - cnt).astype(np.uint32)


_REV8 = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], np.uint64)


def _brev(a, t: str):
  n = BITS[t]
  x = np.asarray(a).astype(UNSIGNED_OF[n]).astype(np.uint64)
  out = np.zeros(x.shape, np.uint64)
  for i in range(n // 8):
    out = out | (_REV8[(x >> np.uint64(8 * i)) & np.uint64(0xFF)] << np.uint64(n - 8 - 8 * i))
  return out.astype(UNSIGNED_OF[n]).view(NP[t])


def _approx(fn: str) -> Callable:
  """The .approx transcendental functions: computed in f64 and rounded once (inside PTX's documented error bounds),
  with the documented special values."""
  def ex2(x): return np.exp2(x.astype(np.float64)).astype(np.float32)
  def lg2(x): return np.where(x == 0, np.float32(-np.inf), np.log2(x.astype(np.float64)).astype(np.float32))
  def sin(x): return np.sin(x.astype(np.float64)).astype(np.float32)
  def cos(x): return np.cos(x.astype(np.float64)).astype(np.float32)
  def tanh(x): return np.tanh(x.astype(np.float64)).astype(np.float32)
  def rcp(x): return (1.0 / x.astype(np.float64)).astype(np.float32)
  def sqrt(x): return np.sqrt(x.astype(np.float64)).astype(np.float32)
  def rsqrt(x):
    with np.errstate(all="ignore"): r = (1.0 / np.sqrt(x.astype(np.float64))).astype(np.float32)
    return np.where(x == 0, np.copysign(np.float32(np.inf), x), r)
  return {"ex2": ex2, "lg2": lg2, "sin": sin, "cos": cos, "tanh": tanh, "rcp": rcp, "sqrt": sqrt, "rsqrt": rsqrt}[fn]


# ---------------------------------------------------------------- instruction builders: Ctx -> run(State, mask)

def _b_binary(c: _Ctx) -> Callable:
  ins = c.ins
  op = ins.op
  if "cc" in ins.mods and op in ("add", "sub"): return _b_carry(c)
  t = c.type_of()
  mods = set(ins.mods)
  c.check_mods({"rn", "rz", "rm", "rp", "ftz", "sat", "lo", "hi", "wide", "NaN", "approx", "full", "cc"})
  directed = sorted(mods & {"rz", "rm", "rp"})
  if directed and (t != "f32" or op not in ("add", "sub", "mul")): raise c.unsupported(f"directed rounding .{directed[0]} on {op}.{t}")
  if "cc" in mods: raise c.unsupported("carry (.cc)")
  if t in ("f16x2", "bf16x2"): return _packed(c, t, _b_binary)
  out_t = t
  if t in FLOATS:
    dec, enc = _fdec(t), _fenc(t)
    fz = _ftz_if("ftz" in mods)
    sat = "sat" in mods
    nan = "NaN" in mods
    if op == "div":
      if t == "f32" and "approx" in mods:
        def f(a, b):   # a * (1/b); for 2^126 < |b| < 2^128 the result is 0 (inf/inf: NaN)
          big = (np.abs(b) > np.float32(2.0 ** 126)) & np.isfinite(b)
          r = (a.astype(np.float64) * (1.0 / b.astype(np.float64))).astype(np.float32)
          return np.where(big, np.where(np.isinf(a), np.float32(np.nan), np.float32(0) * a), r)
      else: f = np.divide
    else:
      f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": lambda a, b: _fmin(a, b, nan), "max": lambda a, b: _fmax(a, b, nan),
           "copysign": lambda a, b: np.copysign(b, a)}.get(op)
      if f is None: raise c.unsupported(f"{op} on .{t}")

    if directed:   # the exact result as an f64 pair, rounded once in the asked direction
      def f(a, b, _op=op, _mode=directed[0]):
        x, y = a.astype(np.float64), b.astype(np.float64)
        s, e = (nx.two_sum(x, y if _op == "add" else -y)) if _op != "mul" else (x * y, np.zeros(np.shape(x * y)))
        return nx.round_exact_directed_f32(np.asarray(s), np.asarray(e), _mode)

    def fop(a, b):
      r = fz(f(fz(dec(a)), fz(dec(b))))
      return enc(_sat01(r) if sat else r)
  else:
    if op in ("add", "sub") and "sat" in mods:
      if t != "s32": raise c.unsupported(f".sat on integer .{t}")
      f2 = np.add if op == "add" else np.subtract
      def fop(a, b): return np.clip(f2(np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)), -2**31, 2**31 - 1).astype(np.int32)
    elif op == "mul":
      if "wide" in mods:
        out_t = _wide(t)
        wd = NP[out_t]
        def fop(a, b): return np.asarray(a).astype(wd) * np.asarray(b).astype(wd)
      elif "hi" in mods: fop = lambda a, b: _mulhi(a, b, t)
      else: fop = np.multiply
    elif op in ("div", "rem"):
      dm = nx.sdivmod if t in SIGNED else nx.udivmod
      i = 0 if op == "div" else 1
      def fop(a, b): return dm(np.asarray(a), np.asarray(b))[i]
    elif op in ("shl", "shr"):
      fs = _shift(op, t)
      b_t = "u32"
      ra, rb, w = c.rd(ins.operands[1], t), c.rd(ins.operands[2], b_t), c.wr(ins.operands[0], t)
      return lambda st, m: w(st, fs(ra(st), rb(st)), m)
    else:
      fop = {"add": np.add, "sub": np.subtract, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
             "xor": np.bitwise_xor}.get(op)
      if fop is None: raise c.unsupported(f"{op} on .{t}")
      if t == "pred" and op in ("and", "or", "xor"): fop = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[op]
  ra, rb, w = c.rd(ins.operands[1], t), c.rd(ins.operands[2], t), c.wr(ins.operands[0], out_t)
  return lambda st, m: w(st, fop(ra(st), rb(st)), m)


def _b_unary(c: _Ctx) -> Callable:
  ins = c.ins
  op, t = ins.op, c.type_of()
  mods = set(ins.mods)
  c.check_mods({"ftz", "approx", "rn", "full", "NaN", "shiftamt"})
  if t in ("f16x2", "bf16x2"): return _packed(c, t, _b_unary)
  if op in ("ex2", "tanh") and t in ("f16", "bf16") and "approx" in mods:   # computed in f64, rounded once to the type
    dec, enc, g = _fdec(t), _fenc(t), _approx(op)
    ra, w = c.rd(ins.operands[1], t), c.wr(ins.operands[0], t)
    return lambda st, m: w(st, enc(g(np.asarray(dec(ra(st)), np.float32))), m)
  if op in ("ex2", "lg2", "sin", "cos", "tanh", "rcp", "sqrt", "rsqrt"):
    if t not in ("f32", "f64"): raise c.unsupported(f"{op} on .{t}")
    if "approx" in mods:
      if t == "f64" and op not in ("rcp", "rsqrt", "sqrt"): raise c.unsupported(f"{op}.approx.f64")
      g = _approx(op) if t == "f32" else {"rcp": lambda x: 1.0 / x, "rsqrt": lambda x: 1.0 / np.sqrt(x), "sqrt": np.sqrt}[op]
    elif "rn" in mods and op in ("rcp", "sqrt"): g = (lambda x: np.ones((), x.dtype) / x) if op == "rcp" else np.sqrt
    else: raise c.unsupported(f"{op} without .approx/.rn")
    fz = _ftz_if("ftz" in mods and t == "f32")
    f = lambda x: fz(g(fz(x)))
  elif op in ("neg", "abs"):
    if t in FLOATS:
      dec, enc = _fdec(t), _fenc(t)
      fz = _ftz_if("ftz" in mods)
      if t in ("f16", "bf16"):   # pure sign-bit operations on the stored bits
        f = (lambda x: np.asarray(x).view(np.uint16) ^ np.uint16(0x8000)) if op == "neg" else (lambda x: np.asarray(x).view(np.uint16) & np.uint16(0x7FFF))
        ra, w = c.rd(ins.operands[1], t), c.wr(ins.operands[0], "b16")
        return lambda st, m: w(st, f(ra(st)), m)
      f = (lambda x: enc(np.negative(fz(dec(x))))) if op == "neg" else (lambda x: enc(np.abs(fz(dec(x)))))
    else: f = np.negative if op == "neg" else np.abs
  elif op == "not": f = np.logical_not if t == "pred" else np.invert
  elif op == "cnot": f = lambda x: (np.asarray(x) == 0).astype(NP[t])
  elif op == "popc":
    ra, w = c.rd(ins.operands[1], t), c.wr(ins.operands[0], "u32")
    return lambda st, m: w(st, np.bitwise_count(ra(st)).astype(np.uint32), m)
  elif op == "clz":
    ra, w = c.rd(ins.operands[1], t), c.wr(ins.operands[0], "u32")
    return lambda st, m: w(st, _clz(ra(st), t), m)
  elif op == "brev": f = lambda x: _brev(x, t)
  elif op == "bfind":   # position of the most significant bit that differs from the sign (unsigned: the msb set), or all ones
    n = BITS[t]
    shiftamt = "shiftamt" in mods
    ra, w = c.rd(ins.operands[1], t), c.wr(ins.operands[0], "u32")

    def bfind(st: State, m) -> None:
      x = np.asarray(ra(st))
      x = np.where(x < 0, ~x, x) if t in SIGNED else x
      pos = np.uint32(n - 1) - _clz(x, t)   # wraps to all ones for x == 0
      if shiftamt: pos = np.where(x == 0, np.uint32(0xFFFFFFFF), np.uint32(n - 1) - pos)
      w(st, pos.astype(np.uint32), m)
    return bfind
  else: raise c.unsupported(op)
  ra, w = c.rd(ins.operands[1], t), c.wr(ins.operands[0], t)
  return lambda st, m: w(st, f(ra(st)), m)


def _b_fma(c: _Ctx) -> Callable:
  ins = c.ins
  if "cc" in ins.mods: return _b_carry(c)
  t = c.type_of()
  mods = set(ins.mods)
  if t in ("f16x2", "bf16x2"): return _packed(c, t, _b_fma)
  if t in FLOATS:
    c.check_mods({"rn", "rz", "rm", "rp", "ftz", "sat"})
    mode = next((m for m in ("rn", "rz", "rm", "rp") if m in mods), None)
    if mode is None: raise c.unsupported(f"{ins.op}.{t} without a rounding modifier")
    if mode != "rn" and t != "f32": raise c.unsupported(f"directed rounding .{mode} on {ins.op}.{t}")
    dec = _fdec(t)
    ftz_on = "ftz" in mods
    fz = _ftz_if(ftz_on)
    sat = "sat" in mods

    def f(a, b, cc):
      if mode != "rn":
        x, y, z = fz(dec(a)), fz(dec(b)), fz(dec(cc))
        s_, e_ = nx.two_sum(x.astype(np.float64) * y.astype(np.float64), np.asarray(z, np.float64))
        r = nx.round_exact_directed_f32(s_, e_, mode)
      else: r = nx.fma_exact(fz(dec(a)), fz(dec(b)), fz(dec(cc)), t)
      if ftz_on: r = nx.ftz(r)
      if sat: r = _sat01(r)
      if t == "f16": return r.astype(np.float16)
      if t == "bf16": return nx.f32_to_bf16(r)
      return r if r.dtype == NP[t] else r.astype(NP[t])
    out_t = t
  else:
    c.check_mods({"lo", "hi", "wide", "sat"})
    if "sat" in mods: raise c.unsupported("mad.sat")
    if "wide" in mods:
      out_t = _wide(t)
      wd = NP[out_t]
      f = lambda a, b, cc: np.asarray(a).astype(wd) * np.asarray(b).astype(wd) + cc
    elif "hi" in mods: out_t = t; f = lambda a, b, cc: _mulhi(a, b, t) + cc
    else: out_t = t; f = lambda a, b, cc: np.multiply(a, b) + cc
  ra, rb, rc, w = c.rd(ins.operands[1], t), c.rd(ins.operands[2], t), c.rd(ins.operands[3], out_t), c.wr(ins.operands[0], out_t)
  return lambda st, m: w(st, f(ra(st), rb(st), rc(st)), m)


def _packed(c: _Ctx, t: str, builder: Callable) -> Callable:
  """f16x2 / bf16x2: the scalar instruction on both halves (low half = first element)."""
  et = t[:-2]
  ins = c.ins
  n_src = len(ins.operands) - 1
  srcs = [c.rd(o, "b32") for o in ins.operands[1:]]
  w = c.wr(ins.operands[0], "b32")
  # compile the scalar form against two scratch lanes of a private state
  kk = Kernel(c.k.name, [], [et] * (n_src + 1), [f"%h{i}" for i in range(n_src + 1)])
  sub = Instr(ins.op, tuple(m if m != t else et for m in ins.mods), tuple(("reg", i) for i in range(n_src + 1)), None, ins.line, ins.text)
  scalar = builder(_Ctx(kk, c.symbols, sub))

  def run(st: State, m) -> None:
    vals = [np.broadcast_to(np.asarray(s(st), np.uint32), (st.L,)) for s in srcs]
    halves = []
    for h in (0, 1):
      ss = State()
      ss.L = st.L
      ss.R = [np.zeros(st.L, NP[et])] + [((v >> np.uint32(16 * h)) & np.uint32(0xFFFF)).astype(np.uint16).view(NP[et]) for v in vals]
      scalar(ss, None)
      halves.append(np.asarray(ss.R[0]).view(np.uint16).astype(np.uint32))
    w(st, halves[0] | (halves[1] << np.uint32(16)), m)
  return run


_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
        "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal}


def _cmp_fn(c: _Ctx, cmp: str, t: str) -> Callable:
  if t in FLOATS:
    dec = _fdec(t)
    fz = _ftz_if("ftz" in c.ins.mods)
    if cmp in ("eq", "lt", "le", "gt", "ge"): g = _CMP[cmp]; return lambda a, b: g(fz(dec(a)), fz(dec(b)))
    if cmp == "ne": return lambda a, b: (lambda x, y: (x != y) & ~np.isnan(x) & ~np.isnan(y))(fz(dec(a)), fz(dec(b)))
    if cmp in ("equ", "neu", "ltu", "leu", "gtu", "geu"):
      g = _CMP[cmp[:2]]
      return lambda a, b: (lambda x, y: g(x, y) | np.isnan(x) | np.isnan(y))(fz(dec(a)), fz(dec(b)))
    if cmp == "num": return lambda a, b: ~np.isnan(dec(a)) & ~np.isnan(dec(b))
    if cmp == "nan": return lambda a, b: np.isnan(dec(a)) | np.isnan(dec(b))
    raise c.unsupported(f"comparison .{cmp} on .{t}")
  if cmp in ("lo", "ls", "hi", "hs") and t in SIGNED: raise c.unsupported(f"unsigned comparison .{cmp} on .{t}")
  if cmp not in _CMP: raise c.unsupported(f"comparison .{cmp} on .{t}")
  return _CMP[cmp]


def _b_setp(c: _Ctx) -> Callable:
  ins = c.ins
  t = c.type_of()
  cmp = ins.mods[0]
  boolop = ins.mods[1] if len(ins.mods) > 1 and ins.mods[1] in ("and", "or", "xor") else None
  c.check_mods({cmp, "ftz"} | ({boolop} if boolop else set()))
  f = _cmp_fn(c, cmp, t)
  ra, rb = c.rd(ins.operands[1], t), c.rd(ins.operands[2], t)
  dst = ins.operands[0]
  wp, wq = (c.wr(dst[1], "pred"), c.wr(dst[2], "pred")) if dst[0] == "pair" else (c.wr(dst, "pred"), None)
  rc = c.rd(ins.operands[3], "pred") if boolop else None
  bop = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(boolop or "")
  if boolop and len(ins.operands) != 4: raise c.unsupported(f"setp.{boolop} without its predicate operand")

  def run(st: State, m) -> None:
    r = np.asarray(f(ra(st), rb(st)))
    p, q = (bop(r, rc(st)), bop(~r, rc(st))) if bop else (r, ~r)
    wp(st, p, m)
    if wq is not None: wq(st, q, m)
  return run


def _b_selp(c: _Ctx) -> Callable:
  ins = c.ins
  t = c.type_of()
  c.check_mods(set())
  ra, rb, w = c.rd(ins.operands[1], t), c.rd(ins.operands[2], t), c.wr(ins.operands[0], t)
  if ins.op == "selp":
    rc = c.rd(ins.operands[3], "pred")
    return lambda st, m: w(st, np.where(rc(st), ra(st), rb(st)), m)
  ts = [x for x in ins.mods if x in NP]   # slct.dtype.s32/f32 d, a, b, c: c >= 0 ? a : b
  rc = c.rd(ins.operands[3], ts[-1])
  return lambda st, m: w(st, np.where(rc(st) >= 0, ra(st), rb(st)), m)


def _b_mov(c: _Ctx) -> Callable:
  ins = c.ins
  t = c.type_of()
  c.check_mods(set())
  d, a = ins.operands
  if d[0] == "vec":      # unpack: mov.b32 {%rs1, %rs2}, %r1 (low element first)
    n = len(d[1])
    eb = BITS[t] // n
    ra = c.rd(a, t)
    et = f"b{eb}"
    ws = [c.wr(e, et) for e in d[1]]
    ut = UNSIGNED_OF[BITS[t]]

    def unpack(st: State, m) -> None:
      v = np.asarray(ra(st)).view(ut)
      for i, w in enumerate(ws): w(st, ((v >> ut(i * eb)) & ut((1 << eb) - 1)).astype(UNSIGNED_OF[eb]), m)
    return unpack
  if a[0] == "vec":      # pack: mov.b32 %r1, {%rs1, %rs2}
    n = len(a[1])
    eb = BITS[t] // n
    et = f"b{eb}"
    rs = [c.rd(e, et) for e in a[1]]
    w = c.wr(d, t)
    ut = UNSIGNED_OF[BITS[t]]

    def pack(st: State, m) -> None:
      v = ut(0)
      for i, r in enumerate(rs): v = v | (np.asarray(r(st)).astype(ut) << ut(i * eb))
      w(st, np.asarray(v).view(NP[t]), m)
    return pack
  ra, w = c.rd(a, t), c.wr(d, t)
  return lambda st, m: w(st, ra(st), m)


_RND_INT = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}


def _b_cvt_fp8(c: _Ctx, kind: str) -> Callable:
  """cvt.rn.satfinite.{e4m3x2,e5m2x2}.{f32,f16x2} and cvt.rn.f16x2.{e4m3x2,e5m2x2} (sm_89+)."""
  ins = c.ins
  mods = ins.mods
  fp8 = f"{kind}x2"
  w = c.wr(ins.operands[0], "b16" if mods.index(fp8) == len(mods) - 2 else "b32")
  if "relu" in mods: raise c.unsupported(".relu")
  if mods[-2] == fp8:   # -> fp8x2: upper byte from a, lower from b (f32 sources) / from the f16x2 halves
    if "satfinite" not in mods or "rn" not in mods: raise c.unsupported("a conversion to fp8 without .rn.satfinite")
    enc = lambda x: nx.f32_to_fp8_satfinite(x, kind).astype(np.uint16)
    if mods[-1] == "f32":
      ra, rb = c.rd(ins.operands[1], "f32"), c.rd(ins.operands[2], "f32")
      return lambda st, m: w(st, (enc(ra(st)) << np.uint16(8)) | enc(rb(st)), m)
    if mods[-1] == "f16x2":
      r = c.rd(ins.operands[1], "b32")
      def from_h2(st, m):
        v = np.asarray(r(st), np.uint32)
        lo = (v & np.uint32(0xFFFF)).astype(np.uint16).view(np.float16).astype(np.float32)
        hi = (v >> np.uint32(16)).astype(np.uint16).view(np.float16).astype(np.float32)
        w(st, (enc(hi) << np.uint16(8)) | enc(lo), m)
      return from_h2
    raise c.unsupported(f"cvt to {fp8} from .{mods[-1]}")
  if mods[-2] == "f16x2":   # fp8x2 -> f16x2 (exact)
    r = c.rd(ins.operands[1], "b16")
    def to_h2(st, m):
      v = np.asarray(r(st), np.uint16)
      lo = nx.fp8_decode(v & np.uint16(0xFF), kind).astype(np.float16).view(np.uint16).astype(np.uint32)
      hi = nx.fp8_decode(v >> np.uint16(8), kind).astype(np.float16).view(np.uint16).astype(np.uint32)
      w(st, lo | (hi << np.uint32(16)), m)
    return to_h2
  raise c.unsupported(f"cvt .{mods[-2]}.{fp8}")


def _b_cvt(c: _Ctx) -> Callable:
  ins = c.ins
  for kind in ("e4m3", "e5m2"):
    if f"{kind}x2" in ins.mods: return _b_cvt_fp8(c, kind)
  if ins.mods[-2:] == ("tf32", "f32"):   # cvt.rna.tf32.f32: round to 10 mantissa bits, ties away from zero; low 13 bits 0
    if set(ins.mods[:-2]) != {"rna"}: raise c.unsupported(f"cvt .{'.'.join(ins.mods)} (supported: cvt.rna.tf32.f32)")
    ra, w = c.rd(ins.operands[1], "f32"), c.wr(ins.operands[0], "b32")

    def rna(st: State, m) -> None:
      x = np.asarray(ra(st), np.float32)
      b = x.view(np.uint32)
      r = (b + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
      w(st, np.where(np.isfinite(x), r, np.where(np.isnan(x), np.uint32(0x7FFFFFFF), b)).astype(np.uint32), m)
    return rna
  ts = [m for m in ins.mods if m in NP]
  if len(ts) != 2: raise c.unsupported("cvt without a destination and a source type")
  dt_, st_ = ts
  mods = set(ins.mods) - set(ts)
  rnd = [m for m in mods if m in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi")]
  for m in mods - set(rnd):
    if m not in ("sat", "ftz", "relu"): raise c.unsupported(f"modifier .{m}")
  if "relu" in mods: raise c.unsupported("cvt .relu")
  rnd = rnd[0] if rnd else None
  sat, fz = "sat" in mods, _ftz_if("ftz" in mods)
  if dt_ in ("f16x2", "bf16x2"):   # cvt.rn.f16x2.f32 d, a, b: d = {cvt(b) low, cvt(a) high}
    enc = _fenc(dt_[:-2], rnd or "rn")
    ra, rb, w = c.rd(ins.operands[1], st_), c.rd(ins.operands[2], st_), c.wr(ins.operands[0], "b32")

    def packcvt(st: State, m) -> None:
      def one(x):
        x = fz(np.asarray(x, np.float32))
        if sat: x = _sat01(x)
        return np.asarray(enc(x)).view(np.uint16).astype(np.uint32)
      w(st, one(rb(st)) | (one(ra(st)) << np.uint32(16)), m)
    return packcvt
  ra, w = c.rd(ins.operands[1], st_), c.wr(ins.operands[0], dt_)
  f = _cvt_fn(c, dt_, st_, rnd, sat, fz)
  return lambda st, m: w(st, f(ra(st)), m)


def _cvt_fn(c: _Ctx, dt_: str, st_: str, rnd: str | None, sat: bool, fz: Callable) -> Callable:
  D = NP[dt_]
  if st_ in FLOATS and dt_ in FLOATS:
    dec = _fdec(st_)
    if rnd in _RND_INT:
      if dt_ != st_: raise c.unsupported(f"integer rounding .{rnd} between different float types")
      g = _RND_INT[rnd]
      enc = _fenc(dt_)
      return lambda x: enc(np.asarray((lambda y: _sat01(y) if sat else y)(g(fz(dec(x))))).astype(np.float32 if dt_ in ("f16", "bf16") else D))
    narrowing = BITS[dt_] < BITS[st_] or (dt_ == "bf16" and st_ == "f16") or (dt_ == "f16" and st_ == "bf16")
    if narrowing and rnd is None: raise c.unsupported(f"narrowing cvt .{dt_}.{st_} without a rounding modifier")
    mode = rnd or "rn"

    def f(x):
      v = np.asarray(fz(dec(x)))
      if sat: v = _sat01(v)
      if dt_ == "bf16":
        if mode in ("rn", "rz") and v.dtype == np.float32: return nx.f32_to_bf16(v, mode)
        if mode == "rn": return nx.f32_to_bf16(nx.round_exact_to_odd_f32(v.astype(np.float64), np.zeros(v.shape)), "rn")
        raise c.unsupported(f"cvt.{mode}.bf16")
      if dt_ == "f16": return nx.round_f64_directed(v.astype(np.float64), np.float16, mode)   # numpy's f64->f16 cast rounds once
      if dt_ == "f32" and v.dtype == np.float64: return nx.round_f64_directed(v, np.float32, mode)
      return fz(v.astype(D))
    return f
  if st_ in FLOATS:   # float -> int: round as asked, NaN -> 0, saturate to the range (PTX: always saturating)
    if rnd not in _RND_INT: raise c.unsupported(f"float->int cvt needs .rni/.rzi/.rmi/.rpi, got {rnd}")
    dec, g = _fdec(st_), _RND_INT[rnd]
    info = np.iinfo(D)

    def f2i(x):
      v = g(fz(dec(x)).astype(np.float64))
      v = np.where(np.isnan(v), 0, np.clip(v, float(info.min), float(info.max)))
      # float(info.max) of 64-bit types rounds up to 2^63 / 2^64: those saturate explicitly
      over = v >= float(info.max)
      out = np.where(over, 0, v).astype(D)
      return np.where(over, np.array(info.max, D), out)
    return f2i
  if dt_ in FLOATS:   # int -> float
    if rnd not in ("rn", "rz", "rm", "rp"): raise c.unsupported(f"int->float cvt needs .rn/.rz/.rm/.rp, got {rnd}")
    S = NP[st_]

    def i2f(x):
      x = np.asarray(x, S)
      if dt_ == "f64": return x.astype(np.float64)
      if BITS[st_] <= 32: v = x.astype(np.float64)          # exact
      elif rnd == "rn" and dt_ == "f32": return x.astype(np.float32)
      else: raise c.unsupported(f"cvt.{rnd}.{dt_}.{st_}")
      if dt_ == "f32": r = nx.round_f64_directed(v, np.float32, rnd)
      elif dt_ == "f16": r = nx.round_f64_directed(v, np.float16, rnd)
      else: r = nx.f32_to_bf16(v.astype(np.float32), "rn") if rnd == "rn" else None
      if r is None: raise c.unsupported(f"cvt.{rnd}.bf16 from an integer")
      return _sat01(r) if sat else r
    return i2f
  # int -> int: truncate or extend by the source's signedness; .sat clamps to the destination's range
  if rnd is not None: raise c.unsupported(f"rounding modifier .{rnd} on an int->int cvt")
  S = NP[st_]
  if sat:
    lo, hi = S(max(int(np.iinfo(D).min), int(np.iinfo(S).min))), S(min(int(np.iinfo(D).max), int(np.iinfo(S).max)))
    return lambda x: np.clip(np.asarray(x, S), lo, hi).astype(D)
  return lambda x: np.asarray(x, S).astype(D)


def _b_cvta(c: _Ctx) -> Callable:
  ins = c.ins
  t = c.type_of({"u64", "u32"})
  to = "to" in ins.mods
  space = [m for m in ins.mods if m in SPACES]
  if len(space) != 1: raise c.unsupported("cvta without a state space")
  base = {"global": 0, "const": 0, "param": 0, "shared": SHARED_GENERIC, "local": LOCAL_GENERIC}[space[0]]
  ra, w = c.rd(ins.operands[1], t), c.wr(ins.operands[0], t)
  k = NP[t](base & ((1 << BITS[t]) - 1))
  if base == 0: return lambda st, m: w(st, ra(st), m)
  if to: return lambda st, m: w(st, ra(st) - k, m)
  return lambda st, m: w(st, ra(st) + k, m)


# ---------------------------------------------------------------- memory

def _addr(c: _Ctx, op: Operand) -> Callable:
  """[base+disp] -> (State) -> int64 address (array or scalar)."""
  if op[0] != "addr": raise c.unsupported(f"operand {op!r} where an address is required")
  base, disp = op[1], op[2]
  if base is None: d = np.int64(disp); return lambda st: d
  if base[0] == "sym":
    if base[1] not in c.symbols: raise c.unsupported(f"unknown symbol {base[1]!r}")
    v = np.int64(c.symbols[base[1]][1] + base[2] + disp)
    return lambda st: v
  slot = c.reg(base)
  if BITS[c.k.reg_types[slot]] == 64: return lambda st: st.R[slot].view(np.int64) + np.int64(disp)
  return lambda st: st.R[slot].astype(np.int64) + np.int64(disp)


def _space_of(c: _Ctx, addr: Operand | None = None) -> str:
  sp = [m for m in c.ins.mods if m in SPACES]
  if len(sp) > 1: raise c.unsupported("two state spaces")
  space = sp[0] if sp else "generic"
  # `.param` variables declared in a body (call arguments and return slots) are per-thread: they live in local memory
  if space == "param" and addr is not None and addr[0] == "addr" and addr[1] is not None and addr[1][0] == "sym":
    if c.symbols.get(addr[1][1], ("",))[0] == "local": return "local"
  return space


def _resolve(st: State, space: str, addr, idx: np.ndarray | None, nbytes: int, ins: Instr) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
  """-> [(buffer, physical byte offsets, positions in the active-lane list)] after bounds and alignment checks."""
  a = np.asarray(addr, np.int64)
  lanes = idx if idx is not None else np.arange(st.L)
  if a.ndim == 0: a = np.broadcast_to(a, lanes.shape)
  elif idx is not None: a = a[idx]
  if space != "generic": return [(*_phys(st, space, a, lanes, nbytes, ins), np.arange(len(a)))]
  parts = []
  windows = (("global", GLOBAL_BASE, SHARED_GENERIC), ("shared", SHARED_GENERIC, SHARED_GENERIC + WINDOW), ("local", LOCAL_GENERIC, LOCAL_GENERIC + WINDOW))
  for sp, lo, hi in windows:
    sel = (a >= lo) & (a < hi)
    if sel.any():
      pos = np.flatnonzero(sel)
      parts.append((*_phys(st, sp, a[pos] - (0 if sp == "global" else lo), lanes[pos], nbytes, ins), pos))
  if sum(len(p[2]) for p in parts) != len(a):
    bad = int(a[~((a >= GLOBAL_BASE) & (a < LOCAL_GENERIC + WINDOW))][0]) if len(a) else 0
    raise PTXRuntimeError(f"PTX line {ins.line}: illegal address {bad:#x} in `{ins.text}` (not in global, shared or local memory)")
  return parts


def _phys(st: State, space: str, a: np.ndarray, lanes: np.ndarray, nbytes: int, ins: Instr) -> tuple[np.ndarray, np.ndarray]:
  if space in ("global", "const"): buf, off, limit = st.mem.buf, a - GLOBAL_BASE, st.mem.top
  elif space == "shared": buf, off, limit = st.shared, a, st.sh_size
  elif space == "local": buf, off, limit = st.local, a, st.lo_size
  elif space == "param": buf, off, limit = st.param, a, len(st.param)
  else: raise PTXUnsupportedError(f"PTX line {ins.line}: state space {space}")
  if space in ("global", "const") and len(off):   # every access must lie inside one live allocation
    starts, ends = st.mem.bounds()
    lo, hi = int(off.min()), int(off.max())
    j0 = int(np.searchsorted(starts, lo, "right")) - 1
    if j0 >= 0 and hi + nbytes <= int(ends[j0]): outside = None   # the usual case: all lanes inside one buffer
    else:
      j = np.searchsorted(starts, off, "right") - 1
      outside = (j < 0) | (off + nbytes > ends[np.maximum(j, 0)])
    if outside is not None and outside.any():
      bad = int(a[np.flatnonzero(outside)[0]])
      raise PTXRuntimeError(f"PTX line {ins.line}: illegal address {bad:#x} in `{ins.text}` (not inside a live device allocation)")
  elif len(off) and (int(off.min()) < 0 or int(off.max()) + nbytes > limit):
    bad = int(a[np.flatnonzero((off < 0) | (off + nbytes > limit))[0]])
    raise PTXRuntimeError(f"PTX line {ins.line}: illegal address {bad:#x} in `{ins.text}` ({space} space holds {limit} bytes)")
  if nbytes > 1 and len(off) and int(np.bitwise_or.reduce(off, axis=None)) & (nbytes - 1):
    raise PTXRuntimeError(f"PTX line {ins.line}: misaligned {nbytes}-byte {space} access in `{ins.text}`")
  if space == "shared": off = off + st.blk[lanes] * st.sh_size
  elif space == "local": off = off + lanes.astype(np.int64) * st.lo_size
  return buf, off


def _access_form(c: _Ctx, regs: Operand, what: str) -> tuple[list[Operand], int, np.dtype, np.dtype]:
  """An ld/st's registers (one, or the .v2/.v4/.v8 vector), their count, the element dtype, and the dtype of the whole access
  as one opaque element: memory is read and written through it (a fast 1-D take/put, the same for scalars and vectors)."""
  ins = c.ins
  dt = _dt(c.type_of())
  vec = [m for m in ins.mods if m in ("v2", "v4", "v8")]
  n = int(vec[0][1:]) if vec else 1
  c.check_mods(SPACES | {"v2", "v4", "v8"})
  rs = regs[1] if regs[0] == "vec" else [regs]
  if len(rs) != n: raise c.unsupported(f"{len(rs)} {what} for .v{n}")
  if dt.itemsize * n > 16: raise c.unsupported(f"{dt.itemsize * n * 8}-bit vector accesses")
  return rs, n, dt, np.dtype((np.void, dt.itemsize * n))


def _b_ld(c: _Ctx) -> Callable:
  ins = c.ins
  dsts, n, dt, vt = _access_form(c, ins.operands[0], "destinations")
  space = _space_of(c, ins.operands[1])
  ws = [c.wr(d, c.type_of()) for d in dsts]
  ra = _addr(c, ins.operands[1])
  if ins.op == "ldu": space = "global" if space == "generic" else space
  uniform_space = space in ("global", "const", "param")   # (shared and local differ per block / lane)

  def gather(buf: np.ndarray, ph: np.ndarray) -> np.ndarray:   # -> (lanes, n)
    return buf.view(vt)[ph // vt.itemsize].view(dt).reshape(-1, n)

  def run(st: State, m) -> None:
    addr = ra(st)
    if m is None and uniform_space and np.ndim(addr) == 0:   # one address for all lanes: one read, a uniform result
      buf, ph = _resolve(st, space, addr, _ONE_LANE, vt.itemsize, ins)[0][:2]
      vals = gather(buf, ph)[0]
      for i, w in enumerate(ws): w(st, np.asarray(vals[i]), None)
      return
    idx = None if m is None else np.flatnonzero(m)
    cnt = st.L if idx is None else len(idx)
    parts = _resolve(st, space, addr, idx, vt.itemsize, ins)
    if len(parts) == 1 and len(parts[0][2]) == cnt: out = gather(*parts[0][:2])   # one state space
    else:
      out = np.zeros((cnt, n), dt)
      for buf, ph, pos in parts: out[pos] = gather(buf, ph)
    for i, w in enumerate(ws):
      if idx is None: w(st, out[:, i], None)
      else:
        full = np.zeros(st.L, dt); full[idx] = out[:, i]
        w(st, full, m)
  return run


def _b_st(c: _Ctx) -> Callable:
  ins = c.ins
  srcs, n, dt, vt = _access_form(c, ins.operands[1], "sources")
  space = _space_of(c, ins.operands[0])
  if space in ("param", "const"): raise c.unsupported(f"st.{space} (to a kernel parameter)")
  rs = [c.rd(s, c.type_of()) for s in srcs]
  ra = _addr(c, ins.operands[0])

  def run(st: State, m) -> None:
    idx = None if m is None else np.flatnonzero(m)
    if idx is not None and not len(idx): return
    vals = np.stack([np.broadcast_to(np.asarray(r(st), dt), (st.L,)) for r in rs], 1)
    if idx is not None: vals = vals[idx]
    for buf, ph, pos in _resolve(st, space, ra(st), idx, vt.itemsize, ins):
      buf.view(vt)[ph // vt.itemsize] = np.ascontiguousarray(vals[pos]).view(vt).reshape(-1)
  return run


_ATOM_OPS = {"add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas"}


def _b_atom(c: _Ctx) -> Callable:
  ins = c.ins
  t = c.type_of()
  op = [m for m in ins.mods if m in _ATOM_OPS]
  if len(op) != 1: raise c.unsupported("atom without an operation")
  op = op[0]
  c.check_mods(SPACES | _ATOM_OPS | {"noftz"})
  space = _space_of(c)
  if space not in ("global", "shared", "generic"): raise c.unsupported(f"atom on .{space}")
  red = ins.op == "red"
  ops = ins.operands
  w = None if red else c.wr(ops[0], t)
  ra = _addr(c, ops[0 if red else 1])
  rb = c.rd(ops[1 if red else 2], t)
  rc = c.rd(ops[3], t) if op == "cas" else None
  dt = _dt(t)
  isz = dt.itemsize
  if t in ("f16", "bf16") and op == "add" and "noftz" not in ins.mods: raise c.unsupported(f"atom.add.{t} without .noftz")
  if t == "bf16": raise c.unsupported("atom on .bf16")
  # atom.add.f32 flushes subnormal inputs and results (PTX ISA, atom)
  fz = nx.ftz if t == "f32" and op == "add" else (lambda x: x)

  def apply(old, b, cc):
    if op == "add": return fz(fz(old) + fz(b)) if t in FLOATS else old + b
    if op == "min": return np.minimum(old, b) if t not in FLOATS else np.fmin(old, b)
    if op == "max": return np.maximum(old, b) if t not in FLOATS else np.fmax(old, b)
    if op == "inc": return np.where(old >= b, np.zeros((), dt), old + dt.type(1))
    if op == "dec": return np.where((old == 0) | (old > b), b, old - dt.type(1))
    if op == "and": return old & b
    if op == "or": return old | b
    if op == "xor": return old ^ b
    if op == "exch": return b
    return np.where(old == b, cc, old)   # cas

  def run(st: State, m) -> None:
    idx = None if m is None else np.flatnonzero(m)
    cnt = st.L if idx is None else len(idx)
    if not cnt: return
    b = np.broadcast_to(np.asarray(rb(st), dt), (st.L,))
    cc = np.broadcast_to(np.asarray(rc(st), dt), (st.L,)) if rc else b
    if idx is not None: b, cc = b[idx], cc[idx]
    res = np.zeros(cnt, dt)
    for buf, ph, pos in _resolve(st, space, ra(st), idx, isz, ins):
      view = buf.view(dt)
      e = ph // isz
      if len(np.unique(e)) == len(e):
        old = view[e].copy()
        view[e] = apply(old, b[pos], cc[pos])
        res[pos] = old
      else:   # several lanes on one address: serialize them in lane order
        for j, p in zip(e.tolist(), pos.tolist()):
          old = view[j].copy()
          view[j] = apply(old, b[p], cc[p])
          res[p] = old
    if w is not None:
      if idx is None: w(st, res, None)
      else:
        full = np.zeros(st.L, dt); full[idx] = res
        w(st, full, m)
  return run


# ---------------------------------------------------------------- warp-level

_WARP = 32
_ONE_LANE = np.zeros(1, np.int64)


def _warp_lanes(st: State, m, ins: Instr) -> np.ndarray:
  """-> the active warps as (W, 32) lane indices; a warp-collective instruction needs whole warps."""
  if st.nt % _WARP: raise PTXRuntimeError(f"PTX line {ins.line}: `{ins.text}` needs whole warps but a block has {st.nt} threads")
  act = np.ones(st.L, bool) if m is None else np.asarray(m)
  wa = act.reshape(-1, _WARP)
  full, anyw = wa.all(1), wa.any(1)
  if (anyw & ~full).any():
    raise PTXRuntimeError(f"PTX line {ins.line}: `{ins.text}` executed by part of a warp (it is .sync.aligned: all 32 lanes must execute it)")
  return np.flatnonzero(full)[:, None] * _WARP + np.arange(_WARP)


def _mma_layout(k: int, tf32: bool = False):
  """Lane/element -> (row, col) of the m16n8k{16,8} fragments (PTX ISA 'Matrix Fragments for mma.m16n8k16/k8')."""
  lane = np.arange(_WARP)
  g, tig = lane >> 2, lane % 4
  if tf32:   # m16n8k8 .tf32: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (t, g), b1 (t+4, g)
    i, j, q = np.arange(4), np.arange(2), np.arange(4)
    return (g[:, None] + 8 * (i % 2)[None, :], tig[:, None] + 4 * (i >= 2)[None, :], tig[:, None] + 4 * j[None, :],
            np.broadcast_to(g[:, None], (_WARP, 2)), g[:, None] + 8 * (q >= 2)[None, :], tig[:, None] * 2 + (q & 1)[None, :])
  na = 8 if k == 16 else 4
  i = np.arange(na)
  a_row = g[:, None] + 8 * (((i % 4) >= 2) if k == 16 else (i >= 2))[None, :]
  a_col = tig[:, None] * 2 + (i & 1)[None, :] + (8 * (i >= 4))[None, :]
  nb = 4 if k == 16 else 2
  j = np.arange(nb)
  b_row = tig[:, None] * 2 + (j & 1)[None, :] + (8 * (j >= 2))[None, :]
  b_col = np.broadcast_to(g[:, None], (_WARP, nb))
  q = np.arange(4)
  c_row = g[:, None] + 8 * (q >= 2)[None, :]
  c_col = tig[:, None] * 2 + (q & 1)[None, :]
  return a_row, a_col, b_row, b_col, c_row, c_col


def _b_mma(c: _Ctx) -> Callable:
  ins = c.ins
  mods = ins.mods
  shape = [m for m in mods if m.startswith("m") and "n" in m and "k" in m]
  types = [m for m in mods if m in NP]
  if shape not in (["m16n8k16"], ["m16n8k8"]) or "row" not in mods or "col" not in mods or len(types) != 4:
    raise c.unsupported(f"mma form .{'.'.join(mods)} (supported: m16n8k16/m16n8k8 .row.col with f16/bf16 inputs, m16n8k8 tf32)")
  for m in mods:
    if m not in {"sync", "aligned", "row", "col", shape[0]} and m not in NP: raise c.unsupported(f"modifier .{m}")
  dt_, at, bt, ct = types
  k = int(shape[0].split("k")[1])
  tf32 = at == "tf32"
  if tf32 and (bt != "tf32" or k != 8 or dt_ != "f32" or ct != "f32"): raise c.unsupported(f"mma types .{dt_}.{at}.{bt}.{ct}")
  if not tf32 and (at != bt or at not in ("f16", "bf16") or dt_ != ct or dt_ not in ("f32", "f16") or (dt_ == "f16" and at != "f16")):
    raise c.unsupported(f"mma types .{dt_}.{at}.{bt}.{ct}")
  d, a, b, cc = ins.operands
  na, nb = (4, 2) if k == 16 or tf32 else (2, 1)
  nc = 4 if dt_ == "f32" else 2
  if any(o[0] != "vec" for o in (d, a, b, cc)) or len(a[1]) != na or len(b[1]) != nb or len(d[1]) != nc or len(cc[1]) != nc:
    raise c.unsupported("mma operand counts")
  ras, rbs = [c.rd(o, "b32") for o in a[1]], [c.rd(o, "b32") for o in b[1]]
  ctype = "f32" if dt_ == "f32" else "b32"
  rcs, wds = [c.rd(o, ctype) for o in cc[1]], [c.wr(o, ctype) for o in d[1]]
  a_row, a_col, b_row, b_col, c_row, c_col = _mma_layout(k, tf32)
  dec = nx.bf16_to_f32 if at == "bf16" else (lambda h: h.view(np.float16).astype(np.float32))

  def halves(regs, st, lanes):   # (W,32,n) .b32 registers -> (W,32,2n) f32 elements, low half first (tf32: n elements)
    v = np.stack([np.broadcast_to(np.asarray(r(st), np.uint32), (st.L,))[lanes] for r in regs], -1)
    if tf32: return (v & np.uint32(0xFFFFE000)).view(np.float32)   # the low 13 mantissa bits are ignored
    h = np.stack([v & np.uint32(0xFFFF), v >> np.uint32(16)], -1).reshape(*v.shape[:-1], -1).astype(np.uint16)
    return dec(h)

  def run(st: State, m) -> None:
    lanes = _warp_lanes(st, m, ins)
    W = len(lanes)
    if not W: return
    wi = np.arange(W)[:, None, None]
    A = np.zeros((W, 16, k), np.float64); B = np.zeros((W, k, 8), np.float64); C = np.zeros((W, 16, 8), np.float64)
    A[wi, a_row[None], a_col[None]] = halves(ras, st, lanes)
    B[wi, b_row[None], b_col[None]] = halves(rbs, st, lanes)
    if dt_ == "f32": cv = np.stack([np.broadcast_to(np.asarray(r(st), np.float32), (st.L,))[lanes] for r in rcs], -1)
    else: cv = halves(rcs, st, lanes)
    C[wi, c_row[None], c_col[None]] = cv
    D = A @ B + C   # products are exact in f64; the sum is rounded once (hardware accumulation order is unspecified)
    dv = D[wi, c_row[None], c_col[None]]   # (W, 32, 4)
    flat = lanes.ravel()
    if dt_ == "f32":
      for i, w in enumerate(wds):
        full = np.zeros(st.L, np.float32); full[flat] = dv[..., i].astype(np.float32).ravel()
        w(st, full, m)
    else:
      hb = dv.astype(np.float16).view(np.uint16).astype(np.uint32)
      for i, w in enumerate(wds):
        full = np.zeros(st.L, np.uint32); full[flat] = (hb[..., 2 * i] | (hb[..., 2 * i + 1] << np.uint32(16))).ravel()
        w(st, full, m)
  return run


def _b_ldmatrix(c: _Ctx) -> Callable:
  """ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}{.shared}.b16: lanes 8i..8i+7 give the 16-byte row addresses of 8x8
  matrix i; lane t receives, per matrix, row t/4 elements 2(t%4), 2(t%4)+1 (with .trans: column t/4, rows 2(t%4), +1)."""
  ins = c.ins
  mods = set(ins.mods)
  num = [m for m in ins.mods if m in ("x1", "x2", "x4")]
  if "m8n8" not in mods or "b16" not in mods or len(num) != 1 or not mods <= {"sync", "aligned", "m8n8", "x1", "x2", "x4", "trans", "shared", "b16"}:
    raise c.unsupported(f"ldmatrix form .{'.'.join(ins.mods)} (supported: .m8n8.x1/.x2/.x4{{.trans}}{{.shared}}.b16)")
  nm = int(num[0][1])
  trans = "trans" in mods
  space = "shared" if "shared" in mods else "generic"
  dst = ins.operands[0]
  regs = dst[1] if dst[0] == "vec" else [dst]
  if len(regs) != nm: raise c.unsupported(f"{len(regs)} destinations for .x{nm}")
  ws = [c.wr(r, "b32") for r in regs]
  ra = _addr(c, ins.operands[1])
  t = np.arange(_WARP)
  rr, cc = (2 * (t % 4), t // 4) if trans else (t // 4, 2 * (t % 4))

  def run(st: State, m) -> None:
    lanes = _warp_lanes(st, m, ins)
    W = len(lanes)
    if not W: return
    src = lanes[:, :8 * nm].reshape(-1)   # the lanes whose addresses are used, (W, matrix, row) order
    rows = np.zeros((len(src), 8), np.uint16)
    for buf, ph, pos in _resolve(st, space, ra(st), src, 16, ins): rows[pos] = buf.view(np.dtype((np.void, 16)))[ph // 16].view(np.uint16).reshape(-1, 8)
    M = rows.reshape(W, nm, 8, 8)
    for i, w in enumerate(ws):
      if trans: lo, hi = M[:, i, rr, cc], M[:, i, rr + 1, cc]
      else: lo, hi = M[:, i, rr, cc], M[:, i, rr, cc + 1]
      full = np.zeros(st.L, np.uint32)
      full[lanes.ravel()] = (lo.astype(np.uint32) | (hi.astype(np.uint32) << np.uint32(16))).ravel()
      w(st, full, m)
  return run


def _b_shfl(c: _Ctx) -> Callable:
  ins = c.ins
  mode = [m for m in ins.mods if m in ("up", "down", "bfly", "idx")]
  if len(mode) != 1 or "sync" not in ins.mods: raise c.unsupported("shfl form (supported: shfl.sync.{up,down,bfly,idx}.b32)")
  mode = mode[0]
  c.check_mods({"up", "down", "bfly", "idx"})
  ops = ins.operands
  dst = ops[0]
  wd, wp = (c.wr(dst[1], "b32"), c.wr(dst[2], "pred")) if dst[0] == "pair" else (c.wr(dst, "b32"), None)
  ra, rb, rc = c.rd(ops[1], "b32"), c.rd(ops[2], "u32"), c.rd(ops[3], "u32")

  def run(st: State, m) -> None:
    lanes = _warp_lanes(st, m, ins)
    if not len(lanes): return
    a = np.broadcast_to(np.asarray(ra(st)), (st.L,))
    lane = np.arange(_WARP)[None, :]
    bb = np.broadcast_to(np.asarray(rb(st)), (st.L,))[lanes].astype(np.int64) & 31
    cv = np.broadcast_to(np.asarray(rc(st)), (st.L,))[lanes].astype(np.int64)
    clamp, segmask = cv & 31, (cv >> 8) & 31
    maxl, minl = (lane & segmask) | (clamp & ~segmask), lane & segmask
    if mode == "up": j = lane - bb; ok = j >= maxl
    elif mode == "down": j = lane + bb; ok = j <= maxl
    elif mode == "bfly": j = lane ^ bb; ok = j <= maxl
    else: j = minl | (bb & ~segmask); ok = j <= maxl
    j = np.where(ok, j, lane)
    src = lanes[np.arange(len(lanes))[:, None], j]
    full = np.zeros(st.L, np.uint32); full[lanes.ravel()] = a[src.ravel()]
    wd(st, full, m)
    if wp is not None:
      fp = np.zeros(st.L, bool); fp[lanes.ravel()] = ok.ravel()
      wp(st, fp, m)
  return run


def _b_vote(c: _Ctx) -> Callable:
  ins = c.ins
  mode = [m for m in ins.mods if m in ("all", "any", "uni", "ballot")]
  if "sync" not in ins.mods or len(mode) != 1: raise c.unsupported("vote form (supported: vote.sync.{all,any,ballot})")
  mode = mode[0]
  if mode == "uni": raise c.unsupported("vote.uni")
  ops = ins.operands
  rp = c.rd(ops[1], "pred")
  w = c.wr(ops[0], "b32" if mode == "ballot" else "pred")

  def run(st: State, m) -> None:
    lanes = _warp_lanes(st, m, ins)
    if not len(lanes): return
    p = np.broadcast_to(np.asarray(rp(st)), (st.L,))[lanes]
    if mode == "ballot":
      r = (p.astype(np.uint32) << np.arange(_WARP, dtype=np.uint32)).sum(1, dtype=np.uint64).astype(np.uint32)
      full = np.zeros(st.L, np.uint32)
    else:
      r = p.all(1) if mode == "all" else p.any(1)
      full = np.zeros(st.L, bool)
    full[lanes.ravel()] = np.repeat(r, _WARP)
    w(st, full, m)
  return run


def _b_carry(c: _Ctx) -> Callable:
  """Extended-precision chains: add.cc/addc, sub.cc/subc (CC.CF is the borrow), mad.lo.cc/madc.lo/madc.hi on 32/64-bit
  integers. The carry flag is a hidden per-thread register."""
  ins = c.ins
  t = c.type_of({"u32", "s32", "u64", "s64"})
  mods = set(ins.mods)
  c.check_mods({"cc", "lo", "hi"})
  k = c.k
  if k.cc_slot is None:
    k.cc_slot = len(k.reg_types)
    k.reg_types.append("u32"); k.reg_names.append("%CC.CF")
  cf_slot = k.cc_slot
  base = ins.op.rstrip("c") if ins.op in ("addc", "subc", "madc") else ins.op
  carry_in, carry_out = ins.op in ("addc", "subc", "madc"), "cc" in mods
  n = BITS[t]
  U = UNSIGNED_OF[n]
  mask = np.uint64((1 << n) - 1) if n < 64 else None
  ops = ins.operands
  ra, rb = c.rd(ops[1], t), c.rd(ops[2], t)
  rc = c.rd(ops[3], t) if base == "mad" else None
  if base == "mad" and not (mods & {"lo", "hi"}): raise c.unsupported("mad.cc without .lo/.hi")
  hi = "hi" in mods
  w = c.wr(ops[0], t)

  def run(st: State, m) -> None:
    a, b = np.asarray(ra(st), NP[t]).view(U), np.asarray(rb(st), NP[t]).view(U)
    cf = np.asarray(st.R[cf_slot]).astype(np.uint64) if carry_in else np.uint64(0)
    if base == "mad":
      x = np.asarray(_mulhi(a.view(NP[t]), b.view(NP[t]), t)).view(U) if hi else (a * b)
      y = np.asarray(rc(st), NP[t]).view(U)
    else: x, y = a, b
    if n < 64:
      x64, y64 = x.astype(np.uint64), y.astype(np.uint64)
      if base == "sub":
        diff = x64 - y64 - cf   # wraps in uint64: a borrow sets the high bits
        d, out = (diff & mask).astype(U), (diff >> np.uint64(63)).astype(np.uint32)
      else:
        s = x64 + y64 + cf
        d, out = (s & mask).astype(U), (s >> np.uint64(n)).astype(np.uint32)
    else:
      if base == "sub":
        d1 = x - y; d = d1 - cf.astype(U)
        out = ((x < y) | ((d1 == 0) & (cf != 0))).astype(np.uint32)
      else:
        s1 = x + y; d = s1 + cf.astype(U)
        out = ((s1 < x) | ((d == 0) & (cf != 0) & (s1 == ~U(0)))).astype(np.uint32)
    w(st, np.asarray(d).view(NP[t]), m)
    if carry_out:
      cur = st.R[cf_slot]
      st.R[cf_slot] = np.broadcast_to(out, (st.L,)) if m is None else np.where(m, out, cur)
  return run


def _b_cp(c: _Ctx) -> Callable:
  """cp.async.{ca,cg}.shared.global [dst], [src], cp-size{, src-size}: copied at once (memory is coherent here), bytes past
  src-size zero-filled; commit_group / wait_group / wait_all have nothing left to wait for."""
  ins = c.ins
  if ins.mods[:1] != ("async",): raise c.unsupported(f"cp form .{'.'.join(ins.mods)}")
  if set(ins.mods[1:]) & {"commit_group", "wait_group", "wait_all"}: return _b_nop(c)
  if not {"shared", "global"} <= set(ins.mods) or set(ins.mods) - {"async", "ca", "cg", "shared", "global"} - HINTS:
    raise c.unsupported(f"cp.async form .{'.'.join(ins.mods)} (supported: cp.async.{{ca,cg}}.shared.global)")
  ops = ins.operands
  if ops[2][0] != "imm" or parse_int(ops[2][1]) not in (4, 8, 16): raise c.unsupported("cp.async size (4, 8 or 16 bytes)")
  size = parse_int(ops[2][1])
  rdst, rsrc = _addr(c, ops[0]), _addr(c, ops[1])
  rsz = c.rd(ops[3], "u32") if len(ops) > 3 and ops[3][0] in ("reg", "imm") else None
  vt = np.dtype((np.void, size))

  def run(st: State, m) -> None:
    idx = np.arange(st.L) if m is None else np.flatnonzero(m)
    if not len(idx): return
    data = np.zeros((len(idx), size), np.uint8)
    for buf, ph, pos in _resolve(st, "global", rsrc(st), idx, size, ins): data[pos] = buf.view(vt)[ph // size].view(np.uint8).reshape(-1, size)
    if rsz is not None:
      n = np.broadcast_to(np.asarray(rsz(st)), (st.L,))[idx].astype(np.int64)
      data[np.arange(size)[None, :] >= n[:, None]] = 0
    for buf, ph, pos in _resolve(st, "shared", rdst(st), idx, size, ins): buf.view(vt)[ph // size] = np.ascontiguousarray(data[pos]).view(vt).reshape(-1)
  return run


def _b_redux(c: _Ctx) -> Callable:
  """redux.sync.{add,min,max,and,or,xor}.{u32,s32,b32} d, a, membermask: the reduction over the (whole) warp."""
  ins = c.ins
  op = [m for m in ins.mods if m in ("add", "min", "max", "and", "or", "xor")]
  t = c.type_of({"u32", "s32", "b32"})
  if len(op) != 1 or "sync" not in ins.mods: raise c.unsupported("redux form")
  f = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op[0]]
  ra, w = c.rd(ins.operands[1], t), c.wr(ins.operands[0], t)

  def run(st: State, m) -> None:
    lanes = _warp_lanes(st, m, ins)
    if not len(lanes): return
    r = f.reduce(np.broadcast_to(np.asarray(ra(st)), (st.L,))[lanes], axis=1)
    full = np.zeros(st.L, NP[t]); full[lanes.ravel()] = np.repeat(r, _WARP)
    w(st, full, m)
  return run


def _b_activemask(c: _Ctx) -> Callable:
  w = c.wr(c.ins.operands[0], "b32")

  def run(st: State, m) -> None:
    act = np.ones(st.L, bool) if m is None else np.asarray(m)
    lane = np.arange(st.L) % st.nt % _WARP
    warp = (np.arange(st.L) // st.nt) * ((st.nt + _WARP - 1) // _WARP) + (np.arange(st.L) % st.nt) // _WARP
    bits = np.zeros(int(warp.max()) + 1, np.uint64)
    np.add.at(bits, warp[act], np.uint64(1) << lane[act].astype(np.uint64))
    w(st, bits[warp].astype(np.uint32), m)
  return run


def _b_bfe(c: _Ctx) -> Callable:
  ins = c.ins
  t = c.type_of({"u32", "s32", "u64", "s64", "b32", "b64"})
  if ins.op == "bfe":
    ra, rb, rc, w = c.rd(ins.operands[1], t), c.rd(ins.operands[2], "u32"), c.rd(ins.operands[3], "u32"), c.wr(ins.operands[0], t)
    return lambda st, m: w(st, _bfe(ra(st), rb(st), rc(st), t), m)
  ra, rb, rc, rd_, w = (c.rd(ins.operands[1], t), c.rd(ins.operands[2], t), c.rd(ins.operands[3], "u32"), c.rd(ins.operands[4], "u32"),
                        c.wr(ins.operands[0], t))
  return lambda st, m: w(st, _bfi(ra(st), rb(st), rc(st), rd_(st), t), m)


def _b_prmt(c: _Ctx) -> Callable:
  ins = c.ins
  if ins.mods != ("b32",): raise c.unsupported(f"prmt mode .{'.'.join(ins.mods)} (only the default mode)")
  ra, rb, rc = (c.rd(ins.operands[i], "b32") for i in (1, 2, 3))
  w = c.wr(ins.operands[0], "b32")
  return lambda st, m: w(st, _prmt(ra(st), rb(st), rc(st)), m)


def _b_testp(c: _Ctx) -> Callable:
  ins = c.ins
  t = c.type_of({"f32", "f64"})
  kind = ins.mods[0]
  tiny = np.finfo(NP[t]).tiny
  f = {"finite": np.isfinite, "infinite": np.isinf, "number": lambda x: ~np.isnan(x), "notanumber": np.isnan,
       "normal": lambda x: np.isfinite(x) & (np.abs(x) >= tiny), "subnormal": lambda x: (np.abs(x) < tiny) & (x != 0)}.get(kind)
  if f is None: raise c.unsupported(f"testp.{kind}")
  ra, w = c.rd(ins.operands[1], t), c.wr(ins.operands[0], "pred")
  return lambda st, m: w(st, f(ra(st)), m)


def _b_shf(c: _Ctx) -> Callable:
  """shf.{l,r}.{wrap,clamp}.b32 d, a, b, n: the 64-bit value {b:a} (b the high word) shifted by n, its high word (l) or low word (r)."""
  ins = c.ins
  mods = set(ins.mods)
  if not ({"l", "r"} & mods and {"wrap", "clamp"} & mods and "b32" in mods) or not mods <= {"l", "r", "wrap", "clamp", "b32"}:
    raise c.unsupported(f"shf form .{'.'.join(ins.mods)} (supported: shf.{{l,r}}.{{wrap,clamp}}.b32)")
  ra, rb, rn = (c.rd(ins.operands[i], "b32") for i in (1, 2, 3))
  w, left, wrap = c.wr(ins.operands[0], "b32"), "l" in mods, "wrap" in mods

  def run(st: State, m) -> None:
    a, b = np.asarray(ra(st)).astype(np.uint64), np.asarray(rb(st)).astype(np.uint64)
    n = np.asarray(rn(st)).astype(np.uint64)
    n = n & np.uint64(31) if wrap else np.minimum(n, np.uint64(32))
    v = (b << np.uint64(32)) | a
    r = ((v << n) >> np.uint64(32)) if left else (v >> n)
    w(st, (r & np.uint64(0xFFFFFFFF)).astype(np.uint32), m)
  return run


def _b_nop(c: _Ctx) -> Callable:
  return lambda st, m: None


BUILDERS: dict[str, Callable[[_Ctx], Callable]] = {
  **{op: _b_binary for op in ("add", "sub", "mul", "div", "rem", "min", "max", "and", "or", "xor", "shl", "shr", "copysign")},
  **{op: _b_unary for op in ("neg", "abs", "not", "cnot", "popc", "clz", "brev", "bfind", "ex2", "lg2", "sin", "cos", "tanh", "rcp", "sqrt", "rsqrt")},
  "fma": _b_fma, "mad": _b_fma, "setp": _b_setp, "selp": _b_selp, "slct": _b_selp, "mov": _b_mov, "cvt": _b_cvt, "cvta": _b_cvta,
  "ld": _b_ld, "ldu": _b_ld, "st": _b_st, "atom": _b_atom, "red": _b_atom, "addc": _b_carry, "subc": _b_carry, "madc": _b_carry, "cp": _b_cp,
  "mma": _b_mma, "ldmatrix": _b_ldmatrix, "shfl": _b_shfl, "redux": _b_redux, "activemask": _b_activemask, "vote": _b_vote,
  "bfe": _b_bfe, "bfi": _b_bfe, "prmt": _b_prmt, "testp": _b_testp, "shf": _b_shf, "membar": _b_nop, "fence": _b_nop,
}


def _build(kernel: Kernel, symbols: dict[str, tuple[str, int]], ins: Instr) -> Step:
  c = _Ctx(kernel, symbols, ins)
  if ins.op == "bra":
    if ins.operands[0][0] != "sym" or ins.operands[0][1] not in kernel.labels: raise c.unsupported("branch target")
    return Step(None, BRANCH, ins.guard, kernel.labels[ins.operands[0][1]], ins)
  if ins.op in ("ret", "exit"):
    return Step(None, EXIT, ins.guard, 0, ins)
  if ins.op in ("bar", "barrier"):
    if ins.mods[:1] == ("warp",):   # bar.warp.sync: memory is coherent and lanes that lag run first, so nothing to wait for
      return Step(_b_nop(c), NORMAL, ins.guard, 0, ins)
    if not set(ins.mods) <= {"sync", "aligned", "cta"} or "sync" not in ins.mods:
      raise c.unsupported(f"barrier form .{'.'.join(ins.mods)} (supported: bar.sync / barrier.sync)")
    if len(ins.operands) > 1: raise c.unsupported("a barrier with a thread count")
    return Step(None, BARRIER, ins.guard, 0, ins)
  if ins.op == "trap":   # assert() branches to a trap: loading is fine, executing it is the fault
    def trap(st: State, m) -> None: raise PTXRuntimeError(f"PTX line {ins.line}: `trap` executed (a device-side assert failed?)")
    return Step(trap, NORMAL, ins.guard, 0, ins)
  b = BUILDERS.get(ins.op)
  if b is None: raise c.unsupported(f"instruction {ins.op}")
  try:
    run = b(c)
  except PTXError: raise
  except (IndexError, KeyError, ValueError, TypeError) as e:
    raise PTXUnsupportedError(f"PTX line {ins.line}: cannot compile `{ins.text}` ({type(e).__name__}: {e})") from e
  return Step(run, NORMAL, ins.guard, 0, ins)


class CompiledKernel:
  """A kernel compiled to steps; `launch` runs a grid on a DeviceMemory."""
  def __init__(self, kernel: Kernel, global_addrs: dict[str, int]):
    self.kernel = kernel
    symbols: dict[str, tuple[str, int]] = {n: ("global", a) for n, a in global_addrs.items()}
    for v in kernel.variables.values(): symbols[v.name] = (v.space, v.offset) if v.space != "global" else ("global", global_addrs[v.name])
    for p in kernel.params: symbols[p.name] = ("param", p.offset)
    self.steps = [_build(kernel, symbols, ins) for ins in kernel.instrs]
    self.instructions_executed = 0   # thread-instructions of the last launch (for benchmarks)

  def launch(self, grid: tuple[int, int, int], block: tuple[int, int, int], params: bytes, mem: DeviceMemory, dynamic_shared: int = 0,
             max_steps: int = DEFAULT_MAX_STEPS) -> None:
    k = self.kernel
    nthreads = block[0] * block[1] * block[2]
    nblocks = grid[0] * grid[1] * grid[2]
    if nthreads < 1 or nthreads > 1024 or nblocks < 1: raise ValueError(f"launch of {k.name}: block {block} / grid {grid} out of range (1..1024 threads)")
    if len(params) < k.param_size: raise ValueError(f"launch of {k.name}: {len(params)} parameter bytes, the kernel takes {k.param_size}")
    per = max(1, MAX_LANES // nthreads)
    self.instructions_executed = 0
    t = np.arange(nthreads)
    tx, ty, tz = t % block[0], (t // block[0]) % block[1], t // (block[0] * block[1])
    with np.errstate(all="ignore"):
      for b0 in range(0, nblocks, per):
        bids = np.arange(b0, min(nblocks, b0 + per))
        self._run_batch(bids, (tx, ty, tz), t, grid, block, params, mem, dynamic_shared, max_steps)

  def _run_batch(self, bids, tids, tlin, grid, block, params, mem, dyn, max_steps) -> None:
    k = self.kernel
    nb, nt = len(bids), len(tlin)
    L = nb * nt
    st = State()
    st.L, st.nt, st.mem = L, nt, mem
    st.R = [np.zeros(L, NP[rt]) for rt in k.reg_types]
    st.sh_size = k.shared_size + (dyn + 15) // 16 * 16
    st.shared = np.zeros(max(16, nb * st.sh_size), np.uint8)
    st.blk = np.repeat(np.arange(nb, dtype=np.int64), nt)
    st.lo_size = k.local_size
    st.local = np.zeros(max(16, L * k.local_size), np.uint8)
    pb = bytes(params) + b"\0" * (-len(params) % 16 + 16)
    st.param = np.frombuffer(pb, np.uint8).copy()
    cx, cy, cz = bids % grid[0], (bids // grid[0]) % grid[1], bids // (grid[0] * grid[1])
    rep = lambda a: np.tile(np.asarray(a, np.uint32), nb)
    per_block = lambda a: np.asarray(np.uint32(a[0])) if nb == 1 else np.repeat(np.asarray(a, np.uint32), nt)
    lane_lin = rep(tlin)
    u = lambda v: np.asarray(np.uint32(v))   # uniform: 0-d
    st.sreg = {"%tid.x": rep(tids[0]), "%tid.y": rep(tids[1]), "%tid.z": rep(tids[2]), "%ntid.x": u(block[0]), "%ntid.y": u(block[1]),
               "%ntid.z": u(block[2]), "%ctaid.x": per_block(cx), "%ctaid.y": per_block(cy), "%ctaid.z": per_block(cz), "%nctaid.x": u(grid[0]),
               "%nctaid.y": u(grid[1]), "%nctaid.z": u(grid[2]), "%laneid": lane_lin % 32, "%warpid": lane_lin // 32,
               "%nwarpid": u((nt + 31) // 32), "%smid": u(0), "%nsmid": u(1), "%gridid": u(0), "%warpsz": u(32),
               "%lanemask_eq": (np.uint32(1) << (lane_lin % 32)), "%lanemask_lt": (np.uint32(1) << (lane_lin % 32)) - np.uint32(1),
               "%lanemask_le": ((np.uint32(1) << (lane_lin % 32)) - np.uint32(1)) | (np.uint32(1) << (lane_lin % 32)),
               "%lanemask_gt": ~(((np.uint32(1) << (lane_lin % 32)) - np.uint32(1)) | (np.uint32(1) << (lane_lin % 32))),
               "%lanemask_ge": ~((np.uint32(1) << (lane_lin % 32)) - np.uint32(1)), "%dynamic_smem_size": u(dyn),
               "%total_smem_size": u(st.sh_size), "%clock": u(0), "%clock64": u(0), "%globaltimer": u(0)}
    self._execute(st, max_steps)

  def _execute(self, st: State, max_steps: int) -> None:
    steps = self.steps
    R = st.R
    L = st.L
    live: np.ndarray | None = None      # None: every lane is live
    pc, n, executed = 0, 0, 0
    while True:   # converged: all live lanes at pc
      s = steps[pc]
      n += 1
      if n > max_steps: raise PTXRuntimeError(f"{self.kernel.name}: more than {max_steps} steps (an endless loop?); pass max_steps to allow more")
      m = live
      if s.guard is not None:
        g = R[s.guard[0]]
        if s.guard[1]: g = ~g
        m = g if m is None else (m & g)
        if not m.any():
          pc += 1; continue
        if m.all(): m = None
      kind = s.kind
      executed += L if m is None else int(np.count_nonzero(m))
      if kind == NORMAL:
        s.run(st, m); pc += 1
      elif kind == BRANCH:
        if m is None or (live is not None and (m == live).all()): pc = s.target
        else:   # diverge
          pcs = np.where(m, s.target, pc + 1).astype(np.int64)
          res = self._diverged(st, pcs, live if live is not None else np.ones(L, bool), n, max_steps)
          if res is None: break
          pc, live, n, ex = res
          executed += ex
      elif kind == EXIT:
        if m is None or (live is not None and (m == live).all()): break
        live = ~m if live is None else (live & ~m)
        pc += 1
      else:   # BARRIER with every live lane here
        if m is not None and not (live is not None and (m == live).all()):
          raise PTXRuntimeError(f"PTX line {s.instr.line}: predicated barrier `{s.instr.text}` reached by part of the block")
        pc += 1
    self.instructions_executed += executed

  def _diverged(self, st: State, pcs: np.ndarray, live: np.ndarray, n: int, max_steps: int):
    """Runs the lanes at the lowest pc until all live lanes share one pc again -> (pc, live, steps, executed) or None when all exited."""
    steps, R = self.steps, st.R
    waiting = np.zeros(st.L, bool)
    live = live.copy()
    big = np.int64(1 << 40)
    executed = 0
    while True:
      runnable = live & ~waiting
      if not runnable.any():
        if not live.any(): self.instructions_executed += executed; return None
        waiting[:] = False   # every live lane reached a barrier
        runnable = live.copy()
      cur = int(np.where(runnable, pcs, big).min())
      sel = runnable & (pcs == cur)
      s = steps[cur]
      n += 1
      if n > max_steps: raise PTXRuntimeError(f"{self.kernel.name}: more than {max_steps} steps (an endless loop?); pass max_steps to allow more")
      m = sel
      if s.guard is not None:
        g = R[s.guard[0]]
        m = sel & (~g if s.guard[1] else g)
      executed += int(np.count_nonzero(m))
      kind = s.kind
      if kind == NORMAL:
        if m.any(): s.run(st, m)
        pcs = np.where(sel, cur + 1, pcs)
      elif kind == BRANCH: pcs = np.where(m, s.target, np.where(sel, cur + 1, pcs))
      elif kind == EXIT:
        live &= ~m
        pcs = np.where(sel, cur + 1, pcs)
      else:
        if (m != sel).any(): raise PTXRuntimeError(f"PTX line {s.instr.line}: predicated barrier `{s.instr.text}` reached by part of the block")
        waiting |= sel
        pcs = np.where(sel, cur + 1, pcs)
        if not (live & ~waiting).any(): waiting[:] = False
      if not waiting.any() and live.any():
        lp = pcs[live]
        if lp.min() == lp.max():
          return int(lp[0]), (None if live.all() else live), n, executed


def load_module(module: Module, mem: DeviceMemory) -> tuple[dict[str, CompiledKernel], dict[str, int]]:
  """Allocates the module's global variables in mem and compiles every kernel -> (kernels by name, global addresses)."""
  addrs: dict[str, int] = {}
  variables = dict(module.globals)
  for k in module.kernels.values():
    for v in k.variables.values():
      if v.space == "global": variables[v.name] = v
  for v in variables.values():
    if v.space in ("global", "const"):
      ptr = mem.alloc(max(v.size, 1))
      if v.init: mem.buf[ptr - GLOBAL_BASE:ptr - GLOBAL_BASE + len(v.init)] = np.frombuffer(v.init, np.uint8)
      addrs[v.name] = ptr
    elif v.space == "shared": raise PTXUnsupportedError(f"module-level .shared variable {v.name}")
  return {name: CompiledKernel(k, addrs) for name, k in module.kernels.items()}, addrs

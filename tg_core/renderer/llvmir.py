"""LLVM IR (text) from tg's linear program, for every target LLVM has: a list of UOps in order (see
tg_core/runtime/ops_python.py for the semantics of every op). This module only writes text; it imports neither llvmlite
nor a runtime.

`LLVMIRRenderer` is the target-neutral base: types, constants, the op table (ALU, casts, memory, loops, ifs). A target
subclasses it (tg_cpu_x86: the host CPU; tg_amd: AMDGPU) and its `LLVMKernelWriter` subclass fills in the hooks: the
function signature and calling convention (`module`), address spaces (`addrspaces`), how grid ids are read (`special`),
barriers (`barrier`), local memory (`local_buffer`) and loop bounds (`loop_bounds`). Register buffers (reduce
accumulators) are allocas that SROA/mem2reg turn into registers; a gated LOAD reads index 0 when masked off and selects
(no branch), a gated STORE is a branch around the store."""
from __future__ import annotations
import math
import struct
from typing import Any, ClassVar

from tg_core.renderer import Renderer
from tg_core.dtype import AddrSpace, DType, dtypes
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp

# Fast-math: only fma fusion, and only on the multiply-adds that update a register accumulator (matmul, conv): there it
# doubles the flops and rounding differs from the reference only within the tolerance of reductions. Elementwise math stays
# bit-exact with the PYTHON reference (random numbers are the same on every device). A renderer whose target has fma in
# hardware (`LLVMIRRenderer.fma`) writes each fusion as an explicit llvm.fma, so the code computes the same bits at every
# optimization level; otherwise the `contract` flag lets LLVM's backend fuse where it chooses.
CONTRACT = "contract"

_INT_BITS = {dtypes.int8: 8, dtypes.uint8: 8, dtypes.int16: 16, dtypes.uint16: 16, dtypes.int32: 32, dtypes.uint32: 32,
             dtypes.int64: 64, dtypes.uint64: 64}
_FLOAT_T = {dtypes.float16: "half", dtypes.bfloat16: "bfloat", dtypes.float32: "float", dtypes.float64: "double"}

def _scalar(dt: DType) -> DType:
  """The scalar dtype, weak dtypes as the widths the reference computes them in (a Python float is a float64)."""
  s = dt.scalar()
  return dtypes.float64 if s == dtypes.weakfloat else dtypes.int64 if s == dtypes.weakint else s

def _bits(dt: DType) -> int:
  s = _scalar(dt)
  if s == dtypes.bool: return 1
  if s in _INT_BITS: return _INT_BITS[s]
  return s.itemsize * 8

def _is_float(dt: DType) -> bool: return dtypes.is_float(dt.scalar())
def _is_unsigned(dt: DType) -> bool: return dt.scalar() == dtypes.bool or dtypes.is_unsigned(dt.scalar())

def ltype(dt: DType, mem: bool = False) -> str:
  """The LLVM type of `dt` in registers (bool is i1) or in memory (mem=True: bool is i8)."""
  s = _scalar(dt)
  if s == dtypes.bool: base = "i8" if mem else "i1"
  elif s in _INT_BITS: base = f"i{_INT_BITS[s]}"
  elif s in _FLOAT_T: base = _FLOAT_T[s]
  else: raise NotImplementedError(f"the LLVM renderer has no type for {dt} (it is emulated by the core, see caps.native_dtypes)")
  return base if dt.count == 1 else f"<{dt.count} x {base}>"

def _suffix(dt: DType) -> str:
  """Intrinsic name suffix: f32, i64, v4f32."""
  s = _scalar(dt)
  base = {dtypes.float16: "f16", dtypes.bfloat16: "bf16", dtypes.float32: "f32", dtypes.float64: "f64"}.get(s) or f"i{_bits(s)}"
  return base if dt.count == 1 else f"v{dt.count}{base}"

def _float_lit(v: float, dt: DType) -> str:
  v = float(v)
  if _scalar(dt) in (dtypes.float16, dtypes.bfloat16):  # LLVM spells these by their bits: 0xH (half), 0xR (bfloat)
    import numpy as np
    if _scalar(dt) == dtypes.float16: return f"0xH{int(np.array(v, dtype=np.float16).view(np.uint16)):04X}"
    f32 = int(np.array(v, dtype=np.float32).view(np.uint32))
    if math.isnan(v): return "0xR7FC0"
    return f"0xR{(f32 + 0x7FFF + ((f32 >> 16) & 1)) >> 16:04X}"  # round to nearest even, as the core's bf16 cast
  if _scalar(dt) == dtypes.float32:
    if math.isfinite(v): v = struct.unpack("<f", struct.pack("<f", v))[0] if abs(v) <= 3.4028234663852886e38 else math.copysign(math.inf, v)
    elif math.isnan(v): return "0x7FF8000000000000"
  return f"0x{struct.unpack('<Q', struct.pack('<d', v))[0]:016X}"

def _scalar_lit(v: Any, dt: DType) -> str:
  s = _scalar(dt)
  if s == dtypes.bool: return "true" if v else "false"
  if _is_float(s): return _float_lit(v, s)
  b = _bits(s)
  iv = int(v) & ((1 << b) - 1)
  return str(iv - (1 << b) if iv >= 1 << (b - 1) else iv)

def lconst(v: Any, dt: DType) -> str:
  """A constant of `dt` (a scalar value splats over a vector dtype)."""
  if dt.count == 1: return _scalar_lit(v, dt)
  vals = v if isinstance(v, tuple) else (v,) * dt.count
  st = ltype(dt.scalar())
  return "<" + ", ".join(f"{st} {_scalar_lit(x, dt)}" for x in vals) + ">"

def _threefry_fn() -> str:
  """threefry2x32 (20 rounds), exactly as tg_core.runtime.ops_python.threefry2x32, on the uint32 halves of i64s."""
  ln = ["define internal i64 @tg.threefry2x32(i64 %x, i64 %key) #1 {", "entry:"]
  n = iter(range(10**6))
  def t() -> str: return f"%t{next(n)}"
  def emit(expr: str) -> str:
    name = t()
    ln.append(f"  {name} = {expr}")
    return name
  x0 = emit("trunc i64 %x to i32")
  x1 = emit(f"trunc i64 {emit('lshr i64 %x, 32')} to i32")
  k0 = emit("trunc i64 %key to i32")
  k1 = emit(f"trunc i64 {emit('lshr i64 %key, 32')} to i32")
  k2 = emit(f"xor i32 {emit(f'xor i32 {k0}, {k1}')}, {0x1BD11BDA}")
  ks = [k0, k1, k2]
  rot = [[13, 15, 26, 6], [17, 29, 16, 24]]
  x0, x1 = emit(f"add i32 {x0}, {ks[0]}"), emit(f"add i32 {x1}, {ks[1]}")
  for i in range(5):
    for r in rot[i % 2]:
      x0 = emit(f"add i32 {x0}, {x1}")
      x1 = emit(f"xor i32 {emit(f'call i32 @llvm.fshl.i32(i32 {x1}, i32 {x1}, i32 {r})')}, {x0}")
    x0 = emit(f"add i32 {x0}, {ks[(i + 1) % 3]}")
    x1 = emit(f"add i32 {emit(f'add i32 {x1}, {ks[(i + 2) % 3]}')}, {i + 1}")
  hi = emit(f"shl i64 {emit(f'zext i32 {x1} to i64')}, 32")
  ret = emit(f"or i64 {hi}, {emit(f'zext i32 {x0} to i64')}")
  ln += [f"  ret i64 {ret}", "}"]
  return "\n".join(ln)

def root_buffer(u: UOp) -> UOp:
  while u.op is Ops.AFTER: u = u.src[0]
  return u

def index_like(uops: list[UOp]) -> set[UOp]:
  """Int values computed only from loop indices, variables and constants (no loaded data, no division by a variable)."""
  ret: set[UOp] = set()
  def const_pos(x: UOp) -> bool: return x.op is Ops.CONST and isinstance(x.arg, int) and x.arg > 0
  for u in uops:
    if u.dtype.count != 1 or not dtypes.is_int(u.dtype) or u.dtype.scalar() == dtypes.bool: continue
    op, src = u.op, u.src
    if op in (Ops.CONST, Ops.RANGE) or (op is Ops.PARAM and u.arg.addrspace is AddrSpace.ALU): ok = True
    elif op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX): ok = all(s in ret for s in src)
    elif op in (Ops.IDIV, Ops.MOD, Ops.AND): ok = src[0] in ret and const_pos(src[1])
    elif op in (Ops.SHL, Ops.SHR): ok = src[0] in ret and const_pos(src[1]) and src[1].arg < _bits(u.dtype)
    elif op is Ops.WHERE: ok = src[1] in ret and src[2] in ret
    elif op is Ops.CAST: ok = src[0] in ret
    else: ok = False
    if ok: ret.add(u)
  return ret

def contractible(uops: list[UOp]) -> set[UOp]:
  """Float ADDs (and their MUL operands) that compute the value stored into a register accumulator."""
  ret: set[UOp] = set()
  for u in uops:
    if u.op is not Ops.STORE or u.src[0].op is not Ops.INDEX or not _is_float(u.src[1].dtype): continue
    if (buf := root_buffer(u.src[0].src[0])).op is not Ops.BUFFER or buf.arg.addrspace is not AddrSpace.REG: continue
    todo = [u.src[1]]
    while todo:
      x = todo.pop()
      if x.op is Ops.ADD and x not in ret:
        ret.add(x)
        todo.extend(x.src)
        ret.update(s for s in x.src if s.op is Ops.MUL)
  return ret

class LLVMKernelWriter:
  """Writes one kernel. The target-neutral part is here; a target's subclass implements `module` (the function signature,
  calling convention and module-level text) and overrides the hooks it needs."""
  # AddrSpace -> LLVM address space number of pointers into it (absent: 0, the default)
  addrspaces: ClassVar[dict[AddrSpace, int]] = {}
  ret: ClassVar[str] = "ret void"  # how the kernel body returns
  # the module's attribute groups: #0 the kernel, #1 always-inlined helpers (the threefry function)
  attributes: tuple[str, ...] = ()

  def __init__(self, renderer: LLVMIRRenderer, uops: list[UOp]):
    self.renderer = renderer
    self.uops = uops
    sink = uops[-1] if uops and uops[-1].op is Ops.SINK else None
    self.name = sink.arg.name if sink is not None and sink.arg is not None else "kernel"
    self.lines: list[str] = []
    self.allocas: list[str] = []
    self.globals: list[str] = []
    self.decls: set[str] = set()
    self.need_threefry = False
    self.r: dict[UOp, str] = {}
    self.idx: dict[UOp, tuple[str, str | None, DType]] = {}  # INDEX -> (pointer, gate or None, element dtype)
    self.ptype: dict[UOp, str] = {}  # a buffer (PARAM, BUFFER) -> the LLVM type of pointers into it
    self.ntmp = 0
    self.cur = "entry"
    self.loops: dict[UOp, dict[str, Any]] = {}
    self.ifs: dict[UOp, str] = {}

  # *** emission helpers ***
  def tmp(self) -> str:
    self.ntmp += 1
    return f"%t{self.ntmp}"
  def emit(self, expr: str, name: str | None = None) -> str:
    name = name or self.tmp()
    self.lines.append(f"  {name} = {expr}")
    return name
  def stmt(self, s: str) -> None: self.lines.append(f"  {s}")
  def label(self, lbl: str) -> None:
    self.lines.append(f"{lbl}:")
    self.cur = lbl
  def newlabel(self, kind: str) -> str:
    self.ntmp += 1
    return f"{kind}{self.ntmp}"
  def intrinsic(self, name: str, ret: str, args: list[tuple[str, str]]) -> str:
    self.decls.add(f"declare {ret} @{name}({', '.join(t for t, _ in args)})")
    return self.emit(f"call {ret} @{name}({', '.join(f'{t} {v}' for t, v in args)})")
  def ptype_space(self, idx: UOp) -> AddrSpace:
    """The address space an INDEX points into."""
    return root_buffer(idx.src[0]).arg.addrspace
  def ptr_t(self, space: AddrSpace) -> str:
    n = self.addrspaces.get(space, 0)
    return f"ptr addrspace({n})" if n else "ptr"

  # *** target hooks ***
  def module(self, body: list[str], params: list[tuple[int, UOp]], nvars: int) -> list[str]:
    """The module's text around the kernel body: the function (buffer slot s is `%buf{s}`, variable i (sorted by name, an
    i32) is `%var{i}`) and whatever the calling convention needs."""
    raise NotImplementedError(f"{type(self).__name__} must define the kernel function (module)")
  def prologue(self) -> None:
    """Code at the top of the body, after the arguments are bound."""
  def special(self, u: UOp) -> str:
    """The value of a grid index (SPECIAL gidx/lidx)."""
    raise NotImplementedError(f"{type(self.renderer).__name__} has no grid: it can't render {u.op} {u.arg}")
  def barrier(self) -> None:
    """A workgroup barrier. Default: nothing (one thread runs the whole kernel)."""
  def local_buffer(self, u: UOp) -> str:
    """A workgroup-shared buffer (a module global in the LOCAL address space)."""
    if AddrSpace.LOCAL not in self.addrspaces: raise NotImplementedError(f"{type(self.renderer).__name__} has no local memory")
    name = f"@lds{len(self.globals)}"
    self.globals.append(f"{name} = internal addrspace({self.addrspaces[AddrSpace.LOCAL]}) global [{max(u.arg.size or 1, 1)} x "
                        f"{ltype(u.dtype, mem=True)}] undef, align 16")
    return name
  def loop_bounds(self, u: UOp, t: str, end: str) -> tuple[str, str]:
    """(start, stop) of a RANGE's loop."""
    return "0", end

  # *** the function ***
  def render(self) -> str:
    uops = self.uops
    gparams = [u for u in uops if u.op is Ops.PARAM and u.arg.addrspace is AddrSpace.GLOBAL]
    params = sorted({u.arg.slot: u for u in gparams}.items())
    var_uops = [u for u in uops if u.op is Ops.PARAM and u.arg.addrspace is AddrSpace.ALU]
    var_names = sorted(var_uops, key=lambda v: v.arg.name)  # vals holds the variables sorted by name (as ProgramSpec.vars)
    self.index_like = index_like(uops)
    self.contract = contractible(uops)
    # the body
    self.label("entry")
    body_start = len(self.lines)
    for v in var_uops:
      i, vt = var_names.index(v), ltype(v.dtype)
      if vt == "i32": self.r[v] = f"%var{i}"
      elif _bits(v.dtype) > 32: self.r[v] = self.emit(f"{'zext' if _is_unsigned(v.dtype) else 'sext'} i32 %var{i} to {vt}")
      else: self.r[v] = self.emit(f"trunc i32 %var{i} to {vt}")
    for p in gparams: self.r[p], self.ptype[p] = f"%buf{p.arg.slot}", self.ptr_t(AddrSpace.GLOBAL)
    self.prologue()
    for u in uops: self.render_uop(u)
    self.stmt(self.ret)
    body = self.lines[:body_start] + self.allocas + self.lines[body_start:]
    out = [*self.globals, *self.module(body, params, len(var_names))]
    if self.need_threefry:
      out += ["", _threefry_fn()]
      self.decls.add("declare i32 @llvm.fshl.i32(i32, i32, i32)")
    out += ["", *sorted(self.decls), "", *self.attributes, ""]
    return "\n".join(out)

  # *** one uop ***
  def render_uop(self, u: UOp) -> None:
    op, r = u.op, self.r
    if op in (Ops.SINK, Ops.GROUP, Ops.NOOP): return
    if op is Ops.BARRIER: return self.barrier()
    if op is Ops.PARAM:
      if u not in r: raise RuntimeError(f"PARAM with addrspace {u.arg.addrspace} is not supported by the LLVM renderer")
      return
    if op is Ops.BUFFER:
      self.ptype[u] = self.ptr_t(u.arg.addrspace)
      if u.arg.addrspace is AddrSpace.LOCAL:
        r[u] = self.local_buffer(u)
        return
      name, n = f"%reg{len(self.allocas)}", self.addrspaces.get(AddrSpace.REG, 0)
      self.allocas.append(f"  {name} = alloca [{max(u.arg.size or 1, 1)} x {ltype(u.dtype, mem=True)}], align 64{f', addrspace({n})' if n else ''}")
      r[u] = name
      return
    if op is Ops.SPECIAL:
      r[u] = self.special(u)
      return
    if op is Ops.AFTER:
      r[u] = r[u.src[0]]
      return
    if op is Ops.CONST:
      r[u] = lconst(u.arg, u.dtype)
      return
    if op is Ops.INDEX: return self.render_index(u)
    if op is Ops.LOAD: return self.render_load(u)
    if op is Ops.STORE: return self.render_store(u)
    if op is Ops.RANGE: return self.render_range(u)
    if op is Ops.END: return self.render_end(u)
    if op is Ops.IF:
      then, done = self.newlabel("if"), self.newlabel("endif")
      self.stmt(f"br i1 {r[u.src[0]]}, label %{then}, label %{done}")
      self.ifs[u] = done
      self.label(then)
      return
    if op is Ops.ENDIF:
      done = self.ifs[u.src[0]]
      self.stmt(f"br label %{done}")
      self.label(done)
      return
    if op is Ops.CAST:
      r[u] = self.cast(r[u.src[0]], u.src[0].dtype, u.dtype)
      return
    if op is Ops.BITCAST:
      r[u] = self.bitcast(r[u.src[0]], u.src[0].dtype, u.dtype)
      return
    if op is Ops.STACK and all(x is u.src[0] for x in u.src):  # a broadcast: insert once, shuffle to every lane
      vt = ltype(u.dtype)
      one = self.emit(f"insertelement {vt} poison, {ltype(u.src[0].dtype)} {r[u.src[0]]}, i32 0")
      r[u] = self.emit(f"shufflevector {vt} {one}, {vt} poison, <{u.dtype.count} x i32> zeroinitializer")
      return
    if op is Ops.STACK:
      vt, cur = ltype(u.dtype), "poison"
      for i, s in enumerate(u.src): cur = self.emit(f"insertelement {vt} {cur}, {ltype(s.dtype)} {r[s]}, i32 {i}")
      r[u] = cur
      return
    if op is Ops.GEP:
      st = ltype(u.src[0].dtype)
      if len(u.arg) == 1: r[u] = self.emit(f"extractelement {st} {r[u.src[0]]}, i32 {u.arg[0]}")
      else: r[u] = self.emit(f"shufflevector {st} {r[u.src[0]]}, {st} poison, <{len(u.arg)} x i32> <{', '.join(f'i32 {i}' for i in u.arg)}>")
      return
    if op in GroupOp.ALU:
      r[u] = self.alu(u)
      return
    raise NotImplementedError(f"the LLVM renderer can't render {op}")

  # *** memory ***
  def render_index(self, u: UOp) -> None:
    buf, idx = u.src[0], u.src[1]
    gate = self.r[u.src[2]] if len(u.src) > 2 and u.src[2].dtype.scalar() == dtypes.bool else None
    if len(u.src) > 3 or (len(u.src) == 3 and gate is None): raise NotImplementedError("the LLVM renderer supports INDEX(buf, idx[, gate]) only")
    et = buf.dtype if root_buffer(buf).op is Ops.BUFFER else buf.dtype.scalar()  # a register buffer may hold vectors
    it, iv = ltype(idx.dtype), self.r[idx]
    # a masked-off index may be anything: it becomes 0, always in bounds, so a gated load can read unconditionally and
    # select its value (no branch: the loop stays vectorizable, e.g. the padded borders of a convolution). A vector gate
    # (one per lane) goes to a masked load, which touches no masked-off lane: the address needn't be in bounds
    vgate = gate is not None and u.src[2].dtype.count > 1
    if gate is not None and not vgate: iv = self.emit(f"select i1 {gate}, {it} {iv}, {it} 0")
    pt = self.ptype[u] = self.ptype[root_buffer(buf)]
    ptr = self.emit(f"getelementptr {'' if vgate else 'inbounds '}{ltype(et, mem=True)}, {pt} {self.r[buf]}, {it} {iv}")
    self.idx[u] = (ptr, gate, et)
    self.r[u] = ptr

  def _and_gates(self, a: str | None, b: str | None) -> str | None:
    if a is None or b is None: return a if b is None else b
    return self.emit(f"and i1 {a}, {b}")

  def render_load(self, u: UOp) -> None:
    ptr, gate, _ = self.idx[u.src[0]]
    pt, pn = self.ptype[u.src[0]], self.addrspaces.get(self.ptype_space(u.src[0]), 0)
    alt = None
    if len(u.src) == 3: alt, gate = self.r[u.src[1]], self._and_gates(gate, self.r[u.src[2]])
    mt, rt, align = ltype(u.dtype, mem=True), ltype(u.dtype), u.dtype.scalar().itemsize
    def do_load() -> str:
      v = self.emit(f"load {mt}, {pt} {ptr}, align {align}")
      if u.dtype.scalar() != dtypes.bool: return v
      return self.emit(f"icmp ne {mt} {v}, {'0' if u.dtype.count == 1 else 'zeroinitializer'}")
    if gate is None:
      self.r[u] = do_load()
      return
    other = alt if alt is not None else (lconst(0, u.dtype) if u.dtype.count == 1 else "zeroinitializer")
    gdt = u.src[0].src[2].dtype if len(u.src[0].src) > 2 else dtypes.bool
    if gdt.count > 1:  # one gate per lane: a masked vector load
      if len(u.src) == 3: raise NotImplementedError("a masked vector load with its own LOAD gate")
      if u.dtype.scalar() == dtypes.bool:  # bools are bytes in memory
        v = self.intrinsic(f"llvm.masked.load.v{u.dtype.count}i8.p{pn}", mt, [(pt, ptr), ("i32", "1"), (ltype(gdt), gate), (mt, "zeroinitializer")])
        self.r[u] = self.emit(f"icmp ne {mt} {v}, zeroinitializer")
      else: self.r[u] = self.intrinsic(f"llvm.masked.load.{_suffix(u.dtype)}.p{pn}", rt, [(pt, ptr), ("i32", str(align)), (ltype(gdt), gate), (rt, other)])
      return
    if len(u.src) < 3:  # gated by its INDEX only: the address is in bounds either way
      v = do_load()
      self.r[u] = self.emit(f"select i1 {gate}, {rt} {v}, {rt} {other}")
      return
    pre, yes, done = self.cur, self.newlabel("gl"), self.newlabel("gm")
    self.stmt(f"br i1 {gate}, label %{yes}, label %{done}")
    self.label(yes)
    v = do_load()
    self.stmt(f"br label %{done}")
    self.label(done)
    self.r[u] = self.emit(f"phi {rt} [ {v}, %{yes} ], [ {other}, %{pre} ]")

  def render_store(self, u: UOp) -> None:
    if u.src[0].op is not Ops.INDEX: raise NotImplementedError(f"the LLVM renderer stores through INDEX only, got {u.src[0].op}")
    ptr, gate, _ = self.idx[u.src[0]]
    if len(u.src) == 3: gate = self._and_gates(gate, self.r[u.src[2]])
    val, vdt = self.r[u.src[1]], u.src[1].dtype
    if vdt.scalar() == dtypes.bool: val = self.emit(f"zext {ltype(vdt)} {val} to {ltype(vdt, mem=True)}")
    st = f"store {ltype(vdt, mem=True)} {val}, {self.ptype[u.src[0]]} {ptr}, align {vdt.scalar().itemsize}"
    if gate is None:
      self.stmt(st)
      return
    yes, done = self.newlabel("gs"), self.newlabel("gsd")
    self.stmt(f"br i1 {gate}, label %{yes}, label %{done}")
    self.label(yes)
    self.stmt(st)
    self.stmt(f"br label %{done}")
    self.label(done)

  # *** loops ***
  def render_range(self, u: UOp) -> None:
    t, end = ltype(u.dtype), self.r[u.src[0]]
    start, stop = self.loop_bounds(u, t, end)
    header, body, exit_ = self.newlabel("loop"), self.newlabel("body"), self.newlabel("exit")
    pre = self.cur
    self.stmt(f"br label %{header}")
    self.label(header)
    var = self.tmp()
    self.lines.append("")  # the phi: filled in at END, when the latch block is known
    phi_at = len(self.lines) - 1
    c = self.emit(f"icmp slt {t} {var}, {stop}")
    self.stmt(f"br i1 {c}, label %{body}, label %{exit_}")
    self.label(body)
    self.loops[u] = {"t": t, "var": var, "start": start, "pre": pre, "header": header, "exit": exit_, "phi_at": phi_at}
    self.r[u] = var

  def render_end(self, u: UOp) -> None:
    for rng in reversed([s for s in u.src[1:] if s.op is Ops.RANGE]):
      lp = self.loops[rng]
      nxt = self.emit(f"add nsw {lp['t']} {lp['var']}, 1")
      self.stmt(f"br label %{lp['header']}")
      self.lines[lp["phi_at"]] = f"  {lp['var']} = phi {lp['t']} [ {lp['start']}, %{lp['pre']} ], [ {nxt}, %{self.cur} ]"
      self.label(lp["exit"])

  # *** casts ***
  def cast(self, v: str, src: DType, dst: DType) -> str:
    if src == dst: return v
    st, dt_ = ltype(src), ltype(dst)
    sb, db = _bits(src), _bits(dst)
    if dst.scalar() == dtypes.bool:
      if _is_float(src): return self.emit(f"fcmp une {st} {v}, {lconst(0.0, src)}")
      return self.emit(f"icmp ne {st} {v}, {lconst(0, src)}")
    if src.scalar() == dtypes.bool:
      return self.emit(f"{'uitofp' if _is_float(dst) else 'zext'} {st} {v} to {dt_}")
    if _is_float(src) and _is_float(dst):
      if sb == db: return v
      return self.emit(f"{'fpext' if db > sb else 'fptrunc'} {st} {v} to {dt_}")
    if not _is_float(src) and _is_float(dst):
      return self.emit(f"{'uitofp' if _is_unsigned(src) else 'sitofp'} {st} {v} to {dt_}")
    if not _is_float(src) and not _is_float(dst):
      if sb == db: return v
      if db < sb: return self.emit(f"trunc {st} {v} to {dt_}")
      return self.emit(f"{'zext' if _is_unsigned(src) else 'sext'} {st} {v} to {dt_}")
    # float -> int, as the reference: NaN/inf -> 0, else truncate, clamp to [-2**63, 2**63-1024] as an int64 and wrap to the
    # destination width. fptosi.sat never makes poison; it saturates to INT64_MAX exactly when x >= 2**63.
    i64 = dtypes.int64.vec(dst.count) if dst.count > 1 else dtypes.int64
    t64, bt = ltype(i64), ltype(dtypes.bool.vec(dst.count) if dst.count > 1 else dtypes.bool)
    fabs = self.intrinsic(f"llvm.fabs.{_suffix(src)}", st, [(st, v)])
    fin = self.emit(f"fcmp olt {st} {fabs}, {lconst(math.inf, src)}")
    c64 = self.intrinsic(f"llvm.fptosi.sat.{_suffix(i64)}.{_suffix(src)}", t64, [(st, v)])
    sat = self.emit(f"icmp eq {t64} {c64}, {lconst(2**63 - 1, i64)}")
    c64 = self.emit(f"select {bt} {sat}, {t64} {lconst(2**63 - 1024, i64)}, {t64} {c64}")
    conv = self.emit(f"trunc {t64} {c64} to {dt_}") if db < 64 else c64
    return self.emit(f"select {bt} {fin}, {dt_} {conv}, {dt_} {lconst(0, dst)}")

  def bitcast(self, v: str, src: DType, dst: DType) -> str:
    if src == dst: return v
    if src.scalar() == dtypes.bool: v, src = self.emit(f"zext {ltype(src)} {v} to {ltype(src, mem=True)}"), dtypes.uint8.vec(src.count) \
      if src.count > 1 else dtypes.uint8
    if dst.scalar() == dtypes.bool:
      mid = dtypes.uint8.vec(dst.count) if dst.count > 1 else dtypes.uint8
      return self.emit(f"icmp ne {ltype(mid)} {self.bitcast(v, src, mid)}, {lconst(0, mid)}")
    if ltype(src) == ltype(dst): return v
    return self.emit(f"bitcast {ltype(src)} {v} to {ltype(dst)}")

  # *** ALU ***
  def _wrap_flags(self, u: UOp) -> str:
    """nsw/nuw when the value ranges prove the int op can't wrap (lets SCEV see through index arithmetic). Only on index
    arithmetic (ranges, variables, constants): there the ranges come straight from loop bounds."""
    if u not in self.index_like: return ""
    try: lo, hi = u._unclamped_min_max()
    except Exception: return ""
    if not (isinstance(lo, int) and isinstance(hi, int)): return ""
    dt = u.dtype.scalar()
    if not (dt.min <= lo and hi <= dt.max): return ""
    if _is_unsigned(dt): return " nuw" if lo >= 0 else ""
    return " nsw"

  def alu(self, u: UOp) -> str:
    op, dt, r = u.op, u.dtype, self.r
    src = [r[s] for s in u.src]
    sdt = u.src[0].dtype
    t, st = ltype(dt), ltype(sdt)
    isf, isu = _is_float(sdt), _is_unsigned(sdt)
    bt = ltype(dtypes.bool.vec(sdt.count) if sdt.count > 1 else dtypes.bool)
    if op in (Ops.ADD, Ops.SUB, Ops.MUL):
      name = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul"}[op]
      if isf and self.renderer.fma:
        # which product an add fuses is decided here, once: the first operand that is a contractible MUL
        if op is Ops.ADD and u in self.contract and (m := next((s for s in u.src if s.op is Ops.MUL and s in self.contract), None)) is not None:
          other = src[1] if m is u.src[0] else src[0]
          return self.intrinsic(f"llvm.fma.{_suffix(dt)}", t, [(t, r[m.src[0]]), (t, r[m.src[1]]), (t, other)])
        return self.emit(f"f{name} {t} {src[0]}, {src[1]}")
      if isf: return self.emit(f"f{name}{' ' + CONTRACT if u in self.contract else ''} {t} {src[0]}, {src[1]}")
      if dt.scalar() == dtypes.bool:
        return self.emit(f"{ {Ops.ADD: 'or', Ops.SUB: 'xor', Ops.MUL: 'and'}[op]} {t} {src[0]}, {src[1]}")
      return self.emit(f"{name}{self._wrap_flags(u) if dt.count == 1 else ''} {t} {src[0]}, {src[1]}")
    if op is Ops.FDIV and isf: return self.emit(f"fdiv {t} {src[0]}, {src[1]}")
    if op in (Ops.IDIV, Ops.MOD, Ops.FDIV): return self.divmod(u, src, t)
    if op is Ops.MAX:
      if dt.scalar() == dtypes.bool: return self.emit(f"or {t} {src[0]}, {src[1]}")
      if isf:  # numpy.maximum: NaN if either is NaN
        gt = self.emit(f"fcmp ogt {t} {src[0]}, {src[1]}")
        m = self.emit(f"select {bt} {gt}, {t} {src[0]}, {t} {src[1]}")
        nan = self.emit(f"fcmp uno {t} {src[0]}, {src[0]}")
        return self.emit(f"select {bt} {nan}, {t} {src[0]}, {t} {m}")
      gt = self.emit(f"icmp {'ugt' if isu else 'sgt'} {t} {src[0]}, {src[1]}")
      return self.emit(f"select {bt} {gt}, {t} {src[0]}, {t} {src[1]}")
    if op in GroupOp.Comparison:
      if isf: pred = {Ops.CMPLT: "olt", Ops.CMPEQ: "oeq", Ops.CMPNE: "une"}[op]
      else: pred = {Ops.CMPLT: "ult" if isu else "slt", Ops.CMPEQ: "eq", Ops.CMPNE: "ne"}[op]
      return self.emit(f"{'fcmp' if isf else 'icmp'} {pred} {st} {src[0]}, {src[1]}")
    if op in (Ops.AND, Ops.OR, Ops.XOR): return self.emit(f"{op.name.lower()} {t} {src[0]}, {src[1]}")
    if op in (Ops.SHL, Ops.SHR): return self.shift(u, src, t)
    if op is Ops.WHERE:
      ct = ltype(u.src[0].dtype)
      return self.emit(f"select {ct} {src[0]}, {t} {src[1]}, {t} {src[2]}")
    if op is Ops.DP4A: return self.dp4a(u, src, t)
    if op is Ops.MULACC:
      if isf: return self.emit(f"fadd {t} {self.emit(f'fmul {t} {src[0]}, {src[1]}')}, {src[2]}")
      return self.emit(f"add {t} {self.emit(f'mul {t} {src[0]}, {src[1]}')}, {src[2]}")
    if op is Ops.NEG:
      if dt.scalar() == dtypes.bool: return self.emit(f"xor {t} {src[0]}, {lconst(True, dt)}")
      if isf: return self.emit(f"fneg {t} {src[0]}")
      return self.emit(f"sub {t} {lconst(0, dt)}, {src[0]}")
    if op is Ops.RECIPROCAL: return self.emit(f"fdiv {t} {lconst(1.0, dt)}, {src[0]}")
    if op in (Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC):
      if not isf: return src[0] if op is Ops.TRUNC else self._int_unary_unsupported(op)
      return self.intrinsic(f"llvm.{op.name.lower()}.{_suffix(dt)}", t, [(t, src[0])])
    if op is Ops.POW: return self.intrinsic(f"llvm.pow.{_suffix(dt)}", t, [(t, src[0]), (t, src[1])])
    if op is Ops.THREEFRY:
      if dt.count != 1 or dt.scalar() != dtypes.uint64: raise NotImplementedError(f"THREEFRY on {dt}")
      self.need_threefry = True
      return self.emit(f"call i64 @tg.threefry2x32(i64 {src[0]}, i64 {src[1]})")
    raise NotImplementedError(f"the LLVM renderer can't render {op} on {dt}")

  def dp4a(self, u: UOp, src: list[str], t: str) -> str:
    """Ops.DP4A: a renderer that declares caps.native_dp4a renders it here; codegen lowers it for the others."""
    raise NotImplementedError(f"{type(self.renderer).__name__} doesn't declare caps.native_dp4a: DP4A should have been lowered")

  def _int_unary_unsupported(self, op: Ops) -> str: raise NotImplementedError(f"{op} on ints")

  def divmod(self, u: UOp, src: list[str], t: str) -> str:
    """C-style IDIV/MOD that never traps: x/0 -> 0 and x%0 -> x (the reference's values), INT_MIN/-1 wraps."""
    dt, isu = u.dtype, _is_unsigned(u.dtype)
    is_mod = u.op is Ops.MOD
    b = u.src[1]
    name = ("urem" if is_mod else "udiv") if isu else ("srem" if is_mod else "sdiv")
    bv = int(_scalar_lit(b.arg, dt)) if b.op is Ops.CONST and not isinstance(b.arg, tuple) else None  # the (splat) constant, wrapped
    if bv is not None and bv != 0 and (isu or bv != -1):
      return self.emit(f"{name} {t} {src[0]}, {src[1]}")
    bt = ltype(dtypes.bool.vec(dt.count) if dt.count > 1 else dtypes.bool)
    zero = self.emit(f"icmp eq {t} {src[1]}, {lconst(0, dt)}")
    bad, m1 = zero, None
    if not isu:
      m1 = self.emit(f"icmp eq {t} {src[1]}, {lconst(-1, dt)}")
      bad = self.emit(f"or {bt} {zero}, {m1}")
    safe = self.emit(f"select {bt} {bad}, {t} {lconst(1, dt)}, {t} {src[1]}")
    q = self.emit(f"{name} {t} {src[0]}, {safe}")
    if m1 is not None:
      q = self.emit(f"select {bt} {m1}, {t} {lconst(0, dt) if is_mod else self.emit(f'sub {t} {lconst(0, dt)}, {src[0]}')}, {t} {q}")
    return self.emit(f"select {bt} {zero}, {t} {src[0] if is_mod else lconst(0, dt)}, {t} {q}")

  def shift(self, u: UOp, src: list[str], t: str) -> str:
    dt, bdt = u.dtype, u.src[1].dtype
    w = _bits(dt)
    amt = self.cast(src[1], bdt, dt) if ltype(bdt) != t else src[1]
    kind = "shl" if u.op is Ops.SHL else ("lshr" if _is_unsigned(dt) else "ashr")
    b = u.src[1]
    if b.op is Ops.CONST and not isinstance(b.arg, tuple) and 0 <= b.arg < w: return self.emit(f"{kind} {t} {src[0]}, {lconst(b.arg, dt)}")
    # an amount >= the width (unsigned compare) shifts everything out: 0, or the sign for an arithmetic right shift
    bt = ltype(dtypes.bool.vec(dt.count) if dt.count > 1 else dtypes.bool)
    oob = self.emit(f"icmp uge {t} {amt}, {lconst(w, dt)}")
    masked = self.emit(f"and {t} {amt}, {lconst(w - 1, dt)}")
    sh = self.emit(f"{kind} {t} {src[0]}, {masked}")
    fill = self.emit(f"ashr {t} {src[0]}, {lconst(w - 1, dt)}") if kind == "ashr" else lconst(0, dt)
    return self.emit(f"select {bt} {oob}, {t} {fill}, {t} {sh}")


class LLVMIRRenderer(Renderer):
  """The LLVM IR renderer base: a target subclass sets `caps` and `writer` (its LLVMKernelWriter subclass)."""
  writer: ClassVar[type[LLVMKernelWriter]] = LLVMKernelWriter
  # the target computes fma in hardware: an accumulator's multiply-adds are written as llvm.fma (same bits at every optimization
  # level); False: `contract` flags, LLVM fuses where it chooses (a target without fma would call a library fma)
  fma: bool = False
  def render(self, uops: list[UOp]) -> str: return self.writer(self, uops).render()

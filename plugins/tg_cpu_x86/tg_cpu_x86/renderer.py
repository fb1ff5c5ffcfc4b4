"""LLVM IR (text) from tg's linear program: a list of UOps in order (see tg_core/runtime/ops_python.py for the semantics
of every op). This module only writes text; it imports neither llvmlite nor the runtime.

The calling convention is in `tg_cpu_x86.abi`. The exported function loads the buffer addresses and variables and calls
an always-inlined body whose buffer arguments are `noalias` (tinygrad's `restrict` convention), so after inlining LLVM
knows distinct buffers don't alias. Loops are plain LLVM loops (phi induction variables); register buffers (reduce
accumulators) are allocas that SROA/mem2reg turn into registers; a gated LOAD reads index 0 when masked off and selects (no
branch), a gated STORE is a branch around the store.
The first top-level output loop is split across cores when that is safe (see `_split_range`)."""
from __future__ import annotations
import math
import struct
from typing import Any

from tg_core.device import Renderer, RendererCaps
from tg_core.dtype import AddrSpace, DType, dtypes
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import AxisType, UOp
from tg_cpu_x86.abi import symbol_name, work_symbol

SPLIT_AXES = (AxisType.LOOP, AxisType.GLOBAL, AxisType.THREAD)
# Fast-math: only `contract` (fma fusion), and only on the multiply-adds that update a register accumulator (matmul,
# conv): there it doubles the flops and rounding differs from the reference only within the tolerance of reductions.
# Elementwise math stays bit-exact with the PYTHON reference (random numbers are the same on every device).
CONTRACT = "contract"

_INT_BITS = {dtypes.int8: 8, dtypes.uint8: 8, dtypes.int16: 16, dtypes.uint16: 16, dtypes.int32: 32, dtypes.uint32: 32,
             dtypes.int64: 64, dtypes.uint64: 64}
_FLOAT_T = {dtypes.float32: "float", dtypes.float64: "double"}

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
  base = {dtypes.float32: "f32", dtypes.float64: "f64"}.get(s) or f"i{_bits(s)}"
  return base if dt.count == 1 else f"v{dt.count}{base}"

def _float_lit(v: float, dt: DType) -> str:
  v = float(v)
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

def _root_buffer(u: UOp) -> UOp:
  while u.op is Ops.AFTER: u = u.src[0]
  return u

def _split_range(uops: list[UOp]) -> UOp | None:
  """The loop to split across cores: the only top-level RANGE, when it is an output axis and nothing at top level
  writes global memory (every core runs the top level; only the split loop's iterations are divided)."""
  depth, top_ranges, top_global_store = 0, [], False
  for u in uops:
    if u.op is Ops.RANGE:
      if depth == 0: top_ranges.append(u)
      depth += 1
    elif u.op is Ops.END: depth -= 1
    elif u.op is Ops.STORE and depth == 0:
      buf = _root_buffer(u.src[0].src[0]) if u.src[0].op is Ops.INDEX else None
      if buf is None or buf.op is not Ops.BUFFER or buf.arg.addrspace is AddrSpace.GLOBAL: top_global_store = True
  if len(top_ranges) != 1 or top_global_store: return None
  r = top_ranges[0]
  return r if isinstance(r.arg, tuple) and r.arg[-1] in SPLIT_AXES else None

_WORK_OPS = GroupOp.ALU | {Ops.LOAD, Ops.STORE, Ops.CAST, Ops.BITCAST}
def _work_per_iter(uops: list[UOp], split: UOp | None) -> int:
  """A static estimate of the ops one iteration of the split loop runs (inner loops weighted by their trip counts)."""
  if split is None: return 0
  mult, stack, total, inside = 1, [], 0, False
  for u in uops:
    if u is split: inside = True; continue  # noqa: E702
    if not inside: continue
    if u.op is Ops.RANGE:
      end = u.src[0]
      trip = int(end.arg) if end.op is Ops.CONST else int(min(max(end.vmax, 1), 1 << 20))
      stack.append(mult)
      mult *= max(trip, 1)
    elif u.op is Ops.END:
      if split in u.src[1:]: break
      mult = stack.pop()
    elif u.op in _WORK_OPS: total += mult * u.dtype.count if u.op is not Ops.STORE else mult * u.src[1].dtype.count
  return max(total, 1)

def _index_like(uops: list[UOp]) -> set[UOp]:
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

def _contractible(uops: list[UOp]) -> set[UOp]:
  """Float ADDs (and their MUL operands) that compute the value stored into a register accumulator."""
  ret: set[UOp] = set()
  for u in uops:
    if u.op is not Ops.STORE or u.src[0].op is not Ops.INDEX or not _is_float(u.src[1].dtype): continue
    if (buf := _root_buffer(u.src[0].src[0])).op is not Ops.BUFFER or buf.arg.addrspace is not AddrSpace.REG: continue
    todo = [u.src[1]]
    while todo:
      x = todo.pop()
      if x.op is Ops.ADD and x not in ret:
        ret.add(x)
        todo.extend(x.src)
        ret.update(s for s in x.src if s.op is Ops.MUL)
  return ret

class LLVMRenderer(Renderer):
  """Renders the linear program to LLVM IR for the host CPU (loops only: no grid, no locals). The CPU device fills in the
  host's vector width and arch (see tg_cpu_x86.device)."""
  device = "CPU"
  # float16/bfloat16/fp8 are emulated by the core; upcast axes become LLVM vectors; one thread runs the whole kernel as
  # loops, so big reduce kernels take big register tiles and transposes a cache-friendly upcast; EXP2/LOG2/SIN come
  # from the core's approximations (LLVM's would call libm)
  caps = RendererCaps(native_dtypes=frozenset({dtypes.bool, *_INT_BITS, dtypes.float32, dtypes.float64}), vector_upcast=True,
                      has_grid=False, has_local=False, local_max=(1,), shared_max=0, native_transcendentals=frozenset({Ops.SQRT, Ops.RECIPROCAL}),
                      big_reduce_tile=(16, 8), transpose_tile=4)

  def render(self, uops: list[UOp]) -> str: return _KernelWriter(uops).render()

class _KernelWriter:
  def __init__(self, uops: list[UOp]):
    self.uops = uops
    sink = uops[-1] if uops and uops[-1].op is Ops.SINK else None
    self.name = sink.arg.name if sink is not None and sink.arg is not None else "kernel"
    self.sym = symbol_name(self.name)
    self.lines: list[str] = []
    self.allocas: list[str] = []
    self.decls: set[str] = set()
    self.need_threefry = False
    self.r: dict[UOp, str] = {}
    self.idx: dict[UOp, tuple[str, str | None, DType]] = {}  # INDEX -> (pointer, gate or None, element dtype)
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

  # *** the function ***
  def render(self) -> str:
    uops = self.uops
    gparams = [u for u in uops if u.op is Ops.PARAM and u.arg.addrspace is AddrSpace.GLOBAL]
    params = sorted({u.arg.slot: u for u in gparams}.items())
    var_uops = [u for u in uops if u.op is Ops.PARAM and u.arg.addrspace is AddrSpace.ALU]
    var_names = sorted(var_uops, key=lambda v: v.arg.name)  # vals holds the variables sorted by name (as ProgramSpec.vars)
    self.split = _split_range(uops)
    self.index_like = _index_like(uops)
    self.contract = _contractible(uops)
    work = _work_per_iter(uops, self.split)
    # the body
    self.label("entry")
    body_start = len(self.lines)
    for v in var_uops:
      i, vt = var_names.index(v), ltype(v.dtype)
      if vt == "i32": self.r[v] = f"%var{i}"
      elif _bits(v.dtype) > 32: self.r[v] = self.emit(f"{'zext' if _is_unsigned(v.dtype) else 'sext'} i32 %var{i} to {vt}")
      else: self.r[v] = self.emit(f"trunc i32 %var{i} to {vt}")
    for p in gparams: self.r[p] = f"%buf{p.arg.slot}"
    if self.split is None:
      q = self.emit("icmp eq i32 %ncores, 0")
      run = self.newlabel("run")
      self.stmt(f"br i1 {q}, label %query, label %{run}")
      self.label("query")
      self.stmt("ret i64 0")
      self.label(run)
    for u in uops: self.render_uop(u)
    self.stmt("ret i64 0")
    body = self.lines[:body_start] + self.allocas + self.lines[body_start:]
    # the exported wrapper
    bargs = ", ".join([f"ptr noalias %buf{slot}" for slot, _ in params] + [f"i32 %var{i}" for i in range(len(var_names))] +
                      ["i32 %core", "i32 %ncores"])
    wrap = [f"define i64 @{self.sym}(ptr nocapture readonly %bufs, ptr nocapture readonly %vals, i32 %core, i32 %ncores) #0 {{", "entry:"]
    cargs = []
    for slot, _ in params:
      wrap += [f"  %pb{slot} = getelementptr inbounds ptr, ptr %bufs, i64 {slot}", f"  %b{slot} = load ptr, ptr %pb{slot}, align 8"]
      cargs.append(f"ptr %b{slot}")
    for i in range(len(var_names)):
      wrap += [f"  %pv{i} = getelementptr inbounds i32, ptr %vals, i64 {i}", f"  %v{i} = load i32, ptr %pv{i}, align 4"]
      cargs.append(f"i32 %v{i}")
    cargs += ["i32 %core", "i32 %ncores"]
    wrap += [f"  %ret = call i64 @{self.sym}.body({', '.join(cargs)})", "  ret i64 %ret", "}"]
    out = [f"; tg kernel {self.name}", f"; split loop: {'yes' if self.split is not None else 'no'}", "",
           f"@{work_symbol(self.name)} = constant i64 {work}", "",
           f"define internal i64 @{self.sym}.body({bargs}) #1 {{", *body, "}", "", *wrap]
    if self.need_threefry:
      out += ["", _threefry_fn()]
      self.decls.add("declare i32 @llvm.fshl.i32(i32, i32, i32)")
    out += ["", *sorted(self.decls), "", 'attributes #0 = { nounwind "frame-pointer"="none" }',
            'attributes #1 = { alwaysinline nounwind "frame-pointer"="none" }', ""]
    return "\n".join(out)

  # *** one uop ***
  def render_uop(self, u: UOp) -> None:
    op, r = u.op, self.r
    if op in (Ops.SINK, Ops.GROUP, Ops.NOOP, Ops.BARRIER): return
    if op is Ops.PARAM:
      if u not in r: raise RuntimeError(f"PARAM with addrspace {u.arg.addrspace} is not supported by the LLVM renderer")
      return
    if op is Ops.BUFFER:
      name = f"%reg{len(self.allocas)}"
      self.allocas.append(f"  {name} = alloca [{max(u.arg.size or 1, 1)} x {ltype(u.dtype, mem=True)}], align 64")
      r[u] = name
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
    et = buf.dtype if _root_buffer(buf).op is Ops.BUFFER else buf.dtype.scalar()  # a register buffer may hold vectors
    it, iv = ltype(idx.dtype), self.r[idx]
    # a masked-off index may be anything: it becomes 0, always in bounds, so a gated load can read unconditionally and
    # select its value (no branch: the loop stays vectorizable, e.g. the padded borders of a convolution). A vector gate
    # (one per lane) goes to a masked load, which touches no masked-off lane: the address needn't be in bounds
    vgate = gate is not None and u.src[2].dtype.count > 1
    if gate is not None and not vgate: iv = self.emit(f"select i1 {gate}, {it} {iv}, {it} 0")
    ptr = self.emit(f"getelementptr {'' if vgate else 'inbounds '}{ltype(et, mem=True)}, ptr {self.r[buf]}, {it} {iv}")
    self.idx[u] = (ptr, gate, et)
    self.r[u] = ptr

  def _and_gates(self, a: str | None, b: str | None) -> str | None:
    if a is None or b is None: return a if b is None else b
    return self.emit(f"and i1 {a}, {b}")

  def render_load(self, u: UOp) -> None:
    ptr, gate, _ = self.idx[u.src[0]]
    alt = None
    if len(u.src) == 3: alt, gate = self.r[u.src[1]], self._and_gates(gate, self.r[u.src[2]])
    mt, rt, align = ltype(u.dtype, mem=True), ltype(u.dtype), u.dtype.scalar().itemsize
    def do_load() -> str:
      v = self.emit(f"load {mt}, ptr {ptr}, align {align}")
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
        v = self.intrinsic(f"llvm.masked.load.v{u.dtype.count}i8.p0", mt, [("ptr", ptr), ("i32", "1"), (ltype(gdt), gate), (mt, "zeroinitializer")])
        self.r[u] = self.emit(f"icmp ne {mt} {v}, zeroinitializer")
      else: self.r[u] = self.intrinsic(f"llvm.masked.load.{_suffix(u.dtype)}.p0", rt, [("ptr", ptr), ("i32", str(align)), (ltype(gdt), gate), (rt, other)])
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
    st = f"store {ltype(vdt, mem=True)} {val}, ptr {ptr}, align {vdt.scalar().itemsize}"
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
    start, stop = "0", end
    if u is self.split:
      trip = self.emit(f"sext {t} {end} to i64") if t != "i64" else end
      q, go = self.emit("icmp eq i32 %ncores, 0"), self.newlabel("split")
      self.stmt(f"br i1 {q}, label %query, label %{go}")
      self.label("query")
      self.stmt(f"ret i64 {trip}")
      self.label(go)
      c64, n64 = self.emit("sext i32 %core to i64"), self.emit("sext i32 %ncores to i64")
      lo = self.emit(f"sdiv i64 {self.emit(f'mul i64 {trip}, {c64}')}, {n64}")
      c1 = self.emit(f"add i64 {c64}, 1")
      hi = self.emit(f"sdiv i64 {self.emit(f'mul i64 {trip}, {c1}')}, {n64}")
      start, stop = (self.emit(f"trunc i64 {lo} to {t}"), self.emit(f"trunc i64 {hi} to {t}")) if t != "i64" else (lo, hi)
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

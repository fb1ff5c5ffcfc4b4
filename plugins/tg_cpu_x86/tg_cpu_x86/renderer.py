"""The CPU's LLVM IR renderer: tg_core's LLVM IR renderer (tg_core.renderer.llvmir) with the host CPU's calling
convention and its multi-core loop split. This module only writes text; it imports neither llvmlite nor the runtime.

The calling convention is in `tg_cpu_x86.abi`. The exported function loads the buffer addresses and variables and calls
an always-inlined body whose buffer arguments are `noalias` (tinygrad's `restrict` convention), so after inlining LLVM
knows distinct buffers don't alias. Loops are plain LLVM loops (phi induction variables).
The first top-level output loop is split across cores when that is safe (see `_split_range`)."""
from __future__ import annotations
import functools
from typing import ClassVar

from tg_core.codegen.vectorize import affine
from tg_core.device import RendererCaps
from tg_core.dtype import AddrSpace, dtypes
from tg_core.renderer.llvmir import _INT_BITS, CONTRACT, LLVMIRRenderer, LLVMKernelWriter, _bits, index_like, lconst, ltype, root_buffer
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import AxisType, UOp
from tg_cpu_x86.abi import WORK_COMMENT, symbol_name, work_symbol

__all__ = ["CONTRACT", "LLVMRenderer", "_bits", "index_like", "lconst", "ltype"]

SPLIT_AXES = (AxisType.LOOP, AxisType.GLOBAL, AxisType.THREAD)

def _split_range(uops: list[UOp]) -> UOp | None:
  """The loop to split across cores: the only top-level output-axis RANGE, when nothing at top level writes global memory
  (every core runs the top level; only the split loop's iterations are divided). Other top-level RANGEs may only be reduce
  loops (a row statistic hoisted out of the output loop, e.g. an rms_norm fused into its matvec): each core computes it itself."""
  depth, top_ranges, top_global_store = 0, [], False
  for u in uops:
    if u.op is Ops.RANGE:
      if depth == 0: top_ranges.append(u)
      depth += 1
    elif u.op is Ops.END: depth -= 1
    elif u.op is Ops.STORE and depth == 0:
      buf = root_buffer(u.src[0].src[0]) if u.src[0].op is Ops.INDEX else None
      if buf is None or buf.op is not Ops.BUFFER or buf.arg.addrspace is AddrSpace.GLOBAL: top_global_store = True
  if top_global_store or any(not isinstance(r.arg, tuple) or r.arg[-1] not in (*SPLIT_AXES, AxisType.REDUCE) for r in top_ranges): return None
  out_ranges = [r for r in top_ranges if r.arg[-1] in SPLIT_AXES]
  return out_ranges[0] if len(out_ranges) == 1 else None

# bytes one iteration of a loop must read of a streamed load before the load is prefetched an iteration of that loop ahead:
# a 4 KiB page, the furthest the hardware prefetchers run ahead (they stop at a page boundary), so each new run of rows starts
# already fetched; a shorter run is the hardware prefetchers' to follow
PREFETCH_MIN_RUN = 4096
# bytes a load reads at least to be prefetched: each prefetch fetches a 64-byte line, and loads of a few bytes (a row sum's
# scalar loads) would issue one per element
PREFETCH_MIN_LOAD = 32
PREFETCH_DECL = "declare void @llvm.prefetch.p0(ptr nocapture readonly, i32 immarg, i32 immarg, i32 immarg)"

def _prefetch_stride(idx: UOp, loops: list[UOp], itemsize: int, vec_bytes: int) -> tuple[UOp, int] | None:
  """(loop, bytes) for a streamed load: one that reads each element once (its index varies along every loop around it,
  `loops`, outermost first, at least one a reduce) and the innermost loop whose one iteration reads at least PREFETCH_MIN_RUN
  bytes of it (the loops inside it that the load varies along, times the vector); bytes: how far its next iteration reads
  ahead. None for anything else (a reused operand, a loop without a constant trip count, a non-affine index)."""
  if not loops or not any(r.arg[-1] is AxisType.REDUCE for r in loops if isinstance(r.arg, tuple)): return None
  deps = idx.toposort()
  if any(r not in deps for r in loops): return None
  run = vec_bytes
  for r in reversed(loops):
    if (a := affine(idx, r)) is None or a[1] == 0: return None
    if run >= PREFETCH_MIN_RUN: return r, a[1] * itemsize
    if r.src[0].op is not Ops.CONST: return None
    run *= int(r.src[0].arg)
  return None

_WORK_OPS = GroupOp.ALU | {Ops.LOAD, Ops.STORE, Ops.CAST, Ops.BITCAST}
def _weighted_work(uops: list[UOp], stop: UOp | None = None) -> int:
  """A static estimate of the ops `uops` run, loops weighted by their trip counts (a symbolic one by its largest value,
  capped at 2^20); counting stops at the END that closes `stop`."""
  mult, stack, total = 1, [], 0
  for u in uops:
    if u.op is Ops.RANGE:
      end = u.src[0]
      trip = int(end.arg) if end.op is Ops.CONST else int(min(max(end.vmax, 1), 1 << 20))
      stack.append(mult)
      mult *= max(trip, 1)
    elif u.op is Ops.END:
      if stop is not None and stop in u.src[1:]: break
      mult = stack.pop() if stack else mult
    elif u.op in _WORK_OPS: total += mult * u.dtype.count if u.op is not Ops.STORE else mult * u.src[1].dtype.count
  return total

def _work_per_iter(uops: list[UOp], split: UOp | None) -> int:
  """A static estimate of the ops one iteration of the split loop runs (inner loops weighted by their trip counts)."""
  if split is None: return 0
  return max(_weighted_work(uops[uops.index(split) + 1:], stop=split), 1)

class _CPUKernelWriter(LLVMKernelWriter):
  """The host ABI: `i64 KERNEL(i8** bufs, i32* vals, i32 core, i32 ncores)` around an always-inlined body; the split loop
  runs chunk `core` of `ncores`, and ncores == 0 queries its trip count."""
  ret: ClassVar[str] = "ret i64 0"
  attributes = ('attributes #0 = { nounwind "frame-pointer"="none" }', 'attributes #1 = { alwaysinline nounwind "frame-pointer"="none" }')

  def __init__(self, renderer: LLVMIRRenderer, uops: list[UOp]):
    super().__init__(renderer, uops)
    self.sym = symbol_name(self.name)
    self.split = _split_range(uops)
    self.open: list[UOp] = []  # the loops open at the uop being rendered, outermost first
    self.prefetched = 0  # bytes a loop iteration of the streamed loads prefetched so far read (see render_load)
    # loads only stored (a PACK's copy into a kernel-local panel): not prefetched, the packing opts plan their own cache use
    stored = {u.src[1] for u in uops if u.op is Ops.STORE and len(u.src) > 1}
    self.copied = stored - {s for u in uops if u.op is not Ops.STORE for s in u.src}

  def render_range(self, u: UOp) -> None:
    super().render_range(u)
    self.open.append(u)

  def render_end(self, u: UOp) -> None:
    super().render_end(u)
    self.open = [r for r in self.open if r not in u.src[1:]]

  def render_load(self, u: UOp) -> None:
    """A load, and for a streamed one (`_prefetch_stride`) a software prefetch of what it reads one iteration ahead of its
    loop, into the L2 (`llvm.prefetch`, locality 2: x86's prefetcht1). A column reduce's K block starts ROW_STREAMS rows the
    hardware prefetchers haven't seen, a matvec x @ W.T's next row group ROW_STREAMS new rows (the heuristic's `_row_streams`):
    fetched a block ahead they arrive in time. Only
    while the lines one iteration of all the kernel's prefetched loads reads fit a quarter of the L2 (the host's, from
    caps.cache_sizes; no prefetch where it isn't known): prefetched further ahead they would evict each other first. The last
    iteration's prefetch points past what the loop reads (or past the buffer): x86 prefetches never fault, and the address is
    computed without `inbounds`."""
    super().render_load(u)
    idx, caches = u.src[0], self.renderer.caps.cache_sizes
    if len(caches) < 2 or idx.op is not Ops.INDEX or len(idx.src) != 2 or len(u.src) != 1 or u in self.copied: return
    buf = root_buffer(idx.src[0])
    if buf.op is not Ops.PARAM or buf.arg.addrspace is not AddrSpace.GLOBAL: return
    itemsize = u.dtype.scalar().itemsize
    if itemsize * u.dtype.count < PREFETCH_MIN_LOAD: return
    if (ps := _prefetch_stride(idx.src[1], self.open, itemsize, itemsize * u.dtype.count)) is None: return
    loop, ahead = ps
    inner = self.open[self.open.index(loop) + 1:]
    block = itemsize * u.dtype.count * functools.reduce(lambda a, r: a * int(r.src[0].arg), inner, 1)
    if self.prefetched + block > caches[1] // 4: return
    self.prefetched += block
    p = self.emit(f"getelementptr i8, ptr {self.idx[idx][0]}, i64 {ahead}")
    self.decls.add(PREFETCH_DECL)
    self.stmt(f"call void @llvm.prefetch.p0(ptr {p}, i32 0, i32 2, i32 1)")

  def prologue(self) -> None:
    if self.split is None:
      q = self.emit("icmp eq i32 %ncores, 0")
      run = self.newlabel("run")
      self.stmt(f"br i1 {q}, label %query, label %{run}")
      self.label("query")
      self.stmt("ret i64 0")
      self.label(run)

  def shift(self, u: UOp, src: list[str], t: str) -> str:
    dt, b, r = u.dtype, u.src[1], self.renderer
    width = dt.count if isinstance(r, LLVMRenderer) and _bits(dt) == 32 and ltype(b.dtype) == t else 0
    prefix = "avx2" if width in (4, 8) and r.avx2 else "avx512" if width == 16 and r.avx512 else None
    if prefix is None or (b.op is Ops.CONST and not isinstance(b.arg, tuple)): return super().shift(u, src, t)
    suffix = {4: "", 8: ".256", 16: ".512"}[width]
    name = f"llvm.x86.{prefix}.{_AVX2_SHIFTS[(u.op, dt.scalar() == dtypes.bool or dtypes.is_unsigned(dt.scalar()))]}.d{suffix}"
    return self.intrinsic(name, t, [(t, src[0]), (t, src[1])])

  def dp4a(self, u: UOp, src: list[str], t: str) -> str:
    """DP4A on int32 lanes. Both x86 paths multiply |a| (u8) by b saturated to -127..127 and given a's sign (i8): exact, and
    the abs and sign are plain IR, so a's known sign folds them away (unpacked nibbles are >= 0). With AVX512-VNNI (8 lanes
    also need AVX512-VL) vpdpbusd sums the 4 products onto each lane in one instruction (its accumulate wraps like an int32
    add); with AVX2, per 8 lanes, the pairs are summed to int16 (vpmaddubsw: within 2 * 128 * 127, no saturation), then
    pairs of those to int32 (vpmaddwd by 1), then added. Other widths: the same value in portable IR (bytes sign-extended,
    multiplied, summed by lanes of 4). A uint32 a (unsigned bytes, b not saturated) is vpdpbusd's own operation: with VNNI one
    instruction; with AVX2 a's bytes split into their low 7 bits and their top bit (two vpmaddubsw that can't saturate: 127 * 128
    * 2 and 1 * 128 * 2), the top bit's pair sums weighted by 128 in the vpmaddwd."""
    n, r = u.dtype.count, self.renderer
    bt, wt = f"<{4 * n} x i8>", f"<{4 * n} x i32>"
    a, b = (self.emit(f"bitcast {t if i == 1 else ltype(u.src[0].dtype)} {v} to {bt}") for i, v in enumerate(src[:2]))
    # wider vectors (a matmul's register tile: a power of two) take one vpdpbusd per 16 lanes
    vnni = isinstance(r, LLVMRenderer) and r.avx512vnni and ((n >= 16 and n & (n - 1) == 0) or (n == 8 and r.avx512vl))
    avx2 = isinstance(r, LLVMRenderer) and r.avx2 and n % 8 == 0 and n & (n - 1) == 0
    if u.src[0].dtype.scalar() == dtypes.uint32: return self._dp4a_unsigned(n, a, b, src[2], t, vnni, avx2)
    # frozen: LLVM's x86 backend looped forever on a 512-bit vpmaxsb whose input is a broadcast (a 16-lane DP4A of x's word).
    # Not where the op's arg promises b has no byte -128 (the max is a no-op): a broadcast b then folds into vpdpbusd's operand
    if u.arg is not True:
      sat = self.intrinsic(f"llvm.smax.v{4 * n}i8", bt, [(bt, b), (bt, f"<{', '.join(['i8 -127'] * 4 * n)}>")])
      b = self.emit(f"freeze {bt} {sat}")
    if vnni or avx2:
      neg = self.emit(f"icmp slt {bt} {a}, zeroinitializer")
      sb = self.emit(f"select <{4 * n} x i1> {neg}, {bt} {self.emit(f'sub {bt} zeroinitializer, {b}')}, {bt} {b}")
      ua = self.intrinsic(f"llvm.abs.v{4 * n}i8", bt, [(bt, a), ("i1", "false")])
      return self._vpdpbusd(n, src[2], ua, sb, t) if vnni else self._avx2_dot(n, [(ua, 1)], sb, src[2], t)
    prod = self.emit(f"mul {wt} {self.emit(f'sext {bt} {a} to {wt}')}, {self.emit(f'sext {bt} {b} to {wt}')}")
    return self._sum_by_4(n, prod, src[2], t)

  def _vpdpbusd(self, n: int, c: str, a: str, b: str, t: str) -> str:
    """c + sum_k uint8(a_k) * int8(b_k) on n int32 lanes with AVX512-VNNI: 8 or 16 lanes one instruction, a wider power of two
    one per 16 lanes."""
    if n <= 16: return self.intrinsic(f"llvm.x86.avx512.vpdpbusd.{32 * n}", t, [(t, c), (f"<{4 * n} x i8>", a), (f"<{4 * n} x i8>", b)])
    pieces = zip(self._pieces(c, "i32", n, 16), self._pieces(a, "i8", 4 * n, 64), self._pieces(b, "i8", 4 * n, 64))
    return self._joined([self.intrinsic("llvm.x86.avx512.vpdpbusd.512", "<16 x i32>", [("<16 x i32>", pc), ("<64 x i8>", pa), ("<64 x i8>", pb)])
                         for pc, pa, pb in pieces], "i32", 16)

  def _dp4a_unsigned(self, n: int, a: str, b: str, c: str, t: str, vnni: bool, avx2: bool) -> str:
    """c + sum_k uint8(a_k) * int8(b_k) on n int32 lanes (a, b: their <4n x i8> bytes)."""
    bt, wt = f"<{4 * n} x i8>", f"<{4 * n} x i32>"
    if vnni: return self._vpdpbusd(n, c, a, b, t)
    if avx2:
      lo = self.emit(f"and {bt} {a}, <{', '.join(['i8 127'] * 4 * n)}>")
      hi = self.emit(f"lshr {bt} {a}, <{', '.join(['i8 7'] * 4 * n)}>")
      return self._avx2_dot(n, [(lo, 1), (hi, 128)], b, c, t)
    prod = self.emit(f"mul {wt} {self.emit(f'zext {bt} {a} to {wt}')}, {self.emit(f'sext {bt} {b} to {wt}')}")
    return self._sum_by_4(n, prod, c, t)

  def _avx2_dot(self, n: int, terms: list[tuple[str, int]], b: str, c: str, t: str) -> str:
    """c + sum over terms (u, m) of m * (the sums of 4 byte products u_k * int8(b_k)) on n int32 lanes with AVX2, 8 lanes (one
    256-bit register) at a time: vpmaddubsw sums pairs to int16 (each u's bytes small enough that a pair can't saturate), vpmaddwd
    by m sums pairs of those to int32."""
    parts = []
    for pieces in zip(self._pieces(b, "i8", 4 * n, 32), *(self._pieces(u, "i8", 4 * n, 32) for u, _ in terms)):
      sums = [self.intrinsic("llvm.x86.avx2.pmadd.wd", "<8 x i32>", [
        ("<16 x i16>", self.intrinsic("llvm.x86.avx2.pmadd.ub.sw", "<16 x i16>", [("<32 x i8>", pu), ("<32 x i8>", pieces[0])])),
        ("<16 x i16>", f"<{', '.join([f'i16 {m}'] * 16)}>")]) for pu, (_, m) in zip(pieces[1:], terms)]
      parts.append(functools.reduce(lambda x, y: self.emit(f"add <8 x i32> {x}, {y}"), sums))
    return self.emit(f"add {t} {self._joined(parts, 'i32', 8)}, {c}")

  def _sum_by_4(self, n: int, prod: str, c: str, t: str) -> str:
    """c + the sums of each 4 consecutive lanes of the 4n-lane int32 vector `prod` (n == 1: c and the result are scalars)."""
    wt = f"<{4 * n} x i32>"
    vt = t if n > 1 else "<1 x i32>"
    acc = c if n > 1 else self.emit(f"insertelement <1 x i32> poison, i32 {c}, i32 0")
    for k in range(4):
      lanes = ", ".join(f"i32 {4 * i + k}" for i in range(n))
      acc = self.emit(f"add {vt} {acc}, {self.emit(f'shufflevector {wt} {prod}, {wt} poison, <{n} x i32> <{lanes}>')}")
    return acc if n > 1 else self.emit(f"extractelement <1 x i32> {acc}, i32 0")

  def dpbf16(self, u: UOp, src: list[str], t: str) -> str:
    """DPBF16 with AVX512_BF16's vdpbf16ps (the renderer declares caps.native_dpbf16 only where the host has it): 16 lanes a
    zmm instruction, 8 and 4 the VL forms, wider vectors (a power of two) in chunks of 16. Other widths: the same value in
    portable IR (each bfloat16 moved to the top of a float32, multiplied, added). Intel documents vdpbf16ps as treating
    denormal inputs and results as 0."""
    n = u.dtype.count
    if n > 16 and n & (n - 1) == 0:
      pieces = zip(*(self._pieces(v, ty, n, 16) for v, ty in zip(src, ("i32", "i32", "float"))))
      return self._joined([self._dpbf16_vec(16, a, b, c) for a, b, c in pieces], "float", 16)
    if n in (4, 8, 16): return self._dpbf16_vec(n, src[0], src[1], src[2])
    it, ft = (f"<{n} x i32>", f"<{n} x float>") if n > 1 else ("i32", "float")
    def halves(v: str) -> tuple[str, str]:
      lo = self.emit(f"shl {it} {v}, {lconst(16, u.src[0].dtype)}")
      hi = self.emit(f"and {it} {v}, {lconst(0xFFFF0000, u.src[0].dtype)}")
      return self.emit(f"bitcast {it} {lo} to {ft}"), self.emit(f"bitcast {it} {hi} to {ft}")
    (alo, ahi), (blo, bhi) = halves(src[0]), halves(src[1])
    acc = self.emit(f"fadd {ft} {src[2]}, {self.emit(f'fmul {ft} {alo}, {blo}')}")
    return self.emit(f"fadd {ft} {acc}, {self.emit(f'fmul {ft} {ahi}, {bhi}')}")

  def _pieces(self, v: str, ty: str, n: int, w: int) -> list[str]:
    """The n-lane vector `v` of `ty` as its n // w pieces of w lanes (an instruction's register width)."""
    if n == w: return [v]
    return [self.emit(f"shufflevector <{n} x {ty}> {v}, <{n} x {ty}> poison, <{w} x i32> <{', '.join(f'i32 {w * j + i}' for i in range(w))}>")
            for j in range(n // w)]

  def _joined(self, parts: list[str], ty: str, w: int) -> str:
    """Pieces of w lanes of `ty` (a power-of-two count) joined back into one vector, pairwise: shufflevector takes two vectors
    of one width."""
    while len(parts) > 1:
      parts = [self.emit(f"shufflevector <{w} x {ty}> {x}, <{w} x {ty}> {y}, <{2 * w} x i32> <{', '.join(f'i32 {i}' for i in range(2 * w))}>")
               for x, y in zip(parts[::2], parts[1::2])]
      w *= 2
    return parts[0]

  def _dpbf16_vec(self, n: int, a: str, b: str, c: str) -> str:
    bt, ft = f"<{2 * n} x bfloat>", f"<{n} x float>"
    ab, bb = (self.emit(f"bitcast <{n} x i32> {v} to {bt}") for v in (a, b))
    name = f"llvm.x86.avx512bf16.dpbf16ps.{32 * n}"
    return self.intrinsic(name, ft, [(ft, c), (bt, ab), (bt, bb)])

  def loop_bounds(self, u: UOp, t: str, end: str) -> tuple[str, str]:
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
    return start, stop

  def module(self, body: list[str], params: list[tuple[int, UOp]], nvars: int) -> list[str]:
    # the exported wrapper
    bargs = ", ".join([f"ptr noalias %buf{slot}" for slot, _ in params] + [f"i32 %var{i}" for i in range(nvars)] + ["i32 %core", "i32 %ncores"])
    wrap = [f"define i64 @{self.sym}(ptr nocapture readonly %bufs, ptr nocapture readonly %vals, i32 %core, i32 %ncores) #0 {{", "entry:"]
    cargs = []
    for slot, _ in params:
      wrap += [f"  %pb{slot} = getelementptr inbounds ptr, ptr %bufs, i64 {slot}", f"  %b{slot} = load ptr, ptr %pb{slot}, align 8"]
      cargs.append(f"ptr %b{slot}")
    for i in range(nvars):
      wrap += [f"  %pv{i} = getelementptr inbounds i32, ptr %vals, i64 {i}", f"  %v{i} = load i32, ptr %pv{i}, align 4"]
      cargs.append(f"i32 %v{i}")
    cargs += ["i32 %core", "i32 %ncores"]
    wrap += [f"  %ret = call i64 @{self.sym}.body({', '.join(cargs)})", "  ret i64 %ret", "}"]
    work = _work_per_iter(self.uops, self.split)
    # the whole kernel's work: the compiler compiles a small kernel quick first (tg_cpu_x86.compiler.QUICK_WORK)
    return [f"; tg kernel {self.name}", f"; split loop: {'yes' if self.split is not None else 'no'}", f"{WORK_COMMENT}{_weighted_work(self.uops)}", "",
            f"@{work_symbol(self.name)} = constant i64 {work}", "",
            f"define internal i64 @{self.sym}.body({bargs}) #1 {{", *body, "}", "", *wrap]

# AVX2's variable shifts (vpsllvd, vpsrlvd, vpsravd; AVX-512F's for 16 lanes, the same semantics): an amount >= 32 gives 0
# (the sign for the arithmetic one), which is the value tg defines, so they need none of the portable guard's compare, mask and
# select (3 vector ops per shift: a matvec over 4- and 5-bit quantized weights shifts each element by an amount read from a
# small table)
_AVX2_SHIFTS = {(Ops.SHL, False): "psllv", (Ops.SHL, True): "psllv", (Ops.SHR, True): "psrlv", (Ops.SHR, False): "psrav"}

class LLVMRenderer(LLVMIRRenderer):
  """Renders the linear program to LLVM IR for the host CPU (loops only: no grid, no locals). The CPU device fills in the
  host's vector width and arch (see tg_cpu_x86.device)."""
  device = "CPU"
  writer = _CPUKernelWriter
  # float16/bfloat16/fp8 are emulated by the core; upcast axes become LLVM vectors; one thread runs the whole kernel as
  # loops, so big reduce kernels take big register tiles and transposes a cache-friendly upcast; EXP2/LOG2/SIN come
  # from the core's approximations (LLVM's would call libm)
  caps = RendererCaps(native_dtypes=frozenset({dtypes.bool, *_INT_BITS, dtypes.float32, dtypes.float64}), vector_upcast=True,
                      has_grid=False, has_local=False, local_max=(1,), shared_max=0, native_transcendentals=frozenset({Ops.SQRT, Ops.RECIPROCAL}),
                      big_reduce_tile=(16, 8), transpose_tile=4)
  # what the host has (set by the CPU device from the host's features; all False: the portable IR, any x86-64 runs it)
  avx2: bool = False  # AVX2: 4/8-lane variable shifts and 8-lane DP4A use its instructions
  avx512: bool = False  # AVX-512F: 16-lane variable shifts
  avx512vnni: bool = False  # AVX512-VNNI: 16-lane DP4A is vpdpbusd (512-bit)
  avx512vl: bool = False  # AVX512-VL: with VNNI, 8-lane DP4A is vpdpbusd too (256-bit)

"""PYTHON: the reference device. It interprets the linear program with numpy, vectorised over the whole grid:
every grid index (SPECIAL) is an `arange` on its own axis, so each value in the program is an array that
broadcasts over the grid, and only the loops inside a thread (reduce ranges) run as Python loops."""
from __future__ import annotations
import base64
import pickle
from typing import Any

import numpy as np

from tg_core.device import Compiled, Compiler, LRUAllocator
from tg_core.renderer.python import PythonRenderer
from tg_core.dtype import AddrSpace, DType, _to_np_storage, dtypes
from tg_core.helpers import CHECK_OOB
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import identity_element

# *** numpy storage for dtypes numpy lacks: bfloat16 and fp8 compute as float32, rounded on every produce ***
def _bf16_to_f32(bits: np.ndarray) -> np.ndarray: return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)
def _f32_to_bf16(x: np.ndarray) -> np.ndarray:
  u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
  nan = np.isnan(np.asarray(x, dtype=np.float32))
  r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
  return np.where(nan, np.uint16(0x7FC0), r)

_FP8_LUT: dict[DType, np.ndarray] = {}
def _fp8_table(dt: DType) -> np.ndarray:
  if dt not in _FP8_LUT:
    from tg_core.dtype import fp8_to_float
    _FP8_LUT[dt] = np.array([fp8_to_float(i, dt) for i in range(256)], dtype=np.float32)
  return _FP8_LUT[dt]
def _fp8_to_f32(bits: np.ndarray, dt: DType) -> np.ndarray: return _fp8_table(dt)[np.asarray(bits, dtype=np.uint8)]
def _f32_to_fp8(x: np.ndarray, dt: DType) -> np.ndarray:
  from tg_core.dtype import float_to_fp8
  flat = np.asarray(x, dtype=np.float64).ravel()
  uniq, inv = np.unique(flat, return_inverse=True)
  enc = np.array([float_to_fp8(float(v), dt) for v in uniq], dtype=np.uint8)
  return enc[inv].reshape(np.shape(x))

def _round_to(x: Any, dt: DType) -> Any:
  if dt == dtypes.bfloat16: return _bf16_to_f32(_f32_to_bf16(x))
  if dt in dtypes.fp8s: return _fp8_to_f32(_f32_to_fp8(x, dt), dt)
  return x

def _compute_np(dt: DType) -> Any:
  """The numpy dtype values of `dt` are computed in."""
  s = dt.scalar()
  if s == dtypes.bfloat16 or s in dtypes.fp8s: return np.float32
  return _to_np_storage(s)

def _cast(x: Any, src: DType, dst: DType) -> Any:
  npdst = _compute_np(dst)
  with np.errstate(all="ignore"):
    if dst.scalar() == dtypes.bool: return np.asarray(x) != 0
    if dtypes.is_int(dst) and dtypes.is_float(src):
      xf = np.asarray(x, dtype=np.float64)
      xf = np.where(np.isfinite(xf), np.trunc(xf), 0)  # C leaves inf/nan -> int undefined; pick 0
      info = np.iinfo(npdst)
      # out-of-range conversions wrap through int64 like the x86 backends do for in-range-of-int64 values
      xf = np.clip(xf, -2.0**63, 2.0**63 - 1024)
      return xf.astype(np.int64).astype(npdst) if info.bits < 64 or info.kind == "i" else \
        np.where(xf >= 2.0**63, (xf - 2.0**63).astype(np.int64).astype(np.uint64) + np.uint64(2**63), xf.astype(np.int64).astype(np.uint64))
    return _round_to(np.asarray(x).astype(npdst), dst.scalar())

def _bitcast(x: Any, src: DType, dst: DType) -> Any:
  arr = np.asarray(x)
  if src.scalar() == dtypes.bfloat16: arr = _f32_to_bf16(arr)
  elif src.scalar() in dtypes.fp8s: arr = _f32_to_fp8(arr, src.scalar())
  else: arr = arr.astype(_to_np_storage(src.scalar()))
  out = arr.view(_to_np_storage(dst.scalar()))
  if dst.scalar() == dtypes.bfloat16: return _bf16_to_f32(out)
  if dst.scalar() in dtypes.fp8s: return _fp8_to_f32(out, dst.scalar())
  return out

def _idiv(a: Any, b: Any) -> Any:
  b_safe = np.where(b == 0, 1, b)
  q = np.floor_divide(a, b_safe)
  r = a - q * b_safe
  # floor -> C truncation: one up when inexact and the operands' signs differ
  q = q + ((r != 0) & ((np.asarray(a) < 0) != (b_safe < 0))).astype(q.dtype if hasattr(q, "dtype") else np.int64)
  return np.where(b == 0, 0, q)

def _alu(op: Ops, dt: DType, srcs: list[Any], src_dt: DType) -> Any:
  a = srcs[0]
  with np.errstate(all="ignore"):
    match op:
      case Ops.ADD: r = a + srcs[1]
      case Ops.SUB: r = a - srcs[1]
      case Ops.MUL: r = a * srcs[1]
      case Ops.FDIV: r = a / srcs[1]
      case Ops.IDIV: r = _idiv(a, srcs[1])
      case Ops.MOD: r = a - _idiv(a, srcs[1]) * srcs[1]
      case Ops.MAX: r = np.maximum(a, srcs[1])
      case Ops.CMPLT: return np.less(a, srcs[1])
      case Ops.CMPNE: return np.not_equal(a, srcs[1])
      case Ops.CMPEQ: return np.equal(a, srcs[1])
      case Ops.AND: r = np.bitwise_and(a, srcs[1])
      case Ops.OR: r = np.bitwise_or(a, srcs[1])
      case Ops.XOR: r = np.bitwise_xor(a, srcs[1])
      case Ops.SHL: r = np.left_shift(a, np.asarray(srcs[1]).astype(np.asarray(a).dtype))
      case Ops.SHR: r = np.right_shift(a, np.asarray(srcs[1]).astype(np.asarray(a).dtype))
      case Ops.WHERE: r = np.where(a, srcs[1], srcs[2])
      case Ops.MULACC: r = a * srcs[1] + srcs[2]
      case Ops.NEG: r = np.logical_not(a) if dt.scalar() == dtypes.bool else np.negative(a)
      case Ops.EXP2: r = np.exp2(a)
      case Ops.LOG2: r = np.log2(a)
      case Ops.SIN: r = np.sin(a)
      case Ops.SQRT: r = np.sqrt(a)
      case Ops.RECIPROCAL: r = np.reciprocal(np.asarray(a, dtype=_compute_np(dt)))
      case Ops.TRUNC: r = np.trunc(a)
      case Ops.POW: r = np.power(a, srcs[1])
      case Ops.THREEFRY: r = threefry2x32(np.asarray(a, dtype=np.uint64), np.asarray(srcs[1], dtype=np.uint64))
      case _: raise NotImplementedError(f"PYTHON can't run {op}")
  r = np.asarray(r).astype(_compute_np(dt), copy=False)
  return _round_to(r, dt.scalar()) if dt.scalar() in (dtypes.bfloat16, *dtypes.fp8s) else r

def threefry2x32(x: np.ndarray, key: np.ndarray) -> np.ndarray:
  """Threefry-2x32 with 20 rounds on (hi, lo) uint32 halves of x, keyed by the halves of key (Random123)."""
  x0, x1 = (x & 0xFFFFFFFF).astype(np.uint32), (x >> np.uint64(32)).astype(np.uint32)
  k0, k1 = (key & 0xFFFFFFFF).astype(np.uint32), (key >> np.uint64(32)).astype(np.uint32)
  k2 = k0 ^ k1 ^ np.uint32(0x1BD11BDA)
  ks = [k0, k1, k2]
  rot = [[13, 15, 26, 6], [17, 29, 16, 24]]
  x0 = x0 + ks[0]; x1 = x1 + ks[1]  # noqa: E702
  with np.errstate(over="ignore"):
    for i in range(5):
      for r in rot[i % 2]:
        x0 = x0 + x1
        x1 = ((x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))) ^ x0
      x0 = x0 + ks[(i + 1) % 3]
      x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
  return (x1.astype(np.uint64) << np.uint64(32)) | x0.astype(np.uint64)

# *** compiler / program (the renderer is tg_core/renderer/python.py) ***
class PythonCompiler(Compiler):
  def compile(self, src: str) -> bytes: return base64.b64decode(src.rsplit("\n", 1)[-1])

class PythonProgram:
  def __init__(self, device: str, name: str, lib: bytes, **kwargs: Any):
    self.name, self.prog = name, pickle.loads(lib)
  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    import time
    st = time.perf_counter()
    run_program(self.prog, bufs, vals, self.name)
    return time.perf_counter() - st if wait else None

def _check_oob(name: str, prog: list[tuple], index: int, dt: DType, size: int, idx: Any, gate: Any) -> None:
  from tg_core.codegen.oob import check_indices  # only with CHECK_OOB=1
  buf = prog[index][2][0]
  while prog[buf][0] is Ops.AFTER: buf = prog[buf][2][0]  # an access after a store into the same param
  check_indices(name, prog[buf][3].slot, dt, size, idx, gate)

def run_program(prog: list[tuple], bufs: tuple[Any, ...], vals: tuple[int, ...], name: str = "kernel") -> None:
  specials = sorted([i for i, p in enumerate(prog) if p[0] is Ops.SPECIAL], key=lambda i: prog[i][3])
  ended = {s for p in prog if p[0] is Ops.END for s in p[2][1:]}
  # RANGEs without an END are vector axes (folded by a REDUCE): each gets an axis after the grid's
  vec_ranges = [i for i, p in enumerate(prog) if p[0] is Ops.RANGE and i not in ended]
  ndim = len(specials) + len(vec_ranges)
  special_pos = {i: n for n, i in enumerate(specials + vec_ranges)}
  var_pos = {p[3].name: n for n, p in enumerate(sorted([p for p in prog if p[0] is Ops.PARAM and p[3].addrspace is AddrSpace.ALU],
                                                       key=lambda p: p[3].name))}
  values: list[Any] = [None] * len(prog)
  loop_stack: dict[int, int] = {}   # RANGE index -> END index
  for i, (op, _, src, _) in enumerate(prog):
    if op is Ops.END: loop_stack[next(s for s in src[1:] if prog[s][0] is Ops.RANGE)] = i
  # values not needed anymore are dropped right away (big grid-shaped arrays), except around loops, which re-read them
  depth, in_loop = 0, []
  for i, p in enumerate(prog):
    if p[0] is Ops.RANGE and i in loop_stack: depth += 1
    in_loop.append(depth > 0)
    if p[0] is Ops.END: depth -= 1
  last_use: dict[int, int] = {}
  for i, p in enumerate(prog):
    for s_ in p[2]: last_use[s_] = i
  free_after: dict[int, list[int]] = {}
  for v, i in last_use.items():
    if not in_loop[i] and not in_loop[v] and prog[v][0] not in (Ops.PARAM, Ops.BUFFER, Ops.AFTER, Ops.INDEX): free_after.setdefault(i, []).append(v)
  pc = 0
  n = len(prog)
  while pc < n:
    op, dt, src, arg = prog[pc]
    if op is Ops.PARAM:
      if arg.addrspace is AddrSpace.ALU: values[pc] = np.asarray(vals[var_pos[arg.name]], dtype=_compute_np(dt))[()]
      else: values[pc] = ("global", np.frombuffer(bufs[arg.slot], dtype=_to_np_storage(dt.scalar()), count=arg.size or 1), dt)
    elif op is Ops.BUFFER: values[pc] = ("reg", [None] * (arg.size or 1), dt)
    elif op is Ops.AFTER: values[pc] = values[src[0]]
    elif op is Ops.CONST: values[pc] = np.asarray(arg, dtype=_compute_np(dt))[()]
    elif op is Ops.SPECIAL:
      values[pc] = np.arange(int(values[src[0]]), dtype=np.int64 if dt.scalar() == dtypes.int64 else np.int32).reshape(  # size: computed
        [-1 if d == special_pos[pc] else 1 for d in range(ndim)])
    elif op is Ops.INDEX: values[pc] = (values[src[0]], values[src[1]], values[src[2]] if len(src) > 2 else None)
    elif op is Ops.LOAD:
      (kind, mem, mdt), idx, gate = values[src[0]]
      if kind == "reg": values[pc] = mem[int(idx)]
      else:
        if CHECK_OOB: _check_oob(name, prog, src[0], mdt, len(mem), idx, gate)
        if gate is not None:
          safe = np.where(gate, idx, 0)
          raw = mem[safe]
        else: raw = mem[idx]
        v = _from_storage(raw, mdt)
        values[pc] = np.where(gate, v, np.zeros((), dtype=v.dtype)) if gate is not None else v
    elif op is Ops.STORE:
      (kind, mem, mdt), idx, gate = values[src[0]]
      val = values[src[1]]
      if kind == "reg": mem[int(idx)] = val
      else:
        if CHECK_OOB: _check_oob(name, prog, src[0], mdt, len(mem), idx, gate)
        shape = np.broadcast_shapes(np.shape(idx), np.shape(val), *( [np.shape(gate)] if gate is not None else []))
        bidx, bval = np.broadcast_to(idx, shape), np.broadcast_to(_to_storage(val, mdt), shape)
        if gate is not None:
          g = np.broadcast_to(gate, shape)
          bidx, bval = bidx[g], bval[g]
        mem[bidx.ravel()] = bval.ravel()
    elif op is Ops.RANGE and pc in special_pos:
      values[pc] = np.arange(int(values[src[0]]), dtype=_compute_np(dt)).reshape([-1 if d == special_pos[pc] else 1 for d in range(ndim)])
    elif op is Ops.REDUCE:
      axes = tuple(special_pos[r] for r in src[1:])
      x = np.asarray(values[src[0]])
      x = x.reshape(x.shape + (1,) * (ndim - x.ndim)) if x.ndim < ndim else x
      sizes = {special_pos[r]: np.shape(values[r])[special_pos[r]] for r in src[1:]}  # each range is an arange along its axis
      full = tuple(sizes.get(d, x.shape[d]) for d in range(ndim))
      x = np.broadcast_to(x, full)
      red = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum}[arg]
      with np.errstate(all="ignore"): r = red.reduce(x, axis=axes, keepdims=True, dtype=x.dtype) if x.size else \
        np.full([1 if d in axes else x.shape[d] for d in range(ndim)], identity_element(arg, dt.scalar()), dtype=x.dtype)
      values[pc] = _round_to(r, dt.scalar()) if dt.scalar() in (dtypes.bfloat16, *dtypes.fp8s) else r
    elif op is Ops.RANGE:
      end = values[src[0]]
      if pc not in loop_stack: raise RuntimeError("RANGE without END")
      if int(end) <= 0:
        pc = loop_stack[pc] + 1
        continue
      values[pc] = np.asarray(0, dtype=_compute_np(dt))[()]
    elif op is Ops.END:
      r = next(s for s in src[1:] if prog[s][0] is Ops.RANGE)
      nxt = values[r] + 1
      if nxt < values[prog[r][2][0]]:
        values[r] = np.asarray(nxt, dtype=_compute_np(prog[r][1]))[()]
        pc = r + 1
        continue
    elif op is Ops.CAST: values[pc] = _cast(values[src[0]], prog[src[0]][1], dt)
    elif op is Ops.BITCAST: values[pc] = _bitcast(values[src[0]], prog[src[0]][1], dt)
    elif op in GroupOp.ALU: values[pc] = _alu(op, dt, [values[s] for s in src], prog[src[0]][1])
    elif op in {Ops.SINK, Ops.GROUP, Ops.NOOP, Ops.BARRIER}: pass
    else: raise NotImplementedError(f"PYTHON can't run {op}")
    for v in free_after.get(pc, ()): values[v] = None
    pc += 1

def _from_storage(raw: np.ndarray, dt: DType) -> np.ndarray:
  if dt.scalar() == dtypes.bfloat16: return _bf16_to_f32(raw)
  if dt.scalar() in dtypes.fp8s: return _fp8_to_f32(raw, dt.scalar())
  return raw
def _to_storage(val: Any, dt: DType) -> np.ndarray:
  if dt.scalar() == dtypes.bfloat16: return _f32_to_bf16(val)
  if dt.scalar() in dtypes.fp8s: return _f32_to_fp8(val, dt.scalar())
  return np.asarray(val).astype(_to_np_storage(dt.scalar()), copy=False)

class PythonAllocator(LRUAllocator):
  def _alloc(self, size: int, options: Any = None) -> memoryview: return memoryview(bytearray(size))
  def _free(self, opaque: Any, options: Any = None) -> None: pass
  def _offset(self, buf: memoryview, size: int, offset: int) -> memoryview: return buf[offset:offset+size]
  def _as_buffer(self, src: memoryview) -> memoryview: return src
  def _copyin(self, dest: memoryview, src: memoryview) -> None: dest[:] = src.cast("B") if src.format != "B" else src
  def _copyout(self, dest: memoryview, src: memoryview) -> None: dest[:] = src

class PythonDevice(Compiled):
  # features the conformance kit skips here, with the reason
  unsupported = {"large_buffers": "the numpy interpreter materialises grid-sized index arrays: a 1 GiB kernel needs ~10 GiB of host memory"}
  def __init__(self, device: str):
    super().__init__(device, PythonAllocator(), [PythonRenderer], PythonCompiler(), PythonProgram)

__all__ = ["PythonDevice", "PythonRenderer", "PythonProgram"]

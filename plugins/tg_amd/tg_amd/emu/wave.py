"""Execute decoded gfx11 instructions on a wave's state: each instruction is compiled once into a closure with its operands
pre-resolved, and a closure runs the instruction for all lanes at once (numpy), under EXEC."""
from __future__ import annotations
import dataclasses
import struct
from dataclasses import dataclass
from typing import Callable
import numpy as np
from tg_amd.emu import salu, valu
from tg_amd.emu.decoder import Inst
from tg_amd.emu.errors import AMDEmuError, AMDEmuMemoryFault, AMDEmuUnsupportedError
from tg_amd.emu.memory import Memory

M32 = 0xffffffff
VCC, NULL, M0, EXEC, SCC_SRC, VCCZ, EXECZ = 106, 124, 125, 126, 253, 251, 252
END, BARRIER = -1, -2
F32_CONST = {240: 0.5, 241: -0.5, 242: 1.0, 243: -1.0, 244: 2.0, 245: -2.0, 246: 4.0, 247: -4.0}
INV_2PI = {"f32": 0x3e22f983, "f16": 0x3118, "f64": 0x3fc45f306dc9c882}

class Wave:
  """One wavefront's architectural state. s: the 256 scalar operand codes (SGPRs, VCC, M0, EXEC and the inline constants'
  values, so a read is one list index); v: VGPRs as (registers, lanes) uint32."""
  __slots__ = ("s", "v", "scc", "execmask", "exec_full", "lanes", "lds", "scratch", "mem", "code_base", "mode")
  def __init__(self, lanes: int, nvgpr: int, mem: Memory, lds: np.ndarray, scratch: np.ndarray, code_base: int):
    self.s = [0] * 256
    for c in range(129, 193): self.s[c] = c - 128
    for c in range(193, 209): self.s[c] = (192 - c) & M32
    for c, f in F32_CONST.items(): self.s[c] = struct.unpack("<I", struct.pack("<f", f))[0]
    self.s[248] = INV_2PI["f32"]
    self.v = np.zeros((max(nvgpr, 1), lanes), np.uint32)
    self.scc, self.lanes, self.lds, self.scratch, self.mem, self.code_base = 0, lanes, lds, scratch, mem, code_base
    self.execmask = np.zeros(lanes, bool)
    self.exec_full = False  # every lane active: writers can assign whole rows
    self.mode = 0

  def set_exec(self, value: int) -> None:
    self.s[EXEC] = value & M32; self.s[EXEC + 1] = value >> 32 & M32 if self.lanes == 64 else self.s[EXEC + 1]
    e = self.exec()
    self.execmask = mask_of(e, self.lanes)
    self.exec_full = e == (1 << self.lanes) - 1
  def exec(self) -> int: return self.s[EXEC] | (self.s[EXEC + 1] << 32 if self.lanes == 64 else 0)
  def vcc(self) -> int: return self.s[VCC] | (self.s[VCC + 1] << 32 if self.lanes == 64 else 0)

_LANE_BITS = {n: np.uint64(1) << np.arange(n, dtype=np.uint64) for n in (32, 64)}
_MASKS: dict[tuple[int, int], np.ndarray] = {}
def mask_of(value: int, lanes: int) -> np.ndarray:
  m = _MASKS.get((value, lanes))
  if m is None:
    m = (np.uint64(value) & _LANE_BITS[lanes]) != 0
    if len(_MASKS) < 4096: _MASKS[(value, lanes)] = m
  return m
def bits_of(mask: np.ndarray) -> int: return int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little")

Exec = Callable[[Wave], int | None]

def _wide(x: np.ndarray, shape: tuple[int]) -> np.ndarray:
  """x as one value per lane (a broadcast scalar operand becomes a full row); cheaper than np.broadcast_to for the common case."""
  return x if x.shape == shape else np.full(shape, x)

@dataclass
class Program:
  """A kernel's instructions compiled to closures; `index` maps a byte offset to its instruction's position."""
  insts: list[Inst]
  fns: list[Exec]
  index: dict[int, int]
  gfx9: bool = False  # GCN-family semantics: no true16 halves in VOP1/2/C, 16-bit results zero the high half, v_cmpx also writes its SGPR

# gfx9 mnemonics -> the gfx11 mnemonic with the same semantics (the executor speaks gfx11)
GFX9_ALIASES = {
  **{f"s_load_dword{k}": f"s_load_b{b}" for k, b in (("", 32), ("x2", 64), ("x4", 128), ("x8", 256), ("x16", 512))},
  **{f"{seg}_load_{k}": f"{seg}_load_{v}" for seg in ("global", "flat", "scratch") for k, v in (("dword", "b32"), ("dwordx2", "b64"),
     ("dwordx3", "b96"), ("dwordx4", "b128"), ("ubyte", "u8"), ("sbyte", "i8"), ("ushort", "u16"), ("sshort", "i16"),
     ("short_d16", "d16_b16"), ("short_d16_hi", "d16_hi_b16"), ("ubyte_d16", "d16_u8"), ("ubyte_d16_hi", "d16_hi_u8"))},
  **{f"{seg}_store_{k}": f"{seg}_store_{v}" for seg in ("global", "flat", "scratch") for k, v in (("dword", "b32"), ("dwordx2", "b64"),
     ("dwordx3", "b96"), ("dwordx4", "b128"), ("byte", "b8"), ("short", "b16"), ("short_d16_hi", "d16_hi_b16"), ("byte_d16_hi", "d16_hi_b8"))},
  **{f"ds_read_{k}": f"ds_load_{k}" for k in ("b32", "b64", "b96", "b128", "u8", "i8", "u16", "i16")},
  **{f"ds_write_{k}": f"ds_store_{k}" for k in ("b32", "b64", "b96", "b128", "b8", "b16")},
  "ds_read2_b32": "ds_load_2addr_b32", "ds_read2_b64": "ds_load_2addr_b64", "ds_write2_b32": "ds_store_2addr_b32", "ds_write2_b64": "ds_store_2addr_b64",
  "ds_read2st64_b32": "ds_load_2addr_stride64_b32", "ds_write2st64_b32": "ds_store_2addr_stride64_b32",
  **{f"s_{a}n2_{t}": f"s_{a}_not1_{t}" for a in ("and", "or") for t in ("b32", "b64", "saveexec_b64", "saveexec_b32")},
  "s_ff1_i32_b32": "s_ctz_i32_b32", "s_ff1_i32_b64": "s_ctz_i32_b64", "s_flbit_i32_b32": "s_clz_i32_u32", "s_flbit_i32_b64": "s_clz_i32_u64",
  "s_flbit_i32": "s_cls_i32",
  "s_flbit_i32_i64": "s_cls_i32_i64",
  "v_add_u32": "v_add_nc_u32", "v_sub_u32": "v_sub_nc_u32", "v_subrev_u32": "v_subrev_nc_u32", "v_add_u16": "v_add_nc_u16",
  "v_sub_u16": "v_sub_nc_u16", "v_subrev_u16": "v_subrev_nc_u16", "v_addc_co_u32": "v_add_co_ci_u32", "v_subb_co_u32": "v_sub_co_ci_u32",
  "v_subbrev_co_u32": "v_subrev_co_ci_u32", "v_ffbh_u32": "v_clz_i32_u32", "v_ffbl_b32": "v_ctz_i32_b32", "v_ffbh_i32": "v_cls_i32",
  **{f"{seg}_atomic_{k}{x}": f"{seg}_atomic_{v}_{t}{w}" for seg in ("global", "flat") for x, w in (("", "32"), ("_x2", "64"))
     for k, v, t in (("swap", "swap", "b"), ("cmpswap", "cmpswap", "b"), ("add", "add", "u"), ("sub", "sub", "u"), ("smin", "min", "i"),
                     ("umin", "min", "u"), ("smax", "max", "i"), ("umax", "max", "u"), ("and", "and", "b"), ("or", "or", "b"), ("xor", "xor", "b"))},
  "v_cvt_pkrtz_f16_f32": "v_cvt_pk_rtz_f16_f32", "v_mul_lo_u16": "v_mul_lo_u16", "v_mad_u32_u16": "v_mad_u32_u16"}

def compile_program(insts: list[Inst], lanes: int, gfx9: bool = False) -> Program:
  index = {inst.pc: i for i, inst in enumerate(insts)}
  prog = Program(insts, [], index, gfx9)
  if gfx9: insts = [dataclasses.replace(i, name=GFX9_ALIASES.get(i.name, i.name)) if i.name else i for i in insts]
  prog.fns = [_compile(inst, prog, lanes) for inst in insts]
  return prog

def _unsupported(inst: Inst, why: str = "") -> Exec:
  what = f"{inst.enc} instruction {inst.name or f'opcode {inst.op}'}" + (f" ({why})" if why else "")
  def fn(w: Wave) -> None: raise AMDEmuUnsupportedError(what, inst.pc, inst.words)
  return fn

class _Unsupported(Exception):
  pass

def _compile(inst: Inst, prog: Program, lanes: int) -> Exec:
  if inst.name is None: return _unsupported(inst, "opcode not defined for gfx11")
  try:
    builder = _BUILDERS.get(inst.enc)
    if builder is None: return _unsupported(inst, "encoding not executed")
    return builder(inst, prog, lanes)
  except _Unsupported as e:
    return _unsupported(inst, str(e))

# ---------------------------------------------------------------- scalar operands
def _s_const(inst: Inst, code: int, bits: int) -> int | None:
  """The value of a constant operand code for a scalar op of `bits`, or None if the code names a register."""
  if 128 <= code <= 208: v = code - 128 if code <= 192 else 192 - code
  elif code in F32_CONST or code == 248:
    if bits == 64: return struct.unpack("<Q", struct.pack("<d", F32_CONST[code]))[0] if code != 248 else INV_2PI["f64"]
    return struct.unpack("<I", struct.pack("<f", F32_CONST[code]))[0] if code != 248 else INV_2PI["f32"]
  elif code == 255:
    assert inst.literal is not None
    if bits == 64 and inst.literal >> 31: raise _Unsupported("64-bit operand from a literal with bit 31 set (zero vs sign extension)")
    return inst.literal
  else: return None
  return v & ((1 << bits) - 1)

def sread(inst: Inst, code: int, bits: int = 32) -> Callable[[Wave], int]:
  c = _s_const(inst, code, bits)
  if c is not None: return lambda w: c
  if code == SCC_SRC: return lambda w: w.scc
  if code == VCCZ: return lambda w: int(w.vcc() == 0)
  if code == EXECZ: return lambda w: int(w.exec() == 0)
  if code > 127: raise _Unsupported(f"scalar operand code {code}")
  if bits == 64: return lambda w: w.s[code] | w.s[code + 1] << 32
  return lambda w: w.s[code]

def swrite(code: int, bits: int = 32) -> Callable[[Wave, int], None]:
  if code == NULL: return lambda w, v: None
  if code == EXEC: return lambda w, v: w.set_exec(v if bits == 64 else v & M32 | w.s[EXEC + 1] << 32)
  if code == EXEC + 1: return lambda w, v: w.set_exec(w.s[EXEC] | (v & M32) << 32)
  if code > 127: raise _Unsupported(f"scalar destination code {code}")
  if bits == 64:
    def wr64(w: Wave, v: int) -> None: w.s[code] = v & M32; w.s[code + 1] = v >> 32 & M32
    return wr64
  def wr(w: Wave, v: int) -> None: w.s[code] = v & M32
  return wr

def _branch_target(inst: Inst, prog: Program) -> int:
  target = inst.pc + 4 + (inst.f["simm16"] - (1 << 16) if inst.f["simm16"] & 0x8000 else inst.f["simm16"]) * 4
  if target not in prog.index: raise _Unsupported(f"branch to 0x{target:x}, which is not an instruction of this kernel")
  return prog.index[target]

# ---------------------------------------------------------------- SALU / SOPP / SMEM
def _salu(inst: Inst, prog: Program, lanes: int) -> Exec:
  name, f = inst.name, inst.f
  assert name is not None
  if name.endswith(("_saveexec_b32", "_saveexec_b64", "_wrexec_b32", "_wrexec_b64")):
    kind, bits = name[2:].rsplit("_", 2)[0], int(name[-2:])
    fn = salu.SAVEEXEC.get(kind)
    if fn is None: raise _Unsupported("saveexec variant")
    rd, wd, wrexec, mask = sread(inst, f["ssrc0"], bits), swrite(f["sdst"], bits), "wrexec" in name, (1 << bits) - 1
    def saveexec(w: Wave) -> None:
      old = w.exec(); new = fn(rd(w), old) & mask
      w.set_exec(new); w.scc = int(new != 0); wd(w, new if wrexec else old)
    return saveexec
  if name == "s_getpc_b64":
    wd = swrite(f["sdst"], 64); nxt = inst.pc + inst.size
    return lambda w: wd(w, w.code_base + nxt)
  if name in ("s_setpc_b64", "s_swappc_b64"):
    rd = sread(inst, f["ssrc0"], 64); wd = swrite(f["sdst"], 64); nxt = inst.pc + inst.size
    def setpc(w: Wave) -> int:
      to = rd(w) - w.code_base
      if name == "s_swappc_b64": wd(w, w.code_base + nxt)
      if to not in prog.index: raise AMDEmuMemoryFault(f"s_setpc to 0x{to + w.code_base:x}, which is no instruction of this kernel")
      return prog.index[to]
    return setpc
  if name in ("s_bitset0_b32", "s_bitset1_b32", "s_bitset0_b64", "s_bitset1_b64"):
    bits = int(name[-2:]); rd = sread(inst, f["ssrc0"]); old = sread(inst, f["sdst"], bits); wd = swrite(f["sdst"], bits); one = name[8] == "1"
    return lambda w: wd(w, old(w) | 1 << (rd(w) & (bits - 1)) if one else old(w) & ~(1 << (rd(w) & (bits - 1))))
  if name in ("s_version", "s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_expcnt", "s_waitcnt_lgkmcnt"): return lambda w: None
  spec = salu.SOP.get(name)
  if spec is None: raise _Unsupported("scalar op not implemented")
  dbits, sbits, fn = spec
  if inst.enc == "SOPK":
    imm = f["simm16"]
    a = sread(inst, f["sdst"], 32); b: Callable[[Wave], int] = lambda w: imm
  else:
    a = sread(inst, f["ssrc0"], sbits)
    b = sread(inst, f["ssrc1"], sbits if name not in ("s_lshl_b64", "s_lshr_b64", "s_ashr_i64", "s_bfe_u64", "s_bfe_i64") else 32) \
      if inst.enc in ("SOP2", "SOPC") else (lambda w: 0)
  wd = swrite(f["sdst"], dbits) if dbits else None
  def op(w: Wave) -> None:
    r, scc = fn(a(w), b(w), w.scc)
    if r is not None and wd is not None: wd(w, r)
    if scc is not None: w.scc = scc
  return op

_NOPS = {"s_nop", "s_waitcnt", "s_delay_alu", "s_clause", "s_sleep", "s_waitcnt_depctr", "s_setprio", "s_inst_prefetch", "s_code_end",
         "s_ttracedata", "s_icache_inv", "s_wait_idle", "s_set_inst_prefetch_distance", "s_sendmsg", "s_sendmsghalt", "s_barrier_wait"}
def _sopp(inst: Inst, prog: Program, lanes: int) -> Exec:
  name = inst.name
  if name in _NOPS:
    if name == "s_sendmsg" and inst.f["simm16"] not in (3,):  # MSG_DEALLOC_VGPRS is the only message a compute kernel sends
      raise _Unsupported(f"s_sendmsg {inst.f['simm16']}")
    return lambda w: None
  if name == "s_endpgm": return lambda w: END
  if name == "s_barrier": return lambda w: BARRIER
  if name == "s_denorm_mode":
    if inst.f["simm16"] & 0xf != 0xf: raise _Unsupported("denormal flushing (s_denorm_mode without preserve) is not modelled")
    return lambda w: None
  if name == "s_round_mode":
    if inst.f["simm16"] & 0xf: raise _Unsupported("rounding modes other than nearest-even are not modelled")
    return lambda w: None
  if name.startswith(("s_branch", "s_cbranch")):
    t = _branch_target(inst, prog)
    cond: Callable[[Wave], bool] = {"s_branch": lambda w: True, "s_cbranch_scc0": lambda w: w.scc == 0, "s_cbranch_scc1": lambda w: w.scc == 1,
      "s_cbranch_vccz": lambda w: w.vcc() == 0, "s_cbranch_vccnz": lambda w: w.vcc() != 0, "s_cbranch_execz": lambda w: w.exec() == 0,
      "s_cbranch_execnz": lambda w: w.exec() != 0}.get(name)  # type: ignore[assignment]
    if cond is None: raise _Unsupported("branch kind")
    return lambda w: t if cond(w) else None
  raise _Unsupported("program-control op not implemented")

def _smem(inst: Inst, prog: Program, lanes: int) -> Exec:
  name, f = inst.name, inst.f
  if name in ("s_dcache_inv", "s_gl1_inv", "s_icache_inv"): return lambda w: None
  if name is None or not name.startswith("s_load_b"): raise _Unsupported("scalar memory op not implemented")
  n = int(name[8:]) // 32
  base, soff, off, d = sread(inst, f["sbase"] * 2, 64), (sread(inst, f["soffset"]) if f["soffset"] != NULL else (lambda w: 0)), f["offset"], f["sdata"]
  if d + n > 106: raise _Unsupported("s_load into special registers")
  def load(w: Wave) -> None:
    addr = (base(w) + off + soff(w)) & ~3
    w.s[d:d + n] = struct.unpack(f"<{n}I", w.mem.read(addr, 4 * n))
  return load

# ---------------------------------------------------------------- vector operands
_FLOAT_BITS = {"f16": np.float16, "f32": np.float32, "f64": np.float64}
def _inline_bits(code: int, ty: str) -> int | None:
  bits = valu.BITS[ty]
  if 128 <= code <= 208: return (code - 128 if code <= 192 else 192 - code) & ((1 << bits) - 1)
  if code in F32_CONST:
    ft = {16: np.float16, 32: np.float32, 64: np.float64}[bits]
    return int(np.array(F32_CONST[code], ft).view({16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]))
  if code == 248: return INV_2PI[{16: "f16", 32: "f32", 64: "f64"}[bits]]
  return None

def vread(inst: Inst, code: int, ty: str, absm: bool = False, neg: bool = False, hi: bool = False) -> Callable[[Wave], np.ndarray]:
  """A reader for operand `code` as numpy values of `ty` (VGPR rows, or a broadcast scalar)."""
  dt, bits = valu.DT[ty], valu.BITS[ty]
  isf = ty in _FLOAT_BITS
  if (absm or neg) and not isf: raise _Unsupported("abs/neg modifier on an integer operand")
  rd: Callable[[Wave], np.ndarray]
  if code >= 256:
    r = code - 256
    if bits == 32: rd = lambda w: w.v[r].view(dt)
    elif bits == 16: rd = lambda w: w.v[r].view(np.uint16)[int(hi)::2].view(dt)
    elif bits == 64: rd = lambda w: np.ascontiguousarray(w.v[r:r + 2].T).view(dt).reshape(-1)  # lo, hi dwords side by side = one 64-bit value
    else: raise _Unsupported(f"{bits}-bit vector operand")
  else:
    c = _inline_bits(code, ty)
    if c is None and code == 255:
      assert inst.literal is not None
      c = inst.literal << 32 if ty == "f64" else inst.literal & ((1 << bits) - 1)
      if bits == 64 and ty != "f64" and inst.literal >> 31: raise _Unsupported("64-bit integer operand from a literal with bit 31 set")
    if c is not None:
      val = np.array(c, {16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]).view(dt)
      if absm: val = np.abs(val)
      if neg: val = -val
      return lambda w: val
    s = sread(inst, code, 64 if bits == 64 else 32)
    ut = {16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]
    # numpy scalars (cheaper to make than 0-d arrays) of the register's bits, reinterpreted as the operand type
    m = (1 << bits) - 1
    if hi and bits == 16: rd = lambda w: ut(s(w) >> 16 & 0xffff).view(dt)
    elif dt is ut: rd = lambda w: ut(s(w) & m)
    else: rd = lambda w: ut(s(w) & m).view(dt)
  if absm and neg: return lambda w: -np.abs(rd(w))
  if absm: return lambda w: np.abs(rd(w))
  if neg: return lambda w: -rd(w)
  return rd

def vwrite(d: int, ty: str, hi: bool = False, clamp: bool = False) -> Callable[[Wave, np.ndarray], None]:
  """A writer of values of `ty` into VGPR d (lanes under EXEC only)."""
  dt, bits = valu.DT[ty], valu.BITS[ty]
  if clamp and ty not in _FLOAT_BITS: raise _Unsupported("integer clamp (saturation)")
  if bits == 32:
    def w32(w: Wave, val: np.ndarray) -> None:
      if clamp: val = np.clip(val, 0, 1)
      if w.exec_full: w.v[d] = np.asarray(val, dt).view(np.uint32)
      else: np.copyto(w.v[d], np.asarray(val, dt).view(np.uint32), where=w.execmask)
    return w32
  if bits == 16:
    def w16(w: Wave, val: np.ndarray) -> None:
      if clamp: val = np.clip(val, 0, 1)
      np.copyto(w.v[d].view(np.uint16)[int(hi)::2], np.asarray(val, dt).view(np.uint16), where=w.execmask)
    return w16
  if bits == 64:
    def w64(w: Wave, val: np.ndarray) -> None:
      if clamp: val = np.clip(val, 0, 1)
      pairs = _wide(np.asarray(val, dt), (w.lanes,)).view(np.uint32).reshape(w.lanes, 2).T  # row 0: low dwords, row 1: high
      if w.exec_full: w.v[d:d + 2] = pairs
      else: np.copyto(w.v[d:d + 2], pairs, where=w.execmask)
    return w64
  raise _Unsupported(f"{bits}-bit vector destination")

def _t16(code: int, ty: str, is_vgpr_field: bool = True) -> tuple[int, bool]:
  """gfx11 VOP1/VOP2/VOPC encodings address 16-bit VGPR halves as v0..v127 = .l, v128..v255 = .h of v0..v127."""
  if valu.BITS[ty] != 16: return code, False
  if code >= 256: return 256 + ((code - 256) & 0x7f), bool((code - 256) & 0x80)
  if not is_vgpr_field: return code, False
  return code & 0x7f, bool(code & 0x80)

# ---------------------------------------------------------------- VALU
def _lane_mask_reader(inst: Inst, code: int, lanes: int) -> Callable[[Wave], np.ndarray]:
  s = sread(inst, code, 64 if lanes == 64 else 32)
  return lambda w: mask_of(s(w), lanes)

def _write_mask(code: int, lanes: int) -> Callable[[Wave, np.ndarray], None]:
  wd = swrite(code, 64 if lanes == 64 else 32)
  return lambda w, m: wd(w, bits_of(m & w.execmask))

_SDWA_FIELD = {0: (0, 8), 1: (8, 8), 2: (16, 8), 3: (24, 8), 4: (0, 16), 5: (16, 16), 6: (0, 32)}  # SEL -> (shift, width)

def _sdwa(inst: Inst, lanes: int) -> tuple[Callable[[int, str], Callable[[Wave], np.ndarray]], Callable[[str], Callable[[Wave, np.ndarray], None]], int]:
  """gfx9 SDWA (VOP1/VOP2/VOPC with src0 = 249): the operand readers, result writer and compare destination its second dword
  selects. A source is the selected byte/word of its register, zero- or sign-extended to 32 bits, then read as the op's type;
  a result's low bits go to the selected byte/word, the rest padded with zeros, sign-extended or preserved (DST_UNUSED)."""
  from tg_amd.emu.decoder import _g9s
  f, sd = inst.f, inst.words[1]
  def bits(hi: int, lo: int) -> int: return sd >> lo & ((1 << (hi - lo + 1)) - 1)
  vopc = inst.enc == "VOPC"
  if not vopc and (bits(13, 13) or bits(15, 14)): raise _Unsupported("SDWA clamp/omod")
  codes = [_g9s(bits(7, 0)) if bits(23, 23) else 256 + bits(7, 0)]
  if inst.enc in ("VOP2", "VOPC"): codes.append(_g9s(f["vsrc1"]) if bits(31, 31) else 256 + f["vsrc1"])
  mods = [(bits(18, 16), bits(19, 19), bits(20, 20), bits(21, 21)), (bits(26, 24), bits(27, 27), bits(28, 28), bits(29, 29))]
  def src(i: int, ty: str) -> Callable[[Wave], np.ndarray]:
    sel, sext, neg, absm = mods[i]
    if sel not in _SDWA_FIELD: raise _Unsupported(f"SDWA src{i}_sel {sel}")
    shift, width = _SDWA_FIELD[sel]
    raw, nb = vread(inst, codes[i], "u32"), valu.BITS[ty]
    if nb not in (16, 32): raise _Unsupported(f"SDWA on a {nb}-bit operand")
    isf = ty in _FLOAT_BITS
    if (neg or absm) and not isf: raise _Unsupported("SDWA abs/neg on an integer operand")
    def rd(w: Wave) -> np.ndarray:
      x = (_wide(raw(w), (lanes,)).astype(np.uint32) >> np.uint32(shift)) & np.uint32((1 << width) - 1) if width < 32 else _wide(raw(w), (lanes,))
      if sext and width < 32: x = (x.astype(np.int64) - ((x.astype(np.int64) >> (width - 1) & 1) << width)).astype(np.uint32)
      v = (x & np.uint32(0xFFFF)).astype(np.uint16).view(valu.DT[ty]) if nb == 16 else np.asarray(x, np.uint32).view(valu.DT[ty])
      if absm: v = np.abs(v)
      if neg: v = -v
      return v
    return rd
  def dst(ty: str) -> Callable[[Wave, np.ndarray], None]:
    d, sel, unused, nb = f["vdst"], bits(10, 8), bits(12, 11), valu.BITS[ty]
    if sel not in _SDWA_FIELD or unused == 3: raise _Unsupported(f"SDWA dst_sel {sel} / dst_unused {unused}")
    if nb not in (16, 32): raise _Unsupported(f"SDWA on a {nb}-bit result")
    shift, width = _SDWA_FIELD[sel]
    fmask = ((1 << width) - 1) << shift
    def wr(w: Wave, val: np.ndarray) -> None:
      r = _wide(np.asarray(val, valu.DT[ty]).view(np.uint16 if nb == 16 else np.uint32), (lanes,)).astype(np.uint64)
      field = (r << np.uint64(shift)) & np.uint64(fmask)
      if unused == 2: new = (w.v[d].astype(np.uint64) & np.uint64(~fmask & M32)) | field
      elif unused == 1:
        sign = (field >> np.uint64(shift + width - 1)) & np.uint64(1)
        new = field | (sign * np.uint64(M32 & ~((1 << (shift + width)) - 1)))
      else: new = field
      np.copyto(w.v[d], new.astype(np.uint32), where=w.execmask)
    return wr
  return src, dst, (_g9s(bits(14, 8)) if bits(15, 15) else VCC) if vopc else VCC

def _vop(inst: Inst, prog: Program, lanes: int) -> Exec:
  name, f, enc = inst.name, inst.f, inst.enc
  assert name is not None
  g9 = prog.gfx9
  if "sdwa_dpp" in f and not (g9 and f["sdwa_dpp"] == 249): raise _Unsupported("DPP operand (src0 = 250)" if f["sdwa_dpp"] == 250 else "SDWA operand on gfx11")
  e3 = enc in ("VOP3", "VOP3SD")
  srcs_codes = [f["src0"]] + ([f["vsrc1"] + 256] if enc in ("VOP2", "VOPC") else [f["src1"], f["src2"]] if e3 else [])
  absb, negb, opsel = f.get("abs", 0), f.get("neg", 0), f.get("opsel", 0)
  if e3 and f["omod"]: raise _Unsupported("output modifier (omod)")
  if g9 and name == "v_lshl_add_u64":
    a64, sh, c64, d64 = vread(inst, f["src0"], "u64"), vread(inst, f["src1"], "u32"), vread(inst, f["src2"], "u64"), vwrite(f["vdst"], "u64")
    return lambda w: d64(w, (a64(w) << (sh(w) & np.uint32(7)).astype(np.uint64)) + c64(w))
  if g9 and name == "v_mov_b64":
    a64, d64 = vread(inst, f["src0"], "u64"), vwrite(f["vdst"], "u64")
    return lambda w: d64(w, a64(w))
  clamp = bool(f.get("clamp", 0))
  def src(i: int, ty: str) -> Callable[[Wave], np.ndarray]:
    if e3: return vread(inst, srcs_codes[i], ty, bool(absb >> i & 1), bool(negb >> i & 1), bool(opsel >> i & 1))
    if g9: return vread(inst, srcs_codes[i], ty)
    code, hi = _t16(srcs_codes[i], ty, is_vgpr_field=False)
    return vread(inst, code, ty, hi=hi)
  def dst(ty: str) -> Callable[[Wave, np.ndarray], None]:
    if g9 and valu.BITS[ty] == 16 and not opsel >> 3 & 1:  # GCN: a 16-bit result zero-extends into the whole register
      wr = vwrite(f["vdst"], "u32", clamp=False)
      dt16 = valu.DT[ty]
      return lambda w, val: wr(w, np.asarray(np.clip(val, 0, 1) if clamp else val, dt16).view(np.uint16).astype(np.uint32))
    if e3: return vwrite(f["vdst"], ty, bool(opsel >> 3 & 1), clamp)
    d, hi = _t16(f["vdst"], ty)
    return vwrite(d, ty, hi)
  cmp_sdst = f["vdst"] if e3 else VCC
  if "sdwa_dpp" in f: src, dst, cmp_sdst = _sdwa(inst, lanes)  # GCN sub-dword addressing: operand and result selects
  # comparisons
  base = name.replace("v_cmpx_", "v_cmp_")
  if base in valu.CMP:
    ty, cmp = valu.CMP[base]
    a, b = src(0, ty), src(1, "u32" if "class" in base else ty)
    if "class" in base: test = lambda w: valu.fp_class(_wide(a(w), (lanes,)), _wide(b(w), (lanes,)))
    else: test = lambda w: _wide(cmp(a(w), b(w)), (lanes,))
    if clamp: raise _Unsupported("clamp on a compare")
    wm = _write_mask(cmp_sdst, lanes)
    if name.startswith("v_cmpx_") and g9:  # GCN's v_cmpx writes its SGPR destination and EXEC
      def cmpx9(w: Wave) -> None:
        m = test(w) & w.execmask
        wm(w, m); w.set_exec(bits_of(m))
      return cmpx9
    if name.startswith("v_cmpx_"): return lambda w: w.set_exec(bits_of(test(w) & w.execmask))
    return lambda w: wm(w, test(w))
  if name == "v_nop": return lambda w: None
  if name == "v_cndmask_b32" or name == "v_cndmask_b16":
    ty = "u32" if name.endswith("32") else "u16"
    if absb or negb: ty = "f32" if ty == "u32" else "f16"
    a, b, d = src(0, ty), src(1, ty), dst(ty)
    m = _lane_mask_reader(inst, f["src2"] if e3 else VCC, lanes)
    return lambda w: d(w, np.where(m(w), b(w), a(w)))
  if name in ("v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32"):
    a, b, d = src(0, "u32"), src(1, "u32"), dst("u32")
    cin = (_lane_mask_reader(inst, f["src2"] if e3 else VCC, lanes)) if "_ci_" in name else None
    cout = _write_mask(f["sdst"] if e3 else VCC, lanes) if not (e3 and f["sdst"] == NULL) else None  # carry into null: not computed
    sub, rev, m32 = "sub" in name, "subrev" in name, np.uint64(M32)
    def carry(w: Wave) -> None:
      x, y = a(w).astype(np.uint64), b(w)
      if rev: x, y = y.astype(np.uint64), x
      c = cin(w) if cin is not None else False
      # in uint64 a 32-bit sum's carry is bit 32; a difference that borrows wraps past 2**32
      r = x - y - c if sub else x + y + c
      d(w, r.astype(np.uint32))
      if cout is not None: cout(w, _wide(r > m32, (lanes,)))
    return carry
  if name in ("v_mad_u64_u32", "v_mad_i64_i32"):
    sg = name == "v_mad_i64_i32"
    a, b, c = src(0, "i32" if sg else "u32"), src(1, "i32" if sg else "u32"), src(2, "i64" if sg else "u64")
    d, cout = dst("i64" if sg else "u64"), _write_mask(f["sdst"], lanes)
    def mad64(w: Wave) -> None:
      x, y, z = a(w), b(w), c(w)
      if sg:  # a 32x32 product fits in int64; the sum overflows when z and the product share a sign the result lacks
        p = x.astype(np.int64) * y
        r = p + z
        ov = ((p >= 0) == (z >= 0)) & ((r >= 0) != (p >= 0))
      else:
        p = x.astype(np.uint64) * y
        r = p + z
        ov = r < p
      d(w, r); cout(w, _wide(ov, (lanes,)))
    return mad64
  if name in ("v_div_scale_f32", "v_div_scale_f64"): return _div_scale(inst, src, dst, lanes)
  if name in ("v_div_fmas_f32", "v_div_fmas_f64"):
    ty = name[-3:]
    a, b, c, d, vcc = src(0, ty), src(1, ty), src(2, ty), dst(ty), _lane_mask_reader(inst, VCC, lanes)
    big = 64 if ty == "f32" else 128
    def fmas(w: Wave) -> None:
      r = valu.fma(a(w), b(w), c(w))  # unrounded for f32 (a float64): the scaled result below is rounded once
      # the scale undoes v_div_scale's: up when the quotient estimate S2 is >= 2 (biased exponent above the bias), else down
      up = np.frexp(_wide(c(w), (lanes,)))[1] - 1 > 0
      d(w, np.where(vcc(w), r * np.where(up, 2.0 ** big, 2.0 ** -big), r))
    return fmas
  if name in ("v_div_fixup_f32", "v_div_fixup_f64", "v_div_fixup_f16"):
    ty = name[-3:]
    q, den, num, d = src(0, ty), src(1, ty), src(2, ty), dst(ty)
    def fixup(w: Wave) -> None:
      qq, dd, nn = q(w), den(w), num(w)
      with np.errstate(all="ignore"): exact = (nn.astype(np.float64) / dd).astype(valu.DT[ty])
      special = np.isnan(dd) | np.isnan(nn) | (dd == 0) | np.isinf(dd) | np.isinf(nn) | (nn == 0) | np.isnan(qq) | np.isinf(qq)
      sign = np.signbit(dd) ^ np.signbit(nn)
      d(w, np.where(special, exact, np.where(sign, -np.abs(qq), np.abs(qq))))
    return fixup
  if name in ("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32"):  # count of mask bits below each lane (lanes 0-31 / 32-63) plus S1
    a, b, d = src(0, "u32"), src(1, "u32"), dst("u32")
    lane = np.arange(lanes, dtype=np.uint64)
    below = (np.uint64(1) << lane) - np.uint64(1)
    part = (below >> np.uint64(32)) if name.endswith("hi_u32_b32") else (below & np.uint64(M32))
    return lambda w: d(w, np.bitwise_count(part & a(w).astype(np.uint64)).astype(np.uint32) + b(w))
  if name == "v_readfirstlane_b32":
    a = src(0, "u32"); wd = swrite(f["vdst"])
    def rfl(w: Wave) -> None:
      act = np.flatnonzero(w.execmask)
      wd(w, int(_wide(a(w), (lanes,))[act[0] if len(act) else 0]))
    return rfl
  if name == "v_readlane_b32":
    a, lane, wd = src(0, "u32"), sread(inst, f["src1"]), swrite(f["vdst"])
    return lambda w: wd(w, int(_wide(a(w), (lanes,))[lane(w) % lanes]))
  if name == "v_writelane_b32":
    val, lane, dd = sread(inst, f["src0"]), sread(inst, f["src1"]), f["vdst"]
    def wl(w: Wave) -> None: w.v[dd][lane(w) % lanes] = val(w)
    return wl
  spec = valu.VOP.get(name)
  if spec is None: raise _Unsupported("vector op not implemented")
  dty, stys, fn = spec
  if name.startswith(("v_fmac_", "v_fmaak_", "v_fmamk_")):
    rs = [src(0, stys[0]), src(1, stys[1])]
    if name.startswith("v_fmac_"):
      dcode, hi = (f["vdst"], bool(opsel >> 3 & 1)) if e3 or g9 else _t16(f["vdst"], dty)
      rs.append(vread(inst, dcode + 256, dty, hi=hi))
    else:
      k = vread(inst, 255, dty)
      rs = [rs[0], k, rs[1]] if name.startswith("v_fmamk_") else [rs[0], rs[1], k]
  else:
    rs = [src(i, t) for i, t in enumerate(stys)]
  fast = _fast_vop(inst, fn, dty, stys, e3, prog.gfx9) if not name.startswith(("v_fmac_", "v_fmaak_", "v_fmamk_")) else None
  if fast is not None: return fast
  d = dst(dty)
  if len(rs) == 1:
    r0 = rs[0]; return lambda w: d(w, fn(r0(w)))
  if len(rs) == 2:
    r0, r1 = rs; return lambda w: d(w, fn(r0(w), r1(w)))
  r0, r1, r2 = rs
  return lambda w: d(w, fn(r0(w), r1(w), r2(w)))

def _fast_vop(inst: Inst, fn: Callable, dty: str, stys: tuple[str, ...], e3: bool, gfx9: bool) -> Exec | None:
  """The common VALU shape, inlined: 32-bit operands that are VGPRs or constants, no modifiers, a 32-bit VGPR result.
  Saves the reader/writer calls of the general path; anything else returns None and takes that path."""
  f = inst.f
  if valu.BITS[dty] != 32 or any(valu.BITS[t] != 32 for t in stys): return None
  if e3 and (f["abs"] or f["neg"] or f["clamp"] or f["omod"] or f["opsel"]): return None
  codes = [f["src0"]] + ([f["vsrc1"] + 256] if inst.enc in ("VOP2", "VOPC") else [f["src1"], f["src2"]] if e3 else [])
  codes = codes[:len(stys)]
  ops: list[tuple[int, object]] = []  # (vgpr index, None) or (-1, constant value)
  for c, t in zip(codes, stys):
    if c >= 256: ops.append((c - 256, valu.DT[t])); continue
    bits = _inline_bits(c, t) if c != 255 else (inst.literal if t != "f64" else None)
    if bits is None: return None
    ops.append((-1, np.array(bits, np.uint32).view(valu.DT[t])))
  d, ddt = f["vdst"], valu.DT[dty]
  def arg(k: int) -> Callable[[np.ndarray], np.ndarray]:
    r, x = ops[k]
    return (lambda V: V[r].view(x)) if r >= 0 else (lambda V: x)  # type: ignore[return-value]
  def put(w: Wave, res: np.ndarray) -> None:
    bits = np.asarray(res, ddt).view(np.uint32)
    if w.exec_full: w.v[d] = bits
    else: np.copyto(w.v[d], bits, where=w.execmask)
  if len(ops) == 1:
    (r0, x0), = ops
    if r0 >= 0: return lambda w: put(w, fn(w.v[r0].view(x0)))
    return lambda w: put(w, fn(x0))
  if len(ops) == 2:
    (r0, x0), (r1, x1) = ops
    if r0 >= 0 and r1 >= 0: return lambda w: put(w, fn(w.v[r0].view(x0), w.v[r1].view(x1)))
    if r0 < 0 and r1 >= 0: return lambda w: put(w, fn(x0, w.v[r1].view(x1)))
  a0, a1, a2 = (arg(k) for k in range(3)) if len(ops) == 3 else (arg(0), arg(1), None)
  if a2 is None: return lambda w: put(w, fn(a0(w.v), a1(w.v)))
  return lambda w: put(w, fn(a0(w.v), a1(w.v), a2(w.v)))

def _div_scale(inst: Inst, src, dst, lanes: int) -> Exec:
  ty = inst.name[-3:]
  s0, s1, s2, d, cout = src(0, ty), src(1, ty), src(2, ty), dst(ty), _write_mask(inst.f["sdst"], lanes)
  big, mant, emax = (64, 23, 254) if ty == "f32" else (128, 52, 2046)
  tiny = np.finfo(valu.DT[ty]).tiny
  ebits, ut = (23, np.uint32) if ty == "f32" else (52, np.uint64)
  emask = 0xff if ty == "f32" else 0x7ff
  def biased_exp(x: np.ndarray) -> np.ndarray: return (np.asarray(x).view(ut) >> ut(ebits) & ut(emask)).astype(np.int32)
  def scale(w: Wave) -> None:
    a0, den0, num0 = s0(w), s1(w), s2(w)
    en, ed = biased_exp(num0), biased_exp(den0)
    # the common case: no operand near a range limit, so no scaling (D = S0, VCC = 0); the ISA's cases below only widen it
    if not ((en <= mant) | (ed <= 0) | (ed >= emax - 1) | (en - ed >= (96 if ty == "f32" else 768)) | (en - ed <= -(emax // 2 - 2))).any():
      d(w, a0); cout(w, np.zeros(lanes, bool)); return
    a, den, num = (_wide(x, (lanes,)).astype(np.float64) for x in (a0, den0, num0))
    e = lambda x: np.frexp(x)[1] - 1 + 127 if ty == "f32" else np.frexp(x)[1] - 1 + 1023  # biased exponent of normals
    with np.errstate(all="ignore"):
      r, vcc = a.copy(), np.zeros(lanes, bool)
      q = num / den
      nan = (num == 0) | (den == 0)
      c1 = ~nan & (e(num) - e(den) >= (96 if ty == "f32" else 768))
      c2 = ~nan & ~c1 & (np.abs(den) < tiny)
      c3 = ~nan & ~c1 & ~c2 & (np.abs(1 / den) < tiny) & (np.abs(q) < tiny)
      c4 = ~nan & ~c1 & ~c2 & ~c3 & (np.abs(1 / den) < tiny)
      c5 = ~nan & ~c1 & ~c2 & ~c3 & ~c4 & (np.abs(q) < tiny)
      c6 = ~nan & ~c1 & ~c2 & ~c3 & ~c4 & ~c5 & (e(num) <= mant)
      up = a * 2.0 ** big
      r = np.where(nan, np.nan, r)
      r = np.where(c1 & (a == den), up, r); vcc |= c1
      r = np.where(c2, up, r)
      r = np.where(c3 & (a == den), up, r); vcc |= c3
      r = np.where(c4, a * 2.0 ** -big, r)
      r = np.where(c5 & (a == num), up, r); vcc |= c5
      r = np.where(c6, up, r)
    d(w, r); cout(w, vcc)
  return scale

def _vop3p(inst: Inst, prog: Program, lanes: int) -> Exec:
  name, f = inst.name, inst.f
  assert name is not None
  codes = (f["src0"], f["src1"], f["src2"])
  if name in ("v_fma_mix_f32", "v_fma_mixlo_f16", "v_fma_mixhi_f16"):
    rs = []
    for i in range(3):
      is16 = bool(f["opsel_hi"] >> i & 1)
      rs.append(vread(inst, codes[i], "f16" if is16 else "f32", bool(f["neg_hi"] >> i & 1), bool(f["neg"] >> i & 1), bool(f["opsel"] >> i & 1)))
    if name == "v_fma_mix_f32": d = vwrite(f["vdst"], "f32", clamp=bool(f["clamp"]))
    else: d = vwrite(f["vdst"], "f16", name.endswith("hi_f16"), bool(f["clamp"]))
    return lambda w: d(w, valu.fma(*(np.asarray(r(w), np.float32) for r in rs)))
  if name in ("v_pk_add_f32", "v_pk_mul_f32", "v_pk_fma_f32", "v_pk_mov_b32"): return _pk_f32(inst, lanes)
  if not name.startswith("v_pk_"): raise _Unsupported("VOP3P op not implemented")
  base = "v_" + name[5:]
  spec = valu.VOP.get(base) or valu.VOP.get(base.replace("_u16", "_nc_u16").replace("_i16", "_nc_i16"))
  if spec is None: raise _Unsupported("packed op not implemented")
  dty, stys, fn = spec
  n = len(stys)
  lo = [vread(inst, codes[i], stys[i], neg=bool(f["neg"] >> i & 1), hi=bool(f["opsel"] >> i & 1)) for i in range(n)]
  hi = [vread(inst, codes[i], stys[i], neg=bool(f["neg_hi"] >> i & 1), hi=bool(f["opsel_hi"] >> i & 1)) for i in range(n)]
  if name.startswith("v_pk_fmac"): raise _Unsupported("v_pk_fmac")
  dlo, dhi = vwrite(f["vdst"], dty, False, bool(f["clamp"])), vwrite(f["vdst"], dty, True, bool(f["clamp"]))
  def pk(w: Wave) -> None:
    a, b = fn(*(r(w) for r in lo)), fn(*(r(w) for r in hi))
    dlo(w, a); dhi(w, b)
  return pk

def _pk_f32(inst: Inst, lanes: int) -> Exec:
  """CDNA's packed f32 ops on register pairs: op_sel[i] / op_sel_hi[i] pick which dword of source i feeds the low / high result."""
  f, name = inst.f, inst.name
  codes = (f["src0"], f["src1"], f["src2"])
  n = {"v_pk_add_f32": 2, "v_pk_mul_f32": 2, "v_pk_fma_f32": 3, "v_pk_mov_b32": 2}[name]
  def half(i: int, sel: int, neg: int) -> Callable[[Wave], np.ndarray]:
    c = codes[i]
    if not (c >= 256 or c < 106): raise _Unsupported("packed-f32 operand that is not a register pair")
    return vread(inst, c + (sel >> i & 1), "u32" if name == "v_pk_mov_b32" else "f32", neg=bool(neg >> i & 1) and name != "v_pk_mov_b32")
  if name == "v_pk_mov_b32":  # D.lo = S0[op_sel[0]], D.hi = S1[op_sel[1]]
    lo, hi = [half(0, f["opsel"], 0)], [half(1, f["opsel"], 0)]
    fn: Callable = lambda a: a
  else:
    lo = [half(i, f["opsel"], f["neg"]) for i in range(n)]
    hi = [half(i, f["opsel_hi"], f["neg_hi"]) for i in range(n)]
    fn = {"v_pk_add_f32": np.add, "v_pk_mul_f32": np.multiply, "v_pk_fma_f32": valu.fma}[name]
  ty = "u32" if name == "v_pk_mov_b32" else "f32"
  dlo, dhi = vwrite(f["vdst"], ty, clamp=bool(f["clamp"])), vwrite(f["vdst"] + 1, ty, clamp=bool(f["clamp"]))
  def pk(w: Wave) -> None:
    a, b = fn(*(r(w) for r in lo)), fn(*(r(w) for r in hi))
    dlo(w, a); dhi(w, b)
  return pk

_VOPD_SPEC = {"v_dual_fmac_f32": "v_fmac_f32", "v_dual_fmaak_f32": "v_fmaak_f32", "v_dual_fmamk_f32": "v_fmamk_f32", "v_dual_mul_f32": "v_mul_f32",
              "v_dual_add_f32": "v_add_f32", "v_dual_sub_f32": "v_sub_f32", "v_dual_subrev_f32": "v_subrev_f32", "v_dual_mul_dx9_zero_f32":
              "v_mul_dx9_zero_f32", "v_dual_mov_b32": "v_mov_b32", "v_dual_cndmask_b32": "v_cndmask_b32", "v_dual_max_f32": "v_max_f32",
              "v_dual_min_f32": "v_min_f32", "v_dual_add_nc_u32": "v_add_nc_u32", "v_dual_lshlrev_b32": "v_lshlrev_b32", "v_dual_and_b32": "v_and_b32"}
def _vopd(inst: Inst, prog: Program, lanes: int) -> Exec:
  f = inst.f
  halves = []
  for nm, s0, s1, d in ((inst.name, f["srcx0"], f["vsrcx1"], f["vdstx"]), (inst.name_y, f["srcy0"], f["vsrcy1"], f["vdsty"])):
    base = _VOPD_SPEC.get(nm or "")
    if base is None: raise _Unsupported(f"dual op {nm}")
    if base == "v_cndmask_b32":
      a, b, m = vread(inst, s0, "u32"), vread(inst, s1 + 256, "u32"), _lane_mask_reader(inst, VCC, lanes)
      halves.append((lambda w, a=a, b=b, m=m: np.where(m(w), b(w), a(w)), vwrite(d, "u32"))); continue
    dty, stys, fn = valu.VOP[base]
    rs = [vread(inst, s0, stys[0])] + ([vread(inst, s1 + 256, stys[1])] if len(stys) > 1 else [])
    if base == "v_fmac_f32": rs.append(vread(inst, d + 256, "f32"))
    elif base == "v_fmaak_f32": rs.append(vread(inst, 255, "f32"))
    elif base == "v_fmamk_f32": rs = [rs[0], vread(inst, 255, "f32"), rs[1]]
    halves.append((lambda w, fn=fn, rs=rs: fn(*(r(w) for r in rs)), vwrite(d, dty)))
  (cx, wx), (cy, wy) = halves
  def dual(w: Wave) -> None:
    x, y = cx(w), cy(w)  # both read before either writes
    wx(w, x); wy(w, y)
  return dual

# ---------------------------------------------------------------- memory
_LOADS = {"b32": (4, None), "b64": (8, None), "b96": (12, None), "b128": (16, None), "u8": (1, np.uint8), "i8": (1, np.int8),
          "u16": (2, np.uint16), "i16": (2, np.int16)}
_STORES = {"b8": 1, "b16": 2, "b32": 4, "b64": 8, "b96": 12, "b128": 16}

_ALL = slice(None)
def _active(w: Wave) -> np.ndarray | slice | None:
  """The lanes a memory instruction touches: every lane (a plain slice, cheaper than fancy indexing), their indices, or None."""
  if w.exec_full: return _ALL
  act = np.flatnonzero(w.execmask)
  return act if len(act) else None

def _to_dwords(raw: np.ndarray, ext: type | None) -> np.ndarray:
  """Loaded bytes (lanes, n) -> dword rows (ndwords, lanes), sub-dword loads zero/sign extended."""
  if ext is None: return raw.view(np.uint32).T
  return raw.view(ext).astype(np.int32 if ext in (np.int8, np.int16) else np.uint32).view(np.uint32).T

def _from_vgprs(w: Wave, r: int, nbytes: int, act: np.ndarray) -> np.ndarray:
  nd = max(1, nbytes // 4)
  data = np.ascontiguousarray(w.v[r:r + nd, act].T).view(np.uint8)
  return data[:, :nbytes]

def _flat(inst: Inst, prog: Program, lanes: int) -> Exec:
  name, f, enc = inst.name, inst.f, inst.enc
  assert name is not None
  kind, _, ty = name.partition("_")[2].partition("_")
  if kind == "atomic": return _atomic(inst, prog, lanes)
  d16 = None
  if ty.startswith("d16_"):  # d16 loads write one 16-bit half of the VGPR and keep the other; d16_hi stores store the high half
    d16, ty = ty[4:].startswith("hi_"), ty[4:].removeprefix("hi_")
    ty = {"b16": "u16"}.get(ty, ty) if kind == "load" else ty
  if kind not in ("load", "store") or (ty not in _LOADS and ty not in _STORES):
    raise _Unsupported("memory op not implemented (atomics are not emulated yet)")
  off, vaddr, saddr = f["offset"], f["addr"], f["saddr"]
  if enc == "SCRATCH":
    sv = sread(inst, saddr) if saddr != NULL else (lambda w: 0)
    use_v = bool(f["sve"])
    def addr_of(w: Wave, act: np.ndarray) -> np.ndarray:
      a = (w.v[vaddr, act].astype(np.int64) if use_v else np.zeros(len(act), np.int64)) + sv(w) + off
      return a
  elif saddr != NULL:  # GLOBAL with an SGPR base: VGPR holds a 32-bit unsigned offset
    sb = sread(inst, saddr, 64)
    def addr_of(w: Wave, act: np.ndarray) -> np.ndarray: return (w.v[vaddr, act].astype(np.uint64) + np.uint64(sb(w) + off & 0xffffffffffffffff))
  else:
    def addr_of(w: Wave, act: np.ndarray) -> np.ndarray:
      return ((w.v[vaddr + 1, act].astype(np.uint64) << np.uint64(32)) | w.v[vaddr, act]) + np.uint64(off & 0xffffffffffffffff)
  scratch = enc == "SCRATCH"
  def gather(w: Wave, a: np.ndarray, act: np.ndarray, n: int) -> np.ndarray:
    if not scratch: return w.mem.gather(a, n)
    if len(a) and (a.min() < 0 or a.max() + n > w.scratch.shape[1]):
      raise AMDEmuMemoryFault(f"scratch access {int(a.min())}..{int(a.max()) + n} outside the {w.scratch.shape[1]}-byte private segment")
    return w.scratch[act[:, None], a[:, None] + np.arange(n)]
  def scatter(w: Wave, a: np.ndarray, act: np.ndarray, data: np.ndarray) -> None:
    if not scratch: return w.mem.scatter(a, data)
    n = data.shape[1]
    if len(a) and (a.min() < 0 or a.max() + n > w.scratch.shape[1]):
      raise AMDEmuMemoryFault(f"scratch access {int(a.min())}..{int(a.max()) + n} outside the {w.scratch.shape[1]}-byte private segment")
    w.scratch[act[:, None], a[:, None] + np.arange(n)] = data
  if kind == "load" and d16 is not None:
    n, ext = _LOADS[ty]; d = f["vdst"]; half = int(d16)
    def load16(w: Wave) -> None:
      act = np.flatnonzero(w.execmask)
      if len(act) == 0: return
      vals = _to_dwords(gather(w, addr_of(w, act), act, n), ext)[0].astype(np.uint16)
      w.v[d].view(np.uint16).reshape(lanes, 2)[act, half] = vals
    return load16
  if kind == "store" and d16:
    n = _STORES[ty]; data = f["data"]
    def store_hi(w: Wave) -> None:
      act = np.flatnonzero(w.execmask)
      if len(act) == 0: return
      hi = (w.v[data, act] >> np.uint32(16)).astype(np.uint16)
      scatter(w, addr_of(w, act), act, np.ascontiguousarray(hi).view(np.uint8).reshape(-1, 2)[:, :n])
    return store_hi
  def active(w: Wave) -> np.ndarray | slice | None:
    act = _active(w)
    return np.arange(lanes) if scratch and act is _ALL else act  # scratch rows are indexed per lane
  if kind == "load":
    n, ext = _LOADS[ty]; d = f["vdst"]
    def load(w: Wave) -> None:
      act = active(w)
      if act is None: return
      rows = _to_dwords(gather(w, addr_of(w, act), act, n), ext)
      w.v[d:d + rows.shape[0], act] = rows
    return load
  n = _STORES[ty]; data = f["data"]
  def store(w: Wave) -> None:
    act = active(w)
    if act is None: return
    scatter(w, addr_of(w, act), act, _from_vgprs(w, data, n, act))
  return store

_ATOMIC_OPS: dict[str, Callable[[int, int, int], int]] = {  # (old, data, bits) -> new, on unsigned integers of `bits`
  "swap": lambda o, d, b: d, "add": lambda o, d, b: o + d, "sub": lambda o, d, b: o - d, "and": lambda o, d, b: o & d, "or": lambda o, d, b: o | d,
  "xor": lambda o, d, b: o ^ d, "min_u": lambda o, d, b: min(o, d), "max_u": lambda o, d, b: max(o, d),
  "min_i": lambda o, d, b: o if _sx(o, b) <= _sx(d, b) else d, "max_i": lambda o, d, b: o if _sx(o, b) >= _sx(d, b) else d,
  "inc_u": lambda o, d, b: 0 if o >= d else o + 1, "dec_u": lambda o, d, b: d if o == 0 or o > d else o - 1}
def _sx(x: int, bits: int) -> int: return x - (1 << bits) if x >> (bits - 1) & 1 else x

def _atomic(inst: Inst, prog: Program, lanes: int) -> Exec:
  """Global/flat atomics, lane by lane in lane order (as one wave's lanes serialise on one address); glc returns the old value."""
  f, name = inst.f, inst.name
  assert name is not None
  if inst.enc == "SCRATCH": raise _Unsupported("scratch atomics")
  op, _, ty = name.split("_atomic_")[1].rpartition("_")
  bits, isf = int(ty[1:]), ty[0] == "f"
  key = op if op in ("swap", "add", "sub", "and", "or", "xor", "cmpswap") else f"{op}_{ty[0]}"
  if isf and (op, bits) not in (("add", 32), ("min", 32), ("max", 32)): raise _Unsupported("float atomic")
  if not isf and key not in _ATOMIC_OPS and key != "cmpswap": raise _Unsupported("atomic op")
  nd, m = bits // 32, (1 << bits) - 1
  vaddr, saddr, off, data, vd, rtn = f["addr"], f["saddr"], f["offset"], f["data"], f["vdst"], bool(f["glc"])
  sb = sread(inst, saddr, 64) if saddr != NULL else None
  fmt = {32: "<I", 64: "<Q"}[bits]
  fop = {"add": lambda o, d: o + d, "min": lambda o, d: min(o, d) if not (np.isnan(o) or np.isnan(d)) else (d if np.isnan(o) else o),
         "max": lambda o, d: max(o, d) if not (np.isnan(o) or np.isnan(d)) else (d if np.isnan(o) else o)}.get(op)
  def atomic(w: Wave) -> None:
    for lane in np.flatnonzero(w.execmask).tolist():
      v = w.v[:, lane]
      addr = (int(v[vaddr]) + sb(w) if sb is not None else int(v[vaddr]) | int(v[vaddr + 1]) << 32) + off
      old = struct.unpack(fmt, w.mem.read(addr, bits // 8))[0]
      val = sum(int(v[data + j]) << (32 * j) for j in range(nd))
      if key == "cmpswap":
        cmp = sum(int(v[data + nd + j]) << (32 * j) for j in range(nd))
        new = val if old == cmp else old
      elif isf:
        o, d = (np.array(x, np.uint32).view(np.float32) for x in (old, val))
        new = int(np.array(fop(o, d), np.float32).view(np.uint32))
      else: new = _ATOMIC_OPS[key](old, val, bits)
      w.mem.write(addr, struct.pack(fmt, new & m))
      if rtn:
        for j in range(nd): w.v[vd + j, lane] = old >> (32 * j) & M32
  return atomic

def _ds(inst: Inst, prog: Program, lanes: int) -> Exec:
  name, f = inst.name, inst.f
  assert name is not None
  if f["gds"]: raise _Unsupported("GDS")
  vaddr, d0, d1, vd = f["addr"], f["data0"], f["data1"], f["vdst"]
  parts = name.split("_")
  def check(w: Wave, a: np.ndarray, n: int) -> None:
    if len(a) and (a.min() < 0 or a.max() + n > len(w.lds)):
      raise AMDEmuMemoryFault(f"LDS access {int(a.min())}..{int(a.max()) + n} outside the workgroup's {len(w.lds)}-byte LDS allocation")
  if parts[1] in ("load", "store") and parts[2] in ("2addr",):
    ty = parts[-1]; n = 4 if ty == "b32" else 8
    stride = 64 * n if "stride64" in parts else n
    o0, o1 = f["offset0"] * stride, f["offset1"] * stride
    if parts[1] == "load":
      def load2(w: Wave) -> None:
        act = np.flatnonzero(w.execmask)
        if len(act) == 0: return
        base = w.v[vaddr, act].astype(np.int64)
        for k, o in enumerate((o0, o1)):
          a = base + o; check(w, a, n)
          w.v[vd + k * n // 4:vd + (k + 1) * n // 4, act] = w.lds[a[:, None] + np.arange(n)].view(np.uint32).T
      return load2
    def store2(w: Wave) -> None:
      act = np.flatnonzero(w.execmask)
      if len(act) == 0: return
      base = w.v[vaddr, act].astype(np.int64)
      for o, r in ((o0, d0), (o1, d1)):
        a = base + o; check(w, a, n)
        w.lds[a[:, None] + np.arange(n)] = _from_vgprs(w, r, n, act)
    return store2
  off = f["offset1"] << 8 | f["offset0"]
  if parts[1] == "load" and len(parts) == 3 and parts[2] in _LOADS:
    n, ext = _LOADS[parts[2]]
    def load(w: Wave) -> None:
      act = _active(w)
      if act is None: return
      a = w.v[vaddr, act].astype(np.int64) + off; check(w, a, n)
      rows = _to_dwords(w.lds[a[:, None] + np.arange(n)], ext)
      w.v[vd:vd + rows.shape[0], act] = rows
    return load
  if parts[1] == "store" and len(parts) == 3 and parts[2] in _STORES:
    n = _STORES[parts[2]]
    def store(w: Wave) -> None:
      act = _active(w)
      if act is None: return
      a = w.v[vaddr, act].astype(np.int64) + off; check(w, a, n)
      w.lds[a[:, None] + np.arange(n)] = _from_vgprs(w, d0, n, act)
    return store
  if name in ("ds_add_u32", "ds_add_rtn_u32", "ds_add_f32", "ds_add_rtn_f32", "ds_max_f32", "ds_min_f32", "ds_max_rtn_f32", "ds_min_rtn_f32"):
    isf, rtn = name.endswith("f32"), "_rtn_" in name
    op = {"add": np.add, "max": valu.fmax, "min": valu.fmin}[parts[1]]
    def atomic(w: Wave) -> None:
      act = np.flatnonzero(w.execmask)
      a = w.v[vaddr, act].astype(np.int64) + off; check(w, a, 4)
      for lane, ad in zip(act.tolist(), a.tolist()):  # lanes one at a time: several lanes may hit one address
        cell = w.lds[ad:ad + 4].view(np.float32 if isf else np.uint32)
        old = cell[0]
        val = w.v[d0, lane:lane + 1].view(np.float32 if isf else np.uint32)[0]
        cell[0] = op(old, val)
        if rtn: w.v[vd, lane] = np.array(old).view(np.uint32)
    return atomic
  raise _Unsupported("LDS op not implemented")

def _mubuf(inst: Inst, prog: Program, lanes: int) -> Exec:
  # caches do not exist in the emulator (every access goes straight to Memory), so invalidating them is a no-op
  if inst.name in ("buffer_gl0_inv", "buffer_gl1_inv", "buffer_wbl2", "buffer_inv", "buffer_wbinvl1", "buffer_wbinvl1_vol"): return lambda w: None
  raise _Unsupported("buffer memory op not implemented")

_BUILDERS: dict[str, Callable[[Inst, Program, int], Exec]] = {
  "SOP1": _salu, "SOP2": _salu, "SOPC": _salu, "SOPK": _salu, "SOPP": _sopp, "SMEM": _smem, "VOP1": _vop, "VOP2": _vop, "VOPC": _vop,
  "VOP3": _vop, "VOP3SD": _vop, "VOP3P": _vop3p, "VOPD": _vopd, "GLOBAL": _flat, "FLAT": _flat, "SCRATCH": _flat, "DS": _ds,
  "MUBUF": _mubuf}

def run_wave(w: Wave, prog: Program, i: int, budget: list[int], limit: int) -> int:
  """Run from instruction i until s_endpgm (returns END) or s_barrier (returns the index to resume at). budget[0] counts this
  dispatch's instructions; past `limit` the kernel is taken to hang (a loop that never exits) and AMDEmuError is raised."""
  fns, n = prog.fns, len(prog.fns)
  count, left = 0, limit - budget[0]
  try:
    while True:
      if i >= n: raise AMDEmuMemoryFault(f"the program counter ran off the end of the kernel (0x{prog.insts[-1].pc + prog.insts[-1].size:x}) without s_endpgm")
      r = fns[i](w)
      count += 1
      if r is None: i += 1
      elif r >= 0:
        i = r
        if count > left: raise AMDEmuError(f"kernel exceeded {limit} wave-instructions (at pc 0x{prog.insts[i].pc:x}): it does not terminate, "
                                           "or pass a larger max_instructions to run_kernel")
      elif r == END: return END
      else: return i + 1
  finally:
    budget[0] += count

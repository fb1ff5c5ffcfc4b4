"""Decode gfx11 (RDNA3) machine code into instructions with their raw fields; the executor (wave.py) gives them meaning.

An own decoder rather than parsing `llvm-objdump-19`: no runtime dependency on a system package, and the fields come straight
from the bits. The opcode names are LLVM's (gfx11_opcodes.py, generated once); the test suite compares this decoder's
instruction boundaries, mnemonics and operands with llvm-objdump-19 on every kernel it compiles.
"""
from __future__ import annotations
import struct
from dataclasses import dataclass, field
from tg_amd.emu import gfx11_opcodes as OPS
from tg_amd.emu.errors import AMDEmuUnsupportedError

LITERAL = 255
# VOP2/VOPD ops that always carry a 32-bit literal constant K after the instruction
_VOP2_K = {"v_fmamk_f32", "v_fmaak_f32", "v_fmamk_f16", "v_fmaak_f16"}
_VOPD_K = {"v_dual_fmamk_f32", "v_dual_fmaak_f32"}

@dataclass(slots=True)
class Inst:
  pc: int  # byte offset in the code object's image
  size: int  # bytes, literal included
  enc: str  # SOP1 SOP2 SOPK SOPC SOPP SMEM VOP1 VOP2 VOPC VOP3 VOP3SD VOP3P VOPD DS FLAT GLOBAL SCRATCH MUBUF
  op: int
  name: str | None  # LLVM's mnemonic (no _e32/_e64 suffix); None for an opcode gfx11 does not define
  words: tuple[int, ...]
  f: dict[str, int] = field(default_factory=dict)  # the encoding's fields, by the ISA manual's names (lower case)
  literal: int | None = None
  name_y: str | None = None  # VOPD: the Y op's mnemonic (name is the X op's)

def _bits(w: int, hi: int, lo: int) -> int: return w >> lo & ((1 << (hi - lo + 1)) - 1)

# VOP3 opcodes whose encoding is VOP3SD (a scalar destination for carry/VCC in bits 14:8 instead of abs/op_sel)
VOP3SD_NAMES = {"v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32",
                "v_div_scale_f32", "v_div_scale_f64", "v_mad_u64_u32", "v_mad_i64_i32"}

def decode_one(code: bytes, pc: int) -> Inst:
  if pc + 4 > len(code): raise AMDEmuUnsupportedError("truncated instruction (code ends mid-word)", pc, ())
  w0, = struct.unpack_from("<I", code, pc)
  def w1() -> int:
    if pc + 8 > len(code): raise AMDEmuUnsupportedError("truncated 64-bit instruction", pc, (w0,))
    return struct.unpack_from("<I", code, pc + 4)[0]
  top7, top6 = w0 >> 25, w0 >> 26
  if top7 == 0b0111111:
    op = _bits(w0, 16, 9); f = {"src0": _bits(w0, 8, 0), "vdst": _bits(w0, 24, 17)}
    return _with_literal(code, pc, Inst(pc, 4, "VOP1", op, OPS.VOP1.get(op), (w0,), f), f["src0"] == LITERAL)
  if top7 == 0b0111110:
    op = _bits(w0, 24, 17); f = {"src0": _bits(w0, 8, 0), "vsrc1": _bits(w0, 16, 9)}
    return _with_literal(code, pc, Inst(pc, 4, "VOPC", op, OPS.VOPC.get(op), (w0,), f), f["src0"] == LITERAL)
  if w0 >> 31 == 0:  # VOP2 (after VOP1/VOPC, which also have bit 31 clear)
    op = _bits(w0, 30, 25)
    f = {"src0": _bits(w0, 8, 0), "vsrc1": _bits(w0, 16, 9), "vdst": _bits(w0, 24, 17)}
    return _with_literal(code, pc, Inst(pc, 4, "VOP2", op, OPS.VOP2.get(op), (w0,), f), f["src0"] == LITERAL or OPS.VOP2.get(op) in _VOP2_K)
  if w0 >> 30 == 0b10:
    if w0 >> 28 == 0b1011:
      top9 = w0 >> 23
      if top9 == 0b101111101:
        op = _bits(w0, 15, 8); f = {"ssrc0": _bits(w0, 7, 0), "sdst": _bits(w0, 22, 16)}
        return _with_literal(code, pc, Inst(pc, 4, "SOP1", op, OPS.SOP1.get(op), (w0,), f), f["ssrc0"] == LITERAL)
      if top9 == 0b101111110:
        op = _bits(w0, 22, 16); f = {"ssrc0": _bits(w0, 7, 0), "ssrc1": _bits(w0, 15, 8)}
        return _with_literal(code, pc, Inst(pc, 4, "SOPC", op, OPS.SOPC.get(op), (w0,), f), LITERAL in (f["ssrc0"], f["ssrc1"]))
      if top9 == 0b101111111:
        op = _bits(w0, 22, 16)
        return Inst(pc, 4, "SOPP", op, OPS.SOPP.get(op), (w0,), {"simm16": _bits(w0, 15, 0)})
      op = _bits(w0, 27, 23); name = OPS.SOPK.get(op)
      return _with_literal(code, pc, Inst(pc, 4, "SOPK", op, name, (w0,), {"sdst": _bits(w0, 22, 16), "simm16": _bits(w0, 15, 0)}),
                           name == "s_setreg_imm32_b32")
    op = _bits(w0, 29, 23); f = {"ssrc0": _bits(w0, 7, 0), "ssrc1": _bits(w0, 15, 8), "sdst": _bits(w0, 22, 16)}
    return _with_literal(code, pc, Inst(pc, 4, "SOP2", op, OPS.SOP2.get(op), (w0,), f), LITERAL in (f["ssrc0"], f["ssrc1"]))
  if top6 == 0b111101:
    w = w1(); op = _bits(w0, 25, 18)
    f = {"sbase": _bits(w0, 5, 0), "sdata": _bits(w0, 12, 6), "dlc": _bits(w0, 13, 13), "glc": _bits(w0, 14, 14),
         "offset": _sext(_bits(w, 20, 0), 21), "soffset": _bits(w, 31, 25)}
    return Inst(pc, 8, "SMEM", op, OPS.SMEM.get(op), (w0, w), f)
  if top6 == 0b110101:
    w = w1(); op = _bits(w0, 25, 16); name = OPS.VOP3.get(op)
    f = {"vdst": _bits(w0, 7, 0), "clamp": _bits(w0, 15, 15), "src0": _bits(w, 8, 0), "src1": _bits(w, 17, 9), "src2": _bits(w, 26, 18),
         "omod": _bits(w, 28, 27), "neg": _bits(w, 31, 29)}
    if name in VOP3SD_NAMES: f["sdst"], enc = _bits(w0, 14, 8), "VOP3SD"
    else: f["abs"], f["opsel"], enc = _bits(w0, 10, 8), _bits(w0, 14, 11), "VOP3"
    return _with_literal(code, pc, Inst(pc, 8, enc, op, name, (w0, w), f), LITERAL in (f["src0"], f["src1"], f["src2"]))
  if w0 >> 24 == 0b11001100:
    w = w1(); op = _bits(w0, 22, 16)
    f = {"vdst": _bits(w0, 7, 0), "neg_hi": _bits(w0, 10, 8), "opsel": _bits(w0, 13, 11), "opsel_hi": _bits(w0, 14, 14) << 2 | _bits(w, 28, 27),
         "clamp": _bits(w0, 15, 15), "src0": _bits(w, 8, 0), "src1": _bits(w, 17, 9), "src2": _bits(w, 26, 18), "neg": _bits(w, 31, 29)}
    return _with_literal(code, pc, Inst(pc, 8, "VOP3P", op, OPS.VOP3P.get(op), (w0, w), f), LITERAL in (f["src0"], f["src1"], f["src2"]))
  if top6 == 0b110010:
    w = w1(); opx, opy = _bits(w0, 25, 22), _bits(w0, 21, 17)
    vdstx = _bits(w, 31, 24)
    f = {"srcx0": _bits(w0, 8, 0), "vsrcx1": _bits(w0, 16, 9), "srcy0": _bits(w, 8, 0), "vsrcy1": _bits(w, 16, 9), "vdstx": vdstx,
         "vdsty": _bits(w, 23, 17) << 1 | (vdstx & 1) ^ 1, "opy": opy}
    inst = Inst(pc, 8, "VOPD", opx, OPS.VOPDX.get(opx), (w0, w), f, name_y=OPS.VOPDY.get(opy))
    return _with_literal(code, pc, inst, LITERAL in (f["srcx0"], f["srcy0"]) or inst.name in _VOPD_K or inst.name_y in _VOPD_K)
  if top6 == 0b110110:
    w = w1(); op = _bits(w0, 25, 18)
    f = {"offset0": _bits(w0, 7, 0), "offset1": _bits(w0, 15, 8), "gds": _bits(w0, 17, 17), "addr": _bits(w, 7, 0), "data0": _bits(w, 15, 8),
         "data1": _bits(w, 23, 16), "vdst": _bits(w, 31, 24)}
    return Inst(pc, 8, "DS", op, OPS.DS.get(op), (w0, w), f)
  if top6 == 0b110111:
    w = w1(); op = _bits(w0, 24, 18); seg = _bits(w0, 17, 16)
    f = {"offset": _sext(_bits(w0, 12, 0), 13), "dlc": _bits(w0, 13, 13), "glc": _bits(w0, 14, 14), "slc": _bits(w0, 15, 15), "seg": seg,
         "addr": _bits(w, 7, 0), "data": _bits(w, 15, 8), "saddr": _bits(w, 22, 16), "sve": _bits(w, 23, 23), "vdst": _bits(w, 31, 24)}
    enc, table = (("FLAT", OPS.FLAT), ("SCRATCH", OPS.SCRATCH), ("GLOBAL", OPS.GLOBAL), ("FLAT?", {}))[seg]
    return Inst(pc, 8, enc, op, table.get(op), (w0, w), f)
  if top6 == 0b111000:  # MUBUF: LLVM emits only the cache invalidations buffer_gl0_inv/gl1_inv for these kernels
    w = w1(); op = _bits(w0, 25, 18)
    f = {"offset": _bits(w0, 11, 0), "vaddr": _bits(w, 7, 0), "vdata": _bits(w, 15, 8), "srsrc": _bits(w, 20, 16), "offen": _bits(w, 22, 22),
         "idxen": _bits(w, 23, 23), "soffset": _bits(w, 31, 24)}
    return Inst(pc, 8, "MUBUF", op, OPS.MUBUF.get(op), (w0, w), f)
  raise AMDEmuUnsupportedError(f"instruction encoding (word 0x{w0:08x}: MTBUF/MIMG/EXP/VINTERP/LDSDIR are not decoded)", pc, (w0,))

GFX9_VOP3SD_NAMES = {"v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_addc_co_u32", "v_subb_co_u32", "v_subbrev_co_u32",
                     "v_div_scale_f32", "v_div_scale_f64", "v_mad_u64_u32", "v_mad_i64_i32"}
_G9_M0, _G9_OFF = 124, 0x7f

def _g9s(code: int) -> int:
  """A gfx9 scalar operand code in gfx11 numbering (the executor's): M0 is 124 on gfx9, 125 on gfx11; the rest agree."""
  return 125 if code == _G9_M0 else code

def decode_one_gfx9(code: bytes, pc: int) -> Inst:
  """gfx9 (CDNA3 gfx942) encodings; fields come out named, and numbered, as decode_one's so the executor is shared."""
  from tg_amd.emu import gfx9_opcodes as G9
  if pc + 4 > len(code): raise AMDEmuUnsupportedError("truncated instruction (code ends mid-word)", pc, ())
  w0, = struct.unpack_from("<I", code, pc)
  def w1() -> int:
    if pc + 8 > len(code): raise AMDEmuUnsupportedError("truncated 64-bit instruction", pc, (w0,))
    return struct.unpack_from("<I", code, pc + 4)[0]
  top7, top6 = w0 >> 25, w0 >> 26
  def vop(enc: str, op: int, table: dict[int, str], f: dict[str, int]) -> Inst:
    inst = Inst(pc, 4, enc, op, table.get(op), (w0,), f)
    if f["src0"] in (249, 250):  # SDWA / DPP: a second dword of operand controls, not executed
      inst = _with_literal(code, pc, inst, True); inst.f["sdwa_dpp"] = f["src0"]; inst.literal = None
      return inst
    return _with_literal(code, pc, inst, f["src0"] == LITERAL or inst.name in _VOP2_K)
  if top7 == 0b0111111:
    op = _bits(w0, 16, 9); return vop("VOP1", op, G9.VOP1, {"src0": _g9s(_bits(w0, 8, 0)), "vdst": _bits(w0, 24, 17)})
  if top7 == 0b0111110:
    op = _bits(w0, 24, 17); return vop("VOPC", op, G9.VOPC, {"src0": _g9s(_bits(w0, 8, 0)), "vsrc1": _bits(w0, 16, 9)})
  if w0 >> 31 == 0:
    op = _bits(w0, 30, 25); return vop("VOP2", op, G9.VOP2, {"src0": _g9s(_bits(w0, 8, 0)), "vsrc1": _bits(w0, 16, 9), "vdst": _bits(w0, 24, 17)})
  if w0 >> 30 == 0b10:
    if w0 >> 28 == 0b1011 and w0 >> 23 not in (0b101111101, 0b101111110, 0b101111111):  # SOPK: its literal depends on the gfx9 opcode
      op = _bits(w0, 27, 23); name = G9.SOPK.get(op)
      return _with_literal(code, pc, Inst(pc, 4, "SOPK", op, name, (w0,), {"sdst": _g9s(_bits(w0, 22, 16)), "simm16": _bits(w0, 15, 0)}),
                           name == "s_setreg_imm32_b32")
    inst = decode_one(code, pc)  # the other SOP* layouts are gfx11's; only opcode numbers and M0 differ
    table = {"SOP1": G9.SOP1, "SOP2": G9.SOP2, "SOPC": G9.SOPC, "SOPP": G9.SOPP}[inst.enc]
    inst.name = table.get(inst.op)
    for k in ("ssrc0", "ssrc1", "sdst"):
      if k in inst.f: inst.f[k] = _g9s(inst.f[k])
    return inst
  if top6 == 0b110000:
    w = w1(); op = _bits(w0, 25, 18); imm, soe = _bits(w0, 17, 17), _bits(w0, 14, 14)
    f = {"sbase": _bits(w0, 5, 0), "sdata": _bits(w0, 12, 6), "glc": _bits(w0, 16, 16), "dlc": 0,
         "offset": _sext(_bits(w, 20, 0), 21) if imm else 0, "soffset": _g9s(_bits(w, 31, 25)) if soe else (_g9s(_bits(w, 7, 0)) if not imm else 124)}
    return Inst(pc, 8, "SMEM", op, G9.SMEM.get(op), (w0, w), f)
  if w0 >> 23 == 0b110100111:
    w = w1(); op = _bits(w0, 22, 16)
    f = {"vdst": _bits(w0, 7, 0), "neg_hi": _bits(w0, 10, 8), "opsel": _bits(w0, 13, 11), "opsel_hi": _bits(w0, 14, 14) << 2 | _bits(w, 28, 27),
         "clamp": _bits(w0, 15, 15), "src0": _g9s(_bits(w, 8, 0)), "src1": _g9s(_bits(w, 17, 9)), "src2": _g9s(_bits(w, 26, 18)), "neg": _bits(w, 31, 29)}
    return _with_literal(code, pc, Inst(pc, 8, "VOP3P", op, G9.VOP3P.get(op), (w0, w), f), LITERAL in (f["src0"], f["src1"], f["src2"]))
  if top6 == 0b110100:
    w = w1(); op = _bits(w0, 25, 16); name = G9.VOP3.get(op)
    f = {"vdst": _bits(w0, 7, 0), "clamp": _bits(w0, 15, 15), "src0": _g9s(_bits(w, 8, 0)), "src1": _g9s(_bits(w, 17, 9)), "src2": _g9s(_bits(w, 26, 18)),
         "omod": _bits(w, 28, 27), "neg": _bits(w, 31, 29)}
    if name in GFX9_VOP3SD_NAMES: f["sdst"], enc = _g9s(_bits(w0, 14, 8)), "VOP3SD"
    else: f["abs"], f["opsel"], enc = _bits(w0, 10, 8), _bits(w0, 14, 11), "VOP3"
    return _with_literal(code, pc, Inst(pc, 8, enc, op, name, (w0, w), f), LITERAL in (f["src0"], f["src1"], f["src2"]))
  if top6 == 0b110110:
    w = w1(); op = _bits(w0, 24, 17)
    f = {"offset0": _bits(w0, 7, 0), "offset1": _bits(w0, 15, 8), "gds": _bits(w0, 16, 16), "addr": _bits(w, 7, 0), "data0": _bits(w, 15, 8),
         "data1": _bits(w, 23, 16), "vdst": _bits(w, 31, 24)}
    return Inst(pc, 8, "DS", op, G9.DS.get(op), (w0, w), f)
  if top6 == 0b110111:
    w = w1(); op = _bits(w0, 24, 18); seg = _bits(w0, 15, 14); saddr = _bits(w, 22, 16)
    f = {"offset": _sext(_bits(w0, 12, 0), 13), "dlc": 0, "glc": _bits(w0, 16, 16), "slc": _bits(w0, 17, 17), "seg": seg, "addr": _bits(w, 7, 0),
         "data": _bits(w, 15, 8), "saddr": 124 if saddr == _G9_OFF or seg == 0 else _g9s(saddr), "sve": int(saddr == _G9_OFF),
         "vdst": _bits(w, 31, 24)}  # flat (seg 0) has no SGPR base whatever the field holds
    enc, table = (("FLAT", G9.FLAT), ("SCRATCH", G9.SCRATCH), ("GLOBAL", G9.GLOBAL), ("FLAT?", {}))[seg]
    return Inst(pc, 8, enc, op, table.get(op), (w0, w), f)
  if top6 == 0b111000:  # MUBUF: only the cache maintenance LLVM puts around atomics and fences runs
    w = w1(); op = _bits(w0, 24, 18)
    return Inst(pc, 8, "MUBUF", op, G9.MUBUF.get(op), (w0, w), {"offset": _bits(w0, 11, 0), "vaddr": _bits(w, 7, 0), "vdata": _bits(w, 15, 8),
                "srsrc": _bits(w, 20, 16), "soffset": _g9s(_bits(w, 31, 24))})
  raise AMDEmuUnsupportedError(f"gfx9 instruction encoding (word 0x{w0:08x}: MTBUF/MIMG/EXP are not decoded)", pc, (w0,))

def _sext(v: int, bits: int) -> int: return v - (1 << bits) if v >> (bits - 1) & 1 else v

def _with_literal(code: bytes, pc: int, inst: Inst, has_literal: bool) -> Inst:
  if not has_literal: return inst
  at = pc + inst.size
  if at + 4 > len(code): raise AMDEmuUnsupportedError("instruction whose literal constant lies past the end of the code", pc, inst.words)
  inst.literal = struct.unpack_from("<I", code, at)[0]
  inst.size += 4; inst.words = inst.words + (inst.literal,)
  return inst

def decode(code: bytes, start: int, end: int, arch: str = "gfx1100") -> list[Inst]:
  """Every instruction of [start, end) in order (a linear sweep: LLVM puts no data inside a kernel's code)."""
  one = decode_one_gfx9 if arch.startswith("gfx9") else decode_one
  out, pc = [], start
  while pc < end:
    inst = one(code, pc)
    out.append(inst); pc += inst.size
  return out

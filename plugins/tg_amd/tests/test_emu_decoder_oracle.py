"""The decoder against LLVM's own disassembler: every instruction of the test kernels must have llvm-objdump-19's boundaries,
encoding words, mnemonic, and register operands. (Debian: apt-get install llvm-19; CI installs it.)"""
from __future__ import annotations
import re
import shutil
import subprocess
from collections import Counter
import pytest
from amdgpu_ir import compile_ir, elementwise
from test_emu_code_object import ATOMIC
from test_emu_kernels import LDS_REDUCE
from tg_amd.emu.decoder import Inst, decode
from tg_amd.emu.elf import read_code_object

OBJDUMP = shutil.which("llvm-objdump-19")
pytestmark = pytest.mark.skipif(OBJDUMP is None, reason="llvm-objdump-19 is not installed (Debian package llvm-19): it is the decoder's oracle")

KERNELS = {
  "fdiv": elementwise("k", ["float", "float"], "float", "  %r = fdiv float %x0, %x1"),
  "f16": elementwise("k", ["half", "half"], "half", "  %m = fmul half %x0, %x1\n  %r = fadd half %m, %x0"),
  "pk16": elementwise("k", ["<2 x half>", "<2 x half>"], "<2 x half>", "  %r = fmul <2 x half> %x0, %x1"),
  "i64div": elementwise("k", ["i64", "i64"], "i64", "  %r = sdiv i64 %x0, %x1"),
  "f64": elementwise("k", ["double", "double"], "double", "  %r = fdiv double %x0, %x1"),
  "exp": elementwise("k", ["float"], "float", "  %r = call float @llvm.exp.f32(float %x0)") + "declare float @llvm.exp.f32(float)\n",
  "sin": elementwise("k", ["float"], "float", "  %r = call float @llvm.sin.f32(float %x0)") + "declare float @llvm.sin.f32(float)\n",
  "cvt": elementwise("k", ["double"], "i64", "  %r = fptosi double %x0 to i64"),
  "bf16": elementwise("k", ["bfloat", "bfloat"], "bfloat", "  %r = fmul bfloat %x0, %x1"),
  "reduce": LDS_REDUCE,
  "float4": elementwise("k", ["<4 x float>", "<4 x float>"], "<4 x float>", "  %m = fmul <4 x float> %x0, %x1\n  %r = fsub <4 x float> %m, %x1"),
  "atomic": ATOMIC,
}

_SPECIAL = {"vcc_lo": 106, "vcc_hi": 107, "null": 124, "m0": 125, "exec_lo": 126, "exec_hi": 127, "vcc": 106, "exec": 126}

def llvm_lines(obj: bytes, tmp_path, arch: str) -> list[tuple[int, str, list[str], tuple[int, ...]]]:
  p = tmp_path / "k.o"; p.write_bytes(obj)
  out = subprocess.run([OBJDUMP, "-d", f"--mcpu={arch}", str(p)], capture_output=True, text=True, check=True).stdout
  rows = []
  for line in out.splitlines():
    m = re.match(r"\s+(\S+)(.*?)//\s*([0-9A-F]+):((?: [0-9A-F]{8})+)\s*(?:<[^>]*>)?\s*$", line)
    if m is None: continue
    rows.append((int(m.group(3), 16), m.group(1), m.group(2).strip(), tuple(int(x, 16) for x in m.group(4).split())))
  return rows

def llvm_registers(text: str) -> Counter:
  """Register operands as operand codes (s5 -> 5, v3 -> 259, a range by its first register); LLVM 19 prints a true16 v0.h as v128."""
  regs: Counter = Counter()
  text = re.sub(r"/\*.*?\*/", "", text)
  for tok in re.findall(r"\b(?:[sv]\[\d+:\d+\]|[sv]\d+(?:\.[lh])?|vcc_lo|vcc_hi|exec_lo|exec_hi|null|m0|vcc|exec)\b", text):
    if tok in _SPECIAL: regs[_SPECIAL[tok]] += 1; continue
    n = int(re.findall(r"\d+", tok)[0])
    regs[n if tok[0] == "s" else 256 + n] += 1
  return regs

def my_registers(inst: Inst) -> Counter:
  """Every field of the instruction that can name a register, as operand codes (the oracle's registers must be among them)."""
  f, regs = inst.f, Counter()
  vec8 = {"vdst", "vsrc1", "addr", "data", "data0", "data1", "vdstx", "vdsty", "vsrcx1", "vsrcy1"}
  for k, v in f.items():
    if k in ("sbase",): regs[v * 2] += 1
    elif k in vec8 and not (inst.enc in ("VOP3", "VOP3SD", "VOP3P") and k == "vdst"): regs[256 + v] += 1; regs[256 + (v & 0x7f)] += 1
    elif k in ("src0", "src1", "src2", "srcx0", "srcy0", "ssrc0", "ssrc1", "sdst", "sdata", "soffset", "saddr"):
      regs[v] += 1; regs[256 + ((v - 256) & 0x7f)] += v >= 256
    elif k == "vdst": regs[256 + v] += 1; regs[v] += 1  # VOP3's vdst is an SGPR for compares and readlane
  regs[106] += 2; regs[126] += 1  # implicit VCC (carry in and out) / EXEC operands LLVM prints (e32 compares, cndmask, carries)
  return regs

def _strip(name: str) -> str: return re.sub(r"_e(32|64)$", "", name)

@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_decoder_matches_llvm_objdump(kernel, arch, tmp_path):
  obj = compile_ir(KERNELS[kernel], arch)
  co = read_code_object(obj)
  k = next(iter(co.kernels.values()))
  mine = {i.pc: i for i in decode(co.image, k.entry, k.entry + k.code_size, arch)}
  theirs = [r for r in llvm_lines(obj, tmp_path, arch) if r[0] < k.entry + k.code_size]
  assert sorted(mine) == [r[0] for r in theirs], "instruction boundaries differ"
  for pc, name, ops, words in theirs:
    inst = mine[pc]
    assert inst.words == words, f"0x{pc:x} {name}: words"
    if name == ".long":
      # LLVM 19 predates gfx11 true16 operands (v0.h as v128 in a 16-bit VOP1/VOP2/VOPC field) that llvmlite's LLVM emits
      assert inst.enc in ("VOP1", "VOP2", "VOPC") and any(inst.f.get(k, 0) & 0x80 for k in ("vdst", "vsrc1")) or inst.f["src0"] >= 384, \
        f"0x{pc:x}: LLVM could not decode {words} and it is not a true16 form: decoded {inst.name} {inst.f}"
      continue
    got = inst.name
    assert got == _strip(name), f"0x{pc:x}: decoded {got}, LLVM says {name} {ops}"
    if inst.enc == "VOPD":
      assert f":: {inst.name_y} " in ops + " ", f"0x{pc:x}: Y op {inst.name_y}, LLVM says {ops}"
    missing = llvm_registers(ops) - my_registers(inst)
    assert not missing, f"0x{pc:x} {name} {ops}: registers {dict(missing)} not among the decoded fields {inst.f}"

"""Regenerate tg_amd/emu/gfx11_opcodes.py: the gfx11 opcode -> mnemonic tables of every encoding the decoder knows.

The names come from LLVM's own AMDGPU disassembler (Debian's `llvm-mc-19`): every opcode value of an encoding is
placed in an otherwise fixed instruction word and disassembled; what LLVM names it is recorded. Only the names are
taken from LLVM; the field layout and the semantics are the emulator's own. Run: python scripts/gen_opcodes.py
"""
from __future__ import annotations
import importlib
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

LLVM_MC = "llvm-mc-19"
# encoding -> (opcode range, function opcode -> instruction words); operands are fixed registers that every op accepts
V1, V2, V3 = 256 + 1, 256 + 2, 256 + 3
ENCODINGS: dict[str, tuple[range, object]] = {
  "SOP2": (range(96), lambda op: [0b10 << 30 | op << 23 | 0 << 16 | 2 << 8 | 4]),
  "SOPK": (range(29), lambda op: [0b1011 << 28 | op << 23 | 0 << 16 | 0x10]),
  "SOP1": (range(256), lambda op: [0b101111101 << 23 | 0 << 16 | op << 8 | 4]),
  "SOPC": (range(128), lambda op: [0b101111110 << 23 | op << 16 | 2 << 8 | 4]),
  "SOPP": (range(128), lambda op: [0b101111111 << 23 | op << 16 | 0]),
  "SMEM": (range(256), lambda op: [0b111101 << 26 | op << 18 | 0 << 6 | 2, 124 << 25 | 0x10]),
  "VOP1": (range(256), lambda op: [0b0111111 << 25 | 0 << 17 | op << 9 | V2]),
  # VOP2 and VOPD ops with a constant K (v_fmamk/v_fmaak) only decode with their literal dword present
  "VOP2": (range(62), lambda op: [[op << 25 | 0 << 17 | 2 << 9 | V1], [op << 25 | 0 << 17 | 2 << 9 | V1, 0x3f800000]]),
  "VOPC": (range(256), lambda op: [0b0111110 << 25 | op << 17 | 2 << 9 | V1]),
  # (v_cmpx_*_e64 only decodes with EXEC_LO, 126, in its vdst field)
  "VOP3": (range(1024), lambda op: [[0b110101 << 26 | op << 16 | d, s] for d in (0, 126) for s in (V3 << 18 | V2 << 9 | V1, V2 << 9 | V1, V1)]),
  "VOP3P": (range(128), lambda op: [[0b11001100 << 24 | op << 16 | h << 14, s | h * 3 << 27] for h in (0, 1) for s in (V3 << 18 | V2 << 9 | V1, V2 << 9 | V1)]),
  "DS": (range(256), lambda op: [[0b110110 << 26 | op << 18, s] for s in (4 << 24 | 3 << 16 | 2 << 8 | 1, 4 << 24 | 2 << 8 | 1,
                                 2 << 8 | 1, 4 << 24 | 1, 1, 4 << 24, 0)]),
  "FLAT": (range(128), lambda op: [0b110111 << 26 | op << 18 | 0 << 16, 4 << 24 | 124 << 16 | 2 << 8 | 2]),
  "SCRATCH": (range(128), lambda op: [0b110111 << 26 | op << 18 | 1 << 16, 4 << 24 | 124 << 16 | 2 << 8 | 2]),
  "GLOBAL": (range(128), lambda op: [0b110111 << 26 | op << 18 | 2 << 16, 4 << 24 | 124 << 16 | 2 << 8 | 2]),
  "MUBUF": (range(256), lambda op: [[0b111000 << 26 | op << 18, s] for s in (124 << 24 | 1 << 16 | 2 << 8 | 3, 0)]),
  "VOPDX": (range(16), lambda op: [[0b110010 << 26 | op << 22 | x1 << 9 | V1, 1 << 24 | 3 << 9 | V3] + k for k in ([], [1]) for x1 in (2, 0)]),
  "VOPDY": (range(32), lambda op: [[0b110010 << 26 | op << 17 | 2 << 9 | V1, 1 << 24 | y1 << 9 | V3] + k for k in ([], [1]) for y1 in (3, 0)]),
}
# gfx9 (CDNA3 gfx942): the GCN encodings, same register operands
ENCODINGS_GFX9: dict[str, tuple[range, object]] = {
  "SOP2": (range(96), lambda op: [0b10 << 30 | op << 23 | 0 << 16 | 2 << 8 | 4]),
  "SOPK": (range(29), lambda op: [0b1011 << 28 | op << 23 | 0 << 16 | 0x10]),
  "SOP1": (range(256), lambda op: [0b101111101 << 23 | 0 << 16 | op << 8 | 4]),
  "SOPC": (range(128), lambda op: [0b101111110 << 23 | op << 16 | 2 << 8 | 4]),
  "SOPP": (range(128), lambda op: [0b101111111 << 23 | op << 16 | 0]),
  "SMEM": (range(256), lambda op: [[0b110000 << 26 | op << 18 | 1 << 17 | 0 << 6 | 2, 0x10], [0b110000 << 26 | op << 18 | 1 << 17, 0]]),
  "VOP1": (range(256), lambda op: [0b0111111 << 25 | 0 << 17 | op << 9 | V2]),
  "VOP2": (range(62), lambda op: [[op << 25 | 0 << 17 | 2 << 9 | V1], [op << 25 | 0 << 17 | 2 << 9 | V1, 0x3f800000]]),
  "VOPC": (range(256), lambda op: [0b0111110 << 25 | op << 17 | 2 << 9 | V1]),
  "VOP3": (range(1024), lambda op: [[0b110100 << 26 | op << 16 | d, s] for d in (0, 126) for s in (V3 << 18 | V2 << 9 | V1, V2 << 9 | V1, V1)]),
  "VOP3P": (range(128), lambda op: [[0b110100111 << 23 | op << 16 | h << 14, s | h * 3 << 27] for h in (0, 1)
                                    for s in (V3 << 18 | V2 << 9 | V1, V2 << 9 | V1)]),
  "DS": (range(256), lambda op: [[0b110110 << 26 | op << 17, s] for s in (4 << 24 | 3 << 16 | 2 << 8 | 1, 4 << 24 | 2 << 8 | 1,
                                 2 << 8 | 1, 4 << 24 | 1, 1, 4 << 24, 0)]),
  "FLAT": (range(128), lambda op: [0b110111 << 26 | op << 18 | 0 << 14, 4 << 24 | 2 << 8 | 2]),  # flat has no saddr: the field is 0
  "SCRATCH": (range(128), lambda op: [0b110111 << 26 | op << 18 | 1 << 14, 4 << 24 | 0x7f << 16 | 2 << 8 | 2]),
  "GLOBAL": (range(128), lambda op: [0b110111 << 26 | op << 18 | 2 << 14, 4 << 24 | 0x7f << 16 | 2 << 8 | 2]),
  "MUBUF": (range(128), lambda op: [[0b111000 << 26 | op << 18, s] for s in (0x7c << 24 | 1 << 16 | 2 << 8 | 3, 0)]),
}
SUFFIX = re.compile(r"_e(32|64)$")

MCPU = "gfx1100"

def disassemble_one(words: list[int]) -> str | None:
  # one process per instruction: llvm-mc treats its whole input as one byte stream and resynchronises after an invalid word
  text = ",".join(f"0x{b:02x}" for w in words for b in w.to_bytes(4, "little"))
  out = subprocess.run([LLVM_MC, "-disassemble", "-show-encoding", "-triple=amdgcn-amd-amdhsa", f"-mcpu={MCPU}"],
                       input=text, capture_output=True, text=True, check=True)
  if "invalid" in out.stderr: return None
  m = re.search(r"^\s*(\S+(?:[^;:\n]*:: \S+)?)[^;\n]*; encoding: \[([^\]]*)\]", out.stdout, re.M)
  # only the first dword must survive the round trip: LLVM re-encodes fields an op does not use (a load's data) as zero
  return m.group(1) if m is not None and m.group(2).lower()[:19] == text[:19] else None

def disassemble_first(candidates: list[list[int]]) -> str | None:
  # LLVM rejects a word whose unused operand fields are not zero, so an op is tried with fewer and fewer operands
  return next((n for n in map(disassemble_one, candidates if isinstance(candidates[0], list) else [candidates]) if n is not None), None)

def disassemble(words_per_op: dict[int, list]) -> dict[int, str]:
  with ThreadPoolExecutor(2) as pool: names = dict(zip(words_per_op, pool.map(disassemble_first, words_per_op.values())))
  return {op: n for op, n in names.items() if n is not None}

def format_table(enc: str, names: dict[int, str]) -> str:
  if not names: return f"{enc}: dict[int, str] = {{}}"
  lines, line = [], " "
  for op, n in sorted(names.items()):
    item = f" {op}: {n!r},"
    if len(line) + len(item) > 150: lines.append(line); line = " "
    line += item
  return f"{enc}: dict[int, str] = {{\n" + "\n".join(lines + [line]) + "\n}"

def main() -> None:
  global MCPU
  args = sys.argv[1:]
  gfx9 = "--gfx942" in args
  if gfx9: MCPU, args = "gfx942", [a for a in args if a != "--gfx942"]
  encodings, target = (ENCODINGS_GFX9, "gfx9_opcodes.py") if gfx9 else (ENCODINGS, "gfx11_opcodes.py")
  desc = "gfx942 (CDNA3, GCN encodings)" if gfx9 else "gfx11 (RDNA3)"
  out = [f'"""{desc} opcode -> mnemonic per encoding; generated by scripts/gen_opcodes.py from llvm-mc-19\'s disassembler."""', ""]
  only = set(args)
  if only: current = importlib.import_module(f"tg_amd.emu.{target[:-3]}")
  for enc, (ops, make) in encodings.items():
    if only and enc not in only:
      out.append(format_table(enc, getattr(current, enc)))
      continue
    names = disassemble({op: make(op) for op in ops})
    # a dual op prints as "v_dual_x ... :: v_dual_y ..."; other lines' first token is the mnemonic
    names = {op: (n.split()[0] if enc != "VOPDY" else n.split(":: ")[1].split()[0]) for op, n in names.items()}
    out.append(format_table(enc, {op: SUFFIX.sub("", n) for op, n in names.items()}))
    print(enc, len(names), file=sys.stderr)
  Path(__file__).resolve().parent.parent.joinpath("tg_amd/emu", target).write_text("\n".join(out) + "\n")

if __name__ == "__main__": main()

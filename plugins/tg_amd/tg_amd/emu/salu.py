"""Scalar ALU semantics (SOP1/SOP2/SOPC/SOPK), on Python ints: mnemonic -> (dst bits, src bits, fn(a, b, scc) -> (result, scc))."""
from __future__ import annotations
from typing import Callable

M32, M64 = 0xffffffff, 0xffffffffffffffff
def _s32(x: int) -> int: return x - (1 << 32) if x & 0x80000000 else x
def _s64(x: int) -> int: return x - (1 << 64) if x >> 63 & 1 else x
def _sx(x: int, bits: int) -> int: return x - (1 << bits) if x >> (bits - 1) & 1 else x

Fn = Callable[[int, int, int], tuple[int | None, int | None]]  # (a, b, scc) -> (result or None, new scc or None: unchanged)
SOP: dict[str, tuple[int, int, Fn]] = {}  # name -> (dst bits (0: no dst), src bits, fn)

def _reg(name: str, dst: int, src: int, fn: Fn) -> None: SOP[name] = (dst, src, fn)

def _ovf32(r: int) -> int: return int(not -(1 << 31) <= r < (1 << 31))
_reg("s_add_u32", 32, 32, lambda a, b, c: (a + b & M32, int(a + b > M32)))
_reg("s_sub_u32", 32, 32, lambda a, b, c: (a - b & M32, int(b > a)))
_reg("s_add_i32", 32, 32, lambda a, b, c: (a + b & M32, _ovf32(_s32(a) + _s32(b))))
_reg("s_sub_i32", 32, 32, lambda a, b, c: (a - b & M32, _ovf32(_s32(a) - _s32(b))))
_reg("s_addc_u32", 32, 32, lambda a, b, c: (a + b + c & M32, int(a + b + c > M32)))
_reg("s_subb_u32", 32, 32, lambda a, b, c: (a - b - c & M32, int(b + c > a)))
_reg("s_absdiff_i32", 32, 32, lambda a, b, c: ((r := abs(_s32(a) - _s32(b)) & M32), int(r != 0)))
for n in (1, 2, 3, 4): _reg(f"s_lshl{n}_add_u32", 32, 32, lambda a, b, c, n=n: (((a << n) & M32) + b & M32, int(((a << n) & M32) + b > M32)))
for bits, mask, sx in ((32, M32, _s32), (64, M64, _s64)):
  _reg(f"s_lshl_b{bits}", bits, bits, lambda a, b, c, m=mask, w=bits: ((r := a << (b & (w - 1)) & m), int(r != 0)))
  _reg(f"s_lshr_b{bits}", bits, bits, lambda a, b, c, m=mask, w=bits: ((r := a >> (b & (w - 1))), int(r != 0)))
  _reg(f"s_ashr_i{bits}", bits, bits, lambda a, b, c, m=mask, w=bits, sx=sx: ((r := sx(a) >> (b & (w - 1)) & m), int(r != 0)))
  for nm, f in (("and", lambda a, b: a & b), ("or", lambda a, b: a | b), ("xor", lambda a, b: a ^ b), ("nand", lambda a, b: ~(a & b)),
                ("nor", lambda a, b: ~(a | b)), ("xnor", lambda a, b: ~(a ^ b)), ("and_not1", lambda a, b: a & ~b), ("or_not1", lambda a, b: a | ~b)):
    _reg(f"s_{nm}_b{bits}", bits, bits, lambda a, b, c, f=f, m=mask: ((r := f(a, b) & m), int(r != 0)))
  _reg(f"s_cselect_b{bits}", bits, bits, lambda a, b, c: (a if c else b, None))
  _reg(f"s_bfm_b{bits}", bits, 32, lambda a, b, c, m=mask, w=bits: (((1 << (a & (w - 1))) - 1) << (b & (w - 1)) & m, None))
  _reg(f"s_mov_b{bits}", bits, bits, lambda a, b, c: (a, None))
  _reg(f"s_cmov_b{bits}", bits, bits, lambda a, b, c: (a if c else None, None))
  _reg(f"s_not_b{bits}", bits, bits, lambda a, b, c, m=mask: ((r := ~a & m), int(r != 0)))
  _reg(f"s_brev_b{bits}", bits, bits, lambda a, b, c, w=bits: (int(f"{a:0{w}b}"[::-1], 2), None))
  _reg(f"s_bcnt1_i32_b{bits}", 32, bits, lambda a, b, c: ((r := a.bit_count()), int(r != 0)))
  _reg(f"s_bcnt0_i32_b{bits}", 32, bits, lambda a, b, c, w=bits: ((r := w - a.bit_count()), int(r != 0)))
  _reg(f"s_ctz_i32_b{bits}", 32, bits, lambda a, b, c: (((a & -a).bit_length() - 1) & M32 if a else M32, None))
  _reg(f"s_bitset0_b{bits}", bits, 32, lambda a, b, c: (None, None))  # replaced below: needs the old dst
for nm, cmp in (("eq", lambda a, b: a == b), ("lg", lambda a, b: a != b), ("gt", lambda a, b: a > b), ("ge", lambda a, b: a >= b),
                ("lt", lambda a, b: a < b), ("le", lambda a, b: a <= b)):
  _reg(f"s_cmp_{nm}_i32", 0, 32, lambda a, b, c, cmp=cmp: (None, int(cmp(_s32(a), _s32(b)))))
  _reg(f"s_cmp_{nm}_u32", 0, 32, lambda a, b, c, cmp=cmp: (None, int(cmp(a, b))))
  if nm in ("eq", "lg"): _reg(f"s_cmp_{nm}_u64", 0, 64, lambda a, b, c, cmp=cmp: (None, int(cmp(a, b))))
_reg("s_bitcmp0_b32", 0, 32, lambda a, b, c: (None, int(not a >> (b & 31) & 1)))
_reg("s_bitcmp1_b32", 0, 32, lambda a, b, c: (None, int(a >> (b & 31) & 1)))
_reg("s_bitcmp0_b64", 0, 64, lambda a, b, c: (None, int(not a >> (b & 63) & 1)))
_reg("s_bitcmp1_b64", 0, 64, lambda a, b, c: (None, int(a >> (b & 63) & 1)))
_reg("s_min_i32", 32, 32, lambda a, b, c: (a if _s32(a) < _s32(b) else b, int(_s32(a) < _s32(b))))
_reg("s_min_u32", 32, 32, lambda a, b, c: (min(a, b), int(a < b)))
_reg("s_max_i32", 32, 32, lambda a, b, c: (a if _s32(a) > _s32(b) else b, int(_s32(a) > _s32(b))))
_reg("s_max_u32", 32, 32, lambda a, b, c: (max(a, b), int(a > b)))
_reg("s_mul_i32", 32, 32, lambda a, b, c: (a * b & M32, None))
_reg("s_mul_hi_u32", 32, 32, lambda a, b, c: (a * b >> 32, None))
_reg("s_mul_hi_i32", 32, 32, lambda a, b, c: (_s32(a) * _s32(b) >> 32 & M32, None))
_reg("s_bfe_u32", 32, 32, lambda a, b, c: ((r := a >> (b & 31) & ((1 << (b >> 16 & 0x7f)) - 1) & M32), int(r != 0)))
_reg("s_bfe_i32", 32, 32, lambda a, b, c: ((r := (_sx(a >> (b & 31) & ((1 << w) - 1), w) if (w := b >> 16 & 0x7f) else 0) & M32), int(r != 0)))
_reg("s_bfe_u64", 64, 64, lambda a, b, c: ((r := a >> (b & 63) & ((1 << (b >> 16 & 0x7f)) - 1) & M64), int(r != 0)))
_reg("s_bfe_i64", 64, 64, lambda a, b, c: ((r := (_sx(a >> (b & 63) & ((1 << w) - 1), w) if (w := b >> 16 & 0x7f) else 0) & M64), int(r != 0)))
_reg("s_pack_ll_b32_b16", 32, 32, lambda a, b, c: (a & 0xffff | (b & 0xffff) << 16, None))
_reg("s_pack_lh_b32_b16", 32, 32, lambda a, b, c: (a & 0xffff | (b >> 16) << 16, None))
_reg("s_pack_hh_b32_b16", 32, 32, lambda a, b, c: (a >> 16 | (b >> 16) << 16, None))
_reg("s_pack_hl_b32_b16", 32, 32, lambda a, b, c: (a >> 16 | (b & 0xffff) << 16, None))
_reg("s_sext_i32_i8", 32, 32, lambda a, b, c: (_sx(a & 0xff, 8) & M32, None))
_reg("s_sext_i32_i16", 32, 32, lambda a, b, c: (_sx(a & 0xffff, 16) & M32, None))
_reg("s_abs_i32", 32, 32, lambda a, b, c: ((r := abs(_s32(a)) & M32), int(r != 0)))
_reg("s_clz_i32_u32", 32, 32, lambda a, b, c: (32 - a.bit_length() if a else M32, None))
_reg("s_clz_i32_u64", 32, 64, lambda a, b, c: (64 - a.bit_length() if a else M32, None))
# leading bits equal to the sign bit (counting it), -1 when every bit is: clz of the value with the sign folded away
_reg("s_cls_i32", 32, 32, lambda a, b, c: (M32 if a in (0, M32) else 32 - (a ^ M32 if a >> 31 else a).bit_length(), None))
_reg("s_cls_i32_i64", 32, 64, lambda a, b, c: (M32 if a in (0, M64) else 64 - (a ^ M64 if a >> 63 else a).bit_length(), None))
del SOP["s_bitset0_b32"], SOP["s_bitset0_b64"]
# SOPK: b is the 16-bit immediate
_reg("s_movk_i32", 32, 32, lambda a, b, c: (_sx(b, 16) & M32, None))
_reg("s_cmovk_i32", 32, 32, lambda a, b, c: (_sx(b, 16) & M32 if c else None, None))
_reg("s_addk_i32", 32, 32, lambda a, b, c: (a + _sx(b, 16) & M32, _ovf32(_s32(a) + _sx(b, 16))))
_reg("s_mulk_i32", 32, 32, lambda a, b, c: (a * _sx(b, 16) & M32, None))
for nm, cmp in (("eq", lambda a, b: a == b), ("lg", lambda a, b: a != b), ("gt", lambda a, b: a > b), ("ge", lambda a, b: a >= b),
                ("lt", lambda a, b: a < b), ("le", lambda a, b: a <= b)):
  _reg(f"s_cmpk_{nm}_i32", 0, 32, lambda a, b, c, cmp=cmp: (None, int(cmp(_s32(a), _sx(b, 16)))))
  _reg(f"s_cmpk_{nm}_u32", 0, 32, lambda a, b, c, cmp=cmp: (None, int(cmp(a, b))))

# s_*_saveexec: sdst = old EXEC; EXEC = f(src, old EXEC); SCC = EXEC != 0. wrexec: sdst = the new EXEC.
SAVEEXEC: dict[str, Callable[[int, int], int]] = {
  "and": lambda s, e: s & e, "or": lambda s, e: s | e, "xor": lambda s, e: s ^ e, "nand": lambda s, e: ~(s & e), "nor": lambda s, e: ~(s | e),
  "xnor": lambda s, e: ~(s ^ e), "and_not0": lambda s, e: ~s & e, "or_not0": lambda s, e: ~s | e, "and_not1": lambda s, e: s & ~e,
  "or_not1": lambda s, e: s | ~e}

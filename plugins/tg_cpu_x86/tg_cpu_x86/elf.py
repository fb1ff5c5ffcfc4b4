"""A loader for the relocatable x86-64 ELF objects the compiler emits: their allocated sections copied into one fresh mapping,
the relocations LLVM emits for pic code applied, the code made read+execute. A kernel costs the pages of its own code and data
(usually one), where an llvmlite MCJIT engine per kernel costs tens of KB of LLVM state and milliseconds to build.

Handled: PROGBITS/NOBITS sections (`.eh_frame` is skipped: nothing unwinds through a kernel), local and global symbols, and the
relocations R_X86_64_64, PC32, PC64, PLT32 (a call to a symbol outside the object goes through a 14-byte stub next to the code),
GOTPCREL, GOTPCRELX and REX_GOTPCRELX (through a GOT slot next to the code). Anything else (TLS, absolute 32-bit addresses, COMMON
symbols, other machines) raises `ELFLoadError` naming it; the runtime then loads that object through MCJIT instead."""
from __future__ import annotations
import ctypes
import mmap
import struct
import weakref
from typing import Callable

class ELFLoadError(Exception):
  """The object uses something this loader doesn't handle (the message names it)."""

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")
SHT_PROGBITS, SHT_SYMTAB, SHT_RELA, SHT_NOBITS = 1, 2, 4, 8
SHF_WRITE, SHF_ALLOC, SHF_TLS = 0x1, 0x2, 0x400
SHN_UNDEF, SHN_ABS, SHN_COMMON = 0, 0xFFF1, 0xFFF2
STB_LOCAL = 0
R_64, R_PC32, R_PLT32, R_GOTPCREL, R_PC64, R_GOTPCRELX, R_REX_GOTPCRELX = 1, 2, 4, 9, 24, 41, 42
STUB = b"\xff\x25\x00\x00\x00\x00"  # jmp *0(%rip): the absolute target follows as 8 bytes
STUB_SIZE = len(STUB) + 8
PAGE = mmap.PAGESIZE

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype, _libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.restype, _libc.munmap.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]
_libc.mprotect.restype, _libc.mprotect.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_MAP_FAILED = ctypes.c_void_p(-1).value

def _align(x: int, a: int) -> int: return (x + a - 1) // a * a

def _cstr(tab: bytes, off: int) -> str: return tab[off:tab.index(b"\0", off)].decode()

class LoadedObject:
  """An object file loaded at `base`: `symbols` maps its defined global symbols to absolute addresses. The mapping lives as long as
  this object (keep it referenced while its code can run)."""
  def __init__(self, obj: bytes, resolve: Callable[[str], int]):
    """`resolve(name)` gives the address of a symbol the object uses but doesn't define (0: unknown)."""
    if len(obj) < _EHDR.size or obj[:4] != b"\x7fELF": raise ELFLoadError("not an ELF file")
    ident, e_type, machine, _, _, _, shoff, _, _, _, _, shentsize, shnum, _ = _EHDR.unpack_from(obj)
    if ident[4] != 2 or ident[5] != 1 or e_type != 1 or machine != 62:
      raise ELFLoadError(f"not a little-endian 64-bit relocatable x86-64 object (class {ident[4]}, data {ident[5]}, type {e_type}, machine {machine})")
    shdrs = [_SHDR.unpack_from(obj, shoff + i * shentsize) for i in range(shnum)]
    shstrndx = _EHDR.unpack_from(obj)[13]
    shstr = obj[shdrs[shstrndx][4]:][:shdrs[shstrndx][5]]
    names = [_cstr(shstr, h[0]) for h in shdrs]
    if bad := [names[i] for i, h in enumerate(shdrs) if h[2] & SHF_TLS]: raise ELFLoadError(f"thread-local sections {bad}")
    load = {i for i, h in enumerate(shdrs) if h[2] & SHF_ALLOC and h[1] in (SHT_PROGBITS, SHT_NOBITS) and names[i] != ".eh_frame"}
    symtabs = [i for i, h in enumerate(shdrs) if h[1] == SHT_SYMTAB]
    if len(symtabs) != 1: raise ELFLoadError(f"{len(symtabs)} symbol tables")
    st = shdrs[symtabs[0]]
    strtab = obj[shdrs[st[6]][4]:][:shdrs[st[6]][5]]
    syms = [_SYM.unpack_from(obj, st[4] + k * _SYM.size) for k in range(st[5] // _SYM.size)]
    relas = [(h[7], [_RELA.unpack_from(obj, h[4] + k * _RELA.size) for k in range(h[5] // _RELA.size)]) for h in shdrs if h[1] == SHT_RELA and h[7] in load]
    # one stub per external call target, one GOT slot per symbol reached through the GOT
    ext_stub: dict[int, int] = {}
    got: dict[int, int] = {}
    for _, rs in relas:
      for _, info, _ in rs:
        sym, typ = info >> 32, info & 0xFFFFFFFF
        if typ == R_PLT32 and syms[sym][3] == SHN_UNDEF: ext_stub.setdefault(sym, len(ext_stub))
        if typ in (R_GOTPCREL, R_GOTPCRELX, R_REX_GOTPCRELX): got.setdefault(sym, len(got))
    # layout: read-only sections (code, constants), the stubs and GOT slots, then writable sections on their own pages
    off: dict[int, int] = {}
    size = 0
    def place(i: int) -> None:
      nonlocal size
      if (a := max(shdrs[i][8], 1)) > PAGE: raise ELFLoadError(f"section {names[i]} wants {a}-byte alignment")
      off[i] = size = _align(size, a)
      size += shdrs[i][5]
    for i in sorted(load):
      if not shdrs[i][2] & SHF_WRITE: place(i)
    stubs_at = _align(size, 16)
    got_at = _align(stubs_at + STUB_SIZE * len(ext_stub), 8)
    size = ro_size = _align(got_at + 8 * len(got), PAGE)
    for i in sorted(load):
      if shdrs[i][2] & SHF_WRITE: place(i)
    size = _align(size, PAGE)
    self.size = size
    base = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if base in (None, _MAP_FAILED): raise MemoryError(f"mmap of {size} bytes for a kernel failed (errno {ctypes.get_errno()})")
    self.base = base
    self._finalizer = weakref.finalize(self, _libc.munmap, base, size)
    for i in load:
      if shdrs[i][1] == SHT_PROGBITS: ctypes.memmove(base + off[i], obj[shdrs[i][4]:shdrs[i][4] + shdrs[i][5]], shdrs[i][5])
      # NOBITS: the anonymous mapping is already zero

    def addr_of(k: int) -> int:
      name_off, info, _, shndx, value, _ = syms[k]
      if shndx == SHN_UNDEF:
        name = _cstr(strtab, name_off)
        if not (a := resolve(name)): raise ELFLoadError(f"undefined symbol {name!r}")
        return a
      if shndx == SHN_ABS: return value
      if shndx == SHN_COMMON: raise ELFLoadError(f"COMMON symbol {_cstr(strtab, name_off)!r}")
      if shndx not in off: raise ELFLoadError(f"symbol {_cstr(strtab, name_off)!r} is in section {names[shndx]}, which isn't loaded")
      return base + off[shndx] + value

    for sym, j in ext_stub.items(): ctypes.memmove(base + stubs_at + j * STUB_SIZE, STUB + struct.pack("<Q", addr_of(sym)), STUB_SIZE)
    for sym, j in got.items(): ctypes.memmove(base + got_at + 8 * j, struct.pack("<Q", addr_of(sym)), 8)
    for target, rs in relas:
      for r_off, info, addend in rs:
        sym, typ = info >> 32, info & 0xFFFFFFFF
        p = base + off[target] + r_off
        if typ == R_64: val, fmt = addr_of(sym) + addend, "<Q"
        elif typ == R_PC64: val, fmt = addr_of(sym) + addend - p, "<q"
        elif typ in (R_PC32, R_PLT32):
          s = base + stubs_at + ext_stub[sym] * STUB_SIZE if typ == R_PLT32 and sym in ext_stub else addr_of(sym)
          val, fmt = s + addend - p, "<i"
        elif typ in (R_GOTPCREL, R_GOTPCRELX, R_REX_GOTPCRELX): val, fmt = base + got_at + 8 * got[sym] + addend - p, "<i"
        else: raise ELFLoadError(f"relocation type {typ} in section {names[target]}")
        if fmt == "<i" and not -(1 << 31) <= val < (1 << 31): raise ELFLoadError(f"relocation type {typ}: target {val:#x} bytes away is out of 32-bit range")
        ctypes.memmove(p, struct.pack(fmt, val & 0xFFFFFFFFFFFFFFFF if fmt == "<Q" else val), struct.calcsize(fmt))
    if _libc.mprotect(base, ro_size, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
      raise ELFLoadError(f"mprotect(PROT_EXEC) failed (errno {ctypes.get_errno()}): the system forbids executable anonymous memory")
    self.symbols = {_cstr(strtab, s[0]): addr_of(k) for k, s in enumerate(syms) if s[1] >> 4 != STB_LOCAL and s[3] != SHN_UNDEF and s[3] in off}

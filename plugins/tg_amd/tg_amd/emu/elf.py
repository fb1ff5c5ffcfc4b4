"""Read an AMDGPU ELF code object: its loadable image, symbols, kernel descriptors (`<name>.kd`) and the msgpack metadata note.

Both forms LLVM produces are accepted: the relocatable object llvmlite's `emit_object` writes (ET_REL; its sections are laid
out here and its PC-relative relocations applied, so no linker is needed) and a linked shared object (ET_DYN, e.g. `ld.lld`).
"""
from __future__ import annotations
import struct
from dataclasses import dataclass, field
from typing import Any
from tg_amd.emu.errors import AMDCodeObjectError
from tg_amd.emu.msgpack import unpackb

EM_AMDGPU, ET_REL, ET_DYN = 224, 1, 3
SHT_SYMTAB, SHT_NOTE, SHT_RELA, SHF_ALLOC = 2, 7, 4, 0x2
NT_AMDGPU_METADATA = 32
# R_AMDGPU_* relocation types (AMDGPUUsage "Relocation Records"): type -> (size in bytes, pc-relative, value transform)
_RELOCS = {1: (4, False, lambda v: v & 0xffffffff), 2: (4, False, lambda v: v >> 32 & 0xffffffff), 3: (8, False, lambda v: v),
           4: (4, True, lambda v: v & 0xffffffff), 5: (8, True, lambda v: v), 6: (4, False, lambda v: v & 0xffffffff),
           10: (4, True, lambda v: v & 0xffffffff), 11: (4, True, lambda v: v >> 32 & 0xffffffff)}
# EF_AMDGPU_MACH values (e_flags & 0xff) -> gfx name, for the archs tg targets
MACHS = {0x36: "gfx1030", 0x3f: "gfx90a", 0x41: "gfx1100", 0x44: "gfx1103", 0x46: "gfx1101", 0x47: "gfx1102", 0x4c: "gfx942", 0x4f: "gfx950",
         0x48: "gfx1200", 0x4e: "gfx1201"}  # checked against llvmlite's output for each arch

@dataclass(frozen=True)
class KernelDescriptor:
  """The 64-byte `amd_kernel_code_t` successor (AMDGPUUsage "Kernel Descriptor"), with the bit fields the dispatcher needs."""
  group_segment_fixed_size: int
  private_segment_fixed_size: int
  kernarg_size: int
  kernel_code_entry_byte_offset: int
  compute_pgm_rsrc3: int
  compute_pgm_rsrc1: int
  compute_pgm_rsrc2: int
  kernel_code_properties: int
  kernarg_preload: int

  @classmethod
  def from_bytes(cls, b: bytes) -> KernelDescriptor:
    if len(b) != 64: raise AMDCodeObjectError(f"kernel descriptor is {len(b)} bytes, expected 64")
    g, p, k = struct.unpack_from("<III", b, 0)
    entry, = struct.unpack_from("<q", b, 16)
    r3, r1, r2 = struct.unpack_from("<III", b, 44)
    props, preload = struct.unpack_from("<HH", b, 56)
    return cls(g, p, k, entry, r3, r1, r2, props, preload)

  # compute_pgm_rsrc2
  @property
  def enable_private_segment(self) -> bool: return bool(self.compute_pgm_rsrc2 & 1)
  @property
  def user_sgpr_count(self) -> int: return self.compute_pgm_rsrc2 >> 1 & 0x1f
  @property
  def workgroup_id_enabled(self) -> tuple[bool, bool, bool]: return tuple(bool(self.compute_pgm_rsrc2 >> b & 1) for b in (7, 8, 9))  # type: ignore
  @property
  def workgroup_info_enabled(self) -> bool: return bool(self.compute_pgm_rsrc2 >> 10 & 1)
  @property
  def workitem_id_dims(self) -> int: return (self.compute_pgm_rsrc2 >> 11 & 3) + 1
  # compute_pgm_rsrc1
  @property
  def float_denorm_mode_32(self) -> int: return self.compute_pgm_rsrc1 >> 16 & 3
  @property
  def float_denorm_mode_16_64(self) -> int: return self.compute_pgm_rsrc1 >> 18 & 3
  @property
  def float_round_mode_32(self) -> int: return self.compute_pgm_rsrc1 >> 12 & 3
  @property
  def ieee_mode(self) -> bool: return bool(self.compute_pgm_rsrc1 >> 23 & 1)
  # kernel_code_properties: the user SGPRs, in the order the hardware loads them, and how many SGPRs each takes
  USER_SGPRS = (("private_segment_buffer", 4), ("dispatch_ptr", 2), ("queue_ptr", 2), ("kernarg_segment_ptr", 2), ("dispatch_id", 2),
                ("flat_scratch_init", 2), ("private_segment_size", 1))
  @property
  def user_sgprs(self) -> list[tuple[str, int]]: return [(n, c) for b, (n, c) in enumerate(self.USER_SGPRS) if self.kernel_code_properties >> b & 1]
  @property
  def wavefront_size32(self) -> bool: return bool(self.kernel_code_properties >> 10 & 1)
  @property
  def uses_dynamic_stack(self) -> bool: return bool(self.kernel_code_properties >> 11 & 1)

@dataclass(frozen=True)
class KernelInfo:
  name: str
  entry: int  # byte offset of the first instruction in CodeObject.image
  code_size: int  # bytes of the kernel's function symbol (0 if the symbol has no size)
  descriptor: KernelDescriptor
  metadata: dict[str, Any]  # this kernel's entry of amdhsa.kernels (".args", ".wavefront_size", ...)

  @property
  def wavefront_size(self) -> int: return int(self.metadata.get(".wavefront_size", 32 if self.descriptor.wavefront_size32 else 64))
  @property
  def args(self) -> list[dict[str, Any]]: return list(self.metadata.get(".args", []))

@dataclass
class CodeObject:
  arch: str
  image: bytes  # every SHF_ALLOC section at its load address, relocations applied (load base 0: the code is position independent)
  symbols: dict[str, tuple[int, int]]  # name -> (address in image, size)
  kernels: dict[str, KernelInfo]
  metadata: dict[str, Any] = field(default_factory=dict)

  def kernel(self, name: str) -> KernelInfo:
    if name not in self.kernels: raise AMDCodeObjectError(f"no kernel {name!r} in the code object; it has {sorted(self.kernels)}")
    return self.kernels[name]

@dataclass(frozen=True)
class _Section:
  name: str
  type: int
  flags: int
  addr: int
  offset: int
  size: int
  link: int
  info: int
  align: int

def read_code_object(data: bytes) -> CodeObject:
  """Parse an AMDGPU code object (ELF64 little endian, e_machine EM_AMDGPU)."""
  if data[:4] != b"\x7fELF": raise AMDCodeObjectError("not an ELF file (bad magic); pass the bytes of an AMDGPU code object")
  if data[4] != 2 or data[5] != 1: raise AMDCodeObjectError("AMDGPU code objects are ELF64 little endian; this ELF is not")
  e_type, e_machine = struct.unpack_from("<HH", data, 16)
  if e_machine != EM_AMDGPU: raise AMDCodeObjectError(f"ELF e_machine is {e_machine}, not EM_AMDGPU ({EM_AMDGPU}): not an AMDGPU code object")
  if e_type not in (ET_REL, ET_DYN): raise AMDCodeObjectError(f"ELF type {e_type} is neither relocatable (1) nor shared (3)")
  e_flags, = struct.unpack_from("<I", data, 48)
  e_shoff, = struct.unpack_from("<Q", data, 40)
  e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 58)
  secs = [_Section("", *struct.unpack_from("<IIQQQQIIQ", data, e_shoff + i * e_shentsize)[1:9]) for i in range(e_shnum)]
  strtab = secs[e_shstrndx]
  secs = [
    _Section(_cstr(data, strtab.offset + struct.unpack_from("<I", data, e_shoff + i * e_shentsize)[0]), s.type, s.flags, s.addr, s.offset, s.size,
             s.link, s.info, s.align) for i, s in enumerate(secs)]
  # load addresses: a shared object has them; a relocatable object's alloc sections are placed one after another here
  base: dict[int, int] = {}
  if e_type == ET_DYN:
    for i, s in enumerate(secs):
      if s.flags & SHF_ALLOC: base[i] = s.addr
  else:
    at = 0
    for i, s in enumerate(secs):
      if s.flags & SHF_ALLOC and s.type != SHT_NOTE:
        at = -(-at // max(s.align, 1)) * max(s.align, 1)
        base[i] = at; at += s.size
  end = max((base[i] + secs[i].size for i in base), default=0)
  image = bytearray(end)
  for i, a in base.items():
    if secs[i].type != 8: image[a:a + secs[i].size] = data[secs[i].offset:secs[i].offset + secs[i].size]  # SHT_NOBITS stays zero
  # symbols
  symbols: dict[str, tuple[int, int]] = {}
  symtab_idx = next((i for i, s in enumerate(secs) if s.type == SHT_SYMTAB), None)
  if symtab_idx is None: raise AMDCodeObjectError("code object has no symbol table (.symtab); kernels are found through their .kd symbols")
  sym_list: list[tuple[str, int, int, int]] = []
  st = secs[symtab_idx]
  for off in range(st.offset, st.offset + st.size, 24):
    name_off, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, off)
    name = _cstr(data, secs[st.link].offset + name_off)
    addr = (value if e_type == ET_DYN else base.get(shndx, 0) + value) if 0 < shndx < 0xff00 else value
    sym_list.append((name, addr, size, shndx))
    if name and 0 < shndx < 0xff00 and shndx in base: symbols[name] = (addr, size)
  if e_type == ET_REL:
    for s in secs:
      if s.type == SHT_RELA and s.info in base: _apply_rela(data, s, base[s.info], sym_list, image)
  meta = _read_metadata(data, secs)
  kernels: dict[str, KernelInfo] = {}
  metas = {k[".name"]: k for k in meta.get("amdhsa.kernels", [])}
  for name, (addr, _) in symbols.items():
    if not name.endswith(".kd"): continue
    kname = name[:-3]
    kd = KernelDescriptor.from_bytes(bytes(image[addr:addr + 64]))
    entry = addr + kd.kernel_code_entry_byte_offset
    if not 0 <= entry < len(image): raise AMDCodeObjectError(f"kernel {kname!r}: entry 0x{entry:x} lies outside the code object's image")
    kernels[kname] = KernelInfo(kname, entry, symbols.get(kname, (entry, 0))[1], kd, metas.get(kname, {}))
  if not kernels: raise AMDCodeObjectError("code object has no kernel descriptor symbol (<name>.kd); compile an amdgpu_kernel function")
  return CodeObject(MACHS.get(e_flags & 0xff, f"mach0x{e_flags & 0xff:x}"), bytes(image), symbols, kernels, meta)

def _cstr(data: bytes, off: int) -> str: return data[off:data.index(b"\0", off)].decode()

def _apply_rela(data: bytes, rela: _Section, target_base: int, syms: list[tuple[str, int, int, int]], image: bytearray) -> None:
  for off in range(rela.offset, rela.offset + rela.size, 24):
    r_offset, r_info, addend = struct.unpack_from("<QQq", data, off)
    rtype, sym = r_info & 0xffffffff, r_info >> 32
    if rtype == 0: continue
    if rtype not in _RELOCS: raise AMDCodeObjectError(f"relocation type {rtype} (R_AMDGPU_*) is not supported by the emulator's loader; link with ld.lld")
    name, saddr, _, shndx = syms[sym]
    if shndx == 0: raise AMDCodeObjectError(f"relocation against undefined symbol {name!r}: the code object needs linking with its dependencies")
    size, pcrel, fn = _RELOCS[rtype]
    place = target_base + r_offset
    value = saddr + addend - (place if pcrel else 0)
    image[place:place + size] = (fn(value) & (1 << size * 8) - 1).to_bytes(size, "little")

def _read_metadata(data: bytes, secs: list[_Section]) -> dict[str, Any]:
  for s in secs:
    if s.type != SHT_NOTE: continue
    off, endoff = s.offset, s.offset + s.size
    while off + 12 <= endoff:
      namesz, descsz, ntype = struct.unpack_from("<III", data, off)
      name = data[off + 12:off + 12 + namesz].rstrip(b"\0")
      desc_off = off + 12 + (namesz + 3) // 4 * 4
      if name == b"AMDGPU" and ntype == NT_AMDGPU_METADATA: return unpackb(data[desc_off:desc_off + descsz])
      off = desc_off + (descsz + 3) // 4 * 4
  return {}

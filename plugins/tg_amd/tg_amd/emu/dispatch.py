"""Dispatch a kernel of a code object on the emulator: the work a GPU's command processor and SPI do for one AQL packet."""
from __future__ import annotations
import hashlib
import struct
from dataclasses import dataclass
import numpy as np
from tg_amd.emu.decoder import decode
from tg_amd.emu.elf import CodeObject, KernelInfo, read_code_object
from tg_amd.emu.errors import AMDEmuError, AMDEmuUnsupportedError
from tg_amd.emu.memory import Memory
from tg_amd.emu.wave import END, Program, Wave, compile_program, run_wave

@dataclass
class DispatchStats:
  instructions: int  # wave-instructions executed (one per wave per instruction, whatever EXEC holds)
  waves: int
  workgroups: int

_LOADED: dict[bytes, tuple[CodeObject, dict[str, Program]]] = {}

def load(code_object: bytes | CodeObject) -> tuple[CodeObject, dict[str, Program]]:
  """Parse, decode and compile a code object once (cached by content)."""
  if isinstance(code_object, CodeObject): co, key = code_object, hashlib.sha256(code_object.image).digest()
  else:
    key = hashlib.sha256(code_object).digest()
    if key in _LOADED: return _LOADED[key]
    co = read_code_object(code_object)
  if key not in _LOADED:
    if not co.arch.startswith(("gfx11", "gfx942")):
      raise AMDEmuUnsupportedError(f"{co.arch} code object; the emulator runs gfx11 (RDNA3) and gfx942 (CDNA3)", 0, ())
    progs = {}
    for name, k in co.kernels.items():
      end = k.entry + k.code_size if k.code_size else len(co.image)
      gfx9 = co.arch.startswith("gfx9")
      progs[name] = compile_program(decode(co.image, k.entry, end, co.arch), k.wavefront_size, gfx9)
    _LOADED[key] = (co, progs)
  return _LOADED[key]

def build_kernargs(kernel: KernelInfo, explicit: bytes, grid: tuple[int, int, int], block: tuple[int, int, int]) -> bytes:
  """The kernarg segment: the explicit arguments followed by the hidden ones the metadata asks for (block counts, group sizes...)."""
  buf = bytearray(max(kernel.descriptor.kernarg_size, len(explicit)))
  buf[:len(explicit)] = explicit
  hidden = {"hidden_block_count_x": grid[0], "hidden_block_count_y": grid[1], "hidden_block_count_z": grid[2],
            "hidden_group_size_x": block[0], "hidden_group_size_y": block[1], "hidden_group_size_z": block[2],
            "hidden_remainder_x": 0, "hidden_remainder_y": 0, "hidden_remainder_z": 0,
            "hidden_grid_dims": sum(1 for g, b in zip(grid, block) if g * b > 1) or 1}
  for arg in kernel.args:
    kind = arg.get(".value_kind", "")
    if kind in hidden: buf[arg[".offset"]:arg[".offset"] + arg[".size"]] = hidden[kind].to_bytes(arg[".size"], "little")
  return bytes(buf)

def _dispatch_packet(grid: tuple[int, int, int], block: tuple[int, int, int], kernarg_addr: int, group: int, private: int) -> bytes:
  # hsa_kernel_dispatch_packet_t: header, setup, workgroup_size_xyz, grid_size_xyz (in work-items), segment sizes, kernel object, kernarg address
  return struct.pack("<HHHHHHIIIIIQQQ", 2, 3, *block, 0, *(g * b for g, b in zip(grid, block)), private, group, 0, kernarg_addr, 0)

def run_kernel(code_object: bytes | CodeObject, kernel_name: str, kernargs: bytes, grid: tuple[int, ...], block: tuple[int, ...], memory: Memory,
               dynamic_lds: int = 0, max_instructions: int = 200_000_000) -> DispatchStats:
  """Run kernel `kernel_name` over `grid` workgroups (x, y, z) of `block` work-items; `kernargs` are the explicit arguments
  (pointers into `memory`), hidden arguments are appended from the metadata. Waves of a workgroup run in turn, switching at s_barrier.
  More than `max_instructions` wave-instructions in total raise AMDEmuError (a kernel that never ends must not hang the caller)."""
  co, progs = load(code_object)
  k = co.kernel(kernel_name)
  prog = progs[kernel_name]
  g3, b3 = tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block))
  if any(x < 1 for x in g3 + b3): raise AMDEmuError(f"grid {g3} and block {b3} must be positive in every dimension")
  nthreads = b3[0] * b3[1] * b3[2]
  if nthreads > 1024: raise AMDEmuError(f"a workgroup of {nthreads} work-items exceeds the hardware limit of 1024")
  kd, lanes = k.descriptor, k.wavefront_size
  code_base = memory.map_code(co.image)
  args = memory.alloc_bytes(build_kernargs(k, kernargs, g3, b3), 64)  # type: ignore[arg-type]
  lds_size = kd.group_segment_fixed_size + dynamic_lds
  packet = memory.alloc_bytes(_dispatch_packet(g3, b3, args, lds_size, kd.private_segment_fixed_size), 64)  # type: ignore[arg-type]
  queue = memory.alloc(256)
  nwaves = -(-nthreads // lanes)
  tid = np.arange(nwaves * lanes)
  tx, ty, tz = tid % b3[0], tid // b3[0] % b3[1], tid // (b3[0] * b3[1])
  packed_ids = (tx | ty << 10 | tz << 20).astype(np.uint32)
  nvgpr = 256 if lanes == 32 else 512
  stats = DispatchStats(0, 0, 0)
  budget = [0]
  try:
    with np.errstate(all="ignore"):
      for gz in range(g3[2]):
        for gy in range(g3[1]):
          for gx in range(g3[0]):
            lds = np.zeros(max(lds_size, 4), np.uint8)
            waves = []
            for wi in range(nwaves):
              w = Wave(lanes, nvgpr, memory, lds, np.zeros((lanes, max(kd.private_segment_fixed_size, 4)), np.uint8), code_base)
              _init_sgprs(w, k, args, packet, queue, (gx, gy, gz))
              w.v[0] = packed_ids[wi * lanes:(wi + 1) * lanes]
              w.set_exec(sum(1 << i for i in range(lanes) if wi * lanes + i < nthreads))
              waves.append(w)
            _run_workgroup(waves, prog, k.entry, budget, max_instructions)
            stats.workgroups += 1; stats.waves += nwaves
  finally:
    memory.free(args); memory.free(packet); memory.free(queue)
  stats.instructions = budget[0]
  return stats

def _init_sgprs(w: Wave, k: KernelInfo, kernargs: int, packet: int, queue: int, wg: tuple[int, int, int]) -> None:
  kd, at = k.descriptor, 0
  values = {"dispatch_ptr": packet, "queue_ptr": queue, "kernarg_segment_ptr": kernargs, "dispatch_id": 0, "flat_scratch_init": 0,
            "private_segment_size": kd.private_segment_fixed_size, "private_segment_buffer": 0}
  for name, n in kd.user_sgprs:
    v = values[name]
    for j in range(n): w.s[at + j] = v >> (32 * j) & 0xffffffff if j < 2 else 0
    at += n
  at = kd.user_sgpr_count
  for enabled, gid in zip(kd.workgroup_id_enabled, wg):
    if enabled: w.s[at] = gid; at += 1
  if kd.workgroup_info_enabled: raise AMDEmuUnsupportedError("kernel descriptor asks for the workgroup-info SGPR", k.entry, ())
  if kd.enable_private_segment: w.s[at] = 0  # private segment wave offset: each wave's scratch is its own array here

def _run_workgroup(waves: list[Wave], prog: Program, entry: int, budget: list[int], limit: int) -> None:
  pcs = [prog.index[entry]] * len(waves)
  live = list(range(len(waves)))
  while live:
    for wi in live: pcs[wi] = run_wave(waves[wi], prog, pcs[wi], budget, limit)
    # every live wave stopped at a barrier or ended; those at the barrier resume together
    live = [wi for wi in live if pcs[wi] != END]

"""One core's peak multiply-accumulate rate per instruction kind, measured: the roofline a CPU matmul is judged against.

Each kind runs a JIT-compiled loop (llvmlite, the host's CPU and features as tg_cpu_x86 reads them) of many independent accumulator chains, so the
loop runs at the instructions' throughput, not their latency; timed by this thread's CPU time, best of --runs. Kinds, where the
host has them: fp32 FMA (llvm.fma on the widest vector), int8 dot products (AVX512-VNNI vpdpbusd: u8 x s8, 4 products per
int32 lane) and int16 pair dot products (vpdpwssd: 2 per lane), bf16 pair dot products (AVX512_BF16 vdpbf16ps). Printed as
GMAC/s (a multiply-accumulate is 2 flops or ops) and as a ratio to fp32.

  python bench/cpu_peak.py [--runs 5]"""
from __future__ import annotations
import argparse
import ctypes
import os
import time

from _timing import cpu_model

CHAINS = 12  # independent accumulators: more than an FMA's latency x its throughput on current x86 cores
ITERS = 1 << 20

def _kinds(feat: set[str]) -> dict[str, tuple[str, str, str, bool, int]]:
  """kind -> (accumulator type, operand type, intrinsic, whether the accumulator is its first argument (else its last, as
  llvm.fma's), MACs per instruction)."""
  w = 16 if "avx512f" in feat else 8
  f32, i32, bf = f"<{w} x float>", f"<{w} x i32>", f"<{2 * w} x bfloat>"
  kinds = {"fp32 fma": (f32, f32, f"llvm.fma.v{w}f32", False, w)}
  bits = 512 if w == 16 else 256
  if ("avx512vnni" in feat and w == 16) or ("avxvnni" in feat and w == 8):
    # (the 256-bit intrinsics are AVX512-VL's; LLVM gives them AVX-VNNI's encoding on a host without AVX-512)
    kinds["int8 vpdpbusd"] = (i32, i32, f"llvm.x86.avx512.vpdpbusd.{bits}", True, 4 * w)
    kinds["int16 vpdpwssd"] = (i32, i32, f"llvm.x86.avx512.vpdpwssd.{bits}", True, 2 * w)
  if "avx512bf16" in feat:
    kinds["bf16 vdpbf16ps"] = (f32, bf, f"llvm.x86.avx512bf16.dpbf16ps.{bits}", True, 2 * w)
  return kinds

def _module(acc: str, op: str, fn: str, acc_first: bool) -> str:
  """A function run(out, in, iters): CHAINS accumulators, each stepped `iters` times by `fn` on two operands read from `in`,
  their sum stored to `out` (so nothing is dead)."""
  def call(c: int) -> str:
    args = [f"{op} %a{c % 2}", f"{op} %b"]
    return f"call {acc} @{fn}({', '.join([f'{acc} %c{c}', *args] if acc_first else [*args, f'{acc} %c{c}'])})"
  phis = [f"  %c{c} = phi {acc} [ zeroinitializer, %entry ], [ %n{c}, %loop ]" for c in range(CHAINS)]
  body = [f"  %n{c} = {call(c)}" for c in range(CHAINS)]
  add = "fadd" if "float" in acc else "add"
  sums = [f"  %s{c} = {add} {acc} {'%n0' if c == 1 else f'%s{c - 1}'}, %n{c}" for c in range(1, CHAINS)]
  arg_types = ", ".join([acc, op, op] if acc_first else [op, op, acc])
  prev = f"%s{CHAINS - 1}"
  return f"""
declare {acc} @{fn}({arg_types})
define void @run(ptr %out, ptr %in, i64 %iters) {{
entry:
  %a0 = load {op}, ptr %in, align 1
  %p1 = getelementptr {op}, ptr %in, i64 1
  %a1 = load {op}, ptr %p1, align 1
  %p2 = getelementptr {op}, ptr %in, i64 2
  %b = load {op}, ptr %p2, align 1
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
{chr(10).join(phis)}
{chr(10).join(body)}
  %i1 = add i64 %i, 1
  %done = icmp eq i64 %i1, %iters
  br i1 %done, label %exit, label %loop
exit:
{chr(10).join(sums)}
  store {acc} {prev}, ptr %out, align 1
  ret void
}}"""

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--runs", type=int, default=5, help="timed runs per kind, best kept (default 5)")
  a = ap.parse_args()
  import llvmlite.binding as llvm
  llvm.initialize_native_target()
  llvm.initialize_native_asmprinter()
  from tg_cpu_x86.compiler import host_target
  from tg_cpu_x86.device import host_features
  triple, cpu, features = host_target()
  feat = {f[1:] for f in host_features() if f.startswith("+")}
  print(f"CPU: {cpu_model()} ({cpu}, {os.cpu_count()} cores), one thread, thread CPU time, best of {a.runs}, "
        f"load average {os.getloadavg()[0]:.1f}")
  buf = (ctypes.c_uint8 * 4096)(*([1] * 4096))
  out = (ctypes.c_uint8 * 256)()
  rates: dict[str, float] = {}
  engines = []
  for kind, (acc, op, fn, acc_first, macs) in _kinds(feat).items():
    mod = llvm.parse_assembly(_module(acc, op, fn, acc_first))
    mod.verify()
    # a target machine per engine: the engine takes ownership of it
    target = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=2, jit=True)
    ee = llvm.create_mcjit_compiler(mod, target)
    ee.finalize_object()
    engines.append(ee)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(ee.get_function_address("run"))
    fn(ctypes.addressof(out), ctypes.addressof(buf), 1000)
    best = min(_timed(fn, out, buf) for _ in range(a.runs))
    rates[kind] = CHAINS * ITERS * macs / best / 1e9
  for kind, r in rates.items():
    print(f"{kind:16s} {r:8.1f} GMAC/s per core   {r / rates['fp32 fma']:5.2f}x fp32")

def _timed(fn, out, buf) -> float:
  st = time.thread_time()
  fn(ctypes.addressof(out), ctypes.addressof(buf), ITERS)
  return time.thread_time() - st

if __name__ == "__main__":
  main()

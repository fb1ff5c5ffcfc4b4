"""The small ELF loader behind CPUProgram: the relocations LLVM emits for calls into libc/libm (PLT32 through a stub), addresses
taken through the GOT, writable data, the MCJIT fallback, and what a loaded kernel costs in resident memory."""
from __future__ import annotations
import ctypes
import gc
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tg_cpu_x86.device import _compiler
from tg_cpu_x86.elf import ELFLoadError, LoadedObject
from tg_cpu_x86.runtime import CPUProgram

def kernel(name: str, body: str, extra: str = "") -> bytes:
  """An object with one kernel of the runtime's ABI: `i64 tg_<name>(ptr bufs, ptr vals, i32 core, i32 n_cores)`."""
  return _compiler().compile(f"{extra}\ndefine i64 @tg_{name}(ptr %bufs, ptr %vals, i32 %core, i32 %n) {{\n{body}\n}}\n")

class Buf:
  """What CPUProgram reads of a buffer: its address."""
  def __init__(self, a: np.ndarray): self.a, self.addr = a, a.ctypes.data

def test_calls_into_libm_and_libc_through_stubs():
  # exp2f and memset are outside the object: R_X86_64_PLT32 calls, reached through the loader's stubs
  lib = kernel("ext", """
  %out = load ptr, ptr %bufs
  %ip = getelementptr ptr, ptr %bufs, i64 1
  %in = load ptr, ptr %ip
  %nv = load i32, ptr %vals
  %n64 = sext i32 %nv to i64
  call void @llvm.memset.p0.i64(ptr %out, i8 0, i64 %n64, i1 false)
  %x = load float, ptr %in
  %y = call float @exp2f(float %x)
  %o = getelementptr i8, ptr %out, i64 %n64
  store float %y, ptr %o
  ret i64 0""", "declare float @exp2f(float)\ndeclare void @llvm.memset.p0.i64(ptr, i8, i64, i1)")
  prg = CPUProgram("CPU", "ext", lib)
  assert isinstance(prg._image, LoadedObject)
  out, x = Buf(np.full(68, 0xAB, np.uint8)), Buf(np.array([3.7], np.float32))
  prg(out, x, vals=(64,))
  assert (out.a[:64] == 0).all()
  assert out.a[64:].view(np.float32)[0] == np.exp2(np.float32(3.7))

def test_address_through_the_got_and_writable_data():
  # @exp2f's address is loaded through the GOT (GOTPCREL*); @count lives in a writable section the kernel updates
  lib = kernel("got", """
  %out = load ptr, ptr %bufs
  store ptr @exp2f, ptr %out
  %c = load i64, ptr @count
  %c1 = add i64 %c, 1
  store i64 %c1, ptr @count
  ret i64 %c1""", "declare float @exp2f(float)\n@count = global i64 0")
  prg = CPUProgram("CPU", "got", lib)
  assert isinstance(prg._image, LoadedObject)
  out = Buf(np.zeros(1, np.uint64))
  assert [prg.fxn(ctypes.cast(ctypes.pointer(ctypes.c_void_p(out.addr)), ctypes.c_void_p), None, 0, 1) for _ in range(3)] == [1, 2, 3]
  assert int(out.a[0]) == ctypes.cast(ctypes.CDLL(None).exp2f, ctypes.c_void_p).value  # the process's libm, as the dynamic linker resolves it

def test_rejects_what_it_does_not_handle():
  with pytest.raises(ELFLoadError, match="not an ELF"): LoadedObject(b"hello", lambda s: 0)
  tls = kernel("tls", "  %v = load i32, ptr @t\n  %w = sext i32 %v to i64\n  ret i64 %w", "@t = thread_local global i32 7")
  with pytest.raises(ELFLoadError, match="thread-local"): LoadedObject(tls, lambda s: 0)
  undef = kernel("undef", "  %v = call i64 @no_such_function_here()\n  ret i64 %v", "declare i64 @no_such_function_here()")
  with pytest.raises(ELFLoadError, match="no_such_function_here"): LoadedObject(undef, lambda s: 0)

def test_falls_back_to_mcjit(monkeypatch: pytest.MonkeyPatch):
  from tg_cpu_x86 import runtime
  def refuse(*a: object) -> None: raise ELFLoadError("refused by the test")
  monkeypatch.setattr(runtime, "LoadedObject", refuse)
  lib = kernel("fb", "  %out = load ptr, ptr %bufs\n  %x = load float, ptr %out\n  %y = call float @exp2f(float %x)\n  store float %y, ptr %out\n  ret i64 0",
               "declare float @exp2f(float)\n@tg_fb_work = constant i64 9")
  prg = CPUProgram("CPU", "fb", lib)
  assert not isinstance(prg._image, LoadedObject) and prg.work_per_iter == 9
  out = Buf(np.array([5.0], np.float32))
  prg.fxn(ctypes.cast(ctypes.pointer(ctypes.c_void_p(out.addr)), ctypes.c_void_p), None, 0, 1)  # core 0 of 1 (the kernel ignores the split ABI)
  assert out.a[0] == 32.0

def test_work_symbol_and_unmapping():
  lib = kernel("w", "  ret i64 0", "@tg_w_work = constant i64 1234")
  prg = CPUProgram("CPU", "w", lib)
  assert prg.work_per_iter == 1234
  fin = prg._image._finalizer
  del prg
  gc.collect()
  assert not fin.alive  # the mapping is gone with the program

def test_resident_memory_per_kernel():
  """Loading 300 distinct kernels costs a few KB of resident memory each (one MCJIT engine per kernel cost ~45 KB)."""
  code = textwrap.dedent("""
    import gc
    from tg_cpu_x86.device import _compiler
    from tg_cpu_x86.runtime import CPUProgram
    def rss():
      with open("/proc/self/status") as f: return int(next(l for l in f if l.startswith("VmRSS")).split()[1])
    libs = [_compiler().compile(f"define i64 @tg_k{i}(ptr %b, ptr %v, i32 %c, i32 %n) {{\\n  %p = load ptr, ptr %b\\n"
                                f"  %x = load float, ptr %p\\n  %y = fadd float %x, {i}.5\\n  store float %y, ptr %p\\n  ret i64 0\\n}}\\n")
            for i in range(301)]
    CPUProgram("CPU", "k300", libs.pop())  # first-use setup (symbols, imports) is not per kernel
    gc.collect()
    before = rss()
    progs = [CPUProgram("CPU", f"k{i}", lib) for i, lib in enumerate(libs)]
    print((rss() - before) / len(progs))
  """)
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  per_kernel_kb = float(r.stdout.split()[-1])
  assert per_kernel_kb <= 16, f"{per_kernel_kb:.1f} KB resident per loaded kernel"

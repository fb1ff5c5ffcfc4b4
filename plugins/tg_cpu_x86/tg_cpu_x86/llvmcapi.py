"""The few entry points of llvmlite's shared library (its `LLVMPY_*` C API) that compiling a kernel and host detection need,
called through ctypes directly.

Importing `llvmlite.binding` runs its Python wrappers for the whole C API (and llvmlite.ir, tempfile, importlib.resources, ...):
most of what setting LLVM up costs a cold first kernel, where loading the library itself is a small part. A compile (parse, verify,
the always-inliner or the default pipeline at a speed level, emit an object) needs a few dozen functions: this module declares only those, on the same
library file llvmlite.binding loads (one copy of LLVM in the process), and makes the same calls with the same arguments, so the
object is byte-for-byte what llvmlite.binding would emit (tests/test_llvmcapi.py compares them).

The `LLVMPY_*` functions are llvmlite's internal ABI: `available()` is False for a llvmlite version these declarations weren't
checked against (or a library that isn't where llvmlite keeps it), and the compiler then uses llvmlite.binding."""
from __future__ import annotations
import ctypes
import os
import sys
import threading

import llvmlite  # the version only: llvmlite/__init__.py imports nothing else

# llvmlite versions (major.minor) whose LLVMPY_* signatures below were checked against their binding's declarations
CHECKED_VERSIONS = ("0.50",)

_P = ctypes.c_void_p
_S = ctypes.c_char_p
_OUT = ctypes.POINTER(ctypes.c_char_p)
# name: (restype, argtypes), as llvmlite.binding declares them (its ffi, module, targets, context, newpassmanagers)
_SIGS: dict[str, tuple[object, list[object]]] = {
  "LLVMPY_GetVersionInfo": (ctypes.c_uint, []),
  "LLVMPY_InitializeNativeTarget": (ctypes.c_int, []),
  "LLVMPY_InitializeNativeAsmPrinter": (ctypes.c_int, []),
  "LLVMPY_DisposeString": (None, [_S]),
  "LLVMPY_GetProcessTriple": (None, [_OUT]),
  "LLVMPY_GetHostCPUName": (None, [_OUT]),
  "LLVMPY_GetHostCPUFeatures": (ctypes.c_int, [_OUT]),
  "LLVMPY_GetTargetFromTriple": (_P, [_S, _OUT]),
  "LLVMPY_CreateTargetMachine": (_P, [_P, _S, _S, _S, ctypes.c_int, _S, _S, ctypes.c_int, ctypes.c_int, _S]),
  "LLVMPY_DisposeTargetMachine": (None, [_P]),
  "LLVMPY_CreateTargetMachineData": (_P, [_P]),
  "LLVMPY_CopyStringRepOfTargetData": (None, [_P, _OUT]),
  "LLVMPY_DisposeTargetData": (None, [_P]),
  "LLVMPY_ContextCreate": (_P, []),
  "LLVMPY_ContextDispose": (None, [_P]),
  "LLVMPY_ParseAssembly": (_P, [_P, _S, _OUT]),
  "LLVMPY_DisposeModule": (None, [_P]),
  "LLVMPY_VerifyModule": (ctypes.c_bool, [_P, _OUT]),
  "LLVMPY_SetTarget": (None, [_P, _S]),
  "LLVMPY_SetDataLayout": (None, [_P, _S]),
  "LLVMPY_CreatePipelineTuningOptions": (_P, []),
  "LLVMPY_DisposePipelineTuningOptions": (None, [_P]),
  "LLVMPY_CreatePassBuilder": (_P, [_P, _P]),
  "LLVMPY_DisposePassBuilder": (None, [_P]),
  "LLVMPY_CreateNewModulePassManager": (_P, []),
  "LLVMPY_DisposeNewModulePassManger": (None, [_P]),  # sic: llvmlite's spelling
  "LLVMPY_module_AddAlwaysInlinerPass": (None, [_P]),
  "LLVMPY_PTOSetLoopVectorization": (None, [_P, ctypes.c_bool]),
  "LLVMPY_PTOSetSLPVectorization": (None, [_P, ctypes.c_bool]),
  "LLVMPY_PTOSetLoopUnrolling": (None, [_P, ctypes.c_bool]),
  "LLVMPY_PTOSetLoopInterleaving": (None, [_P, ctypes.c_bool]),
  "LLVMPY_buildPerModuleDefaultPipeline": (_P, [_P, ctypes.c_int]),
  "LLVMPY_RunNewModulePassManager": (None, [_P, _P, _P]),
  "LLVMPY_TargetMachineEmitToMemory": (_P, [_P, _P, ctypes.c_int, _OUT]),
  "LLVMPY_GetBufferStart": (_P, [_P]),
  "LLVMPY_GetBufferSize": (ctypes.c_size_t, [_P]),
  "LLVMPY_DisposeMemoryBuffer": (None, [_P]),
}

class _Lib:
  """The declared functions of libllvmlite, as attributes."""
  def __init__(self, cdll: ctypes.CDLL):
    for name, (res, args) in _SIGS.items():
      fn = getattr(cdll, name)
      fn.restype, fn.argtypes = res, args
      setattr(self, name, fn)

_lock = threading.Lock()
_lib: _Lib | None = None
_failed = False

def _library_path() -> str:
  name = {"darwin": "libllvmlite.dylib", "win32": "llvmlite.dll"}.get(sys.platform, "libllvmlite.so")
  return os.path.join(os.path.dirname(llvmlite.__file__), "binding", name)

def available() -> bool:
  """Can this module compile here: a checked llvmlite version, and its library loads with every declared function."""
  return lib() is not None

def lib() -> _Lib | None:
  """The library with the native target and asm printer initialized, loaded on first call; None where `available()` is False."""
  global _lib, _failed
  if _lib is not None or _failed: return _lib
  with _lock:
    if _lib is None and not _failed:
      if ".".join(llvmlite.__version__.split(".")[:2]) not in CHECKED_VERSIONS: _failed = True
      else:
        try: ret = _Lib(ctypes.CDLL(_library_path()))
        except (OSError, AttributeError): _failed = True
        else:
          ret.LLVMPY_InitializeNativeTarget()
          ret.LLVMPY_InitializeNativeAsmPrinter()
          _lib = ret
  return _lib

def _out(fn: object, *args: object) -> tuple[object, str]:
  """Call `fn(*args, &out)` where LLVM hands back a string it allocated: (fn's result, the string), the string freed."""
  out = ctypes.c_char_p(None)
  ret = fn(*args, ctypes.byref(out))  # type: ignore[operator]
  s = (out.value or b"").decode("utf-8", "replace")
  if out.value is not None: _need().LLVMPY_DisposeString(out)
  return ret, s

def _need() -> _Lib:
  if (ret := lib()) is None: raise RuntimeError("llvmlite's C API is not available here (tg_cpu_x86.llvmcapi.available() is False)")
  return ret

def version() -> str:
  """LLVM's version, "major.minor.patch", as llvmlite.binding.llvm_version_info reports it."""
  v = _need().LLVMPY_GetVersionInfo()
  return f"{(v >> 16) & 0xff}.{(v >> 8) & 0xff}.{v & 0xff}"

def process_triple() -> str: return _out(_need().LLVMPY_GetProcessTriple)[1]
def host_cpu_name() -> str: return _out(_need().LLVMPY_GetHostCPUName)[1]

def host_cpu_features() -> str:
  """The host's features as llvmlite's `get_host_cpu_features().flatten()` writes them: "+name"/"-name", sorted by name,
  comma-separated; "" where LLVM can't tell."""
  ok, s = _out(_need().LLVMPY_GetHostCPUFeatures)
  if not ok: return ""
  feats = {f[1:]: f[0] == "+" for f in s.split(",") if f}
  return ",".join(f"{'+' if v else '-'}{k}" for k, v in sorted(feats.items()))

class TargetMachine:
  """An LLVM target machine (the arguments of llvmlite's `Target.create_target_machine`) that compiles IR text to object bytes."""
  def __init__(self, triple: str, cpu: str, features: str, opt: int, reloc: str = "pic", codemodel: str = "default"):
    L = _need()
    target, err = _out(L.LLVMPY_GetTargetFromTriple, triple.encode())
    if not target: raise RuntimeError(f"LLVM has no target for {triple!r}: {err}")
    self.triple, self._L = triple, L
    self._tm = L.LLVMPY_CreateTargetMachine(target, triple.encode(), cpu.encode(), features.encode(), opt, reloc.encode(), codemodel.encode(),
                                            0, 0, b"")
    if not self._tm: raise RuntimeError(f"LLVM could not make a target machine for {triple!r}, cpu {cpu!r}")
    td = L.LLVMPY_CreateTargetMachineData(self._tm)
    try: self.data_layout = _out(L.LLVMPY_CopyStringRepOfTargetData, td)[1]
    finally: L.LLVMPY_DisposeTargetData(td)

  def __del__(self) -> None:
    if getattr(self, "_tm", None) and not sys.is_finalizing(): self._L.LLVMPY_DisposeTargetMachine(self._tm)

  def compile(self, src: str, level: int, asm: bool = False) -> bytes:
    """Parse and verify `src`, optimize it and emit an object (`asm`: assembly text). `level` 0 runs the always-inliner alone,
    1-3 LLVM's default module pipeline at that speed level with loop/SLP vectorization, unrolling and interleaving on (what
    tg_cpu_x86.compiler asked llvmlite.binding for). Raises RuntimeError with LLVM's message on bad IR. Not thread-safe per
    target machine: the caller serializes."""
    L = self._L
    ctx = L.LLVMPY_ContextCreate()  # a context of its own: llvmlite.binding's global one may be in use on another thread
    try:
      mod, err = _out(L.LLVMPY_ParseAssembly, ctx, src.encode())
      if not mod: raise RuntimeError(f"LLVM IR parsing error\n{err}")
      try:
        bad, err = _out(L.LLVMPY_VerifyModule, mod)
        if bad: raise RuntimeError(err)
        L.LLVMPY_SetTarget(mod, self.triple.encode())
        L.LLVMPY_SetDataLayout(mod, self.data_layout.encode())
        pto = L.LLVMPY_CreatePipelineTuningOptions()
        if level > 0:
          for setter in (L.LLVMPY_PTOSetLoopVectorization, L.LLVMPY_PTOSetSLPVectorization, L.LLVMPY_PTOSetLoopUnrolling,
                         L.LLVMPY_PTOSetLoopInterleaving): setter(pto, True)
        pb = L.LLVMPY_CreatePassBuilder(self._tm, pto)
        if level > 0: mpm = L.LLVMPY_buildPerModuleDefaultPipeline(pb, level)
        else:
          mpm = L.LLVMPY_CreateNewModulePassManager()
          L.LLVMPY_module_AddAlwaysInlinerPass(mpm)
        try: L.LLVMPY_RunNewModulePassManager(mpm, mod, pb)
        finally:
          L.LLVMPY_DisposeNewModulePassManger(mpm)
          L.LLVMPY_DisposePassBuilder(pb)
          L.LLVMPY_DisposePipelineTuningOptions(pto)
        mb, err = _out(L.LLVMPY_TargetMachineEmitToMemory, self._tm, mod, 0 if asm else 1)
        if not mb: raise RuntimeError(err)
        try: return ctypes.string_at(L.LLVMPY_GetBufferStart(mb), L.LLVMPY_GetBufferSize(mb))
        finally: L.LLVMPY_DisposeMemoryBuffer(mb)
      finally: L.LLVMPY_DisposeModule(mod)
    finally: L.LLVMPY_ContextDispose(ctx)

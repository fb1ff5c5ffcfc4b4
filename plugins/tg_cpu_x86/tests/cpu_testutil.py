"""Helpers for the plugin's tests: build small linear programs by hand and run them on the CPU backend and on tg_core's
PYTHON reference interpreter (ops_python, which defines the semantics of every op)."""
from __future__ import annotations
from typing import Callable, Sequence

import numpy as np

from tg_core.codegen.linearize import linearize
from tg_core.dtype import AddrSpace, DType, _to_np_dtype, dtypes
from tg_core.runtime.ops_python import PythonCompiler, PythonProgram, PythonRenderer
from tg_core.uop import Ops
from tg_core.uop.ops import AxisType, KernelInfo, ParamArg, UOp

def param(slot: int, dt: DType, n: int) -> UOp: return UOp(Ops.PARAM, dt, arg=ParamArg(slot, dt, n))
def var(name: str, lo: int, hi: int) -> UOp:
  return UOp(Ops.PARAM, dtypes.int32, arg=ParamArg(-1, dtypes.int32, None, (lo, hi), None, name, AddrSpace.ALU))
def c(v: object, dt: DType) -> UOp: return UOp.const(dt, v)  # type: ignore[arg-type]
def rng(n: int | UOp, axis: int = 0, kind: AxisType = AxisType.LOOP) -> UOp:
  return UOp(Ops.RANGE, dtypes.int32, (n if isinstance(n, UOp) else c(n, dtypes.int32),), (axis, kind))

def elementwise(fn: Callable[..., UOp], in_dts: Sequence[DType], out_dt: DType, n: int, name: str = "k") -> list[UOp]:
  """The linear program `out[i] = fn(in0[i], in1[i], ...)` for i < n (out is slot 0)."""
  ins = [param(i + 1, dt, n) for i, dt in enumerate(in_dts)]
  r = rng(n)
  st = param(0, out_dt, n).index(r).store(fn(*[p.index(r).load() for p in ins]))
  return linearize(UOp.sink(st.end(r), arg=KernelInfo(name=name)))

def _bytes(a: np.ndarray) -> bytearray: return bytearray(np.ascontiguousarray(a).tobytes())

def run_python(uops: list[UOp], out: tuple[DType, int], ins: Sequence[np.ndarray], vals: tuple[int, ...] = ()) -> np.ndarray:
  ob = bytearray(out[0].itemsize * out[1])
  lib = PythonCompiler().compile(PythonRenderer().render(uops))
  PythonProgram("PYTHON", "k", lib)(memoryview(ob), *[memoryview(_bytes(a)) for a in ins], vals=vals)
  return np.frombuffer(ob, dtype=_to_np_dtype(out[0])).copy()

def compile_cpu(uops: list[UOp]):  # noqa: ANN201
  from tg_cpu_x86.device import _compiler
  from tg_cpu_x86.renderer import LLVMRenderer
  from tg_cpu_x86.runtime import CPUProgram
  src = LLVMRenderer().render(uops)
  name = uops[-1].arg.name
  return CPUProgram("CPU", name, _compiler().compile(src)), src

def run_cpu(uops: list[UOp], out: tuple[DType, int], ins: Sequence[np.ndarray], vals: tuple[int, ...] = ()) -> np.ndarray:
  from tg_cpu_x86.allocator import CPUAllocator
  from tg_core.device import BufferSpec
  prg, _ = compile_cpu(uops)
  al = CPUAllocator()
  ob = al._alloc(out[0].itemsize * out[1], BufferSpec())
  ibs = []
  for a in ins:
    b = al._alloc(a.nbytes, BufferSpec())
    b.mv[:] = memoryview(_bytes(a))
    ibs.append(b)
  prg(ob, *ibs, vals=vals)
  return np.frombuffer(bytes(ob.mv), dtype=_to_np_dtype(out[0])).copy()

def same(a: np.ndarray, b: np.ndarray) -> None:
  """Bitwise equal (NaNs compare by bits, so -0.0 != 0.0 and NaN == NaN of the same payload)."""
  assert a.dtype == b.dtype and a.shape == b.shape
  if a.dtype.kind == "f":
    ia, ib = a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}")
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    np.testing.assert_array_equal(nan_a, nan_b)
    np.testing.assert_array_equal(ia[~nan_a], ib[~nan_b])
  else: np.testing.assert_array_equal(a, b)

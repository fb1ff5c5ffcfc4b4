"""The spec tables: well-formed graphs of every stage pass, malformed nodes raise SpecError naming the node."""
import pytest

from tg_core.dtype import AddrSpace, dtypes
from tg_core.helpers import Context
from tg_core.uop import Ops
from tg_core.uop.ops import AxisType, CallInfo, KernelInfo, ParamArg, UOp
from tg_core.uop.spec import (SpecError, spec_check, spec_hcq, spec_kernel_graph, spec_program, spec_shared, spec_tensor, type_verify,
                              verify_if_spec)

def buf(size=12, dtype=dtypes.float32, device="CPU"): return UOp.new_buffer(device, size, dtype)
def fconst(v, shape=(3, 4)): return UOp.const(dtypes.float32, v, shape=shape)

# *** well-formed graphs ***

def test_tensor_graph_valid():
  a, b = buf().reshape((3, 4)), buf().reshape((3, 4))
  x = ((a + b).sin() < a).where(a, b * fconst(2.0)).exp2().log2().sqrt().reciprocal()
  x = x.r(Ops.ADD, (1,)).permute((1, 0)).expand((5, 3)).pad(((0, 1), (1, 0))).shrink(((0, 2), (0, 3))).flip((True, False))
  y = x.cast(dtypes.int32)
  y = (y << UOp.const(dtypes.int32, 1, shape=(2, 3))).bitcast(dtypes.float32).contiguous().copy_to_device("CPU:1").detach().contiguous_backward()
  v = UOp.variable("n", 1, 10)
  sink = UOp.sink(y, a.after(a.store(b)), v.bind(3), UOp.const(dtypes.int32, 7, device="CPU"), a.r(Ops.MAX, (0, 1)))
  type_verify(sink, spec_tensor)

def test_tensor_graph_calls_valid():
  pa, pb = UOp.param(0, dtypes.float32, (3, 4), "CPU"), UOp.param(1, dtypes.float32, (3, 4), "CPU")
  a, b = buf().reshape((3, 4)), buf().reshape((3, 4))
  c = UOp.call_outputs((pa * pb, pa + pb), a, b, name="f")
  type_verify(UOp.sink(*c.returned_outputs), spec_tensor)
  opaque = UOp.sink(UOp.param(0, dtypes.float32, 12).store(UOp.param(1, dtypes.float32, 12))).call(buf(), buf())
  custom = UOp.custom_function("validate", buf()).call(buf())
  type_verify(UOp.sink(opaque, custom), spec_tensor)
  # a symbolic view of a flat PARAM
  n = UOp.variable("n", 1, 10)
  type_verify(UOp.sink(UOp.param(0, dtypes.float32, (n, 4)) * UOp.param(1, dtypes.float32, (n, 4))), spec_tensor)

def test_tensor_graph_multi_valid():
  bufs = [buf(device=f"CPU:{i}") for i in range(2)]
  ms = UOp(Ops.MSTACK, dtypes.float32, tuple(bufs))
  sel = UOp(Ops.MSELECT, dtypes.float32, (ms,), 1)
  uns = UOp(Ops.UNSHARD, dtypes.float32, (ms,), (0,))
  type_verify(UOp.sink(sel, uns, ms.after(UOp.sink())), spec_tensor)

def test_kernel_graph_valid():
  p0, p1 = UOp.param(0, dtypes.float32, 16), UOp.param(1, dtypes.float32, 16)
  r = UOp.range(16, 0)
  body = UOp.sink(p0.index(r).store(p1.index(r).load()).end(r), arg=KernelInfo(name="E_16"))
  out, inp = buf(16), buf(16)
  k = body.call(out, inp, UOp.variable("i", 0, 3).bind(1))
  g = UOp.sink(out.after(k).reshape((4, 4)), UOp(Ops.STACK, dtypes.float32.vec(2), (UOp.const(dtypes.float32, 1.0), UOp.const(dtypes.float32, 2.0))))
  type_verify(g, spec_kernel_graph)  # the kernel body is not entered: it is a program, not a kernel graph
  with pytest.raises(SpecError, match="spec_kernel_graph"): type_verify(g, spec_kernel_graph, enter_calls=True)

def test_program_valid():
  p0, p1 = UOp.param(0, dtypes.float32, 16), UOp.param(1, dtypes.float32, 16)
  r, red = UOp.range(16, 0, AxisType.LOOP), UOp.range(4, 1, AxisType.REDUCE)
  val = p1.index(r, r < UOp.const(dtypes.weakint, 8)).load()
  acc = UOp(Ops.REDUCE, dtypes.float32, (val * UOp.const(dtypes.float32, 2.0), red), Ops.ADD)
  st = p0.index(r).store(acc)
  prog = UOp.sink(st.end(r), arg=KernelInfo())
  type_verify(prog, spec_program)
  type_verify(list(prog.toposort()), spec_program)  # a linear list is checked as given

def test_program_vectors_control_valid():
  p0 = UOp.param(0, dtypes.float32, 16)
  reg = UOp(Ops.BUFFER, dtypes.float32, arg=ParamArg(0, dtypes.float32, 4, addrspace=AddrSpace.REG))
  zero = UOp.const(dtypes.int32, 0)
  vec = UOp(Ops.STACK, dtypes.float32.vec(4), tuple(UOp.const(dtypes.float32, float(i)) for i in range(4)))
  g = vec.gep((3, 1))
  cond = UOp.special(UOp.const(dtypes.int32, 32), "lidx0", dtypes.int32) < 16
  iff = UOp(Ops.IF, dtypes.void, (cond,))
  st = p0.index(zero, cond).store(g.gep(0) + g.gep(1), cond)
  loaded = reg.after(UOp(Ops.BARRIER, dtypes.void)).index(zero).load(UOp.const(dtypes.float32, 0.0), cond)
  wmma = UOp(Ops.WMMA, dtypes.float32.vec(2), (vec, vec, UOp(Ops.STACK, dtypes.float32.vec(2), (loaded, loaded))), ("WMMA_4_4",))
  custom = UOp(Ops.CUSTOM, dtypes.void, (wmma,), "asm volatile(\"\");")
  rng = UOp.range(UOp.const(dtypes.int32, 4), 0, AxisType.LOOP, dtypes.int32)
  loop = UOp(Ops.END, dtypes.void, (p0.index(rng).store(UOp.const(dtypes.float32, 1.0)), rng, rng < 3))  # loop-ended END
  prog = UOp.sink(UOp.group(st, loop), UOp(Ops.ENDIF, dtypes.void, (iff,)), custom, UOp(Ops.BITCAST, dtypes.int32, (loaded,)))
  type_verify(prog, spec_program)

def test_hcq_valid():
  b = buf()
  type_verify(UOp.sink(UOp(Ops.GETADDR, dtypes.uint64, (b,), "CPU"), UOp(Ops.GETADDR, dtypes.uint64, (b.after(UOp.sink()),), "CPU"),
                       UOp(Ops.GETADDR, dtypes.uint64, (b.shrink(((2, 6),)),), "CPU"), UOp(Ops.PROGRAM, dtypes.void, (b,))), spec_hcq)

def test_spec_check_verdicts():
  assert spec_check(spec_tensor, UOp.const(dtypes.float32, 1.0)) is True
  assert spec_check(spec_tensor, UOp(Ops.SIN, dtypes.int32, (UOp.const(dtypes.int32, 1),))) is False
  assert spec_check(spec_shared, UOp(Ops.REDUCE_AXIS, dtypes.float32, (UOp.const(dtypes.float32, 1.0),), (Ops.ADD, ()))) is None

# *** malformed graphs: (spec, bad node builder) ***
i32, f32 = dtypes.int32, dtypes.float32
def _c(v, dt=f32): return UOp.const(dt, v)
def _p(size=16, dt=f32): return UOp.param(0, dt, size)
_r = UOp.range(16, 0)

BAD = {
  "sin_on_int": (spec_tensor, lambda: UOp(Ops.SIN, i32, (_c(1, i32),))),
  "cmplt_gives_float": (spec_tensor, lambda: UOp(Ops.CMPLT, f32, (_c(1.0), _c(2.0)))),
  "where_nonbool_cond": (spec_tensor, lambda: UOp(Ops.WHERE, f32, (_c(1.0), _c(2.0), _c(3.0)))),
  "where_branch_dtypes": (spec_tensor, lambda: UOp(Ops.WHERE, f32, (_c(True, dtypes.bool), _c(2.0), _c(3, i32)))),
  "add_mixed_dtypes": (spec_tensor, lambda: UOp(Ops.ADD, f32, (_c(1.0), _c(2, i32)))),
  "shl_on_float": (spec_tensor, lambda: UOp(Ops.SHL, f32, (_c(1.0), _c(2.0)))),
  "and_on_float": (spec_tensor, lambda: UOp(Ops.AND, f32, (_c(1.0), _c(2.0)))),
  "reshape_wrong_numel": (spec_tensor, lambda: UOp(Ops.RESHAPE, f32, (buf(),), (5, 3))),
  "reshape_dtype_changed": (spec_tensor, lambda: UOp(Ops.RESHAPE, i32, (buf(),), (3, 4))),
  "permute_not_permutation": (spec_tensor, lambda: UOp(Ops.PERMUTE, f32, (buf().reshape((3, 4)),), (0, 0))),
  "expand_non_one_axis": (spec_tensor, lambda: UOp(Ops.EXPAND, f32, (buf().reshape((3, 4)),), (6, 4))),
  "shrink_past_end": (spec_tensor, lambda: UOp(Ops.SHRINK, f32, (buf(),), ((0, 13),))),
  "flip_wrong_len": (spec_tensor, lambda: UOp(Ops.FLIP, f32, (buf(),), (True, False))),
  "reduce_axis_bad_op": (spec_tensor, lambda: UOp(Ops.REDUCE_AXIS, f32, (buf().reshape((3, 4)),), (Ops.SUB, (1,)))),
  "reduce_axis_bad_axis": (spec_tensor, lambda: UOp(Ops.REDUCE_AXIS, f32, (buf().reshape((3, 4)),), (Ops.ADD, (2,)))),
  "buffer_nonint_size": (spec_tensor, lambda: UOp(Ops.BUFFER, f32, arg=ParamArg(0, f32, 12.0, device="CPU"))),  # type: ignore[arg-type]
  "buffer_no_device": (spec_tensor, lambda: UOp(Ops.BUFFER, f32, arg=ParamArg(0, f32, 12))),
  "variable_with_device": (spec_tensor, lambda: UOp(Ops.BUFFER, dtypes.weakint, arg=ParamArg(-1, dtypes.weakint, None, (0, 4), None, "v",
                                                                                               AddrSpace.ALU, "CPU"))),
  "bind_out_of_range": (spec_tensor, lambda: UOp(Ops.BIND, dtypes.weakint, (UOp.variable("b", 0, 4), _c(9, dtypes.weakint)))),
  "const_wrong_arg_type": (spec_tensor, lambda: UOp(Ops.CONST, i32, arg=1.5)),
  "const_out_of_range": (spec_tensor, lambda: UOp(Ops.CONST, dtypes.uint8, arg=300)),
  "copy_without_device": (spec_tensor, lambda: UOp(Ops.COPY, f32, (buf(), buf()))),
  "call_nonvoid_opaque_body": (spec_tensor, lambda: UOp(Ops.CALL, f32, (UOp.sink(), buf()))),
  "call_value_body_not_sink": (spec_tensor, lambda: UOp(Ops.CALL, dtypes.void, (UOp(Ops.PROGRAM), UOp.returned(1, f32, (4,))))),
  "mselect_out_of_range": (spec_tensor, lambda: UOp(Ops.MSELECT, f32, (UOp(Ops.MSTACK, f32, (buf(device="A"), buf(device="B"))),), 2)),
  "custom_function_nonstr": (spec_tensor, lambda: UOp(Ops.CUSTOM_FUNCTION, dtypes.void, (), 3)),
  "kernel_graph_local_buffer": (spec_kernel_graph, lambda: UOp(Ops.BUFFER, f32, arg=ParamArg(0, f32, 4, addrspace=AddrSpace.LOCAL))),
  "kernel_graph_stack_of_alu": (spec_kernel_graph, lambda: UOp(Ops.STACK, f32.vec(2), (_c(1.0) + _c(2.0), _c(1.0)))),
  "store_nonvoid": (spec_program, lambda: UOp(Ops.STORE, f32, (_p().index(_r), _c(1.0)))),
  "store_nonbool_gate": (spec_program, lambda: UOp(Ops.STORE, dtypes.void, (_p().index(_r), _c(1.0), _c(1.0)))),
  "range_float": (spec_program, lambda: UOp(Ops.RANGE, f32, (_c(16.0),), (0, AxisType.LOOP))),
  "range_bad_arg": (spec_program, lambda: UOp(Ops.RANGE, dtypes.weakint, (_c(16, dtypes.weakint),), 0)),
  "index_float_index": (spec_program, lambda: UOp(Ops.INDEX, f32, (_p(), _c(1.0)))),
  "load_alt_wrong_dtype": (spec_program, lambda: UOp(Ops.LOAD, f32, (_p().index(_r), _c(0, i32), _c(True, dtypes.bool)))),
  "gep_lane_out_of_range": (spec_program, lambda: UOp(Ops.GEP, f32, (UOp(Ops.STACK, f32.vec(2), (_c(1.0), _c(2.0))),), (2,))),
  "stack_count_mismatch": (spec_program, lambda: UOp(Ops.STACK, f32.vec(4), (_c(1.0), _c(2.0)))),
  "end_without_range": (spec_program, lambda: UOp(Ops.END, dtypes.void, (_p().index(_r).store(_c(1.0)),))),
  "end_on_non_range": (spec_program, lambda: UOp(Ops.END, dtypes.void, (_p().index(_r).store(_c(1.0)), _c(3, dtypes.weakint)))),
  "reduce_bad_op": (spec_program, lambda: UOp(Ops.REDUCE, f32, (_c(1.0), _r), Ops.SUB)),
  "special_nonstr_arg": (spec_program, lambda: UOp(Ops.SPECIAL, dtypes.weakint, (_c(4, dtypes.weakint),), 0)),
  "program_global_variable": (spec_program, lambda: UOp.variable("v", 0, 3)),
  "program_const_with_device": (spec_program, lambda: UOp.const(f32, 1.0, device="CPU")),
  "program_movement_op": (spec_program, lambda: UOp(Ops.RESHAPE, f32, (_p(),), (4, 4))),
  "bitcast_size_change_in_program": (spec_program, lambda: UOp(Ops.BITCAST, dtypes.int64, (_c(1.0),))),
  "group_of_alu": (spec_program, lambda: UOp(Ops.GROUP, dtypes.void, (_c(1.0) + _c(2.0), _p().index(_r).store(_c(1.0))))),
  "after_on_alu": (spec_program, lambda: UOp(Ops.AFTER, f32, (_c(1.0) + _c(2.0), UOp(Ops.BARRIER)))),
  "getaddr_not_uint64": (spec_hcq, lambda: UOp(Ops.GETADDR, dtypes.int32, (buf(),), "CPU")),
  "getaddr_bad_device": (spec_hcq, lambda: UOp(Ops.GETADDR, dtypes.uint64, (buf(),), 3)),
}

@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed(case):
  spec, build = BAD[case]
  bad = build()
  with pytest.raises(SpecError) as ei: type_verify([bad], spec)  # the node alone: the error names it
  msg = str(ei.value)
  assert msg.startswith(f"{spec.name}: invalid {bad.op}"), msg
  with pytest.raises(SpecError): type_verify(UOp.sink(bad), spec)  # and a graph holding it fails

def test_error_message_shows_node_and_sources():
  bad = UOp(Ops.CMPLT, f32, (_c(1.0), _c(2.0)))
  with pytest.raises(SpecError) as ei: type_verify(UOp.sink(bad + _c(0.0)), spec_tensor)
  msg = str(ei.value)
  assert isinstance(ei.value, RuntimeError)
  assert msg.startswith("spec_tensor: invalid Ops.CMPLT")
  assert "dtypes.float32" in msg and "src[0]: Ops.CONST dtypes.float32 arg=1.0" in msg and "src[1]: Ops.CONST dtypes.float32 arg=2.0" in msg
  assert "Ops.ADD" not in msg.split("\n")[1]  # the node is printed short, not the whole graph

def test_error_message_no_rule_and_position():
  with pytest.raises(SpecError, match="no rule matched") as ei:
    type_verify([UOp.const(f32, 1.0), UOp(Ops.REDUCE_AXIS, f32, (buf(),), (Ops.ADD, (0,)))], spec_program)
  assert "at position 1" in str(ei.value)

def test_error_message_truncates_long_args():
  bad = UOp(Ops.CUSTOM_FUNCTION, dtypes.void, (), tuple(range(1000)))
  with pytest.raises(SpecError) as ei: type_verify(bad, spec_tensor)
  assert len(str(ei.value)) < 500

def test_value_call_body_is_checked():
  # type_verify enters CALL bodies of the tensor graph: a bad node inside the body is found
  p = UOp.param(0, dtypes.int32, (4,), "CPU")
  body_bad = UOp(Ops.SIN, dtypes.int32, (p,))
  c = UOp.call_outputs((body_bad,), buf(4, dtypes.int32))
  with pytest.raises(SpecError, match="Ops.SIN"): type_verify(UOp.sink(*c.returned_outputs), spec_tensor)
  type_verify(UOp.sink(*c.returned_outputs), spec_tensor, enter_calls=False)

def test_verify_if_spec():
  bad = UOp.sink(UOp(Ops.SIN, dtypes.int32, (_c(1, i32),)))
  with Context(SPEC=0): verify_if_spec(bad, spec_tensor, "tensor")  # off: nothing is checked
  with Context(SPEC=1):
    with pytest.raises(SpecError, match="after stage 'tensor'.*spec_tensor"): verify_if_spec(bad, spec_tensor, "tensor")
    verify_if_spec(UOp.sink(_c(1.0)), spec_tensor, "tensor")

def test_call_arg_must_be_callinfo():
  assert spec_check(spec_tensor, UOp(Ops.CALL, dtypes.void, (UOp.sink(),), CallInfo(name="k"))) is True
  assert spec_check(spec_tensor, UOp(Ops.CALL, dtypes.void, (UOp.sink(),), "k")) is False

def test_bool_bitcast_program_passes_spec():
  # a bool is one byte holding 0 or 1 (bitsize 1, itemsize 1): a bool <-> byte BITCAST must not reach the program, where
  # spec_program requires equal bit widths (ONNX BitCast bool -> uint8 failed there); it lowers to a CAST of the same bits
  import numpy as np
  from tg_core import Tensor
  b = np.array([True, False, True, False, False, True, True, True, False], dtype=np.bool_)
  u = np.array([0, 1, 1, 0, 255, 2, 0, 1, 0], dtype=np.uint8)
  with Context(SPEC=1):
    np.testing.assert_array_equal(Tensor(b).bitcast(dtypes.uint8).numpy(), b.view(np.uint8))
    np.testing.assert_array_equal(Tensor(b).bitcast(dtypes.int8).numpy(), b.view(np.int8))
    np.testing.assert_array_equal(Tensor(u).bitcast(dtypes.bool).numpy(), u.view(np.bool_))

"""Hand-written PTX (each kernel accepted by `ptxas -arch=sm_90`) for the edge cases CUDA C cannot express without
undefined behaviour: shifts >= width, x/0, MIN/-1, NaN/inf/-0 through min/max/approx/cvt, predication, barriers after
early exits, vector loads, and the interpreter's errors."""
import ctypes
import struct

import numpy as np
import pytest
import torch
from cuda_testutil import MockGPU, ptxas_check

from tg_cuda.mock.errors import PTXParseError, PTXRuntimeError, PTXUnsupportedError
from tg_cuda.mock.memory import DeviceMemory
from tg_cuda.mock.ptx_interp import load_module
from tg_cuda.mock.ptx_parser import parse_ptx

u64 = ctypes.c_uint64
HEADER = ".version 8.0\n.target sm_90\n.address_size 64\n"
REGS = """  .reg .pred %p<8>;
  .reg .b16 %h<16>;
  .reg .b32 %r<40>;
  .reg .b64 %rd<16>;
  .reg .f32 %f<40>;
  .reg .f64 %fd<8>;
"""


def kernel(body: str, name: str = "k") -> str:
  return (HEADER + f".visible .entry {name}(.param .u64 pin, .param .u64 pout)\n{{\n" + REGS +
          "  ld.param.u64 %rd0, [pin];\n  ld.param.u64 %rd1, [pout];\n"
          "  cvta.to.global.u64 %rd0, %rd0;\n  cvta.to.global.u64 %rd1, %rd1;\n" + body + "  ret;\n}\n")


def run(ptx: str, inputs: np.ndarray, out_bytes: int, block=(1, 1, 1), grid=(1, 1, 1), name: str = "k") -> bytes:
  ptxas_check(ptx)
  g = MockGPU()
  pin, pout = g.upload(inputs), g.empty(out_bytes)
  g.launch(g.function(ptx, name), grid, block, u64(pin), u64(pout))
  return g.download(pout, (out_bytes,), np.uint8).tobytes()


def f32bits(x: float) -> int: return struct.unpack("<I", struct.pack("<f", x))[0]


def table_kernel(inputs_decl: str, cases: list[tuple[str, str]]) -> str:
  """cases: (snippet leaving its result in %r30 (u32) / %f30 (f32) / %h10 (b16) / %p1 (pred), kind) -> one u32 each."""
  body = inputs_decl
  for i, (snippet, kind) in enumerate(cases):
    store = {"u": "", "f": "  mov.b32 %r30, %f30;\n", "h": "  cvt.u32.u16 %r30, %h10;\n", "p": "  selp.u32 %r30, 1, 0, %p1;\n"}[kind]
    body += f"  {snippet}\n{store}  st.global.u32 [%rd1+{4 * i}], %r30;\n"
  return kernel(body)


def _prmt(a: int, b: int, c: int) -> int:
  """prmt.b32 by the PTX ISA text: result byte i = byte (c >> 4i & 7) of {b, a}, replicated sign if bit 3 of the selector."""
  pool = [(((b << 32) | a) >> (8 * k)) & 0xFF for k in range(8)]
  out = 0
  for i in range(4):
    sel = (c >> (4 * i)) & 0xF
    byte = pool[sel & 7]
    if sel & 8: byte = 0xFF if byte & 0x80 else 0
    out |= byte << (8 * i)
  return out


INT_IN = np.array([7, 0, 0x80000000, 0xFFFFFFFF, 32, 40, 33, 0xF0000000], np.uint32)
INT_CASES = [  # (PTX, expected u32) with %r1..%r8 = INT_IN; expectations from the PTX ISA text (x/0 is what NVIDIA GPUs return)
  ("div.u32 %r30, %r1, %r2;", 0xFFFFFFFF), ("rem.u32 %r30, %r1, %r2;", 7), ("div.s32 %r30, %r3, %r4;", 0x80000000), ("rem.s32 %r30, %r3, %r4;", 0),
  ("div.s32 %r30, %r1, %r2;", 0xFFFFFFFF), ("shl.b32 %r30, %r1, %r5;", 0), ("shl.b32 %r30, %r1, %r6;", 0), ("shr.u32 %r30, %r8, %r7;", 0),
  ("shr.s32 %r30, %r8, %r5;", 0xFFFFFFFF), ("shr.s32 %r30, %r8, 4;", 0xFF000000), ("shl.b32 %r30, %r1, 31;", 0x80000000),
  ("add.sat.s32 %r30, %r3, %r4;", 0x80000000), ("mul.lo.s32 %r30, %r8, %r8;", (0xF0000000 ** 2) & 0xFFFFFFFF),
  ("mul.hi.u32 %r30, %r8, %r8;", (0xF0000000 ** 2) >> 32), ("mul.hi.s32 %r30, %r8, %r4;", ((-0x10000000 * -1) >> 32) & 0xFFFFFFFF),
  ("bfe.u32 %r30, %r8, 28, 8;", 0xF), ("bfe.s32 %r30, %r8, 28, 4;", 0xFFFFFFFF), ("bfe.u32 %r30, %r8, 40, 4;", 0),
  ("bfi.b32 %r30, %r1, %r8, 4, 8;", 0xF0000070), ("popc.b32 %r30, %r8;", 4), ("clz.b32 %r30, %r2;", 32), ("brev.b32 %r30, %r1;", 0xE0000000),
  ("bfind.u32 %r30, %r8;", 31), ("bfind.u32 %r30, %r2;", 0xFFFFFFFF), ("bfind.s32 %r30, %r4;", 0xFFFFFFFF), ("bfind.s32 %r30, %r8;", 27),
  ("bfind.shiftamt.u32 %r30, %r1;", 29), ("bfind.u32 %r30, %r5;", 5),
  ("neg.s32 %r30, %r3;", 0x80000000), ("abs.s32 %r30, %r3;", 0x80000000), ("min.s32 %r30, %r3, %r1;", 0x80000000), ("min.u32 %r30, %r3, %r1;", 7),
  ("cvt.s64.s32 %rd5, %r8; shl.b64 %rd6, %rd5, %r5; shr.u64 %rd6, %rd6, 60; cvt.u32.u64 %r30, %rd6;", 0xF),
  ("cvt.u64.u32 %rd5, %r8; shl.b64 %rd6, %rd5, 64; cvt.u32.u64 %r30, %rd6;", 0),
  ("cvt.s64.s32 %rd5, %r3; shr.s64 %rd6, %rd5, 70; cvt.u32.u64 %r30, %rd6;", 0xFFFFFFFF),
  ("cvt.sat.s8.s32 %r30, %r3;", 0xFFFFFF80), ("cvt.u8.u32 %r30, %r8;", 0), ("cvt.s16.s32 %r30, %r4;", 0xFFFFFFFF),
  ("mul.wide.s32 %rd5, %r8, %r8; shr.u64 %rd5, %rd5, 32; cvt.u32.u64 %r30, %rd5;", ((-0x10000000) ** 2) >> 32),
  ("prmt.b32 %r30, %r8, %r1, 0x4567;", _prmt(0xF0000000, 7, 0x4567)), ("prmt.b32 %r30, %r8, %r1, 0x0B13;", _prmt(0xF0000000, 7, 0x0B13)),
  ("setp.lo.u32 %p1, %r1, %r3; selp.u32 %r30, 1, 0, %p1;", 1),
  ("setp.lt.s32 %p1, %r1, %r3; selp.u32 %r30, 1, 0, %p1;", 0),
]


def test_integer_edge_cases():
  decl = "".join(f"  ld.global.u32 %r{i + 1}, [%rd0+{4 * i}];\n" for i in range(len(INT_IN)))
  out = np.frombuffer(run(table_kernel(decl, [(c, "u") for c, _ in INT_CASES]), INT_IN, 4 * len(INT_CASES)), np.uint32)
  for (c, want), got in zip(INT_CASES, out): assert int(got) == want, f"{c}: got {int(got):#x}, want {want:#x}"


F_IN = np.array([0.0, -0.0, 1.0, np.inf, np.nan, -1.0, 70000.0, 1e-40, 2.5, -2.5, 65519.0, 3.0e38], np.float32)
NAN = float("nan")
FLOAT_CASES = [  # %f1..%f12 = F_IN; (PTX, kind, expected) with expected NaN meaning "any NaN"
  ("div.rn.f32 %f30, %f3, %f1;", "f", np.inf), ("div.rn.f32 %f30, %f1, %f1;", "f", NAN), ("sub.f32 %f30, %f4, %f4;", "f", NAN),
  ("div.rn.f32 %f30, %f6, %f2;", "f", np.inf), ("mul.f32 %f30, %f4, %f1;", "f", NAN),
  ("min.f32 %f30, %f5, %f3;", "f", 1.0), ("max.f32 %f30, %f5, %f6;", "f", -1.0), ("min.f32 %f30, %f1, %f2;", "f", -0.0), ("max.f32 %f30, %f2, %f1;", "f", 0.0),
  ("max.NaN.f32 %f30, %f5, %f3;", "f", NAN), ("rcp.approx.f32 %f30, %f2;", "f", -np.inf), ("rcp.approx.f32 %f30, %f4;", "f", 0.0),
  ("rcp.rn.f32 %f30, %f6;", "f", -1.0), ("sqrt.approx.f32 %f30, %f6;", "f", NAN), ("sqrt.rn.f32 %f30, %f2;", "f", -0.0),
  ("lg2.approx.f32 %f30, %f1;", "f", -np.inf),
  ("lg2.approx.f32 %f30, %f6;", "f", NAN), ("neg.f32 %f31, %f4; ex2.approx.f32 %f30, %f31;", "f", 0.0), ("ex2.approx.ftz.f32 %f30, %f8;", "f", 1.0),
  ("rsqrt.approx.f32 %f30, %f1;", "f", np.inf), ("rsqrt.approx.f32 %f30, %f4;", "f", 0.0), ("sin.approx.f32 %f30, %f4;", "f", NAN),
  ("cos.approx.f32 %f30, %f2;", "f", 1.0),
  ("sin.approx.f32 %f30, %f2;", "f", -0.0), ("add.ftz.f32 %f30, %f8, %f1;", "f", 0.0), ("add.f32 %f30, %f8, %f1;", "f", float(np.float32(1e-40))),
  ("cvt.rn.f16.f32 %h10, %f7;", "h", 0x7C00), ("cvt.rz.f16.f32 %h10, %f7;", "h", 0x7BFF), ("cvt.rn.f16.f32 %h10, %f11;", "h", 0x7BFF),
  ("cvt.rn.f16.f32 %h10, %f8;", "h", 0x0000), ("cvt.rn.f16.f32 %h10, %f5;", "h", None), ("cvt.rn.bf16.f32 %h10, %f12;", "h", None),
  ("cvt.rn.f16.f32 %h9, %f9; cvt.f32.f16 %f30, %h9;", "f", 2.5), ("cvt.sat.f32.f32 %f30, %f5;", "f", 0.0), ("cvt.sat.f32.f32 %f30, %f9;", "f", 1.0),
  ("cvt.rni.f32.f32 %f30, %f9;", "f", 2.0), ("cvt.rni.f32.f32 %f30, %f10;", "f", None), ("cvt.rmi.f32.f32 %f30, %f10;", "f", -3.0),
  ("cvt.rpi.f32.f32 %f30, %f9;", "f", 3.0), ("cvt.rzi.f32.f32 %f30, %f10;", "f", -2.0), ("cvt.rzi.s32.f32 %r30, %f5;", "u", 0),
  ("cvt.rzi.s32.f32 %r30, %f4;", "u", 0x7FFFFFFF), ("cvt.rni.u32.f32 %r30, %f6;", "u", 0), ("cvt.rn.f32.s32 %f30, %r39;", "f", 0.0),
  ("cvt.f64.f32 %fd1, %f12; cvt.rn.f32.f64 %f30, %fd1;", "f", float(np.float32(3.0e38))),
  ("cvt.f64.f32 %fd1, %f3; add.f64 %fd1, %fd1, 0d3E70000000000001; cvt.rz.f32.f64 %f30, %fd1;", "f", 1.0),
  ("cvt.f64.f32 %fd1, %f3; add.f64 %fd1, %fd1, 0d3E70000000000001; cvt.rp.f32.f64 %f30, %fd1;", "f", float(np.nextafter(np.float32(1), np.float32(2)))),
  ("setp.ne.f32 %p1, %f5, %f3;", "p", 0), ("setp.neu.f32 %p1, %f5, %f3;", "p", 1), ("setp.equ.f32 %p1, %f5, %f5;", "p", 1),
  ("setp.eq.f32 %p1, %f5, %f5;", "p", 0),
  ("setp.num.f32 %p1, %f3, %f5;", "p", 0), ("setp.nan.f32 %p1, %f3, %f5;", "p", 1), ("setp.eq.f32 %p1, %f1, %f2;", "p", 1),
  ("setp.gtu.f32 %p1, %f5, %f3;", "p", 1),
  ("setp.lt.and.f32 %p1|%p2, %f6, %f3, %p0; selp.u32 %r30, 1, 0, %p2;", "u", 0), ("testp.infinite.f32 %p1, %f4;", "p", 1),
  ("testp.subnormal.f32 %p1, %f8;", "p", 1),
  ("testp.notanumber.f32 %p1, %f5;", "p", 1), ("copysign.f32 %f30, %f6, %f3;", "f", -1.0), ("abs.f32 %f30, %f2;", "f", 0.0),
  ("fma.rn.f32 %f30, %f4, %f1, %f3;", "f", NAN), ("fma.rn.f32 %f30, %f12, %f12, %f6;", "f", np.inf),
  ("mul.rz.f32 %f30, %f12, %f12;", "f", float(np.finfo(np.float32).max)),
  ("cvt.rn.f16.f32 %h9, %f3; ex2.approx.f16 %h10, %h9;", "h", 0x4000), ("tanh.approx.f32 %f30, %f4;", "f", 1.0),
  ("div.approx.f32 %f30, %f3, %f4;", "f", 0.0), ("div.full.f32 %f30, %f6, %f2;", "f", np.inf),
]


def test_float_edge_cases():
  decl = "".join(f"  ld.global.f32 %f{i + 1}, [%rd0+{4 * i}];\n" for i in range(len(F_IN))) + "  setp.eq.f32 %p0, %f3, %f3;\n  mov.u32 %r39, 0;\n"
  out = np.frombuffer(run(table_kernel(decl, [(c, k) for c, k, _ in FLOAT_CASES]), F_IN, 4 * len(FLOAT_CASES)), np.uint32)
  refs = {"cvt.rn.f16.f32 %h10, %f5;": None, "cvt.rn.bf16.f32 %h10, %f12;": int(torch.tensor([3.0e38]).to(torch.bfloat16).view(torch.int16).item()) & 0xFFFF,
          "cvt.rni.f32.f32 %f30, %f10;": -2.0}
  for (c, kind, want), got in zip(FLOAT_CASES, out):
    got = int(got)
    want = refs.get(c, want)
    if c == "cvt.rn.f16.f32 %h10, %f5;": assert (got & 0x7C00) == 0x7C00 and (got & 0x3FF), c; continue
    if kind == "f":
      gf = struct.unpack("<f", struct.pack("<I", got))[0]
      if want != want: assert gf != gf, f"{c}: got {gf}, want NaN"
      else: assert got == f32bits(want), f"{c}: got {gf} ({got:#x}), want {want}"
    else: assert got == want, f"{c}: got {got:#x}, want {want:#x}"


def test_predicated_stores_and_barrier_after_exit():
  # odd threads exit early; the even ones still meet at bar.sync (exited threads do not hold a barrier), then each even thread
  # reads its neighbour's shared slot
  body = """  .shared .align 4 .b32 sm[64];
  mov.u32 %r1, %tid.x;
  shl.b32 %r2, %r1, 2;
  mov.u32 %r3, sm;
  add.u32 %r4, %r3, %r2;
  and.b32 %r5, %r1, 1;
  setp.eq.u32 %p1, %r5, 1;
  st.shared.u32 [%r4], %r1;
  @%p1 bra DONE;
  bar.sync 0;
  add.u32 %r6, %r4, 8;
  and.b32 %r6, %r6, 255;
  ld.shared.u32 %r7, [%r6];
  cvt.u64.u32 %rd2, %r2;
  add.s64 %rd3, %rd1, %rd2;
  setp.lt.u32 %p2, %r1, 40;
  @%p2 st.global.u32 [%rd3], %r7;
  @!%p2 st.global.u32 [%rd3], 999;
DONE:
"""
  out = np.frombuffer(run(kernel(body), np.zeros(1, np.uint32), 64 * 4, block=(64, 1, 1)), np.uint32)
  t = np.arange(64)
  want = np.where(t % 2 == 1, 0, np.where(t < 40, (t + 2) % 64, 999))
  np.testing.assert_array_equal(out, want)


def test_nested_divergence_reconverges():
  # a loop whose trip count depends on the thread, with an if/else inside, then a warp vote after reconvergence
  body = """  mov.u32 %r1, %tid.x;
  mov.u32 %r2, 0;
  mov.u32 %r3, 0;
LOOP:
  setp.ge.u32 %p1, %r3, %r1;
  @%p1 bra END;
  and.b32 %r4, %r3, 1;
  setp.eq.u32 %p2, %r4, 0;
  @%p2 bra EVEN;
  mul.lo.u32 %r2, %r2, 3;
  bra.uni NEXT;
EVEN:
  add.u32 %r2, %r2, %r3;
NEXT:
  add.u32 %r3, %r3, 1;
  bra.uni LOOP;
END:
  setp.gt.u32 %p3, %r2, 10;
  vote.sync.ballot.b32 %r5, %p3, -1;
  mul.wide.u32 %rd2, %r1, 8;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v2.u32 [%rd3], {%r2, %r5};
"""
  out = np.frombuffer(run(kernel(body), np.zeros(1, np.uint32), 32 * 8, block=(32, 1, 1)), np.uint32).reshape(32, 2)
  want = []
  for t in range(32):
    acc = 0
    for i in range(t): acc = acc + i if i % 2 == 0 else (acc * 3) & 0xFFFFFFFF
    want.append(acc)
  want = np.array(want, np.uint64)
  np.testing.assert_array_equal(out[:, 0], want.astype(np.uint32))
  np.testing.assert_array_equal(out[:, 1], np.full(32, int(sum(1 << t for t in range(32) if want[t] > 10))))


def test_vector_loads_and_stores():
  body = """  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd2, %r1, 16;
  add.s64 %rd3, %rd0, %rd2;
  ld.global.v2.f64 {%fd1, %fd2}, [%rd3];
  ld.global.nc.v4.u32 {%r2, %r3, %r4, %r5}, [%rd3];
  ld.global.v2.b16 {%h1, %h2}, [%rd3+4];
  add.f64 %fd3, %fd1, %fd2;
  mul.wide.u32 %rd4, %r1, 32;
  add.s64 %rd5, %rd1, %rd4;
  st.global.f64 [%rd5], %fd3;
  st.global.v4.b32 [%rd5+16], {%r5, %r4, %r3, %r2};
  cvt.u32.u16 %r6, %h2;
  st.global.v2.u16 [%rd5+8], {%h1, %h1};
  st.global.u16 [%rd5+12], %r6;
"""
  a = np.random.default_rng(0).standard_normal((8, 2))
  out = run(kernel(body), a, 8 * 32, block=(8, 1, 1))
  o = np.frombuffer(out, np.uint8).reshape(8, 32)
  np.testing.assert_array_equal(o[:, :8].copy().view(np.float64)[:, 0], a[:, 0] + a[:, 1])
  words = a.view(np.uint32).reshape(8, 4)
  np.testing.assert_array_equal(o[:, 16:32].copy().view(np.uint32), words[:, ::-1])
  halves = a.view(np.uint16).reshape(8, 8)
  np.testing.assert_array_equal(o[:, 8:12].copy().view(np.uint16), np.stack([halves[:, 2], halves[:, 2]], 1))
  np.testing.assert_array_equal(o[:, 12:14].copy().view(np.uint16)[:, 0], halves[:, 3])


def test_grid_of_many_blocks_and_atomic_on_one_address():
  # 200 blocks of 48 threads (two batches of up to 8192 lanes) all atom.add into one word, each returning a distinct old value
  body = """  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mad.lo.u32 %r4, %r2, %r3, %r1;
  atom.global.add.u32 %r5, [%rd1], 1;
  mul.wide.u32 %rd2, %r4, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3+4], %r5;
"""
  out = np.frombuffer(run(kernel(body), np.zeros(1, np.uint32), 4 + 200 * 48 * 4, block=(48, 1, 1), grid=(200, 1, 1)), np.uint32)
  assert out[0] == 200 * 48
  np.testing.assert_array_equal(np.sort(out[1:]), np.arange(200 * 48))


def test_unknown_instruction_raises_naming_it():
  ptx = kernel("  mov.u32 %r1, %tid.x;\n  nanosleep.u32 %r1;\n  st.global.u32 [%rd1], %r1;\n")
  ptxas_check(ptx)
  line = ptx.splitlines().index("  nanosleep.u32 %r1;") + 1
  with pytest.raises(PTXUnsupportedError, match=rf"PTX line {line}: instruction nanosleep in `nanosleep.u32 %r1`"):
    load_module(parse_ptx(ptx), DeviceMemory())


def test_unknown_modifier_raises_naming_it():
  ptx = kernel("  mov.u32 %r1, %tid.x;\n  cvt.rn.f32.u32 %f1, %r1;\n  cvt.rn.relu.f16.f32 %h1, %f1;\n  st.global.u16 [%rd1], %h1;\n")
  ptxas_check(ptx)
  with pytest.raises(PTXUnsupportedError, match=r"cvt \.relu in `cvt\.rn\.relu\.f16\.f32"):
    load_module(parse_ptx(ptx), DeviceMemory())


def test_malformed_ptx_raises_parse_error():
  with pytest.raises(PTXParseError, match="unknown register '%zz9'"):
    parse_ptx(kernel("  mov.u32 %zz9, %tid.x;\n"))


def test_endless_loop_hits_the_step_limit():
  ptx = kernel("LOOP:\n  bra.uni LOOP;\n")
  ks, _ = load_module(parse_ptx(ptx), mem := DeviceMemory())
  with pytest.raises(PTXRuntimeError, match="more than 1000 steps"):
    ks["k"].launch((1, 1, 1), (32, 1, 1), bytes(16), mem, max_steps=1000)


def test_misaligned_access_raises():
  body = "  ld.global.u32 %r1, [%rd0+2];\n  st.global.u32 [%rd1], %r1;\n"
  with pytest.raises(PTXRuntimeError, match="misaligned 4-byte global access"):
    run(kernel(body), np.zeros(4, np.uint32), 4)


def test_param_attributes_and_shared_cta():
  ptx = HEADER + """.visible .entry k(.param .u64 .ptr .global .align 16 pin, .param .align 8 .b8 pstruct[16])
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  .shared .align 4 .b32 sm[32];
  ld.param.u64 %rd0, [pin];
  ld.param.u32 %r1, [pstruct+8];
  ld.param.u64 %rd1, [pstruct];
  mov.u32 %r2, %tid.x;
  shl.b32 %r3, %r2, 2;
  mov.u32 %r4, sm;
  add.u32 %r4, %r4, %r3;
  add.u32 %r5, %r2, %r1;
  st.shared::cta.u32 [%r4], %r5;
  bar.sync 0;
  ld.shared::cta.u32 %r6, [%r4];
  cvt.u64.u32 %rd2, %r3;
  add.s64 %rd3, %rd0, %rd2;
  st.global.u32 [%rd3], %r6;
  st.global.u64 [%rd0+128], %rd1;
  ret;
}
"""
  ptxas_check(ptx)
  g = MockGPU()
  pout = g.empty(256)

  class S(ctypes.Structure):
    _fields_ = [("a", ctypes.c_uint64), ("b", ctypes.c_uint32), ("pad", ctypes.c_uint32)]
  s = S(0x1122334455667788, 1000, 0)
  p = u64(pout)
  kp = (ctypes.c_void_p * 2)(ctypes.addressof(p), ctypes.addressof(s))
  assert g.cu.cuLaunchKernel(g.function(ptx, "k"), 1, 1, 1, 32, 1, 1, 0, None, kp, None) == 0
  np.testing.assert_array_equal(g.download(pout, (32,), np.uint32), np.arange(32) + 1000)
  assert g.download(pout + 128, (1,), np.uint64)[0] == 0x1122334455667788


def test_carry_chains_do_wide_arithmetic():
  # 96-bit add and subtract from 32-bit limbs, and a 64x32 multiply-add with madc, against Python integers
  body = """  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd2, %r1, 24;
  add.s64 %rd3, %rd0, %rd2;
  ld.global.v2.u32 {%r2, %r3}, [%rd3];
  ld.global.v2.u32 {%r4, %r5}, [%rd3+8];
  ld.global.v2.u32 {%r6, %r7}, [%rd3+16];
  add.cc.u32 %r10, %r2, %r5;
  addc.cc.u32 %r11, %r3, %r6;
  addc.u32 %r12, %r4, %r7;
  sub.cc.u32 %r13, %r2, %r5;
  subc.cc.u32 %r14, %r3, %r6;
  subc.u32 %r15, %r4, %r7;
  mad.lo.cc.u32 %r16, %r2, %r5, %r6;
  madc.hi.u32 %r17, %r2, %r5, %r7;
  mul.wide.u32 %rd4, %r1, 32;
  add.s64 %rd5, %rd1, %rd4;
  st.global.v4.u32 [%rd5], {%r10, %r11, %r12, %r13};
  st.global.v4.u32 [%rd5+16], {%r14, %r15, %r16, %r17};
"""
  rng = np.random.default_rng(3)
  words = rng.integers(0, 2**32, (64, 6), dtype=np.uint64).astype(np.uint32)
  words[:8] = np.array([0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 1, 0, 0], np.uint32)   # carries through every limb
  words[8:16] = np.array([0, 0, 0, 1, 0, 0], np.uint32)                            # borrows through every limb
  out = np.frombuffer(run(kernel(body), words, 64 * 32, block=(64, 1, 1)), np.uint32).reshape(64, 8)
  for i, (a0, a1, a2, b0, b1, b2) in enumerate(words.astype(object)):
    a, b = a0 | (a1 << 32) | (a2 << 64), b0 | (b1 << 32) | (b2 << 64)
    s, d = (a + b) % 2**96, (a - b) % 2**96
    assert [int(v) for v in out[i, :3]] == [s & 0xFFFFFFFF, (s >> 32) & 0xFFFFFFFF, s >> 64], i
    assert [int(v) for v in out[i, 3:6]] == [d & 0xFFFFFFFF, (d >> 32) & 0xFFFFFFFF, d >> 64], i
    p = a0 * b0 + (b1 | (b2 << 32))   # 32x32 product plus a 64-bit addend
    assert [int(out[i, 6]), int(out[i, 7])] == [p & 0xFFFFFFFF, (p >> 32) & 0xFFFFFFFF], i


def test_access_past_an_allocation_raises():
  # one element past the end of a 4-byte input (inside the allocation's 256-byte padding): a bug the GPU would not report
  body = "  ld.global.u32 %r1, [%rd0+4];\n  st.global.u32 [%rd1], %r1;\n"
  with pytest.raises(PTXRuntimeError, match=r"illegal address .*not inside a live device allocation"):
    run(kernel(body), np.zeros(1, np.uint32), 4)


def test_check_cli_reports_kernels_and_unsupported(tmp_path, capsys):
  from tg_cuda.mock.__main__ import main
  good, bad = tmp_path / "good.ptx", tmp_path / "bad.ptx"
  good.write_text(kernel("  ld.global.u32 %r1, [%rd0];\n  st.global.u32 [%rd1], %r1;\n"))
  bad.write_text(kernel("  mov.u32 %r1, %tid.x;\n  nanosleep.u32 %r1;\n"))
  assert main([str(good)]) == 0 and "k: " in capsys.readouterr().out
  assert main([str(good), str(bad)]) == 1
  assert "PTXUnsupportedError" in capsys.readouterr().out


def test_barriers_in_loops_with_per_block_trip_counts():
  # block b rotates its shared array b+1 times, a bar.sync between each read and write; 24 blocks of 64 threads run in one
  # lane batch, so blocks reach their barriers a different number of times (each block must still see only its own)
  body = """  .shared .align 4 .b32 buf[64];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  shl.b32 %r3, %r1, 2;
  mov.u32 %r4, buf;
  add.u32 %r5, %r4, %r3;
  mad.lo.u32 %r6, %r2, 1000, %r1;
  st.shared.u32 [%r5], %r6;
  add.u32 %r7, %r1, 1;
  and.b32 %r7, %r7, 63;
  shl.b32 %r7, %r7, 2;
  add.u32 %r7, %r4, %r7;
  mov.u32 %r8, 0;
LOOP:
  bar.sync 0;
  ld.shared.u32 %r9, [%r7];
  bar.sync 0;
  st.shared.u32 [%r5], %r9;
  add.u32 %r8, %r8, 1;
  setp.le.u32 %p1, %r8, %r2;
  @%p1 bra LOOP;
  mad.lo.u32 %r10, %r2, 64, %r1;
  mul.wide.u32 %rd2, %r10, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r9;
"""
  out = np.frombuffer(run(kernel(body), np.zeros(1, np.uint32), 24 * 64 * 4, block=(64, 1, 1), grid=(24, 1, 1)), np.uint32).reshape(24, 64)
  t = np.arange(64)
  want = np.stack([b * 1000 + (t + b + 1) % 64 for b in range(24)])
  np.testing.assert_array_equal(out, want)

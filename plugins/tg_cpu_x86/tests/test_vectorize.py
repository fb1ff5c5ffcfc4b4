"""Vector codegen on CPU: one UPCAST axis becomes LLVM vectors (tg_core/codegen/vectorize.py). Every case runs with explicit
opts that force the vector paths (contiguous, broadcast, gathered and lane-gated loads; contiguous and scattered stores)
and compares with numpy."""
from __future__ import annotations
import re
import numpy as np
import pytest

from tg_core import Tensor
from tg_core.codegen import get_program
from tg_core.codegen.opt import Opt, OptOps
from tg_core.codegen.vectorize import affine
from tg_core.device import Device
from tg_core.dtype import dtypes
from tg_core.engine.realize import buffer_of
from tg_core.renderer import Renderer
from tg_core.schedule import create_schedule
from tg_core.uop.ops import AxisType, UOp

def run(t: Tensor, opts: list[Opt], renderer: Renderer | None = None) -> tuple[np.ndarray, str]:
  items, _ = create_schedule(UOp.sink(t.uop))
  assert len(items) == 1, f"expected one kernel, got {len(items)}"
  si = items[0]
  dev = Device["CPU"]
  p = get_program(si.ast, renderer or dev.renderer, opts)
  prg = dev.runtime("CPU", p.name, dev.compiler.compile(p.src))
  bufs = [buffer_of(b) for b in si.bufs]
  prg(*[b._buf for b in bufs])
  npdt = {dtypes.float32: np.float32, dtypes.int32: np.int32, dtypes.uint32: np.uint32, dtypes.bool: np.bool_}[t.dtype]
  return np.frombuffer(bytes(bufs[0].as_buffer()), dtype=npdt).reshape(t.shape), p.src

rng = np.random.default_rng(0)
A, B = rng.standard_normal((8, 12), dtype=np.float32), rng.standard_normal((12, 16), dtype=np.float32)

def test_matmul_vector_accumulators():
  out, src = run(Tensor(A, device="CPU") @ Tensor(B, device="CPU"), [Opt(OptOps.UNROLL, 2, 4), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 2)])
  np.testing.assert_allclose(out, A @ B, rtol=1e-5, atol=1e-5)
  assert "<8 x float>" in src

def test_transposed_store_scatters():
  # the output is contiguous in neither upcast axis of the transposed product: no axis vectorizes, values still right
  out, _ = run((Tensor(A, device="CPU") @ Tensor(B, device="CPU")).T.contiguous(), [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 2)])
  np.testing.assert_allclose(out, (A @ B).T, rtol=1e-5, atol=1e-5)

def test_gathered_loads():
  # out[i, j] = x[j, i] * 2: contiguous store in j, stride-8 loads: gathered lane by lane
  x = rng.standard_normal((16, 8), dtype=np.float32)
  out, src = run(Tensor(x, device="CPU").T * 2, [Opt(OptOps.UPCAST, 1, 4)])
  np.testing.assert_allclose(out, x.T * 2)
  assert "<4 x float>" in src

def test_lane_gated_loads_pad():
  # padding along the vector axis: lanes at the border read nothing (a masked load, or gathered gated lanes)
  x = rng.standard_normal((4, 13), dtype=np.float32)
  out, src = run(Tensor(x, device="CPU").pad(((0, 0), (2, 1))) + 1, [Opt(OptOps.UPCAST, 1, 4)])
  np.testing.assert_allclose(out, np.pad(x, ((0, 0), (2, 1))) + 1)
  assert "<4 x float>" in src

def test_lane_gated_bool_loads():
  x = rng.standard_normal((4, 14)) > 0
  out, _ = run(Tensor(x, device="CPU").pad(((0, 0), (1, 1))).logical_not(), [Opt(OptOps.UPCAST, 1, 8)])
  np.testing.assert_equal(out, np.logical_not(np.pad(x, ((0, 0), (1, 1)))))

def test_conv_padded_vector():
  x, w = rng.standard_normal((1, 3, 8, 8), dtype=np.float32), rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
  out, src = run(Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=1), [Opt(OptOps.UPCAST, 2, 8), Opt(OptOps.UPCAST, 0, 4)])
  import torch
  ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy()
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
  assert "<8 x float>" in src

def test_max_reduce_nan_vector():
  x = rng.standard_normal((8, 16), dtype=np.float32)
  x[3, 5] = np.nan
  out, _ = run(Tensor(x, device="CPU").max(axis=0), [Opt(OptOps.UPCAST, 0, 8)])
  np.testing.assert_equal(out, x.max(axis=0))

def test_masked_vector_load():
  # a lane-dependent gate over an index affine in the lane: one masked vector load
  x = rng.standard_normal((4, 16), dtype=np.float32)
  t = Tensor(x, device="CPU")
  out, src = run((t.shrink(((0, 4), (0, 12))).pad(((0, 0), (0, 4))) * 3), [Opt(OptOps.UPCAST, 1, 8)])
  np.testing.assert_allclose(out, np.pad(x[:, :12], ((0, 0), (0, 4))) * 3)
  assert "llvm.masked.load" in src

def test_int_division_vector():
  a = rng.integers(-100, 100, (4, 16)).astype(np.int32)
  b = rng.integers(1, 9, (4, 16)).astype(np.int32) * np.where(rng.random((4, 16)) > 0.5, 1, -1).astype(np.int32)
  out, _ = run(Tensor(a, device="CPU") // Tensor(b, device="CPU"), [Opt(OptOps.UPCAST, 1, 8)])
  np.testing.assert_equal(out, a // b)

@pytest.mark.parametrize("expr,stride", [(lambda r, j: r + j * 16, 1), (lambda r, j: r * 4 + j, 4), (lambda r, j: j * 3, 0)])
def test_affine(expr, stride):
  r = UOp.range(8, 1, AxisType.UPCAST)
  j = UOp.range(5, 0)
  base, s = affine(expr(r, j), r)
  assert s == stride and r not in base.toposort()

def test_affine_rejects_nonlinear():
  r = UOp.range(8, 1, AxisType.UPCAST)
  assert affine((r // 2) * 16 + r % 2, r) is None

@pytest.mark.parametrize("fn", ["sum", "max"])
def test_row_reduce_vector_accumulator(fn):
  # reducing the contiguous axis: n partial results in a vector register, folded after the loop
  x = rng.standard_normal((8, 64), dtype=np.float32)
  x[2, 7] = np.nan
  out, src = run(getattr(Tensor(x, device="CPU"), fn)(axis=1), [Opt(OptOps.UNROLL, 1, 16)])
  np.testing.assert_allclose(out, getattr(x, fn)(axis=1), rtol=1e-5, atol=1e-5)
  assert "<16 x float>" in src

def test_host_vector_width_drives_elementwise_upcast():
  from tg_cpu_x86.device import vector_width
  ren = Device["CPU"].renderer
  assert ren.caps.vector_width == vector_width() in (4, 8, 16)
  x = rng.standard_normal((4, 64), dtype=np.float32)
  items, _ = create_schedule(UOp.sink((Tensor(x, device="CPU") * 2).uop))
  from tg_core.codegen import choose_opts
  assert [o.arg for o in choose_opts(items[0].ast, ren) if o.op is OptOps.UPCAST] == [ren.caps.vector_width]

@pytest.mark.parametrize("axis", [0, 1])
def test_single_axis_reduce_vectorizes_the_contiguous_axis(axis):
  # a column sum goes a vector wide over the columns (contiguous), a row sum over the reduced row
  from tg_core.codegen import choose_opts
  x = rng.standard_normal((1024, 1024), dtype=np.float32)  # 2^20 adds: not a "tiny" kernel
  t = Tensor(x, device="CPU").sum(axis)
  items, _ = create_schedule(UOp.sink(t.uop))
  ren = Device["CPU"].renderer
  opts = choose_opts(items[0].ast, ren)
  want = (OptOps.UPCAST, min(2 * ren.caps.vector_width, 32)) if axis == 0 else (OptOps.UNROLL, ren.caps.vector_width)  # columns: two vectors
  assert want in [(o.op, o.arg) for o in opts]
  np.testing.assert_allclose(t.numpy(), x.sum(axis), rtol=1e-4, atol=1e-3)

def test_transpose_tiles_both_axes():
  # stores contiguous in j, loads in i: j goes a vector wide, i takes a few steps so the gathered rows share cache lines
  from tg_core.codegen import choose_opts
  x = rng.standard_normal((256, 512), dtype=np.float32)
  t = Tensor(x, device="CPU").T.contiguous()
  items, _ = create_schedule(UOp.sink(t.uop))
  opts = choose_opts(items[0].ast, Device["CPU"].renderer)
  assert [o.op for o in opts] == [OptOps.UPCAST, OptOps.UPCAST] and opts[1].axis == 0
  np.testing.assert_equal(t.numpy(), x.T)

# the x86 instruction sets the CPU renderer can use for shifts and DP4A: a host renderer with the others switched off renders the
# code an older host gets (the host runs it: each set's instructions are a subset of the next's)
PATHS = {"vnni": ("avx2", "avx512", "avx512vnni", "avx512vl"), "avx512": ("avx2", "avx512"), "avx2": ("avx2",), "portable": ()}

def path_renderer(path: str) -> Renderer:
  """The host's renderer with only PATHS[path]'s instruction sets on; skips where the host lacks them."""
  dev = Device["CPU"]
  if not all(getattr(dev.renderer, f) for f in PATHS[path]): pytest.skip(f"the host has no {path}")
  r = type(dev.renderer)()
  for f in PATHS["vnni"]: setattr(r, f, f in PATHS[path])
  return r

@pytest.mark.parametrize("path", ["avx512", "avx2", "portable"])
@pytest.mark.parametrize("lanes", [16, 8, 4])
@pytest.mark.parametrize("op", ["shr", "shl"])
@pytest.mark.parametrize("signed", [True, False])
def test_vector_variable_shift_out_of_range(op: str, signed: bool, lanes: int, path: str):
  # amounts >= 32 (and negative ones, as unsigned) shift everything out: 0, or the sign for an arithmetic right shift; the
  # vector shift instructions (AVX2's vpsrlvd/vpsravd/vpsllvd on 4/8 lanes, AVX-512F's on 16) give exactly that without the guard
  npdt, dt = (np.int32, dtypes.int32) if signed else (np.uint32, dtypes.uint32)
  x = rng.integers(-2**31 if signed else 0, 2**31, 64).astype(npdt)
  s = np.concatenate([np.arange(40), rng.integers(-3, 70, 24)]).astype(npdt)
  tx, ts = Tensor(x, dtype=dt, device="CPU"), Tensor(s, dtype=dt, device="CPU")
  out, src = run((tx >> ts) if op == "shr" else (tx << ts), [Opt(OptOps.UPCAST, 0, lanes)], path_renderer(path))
  amt = s.astype(np.uint32).astype(np.int64)
  wide = x.astype(np.int64) if signed else x.astype(np.uint32).astype(np.int64)
  if op == "shr": want = np.where(amt >= 32, np.where(wide < 0, -1, 0), wide >> np.minimum(amt, 31))
  else: want = np.where(amt >= 32, 0, wide << np.minimum(amt, 31))
  np.testing.assert_array_equal(out.view(np.uint32), (want & 0xFFFFFFFF).astype(np.uint32))
  assert ("@llvm.x86.avx2.ps" in src) == (path != "portable" and lanes in (4, 8))
  assert ("@llvm.x86.avx512.ps" in src) == (path == "avx512" and lanes == 16)

@pytest.mark.parametrize("path", ["vnni", "avx2", "portable"])
@pytest.mark.parametrize("lanes", [32, 16, 8, 4, 2])
@pytest.mark.parametrize("signed_a", [True, False])
@pytest.mark.parametrize("in_range", [False, True])
def test_vector_dp4a(lanes: int, path: str, signed_a: bool, in_range: bool):
  # DP4A on a vector against numpy's int64 products: vpdpbusd with AVX512-VNNI (16 lanes; 8 with AVX512-VL), AVX2's byte
  # multiply-add pairs (8 lanes a step), the portable IR for other widths. The bytes include -128 (a's and b's), whose b side
  # saturates to -127 by the op's definition, and sums near int32's ends, where the accumulate wraps. `signed_a` False: a's
  # bytes are known >= 0 (masked to 7 bits, as unpacked nibbles are), which folds the sign handling away. 32 lanes: a matmul's
  # register tile, two vpdpbusd. `in_range`: b has no byte -128 and says so (b_in_range), no saturating max is rendered
  a = rng.integers(0, 256, 512, dtype=np.uint8)
  b = rng.integers(0, 256, 512, dtype=np.uint8)
  a[:8], b[:8] = [0x80, 0x80, 0x7f, 0x81, 0, 0xff, 0x80, 1], [0x80, 0x7f, 0x80, 0x80, 0x80, 0x80, 0x81, 0x80]
  if in_range: b[b == 0x80] = 0x81
  c = rng.integers(-1000, 1000, 128).astype(np.int32)
  c[:2] = [2**31 - 20000, -2**31 + 20000]
  ta, tb, tc = (Tensor(v.view(np.int32), dtype=dtypes.int32, device="CPU") for v in (a, b, c))
  if not signed_a: ta, a = ta & 0x7f7f7f7f, a & 0x7f
  out, src = run(ta.dp4a(tb, tc, b_in_range=in_range), [Opt(OptOps.UPCAST, 0, lanes)], path_renderer(path))
  want = c + (a.view(np.int8).reshape(128, 4).astype(np.int64) * np.maximum(b.view(np.int8).reshape(128, 4).astype(np.int64), -127)).sum(-1)
  np.testing.assert_array_equal(out, ((want + 2**31) % 2**32 - 2**31).astype(np.int32))
  assert ("@llvm.x86.avx512.vpdpbusd" in src) == (path == "vnni" and lanes in (8, 16, 32))
  if path == "vnni" and lanes == 32: assert src.count("call <16 x i32> @llvm.x86.avx512.vpdpbusd.512") == 2
  assert ("@llvm.x86.avx2.pmadd.ub.sw" in src) == (path == "avx2" and lanes in (8, 16, 32))
  assert ("@llvm.smax" in src) == (not in_range)

@pytest.mark.parametrize("path", ["vnni", "avx2", "portable"])
@pytest.mark.parametrize("lanes", [16, 8, 4, 2])
def test_vector_dp4a_unsigned_a(lanes: int, path: str):
  # DP4A with a uint32 a (unsigned bytes, b unsaturated) on a vector against numpy's int64 products: vpdpbusd as it is with
  # AVX512-VNNI, AVX2's split of a's bytes into 7 low bits and the top one (a byte of 255 against b's -128: the pairs a plain
  # vpmaddubsw would saturate), the portable IR for other widths; sums near int32's ends wrap
  a = rng.integers(0, 256, 512, dtype=np.uint8)
  b = rng.integers(0, 256, 512, dtype=np.uint8)
  a[:8], b[:8] = [0xff, 0xff, 0xff, 0xff, 0x80, 0x80, 0x7f, 0], [0x80, 0x80, 0x80, 0x80, 0x7f, 0x80, 0x80, 0x80]
  a[8:12], b[8:12] = 0xff, 0x7f
  c = rng.integers(-1000, 1000, 128).astype(np.int32)
  c[2:4] = [2**31 - 20000, -2**31 + 20000]
  ta = Tensor(a.view(np.uint32), dtype=dtypes.uint32, device="CPU")
  tb, tc = (Tensor(v.view(np.int32), dtype=dtypes.int32, device="CPU") for v in (b, c))
  out, src = run(ta.dp4a(tb, tc), [Opt(OptOps.UPCAST, 0, lanes)], path_renderer(path))
  want = c + (a.reshape(128, 4).astype(np.int64) * b.view(np.int8).reshape(128, 4).astype(np.int64)).sum(-1)
  np.testing.assert_array_equal(out, ((want + 2**31) % 2**32 - 2**31).astype(np.int32))
  assert ("@llvm.x86.avx512.vpdpbusd" in src) == (path == "vnni" and lanes in (8, 16))
  assert ("@llvm.x86.avx2.pmadd.ub.sw" in src) == (path == "avx2" and lanes in (8, 16))
  assert "smax" not in src  # b is not saturated

@pytest.mark.parametrize("path", ["vnni", "avx2"])
def test_vector_dp4a_broadcast_b_full_opt(path: str):
  # 16 lanes of DP4A against one broadcast word of b (a matvec's x), compiled at the full optimization level: LLVM's x86 backend
  # looped forever on the 512-bit saturating max of the broadcast until the renderer froze it
  from tg_cpu_x86.compiler import full_tier
  from tg_cpu_x86.runtime import CPUProgram
  w = rng.integers(-2**31, 2**31, (16, 16)).astype(np.int32)  # 16 words of 16 rows, the rows innermost (interleaved, as tg_gguf holds them)
  b = rng.integers(0, 256, 64, dtype=np.uint8)
  b[:4] = 0x80
  ta = Tensor(w, device="CPU").T
  tb = Tensor(b.view(np.int32), dtype=dtypes.int32, device="CPU").reshape(1, 16).expand(16, 16)
  t = ta.dp4a(tb).sum(-1, dtype=dtypes.int32)
  items, _ = create_schedule(UOp.sink(t.uop))
  si, dev = items[-1], Device["CPU"]
  p = get_program(si.ast, path_renderer(path), [Opt(OptOps.UPCAST, 0, 16)])
  prg = CPUProgram("CPU", p.name, dev.compiler.compile(full_tier(p.src)))
  bufs = [buffer_of(x) for x in si.bufs]
  prg(*[x._buf for x in bufs])
  rows = np.ascontiguousarray(w.T).view(np.int8).reshape(16, 64).astype(np.int64)  # row r: its 16 words' bytes
  want = (rows * np.maximum(b.view(np.int8).astype(np.int64), -127)).sum(-1)
  np.testing.assert_array_equal(np.frombuffer(bytes(bufs[0].as_buffer()), dtype=np.int32), want.astype(np.int32))

@pytest.mark.parametrize("lanes", [32, 16, 8, 4, 2])
def test_vector_dpbf16(lanes: int):
  # DPBF16 on a vector: 16 lanes take vdpbf16ps on a zmm, 8 and 4 its VL forms, 32 two zmm halves (where the host has
  # AVX512_BF16), 2 the portable IR; numpy's reference sums the exact bfloat16 products in float64
  bits = rng.standard_normal((4, 64), dtype=np.float32).view(np.uint32) >> 16  # bfloat16 values (truncated float32 normals)
  bits[:, :4] = [[0x3F80, 0x7F7F, 0xC000, 0x0001]] * 4  # 1, bfloat16's max (the product overflows to inf), -2, a denormal
  vals = (bits << 16).view(np.float32).astype(np.float64)
  c = rng.standard_normal(64).astype(np.float32)
  ta, tb = (Tensor(bits[i] | (bits[i + 1] << 16), dtype=dtypes.uint32, device="CPU") for i in (0, 2))
  out, src = run(ta.dpbf16(tb, Tensor(c, device="CPU")), [Opt(OptOps.UPCAST, 0, lanes)])
  with np.errstate(over="ignore", invalid="ignore"): want = c + vals[0] * vals[2] + vals[1] * vals[3]
  fin = np.isfinite(want) & (np.abs(want) < 2.0 ** 128)
  np.testing.assert_array_equal(np.isinf(out), ~fin)
  # vdpbf16ps treats denormal bfloat16 inputs as 0: a product with one (lane 3, < 2^-120) is below float32's rounding of c
  mag = np.abs(c) + np.abs(vals[0] * vals[2]) + np.abs(vals[1] * vals[3])
  assert (np.abs(out[fin] - want[fin]) <= mag[fin] * 2 ** -23 + 2.0 ** -120).all()
  native = Device["CPU"].renderer.caps.native_dpbf16
  assert ("@llvm.x86.avx512bf16.dpbf16ps" in src) == (native and lanes >= 4)

def test_bf16_matmul_kernel_uses_vdpbf16ps():
  # the heuristic's tiles and packed panels for the pair matmul: the inner loop is vdpbf16ps on zmm accumulators
  if not Device["CPU"].renderer.caps.native_dpbf16: pytest.skip("the host has no AVX512_BF16")
  a = Tensor(rng.standard_normal((256, 256), dtype=np.float32), device="CPU").cast(dtypes.bfloat16)
  b = Tensor(rng.standard_normal((256, 256), dtype=np.float32), device="CPU").cast(dtypes.bfloat16)
  items, _ = create_schedule(UOp.sink((a @ b).uop))
  srcs = [get_program(si.ast, Device["CPU"].renderer).src for si in items]
  assert sum("@llvm.x86.avx512bf16.dpbf16ps.512" in s for s in srcs) == 1

# a padded tail's PACK copy: the copy's own loop nest stores only into the kernel-local panel, whose column axis vectorizes
# (one masked vector load per panel row; scalar gated copies were left to LLVM, which made them gathers and scatters)
PADDED_PACKS = {(1, 97, 37): [Opt(OptOps.PADTO, 0, 16), Opt(OptOps.UPCAST, 0, 16), Opt(OptOps.PACK, 2)],
                (53, 97, 37): [Opt(OptOps.PADTO, 1, 16), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.PADTO, 0, 6), Opt(OptOps.UPCAST, 0, 6),
                               Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 4)],
                (61, 96, 187): [Opt(OptOps.PADTO, 1, 32), Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.PADTO, 0, 8), Opt(OptOps.UPCAST, 0, 8),
                               Opt(OptOps.SWAP, 0, 1), Opt(OptOps.SPLIT, 1, 3), Opt(OptOps.SWAP, 0, 2), Opt(OptOps.KBLOCK, 5, 32),
                               Opt(OptOps.PACK, 5, 2), Opt(OptOps.PACKROWS, 6)],
                (37, 97, 1): [Opt(OptOps.PADTO, 0, 8), Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.PACKROWS, 2)]}

@pytest.mark.parametrize("shape", list(PADDED_PACKS), ids=str)
def test_padded_pack_copy_is_a_masked_vector_load(shape: tuple[int, int, int]):
  m, k, n = shape
  x, w = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
  out, src = run(Tensor(x, device="CPU") @ Tensor(w, device="CPU"), PADDED_PACKS[shape])
  np.testing.assert_allclose(out, x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
  if any(o.op is OptOps.PACK for o in PADDED_PACKS[shape]):  # B's panel rows: masked vector loads, no gated scalar copies
    up = next(o.arg for o in PADDED_PACKS[shape] if o.op is OptOps.UPCAST)
    assert f"call <{up} x float> @llvm.masked.load.v{up}f32" in src and not re.search(r"select i1 %\S+, float ", src), src

def test_windowed_conv_copy_is_vectorized():
  # a padded conv's WINDOW copy (its own loop nest, stores only into the kernel-local window) runs on vectors too: the padding
  # gate masks lanes of one load instead of a gated scalar copy per element
  import torch
  from tg_core.codegen import choose_opts, simplified_kernel
  x, w = rng.standard_normal((2, 32, 64, 64), dtype=np.float32), rng.standard_normal((64, 32, 3, 3), dtype=np.float32)
  t = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), padding=1)
  items, _ = create_schedule(UOp.sink(t.uop))
  opts = choose_opts(simplified_kernel(items[0].ast), Device["CPU"].renderer)
  if not any(o.op is OptOps.WINDOW for o in opts): pytest.skip(f"the host's caps don't window this conv: {opts}")
  out, src = run(t, opts)
  ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy()
  np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)
  assert "@llvm.masked.load" in src and not re.search(r"select i1 %\S+, float ", src), src

"""Vector memory accesses of the CUDA renderers (tg_cuda/devectorize.py): an upcast elementwise kernel moves its data with one
4/8/16-byte access per lane group (CUDA C `tg_ldv/tg_stv`, PTX `ld/st.global.v<n>`) where the address is aligned, lane by lane
where it isn't (a view at an odd offset), on DEV=MOCK+CUDA and MOCK+CUDA:PTX, against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core.codegen import get_program
from tg_core.device import Device
from tg_core.dtype import dtypes
from tg_core.helpers import Context
from tg_core.schedule import create_schedule
from tg_core.tensor import Tensor
from tg_core.uop.ops import UOp
from tg_cuda import compiler as nvrtc

try:
  nvrtc.load_nvrtc()
  HAS_NVRTC = True
except nvrtc.NVRTCNotFoundError: HAS_NVRTC = False

DEVS = {"MOCK+CUDA": "CUDA:9", "MOCK+CUDA:PTX": "CUDA:10"}
VECTOR_LOAD = {"MOCK+CUDA": "tg_ldv<", "MOCK+CUDA:PTX": "ld.global.v4."}
VECTOR_STORE = {"MOCK+CUDA": "tg_stv<", "MOCK+CUDA:PTX": "st.global.v4."}

@pytest.fixture(scope="module", params=list(DEVS), ids=["cuda_c", "ptx"])
def dev(request) -> tuple[str, str]:
  if request.param == "MOCK+CUDA" and not HAS_NVRTC: pytest.skip("NVRTC is not installed (pip install tg-cuda[nvrtc])")
  with Context(DEV=request.param):
    d = Device[DEVS[request.param]]
  assert d.iface == "MOCK"
  return DEVS[request.param], request.param

def _src(t: Tensor) -> str:
  items, _ = create_schedule(UOp.sink(t.uop))
  return get_program(items[-1].ast, Device[t.device].renderer).src

@pytest.mark.parametrize("dt", [np.float32, np.float16, np.int32], ids=["f32", "f16", "i32"])
def test_elementwise_moves_vectors(dev, dt):
  name, kind = dev
  x = (np.arange(8 * 16) % 23 - 11).astype(dt).reshape(8, 16)
  y = (np.arange(8 * 16) % 7 + 1).astype(dt).reshape(8, 16)
  t = Tensor(x, device=name) * Tensor(y, device=name) + 3
  src = _src(t)
  assert VECTOR_LOAD[kind] in src and VECTOR_STORE[kind] in src
  np.testing.assert_array_equal(t.numpy(), x * y + dt(3))

def test_misaligned_view_goes_lane_by_lane(dev):
  """A view starting at element 1 (4 bytes past a 16-byte boundary): the run-time test takes the lane-by-lane path, same values."""
  name, kind = dev
  x = np.arange(8 * 9, dtype=np.float32).reshape(8, 9)
  t = Tensor(x, device=name)[:, 1:9] * 2
  assert VECTOR_LOAD[kind] in _src(t)
  np.testing.assert_array_equal(t.numpy(), x[:, 1:9] * 2)

def test_bfloat16_and_gated_loads(dev):
  """bf16 (8-byte vectors of its 16 bits) and a padded (gated) load, which splits into lanes."""
  name, _ = dev
  x = np.arange(4 * 8, dtype=np.float32).reshape(4, 8) / 4
  t = (Tensor(x, device=name).cast(dtypes.bfloat16) * 2).cast(dtypes.float32)
  np.testing.assert_array_equal(t.numpy(), x * 2)
  p = Tensor(x, device=name).pad(((0, 0), (1, 3))) + 1
  np.testing.assert_array_equal(p.numpy(), np.pad(x, ((0, 0), (1, 3))) + 1)

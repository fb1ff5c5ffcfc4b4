"""tg_core.distributed: the collectives and the data-parallel example under `mpirun -np 2` (skipped with the reason when mpirun or
mpi4py is missing), and in this process, a world of one rank (MPI's singleton init), the results and the error paths."""
from __future__ import annotations
import importlib.util
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from tg_core import Tensor, Variable, dtypes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None
need_mpi4py = pytest.mark.skipif(not HAVE_MPI4PY, reason="mpi4py not installed: pip install mpi4py (tg-core[mpi])")

# the cross-process tests check the transport, not a device: they run on CPU (the PYTHON interpreter device takes minutes to
# train the CNN), the collectives on both
HAVE_CPU = importlib.util.find_spec("tg_cpu_x86") is not None

def mpirun(script: str, *args: str, timeout: float, dev: str | None = None) -> str:
  """Run `script` on 2 ranks; its output. A job that overruns `timeout` is killed whole (mpirun and its ranks)."""
  if shutil.which("mpirun") is None: pytest.skip("mpirun not found: apt-get install openmpi-bin libopenmpi-dev")
  if not HAVE_MPI4PY: pytest.skip("mpi4py not installed: pip install mpi4py (tg-core[mpi])")
  # containers often forbid the cross-process memory reads (CMA) Open MPI's shared-memory transport tries first
  env = {"OMPI_MCA_btl_vader_single_copy_mechanism": "none", **os.environ, **({"DEV": dev} if dev else {})}
  cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, os.path.join(ROOT, script), *args]
  p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
  try: out, _ = p.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    os.killpg(p.pid, signal.SIGKILL)
    out, _ = p.communicate()
    pytest.fail(f"{' '.join(cmd)} did not finish in {timeout} s:\n{out[-4000:]}")
  assert p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}:\n{out[-6000:]}"
  return out

def test_collectives_two_ranks():
  out = mpirun("tests/mpi_collectives.py", *(["CPU"] if HAVE_CPU else []), "PYTHON", timeout=400)
  assert "collectives ok on rank 0 of 2" in out and "collectives ok on rank 1 of 2" in out, out

def test_data_parallel_digits_two_ranks():
  if importlib.util.find_spec("sklearn") is None: pytest.skip("scikit-learn not installed (the digits dataset): pip install scikit-learn")
  out = mpirun("examples/data_parallel_mpi.py", "--check", *(["--steps", "12"] if HAVE_CPU else ["--steps", "3"]), timeout=600, dev="CPU" if HAVE_CPU else None)
  assert "data parallel over 2 ranks" in out and "check passed" in out, out

# *** in this process: a world of one rank ***

@pytest.fixture
def dist():
  if not HAVE_MPI4PY: pytest.skip("mpi4py not installed: pip install mpi4py (tg-core[mpi])")
  import tg_core.distributed as dist
  try: dist.world()
  except dist.MPIUnavailableError as e: pytest.skip(str(e))
  return dist

def test_world_of_one(dist):
  w = dist.world()
  assert (w.rank, w.size) == (0, 1) and dist.world() is w
  w.barrier()

def test_shard_bounds_ceil_divided(dist):
  # as Tensor.shard: ceil(n/parts) per shard, the last ones smaller or empty
  assert dist.shard_bounds(10, 4) == [(0, 3), (3, 6), (6, 9), (9, 10)]
  assert dist.shard_bounds(1, 2) == [(0, 1), (1, 1)]
  assert dist.shard_bounds(6, 3) == [(0, 2), (2, 4), (4, 6)]
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  np.testing.assert_array_equal(dist.shard_over_ranks(Tensor(x), 1).numpy(), x)

@pytest.mark.parametrize("op", ["sum", "mean", "max"])
def test_allreduce_one_rank_is_identity(dist, op):
  x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
  np.testing.assert_array_equal(dist.allreduce(Tensor(x), op).numpy(), x)
  np.testing.assert_array_equal(dist.allreduce(Tensor(x[:, :0]), op).numpy(), x[:, :0])
  np.testing.assert_array_equal(dist.allreduce(Tensor(np.arange(6, dtype=np.int32)), op).numpy(), np.arange(6))

def test_allgather_broadcast_one_rank(dist):
  x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
  for ax in (0, 1, 2, -1): np.testing.assert_array_equal(dist.allgather(Tensor(x), ax).numpy(), x)
  np.testing.assert_array_equal(dist.broadcast(Tensor(x)).numpy(), x)
  np.testing.assert_array_equal(dist.broadcast(Tensor(x).permute(2, 0, 1) + 1).numpy(), x.transpose(2, 0, 1) + 1)

def test_average_gradients_one_rank(dist):
  # params of two dtypes and two devices: one flat allreduce per (dtype, device), each grad back in its shape
  rng = np.random.default_rng(2)
  ps = [Tensor.zeros(*shape, dtype=dt, device=dev, requires_grad=True).contiguous()
        for shape, dt, dev in (((2, 3), dtypes.float32, None), ((4,), dtypes.float16, None), ((3,), dtypes.float32, "PYTHON"), ((), dtypes.float32, None))]
  xs = [rng.standard_normal(p.shape).astype(np.float32) for p in ps]
  for p, x in zip(ps, xs): (p * Tensor(x, device=p.device, dtype=p.dtype)).sum().backward()
  dist.average_gradients(ps)
  for p, x in zip(ps, xs):
    assert p.grad.shape == p.shape and p.grad.device == p.device
    np.testing.assert_allclose(p.grad.numpy().astype(np.float32), x.astype(np.float16) if p.dtype == dtypes.float16 else x, rtol=1e-6)

def test_device_without_host_view(dist, monkeypatch):
  # a device whose memory the host can't see (a GPU): the collectives go through host copies
  from tg_core import Device
  monkeypatch.setattr(type(Device["PYTHON"].allocator), "supports_as_buffer", property(lambda self: False))
  x = np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)
  for got in (dist.allreduce(Tensor(x, device="PYTHON")), dist.allgather(Tensor(x, device="PYTHON"), 1), dist.broadcast(Tensor(x, device="PYTHON"))):
    assert got.device == "PYTHON"
    np.testing.assert_array_equal(got.numpy(), x)

def test_bad_arguments(dist):
  t = Tensor([1.0, 2.0])
  with pytest.raises(ValueError, match="unknown op 'prod'; use one of sum, mean, max"): dist.allreduce(t, "prod")  # type: ignore[arg-type]
  with pytest.raises(TypeError, match="bool tensor; cast it to an int dtype"): dist.allreduce(Tensor([True, False]), "sum")
  with pytest.raises(ValueError, match="0-d tensor has no axis"): dist.allgather(Tensor(1.0))
  with pytest.raises(IndexError): dist.allgather(t, 2)
  with pytest.raises(ValueError, match="root 1 is not a rank of this 1-rank job"): dist.broadcast(t, root=1)
  with pytest.raises(RuntimeError, match=r"param 0 \(shape \(2,\)\) has no gradient; call backward\(\) first"): dist.average_gradients([t])
  with pytest.raises(IndexError): dist.shard_over_ranks(t, 1)
  v = Variable("n", 1, 8).bind(3)
  with pytest.raises(ValueError, match="symbolic"): dist.allreduce(Tensor.ones(8)[:v])

def test_mpi_missing_is_typed(dist, monkeypatch):
  dist.world.cache_clear()
  monkeypatch.setitem(sys.modules, "mpi4py", None)  # what `import mpi4py` sees when it isn't installed
  try:
    with pytest.raises(dist.MPIUnavailableError, match="pip install mpi4py .* apt-get install openmpi-bin libopenmpi-dev"): dist.world()
    with pytest.raises(ImportError): dist.allreduce(Tensor([1.0]))
  finally:
    monkeypatch.undo()
    dist.world.cache_clear()
  assert dist.world().size == 1

def test_bfloat16_and_bool_one_rank(dist):
  x = Tensor([1.5, -2.25, 3.0]).cast(dtypes.bfloat16)
  got = dist.allreduce(x)
  assert got.dtype == dtypes.bfloat16
  np.testing.assert_array_equal(got.cast(dtypes.float32).numpy(), [1.5, -2.25, 3.0])
  np.testing.assert_array_equal(dist.allreduce(Tensor([True, False]), "max").numpy(), [True, False])

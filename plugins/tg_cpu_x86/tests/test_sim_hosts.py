"""The fp32 matmul plans for other x86 hosts, simulated on this one: an AVX2-only CPU (TG_CPU_ARCH=x86-64-v3: 8 lanes, 16
vector registers, the 16 x 6 register tile) and an Intel Sapphire Rapids core's caches (TG_CPU_CACHES=48K,2M,105M), alone and
together. For each, the heuristic's plan of every shape of bench/cpu_matmul.py's table applies, renders and compiles, and the
small and medium shapes' products match numpy (a fresh process each: the caps are read once per process)."""
from __future__ import annotations
import os
import subprocess
import sys
import textwrap

import pytest

SPR_CACHES = "48K,2M,105M"
SIM_HOSTS = {"avx2": {"TG_CPU_ARCH": "x86-64-v3"}, "spr_caches": {"TG_CPU_CACHES": SPR_CACHES},
             "avx2_spr_caches": {"TG_CPU_ARCH": "x86-64-v3", "TG_CPU_CACHES": SPR_CACHES}}

CODE = """
import numpy as np
from tg_core import Tensor
from tg_core.codegen import get_program, simplified_kernel
from tg_core.codegen.opt import OptOps, hand_coded_optimizations
from tg_core.device import Device
from tg_core.schedule import create_schedule
from tg_core.uop.ops import UOp
dev = Device["CPU"]
caps = dev.renderer.caps
print("caps", caps.vector_width, caps.big_reduce_tile, caps.cache_sizes)
# bench/cpu_matmul.py's table (M, K, N, x @ W.T), then shapes small enough to run here: odd sizes (padded tiles), a K-blocked
# skinny one, and one whose B outgrows the L2 with a row count no tile divides (packed panels, clamped padded rows)
TABLE = [(512, 512, 512, False), (1024, 1024, 1024, False), (2048, 2048, 2048, False), (1000, 1000, 1000, False), (4096, 64, 4096, False),
         (64, 4096, 64, False), (1, 4096, 4096, False), (1, 4096, 4096, True), (4096, 4096, 4096, False)]
RUN = [(257, 129, 511, False), (64, 1024, 64, False), (301, 1024, 640, False), (1, 1024, 2048, False), (1, 2048, 1024, True)]
def mm(a, b, tr): return a @ (b.T if tr else b)
for m, k, n, tr in TABLE + RUN:
  items, _ = create_schedule(UOp.sink(mm(Tensor.empty(m, k, device="CPU"), Tensor.empty(*((n, k) if tr else (k, n)), device="CPU"), tr).uop))
  assert len(items) == 1
  opts = hand_coded_optimizations(simplified_kernel(items[0].ast), caps)  # as get_program's heuristic sees the kernel
  prg = get_program(items[0].ast, dev.renderer, opts)  # raises where an opt doesn't apply
  dev.compiler.compile(prg.src)
  print(f"plan {m}x{k}x{n}{' T' if tr else ''}:", [(o.op.name, o.axis, o.arg) for o in opts])
rng = np.random.default_rng(0)
for m, k, n, tr in RUN:
  a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((n, k) if tr else (k, n), dtype=np.float32)
  got = mm(Tensor(a, device="CPU"), Tensor(b, device="CPU"), tr).numpy()
  np.testing.assert_allclose(got, mm(a.astype(np.float64), b.astype(np.float64), tr), rtol=1e-4, atol=1e-4 * k ** 0.5, err_msg=f"{m}x{k}x{n}")
print("OK")
"""

@pytest.mark.parametrize("host", list(SIM_HOSTS))
def test_sim_host_plans_apply_and_match_numpy(host: str) -> None:
  env = {**os.environ, "TG_CPU_ARCH": "", "TG_CPU_CACHES": "", **SIM_HOSTS[host]}
  out = subprocess.run([sys.executable, "-c", textwrap.dedent(CODE)], capture_output=True, text=True, timeout=600, env=env)
  assert out.returncode == 0 and out.stdout.rstrip().endswith("OK"), f"stdout:\n{out.stdout[-3000:]}\nstderr:\n{out.stderr[-3000:]}"
  lines = out.stdout.splitlines()
  caps = lines[0]
  assert caps.startswith("caps 8 (16, 6)" if "TG_CPU_ARCH" in SIM_HOSTS[host] else "caps"), caps
  if "TG_CPU_CACHES" in SIM_HOSTS[host]: assert caps.endswith(f"{(48 << 10, 2 << 20, 105 << 20)}"), caps
  plans = {ln.split(":", 1)[0][5:]: ln.split(":", 1)[1] for ln in lines if ln.startswith("plan ")}
  # the cache plans hold where the row tile doesn't divide the rows (AVX2's 6 rows: every power of two is padded): the big
  # square matmuls pack both operands, and the medium one with a padded row count packs too
  for shape in ("1024x1024x1024", "2048x2048x2048", "4096x4096x4096", "301x1024x640"):
    assert "'PACK'" in plans[shape] and "'PACKROWS'" in plans[shape], (shape, plans[shape])

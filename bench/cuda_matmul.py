"""fp16/bf16/fp32 matmul TFLOPS on an NVIDIA GPU: tg (DEV=CUDA, the tg-cuda plugin) vs torch's cuBLAS, same process and GPU.

Each size is checked against torch first (max relative error printed; whether tg's kernel runs on the tensor cores, the TC opt's
mma.sync, is printed too), then timed: tg by wall time of running its schedule to completion
(launch + kernel), torch by CUDA events around `a @ b`; best of --runs. Needs torch with CUDA and libcuda."""
from __future__ import annotations
import argparse
import os
import time

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
  ap.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16", "float32"])
  ap.add_argument("--runs", type=int, default=5)
  args = ap.parse_args()
  os.environ.setdefault("DEV", "CUDA")
  import torch
  from tg_core import Tensor
  from tg_core.device import Device
  from tg_core.engine.realize import run_schedule
  from tg_core.codegen import get_program
  from tg_core.uop import Ops
  if not torch.cuda.is_available(): raise SystemExit("torch sees no CUDA GPU: this benchmark needs one")
  dev = Device["CUDA"]
  print(f"GPU: {torch.cuda.get_device_name()} ({dev.arch}); tg renderer {dev.renderer.target_name()}")
  for dt in args.dtypes:
    tdt = getattr(torch, dt)
    for n in args.sizes:
      a, b = torch.randn(n, n, dtype=tdt, device="cuda"), torch.randn(n, n, dtype=tdt, device="cuda")
      ta, tb = Tensor(a.float().cpu().numpy(), device="CUDA").cast(dt).realize(), Tensor(b.float().cpu().numpy(), device="CUDA").cast(dt).realize()
      kernels = [it.ast for it in (ta @ tb).schedule() if it.ast.op is Ops.SINK]  # (a COPY is no kernel)
      tc = "mma.sync" in get_program(kernels[-1], dev.renderer).src
      out = (ta @ tb).float().numpy()
      want = (a.float() @ b.float()).cpu().numpy()
      err = float(abs(out - want).max() / (abs(want).max() + 1e-9))
      best_tg = float("inf")
      for _ in range(args.runs):
        sched = (ta @ tb).schedule()  # built untimed; running it (launch + GPU time to completion) is timed
        dev.synchronize()
        t0 = time.perf_counter()
        run_schedule(sched)
        dev.synchronize()
        best_tg = min(best_tg, time.perf_counter() - t0)
      st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
      best_t = float("inf")
      for _ in range(args.runs):
        st.record(); a @ b; en.record(); torch.cuda.synchronize()  # noqa: E702
        best_t = min(best_t, st.elapsed_time(en) / 1e3)
      tf = lambda t, n=n: 2 * n ** 3 / t * 1e-12  # noqa: E731
      print(f"matmul {n}^3 {dt:8s}: tg {tf(best_tg):7.1f} TFLOPS | cuBLAS {tf(best_t):7.1f} | tg/cuBLAS {best_t / best_tg:5.2f}x | max rel err {err:.1e}"
            f" | tensor cores: {'mma.sync' if tc else 'no'}")

if __name__ == "__main__": main()

"""Import time of tg_core with five plugins installed versus none, in two fresh virtualenvs (same run).

Reports the median over runs of `import tg_core` and of `import tg_core; Device.DEFAULT` (which runs plugin discovery:
every manifest is imported, no implementation). Goal: under 150 ms added by five plugins."""
from __future__ import annotations
import argparse
import pathlib
import statistics
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from plugin_env import make_venv, pip_install, plugin_copy, run  # noqa: E402

CODE = {"import": "import time; st = time.perf_counter(); import tg_core; print(time.perf_counter() - st)",
        "import+discovery": "import time; st = time.perf_counter(); import tg_core; tg_core.Device.DEFAULT; print(time.perf_counter() - st)"}

def measure(py: pathlib.Path, code: str, runs: int) -> float:
  ts = []
  for _ in range(runs):
    r = run(py, code)
    if r.returncode != 0: raise RuntimeError(r.stderr)
    ts.append(float(r.stdout.strip().splitlines()[-1]))
  return statistics.median(ts)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--runs", type=int, default=7, help="subprocess runs per measurement (median is reported; default 7)")
  args = ap.parse_args()
  # byte-compile tg_core first, as `pip install` leaves it (with PYTHONDONTWRITEBYTECODE every run would recompile it)
  import subprocess
  subprocess.run([sys.executable, "-m", "compileall", "-q", str(pathlib.Path(__file__).resolve().parent.parent / "tg_core")], capture_output=True)
  with tempfile.TemporaryDirectory() as d:
    tmp = pathlib.Path(d)
    bare = make_venv(tmp / "bare")
    full = make_venv(tmp / "five")
    for i in range(5): pip_install(full, plugin_copy(tmp / f"src{i}", f"tg-bench-{i}", f"tg_bench_{i}", device=f"BENCH{i}"))
    for name, code in CODE.items():
      t0, t5 = measure(bare, code, args.runs), measure(full, code, args.runs)
      print(f"{name:18s}: no plugins {t0*1e3:7.1f} ms | five plugins {t5*1e3:7.1f} ms | added {(t5-t0)*1e3:6.1f} ms (goal < 150 ms)")

if __name__ == "__main__": main()

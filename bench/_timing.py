"""Shared by the bench scripts: best-of timing that rides out noisy neighbours, and snippets run in fresh processes.

Every peer is timed in its own process (numpy's OpenBLAS threads keep spinning after a call and would take a core from
whatever runs next in the same process). Snippets can `from _timing import best_of`: run_py puts bench/ on their path."""
from __future__ import annotations
import os
import platform
import shutil
import subprocess
import sys
import time
from typing import Any, Callable

MIN_SECONDS = 1.0
# BENCH_CLOCK=thread: best_of times with the calling thread's CPU time instead of the wall clock, for single-threaded
# peers on a shared machine (other processes' load then doesn't count; their cache pressure still does)
CLOCK = time.thread_time if os.environ.get("BENCH_CLOCK") == "thread" else time.perf_counter

def cpu_model() -> str:
  """The host CPU's model name (every bench prints it: figures differ between machines)."""
  try:
    with open("/proc/cpuinfo") as f: return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
  except (OSError, StopIteration): return platform.processor() or platform.machine() or "unknown CPU"
BENCH_DIR = os.path.dirname(os.path.abspath(__file__))

# the least process CPU time (all threads) of a run in the last best_of call
LAST_CPU = 0.0

def best_of(fn: Callable[..., Any], runs: int, setup: Callable[[], Any] | None = None) -> float:
  """The best time of fn() (of fn(setup()) with `setup` untimed) over at least `runs` runs and MIN_SECONDS, after a warm-up.
  Sets LAST_CPU to the least process CPU time (every thread's) a run took."""
  global LAST_CPU
  fn(setup()) if setup is not None else fn()
  best, cpu, k, t0 = float("inf"), float("inf"), 0, time.perf_counter()
  while k < runs or time.perf_counter() - t0 < MIN_SECONDS:
    k += 1
    arg = setup() if setup is not None else None
    st, cst = CLOCK(), time.process_time()
    fn(arg) if setup is not None else fn()
    best, cpu = min(best, CLOCK() - st), min(cpu, time.process_time() - cst)
  LAST_CPU = cpu
  return best

def run_py(code: str, env: dict[str, str] | None = None) -> float:
  """Run `code` in a fresh interpreter with DEV=CPU; it prints a time last."""
  code = f"import sys; sys.path.insert(0, {BENCH_DIR!r})\n" + code
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "DEV": "CPU", **(env or {})})
  if r.returncode != 0: raise RuntimeError(r.stderr[-2000:])
  return float(r.stdout.strip().splitlines()[-1])

def have_tinygrad() -> bool:
  """PyPI tinygrad with the clang its CPU backend needs (installed with apt-get when running as root)."""
  try: import tinygrad  # noqa: F401
  except ImportError:
    print("tinygrad not installed (pip install tinygrad==0.14.0): tinygrad columns skipped")
    return False
  if shutil.which("clang") is None and os.geteuid() == 0: subprocess.run(["apt-get", "install", "-y", "-q", "clang"], capture_output=True)
  if shutil.which("clang") is None:
    print("clang not found (tinygrad's CPU backend needs it; apt-get install clang): tinygrad columns skipped")
    return False
  return True

# snippet header for timing tg kernels: the schedule is built untimed, running it is timed
TG_KERNEL_TIMER = """
import numpy as np
from tg_core import Tensor, Device
from tg_core.engine.realize import run_schedule
from _timing import best_of
def tg_time(make, runs):
  make().realize()
  return best_of(lambda items: (run_schedule(items), Device["CPU"].synchronize()), runs, setup=lambda: make().schedule())
"""

# the same for tinygrad: the graph is built untimed, realizing it is timed
TINYGRAD_TIMER = """
import numpy as np
from tinygrad import Tensor, Device
from _timing import best_of
def tinygrad_time(make, runs):
  return best_of(lambda t: (t.realize(), Device[Device.DEFAULT].synchronize()), runs, setup=make)
"""

# a peer's reply line starts with this (anything else it prints, e.g. DEBUG output, is passed over)
_REPLY = "@@peer "

def _serve() -> None:
  """A peer's loop (see Peer): each stdin line is a JSON request, ["exec", code] (run in the peer's namespace) or
  ["time", expr, runs, min_s] (best_of the expression, a callable or a (make, run) pair as tg_time takes), answered with one
  reply line: "ok", the time, or "error" and the traceback's last line."""
  import json
  import traceback
  ns: dict[str, Any] = {"__name__": "__peer__"}
  for line in sys.stdin:
    req = json.loads(line)
    try:
      if req[0] == "exec":
        exec(req[1], ns)
        out = "ok"
      else:
        global MIN_SECONDS
        MIN_SECONDS = float(req[3])
        t = ns["_time"](eval(req[1], ns), int(req[2]))
        out = f"{t!r} {LAST_CPU!r}"
    except Exception as e:  # reported to the driver, which raises it there
      out = "error " + json.dumps(f"{type(e).__name__}: {e} | {traceback.format_exc().strip().splitlines()[-1]}")
    print(_REPLY + out, flush=True)

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

def _host_busy() -> float | None:
  """CPU seconds every core of the host has spent busy since boot (/proc/stat: all but idle and iowait), None off Linux."""
  try:
    with open("/proc/stat") as f: v = [int(x) for x in f.readline().split()[1:]]
  except (OSError, ValueError): return None
  return (sum(v[:8]) - v[3] - v[4]) / _TICK

def _proc_cpu(pid: int) -> float | None:
  """CPU seconds process `pid` has used (its threads, user and system), None off Linux."""
  try:
    with open(f"/proc/{pid}/stat") as f: v = f.read().rsplit(")", 1)[1].split()
  except (OSError, IndexError): return None
  return (int(v[11]) + int(v[12])) / _TICK

class Peer:
  """One peer (tg with a thread count, numpy, torch, tinygrad) in its own persistent interpreter, driven over a pipe, so that
  a bench can alternate peers round by round (on a VM whose speed swings, the ratio of two measurements taken minutes apart
  says little; taken seconds apart, one round's ratio holds). Its threads idle between requests: numpy's OpenBLAS and
  torch's OpenMP threads spin a while after a call, so `time` waits `settle_s` before it starts (a peer that just ran may
  still spin). `setup` is code run once (imports, inputs); `timer` defines `_time(fn, runs)`."""
  def __init__(self, name: str, setup: str, timer: str = "from _timing import best_of as _time\n",
               env: dict[str, str] | None = None, settle_s: float = 0.2):
    self.name, self.settle_s = name, settle_s
    self.cpu: list[float] = []  # per `time` call: the least process CPU time of a run
    self.others: list[float] = []  # per `time` call: cores the rest of the host kept busy meanwhile (Linux; else empty)
    code = f"import sys; sys.path.insert(0, {BENCH_DIR!r})\nfrom _timing import _serve\n_serve()"
    self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env={**os.environ, "DEV": "CPU", **(env or {})})
    self.request(["exec", timer + setup])

  def request(self, req: list[Any]) -> str:
    import json
    assert self.proc.stdin is not None and self.proc.stdout is not None
    self.proc.stdin.write(json.dumps(req) + "\n")
    self.proc.stdin.flush()
    for line in self.proc.stdout:
      if line.startswith(_REPLY):
        out = line[len(_REPLY):].strip()
        if out.startswith("error "): raise RuntimeError(f"peer {self.name}: {json.loads(out[6:])}")
        return out
    raise RuntimeError(f"peer {self.name} exited (code {self.proc.wait()}) before answering {req[0]}")

  def time(self, expr: str, runs: int, min_s: float) -> float:
    """The best time of `expr` (evaluated in the peer) over at least `runs` runs and `min_s` seconds, after a warm-up; the
    least process CPU time of a run (all the peer's threads, spinning ones too) goes to `self.cpu`."""
    time.sleep(self.settle_s)
    busy0, mine0, t0 = _host_busy(), _proc_cpu(self.proc.pid), time.perf_counter()
    wall, cpu = self.request(["time", expr, runs, min_s]).split()
    if busy0 is not None and mine0 is not None and (busy1 := _host_busy()) is not None and (mine1 := _proc_cpu(self.proc.pid)) is not None:
      self.others.append(max(0.0, (busy1 - busy0) - (mine1 - mine0)) / (time.perf_counter() - t0))
    self.cpu.append(float(cpu))
    return float(wall)

  def close(self) -> None:
    if self.proc.stdin is not None: self.proc.stdin.close()
    self.proc.wait()

def rounds(peers: list[Peer], expr: str, n_rounds: int, runs: int, min_s: float) -> dict[str, list[float]]:
  """Each peer's time of `expr`, per round: the peers take turns, in alternating order (round 0 forward, round 1 backward: a
  drift in the machine's speed then favours none), so the times of one round were taken within seconds of each other."""
  out: dict[str, list[float]] = {p.name: [] for p in peers}
  for r in range(n_rounds):
    for p in (peers if r % 2 == 0 else peers[::-1]): out[p.name].append(p.time(expr, runs, min_s))
  return out

def median(xs: list[float]) -> float:
  s = sorted(xs)
  return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2

def ratio_stats(num: list[float], den: list[float]) -> tuple[float, float, float]:
  """The per-round ratios num[i] / den[i] (e.g. numpy's time over tg's: tg's speed relative to numpy): median, min, max."""
  rs = [a / b for a, b in zip(num, den)]
  return median(rs), min(rs), max(rs)

"""Pass counts of the ONNX backend suite (CPU tests) per category for tg (DEV=CPU) and onnxruntime, run in the same invocation.

Usage: python bench/onnx_backend_counts.py [-n 2]. Runs plugins/tg_onnx/tests/test_onnx_backend.py (tg, with its exclude list) and
ort_backend_suite.py (onnxruntime's own backend), each under pytest with a JUnit report, and prints passed/failed/skipped per category."""
from __future__ import annotations
import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

TESTS = os.path.join(os.path.dirname(__file__), "..", "plugins", "tg_onnx", "tests")
CATEGORIES = {"OnnxBackendNodeModelTest": "node", "OnnxBackendRealModelTest": "real", "OnnxBackendSimpleModelTest": "simple",
              "OnnxBackendPyTorchConvertedModelTest": "pytorch-converted", "OnnxBackendPyTorchOperatorModelTest": "pytorch-operator"}

def read_report(xml: str) -> tuple[dict[str, collections.Counter], dict[str, set[str]]]:
  counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
  passed: dict[str, set[str]] = collections.defaultdict(set)
  for case in ET.parse(xml).getroot().iter("testcase"):
    if not case.get("name", "").endswith("_cpu"): continue
    cat = CATEGORIES.get(case.get("classname", "").rsplit(".", 1)[-1], "other")
    status = "failed" if case.find("failure") is not None or case.find("error") is not None else "skipped" if case.find("skipped") is not None else "passed"
    counts[cat][status] += 1
    if status == "passed": passed[cat].add(case.get("name", ""))
  return counts, passed

def run_suite(test_file: str, workers: str, env: dict[str, str]) -> tuple[dict[str, collections.Counter], dict[str, set[str]], float]:
  with tempfile.TemporaryDirectory() as d:
    xml = os.path.join(d, "report.xml")
    st = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", workers, test_file, "-k", "_cpu", f"--junitxml={xml}"],
                   cwd=TESTS, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return (*read_report(xml), time.perf_counter() - st)

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("-n", default="2", help="pytest-xdist workers")
  ap.add_argument("--from-xml", nargs=2, metavar=("TG_XML", "ORT_XML"), help="count existing JUnit reports instead of running the suites")
  args = ap.parse_args()
  env = {**os.environ, "DEV": os.environ.get("DEV", "CPU"), "TG_ONNX_REAL_MODELS": "1"}
  if args.from_xml:
    (tg, tg_pass), (ort, ort_pass), tg_wall, ort_wall = read_report(args.from_xml[0]), read_report(args.from_xml[1]), 0.0, 0.0
  else:
    tg, tg_pass, tg_wall = run_suite("test_onnx_backend.py", args.n, env)
    ort, ort_pass, ort_wall = run_suite("ort_backend_suite.py", args.n, env)
  print(f"{'category':18s} {'tg pass':>8s} {'tg fail':>8s} {'tg skip':>8s} {'ort pass':>9s} {'ort fail':>9s} {'ort pass, tg not':>17s}")
  for cat in CATEGORIES.values():
    t, o = tg[cat], ort[cat]
    print(f"{cat:18s} {t['passed']:8d} {t['failed']:8d} {t['skipped']:8d} {o['passed']:9d} {o['failed']:9d} {len(ort_pass[cat] - tg_pass[cat]):17d}")
  print(f"{'total':18s} {sum(c['passed'] for c in tg.values()):8d} {sum(c['failed'] for c in tg.values()):8d} {sum(c['skipped'] for c in tg.values()):8d} "
        f"{sum(c['passed'] for c in ort.values()):9d} {sum(c['failed'] for c in ort.values()):9d}")
  print(f"wall time: tg {tg_wall:.0f}s, onnxruntime {ort_wall:.0f}s (-n {args.n}, DEV={env['DEV']})")
  missing = sorted(n for cat in ort_pass for n in ort_pass[cat] - tg_pass[cat])
  if missing: print("onnxruntime passes, tg does not (excluded or failing):\n  " + "\n  ".join(missing))

if __name__ == "__main__": main()

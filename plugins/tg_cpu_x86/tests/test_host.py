"""Host detection read through the renderer's caps: cache sizes from a (fake) sysfs tree or TG_CPU_CACHES, and the features of
TG_CPU_ARCH's CPU."""
from __future__ import annotations
import os
import subprocess
import sys

import pytest

from tg_cpu_x86.host import CACHES_KNOB, cache_sizes, host_cache_sizes, parse_caches

def _sysfs(root: str, entries: list[tuple[str, int, str]]) -> str:
  for i, (kind, level, size) in enumerate(entries):
    d = os.path.join(root, f"index{i}")
    os.makedirs(d)
    for name, val in (("type", kind), ("level", str(level)), ("size", size)):
      with open(os.path.join(d, name), "w") as f: f.write(val + "\n")
  return root

def test_cache_sizes_from_sysfs(tmp_path: pytest.TempPathFactory) -> None:
  # a Sapphire Rapids-like core: 48K L1d, 32K L1i (skipped), 2M L2, 105M L3
  root = _sysfs(str(tmp_path), [("Data", 1, "48K"), ("Instruction", 1, "32K"), ("Unified", 2, "2048K"), ("Unified", 3, "107520K")])
  assert cache_sizes(root) == (48 << 10, 2 << 20, 107520 << 10)

def test_cache_sizes_unknown_or_gappy(tmp_path: pytest.TempPathFactory) -> None:
  assert cache_sizes(str(tmp_path / "missing")) == ()
  # no L1 listed: the L2 must not pass for the L1
  assert cache_sizes(_sysfs(str(tmp_path / "gap"), [("Unified", 2, "1M"), ("Unified", 3, "32M")])) == ()
  assert cache_sizes(_sysfs(str(tmp_path / "m"), [("Data", 1, "32K"), ("Unified", 2, "1M")])) == (32 << 10, 1 << 20)

def test_device_declares_the_host_caches() -> None:
  from tg_core.device import Device
  assert Device["CPU"].renderer.caps.cache_sizes == host_cache_sizes()

def test_caches_knob_parses() -> None:
  assert parse_caches("48K,2M,105M") == (48 << 10, 2 << 20, 105 << 20)
  assert parse_caches(" 32768 , 1M ") == (32 << 10, 1 << 20)
  assert parse_caches("1G") == (1 << 30,)

@pytest.mark.parametrize("bad", ["", ",", "48K,,2M", "48KB", "1.5M", "fast", "0", "48K,-1M"])
def test_caches_knob_rejects_bad_values(bad: str) -> None:
  with pytest.raises(ValueError, match=r"TG_CPU_CACHES=.*e\.g\. 48K,2M,105M"): parse_caches(bad)

def test_caches_knob_replaces_sysfs(tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
  root = _sysfs(str(tmp_path), [("Data", 1, "32K"), ("Unified", 2, "1M")])
  monkeypatch.delenv(CACHES_KNOB, raising=False)
  assert host_cache_sizes(root) == (32 << 10, 1 << 20)
  monkeypatch.setenv(CACHES_KNOB, "48K,2M,105M")
  assert host_cache_sizes(root) == (48 << 10, 2 << 20, 105 << 20)
  monkeypatch.setenv(CACHES_KNOB, "2M,48K?")
  with pytest.raises(ValueError, match="TG_CPU_CACHES"): host_cache_sizes(root)

def _caps_in(env: dict[str, str]) -> subprocess.CompletedProcess:
  code = "from tg_core.device import Device\nc = Device['CPU'].renderer.caps\nprint(c.cache_sizes, c.vector_width, c.big_reduce_tile, c.native_dp4a)"
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ, **env})

def test_device_declares_the_caches_knob() -> None:
  # the renderer's caps (what the heuristic plans for) take the knob's hierarchy; a bad value stops the device with the knob's name
  out = _caps_in({CACHES_KNOB: "48K,2M,105M"})
  assert out.returncode == 0 and out.stdout.startswith(f"{(48 << 10, 2 << 20, 105 << 20)} "), out.stderr[-2000:]
  bad = _caps_in({CACHES_KNOB: "lots"})
  assert bad.returncode != 0 and "ValueError: TG_CPU_CACHES='lots'" in bad.stderr, bad.stderr[-2000:]

@pytest.mark.parametrize("arch,width,tile,dp4a", [("x86-64-v2", 4, (8, 6), False), ("x86-64-v3", 8, (16, 6), True), ("skylake-avx512", 16, (32, 8), True)])
def test_arch_knob_declares_that_cpus_caps(arch: str, width: int, tile: tuple[int, int], dp4a: bool) -> None:
  # TG_CPU_ARCH's CPU plans with its own features (LLVM's host detection can't say them: they are read off its code), not an
  # empty feature string's SSE: x86-64-v3 is an AVX2 host's 8 lanes and 16 x 6 tile
  out = _caps_in({"TG_CPU_ARCH": arch, CACHES_KNOB: ""})
  assert out.returncode == 0, out.stderr[-2000:]
  assert out.stdout.split(") ", 1)[1].strip() == f"{width} {tile} {dp4a}", out.stdout

@pytest.mark.parametrize("cpu,want", [("x86-64-v2", set()), ("x86-64-v3", {"avx", "avx2", "fma", "f16c"}),
                                      ("skylake-avx512", {"avx", "avx2", "fma", "f16c", "avx512f", "avx512vl"}),
                                      ("cascadelake", {"avx", "avx2", "fma", "f16c", "avx512f", "avx512vl", "avx512vnni"}),
                                      ("sapphirerapids", {"avx", "avx2", "fma", "f16c", "avx512f", "avx512vl", "avx512vnni", "avx512bf16"})])
def test_arch_features_read_off_the_cpus_code(cpu: str, want: set[str]) -> None:
  # compiled only (nothing runs): any x86 host can check any CPU's probes
  from tg_cpu_x86 import llvmcapi
  from tg_cpu_x86.compiler import arch_features
  if not llvmcapi.available(): pytest.skip("llvmlite's C API isn't available")
  tm = llvmcapi.TargetMachine(llvmcapi.process_triple(), cpu, "", 3)
  feats = arch_features(lambda ir: tm.compile(ir, 3, asm=True).decode()).split(",")
  assert {f[1:] for f in feats if f[0] == "+"} == want and all(f[0] in "+-" for f in feats), feats

"""Host detection read through the renderer's caps: cache sizes from a (fake) sysfs tree."""
from __future__ import annotations
import os

import pytest

from tg_cpu_x86.host import cache_sizes

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
  assert Device["CPU"].renderer.caps.cache_sizes == cache_sizes()

"""tg_core's entry-point reader (dist-info folders, no importlib.metadata import) against importlib.metadata itself."""
import importlib.metadata as md

import pytest

from tg_core.plugins.entry_points import EntryPoint, dist_version, entry_points, normalize

@pytest.mark.parametrize("group", ["tg_core.plugins", "console_scripts", "pytest11"])
def test_matches_importlib_metadata(group: str):
  ours = sorted((e.name, e.value, normalize(e.dist), e.version) for e in entry_points(group))
  ref = sorted({(e.name, e.value, normalize(e.dist.name), e.dist.version) for e in md.entry_points(group=group)})
  assert ours == ref

def test_dist_version():
  for name in ("numpy", "pluggy", "pytest"): assert dist_version(name) == md.version(name)
  assert dist_version("no-such-distribution-tg") is None

def test_load():
  ep = EntryPoint("x", "os.path:join", "g", "d", "0")
  import os.path
  assert ep.load() is os.path.join

"""Entry points of installed distributions, read from their `*.dist-info` / `*.egg-info` folders on `sys.path`.

This is what `importlib.metadata.entry_points(group=...)` does for folders on the path, without importing
`importlib.metadata` (with its email parser it takes ~25 ms to import: a quarter of the cold-start budget of a first
kernel). Like importlib.metadata, the first distribution of a name on `sys.path` wins. Paths it can't read this way
(zip files on `sys.path`) fall back to importlib.metadata."""
from __future__ import annotations
import importlib
import os
import re
import stat
import sys
from dataclasses import dataclass
from typing import Any

@dataclass(frozen=True)
class EntryPoint:
  name: str
  value: str     # "module:attr.attr" or "module"
  group: str
  dist: str      # distribution name as its metadata spells it
  version: str

  def load(self) -> Any:
    module, _, attrs = self.value.partition(":")
    ret: Any = importlib.import_module(module.strip())
    for a in filter(None, attrs.strip().split(".")): ret = getattr(ret, a)
    return ret

def normalize(name: str) -> str: return re.sub(r"[-_.]+", "-", name).lower()

def _headers(meta_dir: str) -> dict[str, str]:
  """Name and Version from METADATA (dist-info) or PKG-INFO (egg-info): RFC 822 headers up to the first blank line."""
  ret: dict[str, str] = {}
  for fn in ("METADATA", "PKG-INFO"):
    try:
      with open(os.path.join(meta_dir, fn), encoding="utf-8", errors="replace") as f:
        for line in f:
          if not line.strip(): break
          k, sep, v = line.partition(":")
          if sep and k in ("Name", "Version"): ret.setdefault(k, v.strip())
      return ret
    except OSError: continue
  return ret

def _parse(text: str, group: str) -> list[tuple[str, str]]:
  """(name, value) pairs of one `[group]` section of an entry_points.txt (INI syntax)."""
  ret, inside = [], False
  for raw in text.splitlines():
    line = raw.strip()
    if not line or line[0] in "#;": continue
    if line.startswith("["):
      inside = line.strip("[]").strip() == group
      continue
    if inside and "=" in line:
      k, _, v = line.partition("=")
      ret.append((k.strip(), v.strip()))
  return ret

def _meta_dirs() -> list[tuple[str, str]] | None:
  """(normalized distribution name, metadata folder) in sys.path order; None if sys.path holds something only
  importlib.metadata can read (a zip file)."""
  ret = []
  for p in sys.path:
    p = p or "."
    try: st = os.stat(p)
    except OSError: continue
    if not stat.S_ISDIR(st.st_mode):
      if stat.S_ISREG(st.st_mode): return None
      continue
    if (hit := _listings.get(p)) is None or hit[0] != st.st_mtime_ns:
      try: names = sorted(os.listdir(p))
      except OSError: continue
      hit = _listings[p] = (st.st_mtime_ns, [(normalize(n.rsplit(".", 1)[0].split("-", 1)[0]), os.path.join(p, n))
                                             for n in names if n.endswith(".dist-info") or n.endswith(".egg-info")])
    ret.extend(hit[1])
  return ret

# path entry -> (its mtime, its metadata folders): discovery reads the path twice (entry points, tg-core's version), and a
# folder's mtime changes when a distribution is installed into or removed from it
_listings: dict[str, tuple[int, list[tuple[str, str]]]] = {}

def entry_points(group: str) -> list[EntryPoint]:
  """Every installed entry point of `group`, sorted by name."""
  if (dirs := _meta_dirs()) is None: return _from_importlib(group)
  seen: set[str] = set()
  ret: list[EntryPoint] = []
  for norm, d in dirs:
    if norm in seen: continue
    seen.add(norm)
    try:
      with open(os.path.join(d, "entry_points.txt"), encoding="utf-8") as f: text = f.read()
    except OSError: continue
    if f"[{group}]" not in text.replace(" ", ""): continue
    h = _headers(d)
    ret.extend(EntryPoint(k, v, group, h.get("Name", norm), h.get("Version", "?")) for k, v in _parse(text, group))
  return sorted(ret, key=lambda e: e.name)

def dist_version(dist: str) -> str | None:
  """The installed version of a distribution, or None when it isn't installed."""
  want = normalize(dist)
  if (dirs := _meta_dirs()) is None:
    import importlib.metadata as md
    try: return md.version(dist)
    except md.PackageNotFoundError: return None
  for norm, d in dirs:
    if norm == want: return _headers(d).get("Version")
  return None

def _from_importlib(group: str) -> list[EntryPoint]:
  import importlib.metadata as md
  return sorted((EntryPoint(e.name, e.value, group, e.dist.name if e.dist else "?", e.dist.version if e.dist else "?")
                 for e in md.entry_points(group=group)), key=lambda e: e.name)

__all__ = ["EntryPoint", "entry_points", "dist_version", "normalize"]

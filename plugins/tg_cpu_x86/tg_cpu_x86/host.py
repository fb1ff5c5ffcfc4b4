"""What the host CPU offers that codegen reads through the renderer's caps: its data cache sizes (from sysfs, or
TG_CPU_CACHES), and which matrix extensions it has (from the feature flags). Plain file reads: no llvmlite here, so it can
be tested with a fake sysfs tree and fake flags."""
from __future__ import annotations
import os

SYSFS_CACHE = "/sys/devices/system/cpu/cpu0/cache"
# the knob that replaces the sysfs cache sizes: another host's hierarchy for the heuristic to plan for (kernels still run here)
CACHES_KNOB = "TG_CPU_CACHES"

def _parse_size(s: str) -> int:
  """sysfs cache sizes: "32K", "1024K", "32M", or bytes."""
  s = s.strip().upper()
  mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
  return int(s[:-1] if mult > 1 else s) * mult

def cache_sizes(root: str = SYSFS_CACHE) -> tuple[int, ...]:
  """Bytes of data (or unified) cache at each level of core 0, innermost first; () where sysfs doesn't say (not Linux,
  a container without /sys): the heuristic then skips what needs them."""
  levels: dict[int, int] = {}
  try: entries = sorted(e for e in os.listdir(root) if e.startswith("index"))
  except OSError: return ()
  for e in entries:
    try:
      with open(os.path.join(root, e, "type")) as f: kind = f.read().strip()
      with open(os.path.join(root, e, "level")) as f: level = int(f.read())
      with open(os.path.join(root, e, "size")) as f: size = _parse_size(f.read())
    except (OSError, ValueError): continue
    if kind in ("Data", "Unified") and size > 0: levels[level] = size
  # levels must run 1, 2, ... without a gap: a missing L1 would make the L2 look like the L1
  out: list[int] = []
  for lvl in sorted(levels):
    if lvl != len(out) + 1: break
    out.append(levels[lvl])
  return tuple(out)

def parse_caches(value: str) -> tuple[int, ...]:
  """TG_CPU_CACHES's value: the data cache sizes innermost first, comma-separated, each in bytes or with a K/M/G suffix
  ("48K,2M,105M": an Intel Sapphire Rapids core). ValueError naming the knob on anything else."""
  try: sizes = tuple(_parse_size(s) for s in value.split(","))
  except ValueError: sizes = ()
  if not sizes or any(s <= 0 for s in sizes):
    raise ValueError(f"{CACHES_KNOB}={value!r}: expected the data cache sizes innermost first, comma-separated, each in bytes or with a "
                     "K/M/G suffix, e.g. 48K,2M,105M")
  return sizes

def host_cache_sizes(root: str = SYSFS_CACHE) -> tuple[int, ...]:
  """The cache sizes the plugin reports: TG_CPU_CACHES where set (`parse_caches`), else `cache_sizes` from sysfs."""
  return parse_caches(value) if (value := os.environ.get(CACHES_KNOB, "").strip()) else cache_sizes(root)

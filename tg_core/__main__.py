"""`python -m tg_core doctor`: what plugins are installed, whether they load, and which device DEV resolves to."""
from __future__ import annotations
import argparse
import os
import sys

def doctor(args: argparse.Namespace) -> int:
  from tg_core.device import Device
  from tg_core.plugins.discovery import ENTRY_POINT_GROUP, registry
  from tg_core.plugins.specs import TG_CORE_API
  registry.ensure_loaded()
  from tg_core import __version__
  print(f"tg-core {__version__}, plugin API {TG_CORE_API[0]}.{TG_CORE_API[1]}, python {sys.version.split()[0]}")
  rows = [("plugin", "distribution", "version", "API", "provides", "status")]
  for r in registry.records:
    provides = "; ".join(f"{k}: {','.join(v)}" for k, v in r.provides.items()) or "-"
    rows.append((r.name, r.dist, r.version, f"{r.api[0]}.{r.api[1]}" if r.api else "?", provides, r.status))
  widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
  for i, row in enumerate(rows):
    print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    if i == 0: print("  ".join("-" * w for w in widths))
  for r in registry.records:
    if r.status != "ok": print(f"  {r.name}: {r.reason}")
  print(f"entry-point group: {ENTRY_POINT_GROUP}" + (f"; TG_PLUGINS={os.environ['TG_PLUGINS']}" if os.environ.get("TG_PLUGINS") else "")
        + ("; TG_DISABLE_PLUGIN_AUTOLOAD is set" if os.environ.get("TG_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0") else ""))
  dev_env = os.environ.get("DEV")
  try:
    default = Device.DEFAULT
    d = Device[default]
    print(f"device: {default} ({'DEV=' + dev_env if dev_env else 'auto-selected'}), renderer {d.renderer.target_name()}, "
          f"available: {', '.join(Device.get_available_devices())}")
    return 0
  except Exception as e:
    print(f"device: unusable ({'DEV=' + dev_env if dev_env else 'auto-selection'}): {type(e).__name__}: {e}")
    return 1

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(prog="python -m tg_core", description="tg: a deep-learning compiler framework")
  sub = ap.add_subparsers(dest="cmd", required=True)
  sub.add_parser("doctor", help="list installed plugins, their status, and the device DEV resolves to (exit 1 if unusable)")
  args = ap.parse_args(argv)
  if args.cmd == "doctor": return doctor(args)
  return 2

if __name__ == "__main__": sys.exit(main())

"""Fresh virtualenvs with tg-core importable and chosen plugins installed, for the plugin-system tests and bench."""
from __future__ import annotations
import os
import pathlib
import shutil
import site
import subprocess
import sys
import sysconfig

REPO = pathlib.Path(__file__).resolve().parent.parent
TEMPLATE = REPO / "examples" / "plugin_template"

def make_venv(path: pathlib.Path) -> pathlib.Path:
  """A new virtualenv (no pip) that sees this repo's tg_core and the current environment's packages (numpy, pluggy,
  pytest) through a .pth file, but none of its installed plugins. Returns its python."""
  subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
  py = path / "bin" / "python"
  purelib = pathlib.Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        check=True, capture_output=True, text=True).stdout.strip())
  # the current environment's packages, minus any tg plugin installed there: a farm of symlinks on the venv's path
  farm = path / "deps"
  farm.mkdir()
  for d in dict.fromkeys(p for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]] if os.path.isdir(p)):
    for entry in os.scandir(d):
      low = entry.name.lower()
      if low.startswith(("tg_", "tg-", "__editable__", "_tg_")) or low.endswith(".pth") or (farm / entry.name).exists(): continue
      (farm / entry.name).symlink_to(entry.path)
  (purelib / "tg_repo.pth").write_text(f"{REPO}\n{farm}\n")
  return py

def site_packages(py: pathlib.Path) -> pathlib.Path:
  return pathlib.Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                     check=True, capture_output=True, text=True).stdout.strip())

def plugin_copy(dest: pathlib.Path, dist: str, package: str, device: str = "TEMPLATE", api: tuple[int, int] = (1, 1),
                manifest_extra: str = "", device_extra: str = "", ep_name: str | None = None) -> pathlib.Path:
  """A copy of the template plugin renamed to `dist`/`package`, with the given API and optional code injected."""
  if dest.exists(): shutil.rmtree(dest)
  shutil.copytree(TEMPLATE, dest, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
  (dest / "tg_template").rename(dest / package)
  pp = (dest / "pyproject.toml").read_text().replace('name = "tg-template"', f'name = "{dist}"').replace("tg_template", package)
  pp = pp.replace('template = "', f'{ep_name or package} = "')
  (dest / "pyproject.toml").write_text(pp)
  man = (dest / package / "plugin.py").read_text().replace("tg_template", package).replace('"TEMPLATE"', f'"{device}"')
  man = man.replace("tg_api = (1, 1)", f"tg_api = {api!r}") + manifest_extra
  (dest / package / "plugin.py").write_text(man)
  dev = (dest / package / "device.py").read_text().replace('"TEMPLATE"', f'"{device}"') + device_extra
  (dest / package / "device.py").write_text(dev)
  return dest

def pip_install(py: pathlib.Path, src: pathlib.Path) -> None:
  """Install a plugin source tree into the venv of `py` (no deps, no build isolation: offline and fast)."""
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-compile",
                  "--target", str(site_packages(py)), str(src)], check=True, capture_output=True)

def run(py: pathlib.Path, code: str, env: dict[str, str] | None = None, args: list[str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
  e = {k: v for k, v in os.environ.items() if k not in ("DEV", "TG_PLUGINS", "TG_DISABLE_PLUGIN_AUTOLOAD", "PYTHONPATH")}
  e.update(env or {})
  cmd = [str(py), *(args if args is not None else ["-c", code])]
  return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout, cwd=str(REPO))

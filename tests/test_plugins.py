"""The plugin system, end to end: the example plugin installed into fresh virtualenvs, plus broken, incompatible and
conflicting copies of it. Each check runs in a subprocess, as a user would."""
from __future__ import annotations
import pathlib

import pytest

from plugin_env import TEMPLATE, make_venv, pip_install, plugin_copy, run

ADD = "from tg_core import Tensor; print((Tensor([1, 2, 3]) + 1).tolist())"

@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
  py = make_venv(tmp_path_factory.mktemp("venv_good"))
  pip_install(py, TEMPLATE)
  return py

def test_discovery_and_selection(good: pathlib.Path):
  r = run(good, ADD, {"DEV": "TEMPLATE"})
  assert r.returncode == 0, r.stderr
  assert r.stdout.strip() == "[2, 3, 4]"
  r = run(good, "from tg_core import Tensor; t = Tensor([1.0]); print(t.device)", {"DEV": "TEMPLATE"})
  assert r.stdout.strip() == "TEMPLATE"
  doc = run(good, "", args=["-m", "tg_core", "doctor"], env={"DEV": "TEMPLATE"})
  assert doc.returncode == 0, doc.stdout + doc.stderr
  assert "tg-template" in doc.stdout and "TEMPLATE" in doc.stdout and "ok" in doc.stdout

def test_default_device_unchanged_without_dev(good: pathlib.Path):
  # the template declares auto=False: it is never picked without DEV
  r = run(good, "from tg_core import Device; print(Device.DEFAULT)")
  assert r.stdout.strip() == "PYTHON", r.stderr

def test_import_loads_no_plugin_code(good: pathlib.Path):
  r = run(good, "import sys, tg_core; print(sorted(m for m in sys.modules if m.startswith('tg_template') or 'ops_python' in m))")
  assert r.returncode == 0, r.stderr
  assert r.stdout.strip() == "[]"
  # discovery imports only the manifest, never the implementation, until the device is opened
  r = run(good, "import sys; from tg_core import Device; Device.registered(); print(sorted(m for m in sys.modules if m.startswith('tg_template')))")
  assert r.stdout.strip() == "['tg_template', 'tg_template.plugin']", r.stdout + r.stderr

def test_conformance_kit_passes_on_template(good: pathlib.Path):
  r = run(good, "", args=["-m", "pytest", "-x", "-p", "no:cacheprovider", "--pyargs", "tg_core.testing", "--tg-device=TEMPLATE"])
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
  assert " passed" in r.stdout

def test_incompatible_api_is_refused_alone(tmp_path: pathlib.Path):
  py = make_venv(tmp_path / "venv")
  pip_install(py, plugin_copy(tmp_path / "src", "tg-template-old", "tg_template_old", api=(2, 0)))
  r = run(py, ADD, {"DEV": "TEMPLATE"})
  assert r.returncode != 0
  assert "PluginIncompatibleError" in r.stderr
  for needle in ("2.0", "1.0", "tg-template-old", "pip install"): assert needle in r.stderr, (needle, r.stderr)
  ok = run(py, ADD, {"DEV": "PYTHON"})
  assert ok.returncode == 0 and ok.stdout.strip() == "[2, 3, 4]", ok.stderr
  doc = run(py, "", args=["-m", "tg_core", "doctor"])
  assert "incompatible" in doc.stdout
  forced = run(py, ADD, {"DEV": "TEMPLATE", "TG_PLUGIN_IGNORE_API": "1"})
  assert forced.returncode == 0, forced.stderr

def test_broken_implementation_does_not_break_core(tmp_path: pathlib.Path):
  py = make_venv(tmp_path / "venv")
  pip_install(py, plugin_copy(tmp_path / "src", "tg-template-broken", "tg_template_broken", device_extra="\nraise ImportError('simulated broken build')\n"))
  assert run(py, "import tg_core").returncode == 0
  ok = run(py, ADD, {"DEV": "PYTHON"})
  assert ok.returncode == 0 and ok.stdout.strip() == "[2, 3, 4]", ok.stderr
  bad = run(py, ADD, {"DEV": "TEMPLATE"})
  assert bad.returncode != 0 and "PluginImportError" in bad.stderr and "simulated broken build" in bad.stderr
  assert "tg-template-broken" in bad.stderr

def test_broken_manifest_does_not_break_core(tmp_path: pathlib.Path):
  py = make_venv(tmp_path / "venv")
  pip_install(py, plugin_copy(tmp_path / "src", "tg-template-badman", "tg_template_badman", manifest_extra="\nraise RuntimeError('manifest bug')\n"))
  ok = run(py, ADD, {"DEV": "PYTHON"})
  assert ok.returncode == 0, ok.stderr
  bad = run(py, ADD, {"DEV": "TEMPLATE"})
  assert bad.returncode != 0 and "manifest bug" in bad.stderr
  doc = run(py, "", args=["-m", "tg_core", "doctor"])
  assert "import-failed" in doc.stdout

def test_misspelled_hook_is_invalid(tmp_path: pathlib.Path):
  py = make_venv(tmp_path / "venv")
  extra = "\n@hookimpl\ndef tg_devicez():\n  return []\n"
  pip_install(py, plugin_copy(tmp_path / "src", "tg-template-typo", "tg_template_typo", manifest_extra=extra))
  doc = run(py, "", args=["-m", "tg_core", "doctor"])
  assert "invalid" in doc.stdout and "tg_devicez" in doc.stdout

def test_two_plugins_claiming_one_name(tmp_path: pathlib.Path):
  py = make_venv(tmp_path / "venv")
  pip_install(py, plugin_copy(tmp_path / "a", "tg-template-a", "tg_template_a"))
  pip_install(py, plugin_copy(tmp_path / "b", "tg-template-b", "tg_template_b"))
  r = run(py, ADD, {"DEV": "TEMPLATE"})
  assert r.returncode != 0 and "PluginConflictError" in r.stderr
  assert "tg-template-a" in r.stderr and "tg-template-b" in r.stderr and "DEV=TEMPLATE@" in r.stderr
  pinned = run(py, ADD, {"DEV": "TEMPLATE@tg-template-b"})
  assert pinned.returncode == 0 and pinned.stdout.strip() == "[2, 3, 4]", pinned.stderr
  only = run(py, ADD, {"DEV": "TEMPLATE", "TG_PLUGINS": "tg-template-a"})
  assert only.returncode == 0, only.stderr

def test_not_installed_and_kill_switch(good: pathlib.Path):
  r = run(good, "from tg_core import Tensor; Tensor([1]).realize()", {"DEV": "NOPE"})
  assert r.returncode != 0 and "PluginNotInstalledError" in r.stderr and "PYTHON" in r.stderr and "TEMPLATE" in r.stderr
  r = run(good, "from tg_core import Tensor; Tensor([1]).realize()", {"DEV": "AMD"})
  assert "pip install tg-amd" in r.stderr
  r = run(good, ADD, {"DEV": "TEMPLATE", "TG_DISABLE_PLUGIN_AUTOLOAD": "1"})
  assert r.returncode != 0 and "TG_DISABLE_PLUGIN_AUTOLOAD" in r.stderr
  r = run(good, ADD, {"DEV": "PYTHON", "TG_DISABLE_PLUGIN_AUTOLOAD": "1"})
  assert r.returncode == 0, r.stderr

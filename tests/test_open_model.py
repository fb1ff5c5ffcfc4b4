"""tg_core.plugins.open_model: a model file goes to the importer that claims it by suffix or magic bytes."""
import pathlib

import pytest

from tg_core.plugins import ImporterSpec, PluginNotInstalledError, open_model, registry

def opened(path: str) -> tuple[str, str]: return ("opened", path)

@pytest.fixture
def fake_importers(monkeypatch: pytest.MonkeyPatch) -> None:
  reg = registry()
  monkeypatch.setattr(reg, "importers", {"fake": [(ImporterSpec("fake", f"{__name__}:opened", suffixes=(".fake",)), None)],
                                         "magic": [(ImporterSpec("magic", f"{__name__}:opened", magic=b"MAGC"), None)]})

def test_suffix_and_magic(fake_importers: None, tmp_path: pathlib.Path) -> None:
  assert open_model(str(tmp_path / "m.FAKE")) == ("opened", str(tmp_path / "m.FAKE"))
  (p := tmp_path / "m.bin").write_bytes(b"MAGC rest")
  assert open_model(str(p)) == ("opened", str(p))

def test_unclaimed_file_names_the_installed_importers(fake_importers: None, tmp_path: pathlib.Path) -> None:
  (p := tmp_path / "m.bin").write_bytes(b"nothing")
  with pytest.raises(PluginNotInstalledError, match=r"no installed importer claims .*fake \(\.fake\)"): open_model(str(p))

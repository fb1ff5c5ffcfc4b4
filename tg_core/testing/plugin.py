"""pytest plugin (entry point pytest11) for the conformance kit: the --tg-device option and the `tg_device` fixture."""
from __future__ import annotations
import os

import pytest

def pytest_addoption(parser: pytest.Parser) -> None:
  parser.addoption("--tg-device", action="store", default=os.environ.get("TG_TEST_DEVICE"),
                   help="device to test, e.g. CPU or CUDA (default: $TG_TEST_DEVICE, else Device.DEFAULT)")

@pytest.fixture(scope="session")
def tg_device(request: pytest.FixtureRequest) -> str:
  from tg_core.device import Device
  name = request.config.getoption("--tg-device") or Device.DEFAULT
  Device[name]  # opening it must work: an unusable device fails the whole kit loudly
  return Device.canonicalize(name)

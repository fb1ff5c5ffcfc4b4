"""pytest plugin (entry point pytest11) for the conformance kit: the --tg-device option and the `tg_device` fixture."""
from __future__ import annotations
import os

import pytest

def pytest_addoption(parser: pytest.Parser) -> None:
  parser.addoption("--tg-device", action="store", default=os.environ.get("TG_TEST_DEVICE"),
                   help="device to test, e.g. CPU or CUDA (default: $TG_TEST_DEVICE, else Device.DEFAULT)")
  parser.addoption("--tg-strict-renderer", action="store_true", default=False,
                   help="wrap the device's renderer so that reading anything outside the declared renderer contract fails")

@pytest.fixture(scope="session")
def tg_device(request: pytest.FixtureRequest) -> str:
  from tg_core.device import Device
  name = request.config.getoption("--tg-device") or Device.DEFAULT
  if "+" in name:  # an interface (--tg-device=MOCK+CUDA) is part of DEV: the device reads it from there, subprocesses inherit it
    from tg_core.dev.target import parse_dev
    from tg_core.helpers import DEV
    os.environ["DEV"] = DEV.value = name
    name = parse_dev(name).device
  dev = Device[name]  # opening it must work: an unusable device fails the whole kit loudly
  if request.config.getoption("--tg-strict-renderer"):
    from tg_core.testing.strict import StrictRenderer
    for d in (dev, Device[f"{name.split(':')[0]}:1"]):  # the kit uses instance 1 too (copies between instances)
      if not isinstance(d.renderer, StrictRenderer): d.use_renderer(StrictRenderer(d.renderer))
  return Device.canonicalize(name)

"""The manifest: imports only tg_core.plugins; the device module loads when TEMPLATE is first opened."""
from tg_core.plugins import DeviceSpec, hookimpl

tg_api = (1, 1)

@hookimpl
def tg_devices() -> list[DeviceSpec]:
  # auto=False: never picked as the default without DEV=TEMPLATE
  return [DeviceSpec("TEMPLATE", "tg_template.device:TemplateDevice", priority=0, auto=False, description="example: host memory")]

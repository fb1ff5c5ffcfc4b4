"""The plugin system: hook specifications, entry-point discovery, version checks and errors.

A plugin is a distribution with an entry point in the group `tg_core.plugins` naming a small manifest module::

    # pyproject.toml
    [project.entry-points."tg_core.plugins"]
    amd = "tg_amd.plugin"

    # tg_amd/plugin.py: imports only tg_core.plugins
    from tg_core.plugins import DeviceSpec, hookimpl
    tg_api = (1, 2)
    @hookimpl
    def tg_devices(): return [DeviceSpec("AMD", "tg_amd.device:AMDDevice", priority=10, probe="tg_amd.probe:has_kfd")]
"""
import os
from typing import Any

from tg_core.plugins.errors import (PluginConflictError, PluginError, PluginImportError, PluginIncompatibleError, PluginNotInstalledError,
                                    PluginValidationError)
from tg_core.plugins.specs import TG_CORE_API, DeviceSpec, ImporterSpec, QuantFormatSpec, RendererSpec, hookimpl, hookspec, load_attr

def registry():  # type: ignore[no-untyped-def]
  """The process-wide plugin registry (discovery runs on first use)."""
  from tg_core.plugins.discovery import registry as r
  r.ensure_loaded()
  return r

def open_model(path: str | os.PathLike) -> Any:
  """Open a model file with the importer plugin that claims it (suffix or magic): its factory, "module:function", is called as fn(path)."""
  return load_attr(registry().importer_for(path).factory)(path)

__all__ = ["open_model", "TG_CORE_API", "DeviceSpec", "RendererSpec", "ImporterSpec", "QuantFormatSpec", "hookimpl", "hookspec", "load_attr", "registry",
           "PluginError", "PluginNotInstalledError", "PluginIncompatibleError", "PluginImportError", "PluginConflictError",
           "PluginValidationError"]

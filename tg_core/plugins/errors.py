"""The plugin system's errors. Each names the problem and the fix, and chains its cause."""
from __future__ import annotations

from tg_core.device import DeviceError, DeviceNotFoundError

class PluginError(DeviceError):
  """Base class of plugin errors."""

class PluginNotInstalledError(PluginError, DeviceNotFoundError):
  """A device (or format) that no installed plugin provides."""

class PluginIncompatibleError(PluginError, RuntimeError):
  """A plugin built for another tg_core plugin API; refused (only that plugin)."""

class PluginImportError(PluginError, ImportError):
  """A plugin whose manifest or implementation failed to import."""

class PluginConflictError(PluginError, RuntimeError):
  """Two plugins claim one name; pin one with DEV=NAME@distribution."""

class PluginValidationError(PluginError, TypeError):
  """A plugin's manifest breaks the contract (unknown hook, bad spec record)."""

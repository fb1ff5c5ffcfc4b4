"""Plugin discovery: read the `tg_core.plugins` entry points once per process, import each plugin's manifest (only
the manifest), check the API version it targets, collect what it provides, and register its devices.

A plugin that fails (import error, incompatible API, invalid manifest) is recorded with the reason and skipped:
it never breaks `import tg_core` or another device."""
from __future__ import annotations
import difflib
import importlib
import os
import threading
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

import pluggy

from tg_core.plugins.entry_points import EntryPoint, dist_version, entry_points
from tg_core.plugins.errors import PluginConflictError, PluginImportError, PluginIncompatibleError, PluginNotInstalledError
from tg_core.plugins.specs import PROJECT, TG_CORE_API, DeviceSpec, ImporterSpec, QuantFormatSpec, RendererSpec, TgHookSpecs, load_attr
ENTRY_POINT_GROUP = "tg_core.plugins"
CORE_DIST = "tg-core"

# first-party plugins, so a missing one gets a precise `pip install` hint
KNOWN_DEVICE_PLUGINS: dict[str, str] = {"CPU": "tg-cpu-x86", "CUDA": "tg-cuda", "NV": "tg-cuda", "AMD": "tg-amd"}
KNOWN_FORMAT_PLUGINS: dict[str, str] = {"onnx": "tg-onnx", "gguf": "tg-gguf"}

_HOOKS: dict[str, tuple[str, type]] = {"tg_devices": ("devices", DeviceSpec), "tg_renderers": ("renderers", RendererSpec),
                                       "tg_importers": ("importers", ImporterSpec), "tg_quant_formats": ("quant_formats", QuantFormatSpec)}

@dataclass
class PluginRecord:
  """What doctor reports about one plugin."""
  name: str
  dist: str
  version: str
  module: str
  api: tuple[int, int] | None = None
  status: str = "ok"          # ok, incompatible, import-failed, invalid, disabled, conflict
  reason: str = ""
  provides: dict[str, list[str]] = field(default_factory=dict)
  error: BaseException | None = None

def _env_list(name: str) -> list[str]: return [x.strip() for x in os.environ.get(name, "").replace(";", ",").split(",") if x.strip()]

def parse_dev_list(dev: str) -> list[tuple[str, str | None]]:
  """(device spec without pin, pinned distribution) for each `;`-separated entry of DEV, e.g. "AMD@tg-amd;CPU"."""
  ret = []
  for part in [p.strip() for p in dev.split(";") if p.strip()]:
    spec, _, pin = part.partition("@")
    ret.append((spec, pin or None))
  return ret

class PluginRegistry:
  def __init__(self) -> None:
    self.loaded = False
    self._lock = threading.RLock()
    self.records: list[PluginRecord] = []
    self.pm = pluggy.PluginManager(PROJECT)
    self.pm.add_hookspecs(TgHookSpecs)
    self.devices: dict[str, list[tuple[DeviceSpec, PluginRecord]]] = {}
    self.renderers: dict[str, list[tuple[RendererSpec, PluginRecord]]] = {}
    self.importers: dict[str, list[tuple[ImporterSpec, PluginRecord]]] = {}
    self.quant_formats: dict[str, list[tuple[QuantFormatSpec, PluginRecord]]] = {}

  # *** discovery ***
  def ensure_loaded(self) -> None:
    if self.loaded: return
    with self._lock:
      if self.loaded: return
      self.loaded = True  # set first: registering devices calls back into the registry
      self._load()

  def _entry_points(self) -> list[EntryPoint]: return entry_points(ENTRY_POINT_GROUP)

  def _load(self) -> None:
    core = PluginRecord("core", CORE_DIST, _dist_version(CORE_DIST), "tg_core.plugins.core")
    self._add_manifest(core, lambda: importlib.import_module("tg_core.plugins.core"))
    disabled = os.environ.get("TG_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0")
    allow = _env_list("TG_PLUGINS")
    for ep in self._entry_points():
      dist = ep.dist
      rec = PluginRecord(ep.name, dist, ep.version, ep.value)
      if disabled:
        rec.status, rec.reason = "disabled", "TG_DISABLE_PLUGIN_AUTOLOAD is set"
        self.records.append(rec)
        continue
      if allow and ep.name not in allow and dist not in allow and _norm(dist) not in {_norm(a) for a in allow}:
        rec.status, rec.reason = "disabled", f"not in TG_PLUGINS={os.environ.get('TG_PLUGINS')}"
        self.records.append(rec)
        continue
      self._add_manifest(rec, ep.load)
    self._register_devices()

  def _add_manifest(self, rec: PluginRecord, load: Callable[[], Any]) -> None:
    self.records.append(rec)
    try: mod = load()
    except Exception as e:
      rec.status, rec.reason = "import-failed", f"importing {rec.module} failed: {type(e).__name__}: {e}"
      rec.error = PluginImportError(f"plugin {rec.name} from {rec.dist} {rec.version} failed to import its manifest {rec.module}: "
                                    f"{type(e).__name__}: {e}. Reinstall it (pip install --force-reinstall {rec.dist}) or remove it")
      rec.error.__cause__ = e
      return
    if not isinstance(mod, ModuleType):
      rec.status, rec.reason = "invalid", f"entry point {rec.module} is not a module"
      return
    api = getattr(mod, "tg_api", None)
    if not (isinstance(api, tuple) and len(api) == 2 and all(isinstance(x, int) for x in api)):
      rec.status, rec.reason = "invalid", f"manifest {rec.module} declares no tg_api = (major, minor)"
      return
    rec.api = api
    if (api[0] != TG_CORE_API[0] or api[1] > TG_CORE_API[1]) and os.environ.get("TG_PLUGIN_IGNORE_API", "") in ("", "0"):
      fix = f"pip install --upgrade {rec.dist}" if api[0] < TG_CORE_API[0] else "pip install --upgrade tg-core"
      rec.status = "incompatible"
      rec.reason = f"built for tg_core plugin API {api[0]}.{api[1]}, this tg-core provides {TG_CORE_API[0]}.{TG_CORE_API[1]}"
      rec.error = PluginIncompatibleError(f"plugin {rec.name} ({rec.dist} {rec.version}) targets tg_core plugin API {api[0]}.{api[1]} but "
                                          f"tg-core {_dist_version(CORE_DIST)} provides API {TG_CORE_API[0]}.{TG_CORE_API[1]}: run `{fix}` "
                                          f"(developers: TG_PLUGIN_IGNORE_API=1 loads it anyway)")
      rec.provides = _declared(mod)  # for error messages only: nothing is registered
      return
    try:
      self.pm.register(mod, name=rec.name)
      self.pm.check_pending()
    except Exception as e:
      if self.pm.is_registered(mod): self.pm.unregister(mod)
      rec.status, rec.reason = "invalid", f"{type(e).__name__}: {e}"
      return
    for hook, (kind, typ) in _HOOKS.items():
      for impl in getattr(self.pm.hook, hook).get_hookimpls():
        if impl.plugin is not mod: continue
        try:
          specs = impl.function() or []
          bad = [s for s in specs if not isinstance(s, typ)]
          if bad: raise TypeError(f"{hook} returned {type(bad[0]).__name__}, expected {typ.__name__}")
        except Exception as e:
          self.pm.unregister(mod)
          rec.status, rec.reason = "invalid", f"{hook}: {type(e).__name__}: {e}"
          for d in (self.devices, self.renderers, self.importers, self.quant_formats):
            for k in list(d): d[k] = [x for x in d[k] if x[1] is not rec]
          return
        table = getattr(self, kind)
        for s in specs:
          key = s.name if kind in ("devices", "renderers", "quant_formats") else s.format
          table.setdefault(key, []).append((s, rec))
          rec.provides.setdefault(kind, []).append(key)

  def _register_devices(self) -> None:
    from tg_core.device import Device
    pins = dict(parse_dev_list(os.environ.get("DEV", "")))
    pins = {spec.rpartition("+")[2].split(":")[0].upper(): pin for spec, pin in pins.items() if pin}
    for name, claims in self.devices.items():
      chosen = claims
      if name in pins: chosen = [c for c in claims if _norm(c[1].dist) == _norm(pins[name]) or c[1].name == pins[name]]
      if len(chosen) > 1:
        who = ", ".join(f"{c[1].dist} ({c[1].name})" for c in chosen)
        err = PluginConflictError(f"device {name} is provided by more than one plugin: {who}. Pin one with DEV={name}@<distribution>, "
                                  f"or allow only one with TG_PLUGINS")
        for c in chosen: c[1].status, c[1].reason = "conflict", f"device {name} also provided by another plugin"
        Device.register(name, _raiser(err), priority=max(c[0].priority for c in chosen), probe=lambda: False, auto=False,
                        origin=" + ".join(c[1].dist for c in chosen), replace=True)
        continue
      if not chosen: continue
      spec, rec = chosen[0]
      Device.register(name, _lazy_device(spec, rec), priority=spec.priority, probe=_lazy_probe(spec, rec), auto=spec.auto,
                      origin=f"{rec.dist} {rec.version}", replace=True, interfaces=spec.interfaces)

  # *** lookups ***
  def renderers_for(self, device: str) -> list[tuple[RendererSpec, PluginRecord]]:
    self.ensure_loaded()
    return [x for claims in self.renderers.values() for x in claims if device in x[0].devices]
  def importer(self, fmt: str) -> ImporterSpec:
    self.ensure_loaded()
    if fmt not in self.importers:
      raise _not_installed("format", fmt, KNOWN_FORMAT_PLUGINS, list(self.importers))
    return self.importers[fmt][0][0]
  def importer_for(self, path: str | os.PathLike) -> ImporterSpec:
    """The importer that claims a model file: by suffix first, then by the file's leading magic bytes."""
    self.ensure_loaded()
    specs = [s for claims in self.importers.values() for s, _ in claims]
    name = os.fspath(path).lower()
    for s in specs:
      if any(name.endswith(suf.lower()) for suf in s.suffixes): return s
    magics = [s for s in specs if s.magic]
    if magics and os.path.isfile(path):
      with open(path, "rb") as f: head = f.read(max(len(s.magic or b"") for s in magics))
      for s in magics:
        if s.magic and head.startswith(s.magic): return s
    known = ", ".join(f"{s.format} ({', '.join(s.suffixes) or 'magic'})" for s in specs) or "(none)"
    raise PluginNotInstalledError(f"no installed importer claims the model file {os.fspath(path)!r} (by suffix or magic bytes); installed importers: "
                                  f"{known}. For ONNX install tg-onnx, for GGUF tg-gguf", os.path.splitext(name)[1] or name)
  def quant_format(self, name: str) -> QuantFormatSpec:
    self.ensure_loaded()
    if name not in self.quant_formats: raise _not_installed("quantization format", name, {}, list(self.quant_formats))
    return self.quant_formats[name][0][0]
  def failed_record_for(self, name: str) -> PluginRecord | None:
    """A plugin that would have provided device `name` but failed or was refused."""
    self.ensure_loaded()
    want = KNOWN_DEVICE_PLUGINS.get(name)
    for r in self.records:
      if r.status != "ok" and (name in r.provides.get("devices", []) or (want is not None and _norm(r.dist) == _norm(want))): return r
    return None

def _declared(mod: ModuleType) -> dict[str, list[str]]:
  """What a refused manifest says it provides (its hook functions are plain declarations; failures are ignored)."""
  ret: dict[str, list[str]] = {}
  for hook, (kind, _) in _HOOKS.items():
    try: specs = getattr(mod, hook)() if callable(getattr(mod, hook, None)) else []
    except Exception: continue
    ret[kind] = [getattr(s, "name", getattr(s, "format", "?")) for s in specs or []]
  return {k: v for k, v in ret.items() if v}

def _norm(dist: str) -> str: return dist.lower().replace("_", "-")

def _dist_version(dist: str) -> str:
  if (v := dist_version(dist)) is not None: return v
  from tg_core import __version__
  return __version__

def _raiser(err: Exception) -> Callable[[str], Any]:
  def factory(dev: str) -> Any: raise err
  return factory

def _lazy_device(spec: DeviceSpec, rec: PluginRecord) -> Callable[[str], Any]:
  def factory(dev: str) -> Any:
    try: cls = load_attr(spec.factory)
    except Exception as e:
      raise PluginImportError(f"plugin {rec.name} ({rec.dist} {rec.version}) failed to import {spec.factory} for device {spec.name}: "
                              f"{type(e).__name__}: {e}. Reinstall it: pip install --force-reinstall {rec.dist}") from e
    ret = cls(dev)
    for rspec, rrec in registry.renderers_for(spec.name):
      # a renderer the device already lists (its own, by name) is not added twice
      if rspec.name.upper() not in ret.renderer_names(): ret.renderers.append(LazyRenderer(rspec, rrec))
    return ret
  factory.__qualname__ = factory.__name__ = f"plugin<{spec.factory}>"
  return factory

def _lazy_probe(spec: DeviceSpec, rec: PluginRecord) -> Callable[[], bool] | None:
  if spec.probe is None: return None
  return lambda: bool(load_attr(spec.probe)())  # type: ignore[arg-type]

class LazyRenderer:
  """A plugin renderer in a device's renderer list, imported when first selected."""
  def __init__(self, spec: RendererSpec, rec: PluginRecord): self.spec, self.rec, self.factory = spec, rec, spec.factory
  def target_name(self) -> str: return self.spec.name.upper()
  def __call__(self) -> Any:
    try: return load_attr(self.spec.factory)()
    except Exception as e:
      raise PluginImportError(f"plugin {self.rec.name} ({self.rec.dist}) failed to load renderer {self.spec.name} from {self.spec.factory}: "
                              f"{type(e).__name__}: {e}") from e

def _not_installed(kind: str, name: str, known_plugins: dict[str, str], known: list[str]) -> PluginNotInstalledError:
  msg = f"no installed plugin provides {kind} {name!r}"
  if name in known_plugins: msg += f": install it with `pip install {known_plugins[name]}`"
  elif close := difflib.get_close_matches(name, known + list(known_plugins), n=1): msg += f". Did you mean {close[0]!r}?"
  msg += f". Known: {', '.join(sorted(known)) or '(none)'}"
  return PluginNotInstalledError(msg, name)

def device_not_found(name: str, known: list[str], context: str = "") -> Exception:
  """The error for a device nothing provides: names the plugin to install, or why an installed one was refused."""
  if (rec := registry.failed_record_for(name)) is not None and rec.error is not None:
    err = type(rec.error)(f"device {name}{context} is unavailable: {rec.error}")
    err.__cause__ = rec.error
    return err
  msg = f"unknown device {name!r}{context}; known devices: {', '.join(known) if known else '(none)'}"
  if name in KNOWN_DEVICE_PLUGINS: msg += f". Device {name} is provided by the plugin {KNOWN_DEVICE_PLUGINS[name]}: pip install {KNOWN_DEVICE_PLUGINS[name]}"
  elif close := difflib.get_close_matches(name, known + list(KNOWN_DEVICE_PLUGINS), n=1): msg += f". Did you mean {close[0]!r}?"
  broken = [r for r in registry.records if r.status in ("import-failed", "invalid")]
  if broken: msg += ". Plugins that failed to load (one may provide it): " + "; ".join(f"{r.dist}: {r.reason}" for r in broken)
  if os.environ.get("TG_PLUGINS"): msg += f" (TG_PLUGINS={os.environ['TG_PLUGINS']} limits which plugins load)"
  if os.environ.get("TG_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0"): msg += " (TG_DISABLE_PLUGIN_AUTOLOAD is set: plugins are not loaded)"
  return PluginNotInstalledError(msg, name)

registry = PluginRegistry()

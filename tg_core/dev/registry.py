"""The `Device` registry: maps device strings ("CPU", "CPU:1", "DISK:/tmp/x") to opened devices, picks the default
(DEV, else the highest-priority device whose probe passes) and validates DEV against what the device can serve."""
from __future__ import annotations
import atexit
import contextlib
import os
import threading
from dataclasses import dataclass
from typing import Callable, Sequence

from tg_core.helpers import DEBUG, DEV
from tg_core.dev.compiled import Compiled
from tg_core.dev.errors import (DeviceAlreadyRegisteredError, DeviceError, DeviceNotFoundError, DevTargetError, DeviceUnavailableError,
                                InterfaceUnsupportedError, did_you_mean)
from tg_core.dev.target import DevTarget, canonicalize, parse_dev

@dataclass
class _DeviceEntry:
  name: str
  factory: Callable[[str], Compiled]
  priority: int
  probe: Callable[[], bool] | None
  auto: bool
  origin: str | None
  order: int
  interfaces: tuple[str, ...] = ()

class _Device:
  """The registry of devices. `Device["CPU:1"]` opens (once) and returns a `Compiled`; `Device.DEFAULT` is the device used when none is named."""
  def __init__(self) -> None:
    self._entries: dict[str, _DeviceEntry] = {}
    self._opened: dict[str, Compiled] = {}
    self._lock = threading.RLock()
    self._default_override: str | None = None
    self._auto_default: str | None = None
    self._order = 0

  def register(self, name: str, factory: Callable[[str], Compiled], priority: int = 0, probe: Callable[[], bool] | None = None,
               auto: bool = True, origin: str | None = None, replace: bool = False, interfaces: Sequence[str] = ()) -> None:
    """Register device `name` ("CPU"). `factory(device_string)` opens it ("CPU:1"). When DEV is unset, `Device.DEFAULT` is the
    highest-priority `auto` device whose `probe()` returns True (no probe: always True). `origin` names who registered it.
    `interfaces` are the `iface` names DEV may put before it (`DEV=MOCK+AMD`); any other is an error."""
    if not isinstance(name, str) or not name or ":" in name or "+" in name or name != name.upper():
      raise ValueError(f"a device name must be a non-empty upper-case string without ':' or '+', got {name!r}")
    if not callable(factory): raise TypeError(f"factory for {name} must be callable, got {factory!r}")
    with self._lock:
      if (old := self._entries.get(name)) is not None and not replace:
        raise DeviceAlreadyRegisteredError(f"device {name} is registered twice: by {old.origin or 'an unnamed registrant'} "
                                           f"and by {origin or 'an unnamed registrant'}")
      self._order += 1
      self._entries[name] = _DeviceEntry(name, factory, priority, probe, auto, origin, self._order, tuple(i.upper() for i in interfaces))
      for k in [k for k in self._opened if k.split(":")[0] == name]: del self._opened[k]
      self._auto_default = None
  def unregister(self, name: str) -> None:
    with self._lock:
      self._entries.pop(name, None)
      for k in [k for k in self._opened if k.split(":")[0] == name]: del self._opened[k]
      self._auto_default = None
  def registered(self) -> list[str]:
    """Every registered device name, highest priority first."""
    _plugins_loaded()
    return [e.name for e in sorted(self._entries.values(), key=lambda e: (-e.priority, e.order))]
  def __contains__(self, device: str) -> bool:
    _plugins_loaded()
    return canonicalize(device).split(":")[0] in self._entries
  @staticmethod
  def canonicalize(device: str) -> str: return canonicalize(device)

  def _not_found(self, name: str, context: str = "") -> DeviceNotFoundError:
    known = self.registered()
    from tg_core.plugins.discovery import device_not_found
    return device_not_found(name, known, context)  # type: ignore[return-value]

  def _dev_target(self, name: str) -> DevTarget | None:
    """DEV's first entry when it names device `name`, its interface checked against the ones the device declares."""
    if not DEV.value or (tgt := parse_dev(DEV.value.split(";")[0].partition("@")[0])).device != name: return None
    if tgt.iface is not None:
      iface, valid = tgt.iface.split(":")[0].upper(), self._entries[name].interfaces
      if iface not in valid:
        what = f"it has {', '.join(valid)}{did_you_mean(iface, valid)}" if valid else "it declares none (leave the 'iface+' part out of DEV)"
        raise InterfaceUnsupportedError(f"DEV={DEV.value!r}: device {name} has no interface {iface!r}: {what}", iface, valid)
    return tgt

  def __getitem__(self, device: str) -> Compiled:
    dev = canonicalize(device)
    if (ret := self._opened.get(dev)) is not None: return ret
    _plugins_loaded()
    with self._lock:
      if (ret := self._opened.get(dev)) is not None: return ret
      name = dev.split(":")[0]
      if (entry := self._entries.get(name)) is None: raise self._not_found(name)
      try:
        ret = entry.factory(dev)
        if not isinstance(ret, Compiled): raise TypeError(f"the factory of device {name} returned {type(ret).__name__}, not a Compiled")
        if (tgt := self._dev_target(name)) is not None and (tgt.renderer is not None or tgt.arch is not None):
          try: ret.select_renderer(tgt.renderer, tgt.arch)
          except DevTargetError as e: raise type(e)(f"DEV={DEV.value!r}: {e}", e.wanted, e.valid) from None
      except DeviceError: raise
      except Exception as e:
        raise DeviceUnavailableError(f"device {dev} failed to open{f' (registered by {entry.origin})' if entry.origin else ''}: "
                                     f"{type(e).__name__}: {e}") from e
      if DEBUG >= 2: print(f"opened device {dev} from pid:{os.getpid()}")
      self._opened[dev] = ret
      return ret

  def _probe(self, e: _DeviceEntry) -> bool:
    if e.probe is None: return True
    try: return bool(e.probe())
    except Exception as ex:
      if DEBUG >= 2: print(f"device {e.name}: probe failed: {type(ex).__name__}: {ex}")
      return False
  def get_available_devices(self, include_special: bool = False) -> list[str]:
    """Registered devices whose probe passes, highest priority first. Devices registered with `auto=False` (NULL, DISK, NPY)
    are listed only with `include_special=True`."""
    return [n for n in self.registered() if (include_special or self._entries[n].auto) and self._probe(self._entries[n])]

  @property
  def target(self) -> DevTarget | None:
    """DEV parsed (device, renderer, arch, iface), or None when DEV is unset."""
    return parse_dev(DEV.value) if DEV.value else None
  @property
  def DEFAULT(self) -> str:
    """The device name (e.g. "CPU") used when none is given: `Device.DEFAULT = ...` if set, else DEV's device part, else the
    highest-priority registered device that probes OK. An explicit DEV naming an unknown device is an error, never a fallback."""
    if self._default_override is not None: return self._default_override
    _plugins_loaded()
    if DEV.value:
      name = parse_dev(DEV.value.split(";")[0].partition("@")[0]).device
      if name not in self._entries: raise self._not_found(name, f" (from DEV={DEV.value!r})")
      if "+" in DEV.value: self._dev_target(name)  # a bad interface fails here, before any tensor is made
      return name
    with self._lock:
      if self._auto_default is None:
        cands = [n for n in self.registered() if self._entries[n].auto]
        if not (ok := [n for n in cands if self._probe(self._entries[n])]):
          raise DeviceNotFoundError(f"no device available: probed {cands if cands else 'nothing (none registered)'}; "
                                    f"set DEV or install a device plugin")
        self._auto_default = ok[0]
        if DEBUG >= 1: print(f"tg: using device {ok[0]} (auto-selected from {cands}; set DEV to choose)")
      return self._auto_default
  @DEFAULT.setter
  def DEFAULT(self, device: str | None) -> None:
    if device is None: self._default_override = None; return
    name = canonicalize(device).split(":")[0]
    if name not in self._entries: raise self._not_found(name)
    self._default_override = canonicalize(device)

  def _finalize_all(self) -> None:
    for d in list(self._opened.values()):
      with contextlib.suppress(Exception): d.finalize()

Device = _Device()
atexit.register(Device._finalize_all)

def _plugins_loaded() -> None:
  """Discover plugins (the core's own devices included) on first use of the registry, not at import."""
  from tg_core.plugins.discovery import registry
  registry.ensure_loaded()

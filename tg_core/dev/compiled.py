"""What a device plugin provides besides its renderer: `Compiler` (source to binary, cached), `Program` (a loaded kernel)
and `Compiled` (an opened device: allocator, renderers, compiler, runtime)."""
from __future__ import annotations
import hashlib
from typing import Any, ClassVar, Protocol, Sequence

from tg_core.helpers import CACHELEVEL
from tg_core.dev.buffer import Allocator
from tg_core.dev.diskcache import compiled_get, compiled_put
from tg_core.dev.errors import ArchUnsupportedError, RendererNotFoundError, did_you_mean
from tg_core.renderer import Renderer

class Compiler:
  """Source code to a binary. The base class's `compile` is the identity (the source as UTF-8), enough for interpreters.
  `compile_cached` remembers results in memory and, when `cachekey` is set and CACHELEVEL>=1, on disk (see `cache_dir`).
  Put whatever changes the output (compiler version, target arch, flags) into `cachekey`."""
  def __init__(self, cachekey: str | None = None):
    self.cachekey = cachekey
    # keyed by the source's digest: a kernel's source runs to KBs, and one compiled again (a second tier) isn't held elsewhere
    self._mem_cache: dict[str, bytes] = {}
  def compile(self, src: str) -> bytes: return src.encode()
  def compile_cached(self, src: str) -> bytes:
    h = hashlib.sha256(src.encode()).hexdigest()
    if CACHELEVEL >= 1 and (lib := self._mem_cache.get(h)) is not None: return lib
    use_disk = self.cachekey is not None and CACHELEVEL >= 1
    lib = None
    if use_disk: lib = compiled_get(self.cachekey, h)  # type: ignore[arg-type]
    if lib is None:
      lib = self.compile(src)
      if not isinstance(lib, (bytes, bytearray)): raise TypeError(f"{type(self).__name__}.compile must return bytes, got {type(lib).__name__}")
      lib = bytes(lib)
      if use_disk: compiled_put(self.cachekey, h, lib)  # type: ignore[arg-type]
    if CACHELEVEL >= 1: self._mem_cache[h] = lib
    return lib
  def disassemble(self, lib: bytes) -> str | None:
    """Human-readable machine code, when the compiler can produce it."""
    return None

class Program(Protocol):
  """A loaded kernel. `__call__` runs it; with `wait=True` it blocks and returns the run time in seconds."""
  def __init__(self, device: Any, name: str, lib: bytes, **kwargs: Any) -> None: ...
  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None: ...

def _no_runtime(device: str) -> type:
  class NoRuntime:
    def __init__(self, *args: Any, **kwargs: Any):
      raise RuntimeError(f"device {device} can't run kernels: it has no runtime. Copy the data to a compute device first")
  return NoRuntime

class Compiled:
  """An opened device: its allocator, renderers (the first is the default), compiler, program runtime and optional graph (batched runner).
  `renderers` may hold Renderer classes (instantiated on first use) or instances. With `compiler=None` the base (identity) Compiler is used;
  with `runtime=None` running a program raises a clear error."""
  def __init__(self, device: str, allocator: Allocator, renderers: Sequence[type[Renderer] | Renderer] | None = None,
               compiler: Compiler | None = None, runtime: type[Program] | None = None, graph: Any = None):
    if not isinstance(allocator, Allocator): raise TypeError(f"allocator must be an Allocator, got {type(allocator).__name__}")
    self.device, self.allocator, self.graph = device, allocator, graph
    if allocator.dev is None: allocator.dev = self
    self.renderers: list[type[Renderer] | Renderer] = list(renderers) if renderers else [Renderer]
    self._renderer_idx = 0
    self._renderer_instances: dict[int, Renderer] = {}
    self._compiler = compiler if compiler is not None else Compiler()
    self.can_run = runtime is not None
    self.runtime: type[Program] = runtime if runtime is not None else _no_runtime(device)

  @property
  def renderer(self) -> Renderer:
    i = self._renderer_idx
    if (r := self._renderer_instances.get(i)) is None:
      r = self.renderers[i]() if not isinstance(self.renderers[i], Renderer) else self.renderers[i]  # type: ignore[operator,assignment]
      if not isinstance(r, Renderer): raise TypeError(f"device {self.device}: renderers must be Renderer classes or instances, got {r!r}")
      if not r.device: r.device = self.device.split(":")[0]
      self._renderer_instances[i] = r
    return r
  @property
  def compiler(self) -> Compiler: return self.renderer.compiler if self.renderer.compiler is not None else self._compiler
  def renderer_names(self) -> list[str]:
    return [r.target_name() for r in self.renderers]
  def select_renderer(self, name: str | None, arch: str | None = None) -> Renderer:
    """Make the renderer called `name` (see `Renderer.target_name`; the device name prefix is optional; None: the first) the
    current one, targeting `arch` when given. A renderer or arch the device can't serve raises a DevTargetError naming what it can."""
    if name is None: self._renderer_idx = 0
    else:
      want, dev = name.upper(), self.device.split(":")[0].upper()
      names = self.renderer_names()
      cands = [i for i, n in enumerate(names) if n in (want, dev + want) or n.removeprefix(dev) == want]
      if not cands:
        raise RendererNotFoundError(f"device {self.device} has no renderer {name!r}; it has {', '.join(names)}{did_you_mean(name, names)}. "
                                    f"Pick one with DEV={dev}:<RENDERER>, or install the plugin that provides {name!r}", name, names)
      self._renderer_idx = cands[0]
    ren = self.renderer
    if arch is not None:
      if arch not in (archs := ren.caps.archs):
        what = f"it can target {', '.join(archs)}{did_you_mean(arch, archs)}" if archs else "it takes no arch (leave the :arch part out of DEV)"
        raise ArchUnsupportedError(f"renderer {ren.target_name()} of device {self.device} can't target arch {arch!r}: {what}", arch, archs)
      ren.select_arch(arch)
    return ren
  def use_renderer(self, ren: Renderer) -> Renderer:
    """Make the instance `ren` the current renderer (in place of the current one), e.g. a wrapper that checks it."""
    if not isinstance(ren, Renderer): raise TypeError(f"use_renderer takes a Renderer, got {type(ren).__name__}")
    if not ren.device: ren.device = self.device.split(":")[0]
    self.renderers[self._renderer_idx] = self._renderer_instances[self._renderer_idx] = ren
    return ren

  # features this device does not support (name -> reason); the conformance kit skips their tests with the reason
  unsupported: ClassVar[dict[str, str]] = {}
  def synchronize(self) -> None:
    """Wait for all work queued on the device."""
  def finalize(self) -> None:
    """Release device resources; called at exit for every opened device."""
  def __repr__(self) -> str: return f"<{type(self).__name__} {self.device}>"

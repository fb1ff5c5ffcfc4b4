"""The device layer's public API, declared in one place: what a device plugin may import and rely on. Buffers and
allocators, the base classes a device plugin subclasses (Renderer with its RendererCaps, Compiler, Program, Compiled),
the `Device` registry that maps device strings ("CPU", "CPU:1", "DISK:/tmp/x") to opened devices, DEV parsing, the
on-disk cache and the errors. The implementation lives in `tg_core/dev/` (one module per role) and `tg_core/renderer/`.

Nothing here knows about a particular device: devices register a factory with `Device.register`.
"""
from tg_core.dev.buffer import Allocator, Buffer, BufferSpec, LRUAllocator, flat_mv
from tg_core.dev.compiled import Compiled, Compiler, Program
from tg_core.dev.diskcache import cache_dir, diskcache_get, diskcache_put
from tg_core.dev.errors import (ArchUnsupportedError, DeviceAlreadyRegisteredError, DeviceError, DeviceNotFoundError, DevTargetError,
                                DeviceUnavailableError, InterfaceUnsupportedError, RendererNotFoundError, did_you_mean)
from tg_core.dev.registry import Device
from tg_core.dev.target import DevTarget, canonicalize, parse_dev
from tg_core.renderer import RENDERER_CONTRACT, Renderer, RendererCaps, TensorCore

__all__ = ["BufferSpec", "Allocator", "LRUAllocator", "Buffer", "Renderer", "RendererCaps", "TensorCore", "RENDERER_CONTRACT", "Compiler",
           "Program", "Compiled", "Device", "DevTarget", "DeviceError", "DeviceNotFoundError", "DeviceUnavailableError",
           "DeviceAlreadyRegisteredError", "DevTargetError", "RendererNotFoundError", "ArchUnsupportedError", "InterfaceUnsupportedError",
           "did_you_mean", "canonicalize", "parse_dev", "cache_dir", "diskcache_get", "diskcache_put", "flat_mv"]

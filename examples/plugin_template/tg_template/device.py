"""The TEMPLATE device: host memory buffers and the core's PYTHON renderer/runtime, i.e. a backend that reuses a core
renderer. A real backend brings its own Renderer (code generation), Compiler and Program (launch)."""
from __future__ import annotations
from typing import Any

from tg_core.device import Compiled, LRUAllocator, RendererCaps
from tg_core.renderer.python import PythonRenderer
from tg_core.runtime.ops_python import PythonCompiler, PythonProgram

class TemplateAllocator(LRUAllocator):
  def _alloc(self, size: int, options: Any = None) -> memoryview: return memoryview(bytearray(size))
  def _free(self, opaque: Any, options: Any = None) -> None: pass
  def _as_buffer(self, src: memoryview) -> memoryview: return src
  def _copyin(self, dest: memoryview, src: memoryview) -> None: dest[:] = src
  def _copyout(self, dest: memoryview, src: memoryview) -> None: dest[:] = src
  def _offset(self, buf: memoryview, size: int, offset: int) -> memoryview: return buf[offset:offset + size]

class TemplateRenderer(PythonRenderer):
  device = "TEMPLATE"
  # what codegen may assume about the target, in one declared record (every field: docs/backend-authors.md). This one
  # interprets kernels like PYTHON: grid and workgroup indices are numpy axes, no shared memory, kernels run as written,
  # reductions of up to 2^24 elements done whole by numpy; every dtype and transcendental native (the defaults)
  caps = RendererCaps(global_max=(1 << 31,) * 16, local_max=(1 << 31,) * 3, shared_max=0, default_opts=False, native_reduce_limit=1 << 24)

class TemplateDevice(Compiled):
  unsupported = {"large_buffers": "host-memory interpreter, like PYTHON"}
  def __init__(self, device: str):
    super().__init__(device, TemplateAllocator(), [TemplateRenderer], PythonCompiler(), PythonProgram)

"""The TEMPLATE device: host memory buffers and the core's PYTHON renderer/runtime, i.e. a backend that reuses a core
renderer. A real backend brings its own Renderer (code generation), Compiler and Program (launch)."""
from __future__ import annotations
from typing import Any

from tg_core.device import Compiled, LRUAllocator
from tg_core.runtime.ops_python import PythonCompiler, PythonProgram, PythonRenderer

class TemplateAllocator(LRUAllocator):
  def _alloc(self, size: int, options: Any = None) -> memoryview: return memoryview(bytearray(size))
  def _free(self, opaque: Any, options: Any = None) -> None: pass
  def _as_buffer(self, src: memoryview) -> memoryview: return src
  def _copyin(self, dest: memoryview, src: memoryview) -> None: dest[:] = src
  def _copyout(self, dest: memoryview, src: memoryview) -> None: dest[:] = src
  def _offset(self, buf: memoryview, size: int, offset: int) -> memoryview: return buf[offset:offset + size]

class TemplateRenderer(PythonRenderer):
  device = "TEMPLATE"

class TemplateDevice(Compiled):
  unsupported = {"large_buffers": "host-memory interpreter, like PYTHON"}
  def __init__(self, device: str):
    super().__init__(device, TemplateAllocator(), [TemplateRenderer], PythonCompiler(), PythonProgram)

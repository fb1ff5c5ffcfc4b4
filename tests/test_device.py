"""The device layer: Buffer/Allocator semantics on an in-test host-memory device, the LRU cache, views, the core devices (NULL, DISK, NPY),
the Device registry and DEV, and the Compiler disk cache."""
from __future__ import annotations
import ctypes
import os
import pickle
import struct
import subprocess
import sys

import numpy as np
import pytest

from tg_core.device import (Allocator, Buffer, BufferSpec, Compiled, Compiler, Device, DeviceAlreadyRegisteredError, DeviceNotFoundError, RendererNotFoundError,
                            DeviceUnavailableError, LRUAllocator, Renderer, canonicalize, parse_dev)
from tg_core.dtype import _to_np_storage, dtypes
from tg_core.helpers import Context, GlobalCounters

# *** a tiny host-memory device, registered for these tests only ***

class HostAllocator(LRUAllocator):
  """ctypes byte arrays; views with from_buffer, transfers with memmove."""
  def __init__(self, dev: Compiled | None = None):
    super().__init__(dev)
    self.n_alloc = self.n_free = self.n_transfer = 0
    self.fail_next = 0
  def _alloc(self, size: int, options: BufferSpec):
    if self.fail_next:
      self.fail_next -= 1
      raise MemoryError("out of (test) memory")
    self.n_alloc += 1
    return (ctypes.c_uint8 * size)()
  def _free(self, opaque, options: BufferSpec) -> None: self.n_free += 1
  def _as_buffer(self, src) -> memoryview: return memoryview(src).cast("B")
  def _offset(self, buf, size_bytes: int, offset_bytes: int): return (ctypes.c_uint8 * size_bytes).from_buffer(buf, offset_bytes)
  def _transfer(self, dest, src, sz: int, src_dev: Compiled, dest_dev: Compiled) -> None:
    self.n_transfer += 1
    ctypes.memmove(dest, src, sz)

class CopyOnlyAllocator(Allocator):
  """An allocator with only _copyin/_copyout (device memory the host can't see): bytes objects in a dict."""
  def __init__(self, dev: Compiled | None = None):
    super().__init__(dev)
    self.mem: dict[int, bytearray] = {}
  def _alloc(self, size: int, options: BufferSpec) -> int:
    self.mem[h := len(self.mem) + 1] = bytearray(size)
    return h
  def _free(self, opaque: int, options: BufferSpec) -> None: del self.mem[opaque]
  def _copyin(self, dest: int, src: memoryview) -> None: self.mem[dest][:] = src
  def _copyout(self, dest: memoryview, src: int) -> None: dest[:] = self.mem[src]

class HostDevice(Compiled):
  def __init__(self, device: str): super().__init__(device, HostAllocator(), [Renderer], Compiler(), None)
class CopyOnlyDevice(Compiled):
  def __init__(self, device: str): super().__init__(device, CopyOnlyAllocator(), None, None, None)

@pytest.fixture(autouse=True, scope="module")
def _test_devices():
  Device.register("TESTHOST", HostDevice, priority=-1000, auto=False, origin="tests/test_device.py")
  Device.register("TESTCOPY", CopyOnlyDevice, priority=-1000, auto=False, origin="tests/test_device.py")
  yield
  Device.unregister("TESTHOST")
  Device.unregister("TESTCOPY")

STORAGE_DTYPES = [dt for dt in dtypes.fields().values() if not dtypes.is_weak(dt)]
STORAGE_DTYPES = sorted(set(STORAGE_DTYPES), key=lambda d: d.priority)

def _sample(dt, n: int = 7) -> np.ndarray:
  """Random bit patterns for any dtype, built with numpy's own generator (independent of tg's conversions)."""
  rng = np.random.default_rng(dt.priority)
  npdt = np.dtype(_to_np_storage(dt))
  if dt == dtypes.bool: return rng.integers(0, 2, n).astype(np.bool_)
  if npdt.kind == "f": return rng.standard_normal(n).astype(npdt)
  info = np.iinfo(npdt)
  return rng.integers(info.min, info.max, n, dtype=npdt, endpoint=True)

# *** Buffer round trips ***

@pytest.mark.parametrize("device", ["TESTHOST", "TESTCOPY"])
@pytest.mark.parametrize("dt", STORAGE_DTYPES, ids=str)
def test_roundtrip_every_dtype(device, dt):
  ref = _sample(dt)
  b = Buffer(device, ref.size, dt).allocate()
  assert b.nbytes == ref.nbytes == ref.size * dt.itemsize
  b.copyin(memoryview(ref))
  out = b.numpy()
  assert out.dtype == np.dtype(_to_np_storage(dt))
  np.testing.assert_array_equal(out, ref)
  host = bytearray(b.nbytes)
  ret = b.copyout(memoryview(host))
  assert bytes(ret) == ref.tobytes() == bytes(host)
  assert bytes(b.as_buffer()) == ref.tobytes()

def test_bf16_and_fp8_are_bit_patterns():
  bits = np.array([0x3F80, 0xC000, 0x7F80], dtype=np.uint16)  # 1.0, -2.0, inf in bfloat16
  b = Buffer("TESTHOST", 3, dtypes.bfloat16, initial_value=bits.tobytes())
  np.testing.assert_array_equal(b.numpy(), bits)
  assert b.numpy().dtype == np.uint16
  f = Buffer("TESTHOST", 2, dtypes.fp8e4m3, initial_value=bytes([0x38, 0x7F]))
  assert f.numpy().dtype == np.uint8 and f.numpy().tolist() == [0x38, 0x7F]

def test_initial_value_and_vector_dtype():
  b = Buffer("TESTHOST", 2, dtypes.float32.vec(4), initial_value=struct.pack("8f", *range(8)))
  assert b.nbytes == 32 and b.is_allocated()
  np.testing.assert_array_equal(b.numpy(), np.arange(8, dtype=np.float32).reshape(2, 4))

def test_copyin_accepts_numpy_and_multidim():
  b = Buffer("TESTHOST", 6, dtypes.int32).allocate()
  b.copyin(memoryview(np.arange(6, dtype=np.int32).reshape(2, 3)))
  assert b.numpy().tolist() == list(range(6))

def test_zero_size():
  b = Buffer("TESTHOST", 0, dtypes.float32).allocate()
  assert b.nbytes == 0 and b.numpy().shape == (0,)
  b.copyin(memoryview(b""))
  b.deallocate()

def test_validation():
  with pytest.raises(TypeError, match="size"): Buffer("TESTHOST", 2.0, dtypes.float32)
  with pytest.raises(TypeError, match="size"): Buffer("TESTHOST", True, dtypes.float32)
  with pytest.raises(ValueError, match="non-negative"): Buffer("TESTHOST", -1, dtypes.float32)
  with pytest.raises(TypeError, match="dtype"): Buffer("TESTHOST", 2, "float32")
  with pytest.raises(TypeError, match="dtype"): Buffer("TESTHOST", 2, np.float32)
  with pytest.raises(ValueError, match="storage"): Buffer("TESTHOST", 2, dtypes.weakint)
  with pytest.raises(TypeError, match="device"): Buffer(0, 2, dtypes.float32)
  with pytest.raises(ValueError, match="initial_value"): Buffer("TESTHOST", 2, dtypes.float32, initial_value=b"abc")
  assert Buffer("TESTHOST", np.int64(3), dtypes.int8).size == 3  # anything with __index__
  b = Buffer("TESTHOST", 4, dtypes.float32)
  with pytest.raises(RuntimeError, match="not allocated"): b.copyin(memoryview(bytearray(16)))
  b.allocate()
  with pytest.raises(RuntimeError, match="already allocated"): b.allocate()
  with pytest.raises(ValueError, match="size mismatch"): b.copyin(memoryview(bytearray(12)))
  with pytest.raises(ValueError, match="size mismatch"): b.copyout(memoryview(bytearray(20)))
  with pytest.raises(ValueError, match="writable"): b.copyout(memoryview(bytes(16)))

def test_device_canonicalized_on_buffer():
  assert Buffer("testhost:0", 1, dtypes.int8).device == "TESTHOST"
  assert Buffer("testhost:2", 1, dtypes.int8).device == "TESTHOST:2"

def test_mem_used_and_deallocate():
  before = GlobalCounters.mem_used
  b = Buffer("TESTHOST", 256, dtypes.float32).allocate()
  assert GlobalCounters.mem_used == before + 1024
  b.deallocate()
  assert GlobalCounters.mem_used == before and not b.is_allocated()
  with pytest.raises(RuntimeError): b.deallocate()
  # memory given as opaque belongs to the caller: not counted, not freed
  alloc = Device["TESTHOST"].allocator
  n_free = alloc.n_free
  ext = Buffer("TESTHOST", 4, dtypes.uint8, opaque=(ctypes.c_uint8 * 4)(1, 2, 3, 4))
  assert GlobalCounters.mem_used == before and ext.numpy().tolist() == [1, 2, 3, 4]
  ext.deallocate()
  assert alloc.n_free == n_free and len(alloc.cache.get((4, None), [])) == 0

def test_del_frees():
  before = GlobalCounters.mem_used
  b = Buffer("TESTCOPY", 100, dtypes.uint8).allocate()
  alloc = Device["TESTCOPY"].allocator
  n = len(alloc.mem)
  del b
  assert len(alloc.mem) == n - 1 and GlobalCounters.mem_used == before

def test_pickle_buffer():
  b = Buffer("TESTHOST", 3, dtypes.int16, initial_value=np.array([1, -2, 3], np.int16).tobytes())
  b2 = pickle.loads(pickle.dumps(b))
  assert b2 is not b and b2.device == "TESTHOST" and b2.numpy().tolist() == [1, -2, 3]
  assert not pickle.loads(pickle.dumps(Buffer("TESTHOST", 3, dtypes.int16))).is_allocated()

# *** LRU ***

def test_lru_reuse():
  alloc = Device["TESTHOST"].allocator
  alloc.free_cache()
  b = Buffer("TESTHOST", 1000, dtypes.uint8).allocate()
  opaque, n_alloc, n_free = b._buf, alloc.n_alloc, alloc.n_free
  b.deallocate()
  assert alloc.cache[(1000, None)] == [opaque] and alloc.n_free == n_free  # cached, not freed
  b2 = Buffer("TESTHOST", 250, dtypes.float32).allocate()  # same bytes, same options
  assert b2._buf is opaque and alloc.n_alloc == n_alloc
  b3 = Buffer("TESTHOST", 1000, dtypes.uint8, options=BufferSpec(host=True)).allocate()  # other options: new memory
  assert b3._buf is not opaque and alloc.n_alloc == n_alloc + 1
  b2.deallocate(); b3.deallocate()
  assert alloc.cached_bytes >= 2000
  n_free = alloc.n_free
  alloc.free_cache()
  assert alloc.n_free == n_free + 2 and alloc.cached_bytes == 0

def test_lru_disabled_and_nolru():
  alloc = Device["TESTHOST"].allocator
  alloc.free_cache()
  n_free = alloc.n_free
  with Context(LRU=0):
    Buffer("TESTHOST", 8, dtypes.uint8).allocate().deallocate()
  Buffer("TESTHOST", 8, dtypes.uint8, options=BufferSpec(nolru=True)).allocate().deallocate()
  assert alloc.n_free == n_free + 2 and alloc.cached_bytes == 0

def test_lru_memoryerror_frees_cache_and_retries():
  alloc = Device["TESTHOST"].allocator
  alloc.free_cache()
  Buffer("TESTHOST", 64, dtypes.uint8).allocate().deallocate()
  assert alloc.cached_bytes == 64
  alloc.fail_next = 1
  b = Buffer("TESTHOST", 32, dtypes.uint8).allocate()
  assert b.is_allocated() and alloc.cached_bytes == 0
  alloc.fail_next = 2
  with pytest.raises(MemoryError): Buffer("TESTHOST", 32, dtypes.uint8).allocate()
  alloc.fail_next = 0

# *** views ***

def test_views_share_memory():
  base = Buffer("TESTHOST", 8, dtypes.int32, initial_value=np.arange(8, dtype=np.int32).tobytes())
  v = base.view(3, dtypes.int32, 8)
  assert v.is_allocated() and v.base is base and v.offset == 8
  assert v.numpy().tolist() == [2, 3, 4]
  v.copyin(memoryview(np.array([20, 30, 40], np.int32)))
  assert base.numpy().tolist() == [0, 1, 20, 30, 40, 5, 6, 7]
  # a view of a view points at the base, offsets add up; the dtype can change
  vv = v.view(2, dtypes.int16, 4)
  assert vv.base is base and vv.offset == 12 and vv.numpy().tolist() == [30, 0]
  u8 = base.view(4, dtypes.uint8, 0)
  assert u8.numpy().tolist() == [0, 0, 0, 0]

def test_view_validation_and_lifetime():
  base = Buffer("TESTHOST", 4, dtypes.float32)
  with pytest.raises(ValueError, match="doesn't fit"): base.view(2, dtypes.float32, 12)
  v = base.view(2, dtypes.float32, 8)
  assert not v.is_allocated()
  v.allocate()  # allocates the base
  assert base.is_allocated() and base.allocated_views == 1
  with pytest.raises(RuntimeError, match="views"): base.deallocate()
  v.deallocate()
  assert base.allocated_views == 0
  base.deallocate()

def test_view_needs_offset_support():
  base = Buffer("TESTCOPY", 4, dtypes.float32).allocate()
  with pytest.raises(RuntimeError, match="views"): base.view(1, dtypes.float32, 0)

# *** copies between devices ***

def test_copy_from_transfer_and_host():
  src = Buffer("TESTHOST", 5, dtypes.float32, initial_value=np.arange(5, dtype=np.float32).tobytes())
  alloc = Device["TESTHOST:1"].allocator
  n = alloc.n_transfer
  dst = Buffer("TESTHOST:1", 5, dtypes.float32).copy_from(src)  # same allocator class with _transfer
  assert alloc.n_transfer == n + 1 and dst.numpy().tolist() == [0, 1, 2, 3, 4]
  cp = Buffer("TESTCOPY", 5, dtypes.float32).copy_from(dst)  # through host memory
  back = Buffer("TESTHOST", 5, dtypes.float32).copy_from(cp)
  assert back.numpy().tolist() == [0, 1, 2, 3, 4]
  with pytest.raises(ValueError, match="size mismatch"): Buffer("TESTHOST", 4, dtypes.float32).copy_from(src)

# *** NULL ***

def test_null_device():
  dev = Device["NULL"]
  assert dev is Device["null"] and dev is Device["NULL:0"]
  b = Buffer("NULL", 100, dtypes.float32).allocate()
  assert dev.allocator.allocated_bytes >= 400
  b.copyin(memoryview(bytearray(400)))
  assert b.numpy().shape == (100,)
  v = b.view(10, dtypes.float32, 40)
  assert v._buf.offset == 40 and v._buf.size == 40
  assert dev.compiler.compile_cached("anything") == b""
  prg = dev.runtime(dev, "k", b"")
  assert prg(b._buf, global_size=(4, 1, 1), wait=True) == 0.0 and prg() is None
  assert "3 uops" in dev.renderer.render([1, 2, 3])
  assert dtypes.bfloat16 in dev.renderer.caps.native_dtypes

# *** DISK ***

def test_disk_create_write_read(tmp_path):
  fn = tmp_path / "new.bin"
  assert not fn.exists()
  b = Buffer(f"disk:{fn}", 4, dtypes.int32).allocate()
  assert b.device == f"DISK:{fn}" and fn.stat().st_size == 16
  b.copyin(memoryview(np.array([1, 2, 3, 4], dtype=np.int32)))
  b.deallocate()
  assert np.fromfile(fn, dtype=np.int32).tolist() == [1, 2, 3, 4]
  # reopen: the data is there; a larger buffer extends the file with zeros
  b2 = Buffer(f"DISK:{fn}", 6, dtypes.int32).allocate()
  assert fn.stat().st_size == 24 and b2.numpy().tolist() == [1, 2, 3, 4, 0, 0]

def test_disk_offsets_like_safetensors(tmp_path):
  # a file with a header and two arrays at known offsets, written by numpy
  fn = tmp_path / "t.bin"
  a, c = np.arange(6, dtype=np.float32), np.array([[1, 2], [3, 4]], dtype=np.int16)
  header = b"HDR!" * 4
  fn.write_bytes(header + a.tobytes() + c.tobytes())
  raw = Buffer(f"DISK:{fn}", fn.stat().st_size, dtypes.uint8).allocate()
  ta = raw.view(6, dtypes.float32, 16)
  tc = raw.view(4, dtypes.int16, 16 + a.nbytes)
  np.testing.assert_array_equal(ta.numpy(), a)
  np.testing.assert_array_equal(tc.numpy(), c.reshape(-1))
  zc = ta.as_buffer(allow_zero_copy=True)
  assert bytes(zc) == a.tobytes()
  # write through a view, see it in the file
  tc.copyin(memoryview(np.array([9, 9, 9, 9], np.int16)))
  del zc, ta, tc, raw
  assert np.frombuffer(fn.read_bytes()[16 + a.nbytes:], dtype=np.int16).tolist() == [9, 9, 9, 9]

def test_disk_copy_to_host_device(tmp_path):
  fn = tmp_path / "c.bin"
  np.arange(10, dtype=np.float64).tofile(fn)
  before = GlobalCounters.mem_used
  d = Buffer(f"DISK:{fn}", 10, dtypes.float64).allocate()
  assert GlobalCounters.mem_used == before  # file-backed memory isn't device memory
  h = Buffer("TESTCOPY", 10, dtypes.float64).copy_from(d)
  assert h.numpy().tolist() == list(range(10))

def test_disk_errors(tmp_path):
  with pytest.raises(DeviceUnavailableError, match="names a file"): Device["DISK"]
  dev = Device[f"DISK:{tmp_path / 'x.bin'}"]
  assert not dev.can_run
  with pytest.raises(RuntimeError, match="can't run kernels"): dev.runtime(dev, "k", b"")
  if os.geteuid() != 0:
    ro = tmp_path / "ro.bin"
    ro.write_bytes(b"\x01\x02\x03\x04")
    ro.chmod(0o444)
    b = Buffer(f"DISK:{ro}", 4, dtypes.uint8).allocate()
    assert b.numpy().tolist() == [1, 2, 3, 4]
    with pytest.raises(PermissionError): b.copyin(memoryview(bytearray(4)))
    with pytest.raises(PermissionError): Buffer(f"DISK:{ro}", 8, dtypes.uint8).allocate()

# *** NPY ***

def test_npy_zero_copy():
  arr = np.arange(12, dtype=np.float32).reshape(3, 4)
  b = Buffer("NPY", arr.size, dtypes.float32, opaque=arr)
  np.testing.assert_array_equal(b.numpy(), arr.reshape(-1))
  mv = b.as_buffer(allow_zero_copy=True)
  assert mv.readonly and np.shares_memory(np.frombuffer(mv, dtype=np.float32), arr)
  arr[0, 0] = 42  # zero-copy: the view sees it
  assert np.frombuffer(mv, dtype=np.float32)[0] == 42
  assert b.view(2, dtypes.float32, 8).numpy().tolist() == [2, 3]
  with pytest.raises(PermissionError): b.copyin(memoryview(bytearray(48)))
  with pytest.raises(RuntimeError, match="existing numpy array"): Buffer("NPY", 4, dtypes.float32).allocate()
  h = Buffer("TESTHOST", 12, dtypes.float32).copy_from(b)
  assert h.numpy()[0] == 42

def test_npy_non_contiguous():
  arr = np.arange(12, dtype=np.int64).reshape(3, 4).T
  b = Buffer("NPY", arr.size, dtypes.int64, opaque=arr)
  assert b.numpy().tolist() == arr.reshape(-1).tolist()

# *** the registry ***

def test_canonicalize():
  assert canonicalize("cpu") == "CPU" and Device.canonicalize("CPU:0") == "CPU" and canonicalize("cpu:1") == "CPU:1"
  assert canonicalize("disk:/Tmp/File") == "DISK:/Tmp/File"
  assert canonicalize("CPU:10") == "CPU:10"

def test_instances_cached_per_device_string():
  assert Device["testhost"] is Device["TESTHOST"] is Device["TESTHOST:0"]
  assert Device["TESTHOST:1"] is not Device["TESTHOST"] and Device["TESTHOST:1"].device == "TESTHOST:1"
  assert isinstance(Device["TESTHOST"].allocator, HostAllocator) and Device["TESTHOST"].allocator.dev is Device["TESTHOST"]
  assert "testhost:3" in Device and "NOPE" not in Device

def test_unknown_device_error():
  with pytest.raises(DeviceNotFoundError) as e: Device["TESTHOTS"]
  assert isinstance(e.value, KeyError)
  msg = str(e.value)
  assert "TESTHOTS" in msg and "NULL" in msg and "DISK" in msg and "TESTHOST" in msg and "Did you mean 'TESTHOST'" in msg

def test_register_rules():
  with pytest.raises(DeviceAlreadyRegisteredError, match="tests/test_device.py"): Device.register("TESTHOST", HostDevice, origin="other")
  with pytest.raises(ValueError): Device.register("lower", HostDevice)
  with pytest.raises(ValueError): Device.register("A:B", HostDevice)
  Device.register("TESTBAD", lambda d: 1 / 0, auto=False)
  try:
    with pytest.raises(DeviceUnavailableError, match="ZeroDivisionError") as e: Device["TESTBAD"]
    assert isinstance(e.value.__cause__, ZeroDivisionError)
  finally: Device.unregister("TESTBAD")

def test_parse_dev():
  assert parse_dev("amd") == parse_dev("AMD") and parse_dev("AMD").device == "AMD" and parse_dev("AMD").renderer is None
  t = parse_dev("AMD:LLVM:gfx1100")
  assert (t.device, t.renderer, t.arch, t.iface) == ("AMD", "LLVM", "gfx1100", None)
  t = parse_dev("MOCK+AMD")
  assert (t.device, t.iface) == ("AMD", "MOCK")
  t = parse_dev("PCI:0,1+CUDA:PTX:sm_90")
  assert (t.device, t.renderer, t.arch, t.iface) == ("CUDA", "PTX", "sm_90", "PCI:0,1")
  with pytest.raises(ValueError): parse_dev("")
  with pytest.raises(ValueError): parse_dev("MOCK+")

def test_default_from_dev():
  with Context(DEV="null"):
    assert Device.DEFAULT == "NULL"
    assert Device.target is not None and Device.target.device == "NULL"
  with Context(DEV="TESTHOST:RENDERER"):
    assert Device.DEFAULT == "TESTHOST" and Device.target.renderer == "RENDERER"
  with Context(DEV="NOSUCHDEV"):
    with pytest.raises(DeviceNotFoundError, match="NOSUCHDEV.*DEV="): _ = Device.DEFAULT

class AlphaRenderer(Renderer): pass
class BetaRenderer(Renderer):
  compiler = Compiler(cachekey=None)

def test_dev_selects_renderer():
  Device.register("TESTREN", lambda d: Compiled(d, HostAllocator(), [AlphaRenderer, BetaRenderer()]), auto=False)
  try:
    assert Device["TESTREN"].renderer_names() == ["ALPHA", "BETA"]
    assert isinstance(Device["TESTREN"].renderer, AlphaRenderer) and Device["TESTREN"].renderer.device == "TESTREN"
    assert Device["TESTREN"].compiler is not BetaRenderer.compiler
    with Context(DEV="TESTREN:beta"):
      dev = Device["TESTREN:1"]
      assert isinstance(dev.renderer, BetaRenderer) and dev.compiler is BetaRenderer.compiler
    with Context(DEV="TESTREN:GAMMA"):
      with pytest.raises(RendererNotFoundError, match="no renderer 'GAMMA'; it has ALPHA, BETA"): Device["TESTREN:2"]
  finally: Device.unregister("TESTREN")

def test_default_auto_selection_by_priority_and_probe():
  saved = Device._auto_default
  Device.register("TESTLOW", HostDevice, priority=10**6)
  Device.register("TESTHIGH", HostDevice, priority=10**6 + 1, probe=lambda: False)
  try:
    with Context(DEV=""):
      assert Device.DEFAULT == "TESTLOW"  # TESTHIGH ranks first but its probe fails
      assert Device.get_available_devices()[0] == "TESTLOW" and "TESTHIGH" not in Device.get_available_devices()
      assert "NULL" not in Device.get_available_devices() and "NULL" in Device.get_available_devices(include_special=True)
      Device.register("TESTHIGH", HostDevice, priority=10**6 + 1, probe=lambda: 1 / 0, replace=True)  # a raising probe counts as failed
      assert Device.DEFAULT == "TESTLOW"
      Device.DEFAULT = "null"
      assert Device.DEFAULT == "NULL"
      Device.DEFAULT = None
      assert Device.DEFAULT == "TESTLOW"
      with pytest.raises(DeviceNotFoundError): Device.DEFAULT = "NOSUCH"
  finally:
    Device.unregister("TESTLOW"); Device.unregister("TESTHIGH")
    Device._auto_default = saved

def test_core_devices_are_lazy():
  code = ("import sys, tg_core.device as d; assert {'NULL','DISK','NPY'} <= set(d.Device.registered()); "
          "assert not any(m in sys.modules for m in ('tg_core.runtime.ops_null','tg_core.runtime.ops_disk','tg_core.runtime.ops_npy')); "
          "d.Device['NULL']; assert 'tg_core.runtime.ops_null' in sys.modules and 'tg_core.runtime.ops_disk' not in sys.modules")
  subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# *** Compiler cache ***

class CountingCompiler(Compiler):
  def __init__(self, cachekey: str | None):
    super().__init__(cachekey)
    self.calls = 0
  def compile(self, src: str) -> bytes:
    self.calls += 1
    return b"BIN:" + src[::-1].encode()

def test_compiler_base_is_identity():
  assert Compiler().compile("abc") == b"abc" and Compiler().disassemble(b"") is None

def test_compiler_disk_cache(tmp_path, monkeypatch):
  monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path / "cache"))
  c1 = CountingCompiler("test_v1")
  assert c1.compile_cached("kernel src") == b"BIN:crs lenrek"
  assert c1.compile_cached("kernel src") == b"BIN:crs lenrek" and c1.calls == 1  # memory
  assert (tmp_path / "cache" / "cache.db").exists()
  c2 = CountingCompiler("test_v1")  # a new compiler (think: a new process) finds it on disk
  assert c2.compile_cached("kernel src") == b"BIN:crs lenrek" and c2.calls == 0
  c3 = CountingCompiler("test_v2")  # another cachekey misses
  c3.compile_cached("kernel src")
  assert c3.calls == 1
  c4 = CountingCompiler(None)  # no cachekey: memory only
  c4.compile_cached("kernel src"); CountingCompiler(None).compile_cached("kernel src")
  assert c4.calls == 1
  with Context(CACHELEVEL=0):
    c5 = CountingCompiler("test_v1")
    c5.compile_cached("kernel src"); c5.compile_cached("kernel src")
    assert c5.calls == 2

def test_compiler_cache_dir_env(tmp_path, monkeypatch):
  from tg_core.device import cache_dir, diskcache_get, diskcache_put
  monkeypatch.delenv("TG_CACHE_DIR", raising=False)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  assert cache_dir() == tmp_path / "xdg" / "tg"
  monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path / "mine"))
  assert cache_dir() == tmp_path / "mine"
  assert diskcache_get("beam", ("k", 1)) is None
  assert diskcache_put("beam", ("k", 1), {"opts": [1, 2]}) == {"opts": [1, 2]}
  assert diskcache_get("beam", ("k", 1)) == {"opts": [1, 2]}

def test_compiler_cache_unusable_dir(tmp_path, monkeypatch):
  blocker = tmp_path / "file"
  blocker.write_bytes(b"")
  monkeypatch.setenv("TG_CACHE_DIR", str(blocker / "sub"))  # can't create a directory under a file: cache silently off
  c = CountingCompiler("k")
  assert c.compile_cached("s") == b"BIN:s" and c.calls == 1

def test_compiled_defaults():
  dev = Compiled("TESTX", HostAllocator())
  assert type(dev.renderer) is Renderer and type(dev.compiler) is Compiler and not dev.can_run
  with pytest.raises(NotImplementedError): dev.renderer.render([])
  dev.synchronize(); dev.finalize()
  with pytest.raises(TypeError): Compiled("TESTX", object())

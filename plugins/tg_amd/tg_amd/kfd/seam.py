"""The one boundary where the KFD driver touches the OS: open/close, ioctl, mmap/munmap, address reservation, sysfs reads.

`LinuxOS` is the real thing (libc through ctypes); `tg_amd.kfd.mock.MockKFD` implements the same methods, so the driver above
runs unchanged on either. Mapped memory is handed out as a writable memoryview of the mapping."""
from __future__ import annotations
import ctypes
import os
from typing import Protocol

PROT_NONE, PROT_READ, PROT_WRITE = 0, 1, 2
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS, MAP_NORESERVE = 0x01, 0x02, 0x10, 0x20, 0x4000

class OSInterface(Protocol):
  def open(self, path: str) -> int: ...
  def close(self, fd: int) -> None: ...
  def ioctl(self, fd: int, request: int, arg: ctypes.Structure) -> None:
    """Runs the ioctl in place on `arg` (the kernel reads and writes the struct); raises OSError with the errno on failure."""
  def reserve_va(self, size: int) -> int:
    """A free, page-aligned range of the process's address space, reserved (not backed) so GPU and CPU addresses can agree."""
  def release_va(self, addr: int, size: int) -> None: ...
  def mmap(self, addr: int, size: int, fd: int, offset: int) -> memoryview:
    """A shared read/write mapping of `fd` at `offset`, at `addr` exactly (MAP_FIXED) when addr is nonzero."""
  def munmap(self, view: memoryview) -> None: ...
  def read_text(self, path: str) -> str: ...
  def listdir(self, path: str) -> list[str]: ...

class LinuxOS:
  """The real OS: os.open, fcntl.ioctl and libc mmap."""
  def __init__(self) -> None:
    self.libc = ctypes.CDLL(None, use_errno=True)
    self.libc.mmap.restype, self.libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                                                         ctypes.c_long]
    self.libc.munmap.restype, self.libc.munmap.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]
    self._maps: dict[int, tuple[int, int]] = {}  # id(view) -> (addr, size)

  def open(self, path: str) -> int: return os.open(path, os.O_RDWR | os.O_CLOEXEC)
  def close(self, fd: int) -> None: os.close(fd)
  def ioctl(self, fd: int, request: int, arg: ctypes.Structure) -> None:
    import fcntl
    fcntl.ioctl(fd, request, arg, True)  # type: ignore[call-overload]

  def _mmap(self, addr: int, size: int, prot: int, flags: int, fd: int, offset: int) -> int:
    # KFD's mmap offsets carry a type in bits 62-63 (e.g. KFD_MMAP_TYPE_DOORBELL): pass them as the signed off_t they are
    ret = self.libc.mmap(addr or None, size, prot, flags, fd, offset - (1 << 64) if offset >= 1 << 63 else offset)
    if ret is None or ret == ctypes.c_void_p(-1).value:
      err = ctypes.get_errno()
      raise OSError(err, f"mmap of {size} bytes at offset 0x{offset:x} of fd {fd} failed: {os.strerror(err)}")
    return int(ret)
  def reserve_va(self, size: int) -> int: return self._mmap(0, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
  def release_va(self, addr: int, size: int) -> None: self.libc.munmap(addr, size)
  def mmap(self, addr: int, size: int, fd: int, offset: int) -> memoryview:
    got = self._mmap(addr, size, PROT_READ | PROT_WRITE, MAP_SHARED | (MAP_FIXED if addr else 0), fd, offset)
    view = memoryview((ctypes.c_char * size).from_address(got)).cast("B")
    self._maps[id(view)] = (got, size)
    return view
  def munmap(self, view: memoryview) -> None:
    addr, size = self._maps.pop(id(view))
    view.release()
    self.libc.munmap(addr, size)
  def read_text(self, path: str) -> str:
    with open(path) as f: return f.read()
  def listdir(self, path: str) -> list[str]: return os.listdir(path)

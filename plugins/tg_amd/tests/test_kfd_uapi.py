"""The ctypes mirrors in tg_amd.kfd.uapi against the kernel's uapi header: every struct's size and field offsets, every ioctl number.
The reference is a C program compiled with gcc against /usr/include/linux/kfd_ioctl.h (Debian linux-libc-dev)."""
from __future__ import annotations
import ctypes
import shutil
import subprocess
from pathlib import Path
import pytest
from tg_amd.kfd import uapi

HEADER = Path("/usr/include/linux/kfd_ioctl.h")

def _fields(st: type[ctypes.Structure]) -> list[str]:
  """The C member names: an anonymous union's members are the struct's own (uapi._S declares `_anonymous_` on every struct)."""
  return [n for name, ty in st._fields_ for n in ([m for m, _ in ty._fields_] if name in st._anonymous_ else [name])]

@pytest.fixture(scope="module")
def c_layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
  if shutil.which("gcc") is None: pytest.skip("gcc is not installed: the layout reference is a C program compiled against kfd_ioctl.h")
  if not HEADER.exists(): pytest.skip(f"{HEADER} is missing (Debian package linux-libc-dev)")
  lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <linux/kfd_ioctl.h>", "int main(void) {"]
  for st in uapi.STRUCTS:
    lines.append(f'printf("sizeof {st.__name__} %zu\\n", sizeof(struct {st.__name__}));')
    for f in _fields(st): lines.append(f'printf("offsetof {st.__name__}.{f} %zu\\n", offsetof(struct {st.__name__}, {f}));')
  for name in uapi.IOCTLS: lines.append(f'printf("ioctl {name} %lu\\n", (unsigned long){name});')
  lines += ['printf("const KFD_IOCTL_MAJOR_VERSION %d\\n", KFD_IOCTL_MAJOR_VERSION);', "return 0; }"]
  d = tmp_path_factory.mktemp("kfd_layout")
  (d / "layout.c").write_text("\n".join(lines))
  # kfd_ioctl.h includes <drm/drm.h> (libdrm's, absent from linux-libc-dev) only for the __u32/__u64 types: stand in <linux/types.h>
  (d / "drm").mkdir(); (d / "drm" / "drm.h").write_text("#include <linux/types.h>\n")
  subprocess.run(["gcc", "-I", str(d), "-o", str(d / "layout"), str(d / "layout.c")], check=True, capture_output=True)
  out = subprocess.run([str(d / "layout")], check=True, capture_output=True, text=True).stdout
  return {" ".join(line.split()[:2]): int(line.split()[2]) for line in out.splitlines()}

@pytest.mark.parametrize("st", uapi.STRUCTS, ids=lambda s: s.__name__)
def test_struct_layout_matches_header(c_layout: dict[str, int], st: type[ctypes.Structure]):
  assert ctypes.sizeof(st) == c_layout[f"sizeof {st.__name__}"]
  for name in _fields(st): assert getattr(st, name).offset == c_layout[f"offsetof {st.__name__}.{name}"], name

def test_ioctl_numbers_match_header(c_layout: dict[str, int]):
  for name, (req, _) in uapi.IOCTLS.items(): assert req == c_layout[f"ioctl {name}"], name
  assert uapi.KFD_IOCTL_MAJOR_VERSION == c_layout["const KFD_IOCTL_MAJOR_VERSION"]

"""Fuzzing the reader: 2,400 deterministic mutants (truncations, byte flips in the header and tensor infos, huge counts and lengths,
bad offsets and dims) of a small valid file. Each must open or raise a GGUFError (no other exception), within a per-file time limit,
with peak Python allocation while opening bounded (tracemalloc); every 25th that opens also has all its tensors loaded and dequantized."""
from __future__ import annotations
import pathlib
import signal
import struct
import tracemalloc

import numpy as np
import pytest
from test_gguf_quants import random_blocks

from tg_gguf import GGUFError, GGUFValue, GGUFValueType, QuantizedArray, save_gguf
from tg_gguf.ggml_types import BY_NAME
from tg_gguf.reader import GGUFFile

N_MUTANTS = 2400
TIME_LIMIT_S = 5        # per file, to open it
LOAD_TIME_LIMIT_S = 120  # to load and dequantize its tensors, kernel compiles included (SPEC=1 on a loaded 2-core machine)
PEAK_LIMIT = 1 << 20  # bytes: the seed is ~1.7 KB, so anything near this means an allocation sized by a corrupt count
HUGE = (2**63 - 1, 2**64 - 1, 2**32, 2**32 - 1, 2**40, 2**31, 1 << 62)
TENSORS = {"tensor.alpha": (8,), "tensor.beta": (2, 32), "tensor.gamma": (256,)}

def seed_file(path: pathlib.Path) -> bytes:
  rng = np.random.default_rng(0)
  save_gguf(path, {
    "general.architecture": "fuzz", "general.alignment": GGUFValue(32, GGUFValueType.UINT32), "n": 7, "pi": 3.14,
    "tokens": ["<s>", "a", "bc", "def"], "scores": [0.0, -1.5, 2.25, 4.0], "nested": [[1, 2], [3]], "flag": True,
  }, {"tensor.alpha": rng.standard_normal(8).astype(np.float32),
      "tensor.beta": QuantizedArray(random_blocks("Q8_0", 2, 0), BY_NAME["Q8_0"].id, (2, 32)),
      "tensor.gamma": QuantizedArray(random_blocks("Q4_K", 1, 0), BY_NAME["Q4_K"].id, (256,))})
  return path.read_bytes()

def field_positions(raw: bytes) -> tuple[list[int], list[int], int]:
  """(positions of the tensor offset fields, positions of the dim fields, start of the tensor infos) of the seed."""
  offsets, dims = [], []
  starts = []
  for name, shape in TENSORS.items():
    at = raw.index(struct.pack("<Q", len(name)) + name.encode())
    starts.append(at)
    d0 = at + 8 + len(name) + 4
    dims += [d0 + 8 * i for i in range(len(shape))]
    offsets.append(d0 + 8 * len(shape) + 4)
  return offsets, dims, min(starts)

def pick(rng: np.random.Generator, vals: list[int] | tuple[int, ...]) -> int: return int(vals[int(rng.integers(0, len(vals)))])

def mutate(raw: bytes, i: int, rng: np.random.Generator, offsets: list[int], dims: list[int], infos_at: int, header_end: int) -> bytes:
  b = bytearray(raw)
  kind = i % 7
  if kind == 0: return bytes(b[:int(rng.integers(0, len(b)))])
  if kind in (1, 2):  # byte flips: anywhere in the header, or in the tensor infos
    lo = 0 if kind == 1 else infos_at
    for pos in rng.integers(lo, header_end, int(rng.integers(1, 5))): b[pos] = int(rng.integers(0, 256))
  elif kind == 3:  # a huge count or length written over any 8 header bytes
    pos = int(rng.integers(4, header_end - 8))
    b[pos:pos + 8] = struct.pack("<Q", pick(rng, HUGE) if rng.random() < 0.7 else int(rng.integers(0, 2**63)))
  elif kind == 4:  # a bad tensor offset: huge, past the end, misaligned or overlapping
    pos = offsets[int(rng.integers(0, len(offsets)))]
    b[pos:pos + 8] = struct.pack("<Q", pick(rng, [*HUGE, len(raw), 1, 16, 32, 33, int(rng.integers(0, 4096))]))
  elif kind == 5:  # a bad dim
    pos = dims[int(rng.integers(0, len(dims)))]
    b[pos:pos + 8] = struct.pack("<Q", pick(rng, [*HUGE, 0, 1, 3, 31, 64, 512, int(rng.integers(0, 1 << 20))]))
  else:  # flips anywhere, the data included
    for pos in rng.integers(0, len(b), int(rng.integers(1, 9))): b[pos] = int(rng.integers(0, 256))
  return bytes(b)

class FileTimeout(Exception): pass

def _alarm(signum, frame): raise FileTimeout()

def test_fuzz_mutants(tmp_path: pathlib.Path):
  raw = seed_file(tmp_path / "seed.gguf")
  header_end = GGUFFile(tmp_path / "seed.gguf").data_offset
  offsets, dims, infos_at = field_positions(raw)
  rng = np.random.default_rng(1234)
  p = tmp_path / "mutant.gguf"
  opened = failed = loaded = 0
  old = signal.signal(signal.SIGALRM, _alarm)
  try:
    for i in range(N_MUTANTS):
      m = mutate(raw, i, rng, offsets, dims, infos_at, header_end)
      p.write_bytes(m)
      what = "opening it"
      try:
        tracemalloc.start()  # around the open only: tracing makes the kernel compiles of a data load crawl
        signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S)
        try: f = GGUFFile(p)
        finally:
          signal.setitimer(signal.ITIMER_REAL, 0)
          peak = tracemalloc.get_traced_memory()[1]
          tracemalloc.stop()
        assert peak < PEAK_LIMIT, f"mutant {i}: opening it allocated {peak} bytes at peak, for a {len(m)}-byte file"
        opened += 1
        if opened % 25 == 0:
          what = "loading its data (compiles included)"
          signal.setitimer(signal.ITIMER_REAL, LOAD_TIME_LIMIT_S)
          for name in f.tensors: f.tensor(name, "PYTHON").realize()
          signal.setitimer(signal.ITIMER_REAL, 0)
          loaded += 1
      except GGUFError: failed += 1
      except FileTimeout: pytest.fail(f"mutant {i} (kind {i % 7}): {what} took too long: {m[:64].hex()}")
      except AssertionError: raise
      except Exception as e: pytest.fail(f"mutant {i} (kind {i % 7}) raised {type(e).__name__}, not a GGUFError: {e}")
      finally: signal.setitimer(signal.ITIMER_REAL, 0)
  finally:
    signal.signal(signal.SIGALRM, old)
  assert opened + failed == N_MUTANTS and opened > 100 and failed > 1000 and loaded >= 4, (opened, failed, loaded)

"""Decoder-only transformers built from GGUF metadata alone: `llama` (SmolLM2), `gemma3` and `qwen2`.

Weights stay packed: each quantized weight is its file blocks realized once on the device (uint8, the file's size) and viewed
through the format's dequantize ops, so every matmul against it is one kernel that reads the packed blocks and dequantizes in
registers. The KV cache is preallocated to the context, one realized (2, kv_heads, context, head_dim) tensor per layer.

RoPE convention: llama.cpp's converter permutes llama's q/k rows so that rotated pairs are adjacent (GGML rope "normal",
pairs (2i, 2i+1)); gemma3 and qwen2 keep HF's layout and rotate halves (GGML "neox", pairs (i, i + d/2))."""
from __future__ import annotations
import functools
import math
from dataclasses import dataclass
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np

from tg_core import Tensor, dtypes
from tg_core.device import Device, LRUAllocator
from tg_core.engine.realize import buffer_of
from tg_core.dtype import DType
from tg_core.uop import Ops
from tg_core.uop.ops import UOp

from tg_gguf.llm.api import LLMError
from tg_gguf.quants import DOT, DOT_OFFSET, FACTORED, FACTORED_ORDER, q8_level_sums, quantize_q8_residual
from tg_gguf.reader import GGUFFile, PLAIN_DTYPES, dequantize_blocks

V = TypeVar("V")

# GGML rope style per architecture (llama.cpp's LLM_ARCH -> rope type table)
ROPE_INTERLEAVED = {"llama": True, "gemma3": False, "qwen2": False}

@dataclass(frozen=True)
class ModelConfig:
  arch: str
  n_layers: int
  dim: int
  hidden_dim: int
  n_heads: int
  n_kv_heads: int
  head_dim: int
  vocab_size: int
  context_length: int           # the model's trained context (metadata)
  norm_eps: float
  rope_base: float
  rope_dim: int
  rope_interleaved: bool
  rope_base_local: float        # gemma3's sliding-window layers
  sliding_window: int           # 0: none
  swa_pattern: int              # gemma3: every swa_pattern-th layer is global, the others slide
  attn_scale: float
  embed_scale: float            # gemma3 multiplies the embeddings by sqrt(dim)
  act: str                      # "silu" | "gelu_tanh"
  qk_norm: bool
  post_norms: bool              # gemma3: norms after attention and after the FFN too

  def is_sliding(self, layer: int) -> bool: return self.sliding_window > 0 and (layer + 1) % self.swa_pattern != 0
  def layer_rope_base(self, layer: int) -> float: return self.rope_base_local if self.is_sliding(layer) else self.rope_base

def config_from_metadata(md: dict[str, Any]) -> ModelConfig:
  arch = md.get("general.architecture")
  if arch not in ROPE_INTERLEAVED:
    raise LLMError(f"unsupported architecture {arch!r} (general.architecture); supported: {', '.join(sorted(ROPE_INTERLEAVED))}")
  def get(key: str, default: Any = None) -> Any:
    if (v := md.get(f"{arch}.{key}", default)) is None: raise LLMError(f"the GGUF metadata has no {arch}.{key}, which a {arch} model needs")
    return v
  dim, n_heads = int(get("embedding_length")), int(get("attention.head_count"))
  head_dim = int(get("attention.key_length", dim // n_heads))
  if int(get("attention.value_length", head_dim)) != head_dim: raise LLMError(f"{arch}: key_length != value_length is not supported")
  n_kv = get("attention.head_count_kv", n_heads)
  if isinstance(n_kv, list): raise LLMError(f"{arch}: a per-layer attention.head_count_kv is not supported")
  gemma = arch == "gemma3"
  return ModelConfig(
    arch=arch, n_layers=int(get("block_count")), dim=dim, hidden_dim=int(get("feed_forward_length")), n_heads=n_heads,
    n_kv_heads=int(n_kv), head_dim=head_dim, vocab_size=int(md.get(f"{arch}.vocab_size", len(md.get("tokenizer.ggml.tokens", [])))),
    context_length=int(get("context_length")), norm_eps=float(get("attention.layer_norm_rms_epsilon")),
    rope_base=float(get("rope.freq_base", 10000.0)), rope_dim=int(get("rope.dimension_count", head_dim)),
    rope_interleaved=ROPE_INTERLEAVED[arch], rope_base_local=10000.0 if gemma else float(get("rope.freq_base", 10000.0)),
    sliding_window=int(get("attention.sliding_window", 0)) if gemma else 0, swa_pattern=6 if gemma else 1,
    attn_scale=1.0 / math.sqrt(head_dim), embed_scale=math.sqrt(dim) if gemma else 1.0, act="gelu_tanh" if gemma else "silu",
    qk_norm=gemma, post_norms=gemma)

# elements that share one scale inside a k-quant super-block (256 elements): the blocked view splits the block into these groups,
# so a matvec's inner loop runs over one group and decodes its scale once (Q4_K 640x1024: 2.4x, Q6_K 640x2048: 1.7x)
SCALE_GROUP = {"Q2_K": 16, "Q3_K": 16, "Q4_K": 32, "Q5_K": 32, "Q6_K": 16}

# a quantized matrix is held with this many rows interleaved byte by byte (row_lanes_view): a matvec then runs that many rows in
# the vector lanes (tg_core's heuristic: _row_lanes_reduce), each load reads a byte of every lane's row, and each row's fp16 scales
# are decoded once per vector of rows where they were decoded by scalar ops row by row (AVX2: 8 fp32 lanes)
ROW_LANES = 8
# on a host with 16 fp32 lanes (AVX-512) rows are interleaved by 16 where the row count allows (row_lanes): the layer matvecs ran
# faster so, streamed from memory or not. Not a matrix of more than WIDE_MAX_ROWS rows (the vocabulary-sized output matrix, Q8_0
# in both models): its integer matvec ran slower at 16 rows a vector. Part of the cause was a reduce per block of a unit (each
# pass over a vector of rows skipped the other block's lines, twice the gap at 16 rows); with one reduce, 16 rows are faster
# from the L2 but still slower streamed from memory (the rest of the cause not found)
WIDE_ROW_LANES = 16
WIDE_MAX_ROWS = 16384

def row_lanes(device: str, rows: int) -> int:
  """How many rows a `rows`-row quantized matrix on `device` is interleaved by: WIDE_ROW_LANES where the device's vectors hold that
  many fp32 lanes, it divides the rows and they are at most WIDE_MAX_ROWS, else ROW_LANES; 0 where ROW_LANES doesn't divide the
  rows either (held as stored)."""
  if Device[device].renderer.caps.vector_width >= WIDE_ROW_LANES and rows % WIDE_ROW_LANES == 0 and rows <= WIDE_MAX_ROWS:
    return WIDE_ROW_LANES
  return ROW_LANES if rows % ROW_LANES == 0 else 0

# decode attention reads the KV cache in blocks of this many positions (Transformer.decode_attend): a constant inner axis the kernels
# vectorize; the cache's rows are rounded up to whole blocks
ATTN_BLOCK = 16

# formats whose rows are interleaved by words of this many bytes rather than by bytes: each int32 lane then holds 4 consecutive
# elements of one row, what an integer dot product step (Tensor.dp4a, quants.DOT) multiplies with 4 int8 elements of x
LANE_WORD = {"Q4_0": 4, "Q4_1": 4, "Q8_0": 4, "Q5_0": 4, "Q4_K": 4, "Q6_K": 4}  # (4 only: the lanes buffer is then int32)

def _repack_q8_0(rows: np.ndarray) -> np.ndarray:
  """(..., row_bytes) uint8 Q8_0 rows, row_bytes a multiple of 68 -> each pair of blocks [d0 q0 d1 q1] (34 bytes each) as
  [d0 d1 q0 + 128 q1 + 128]: the quants on the word grid and already unsigned (quants.dot_q8_0 reads them as they are)."""
  p = rows.reshape(*rows.shape[:-1], rows.shape[-1] // 68, 68)
  return np.concatenate([p[..., 0:2], p[..., 34:36], p[..., 2:34] ^ 0x80, p[..., 36:68] ^ 0x80], axis=-1).reshape(rows.shape)

def _unpack_q8_0(rows: Tensor) -> Tensor:
  """_repack_q8_0's inverse on (R, row_bytes) uint8 rows: the file's blocks, as a view."""
  p = rows.reshape(rows.shape[0], rows.shape[1] // 68, 68)
  return Tensor.cat(p[..., 0:2], p[..., 4:36] ^ 0x80, p[..., 2:4], p[..., 36:68] ^ 0x80, dim=-1).reshape(rows.shape)

# formats whose word-interleaved lanes buffer (LANE_WORD) holds its rows rearranged at load (numpy, on a row's bytes), with the
# view back to the file's bytes (row_lanes_view): Q8_0's quants are realigned and offset once, where its integer matvec did a
# funnel shift and an xor for every word of every row at every decode step
LANE_REPACK: dict[str, tuple[Callable[[np.ndarray], np.ndarray], Callable[[Tensor], Tensor]]] = {"Q8_0": (_repack_q8_0, _unpack_q8_0)}

def row_lanes_view(lanes: Tensor, block_bytes: int, fmt: str | None = None) -> Tensor:
  """The row-lanes layout: a matrix of `rows` rows of `row_bytes` bytes each, interleaved by L rows (row_lanes: ROW_LANES or
  WIDE_ROW_LANES), is held as a (rows / L, row_bytes, L) buffer, byte j of row g * L + l at [g, j, l] (Weights._read_interleaved
  fills it). Viewed back here as its (n_blocks, block_bytes) blocks in their own order: every consumer sees the file's blocks, a
  matvec reads a byte of L rows per load."""
  if lanes.dtype == dtypes.int32:  # word-interleaved (LANE_WORD): (rows / L, row_bytes / 4, L) int32 words, split
    groups, words, n = lanes.shape  # into their little-endian bytes by shifts (a view: the consumer's kernel does it)
    b = ((lanes.unsqueeze(-1) >> _lane_shifts(lanes.device)) & 255).cast(dtypes.uint8).permute(0, 2, 1, 3)
    if fmt in LANE_REPACK: b = LANE_REPACK[fmt][1](b.reshape(groups * n, words * 4))  # (fmt: its format's name, None: as read)
    return b.reshape(groups * n * words * 4 // block_bytes, block_bytes)
  groups, row_bytes, n = lanes.shape
  return lanes.permute(0, 2, 1).reshape(groups * n * row_bytes // block_bytes, block_bytes)

@functools.cache
def _lane_shifts(device: str) -> Tensor:
  # one buffer per device for every matrix's view: a buffer of its own each was a page of memory per matrix
  return Tensor([0, 8, 16, 24], dtype=dtypes.int32, device=device).realize()

def row_lane_words(lanes: Tensor, block_bytes: int) -> Tensor:
  """A word-interleaved row-lanes buffer (row_lanes_view) as its blocks' int32 words (n_blocks, block_bytes / 4) in the file's
  block order (a LANE_REPACK format's words as repacked). (The buffer is int32: a uint8 buffer's bitcast to int32 isn't rendered as a wide load.)"""
  groups, words, n = lanes.shape
  return lanes.permute(0, 2, 1).reshape(groups * n * words * 4 // block_bytes, block_bytes // 4)

# prefill_matmul's decoded weights are column panels this wide: the fp32 matmul's register tile on AVX2 (16 columns x 6 rows)
PANEL = 16

# matrices of a layer that read the same input: one matvec over their rows concatenated (when they share a quant format)
FUSED_GROUPS = (("attn_q", "attn_k", "attn_v"), ("ffn_gate", "ffn_up"))

@dataclass(frozen=True)
class Factored:
  """A quantized matrix as value = scale * q + min per group of elements: scale, min (rows, blocks, groups, 1) (min None: 0),
  q (rows, blocks, groups, group elems), views of the packed blocks (quants.FACTORED); `order`: q's elements are the block's
  reshaped to order[0] and permuted by order[1] (quants.FACTORED_ORDER), None: the block's order."""
  scale: Tensor
  q: Tensor
  min: Tensor | None
  order: tuple[tuple[int, ...], tuple[int, ...]] | None = None

@dataclass(frozen=True)
class Dot:
  """The 32-element blocks `index`, `index + unit`, ... of each row of a quantized matrix, for integer dot products (quants.DOT):
  scale d, min (rows, those blocks, 1) float32 (min None: 0), q: the blocks' 8 words (rows, those blocks, 1) of 4 bytes (word k:
  elements 4k..4k+3), scales: None, or two (rows, those blocks, 1) int32 integer scales of words 0..3 and 4..7; views of the
  word-interleaved packed blocks (LANE_WORD). `offset` o > 0: the words hold the unsigned bytes q + o (quants.DOT_OFFSET; uint32
  words where o is 128). A matrix is a tuple of them, one per 32-element block of a unit (`unit` of them)."""
  d: Tensor
  q: tuple[Tensor, ...]
  min: Tensor | None
  scales: tuple[Tensor, ...] | None
  unit: int
  index: int
  offset: int = 0

  def rows(self, start: int, stop: int) -> Dot:
    return Dot(self.d[start:stop], tuple(p[start:stop] for p in self.q), self.min[start:stop] if self.min is not None else None,
               tuple(s[start:stop] for s in self.scales) if self.scales is not None else None, self.unit, self.index, self.offset)

class LazyViews(Mapping[str, V]):
  """name -> a view of the realized packed blocks, built by `make` at each lookup. The views' UOp graphs (a dequantize is ~70
  UOps a matrix, ~0.5 KB each) then live only while a trace uses them: held for the whole run they were ~10k UOps, ~5 MB of
  SmolLM2's resident memory, for graphs only a TinyJit's first two calls read (hash-consing makes a rebuilt view the same UOps)."""
  def __init__(self, make: Callable[[str], V], names: list[str]):
    self._make, self._names = make, dict.fromkeys(names)
  def __getitem__(self, name: str) -> V:
    if name not in self._names: raise KeyError(name)
    return self._make(name)
  def __contains__(self, name: object) -> bool: return name in self._names
  def __iter__(self) -> Iterator[str]: return iter(self._names)
  def __len__(self) -> int: return len(self._names)

class Weights:
  """The model's tensors on `device`: plain ones (F32, F16) copied as they are, quantized ones as realized packed blocks viewed
  through their dequantize ops (the consumer's kernel decodes them). The quantized matrices of a FUSED_GROUPS group that share a
  format are realized as one buffer, their rows concatenated (`fused`): one kernel computes all their products. Each member's
  `packed`/`tensors`/`blocked` entry is then a view of that buffer (the bytes are held once). Only the packed blocks are held:
  every dequantized view (`tensors`, `blocked`, `fused`, `factored`, `fused_factored`) is a LazyViews, built when looked up."""
  def __init__(self, f: GGUFFile, device: str, progress: Any = None):
    self.f, self.device = f, device
    self.packed: dict[str, Tensor] = {}
    self.plain: dict[str, Tensor] = {}  # the F32/F16 tensors, as float32
    # the packed blocks of each fused group (keyed by its first member) and each lone quantized matrix: (blocks, format, rows, cols)
    self._mats: dict[str, tuple[Tensor, Any, int, int]] = {}
    self._rows: dict[str, tuple[str, int, int]] = {}  # quantized matrix -> (its key in _mats, first row there, rows)
    self.members: dict[str, tuple[str, ...]] = {}  # first member of a fused group -> the members, in row order
    self.group_key: dict[str, str] = {}  # a fused group's first member in row order -> its key in members
    self._lanes: dict[str, Tensor | None] = {}  # key in _mats -> its lanes buffer (Weights._read_interleaved; None: not interleaved)
    groups = self._groups()
    for i, name in enumerate(f.tensors):
      info = f.tensors[name]
      if info.format.dequantize in PLAIN_DTYPES:
        self.plain[name] = f.read_plain(name, device).cast(dtypes.float32).contiguous().realize()
      elif name in groups:
        members = groups[name]
        fmt, rows, cols = info.format, sum(f.tensors[n].shape[0] for n in members), info.shape[1]
        whole, self._lanes[name] = self._read_interleaved(members, rows)
        self._mats[name], self.members[name], self.group_key[members[0]] = (whole, fmt, rows, cols), members, name
        start, row = 0, 0
        for n in members:
          self.packed[n] = whole[start:start + f.tensors[n].n_blocks]
          self._rows[n] = (name, row, f.tensors[n].shape[0])
          start, row = start + f.tensors[n].n_blocks, row + f.tensors[n].shape[0]
      elif name not in self.packed:
        if len(info.shape) == 2:
          self.packed[name], self._lanes[name] = self._read_interleaved((name,), info.shape[0])
          self._mats[name], self._rows[name] = (self.packed[name], info.format, *info.shape), (name, 0, info.shape[0])
        else: self.packed[name] = f.read_raw(name, device)
      if progress is not None: progress(i + 1, len(f.tensors))
    # what loading freed (a copy a plain tensor's cast made) stays in the allocator's reuse cache: give that memory back
    if isinstance(al := Device[device].allocator, LRUAllocator): al.free_cache()
    factored = [n for n in self._rows if self._mats[self._rows[n][0]][1].name in FACTORED]
    self.tensors: LazyViews[Tensor] = LazyViews(self._tensor, list(f.tensors))
    # quantized matrices as (rows, blocks per row, scale groups, group elems): Transformer.linear
    self.blocked: LazyViews[Tensor] = LazyViews(self._blocked_rows, list(self._rows))
    # first member -> (members, blocked rows of all of them)
    self.fused: LazyViews[tuple[tuple[str, ...], Tensor]] = LazyViews(lambda n: (self.members[n], self._blocked(*self._mats[n])), list(self.members))
    # quantized matrices of a FACTORED format as (scale, q, min) views (Weights._factored): the decode step's matvec
    self.factored: LazyViews[Factored] = LazyViews(self._factored_rows, factored)
    # first member of a fused group -> the factored view of all its rows
    self.fused_factored: LazyViews[Factored] = LazyViews(lambda n: self._factored(*self._mats[n]), [n for n in self.members if n in factored])
    # quantized matrices of a DOT format, word-interleaved (LANE_WORD): the decode step's integer matvec (Transformer.dot_matvec)
    dot = [n for n in self._rows if self._dot(self._lanes[k := self._rows[n][0]], *self._mats[k][1:], views=False) is not None]
    self.dot: LazyViews[tuple[Dot, ...]] = LazyViews(self._dot_rows, dot)
    self.fused_dot: LazyViews[tuple[Dot, ...]] = LazyViews(lambda n: self._dot_of(n), [n for n in self.members if n in dot])

  def _tensor(self, name: str) -> Tensor:
    if (t := self.plain.get(name)) is not None: return t
    info = self.f.tensors[name]
    if name in self._rows: return self._blocked_rows(name).reshape(info.shape)
    return dequantize_blocks(self.packed[name], info.format).reshape(info.shape)

  def _blocked_rows(self, name: str) -> Tensor:
    key, row, r = self._rows[name]
    whole = self._blocked(*self._mats[key])
    return whole if r == whole.shape[0] else whole[row:row + r]

  def _factored_rows(self, name: str) -> Factored:
    key, row, r = self._rows[name]
    fz = self._factored(*self._mats[key])
    assert fz is not None
    if r == fz.q.shape[0]: return fz
    return Factored(fz.scale[row:row + r], fz.q[row:row + r], fz.min[row:row + r] if fz.min is not None else None, fz.order)

  def _dot_of(self, key: str) -> tuple[Dot, ...]:
    dz = self._dot(self._lanes[key], *self._mats[key][1:])
    assert dz is not None
    return dz

  def _dot_rows(self, name: str) -> tuple[Dot, ...]:
    key, row, r = self._rows[name]
    dz = self._dot_of(key)
    return dz if r == self._mats[key][2] else tuple(z.rows(row, row + r) for z in dz)

  def _groups(self) -> dict[str, tuple[str, ...]]:
    """The first tensor of each fusable group -> the names of the members that share its format and row length, in row order."""
    out: dict[str, tuple[str, ...]] = {}
    for layer in range(int(self.f.metadata.get(f"{self.f.metadata.get('general.architecture')}.block_count", 0))):
      for group in FUSED_GROUPS:
        names = [n for g in group if (n := f"blk.{layer}.{g}.weight") in self.f.tensors]
        if not names: continue
        first = self.f.tensors[names[0]]
        same = [n for n in names if self.f.tensors[n].format is first.format and len(self.f.tensors[n].shape) == 2 and
                self.f.tensors[n].shape[1] == first.shape[1]]
        if len(same) >= 2 and first.format.dequantize not in PLAIN_DTYPES: out[min(same, key=list(self.f.tensors).index)] = tuple(same)
    return out

  @staticmethod
  def _dot(lanes: Tensor | None, fmt: Any, rows: int, cols: int, views: bool = True) -> tuple[Dot, ...] | None:
    """The integer dot product views of a word-interleaved matrix of a DOT format (LANE_WORD), else None (`views` False: () for
    such a matrix, its views not built)."""
    if lanes is None or lanes.dtype != dtypes.int32 or fmt.name not in DOT: return None
    if not views: return ()
    unit, f = DOT[fmt.name]
    nu = cols // fmt.block_elems // unit
    blocks = f(row_lane_words(lanes, unit * fmt.block_bytes))
    def v(t: Tensor | None) -> Tensor | None: return None if t is None else t.reshape(rows, nu, 1)
    return tuple(Dot(v(d), tuple(v(p) for p in q), v(mn), tuple(v(s) for s in sc) if sc is not None else None, len(blocks), i,
                     DOT_OFFSET.get(fmt.name, 0))
                 for i, (d, q, mn, sc) in enumerate(blocks))

  @staticmethod
  def _interleave_words(blocks: np.ndarray, rows: int, device: str, fmt: str, lanes_by: int | None = None) -> Tensor:
    """The (n_blocks, block_bytes) uint8 blocks of a `rows`-row matrix as the word-interleaved lanes buffer (LANE_WORD), as
    _read_interleaved lays a model's out (tests, benches), interleaved by `lanes_by` rows (None: row_lanes); `fmt` its format's
    name (LANE_REPACK)."""
    rw, L = blocks.size // rows // 4, lanes_by or row_lanes(device, rows)
    if fmt in LANE_REPACK: blocks = LANE_REPACK[fmt][0](blocks.reshape(rows, rw * 4))
    lanes = blocks.reshape(rows // L, L, rw, 4).transpose(0, 2, 1, 3).copy().view(np.int32).reshape(rows // L, rw, L)
    return Tensor(lanes, device=device).realize()

  @staticmethod
  def _interleave(blocks: Tensor, rows: int, lanes_by: int | None = None) -> Tensor:
    """The (n_blocks, block_bytes) blocks of a `rows`-row matrix, already on the device, realized in the row-lanes layout
    (`row_lanes_view`, by `lanes_by` rows; None: row_lanes) by a kernel; a model's weights are read from the file straight into it
    (`_read_interleaved`)."""
    if not (L := lanes_by if lanes_by is not None else row_lanes(blocks.device, rows)) or rows % L: return blocks.contiguous().realize()
    n, width = blocks.shape
    return row_lanes_view(blocks.reshape(rows // L, L, n // rows * width).permute(0, 2, 1).contiguous().realize(), width)

  def _read_interleaved(self, names: tuple[str, ...], rows: int) -> tuple[Tensor, Tensor | None]:
    """The blocks of the quantized matrices `names` (one row length), their rows concatenated (`rows` in all), as one realized
    buffer in the row-lanes layout (`row_lanes_view`) read from the file straight into it: a staging slab of whole rows (~512 KB)
    at a time is read with os.preadv and scattered into the buffer by one strided numpy copy. No second copy of a weight ever
    exists (realizing the file's blocks, then interleaving them with a kernel, held each weight twice while it loaded). Returns the
    blocks view and the lanes buffer (None when not interleaved); a LANE_WORD format's rows are interleaved by words."""
    f, infos = self.f, [self.f.tensors[n] for n in names]
    fmt, row_bytes = infos[0].format, infos[0].nbytes // infos[0].shape[0]
    L = row_lanes(self.device, rows)
    if not L:  # not interleaved: the blocks as they are stored
      return (f.read_raw(names[0], self.device) if len(names) == 1 else Tensor.cat(*(f.read_raw(n, self.device) for n in names)).realize()), None
    word = LANE_WORD.get(fmt.name, 1) if row_bytes % LANE_WORD.get(fmt.name, 1) == 0 else 1
    shape, dt = ((rows // L, row_bytes // 4, L), dtypes.int32) if word > 1 else ((rows // L, row_bytes, L), dtypes.uint8)
    lanes = Tensor.empty(*shape, dtype=dt, device=self.device).realize()
    buf = buffer_of(lanes.uop.base)
    try: flat, bounce = np.frombuffer(buf.as_buffer(force_zero_copy=True), dtype=np.uint8), False
    except RuntimeError: flat, bounce = np.empty(buf.nbytes, dtype=np.uint8), True  # memory the host can't write: filled here, copied in
    dst = flat.reshape(rows // L, row_bytes // word, L, word)
    slab_rows = max(1, (1 << 19) // (row_bytes * L)) * L
    stage = np.empty(slab_rows * row_bytes, dtype=np.uint8)
    repack = LANE_REPACK[fmt.name][0] if word > 1 and fmt.name in LANE_REPACK else None
    filled, out_row = 0, 0
    def flush() -> None:
      nonlocal filled, out_row
      g, n = out_row // L, filled // L
      rows_in = stage[:filled * row_bytes].reshape(filled, row_bytes)
      if repack is not None: rows_in = repack(rows_in)
      dst[g:g + n] = rows_in.reshape(n, L, row_bytes // word, word).transpose(0, 2, 1, 3)
      out_row, filled = out_row + filled, 0
    for name, info in zip(names, infos):
      done = 0
      while done < info.shape[0]:
        n = min(slab_rows - filled, info.shape[0] - done)
        f.read_bytes(name, done * row_bytes, memoryview(stage)[filled * row_bytes:(filled + n) * row_bytes])
        filled, done = filled + n, done + n
        if filled == slab_rows: flush()
    if filled: flush()
    if bounce: buf.copyin(memoryview(flat))
    return row_lanes_view(lanes, fmt.block_bytes, fmt.name), lanes

  @staticmethod
  def _blocked(packed: Tensor, fmt: Any, rows: int, cols: int) -> Tensor:
    group = SCALE_GROUP.get(fmt.name, fmt.block_elems)
    return dequantize_blocks(packed, fmt).reshape(rows, cols // fmt.block_elems, fmt.block_elems // group, group)

  @staticmethod
  def _factored(packed: Tensor, fmt: Any, rows: int, cols: int) -> Factored | None:
    """The (scale, q, min) views of a matrix whose format has a factored decode (quants.FACTORED), else None."""
    if (f := FACTORED.get(fmt.name)) is None: return None
    scale, q, mn = f(packed)
    nb = cols // fmt.block_elems
    return Factored(scale.reshape(rows, nb, *scale.shape[1:]), q.reshape(rows, nb, *q.shape[1:]),
                    mn.reshape(rows, nb, *mn.shape[1:]) if mn is not None else None, FACTORED_ORDER.get(fmt.name))

  def __contains__(self, name: str) -> bool: return name in self.tensors
  def __getitem__(self, name: str) -> Tensor:
    if name not in self.tensors: raise LLMError(f"{self.f.name} has no tensor {name!r}, which this architecture needs")
    return self.tensors[name]

class EmbeddingRows:
  """Rows of a (vocab, dim) tensor read from the file with os.preadv when looked up. Not through a mapping of the file: a fault maps
  a whole page-cache folio (up to MBs on kernels with large folios) for one row, and the pages stay in the process's RSS."""
  def __init__(self, f: GGUFFile, name: str):
    self.f, self.name = f, name
    self.info = info = f.tensors[name]
    self.n_rows = info.shape[0]
    self.row_bytes = info.nbytes // self.n_rows
    self.row_blocks = self.row_bytes // info.format.block_bytes
  def rows(self, ids: list[int]) -> np.ndarray:
    """(len(ids), blocks per row, block bytes) uint8."""
    if bad := [i for i in ids if not 0 <= i < self.n_rows]: raise LLMError(f"token id {bad[0]} is outside the vocabulary (0..{self.n_rows - 1})")
    out = np.empty((len(ids), self.row_bytes), dtype=np.uint8)
    for k, i in enumerate(ids): self.f.read_bytes(self.name, i * self.row_bytes, memoryview(out[k]))
    return out.reshape(len(ids), self.row_blocks, self.info.format.block_bytes)

def computed(x: Tensor) -> Tensor:
  """x computed into a buffer of its own, unless it is one or a view of one (a second CONTIGUOUS would be a copy kernel): a
  decode matvec's input, a realized product. Fused into the matvec's loads a
  norm is redone for each vector of rows (Gemma 3's gate+up, whose input is two norms and the residual add: 1376 -> 949 us a layer
  on one core, for a 15 us kernel)."""
  return x if x.uop.base.op in (Ops.CONTIGUOUS, Ops.BUFFER) else x.contiguous()

def zeroed(shape: tuple[int, ...], dtype: DType, device: str) -> Tensor:
  """A realized tensor of zeros whose pages become resident only when written: host memory fresh from the OS reads as zeros
  already (untouched anonymous pages map the shared zero page), so the zero-filling kernel runs only where the memory isn't
  host-visible or isn't all zeros (a reused buffer). The KV cache: filled by a kernel, every position of the context was resident
  from the start, where a run writes only the positions it reaches (on a host with transparent huge pages, a write into one
  of the 2 MiB pages the allocator advises for a large buffer makes all of that page resident: tg_cpu_x86.allocator)."""
  t = Tensor.empty(*shape, dtype=dtype, device=device).realize()
  try: fresh = not np.frombuffer(buffer_of(t.uop.base).as_buffer(force_zero_copy=True), dtype=np.uint8).any()
  except RuntimeError: fresh = False  # memory the host can't read
  return t if fresh else t.assign(Tensor.zeros(*shape, dtype=dtype, device=device)).realize()

def rms_norm(x: Tensor, w: Tensor, eps: float) -> Tensor:
  return x * (x.square().mean(-1, keepdim=True) + eps).rsqrt() * w

def rope_tables(cfg: ModelConfig, base: float, n_pos: int, device: str) -> tuple[Tensor, Tensor]:
  """cos, sin of shape (n_pos, rope_dim/2): position p, frequency i = base**(-2i/rope_dim) (float32 as HF computes it)."""
  inv = (1.0 / (np.float32(base) ** (np.arange(0, cfg.rope_dim, 2, dtype=np.float32) / np.float32(cfg.rope_dim)))).astype(np.float32)
  ang = np.outer(np.arange(n_pos, dtype=np.float32), inv).astype(np.float32)
  return Tensor(np.cos(ang), device=device).realize(), Tensor(np.sin(ang), device=device).realize()

def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool) -> Tensor:
  """x: (B, H, T, D); cos/sin: (T, D/2) (the full head is rotated: rope_dim == head_dim)."""
  B, H, T, D = x.shape
  if interleaved:
    xr = x.reshape(B, H, T, D // 2, 2)
    x0, x1 = xr[..., 0], xr[..., 1]
    return (x0 * cos - x1 * sin).unsqueeze(-1).cat((x0 * sin + x1 * cos).unsqueeze(-1), dim=-1).reshape(B, H, T, D)
  x0, x1 = x[..., :D // 2], x[..., D // 2:]
  return (x0 * cos - x1 * sin).cat(x0 * sin + x1 * cos, dim=-1)

class Transformer:
  """forward(tokens embedded, start_pos) -> logits of one position. `max_context` sizes the KV cache and the RoPE tables; `kv_dtype`
  is the cache's storage (float16 as llama.cpp's default: half the memory; the attention computes in float32). `int8_dot`: the
  decode step's matvecs over a DOT format (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K) quantize x per block in two int8
  levels (dot_matvec) and take integer dot products, as llama.cpp does with one
  (False: float x, the products exact to float32 rounding, what a reference comparison at float precision needs).
  `int8_prefill`: a prefill's matmuls over a DOT format take integer dot products too (dot_matmul: x in two int8 levels, where
  the renderer has native DP4A): faster per matrix than the float32 matmul on decoded weights, its logits about as close to
  transformers' as the float32 prefill's (bench/llm_prefill_accuracy.py; the greedy tests pass with it). Off by default: a
  process's first prompt lowers its kernels (many DP4As a block, unrolled over the tile) in Python for several times as
  long as the float32 ones."""
  def __init__(self, cfg: ModelConfig, weights: Weights, max_context: int, kv_dtype: DType = dtypes.float16, int8_dot: bool = True,
               int8_prefill: bool = False):
    if cfg.rope_dim != cfg.head_dim:
      raise LLMError(f"{cfg.arch}: partial RoPE (rope.dimension_count {cfg.rope_dim} < head dim {cfg.head_dim}) is not supported")
    self.cfg, self.w, self.max_context, self.int8_dot, self.int8_prefill = cfg, weights, max_context, int8_dot, int8_prefill
    dev = weights.device
    self.device = dev
    bases = sorted({cfg.layer_rope_base(i) for i in range(cfg.n_layers)})
    self.rope = {b: rope_tables(cfg, b, max_context, dev) for b in bases}
    # the cache's rows (and the positions) rounded up to whole ATTN_BLOCKs: decode attends over the blocks up to start_pos
    self.cache_rows = rows = -(-max_context // ATTN_BLOCK) * ATTN_BLOCK
    self.caches = [zeroed((2, cfg.n_kv_heads, rows, cfg.head_dim), kv_dtype, dev) for _ in range(cfg.n_layers)]
    self.positions = Tensor.arange(rows, device=dev).realize()
    self._aranges: dict[int, Tensor] = {}  # T -> arange(T): prefill_attend's chunk positions, one buffer for every layer
    self.output_name = "output.weight" if "output.weight" in weights else "token_embd.weight"  # tied embeddings
    self.embd = EmbeddingRows(weights.f, "token_embd.weight")
    self.bias = {n: weights[n] for n in weights.tensors if n.endswith(".bias")}
    # prefill_matmul's decoded weight: one float32 buffer, as large as the largest layer matrix, reused by every layer (a buffer per
    # call would be one per matrix in the TinyJit capture: +650 MB for SmolLM2). A fused group larger than it is decoded and
    # multiplied in row pieces that fit (SmolLM2's gate+up, 3072x576: a 7.1 MB scratch -> 3.5, ffn_down's size)
    shapes = [weights.f.tensors[n].shape for n in weights.blocked if n.startswith("blk.")]
    self.scratch = Tensor.empty(max((max(r * c, PANEL * c) for r, c in shapes), default=1), device=dev).contiguous().realize()

  def embed_rows(self, ids: list[int]) -> Tensor:
    """The packed embedding rows of `ids` (gathered on the host from the mapped file), realized on the device."""
    return Tensor(self.embd.rows(ids), device=self.device).realize()

  def embed(self, rows: Tensor) -> Tensor:
    """(T, blocks per row, block bytes) packed rows -> (1, T, dim) embeddings, dequantized in the consumer's kernel."""
    T = rows.shape[0]
    x = dequantize_blocks(rows.reshape(-1, rows.shape[-1]), self.embd.info.format).reshape(1, T, self.cfg.dim)
    return x * self.cfg.embed_scale if self.cfg.embed_scale != 1.0 else x

  def linear(self, x: Tensor, name: str, xq: tuple[Tensor, Tensor, Tensor | None] | None = None) -> Tensor:
    """x @ W.T (+ bias). A quantized W is one reduce over (blocks, scale groups, group elems): the kernel's inner loop runs over
    the elements of one scale group, so their scales (fp16 bits decoded with integer ops) are loop-invariant there and hoisted, not
    redone per element (17x faster on a Q4_1 matvec than one flat reduce), and the sums over groups and blocks stay in the same
    kernel (half the time of a second kernel for them, Q4_1 1536x576)."""
    dz = self.w.dot.get(name)
    if self.int8_dot and dz is not None and x.shape[-2] == 1: y = self.dot_matvec(x, dz, xq)
    elif dz is not None and self._dot_prefill(x, dz): y = self.dot_matmul(x, dz)
    elif (wb := self.w.blocked.get(name)) is not None:
      y = self.matvec(computed(x), wb, self.w.factored.get(name)) if x.shape[-2] == 1 else self.prefill_matmul(x, wb)
    else: y = x @ self.w[name].T
    return y + self.bias[b] if (b := name.replace(".weight", ".bias")) in self.bias else y

  def prefill_matmul(self, x: Tensor, wb: Tensor) -> Tensor:
    """x (..., T, K) @ W.T for T > 1 tokens, W (N, K) a blocked quantized view (Weights.blocked). Dequantizing inside the matmul
    redoes the decode of every weight element for each of the T rows (SmolLM2 Q4_1 3072x576, T=32: 10 ms on one Zen 3 core); here
    W is decoded once per call into the float32 `scratch` buffer (one bandwidth-bound kernel), then the plain fp32 matmul runs on
    it. W is decoded as (N / PANEL, K, PANEL): column panels as wide as the matmul's register tile, each contiguous over K, viewed
    as the (K, N) operand. The matmul reads its B operand along the output axis it tiles (decoded (K, N) rather than (N, K):
    32x1536x576, 21 -> 46 GFLOPS), and a panel's K rows are then adjacent cache lines in a few pages: in a plain (K, N) row-major
    decode they are N floats apart, 576 pages a panel (TLB misses) and, for N a multiple of 1024, all in one L1 set (one Zen 3
    core, CPU time, fp32 matmul alone: 128x576x3072 37.5 -> 46.0 GFLOPS, 128x640x4096 42.5 -> 53.0, 128x1536x576 46.7 -> 50.8).
    The decode is realized before the matmul is built, and every caller realizes the product before the next decode overwrites
    the buffer. x is made contiguous first: a norm fused into the matmul's loads is redone for every output column. W larger than
    the scratch (a fused group) is done in row pieces that fit it, each product realized before the next piece's decode."""
    N, K = wb.shape[0], wb.numel() // wb.shape[0]
    x = x if x.uop.op is Ops.CONTIGUOUS else x.contiguous()  # (a second CONTIGUOUS would be a copy kernel)
    if N * K <= self.scratch.numel(): return x @ self._decoded(wb)
    x, step = x.realize(), self.scratch.numel() // K // PANEL * PANEL  # x realized: read by every piece, computed once
    return Tensor.cat(*[(x @ self._decoded(wb[r:r + step])).realize() for r in range(0, N, step)], dim=-1)

  def _decoded(self, wb: Tensor) -> Tensor:
    """W (N, K), a blocked quantized view, decoded into the scratch (realized) -> its (K, N) operand view (prefill_matmul)."""
    N, K = wb.shape[0], wb.numel() // wb.shape[0]
    if N % PANEL == 0:
      # written through the blocked shape (panel, block, scale group, element, panel column): the decode kernel's innermost loop
      # runs over a scale group's elements, so tg emits each block's scales (fp16 decoded with integer ops) once, outside it; a
      # flat (N * K) target was one loop that decoded both scales again for every 8 outputs (~75 instructions per 8 floats)
      self.scratch[:N * K].reshape(N // PANEL, *wb.shape[1:], PANEL).assign(wb.reshape(N // PANEL, PANEL, *wb.shape[1:]).permute(0, 2, 3, 4, 1)).realize()
      return self.scratch[:N * K].reshape(N // PANEL, K, PANEL).permute(1, 0, 2).reshape(K, N)
    self.scratch[:N * K].assign(wb.reshape(N, K).T.reshape(N * K)).realize()
    return self.scratch[:N * K].reshape(K, N)

  @staticmethod
  def _matvec(x: Tensor, wb: Tensor) -> Tensor:
    return (x.reshape(*x.shape[:-1], 1, *wb.shape[1:]) * wb).sum((-3, -2, -1))

  @staticmethod
  def matvec(x: Tensor, wb: Tensor, fz: Factored | None) -> Tensor:
    """x @ W.T for one token. With W's factored view: sum over groups of scale * (sum of q * x) + min * (sum of x), one kernel whose
    inner loop over a group's elements is a multiply-add per element (the dequantized form adds a multiply and an add); the group
    sums of x are a small kernel of their own. Otherwise the blocked dequantized view (_matvec)."""
    if fz is None: return Transformer._matvec(x, wb)
    lead = x.shape[:-1]
    if fz.order is not None:  # x's elements in q's order
      x = x.reshape(*lead, fz.q.shape[1], *fz.order[0]).permute(*range(len(lead) + 1), *(len(lead) + 1 + p for p in fz.order[1]))
    xr = x.reshape(*lead, 1, *fz.q.shape[1:])
    dots = (xr * fz.q).sum(-1, keepdim=True) * fz.scale
    if fz.min is not None: dots = dots + xr.sum(-1, keepdim=True) * fz.min
    return dots.sum((-3, -2, -1))

  @staticmethod
  def _dot_words(z: Dot, levels: tuple[Tensor, Tensor], level_sums: Tensor | None, lead: int, fold: bool) -> Tensor:
    """A Dot's block sums (float32) against x's two int8 levels (each (..., 8) words of the block z.index, `lead` axes before z's
    (rows, blocks, 1)): a DP4A chain a level over the block's words (per part of 4 words where part scales apply), each weight word
    unpacked once for both levels, combined as 127 * hi + lo, less offset * x's sums of the part (level_sums (..., 4): hi's sums
    of elements 0..15 and 16..31, then lo's), then scaled by the part scales. Exact: int32, or (no offset) float32 sums within
    2**24. `fold`: the levels combined in int32, which codegen turns into one chain (the second level's accumulator starts at
    127 * the first's: one register an output, what a matmul tile needs); else two independent chains (a matvec: the
    dependency chain, not the registers, is what limits it), each started at its offset term, or summed in float32."""
    def w(t: Tensor) -> Tensor: return t.reshape(*([1] * lead), *t.shape)
    def xs(level: int, lo_w: int, hi_w: int) -> Tensor:  # a level's sums of x over words lo_w..hi_w
      assert level_sums is not None, "a Dot with an offset needs x's level sums"
      v = [level_sums[..., 2 * level + p:2 * level + p + 1] for p in range(lo_w // 4, hi_w // 4)]
      return v[0] + v[1] if len(v) == 2 else v[0]
    # one chain over the 8 words where no part scale splits them
    spans = ((0, 8),) if z.scales is None else ((0, 4), (4, 8))
    parts = []
    for lo_w, hi_w in spans:
      acc: list[Tensor | int] = [0, 0] if fold or not z.offset else [xs(v, lo_w, hi_w) * -z.offset for v in (0, 1)]
      for k in range(lo_w, hi_w):  # x's bytes are in -127..127: b_in_range
        acc = [w(z.q[k]).dp4a(xl[..., k:k + 1], acc=a, b_in_range=True) for xl, a in zip(levels, acc)]
      hi, lo = acc
      assert isinstance(hi, Tensor) and isinstance(lo, Tensor)
      if fold and z.offset: parts.append(hi * 127 + lo - (xs(0, lo_w, hi_w) * 127 + xs(1, lo_w, hi_w)) * z.offset)
      elif fold or z.offset: parts.append(hi * 127 + lo)  # (offset: each chain started at its own term, so none folds)
      else: parts.append(hi.cast(dtypes.float32) * 127.0 + lo.cast(dtypes.float32))  # |127 q hi| * 32 < 2**24 for q <= 31
    if z.scales is not None: return (parts[0] * w(z.scales[0]) + parts[1] * w(z.scales[1])).cast(dtypes.float32)
    return parts[0].cast(dtypes.float32)

  @staticmethod
  def quantize_x(x: Tensor, offsets: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """x (T, K) quantized per 32-element block in two int8 levels (quantize_q8_residual, its own small kernels): (q (T, K/32, 16)
    int32 words, stats (T, K/32, 2): d and the sum of x, and with `offsets` each level's sums per 16 elements (T, K/32, 4) int32
    (q8_level_sums), else None). Shared by the matvecs that read the same x (Transformer.linears)."""
    q, stats = quantize_q8_residual(x)
    return q, stats, q8_level_sums(q).contiguous() if offsets else None

  @staticmethod
  def _x_levels(x: Tensor, dz: tuple[Dot, ...], xq: tuple[Tensor, Tensor, Tensor | None] | None = None, scaled: bool = True) \
      -> tuple[tuple[Tensor, Tensor], Tensor, Tensor, Tensor | None]:
    """x (T, K) quantized per 32-element block in two int8 levels (quantize_x, or `xq`: its result for this x) for a matrix of
    Dot views `dz`: ((hi, lo) (T, units, unit, 8) int32 words, d / 127 and the sums of x (T, units, unit, 1), and, where a Dot
    has an offset, each level's sums per 16 elements (T, units, unit, 4) int32 (q8_level_sums), else None). `scaled` False: d
    itself, not d / 127."""
    nu, unit, offsets = dz[0].d.shape[1], dz[0].unit, any(z.offset for z in dz)
    q, stats, sums = xq if xq is not None else Transformer.quantize_x(x, offsets)
    T = x.shape[0]
    if offsets:
      assert sums is not None, "x's quantization for a Dot with an offset needs the level sums"
      sums = sums.reshape(T, nu, unit, 4)
    else: sums = None  # (a shared quantization's, made for another matrix that has an offset)
    q, stats = q.reshape(T, nu, unit, 16), stats.reshape(T, nu, unit, 2)
    return (q[..., 0:8], q[..., 8:16]), stats[..., 0:1] * (1 / 127) if scaled else stats[..., 0:1], stats[..., 1:2], sums

  @staticmethod
  def dot_matvec(x: Tensor, dz: tuple[Dot, ...], xq: tuple[Tensor, Tensor, Tensor | None] | None = None) -> Tensor:
    """x @ W.T for one token with integer dot products: x quantized per 32-element block in two int8 levels, x = d * (hi + lo / 127)
    (_x_levels), then per block of each row two int32 sums of byte products (Tensor.dp4a, 4 a step; each weight word unpacked
    once for both), combined as 127 * hi + lo and scaled once by d_w * d_x / 127, plus the block's min times the sum of x. (One
    level, llama.cpp's q8 x, rounds each element to 1/254 of its block's largest: SmolLM2's residual stream has ~1000x outlier
    channels, so a block holding one lost most of its other elements, and the decode logits moved ~1 off the float path's.)"""
    rows = dz[0].d.shape[0]
    (hi, lo), dx, sx, offs = Transformer._x_levels(computed(x).reshape(1, x.shape[-1]), dz, xq)
    out = []
    for z in dz:  # each 32-element block of a unit, summed elementwise: one reduce over the units
      isum = Transformer._dot_words(z, (hi[0, :, z.index], lo[0, :, z.index]), offs[0, :, z.index] if offs is not None else None, 0, False)
      y = isum * (z.d * dx[0, :, z.index])
      out.append(y + z.min * sx[0, :, z.index] if z.min is not None else y)
    # one reduce over the units for all the blocks of a unit: a reduce per block read each vector of rows' bytes in as many passes,
    # each skipping the other blocks' lines (the prefetchers lost the stream: 16 interleaved rows ran at half the speed of 8)
    return functools.reduce(lambda a, b: a + b, out).sum((-2, -1)).reshape(*x.shape[:-1], rows)

  @staticmethod
  def dot_matmul(x: Tensor, dz: tuple[Dot, ...]) -> Tensor:
    """x (..., T, K) @ W.T for T > 1 tokens with integer dot products: x quantized per 32-element block in two int8 levels, as
    dot_matvec, then one kernel of two int32 sums of byte products per block of each (token, row), combined as 127 * hi + lo
    (exact in int32) and scaled once by d_w * d_x / 127, plus the block's min times the sum of x, summed over the blocks. It
    reads W's packed word-interleaved blocks (no decoded copy): the heuristic tiles it as a matmul, a vector of rows (the
    interleaved lanes) by several tokens, so each weight word is unpacked once for the tile's tokens and each x word broadcast
    once for its rows. (One level, as llama.cpp's q8 x, had twice the speed but moved SmolLM2's prefill logits ~2% off
    transformers'.)"""
    rows = dz[0].d.shape[0]
    lead, K = x.shape[:-1], x.shape[-1]
    T = math.prod(lead)
    # x computed once: a norm fused into the quantization's kernels is redone for each of their outputs
    (hi, lo), dx, sx, offs = Transformer._x_levels(computed(x).reshape(T, K), dz, scaled=False)
    out = []
    for z in dz:  # each block of a unit: its own reduce over the units, all in one kernel
      def tok(t: Tensor, i: int = z.index) -> Tensor: return t[:, :, i].unsqueeze(1)  # (T, 1, units, ...): broadcast over the rows
      isum = Transformer._dot_words(z, (tok(hi), tok(lo)), tok(offs) if offs is not None else None, 1, True)
      # the 1 / 127 taken with d_w, once per (row vector, block) of the tile, not per token: d_x is then read as it is stored
      y = isum * ((z.d * (1 / 127)).reshape(1, *z.d.shape) * tok(dx))
      out.append((y + z.min.reshape(1, *z.min.shape) * tok(sx) if z.min is not None else y).sum((-2, -1)))
    # realized as a whole: left to a consumer that reduces over its rows (Gemma 3's post-attention norm) the blocks' reduces
    # were a kernel each (8 for Q4_K, 16 for Q6_K, each reading x's words and writing all the outputs) and a ninth adding them
    return functools.reduce(lambda a, b: a + b, out).reshape(*lead, rows).contiguous()

  def _dot_prefill(self, x: Tensor, dz: tuple[Dot, ...] | None) -> bool:
    """Does the T > 1 product of x with a matrix of integer dot views `dz` take dot_matmul? Where int8_prefill is on and the
    renderer renders DP4A natively (caps.native_dp4a): lowered to byte shifts and multiplies it is slower than the float32 matmul
    on the decoded weights (prefill_matmul)."""
    return self.int8_prefill and dz is not None and x.shape[-2] > 1 and Device[self.device].renderer.caps.native_dp4a

  def linears(self, x: Tensor, names: tuple[str, ...]) -> list[Tensor]:
    """[linear(x, n) for n in names], realized: the members of a fused group (Weights.fused) come from one kernel."""
    out: list[Tensor] = []
    x = computed(x).realize()  # realized: computed once for all of them
    # x's two-level quantization once for the integer-dot matvecs that read it (each quantizing it alone were 2-3 small
    # kernels apiece: a decode step's launches, not their work, dominate those)
    xq = None
    if self.int8_dot and x.shape[-2] == 1:  # (a prefill builds no dot views here)
      dots = [dz for n in names if (dz := self.w.fused_dot.get(n) or self.w.dot.get(n)) is not None]
      if len(dots) > 1:
        xq = self.quantize_x(x.reshape(1, x.shape[-1]), any(z.offset for dz in dots for z in dz))
        xq[0].realize(*(t for t in xq[1:] if t is not None))
    while len(out) < len(names):
      name = names[len(out)]
      # a group is keyed by its member first in the file (Weights.members), which need not be the first in row order (SmolLM2's
      # attn_k precedes attn_q): a prefill looks it up by its first member in row order. (The decode step keeps its lookup.)
      key = self.w.group_key.get(name, name) if x.shape[-2] > 1 else name
      if (fz := self.w.fused.get(key)) is not None and fz[0] == names[len(out):len(out) + len(fz[0])]:
        # realized here: its parts' consumers are scheduled apart
        dz = self.w.fused_dot.get(key)
        y = self.dot_matvec(x, dz, xq) if self.int8_dot and x.shape[-2] == 1 and dz is not None else \
          self.matvec(x, fz[1], self.w.fused_factored.get(key)) if x.shape[-2] == 1 else \
          self.dot_matmul(x, dz) if dz is not None and self._dot_prefill(x, dz) else self.prefill_matmul(x, fz[1])
        y = computed(y).realize()
        start = 0
        for n in fz[0]:
          rows = self.w.f.tensors[n].shape[0]
          part = y[..., start:start + rows]
          out.append(part + self.bias[b] if (b := n.replace(".weight", ".bias")) in self.bias else part)
          start += rows
      else: out.append(computed(self.linear(x, name, xq)).realize())
    return out

  def attention(self, i: int, x: Tensor, start_pos: int | UOp, T: int) -> Tensor:
    cfg, p = self.cfg, f"blk.{i}."
    B, H, KV, D = 1, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    q, k, v = self.linears(x, (p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"))
    q, k, v = q.reshape(B, T, H, D).transpose(1, 2), k.reshape(B, T, KV, D).transpose(1, 2), v.reshape(B, T, KV, D).transpose(1, 2)
    if cfg.qk_norm and T == 1:
      # decode: the heads' norm factors realized first, one small kernel over q's and k's heads (unrealized, the cache write and
      # q's RoPE each computed them again). Fused into the RoPE kernels (q's, the cache write's) each factor was recomputed for
      # every element of its head (Gemma 3 270M, thread clock: 73 + 132 us a layer, vs 16 + 16 and 2 x 17 for the factors)
      inv = (q.cat(k, dim=1).square().mean(-1, keepdim=True) + cfg.norm_eps).rsqrt().contiguous().realize()
      q, k = q * inv[:, :H] * self.w[p + "attn_q_norm.weight"], k * inv[:, H:] * self.w[p + "attn_k_norm.weight"]
    elif cfg.qk_norm:
      q = rms_norm(q, self.w[p + "attn_q_norm.weight"], cfg.norm_eps)
      k = rms_norm(k, self.w[p + "attn_k_norm.weight"], cfg.norm_eps)
      # prefill: the norms realized, else the rotation's kernel recomputes a row's norm for each element it writes (Gemma 3 270M,
      # 128 tokens: 0.44 s a layer for q, 68% of the chunk)
      if T > 1: q, k = q.contiguous(), k.contiguous()
    cos, sin = self.rope[cfg.layer_rope_base(i)]
    cos, sin = cos[start_pos:start_pos + T], sin[start_pos:start_pos + T]
    # q realized: else the scores kernel recomputes its norm and rotation for every key position
    q, k = apply_rope(q, cos, sin, cfg.rope_interleaved).contiguous(), apply_rope(k, cos, sin, cfg.rope_interleaved)
    cache = self.caches[i]
    if T > 1: k = k.contiguous()  # prefill: read by the cache write and by the chunk's own scores (prefill_attend)
    cache[:, :, start_pos:start_pos + T].assign(k.reshape(KV, T, D).unsqueeze(0).cat(v.reshape(KV, T, D).unsqueeze(0))).realize()
    if T > 1: return self.linear(self.prefill_attend(i, q, k, v, start_pos), p + "attn_output.weight")
    return self.linear(self.decode_attend(i, q, start_pos).reshape(B, T, H * D), p + "attn_output.weight")

  def decode_attend(self, i: int, q: Tensor, start_pos: int | UOp) -> Tensor:
    """One position's attention: q (1, H, 1, D) against the cache's positions 0..start_pos -> (H, D). The cache is read in
    whole ATTN_BLOCKs, (blocks, ATTN_BLOCK) with the block count symbolic: the kernels' inner position axis is then a constant
    the heuristic vectorizes (a symbolic axis can't be upcast) and positions past start_pos in the last block are masked. Four
    kernels: the raw scores q.k; exp(scores - their max) (the mask and the max fuse into it, each exp computed once); the exps'
    row sums; the weighted sum of the values over the row sum, the normalization applied to the D outputs, not the S
    probabilities. Each query head reads its kv head through a broadcast view, so every kernel's outer loop runs over all H
    heads and splits evenly across cores (over the kv heads it was 2:1 for SmolLM2's 3, one core for Gemma 3's 1)."""
    cfg = self.cfg
    H, KV, D, BLK = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, ATTN_BLOCK
    G, NB = H // KV, start_pos // BLK + 1
    blocks = self.caches[i].reshape(2, KV, self.cache_rows // BLK, BLK, D)[:, :, :NB]
    nb = blocks.shape[2]
    keys, vals = (blocks[j].unsqueeze(1).expand(KV, G, nb, BLK, D).reshape(H, nb, BLK, D) for j in (0, 1))
    kpos = self.positions.reshape(self.cache_rows // BLK, BLK)[:NB]
    ok = kpos <= start_pos
    if cfg.is_sliding(i): ok = ok & (kpos > start_pos - cfg.sliding_window)
    # the raw products realized, masked and scaled by their consumer: masked inside the reduce's kernel they were slower
    raw = (q.reshape(H, 1, 1, D) * keys).sum(-1).contiguous()                  # (H, nb, BLK)
    scores = ok.where(raw * cfg.attn_scale, float("-inf"))
    e = (scores - scores.max((-2, -1), keepdim=True)).exp().contiguous()
    # the row sums in a kernel of their own: fused into the weighted sum they were redone for each of its D outputs (SmolLM2 at
    # start_pos 1000: 222 us a layer on one core, vs 120 + 18); the result realized, else the division is left to the output
    # projection's loads
    return ((e.unsqueeze(-1) * vals).sum((-3, -2)) / e.sum((-2, -1)).unsqueeze(-1).contiguous()).contiguous()

  def _arange(self, n: int) -> Tensor:
    if (t := self._aranges.get(n)) is None: t = self._aranges[n] = Tensor.arange(n, device=self.device).realize()
    return t

  def prefill_attend(self, i: int, q: Tensor, k: Tensor, v: Tensor, start_pos: int | UOp) -> Tensor:
    """Attention of a chunk of T > 1 positions: q (1, H, T, D), the chunk's own keys and values k, v (1, KV, T, D), and the
    cache's positions 0..start_pos-1 -> (1, T, H * D). The keys split in two: the chunk's T (every shape static: its kernels
    are tiled as plain matmuls, and its causal mask is a constant) and the cache's start_pos before it (a symbolic axis, empty for
    a prompt's first chunk). One softmax over both: the row max m of the two parts, exp(scores - m) of each (each exp computed
    once), then (e_chunk @ v + e_past @ v_past) / (row sums), the normalization applied to the D outputs of a row rather than
    to its probabilities. Over one (KV, start_pos + T) axis (the cache's), SmolLM2's 128-token chunk spent ~0.8 s of 3.3 in
    attention: its symbolic key axis is not tiled. The products keep their (KV, G*T, .) layout: written straight into (T, H*D)
    order their output axis mixes heads and head elements, which the matmul heuristic does not tile (SmolLM2, T=128: 10 ms,
    2 GFLOPS)."""
    cfg = self.cfg
    B, H, KV, D, T = 1, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, q.shape[2]
    G = H // KV
    qg = q.reshape(B, KV, G * T, D)
    # the chunk's keys: a causal mask (and the sliding window, for chunks longer than it) on static positions
    t = self._arange(T)
    ok_c = t.reshape(1, T) <= t.reshape(T, 1)
    if cfg.is_sliding(i) and T > cfg.sliding_window: ok_c = ok_c & (t.reshape(1, T) > t.reshape(T, 1) - cfg.sliding_window)
    # the raw products realized in the matmul's own layout (masking them in its store slows it 3x); the mask is redone by
    # the two consumers of each score, the max and the exp. The keys transposed into a (KV, D, T) copy first: the matmul reads
    # its B operand along the output axis it tiles, which in k's (T, D) layout is D floats apart (SmolLM2, T=128, CPU time a
    # layer: 0.60 -> 0.38 + 0.06 ms for the copy; Gemma 3: 1.49 -> 1.08 + 0.07)
    raw_c = (qg @ k.transpose(-1, -2).contiguous()).contiguous().reshape(B, KV, G, T, T)
    s_c = ok_c.where(raw_c * cfg.attn_scale, float("-inf"))
    # the cache's keys before the chunk: all of them precede every query; the sliding window masks the old ones
    cache = self.caches[i]
    keys, vals = cache[0, :, :start_pos].unsqueeze(0), cache[1, :, :start_pos].unsqueeze(0)  # (1, KV, start_pos, D)
    raw_p = (qg @ keys.transpose(-1, -2)).contiguous().reshape(B, KV, G, T, start_pos)
    s_p = raw_p * cfg.attn_scale
    if cfg.is_sliding(i):
      kpos = self.positions[:start_pos].reshape(1, 1, 1, 1, start_pos)
      qpos = self.positions[start_pos:start_pos + T].reshape(1, 1, 1, T, 1)
      s_p = (kpos > qpos - cfg.sliding_window).where(s_p, float("-inf"))
    # the row max: the chunk's part is finite (a query sees its own key), so exp(-inf - m) is 0 where the past is empty or masked
    # the chunk's row max in a kernel of its own: beside the past's symbolic axis it took the tiny kernel's (no) tiles, a scalar
    # loop an element; alone its static shape is tiled
    m = s_c.max(-1, keepdim=True).contiguous().maximum(s_p.max(-1, keepdim=True)).contiguous()
    e_c = (s_c - m).exp().contiguous().reshape(B, KV, G * T, T)
    e_p = (s_p - m).exp().contiguous().reshape(B, KV, G * T, start_pos)
    # the row sums, and the chunk's product e_c @ v, each in a kernel of their own: in one kernel with the past's product and
    # the division, the sums were redone for each of the D outputs of a row and the product was not tiled as a matmul (SmolLM2,
    # T=128, CPU time a layer: 0.97 -> 0.36 + 0.06 ms for the sums + 0.02 for the rest; Gemma 3: 1.87 -> 1.22 + 0.04)
    den = (e_c.sum(-1, keepdim=True) + e_p.sum(-1, keepdim=True)).contiguous()
    attn = (((e_c @ v).contiguous() + e_p @ vals) / den).contiguous()  # (1, KV, G*T, D)
    return attn.reshape(B, H, T, D).transpose(1, 2).reshape(B, T, H * D)

  def ffn(self, i: int, x: Tensor) -> Tensor:
    p = f"blk.{i}."
    g, u = self.linears(x, (p + "ffn_gate.weight", p + "ffn_up.weight"))
    g = g.gelu() if self.cfg.act == "gelu_tanh" else g.silu()
    # realized: else every row of ffn_down recomputes the activation of each element it reads
    return self.linear((g * u).contiguous(), p + "ffn_down.weight")

  def forward(self, x: Tensor, start_pos: int | UOp, last: int | UOp | None = None, logits: bool = True) -> Tensor:
    """x: (1, T, dim) embedded tokens at positions start_pos.. -> (vocab,) float32 logits at index `last` (default T-1) of the
    chunk; with `logits=False` the residual stream's row there, (1, 1, dim), which `head` turns into them (a prefill computes
    logits only after its last chunk). Positions after `last` may be padding: causal masking keeps them out of every earlier
    position's result."""
    cfg, T = self.cfg, x.shape[1]
    x = x.realize()
    for i in range(cfg.n_layers):
      p = f"blk.{i}."
      h = self.attention(i, rms_norm(x, self.w[p + "attn_norm.weight"], cfg.norm_eps), start_pos, T)
      if T == 1: h = h.realize()
      if cfg.post_norms: h = rms_norm(h, self.w[p + "post_attention_norm.weight"], cfg.norm_eps)
      # decode: the mid-layer residual isn't written; its two consumers (the FFN's norm and matvec, the layer's last add)
      # each recompute it from the attention's output, an add per element (Gemma 3: its post-attention norm fuses into them)
      x = x + h if T == 1 else (x + h).realize()
      h = self.ffn(i, rms_norm(x, self.w[p + "ffn_norm.weight"], cfg.norm_eps))
      # decode: realized as the attention's output is; under the post-FFN norm, which broadcasts it, the scheduler would realize
      # a factored matvec's group sums in a kernel of their own (Gemma 3's ffn_down: 2 kernels, the second reading the blocks again)
      if T == 1: h = h.realize()
      if cfg.post_norms: h = rms_norm(h, self.w[p + "post_ffw_norm.weight"], cfg.norm_eps)
      x = (x + h).realize()  # the residual stream is realized: else each consumer (norm reduce, matmuls) recomputes what made it
    last = T - 1 if last is None else last
    return self.head(x[:, last:last + 1]) if logits else x[:, last:last + 1]

  def head(self, x: Tensor) -> Tensor:
    """(1, 1, dim) residual row -> (vocab,) logits: the final norm and the output matrix."""
    return self.linear(rms_norm(x, self.w["output_norm.weight"], self.cfg.norm_eps), self.output_name).reshape(self.cfg.vocab_size)

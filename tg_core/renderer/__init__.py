"""The renderer contract: `Renderer`, the base class a backend's code generator subclasses, and `RendererCaps`, the one
declared record of everything the core reads about a target (docs/backend-authors.md). The PYTHON renderer is in
`tg_core.renderer.python`."""
from __future__ import annotations
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tg_core.dtype import DType, dtypes
from tg_core.uop import Ops
from tg_core.uop.pattern import PatternMatcher

if TYPE_CHECKING:
  from tg_core.dev.compiled import Compiler

def _all_storage_dtypes() -> frozenset[DType]: return frozenset(dt for dt in dtypes.fields().values() if not dtypes.is_weak(dt))

# Where each lane keeps each element of one operand's fragment: (lane bits, element bits), bit b of the lane (of the element's
# index in the lane's fragment) adding its (row, col) step to the element's position in the operand's tile. Tensor cores
# place elements by bits of the lane id (PTX ISA "Matrix Fragments"), so this covers them; the fragment has 2^len(element bits) elements.
FragmentLayout = tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]

@dataclass(frozen=True)
class TensorCore:
  """One matrix-multiply-accumulate instruction: D(M,N) = A(M,K) @ B(K,N) + C(M,N), executed by `threads` lanes together.
  `layout` (A's (m, k), B's (k, n), C's and D's (m, n) FragmentLayout) is what the TC opt needs to use it; () declares the
  shape only."""
  dims: tuple[int, int, int]  # (M, N, K)
  dtype_in: DType             # the dtype of A and B
  dtype_out: DType            # the dtype of C and D (the accumulator)
  threads: int = 32           # lanes (a warp / wave) that execute one instruction together
  layout: tuple[FragmentLayout, ...] = ()
  def __post_init__(self) -> None:
    if len(self.dims) != 3 or not all(isinstance(d, int) and d > 0 for d in self.dims):
      raise ValueError(f"TensorCore dims must be 3 positive ints (M, N, K), got {self.dims}")
    if not (isinstance(self.dtype_in, DType) and isinstance(self.dtype_out, DType)):
      raise ValueError(f"TensorCore dtype_in and dtype_out must be DTypes, got {self.dtype_in!r}, {self.dtype_out!r}")
    if not isinstance(self.threads, int) or self.threads <= 0: raise ValueError(f"TensorCore threads must be a positive int, got {self.threads}")
    if self.layout: self._check_layout()

  def _check_layout(self) -> None:
    m, n, k = self.dims
    if len(self.layout) != 3: raise ValueError(f"TensorCore layout must be 3 FragmentLayouts (A, B, C), got {len(self.layout)}")
    if self.threads & (self.threads - 1): raise ValueError(f"TensorCore with a layout needs a power-of-2 thread count, got {self.threads}")
    for name, (rows, cols), (lane_bits, elem_bits) in zip("ABC", ((m, k), (k, n), (m, n)), self.layout):
      if len(lane_bits) != self.threads.bit_length() - 1:
        raise ValueError(f"TensorCore layout of {name}: {len(lane_bits)} lane bits for {self.threads} threads (need {self.threads.bit_length() - 1})")
      steps = (*lane_bits, *elem_bits)
      pos = {(sum(r for b, (r, _) in enumerate(steps) if i >> b & 1), sum(c for b, (_, c) in enumerate(steps) if i >> b & 1)) for i in range(1 << len(steps))}
      if len(pos) != rows * cols or any(not (0 <= r < rows and 0 <= c < cols) for r, c in pos):
        raise ValueError(f"TensorCore layout of {name} doesn't place each element of its {rows}x{cols} tile exactly once")

  def fragment_size(self, operand: int) -> int:
    """Elements of operand 0 (A), 1 (B) or 2 (C/D) each lane holds."""
    return 1 << len(self.layout[operand][1])

@dataclass(frozen=True)
class RendererCaps:
  """Everything the core reads about a renderer's target: the one declared contract between codegen and a backend.
  Codegen reads these fields directly (there are no other, optional attributes); docs/backend-authors.md explains each
  field for backend authors. The record is hashable: the compile cache keys on it (see `cache_key`)."""
  # dtypes: what the target computes and stores natively. The small floats the core can emulate (float16, bfloat16, fp8;
  # codegen/dtype_emulation.py) are emulated when missing here; any other missing dtype is unsupported (tests skip it).
  native_dtypes: frozenset[DType] = field(default_factory=_all_storage_dtypes)
  # vectors: with vector_upcast, one UPCAST axis per loop nest is rendered as vector dtypes (codegen/vectorize.py) instead of
  # scalar copies; vector_width is the elements of a 32-bit dtype per SIMD register, the heuristic's upcast of elementwise kernels
  vector_upcast: bool = False
  vector_width: int = 4
  # launch: with has_grid the output loops become grid indices (SPECIAL gidx), at most len(global_max) dims of at most
  # global_max[i] each (leading loops merge into the first dim when there are more); without it a kernel is plain loops
  has_grid: bool = True
  global_max: tuple[int, ...] = (0x8FFFFFFF,) * 3
  # workgroups: LOCAL opts (lidx) only when has_local; at most local_max[i] threads per dim
  has_local: bool = True
  local_max: tuple[int, ...] = (0x8FFFFFFF,) * 3
  # bytes of memory shared by a workgroup (0: none)
  shared_max: int = 32768
  # matrix instructions the target has (empty: none)
  tensor_cores: tuple[TensorCore, ...] = ()
  # unary ops the target computes natively; codegen approximates the EXP2/LOG2/SIN missing here (codegen/transcendental.py)
  native_transcendentals: frozenset[Ops] = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL})
  # the renderer renders Ops.DP4A (a 4-byte integer dot product step) itself; else codegen lowers it to shifts, multiplies and adds
  # (codegen/dp4a.py)
  native_dp4a: bool = False
  # the renderer renders Ops.DPBF16 (c + a dot product of two pairs of bfloat16, packed in uint32s) itself; else codegen lowers
  # it to shifts, multiplies and adds (codegen/dpbf16.py). Tensor.matmul of two bfloat16 tensors computes through it where set
  native_dpbf16: bool = False
  # a REDUCE spanning at most this many elements (grid included) is left whole for the renderer to reduce natively
  # (the PYTHON interpreter runs it as one numpy reduction); 0: every REDUCE is lowered to a loop with a register accumulator
  native_reduce_limit: int = 0
  # whether the heuristic's optimizations apply when a kernel brings none (False: kernels run as written, unless BEAM)
  default_opts: bool = True
  # heuristic hints. big_reduce_tile: the register tile (inner, outer output axis) for big reduce kernels (>= 2^22
  # multiply-adds), for targets with many vector registers and one thread per core (CPUs: (16, 8)); None: 4x4 tiles.
  # transpose_tile: when loads are strided along the stores (a transpose), upcast an axis they are contiguous in by this
  # much so neighbouring steps share cache lines (0: off)
  big_reduce_tile: tuple[int, int] | None = None
  transpose_tile: int = 0
  # bytes of data cache at each level one core uses, innermost first (L1d, L2, L3, ...; a shared level counts whole);
  # () when unknown. The heuristic orders a big matmul's loops for reuse when it knows the L2 (codegen/opt/heuristic.py)
  cache_sizes: tuple[int, ...] = ()
  # threads that run the kernel's first top-level loop in parallel (a CPU runtime's worker pool; 1: the kernel runs on one).
  # The heuristic gives that loop enough, and evenly many, iterations for them (codegen/opt/heuristic.py `_shares`)
  cores: int = 1
  # the archs the renderer can target (DEV=DEVICE:RENDERER:arch picks one, an arch not listed is an error) and the one it
  # targets now ("" when it takes no arch)
  archs: tuple[str, ...] = ()
  arch: str = ""
  # a last codegen pass: renderer-specific rewrite rules (a PatternMatcher, called with ctx=the renderer), None when unused
  extra_matcher: PatternMatcher | None = None

  def __post_init__(self) -> None:
    def bad(name: str, want: str) -> ValueError: return ValueError(f"RendererCaps.{name} must be {want}, got {getattr(self, name)!r}")
    if not all(isinstance(d, DType) for d in self.native_dtypes): raise bad("native_dtypes", "a frozenset of DType")
    if not all(isinstance(o, Ops) for o in self.native_transcendentals): raise bad("native_transcendentals", "a frozenset of Ops")
    for name in ("vector_width", "shared_max", "native_reduce_limit", "transpose_tile"):
      if not isinstance(getattr(self, name), int) or getattr(self, name) < 0: raise bad(name, "a non-negative int")
    if self.vector_width < 1: raise bad("vector_width", "at least 1")
    if not isinstance(self.cores, int) or isinstance(self.cores, bool) or self.cores < 1: raise bad("cores", "a positive int")
    for name in ("global_max", "local_max", "cache_sizes"):
      if not (isinstance(v := getattr(self, name), tuple) and all(isinstance(x, int) and x > 0 for x in v)): raise bad(name, "a tuple of positive ints")
    if self.has_grid and not self.global_max: raise bad("global_max", "non-empty when has_grid")
    if self.has_local and not self.local_max: raise bad("local_max", "non-empty when has_local")
    if self.big_reduce_tile is not None and not (len(self.big_reduce_tile) == 2 and all(isinstance(x, int) and x > 1 for x in self.big_reduce_tile)):
      raise bad("big_reduce_tile", "None or two ints > 1")
    if not all(isinstance(t, TensorCore) for t in self.tensor_cores): raise bad("tensor_cores", "a tuple of TensorCore")
    if self.arch and self.arch not in self.archs: raise bad("arch", f"one of archs {self.archs}")
    if self.extra_matcher is not None and not isinstance(self.extra_matcher, PatternMatcher): raise bad("extra_matcher", "a PatternMatcher or None")
    # the record keys the runner cache on every kernel launch: hash its fields once, not per lookup
    object.__setattr__(self, "_hash", hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self))))

  def __hash__(self) -> int: return self._hash  # type: ignore[attr-defined]

  def emulated_dtypes(self) -> frozenset[DType]:
    """The dtypes the core emulates for this target: the emulatable small floats it lacks."""
    from tg_core.codegen.dtype_emulation import EMULATABLE
    return frozenset(dt for dt in EMULATABLE if dt not in self.native_dtypes)

  def cache_key(self) -> str:
    """A string that is the same for equal records in every process (frozenset order and PatternMatcher identity don't
    enter): on-disk caches key on it. `extra_matcher` enters as present/absent; the renderer's class name keys the rest."""
    def norm(v: Any) -> Any:
      if isinstance(v, frozenset): return sorted(repr(x) for x in v)
      if isinstance(v, PatternMatcher): return "matcher"
      return v
    return repr([(f.name, norm(getattr(self, f.name))) for f in dataclasses.fields(self)])

# the attributes of a Renderer that the core and its plugins use; nothing else is read (the conformance kit's
# --tg-strict-renderer checks this: any other attribute read on the renderer object fails the run)
RENDERER_CONTRACT: frozenset[str] = frozenset({"device", "caps", "compiler", "render", "target_name", "select_arch"})

# attributes of the pre-1.1 contract, now fields of RendererCaps (or gone): a renderer that still sets one is refused
_LEGACY_ATTRS = {"supported_dtypes": "native_dtypes", "vector_upcast": "vector_upcast", "vector_width": "vector_width", "global_max": "global_max",
                 "local_max": "local_max", "has_local": "has_local", "has_shared": "shared_max (0 = none)", "shared_max": "shared_max",
                 "tensor_cores": "tensor_cores", "native_transcendentals": "native_transcendentals", "extra_matcher": "extra_matcher",
                 "vectorized_reduce_limit": "native_reduce_limit", "default_opts": "default_opts", "supports_float4": "vector_upcast",
                 "pre_matcher": "extra_matcher", "code_for_op": "(nothing: rendering is the renderer's own business)", "suffix": "(nothing)"}

class Renderer:
  """Turns a linearized kernel (a list of UOps) into source code. A subclass sets `caps` (a RendererCaps: everything the
  core reads about the target) and implements `render`. A renderer may carry its own `compiler` (e.g. PTX next to CUDA C on
  one device); it wins over the device's compiler. `device` is filled in by the Compiled that owns it."""
  device: str = ""
  caps: RendererCaps = RendererCaps()
  compiler: Compiler | None = None

  def __init_subclass__(cls, **kwargs: Any) -> None:
    super().__init_subclass__(**kwargs)
    if legacy := [k for k in _LEGACY_ATTRS if k in cls.__dict__]:
      raise TypeError(f"renderer {cls.__qualname__} sets {legacy}: since tg_core plugin API 1.1 these are fields of its RendererCaps "
                      f"(caps = RendererCaps({', '.join(f'{_LEGACY_ATTRS[k]}=...' for k in legacy)})); see docs/backend-authors.md")
    # (a property may compute the record from runtime state: the CPU plugin's `cores` follows its thread count)
    if not isinstance(cls.__dict__.get("caps", RendererCaps()), (RendererCaps, property)):
      raise TypeError(f"{cls.__qualname__}.caps must be a RendererCaps (or a property returning one)")

  def render(self, uops: list) -> str: raise NotImplementedError(f"{type(self).__name__} can't render kernels")
  def select_arch(self, arch: str) -> None:
    """Target `arch` (one of caps.archs, checked by the caller). A renderer whose caps depend on the arch (tensor cores,
    dtypes) overrides this to set them."""
    self.caps = dataclasses.replace(self.caps, arch=arch)
  @classmethod
  def target_name(cls) -> str:
    """The name used to pick this renderer (`DEV=CUDA:PTX`): the class name, upper case, without "RENDERER"."""
    return cls.__name__.upper().removesuffix("RENDERER") or cls.__name__.upper()
  def __repr__(self) -> str: return f"<{type(self).__name__} device={self.device!r}>"

__all__ = ["Renderer", "RendererCaps", "TensorCore", "FragmentLayout", "RENDERER_CONTRACT"]

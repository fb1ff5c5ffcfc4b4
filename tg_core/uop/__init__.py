"""The op set of tg's IR. Every node of every stage is a `UOp` with one of these ops."""
from __future__ import annotations
from enum import Enum, auto

class FastEnum(Enum):
  """An Enum that sorts by value and hashes fast (ops are dict keys everywhere)."""
  def __lt__(self, x: FastEnum) -> bool: return self._value_ < x._value_
  def __hash__(self) -> int: return self._value_
  def __repr__(self) -> str: return f"Ops.{self.name}"
  @staticmethod
  def _generate_next_value_(_: str, __: int, ___: int, last_values: list) -> int: return 1 + max([0, *last_values])

class Ops(FastEnum):
  # uops that aren't rendered
  NOOP = auto(); REWRITE_ERROR = auto(); SINK = auto(); GROUP = auto()  # noqa: E702
  # buffers and calls. CALL's body is src[0]; calls with RETURNED inputs are value-producing (and differentiable),
  # the rest are opaque. RETURNED is a placeholder for a buffer a call writes and returns: an input you AFTER on.
  PARAM = auto(); BUFFER = auto(); RETURNED = auto(); CALL = auto(); CUSTOM_FUNCTION = auto()  # noqa: E702
  # renderer: LINEAR is a list of UOps, SOURCE has a human-readable str arg, BINARY has the compiled bytes
  LINEAR = auto(); SOURCE = auto(); BINARY = auto(); PROGRAM = auto()  # noqa: E702
  # ordering and memory
  AFTER = auto(); STORE = auto(); LOAD = auto(); INDEX = auto(); STAGE = auto()  # noqa: E702
  # loops and control
  RANGE = auto(); END = auto(); IF = auto(); ENDIF = auto(); BARRIER = auto(); SPECIAL = auto()  # noqa: E702
  # reductions: REDUCE_AXIS reduces tensor axes (arg=(op, axes)); REDUCE reduces over RANGE srcs (arg=op)
  REDUCE_AXIS = auto(); REDUCE = auto(); ALLREDUCE = auto()  # noqa: E702
  # movement ops (views)
  RESHAPE = auto(); PERMUTE = auto(); EXPAND = auto(); PAD = auto(); SHRINK = auto(); FLIP = auto()  # noqa: E702
  # multi-device
  MSTACK = auto(); MSELECT = auto(); UNSHARD = auto()  # noqa: E702
  # tensor-graph buffer ops
  COPY = auto(); CONTIGUOUS = auto(); CONTIGUOUS_BACKWARD = auto(); DETACH = auto(); BIND = auto()  # noqa: E702
  # vectors: STACK makes a vector from scalars, GEP selects lanes, UNROLL/CONTRACT move axes in and out of lanes
  STACK = auto(); GEP = auto(); UNROLL = auto(); CONTRACT = auto(); WMMA = auto()  # noqa: E702
  # leaves
  CONST = auto(); DEVICE = auto(); PYLITERAL = auto()  # noqa: E702
  # unary ALU
  EXP2 = auto(); LOG2 = auto(); SIN = auto(); SQRT = auto(); RECIPROCAL = auto(); NEG = auto(); TRUNC = auto()  # noqa: E702
  CAST = auto(); BITCAST = auto()  # noqa: E702
  # binary ALU. IDIV and MOD are C-style: the quotient truncates toward zero and the remainder takes the dividend's sign
  ADD = auto(); MUL = auto(); SHL = auto(); SHR = auto(); IDIV = auto(); MAX = auto(); MOD = auto()  # noqa: E702
  CMPLT = auto(); CMPNE = auto(); CMPEQ = auto(); XOR = auto(); OR = auto(); AND = auto()  # noqa: E702
  THREEFRY = auto(); SUB = auto(); FDIV = auto(); POW = auto()  # noqa: E702
  # ternary ALU. DP4A (int32 a, b, c): c + the sum over the 4 bytes k of int8(a_k) * max(int8(b_k), -127), an integer dot
  # product step (b's bytes saturate to a symmetric int8 so that x86's u8 x i8 multiply-add pairs lower it exactly). arg True:
  # the producer promises b has no byte -128 (an int8 quantization's output), so the saturation, a no-op then, may be skipped.
  # With a uint32 a its bytes are unsigned and b's are not saturated: c + sum_k uint8(a_k) * int8(b_k) (x86's vpdpbusd as it is).
  # DPBF16 (uint32 a, b; float32 c): c + lo(a) * lo(b) + hi(a) * hi(b), lo/hi the bfloat16 values in each uint32's low/high
  # 16 bits (a pair of bfloat16 along a matmul's K): the products are exact in float32, the sum rounds in float32
  WHERE = auto(); MULACC = auto(); DP4A = auto(); DPBF16 = auto()  # noqa: E702
  # escape hatches and backend-specific nodes
  CUSTOM = auto(); CUSTOMI = auto(); GETADDR = auto(); INS = auto()  # noqa: E702

class GroupOp:
  Unary = {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC}
  Binary = {Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MAX, Ops.MOD, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.SHL, Ops.SHR,
            Ops.OR, Ops.AND, Ops.THREEFRY, Ops.SUB, Ops.FDIV, Ops.POW}
  Ternary = {Ops.WHERE, Ops.MULACC, Ops.DP4A, Ops.DPBF16}
  ALU = set.union(Unary, Binary, Ternary)
  Irreducible = {Ops.CONST, Ops.RANGE, Ops.SPECIAL, Ops.PARAM, Ops.BUFFER}
  Movement = {Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP}
  Buffer = {Ops.LOAD, Ops.STORE, Ops.CONST}
  Defines = {Ops.PARAM, Ops.BUFFER, Ops.RETURNED}
  Commutative = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.AND, Ops.OR}
  Associative = {Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.MAX}
  Idempotent = {Ops.OR, Ops.AND, Ops.MAX}
  Comparison = {Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ}
  UnsafePad = {Ops.RECIPROCAL, Ops.LOG2, Ops.EXP2, Ops.IDIV, Ops.POW, Ops.FDIV}  # f(0) != 0: padding must not pass through
  All = set(Ops)

__all__ = ["FastEnum", "auto", "Ops", "GroupOp"]

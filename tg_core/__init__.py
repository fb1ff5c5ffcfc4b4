"""tg: a deep-learning compiler framework. The core holds the IR, the compiler pipeline and the front end;
devices, importers and quantization formats come as plugins."""
from tg_core.device import Device
from tg_core.dtype import dtypes
from tg_core.engine.jit import TinyJit
from tg_core.function import function
from tg_core.helpers import Context, GlobalCounters
from tg_core.tensor import Tensor
from tg_core.uop import GroupOp, Ops
from tg_core.uop.ops import UOp, Variable

__version__ = "0.1.0"
__all__ = ["Tensor", "dtypes", "Device", "TinyJit", "Context", "GlobalCounters", "Variable", "function", "Ops", "GroupOp", "UOp"]

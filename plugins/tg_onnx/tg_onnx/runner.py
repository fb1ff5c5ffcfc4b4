"""OnnxRunner: load an ONNX model with the `onnx` package and run its graph as tg Tensor ops.

Values flowing through the graph are Tensors, lists of Tensors (sequences) or None (an absent optional). Values that
depend only on initializers, Constant nodes and input *shapes* (Shape/Gather/Concat/... chains) are folded on the host:
computed once per input-shape signature, kept as numpy arrays and fed to ops that need Python constants (Reshape's
shape, Slice's starts, ...). A model whose graph never reads data back to the host is replayed with TinyJit."""
from __future__ import annotations
import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.onnx_pb import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, TypeProto

from tg_core import Device, Tensor, TinyJit, UOp, dtypes
from tg_core.dtype import DType
from tg_core.engine.realize import buffer_of
from tg_core.uop import Ops
from tg_onnx.errors import OnnxError, OnnxInputError, OnnxLoadError, OnnxNodeError, OnnxOpsetError, OnnxUnsupportedOpError
from tg_onnx.simplify import conv_params_as_initializers, simplify_conv_graph

Value = Tensor | list | None
HOST_MAX_ELEMS = 1024     # a value this small whose inputs are all host constants is folded on the host
SPECIALIZE_MAX_ELEMS = 16  # integer inputs this small are host constants too (the runner specializes on their values)
DOMAINS = {"": "ai.onnx", "ai.onnx": "ai.onnx", "ai.onnx.ml": "ai.onnx.ml", "ai.onnx.preview": "ai.onnx.preview",
           "ai.onnx.preview.training": "ai.onnx.preview.training"}
NEWEST_OPSET = {"ai.onnx": onnx.defs.onnx_opset_version(), "ai.onnx.ml": onnx.defs.get_schema("LabelEncoder", domain="ai.onnx.ml").since_version,
                "ai.onnx.preview": 1, "ai.onnx.preview.training": 1}
NEWEST_OPSET["ai.onnx.ml"] = max(NEWEST_OPSET["ai.onnx.ml"], 5)

# ONNX TensorProto element types tg has a dtype for
ONNX_DTYPES: dict[int, DType] = {
  TensorProto.FLOAT: dtypes.float32, TensorProto.UINT8: dtypes.uint8, TensorProto.INT8: dtypes.int8, TensorProto.UINT16: dtypes.uint16,
  TensorProto.INT16: dtypes.int16, TensorProto.INT32: dtypes.int32, TensorProto.INT64: dtypes.int64, TensorProto.BOOL: dtypes.bool,
  TensorProto.FLOAT16: dtypes.float16, TensorProto.DOUBLE: dtypes.float64, TensorProto.UINT32: dtypes.uint32, TensorProto.UINT64: dtypes.uint64,
  TensorProto.BFLOAT16: dtypes.bfloat16, TensorProto.FLOAT8E4M3FN: dtypes.fp8e4m3, TensorProto.FLOAT8E5M2: dtypes.fp8e5m2}
NP_TO_TG: dict[str, DType] = {"float32": dtypes.float32, "float64": dtypes.float64, "float16": dtypes.float16, "int8": dtypes.int8,
                              "int16": dtypes.int16, "int32": dtypes.int32, "int64": dtypes.int64, "uint8": dtypes.uint8, "uint16": dtypes.uint16,
                              "uint32": dtypes.uint32, "uint64": dtypes.uint64, "bool": dtypes.bool}
NP_DTYPES = frozenset(np.dtype(n) for n in NP_TO_TG)
NP_OF: dict[DType, np.dtype] = {v: np.dtype(k) for k, v in NP_TO_TG.items()}
# dtypes numpy lacks: carried as their bits (ml_dtypes arrays, which onnx.numpy_helper returns)
BITS_DTYPES: dict[str, tuple[DType, Any]] = {"bfloat16": (dtypes.bfloat16, np.uint16), "float8_e4m3fn": (dtypes.fp8e4m3, np.uint8),
                                             "float8_e5m2": (dtypes.fp8e5m2, np.uint8)}

def onnx_dtype(elem_type: int) -> DType:
  if elem_type not in ONNX_DTYPES:
    raise OnnxUnsupportedOpError(f"tensor element type {TensorProto.DataType.Name(elem_type)} has no tg dtype "
                                 f"(supported: {', '.join(TensorProto.DataType.Name(k) for k in ONNX_DTYPES)})")
  return ONNX_DTYPES[elem_type]

def to_tensor(arr: np.ndarray, device: str) -> Tensor:
  """A realized Tensor holding the numpy array `arr` (including the ml_dtypes bfloat16/float8 arrays onnx produces)."""
  name = arr.dtype.name
  if name in NP_TO_TG: return Tensor(np.require(arr, requirements="C"), device=device).realize()
  if name in BITS_DTYPES:
    dt, bits = BITS_DTYPES[name]
    return Tensor(np.require(arr, requirements="C").view(bits), device=device).bitcast(dt).realize()
  raise OnnxUnsupportedOpError(f"tensors of numpy dtype {arr.dtype} (e.g. strings, complex, 4-bit) are not supported by tg-onnx")

def to_numpy(t: Tensor) -> np.ndarray:
  """The inverse of to_tensor: bfloat16 and float8 come back as ml_dtypes arrays, like onnx's reference."""
  for name, (dt, bits) in BITS_DTYPES.items():
    if t.dtype == dt:
      import ml_dtypes
      return t.bitcast(dtypes.uint16 if bits is np.uint16 else dtypes.uint8).numpy().view(getattr(ml_dtypes, name))
  return t.numpy()

def load_model(model: ModelProto | str | os.PathLike | bytes) -> ModelProto:
  """Parse a model from a path or bytes (external data next to a path is loaded too); a bad file raises OnnxLoadError."""
  if isinstance(model, ModelProto): return model
  try:
    if isinstance(model, (bytes, bytearray)): return onnx.load_model_from_string(bytes(model))
    if not os.path.exists(model): raise OnnxLoadError(f"ONNX model file {os.fspath(model)!r} does not exist")
    return onnx.load(os.fspath(model))
  except OnnxError: raise
  except Exception as e:
    raise OnnxLoadError(f"cannot parse {'the model bytes' if isinstance(model, (bytes, bytearray)) else repr(os.fspath(model))} as an ONNX model "
                        f"({type(e).__name__}: {e}); the file is truncated or not an ONNX ModelProto") from e

class Subgraph:
  """A graph attribute (If branches, Loop/Scan bodies): called with its inputs, it runs in the scope of its parent."""
  def __init__(self, runner: OnnxRunner, graph: GraphProto, scope: dict[str, Value], host: dict[str, np.ndarray]):
    self.runner, self.graph, self.scope, self.host = runner, graph, scope, host
    self.input_names = [i.name for i in graph.input]
    self.output_names = [o.name for o in graph.output]
  def __call__(self, *inputs: Value) -> list[Value]:
    if len(inputs) != len(self.input_names):
      raise OnnxNodeError(f"subgraph {self.graph.name!r} takes {len(self.input_names)} inputs, got {len(inputs)}")
    env = dict(self.scope)
    env.update(zip(self.input_names, inputs))
    host = {k: v for k, v in self.host.items() if k not in self.input_names}
    return self.runner._run_graph(self.graph, env, host)

@dataclass
class OpContext:
  """What an op that needs more than its inputs and attributes gets (as its `ctx` keyword): the opset, the device, the runner."""
  opset: int
  device: str
  runner: OnnxRunner
  node: NodeProto
  host_values: Callable[[int], np.ndarray]
  host_consts: dict[str, np.ndarray]
  def host(self, i: int) -> np.ndarray:
    """Input i as a numpy array: a host-folded constant, or read back from the device (data-dependent)."""
    return self.host_values(i)
  def const(self, i: int) -> np.ndarray | None:
    """Input i as a numpy array when it is a host-folded constant, else None (nothing is read back)."""
    return self.host_consts.get(self.node.input[i]) if i < len(self.node.input) else None

class OnnxRunner:
  """`OnnxRunner(model_or_path)(inputs) -> outputs`: inputs are numpy arrays, Tensors or Python lists by graph input name;
  outputs are Tensors (lists of Tensors for sequences) by graph output name. `jit=False` turns off kernel replay."""
  def __init__(self, model: ModelProto | str | os.PathLike | bytes, device: str | None = None, jit: bool = True):
    try: self._load(model, device, jit)
    except OnnxError: raise
    except Exception as e: raise OnnxLoadError(f"cannot load the model: {type(e).__name__}: {e}") from e

  def _load(self, model: ModelProto | str | os.PathLike | bytes, device: str | None, jit: bool) -> None:
    loaded = load_model(model)
    given_as_nodes = {n.output[0] for n in loaded.graph.node if n.op_type == "Constant" and n.output}
    self.model = simplify_conv_graph(fold_batchnorm(conv_params_as_initializers(loaded)))
    self.device = Device.canonicalize(device) if device is not None else Device.DEFAULT
    self.jit = jit
    self.opsets: dict[str, int] = {}
    for imp in self.model.opset_import:
      domain = DOMAINS.get(imp.domain, imp.domain)
      if domain in NEWEST_OPSET and not 1 <= imp.version <= NEWEST_OPSET[domain]:
        raise OnnxOpsetError(f"the model imports opset {imp.version} of domain {domain}; tg-onnx implements {domain} opsets 1 to {NEWEST_OPSET[domain]}"
                             f" (re-export the model with a supported opset, e.g. onnx.version_converter.convert_version)")
      self.opsets[domain] = imp.version
    if "ai.onnx" not in self.opsets and self.model.ir_version < 3: self.opsets["ai.onnx"] = 1
    graph = self.model.graph
    self.functions = {(f.domain, f.name): f for f in self.model.functions}
    try:
      self.initializers: dict[str, Value] = {i.name: to_tensor(numpy_helper.to_array(i), self.device) for i in graph.initializer}
      for si in graph.sparse_initializer:
        self.initializers[si.values.name] = to_tensor(_sparse_to_dense(si), self.device)
    except OnnxError: raise
    except Exception as e: raise OnnxLoadError(f"cannot read the initializers of the model: {type(e).__name__}: {e}") from e
    # (weights the model gave as Constant nodes keep their layout: PaddlePaddle's channels-first convs over 24 or 48 columns take the
    # generic tile, a vector of columns times a few channels, which reads (cout, cin) weights as a few sequential streams; stored
    # channels-last, one Zen 3 core: 480x6x24 -> 480 1x1 conv 1.0 -> 1.38 ms)
    for name in _conv_weights(graph, self.initializers):
      if name.split("__")[0] not in given_as_nodes: self.initializers[name] = _channels_last_weight(self.initializers[name])
    for name in _rnn_weights(graph, {n for n, t in self.initializers.items() if isinstance(t, Tensor)}):
      self.initializers[name] = _rows_innermost_weight(self.initializers[name])
    self.host_initializers = {k: v.numpy() for k, v in self.initializers.items() if isinstance(v, Tensor) and _is_host_sized(v)}
    self.inputs: dict[str, TypeProto] = {i.name: i.type for i in graph.input if i.name not in self.initializers}
    self.optional_inputs = {i.name for i in graph.input if i.name in self.initializers}  # initializers double as input defaults
    self.output_names = [o.name for o in graph.output]
    self._folded: dict[tuple, dict[str, np.ndarray]] = {}   # per input signature: host values computed on the first call
    self._jits: dict[tuple, TinyJit] = {}
    self._staged: dict[tuple, dict[str, Tensor]] = {}  # per replayed signature: the input buffers its capture reads
    self._replay_sigs: dict[tuple, tuple] = {}  # _replay_key of inputs already checked -> their signature
    self._in_place: dict[tuple, InPlaceReplay] = {}  # per captured signature: its replay on the staging and output buffers themselves
    self._host_reads = 0
    # per graph and subgraph of the model (each held by its entry, so its id names it): the constants it computes, kept across calls
    self._graph_consts: dict[int, DeviceConstants] = {}
    _device_constants(graph, set(self.initializers) - self.optional_inputs, self._graph_consts)
    self._const_tensors: dict[int, tuple[np.ndarray, Tensor]] = {}

  # *** inputs ***
  def _convert_input(self, name: str, value: Any) -> Value:
    typ = self.inputs.get(name)
    if typ is None or typ.WhichOneof("value") is None:
      return value if isinstance(value, Tensor) else to_tensor(np.asarray(value), self.device)
    kind = typ.WhichOneof("value")
    if kind == "optional_type":
      return None if value is None else self._convert_typed(name, value, typ.optional_type.elem_type)
    return self._convert_typed(name, value, typ)

  def _convert_typed(self, name: str, value: Any, typ: TypeProto) -> Value:
    kind = typ.WhichOneof("value")
    if kind == "sequence_type":
      if not isinstance(value, (list, tuple)): raise OnnxInputError(f"input {name!r} is a sequence: pass a list of arrays, got {type(value).__name__}")
      return [self._convert_typed(f"{name}[{i}]", v, typ.sequence_type.elem_type) for i, v in enumerate(value)]
    if kind != "tensor_type": raise OnnxUnsupportedOpError(f"input {name!r} has type {kind}, which tg-onnx does not support (maps)")
    want = onnx_dtype(typ.tensor_type.elem_type)
    if isinstance(value, Tensor): t = value
    else:
      arr = np.asarray(value)
      if isinstance(value, (list, int, float, bool)) and arr.dtype.name in NP_TO_TG and NP_TO_TG[arr.dtype.name] != want:
        arr = arr.astype(want.name if want.name in NP_TO_TG else {"float": "float32", "double": "float64", "half": "float16"}.get(want.name, arr.dtype))
      t = to_tensor(arr, self.device)
    if t.dtype != want:
      raise OnnxInputError(f"input {name!r} must have dtype {TensorProto.DataType.Name(typ.tensor_type.elem_type)} ({want}), got {t.dtype}; "
                           f"cast it before calling the runner")
    if typ.tensor_type.HasField("shape"):
      dims = typ.tensor_type.shape.dim
      if len(dims) != t.ndim: raise OnnxInputError(f"input {name!r} must have rank {len(dims)} (shape {_shape_str(dims)}), got shape {t.shape}")
      for i, (d, s) in enumerate(zip(dims, t.shape)):
        if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != s:
          raise OnnxInputError(f"input {name!r} must have shape {_shape_str(dims)}: dim {i} is {s}, expected {d.dim_value}")
    if t.device != self.device: t = t.to(self.device)
    return t.realize()

  def _prepare(self, inputs: dict[str, Any]) -> dict[str, Value]:
    if not isinstance(inputs, dict): raise OnnxInputError(f"inputs must be a dict of input name -> array, got {type(inputs).__name__}")
    unknown = [k for k in inputs if k not in self.inputs and k not in self.optional_inputs]
    if unknown: raise OnnxInputError(f"unknown input name(s) {unknown}; the model's inputs are {list(self.inputs)}")
    missing = [k for k, t in self.inputs.items() if k not in inputs and t.WhichOneof("value") != "optional_type"]
    if missing: raise OnnxInputError(f"missing input(s) {missing}; the model's inputs are {list(self.inputs)}")
    env: dict[str, Value] = dict(self.initializers)
    for k, v in inputs.items(): env[k] = self._convert_input(k, v)
    for k in self.inputs: env.setdefault(k, None)
    return env

  # *** running ***
  def __call__(self, inputs: dict[str, Any], debug: bool = False) -> dict[str, Value]:
    return self._checked_call(inputs, debug, False)

  def run_numpy(self, inputs: dict[str, Any]) -> dict[str, Any]:
    """Like calling the runner, with the outputs as numpy arrays (copies, what onnxruntime's `InferenceSession.run` gives; bfloat16
    and float8 as ml_dtypes arrays, sequences as lists of arrays, absent optionals None). A replayed call copies its inputs into the
    buffers the capture reads and its outputs out of the buffers it writes: no Tensor is made."""
    return self._checked_call(inputs, False, True)

  def _checked_call(self, inputs: dict[str, Any], debug: bool, as_numpy: bool) -> dict[str, Any]:
    try:
      if self.jit and isinstance(inputs, dict) and (key := _replay_key(inputs, self.device)) is not None and (sig := self._replay_sigs.get(key)) is not None:
        return self._replay(sig, inputs, as_numpy)  # inputs like a call already checked and replayed: no conversion, no Tensors made
      outs = self._call(inputs, debug)
      return {k: _host_value_of(v) for k, v in outs.items()} if as_numpy else outs
    except OnnxError: raise
    except RecursionError as e: raise OnnxLoadError(f"the model's graph nests too deeply to run: {e}") from e
    except Exception as e:  # a failure outside any node (e.g. realizing the outputs): still a typed error naming the cause
      raise OnnxNodeError(f"running the model failed: {type(e).__name__}: {e}") from e

  def _call(self, inputs: dict[str, Any], debug: bool = False) -> dict[str, Value]:
    env = self._prepare(inputs)
    # small integer inputs (a sample rate, a step count) are specialized on: host constants, part of the signature
    small = {k: to_numpy(v) for k, v in env.items() if k in inputs and isinstance(v, Tensor) and not dtypes.is_float(v.dtype) and _is_host_sized(v)
             and v.numel() <= SPECIALIZE_MAX_ELEMS}
    sig = tuple((k, _signature(v), small[k].tobytes() if k in small else None) for k, v in sorted(env.items()) if k not in self.initializers or k in inputs)
    if self.jit and sig in self._jits:
      if sig not in self._staged:
        self._staged[sig] = {k: to_tensor(to_numpy(v), self.device) for k, v in env.items() if isinstance(v, Tensor) and k not in self.initializers}
      if (key := _replay_key(inputs, self.device)) is not None: self._replay_sigs[key] = sig
      return self._replay(sig, {k: v for k, v in env.items() if k in self._staged[sig]})
    first = sig not in self._folded
    host = {**self.host_initializers, **small}
    if not first: host.update(self._folded[sig])
    reads = self._host_reads
    outs = self._run_main(env, host, debug)
    if first:
      self._folded[sig] = {k: v for k, v in host.items() if k not in self.host_initializers}
      # replay only graphs that never read data back to the host (data-dependent shapes and control flow re-trace every call)
      if self.jit and self._host_reads == reads and all(isinstance(v, Tensor) for v in outs.values()):
        self._jits[sig] = TinyJit(lambda **kw: self._run_main({**self.initializers, **kw}, {**self.host_initializers, **self._folded[sig]}))
    return outs

  def _replay(self, sig: tuple, inputs: dict[str, Any], as_numpy: bool = False) -> dict[str, Any]:
    """Run the captured kernels of `sig` on these inputs: their data is copied into the staging buffers the capture reads (the same
    buffers on every replay, so no kernel's arguments change), and the outputs are copied out of the buffers the next replay reuses."""
    if (fast := self._in_place.get(sig)) is not None: return fast(inputs, as_numpy)
    staged, jit = self._staged[sig], self._jits[sig]
    for k, v in inputs.items():
      if (dst := staged.get(k)) is not None: _stage(buffer_of(dst.uop.base), None, v)
    outs = jit(**staged)
    if jit.captured is not None: self._in_place[sig] = InPlaceReplay(jit, staged, outs)  # captured: later calls replay in place
    return {k: _host_value_of(v) if as_numpy else _copy_out(v, self.device) if isinstance(v, Tensor) else v for k, v in outs.items()}

  def _run_main(self, env: dict[str, Value], host: dict[str, np.ndarray], debug: bool = False) -> dict[str, Value]:
    outs = self._run_graph(self.model.graph, env, host, debug)
    ret = dict(zip(self.output_names, outs))
    # realized together: outputs that share work (silero-vad's probability and its LSTM state) share its kernels; one at a time,
    # each output's kernels recomputed the unrealized intermediates the earlier ones fused
    ts = [x for v in ret.values() for x in (v if isinstance(v, list) else [v]) if isinstance(x, Tensor)]
    if ts: ts[0].realize(*ts[1:])
    return ret

  def _run_graph(self, graph: GraphProto, env: dict[str, Value], host: dict[str, np.ndarray], debug: bool = False) -> list[Value]:
    readers = _readers(graph)
    consts = self._graph_consts.get(id(graph))  # None for a graph made per call (a function's body)
    for i, node in enumerate(graph.node):
      if node.output and all(o in host or not o for o in node.output) and node.op_type not in NONDETERMINISTIC:
        for o in node.output:
          if o: env[o] = self._const_tensor(host[o])
        continue
      if consts is not None and consts.complete and i in consts.nodes:  # computed on the first run: its outputs kept, realized
        env.update((o, consts.values[o]) for o in node.output if o in consts.values)
        continue
      missing = [n for n in node.input if n and n not in env]
      if missing: raise OnnxLoadError(f"node {i} ({node.op_type} {node.name!r}) reads {missing}, which no node, input or initializer produces")
      inputs = [env[n] if n else None for n in node.input]
      outs = self._run_node(node, inputs, env, host)
      if debug: print(f"{i:4d} {node.op_type:20s} {[getattr(o, 'shape', o) for o in outs]}")
      for name, out in zip(node.output, outs):
        if not name: continue
        if isinstance(out, Tensor) and readers.get(name, 0) > 1 and _recomputes_reduce(out): out = _realized_in_source_layout(out)
        if consts is not None and i in consts.nodes and name in consts.kept:
          if isinstance(out, Tensor) and name in consts.rnn_weights: out = _rows_innermost_weight(out)
          for x in (out if isinstance(out, list) else [out]):
            if isinstance(x, Tensor): x.realize()
          consts.values[name] = out
        env[name] = out
        if isinstance(out, Tensor) and name not in host and self._foldable(node, out, host): host[name] = out.realize().numpy()
    if consts is not None: consts.complete = True
    missing = [o.name for o in graph.output if o.name not in env]
    if missing: raise OnnxLoadError(f"graph {graph.name!r} outputs {missing}, which no node produces")
    return [env[o.name] for o in graph.output]

  @staticmethod
  def _foldable(node: NodeProto, out: Tensor, host: dict[str, np.ndarray]) -> bool:
    """Whether `out` is a host constant: small, and computed from host constants only (or from shapes)."""
    if node.op_type in NONDETERMINISTIC or not _is_host_sized(out) or any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute):
      return False
    return node.op_type in ("Shape", "Size") or all(not nm or nm in host for nm in node.input)

  def _run_node(self, node: NodeProto, inputs: list[Value], env: dict[str, Value], host: dict[str, np.ndarray]) -> list[Value]:
    from tg_onnx.ops import PY_CONST_INPUTS, lookup
    domain = DOMAINS.get(node.domain, node.domain)
    opset = self.opsets.get(domain, NEWEST_OPSET.get(domain, 1))
    if (node.domain, node.op_type) in self.functions: return self._run_function(self.functions[(node.domain, node.op_type)], node, inputs, env, host)
    fn = lookup(domain, node.op_type, opset)
    if fn is None:
      raise OnnxUnsupportedOpError(f"op {node.op_type} of domain {domain} (opset {opset}) used by node {node.name!r} is not supported by tg-onnx")
    try:
      attrs = {a.name: self._attribute(a, env, host) for a in node.attribute}
      for idx in PY_CONST_INPUTS.get(node.op_type, ()):
        if idx < len(inputs) and isinstance(inputs[idx], Tensor): inputs[idx] = self._host_value(node.input[idx], inputs[idx], host)
      ctx = OpContext(opset, self.device, self, node, lambda i: np.asarray(self._host_value(node.input[i], inputs[i], host, as_list=False)), host)
      ret = fn(*inputs, **attrs, **({"ctx": ctx} if getattr(fn, "needs_ctx", False) else {}))
    except OnnxError: raise
    except Exception as e:
      raise OnnxNodeError(f"node {node.name!r} (op {node.op_type}, domain {domain}, opset {opset}) failed: {type(e).__name__}: {e}") from e
    return list(ret) if isinstance(ret, tuple) else [ret]

  def _const_tensor(self, arr: np.ndarray) -> Tensor:
    """The device copy of a folded host constant, made once (the folded arrays live as long as the runner)."""
    if (t := self._const_tensors.get(id(arr))) is None or t[0] is not arr: self._const_tensors[id(arr)] = t = (arr, to_tensor(arr, self.device))
    return t[1]

  def _host_value(self, name: str, t: Tensor, host: dict[str, np.ndarray], as_list: bool = True) -> Any:
    """The Python value of an input an op needs on the host: from the folded constants, else read back (data-dependent)."""
    if name in host: arr = host[name]
    else:
      self._host_reads += 1
      arr = to_numpy(t)
    return arr.tolist() if as_list else arr

  def _attribute(self, a: AttributeProto, env: dict[str, Value], host: dict[str, np.ndarray]) -> Any:
    if a.ref_attr_name: raise OnnxUnsupportedOpError(f"attribute {a.name} refers to a function attribute, which only functions may use")
    if a.type == AttributeProto.FLOAT: return float(a.f)
    if a.type == AttributeProto.INT: return int(a.i)
    if a.type == AttributeProto.STRING: return a.s.decode("utf-8", "replace")
    if a.type == AttributeProto.TENSOR: return numpy_helper.to_array(a.t)
    if a.type == AttributeProto.GRAPH: return Subgraph(self, a.g, env, host)
    if a.type == AttributeProto.FLOATS: return [float(x) for x in a.floats]
    if a.type == AttributeProto.INTS: return [int(x) for x in a.ints]
    if a.type == AttributeProto.STRINGS: return [x.decode("utf-8", "replace") for x in a.strings]
    if a.type == AttributeProto.TENSORS: return [numpy_helper.to_array(x) for x in a.tensors]
    if a.type == AttributeProto.GRAPHS: return [Subgraph(self, g, env, host) for g in a.graphs]
    if a.type == AttributeProto.SPARSE_TENSOR: return _sparse_to_dense(a.sparse_tensor)
    raise OnnxUnsupportedOpError(f"attribute {a.name!r} has type {AttributeProto.AttributeType.Name(a.type)}, which tg-onnx does not read")

  def _run_function(self, fn: onnx.FunctionProto, node: NodeProto, inputs: list[Value], env: dict[str, Value], host: dict) -> list[Value]:
    """A model-local function: its body runs with the node's inputs bound to the function's input names (attributes substituted)."""
    attrs = {a.name: a for a in node.attribute}
    defaults = {a.name: a for a in fn.attribute_proto}
    body = GraphProto()
    for n in fn.node:
      nn = body.node.add()
      nn.CopyFrom(n)
      del nn.attribute[:]
      for a in n.attribute:
        if a.ref_attr_name:
          src = attrs.get(a.ref_attr_name, defaults.get(a.ref_attr_name))
          if src is None: continue
          na = nn.attribute.add()
          na.CopyFrom(src)
          na.name = a.name
        else: nn.attribute.add().CopyFrom(a)
    for name in fn.output: body.output.add().name = name
    local: dict[str, Value] = {name: v for name, v in zip(fn.input, inputs)}
    for name in fn.input[len(inputs):]: local[name] = None
    saved = self.opsets
    self.opsets = {**saved, **{DOMAINS.get(o.domain, o.domain): o.version for o in fn.opset_import}}
    try: outs = self._run_graph(body, local, {fname: host[n] for fname, n in zip(fn.input, node.input) if n in host})
    finally: self.opsets = saved
    return outs

class DeviceConstants:
  """The nodes of a graph that compute constants, too large to fold on the host: Constant nodes and deterministic nodes that read only
  constants (the model's initializers that no input overrides, other such nodes' outputs). Their outputs that anything else reads
  (`kept`: another node, a graph output, a subgraph) are realized on the graph's first run and reused by every later run, so a
  replay doesn't recompute them (silero-vad's LSTM weights: Slices and Concats of Constants, fused into every step's matmul)."""
  def __init__(self, graph: GraphProto, constants: set[str]):
    self.graph = graph
    self.names = names = constants - {i.name for i in graph.input}  # constant values, this graph's and those of its scope
    self.nodes: set[int] = set()
    for i, n in enumerate(graph.node):
      if n.op_type in NONDETERMINISTIC or n.domain not in ("", "ai.onnx") or any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in n.attribute):
        continue
      if (n.op_type == "Constant" and not any(n.input)) or (any(n.input) and all(not x or x in names for x in n.input)):
        self.nodes.add(i)
        names.update(o for o in n.output if o)
    read_by: dict[str, list[int]] = {}
    for i, n in enumerate(graph.node):
      for x in {*n.input, *(r for g in _subgraphs(n) for r in _names_read(g))}: read_by.setdefault(x, []).append(i)
    outs = {o.name for o in graph.output}
    self.kept = {o for i in self.nodes for o in graph.node[i].output
                 if o and (o in outs or not read_by.get(o) or any(r not in self.nodes for r in read_by[o]))}
    self.rnn_weights = _rnn_weights(graph, self.kept)
    self.values: dict[str, Value] = {}
    self.complete = False  # set after the first run that went through the whole graph

def _device_constants(graph: GraphProto, constants: set[str], out: dict[int, DeviceConstants]) -> None:
  """DeviceConstants of `graph` and, with its constants in scope, of every subgraph of its nodes (nested ones too), into `out` by id."""
  dc = out[id(graph)] = DeviceConstants(graph, constants)
  for n in graph.node:
    for g in _subgraphs(n): _device_constants(g, dc.names, out)

def _subgraphs(node: NodeProto) -> list[GraphProto]:
  return [g for a in node.attribute for g in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs) if a.type == AttributeProto.GRAPHS else [])]

def _names_read(graph: GraphProto) -> set[str]:
  """Every value name `graph` reads, its subgraphs' included, and its outputs (an output may name an outer value)."""
  return {*(x for n in graph.node for x in n.input), *(o.name for o in graph.output), *(x for n in graph.node for g in _subgraphs(n) for x in _names_read(g))}

class InPlaceReplay:
  """A captured signature's replay through host views of its buffers, made once: a call copies its numpy inputs into zero-copy views
  of the staging buffers the capture reads (np.copyto), replays the kernels on those very buffers (TinyJit.replay_in_place) and
  copies the outputs out of views of the buffers the capture writes. A buffer without a host view (a device without zero-copy
  memory, an output that is a strided view) is copied through the Buffer instead."""
  def __init__(self, jit: TinyJit, staged: dict[str, Tensor], outs: dict[str, Value]):
    self.jit = jit
    self.inputs = {k: (buffer_of(t.uop.base), _host_view(t)) for k, t in staged.items()}
    self.outputs = [(k, v, _host_view(v) if isinstance(v, Tensor) else None) for k, v in outs.items()]

  def __call__(self, inputs: dict[str, Any], as_numpy: bool) -> dict[str, Any]:
    for k, v in inputs.items():
      if (dst := self.inputs.get(k)) is not None: _stage(dst[0], dst[1], v)
    self.jit.replay_in_place()
    if as_numpy: return {k: view.copy() if view is not None else _host_value_of(v) for k, v, view in self.outputs}
    return {k: _copy_out(v, v.device) if isinstance(v, Tensor) else v for k, v, _ in self.outputs}

def _stage(dst: Any, view: np.ndarray | None, v: Any) -> None:
  """Copy an input (a numpy array of the staged shape and dtype, or a Tensor) into its staging buffer `dst` (`view`: a host view of it)."""
  if isinstance(v, Tensor): dst.copy_from(buffer_of((v if v.uop.op is Ops.BUFFER else v.contiguous()).realize().uop.base))
  elif view is not None: np.copyto(view, v, casting="no")
  else: dst.copyin(memoryview(np.ascontiguousarray(v).reshape(-1)).cast("B"))

def _host_view(t: Tensor) -> np.ndarray | None:
  """A writable numpy view of the memory of a realized Tensor that is a whole buffer (or a reshape of one) of a numpy dtype, on a
  device whose memory the host sees; None otherwise."""
  u = t.uop.src[0] if t.uop.op is Ops.RESHAPE else t.uop
  if u.op is not Ops.BUFFER or u.is_variable or t.dtype not in NP_OF or not all(isinstance(s, int) for s in t.shape): return None
  buf = buffer_of(u)
  if not buf.is_allocated() or not buf.allocator.supports_as_buffer or (buf.options is not None and buf.options.image is not None): return None
  if buf.nbytes == 0: return np.zeros(t.shape, dtype=NP_OF[t.dtype])
  return np.frombuffer(buf.as_buffer(force_zero_copy=True), dtype=NP_OF[t.dtype]).reshape(t.shape)

def _host_value_of(v: Value) -> Any:
  """An output as run_numpy returns it: numpy arrays (lists of them for sequences), None for an absent optional."""
  if isinstance(v, Tensor): return to_numpy(v)
  if isinstance(v, list): return [_host_value_of(x) for x in v]
  return v

NONDETERMINISTIC = {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Multinomial", "Bernoulli"}

def fold_batchnorm(model: ModelProto) -> ModelProto:
  """The model with each inference BatchNormalization that follows a Conv folded into the Conv's weight and bias (as onnxruntime
  does at load): w * s per output channel and (b - mean) * s + beta, s = scale / sqrt(var + eps). Only where the Conv's output is
  read by that BatchNormalization alone and every parameter is an initializer; `model` itself is not changed (a copy is)."""
  g = model.graph
  inits = {i.name: i for i in g.initializer}
  readers = _readers(g)
  producer = {o: n for n in g.node for o in n.output}
  folds: list[tuple[NodeProto, NodeProto]] = []
  for bn in g.node:
    attrs = {a.name: a for a in bn.attribute}
    if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx") or len([o for o in bn.output if o]) != 1 or not bn.output[0]: continue
    if ("training_mode" in attrs and attrs["training_mode"].i) or ("spatial" in attrs and attrs["spatial"].i != 1) or len(bn.input) != 5: continue
    conv = producer.get(bn.input[0])
    if conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or readers.get(bn.input[0], 0) != 1: continue
    if not all(n in inits for n in [*bn.input[1:], *conv.input[1:]] if n) or len(conv.input) < 2: continue
    folds.append((conv, bn))
  if not folds: return model
  model = ModelProto.FromString(model.SerializeToString())  # a copy: the caller's model stays as it was
  g = model.graph
  by_out = {n.output[0]: n for n in g.node if n.output}
  drop = set()
  for k, (conv0, bn0) in enumerate(folds):
    conv, bn = by_out[conv0.output[0]], by_out[bn0.output[0]]
    w = numpy_helper.to_array(inits[conv.input[1]])
    scale, beta, mean, var = (numpy_helper.to_array(inits[n]).astype(np.float64) for n in bn.input[1:])
    eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
    sc = scale / np.sqrt(var + eps)
    bias = numpy_helper.to_array(inits[conv.input[2]]).astype(np.float64) if len(conv.input) > 2 and conv.input[2] else np.zeros(w.shape[0])
    wname, bname = f"{conv.input[1]}__bn_folded_{k}", f"{bn.output[0]}__bn_folded_bias"
    g.initializer.append(numpy_helper.from_array((w * sc.reshape(-1, *[1] * (w.ndim - 1))).astype(w.dtype), wname))
    g.initializer.append(numpy_helper.from_array(((bias - mean) * sc + beta).astype(w.dtype), bname))
    del conv.input[1:]
    conv.input.extend([wname, bname])
    conv.output[0] = bn.output[0]
    drop.add(bn.output[0])
  keep = [n for n in g.node if not (n.op_type == "BatchNormalization" and n.output and n.output[0] in drop)]
  del g.node[:]
  g.node.extend(keep)
  return model

def _conv_weights(graph: GraphProto, initializers: dict[str, Value]) -> list[str]:
  """The initializers that only ever are the weight of a 2-D, ungrouped Conv of `graph`."""
  uses: dict[str, list[tuple[NodeProto, int]]] = {}
  for node in graph.node:
    for i, n in enumerate(node.input): uses.setdefault(n, []).append((node, i))
  def conv_weight(node: NodeProto, i: int) -> bool:
    return node.op_type == "Conv" and node.domain in ("", "ai.onnx") and i == 1 and all(a.name != "group" or a.i == 1 for a in node.attribute)
  return [n for n, t in initializers.items() if isinstance(t, Tensor) and t.ndim == 4 and dtypes.is_float(t.dtype) and n in uses and
          all(conv_weight(node, i) for node, i in uses[n])]

def _channels_last_weight(w: Tensor) -> Tensor:
  """A conv weight (cout, cin, kh, kw) stored output channel innermost, as a view of the same shape: the CPU's conv register tile
  (heuristic `_conv_tile`) then reads a vector of output channels per tap. Done once at load, like onnxruntime's weight prepacking."""
  return w.permute(1, 2, 3, 0).contiguous().realize().permute(3, 0, 1, 2)

RNN_OPS = ("LSTM", "GRU", "RNN")

def _rnn_weights(graph: GraphProto, names: set[str]) -> set[str]:
  """Those of `names` that `graph` reads only as the W or R input of LSTM/GRU/RNN nodes."""
  uses: dict[str, list[tuple[NodeProto, int]]] = {}
  for node in graph.node:
    for i, n in enumerate(node.input): uses.setdefault(n, []).append((node, i))
  return {n for n in names if n in uses and all(node.op_type in RNN_OPS and node.domain in ("", "ai.onnx") and i in (1, 2) for node, i in uses[n])}

def _rows_innermost_weight(w: Tensor) -> Tensor:
  """An RNN weight (directions, gates * hidden, inputs) stored gate rows innermost, as a view of the same shape: the per-step matvec
  `h @ R[d].T` then loads a vector of gate rows per input, not a gather across rows (silero-vad's LSTM step: ~78 -> ~15 us, thread
  clock). Done once (at load, or when a constant is first computed), like the conv weights' layout."""
  if w.ndim != 3 or not dtypes.is_float(w.dtype): return w
  return w.permute(0, 2, 1).contiguous().realize().permute(0, 2, 1)

def _readers(graph: GraphProto) -> dict[str, int]:
  """How many node inputs (and graph outputs) read each value of `graph`."""
  ret: dict[str, int] = {}
  for n in [*(i for node in graph.node for i in node.input), *(o.name for o in graph.output)]:
    if n: ret[n] = ret.get(n, 0) + 1
  return ret

def _recomputes_reduce(t: Tensor) -> bool:
  """Whether `t` is a computation with a reduction (a conv, a matmul) not yet in a buffer of its own. Such a value read by several
  nodes is realized: else a reader that fuses it as elementwise input (a residual add, a squeeze-excite scale) computes the reduction
  again, and a ResNet's chain of unrealized blocks makes every block recompute all the convs before it (open_nsfw: 58 kernels with
  up to 7 convs fused each, 1.75 s -> 0.3 s)."""
  if t.is_realized(): return False
  return any(u.op is Ops.REDUCE_AXIS for u in t.uop.toposort(gate=lambda u: u.op not in (Ops.CONTIGUOUS, Ops.BUFFER)))

def _realized_in_source_layout(t: Tensor) -> Tensor:
  """`t` made contiguous in the layout its computation produced it in: a transposed view (tf2onnx's NCHW <-> NHWC Transposes around
  each Conv) is realized untransposed and read back through the permute. Its stores then run along the axis the computation's
  innermost loop has (the channels of a conv computed channels-last), not along the view's."""
  if t.uop.op is Ops.PERMUTE:
    order = t.uop.arg
    return Tensor(t.uop.src[0], device=t.device).contiguous().permute(order)
  return t.contiguous()

def _is_host_sized(t: Tensor) -> bool:
  return all(isinstance(s, int) for s in t.shape) and int(np.prod(t.shape)) <= HOST_MAX_ELEMS and t.dtype not in (dtypes.bfloat16, dtypes.fp8e4m3,
                                                                                                                      dtypes.fp8e5m2)

def _copy_out(t: Tensor, device: str) -> Tensor:
  """A realized copy of a replayed output, which lives in a buffer the next replay overwrites: a buffer to buffer copy for an output
  that is a whole buffer (or a reshape of one) on the runner's device, through numpy otherwise."""
  u = t.uop.src[0] if t.uop.op is Ops.RESHAPE else t.uop
  if u.op is not Ops.BUFFER or u.is_variable or u.device != device: return to_tensor(to_numpy(t), device)
  buf = UOp.new_buffer(device, u.arg.size, t.dtype)
  buffer_of(buf).copy_from(buffer_of(u))
  return Tensor(buf.reshape(t.shape) if t.uop.op is Ops.RESHAPE else buf, device=device)

def _replay_key(inputs: dict[str, Any], device: str) -> tuple | None:
  """What decides a call's signature, read off the raw inputs without converting them: names, shapes, dtypes (and the values of
  small integer inputs, which the runner specializes on). None for inputs the fast path leaves to the checked one (lists, scalars,
  absent optionals, dtypes numpy lacks, tensors on another device or small integer tensors)."""
  key = []
  for k in sorted(inputs):
    v = inputs[k]
    if isinstance(v, np.ndarray) and (dt := v.dtype) in NP_DTYPES:  # (numpy's dtype.name is slow: the dtype itself is the key)
      small = v.tobytes() if dt.kind in "iub" and v.size <= SPECIALIZE_MAX_ELEMS else None
      key.append((k, v.shape, dt, small))
    elif isinstance(v, Tensor) and v.device == device and all(isinstance(s, int) for s in v.shape) and dtypes.is_float(v.dtype) and \
         v.dtype in NP_TO_TG.values():
      key.append((k, v.shape, v.dtype.name, None))
    else: return None
  return tuple(key)

def _signature(v: Value) -> Any:
  if isinstance(v, Tensor): return (v.shape, v.dtype)
  if isinstance(v, list): return tuple(_signature(x) for x in v)
  return None

def _shape_str(dims: Any) -> str: return "(" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims) + ")"

def _sparse_to_dense(sp: onnx.SparseTensorProto) -> np.ndarray:
  values, idx = numpy_helper.to_array(sp.values), numpy_helper.to_array(sp.indices)
  dense = np.zeros(int(np.prod(sp.dims)), dtype=values.dtype)
  flat = idx if idx.ndim == 1 else np.ravel_multi_index(tuple(idx.T), tuple(sp.dims))
  dense[flat] = values
  return dense.reshape(tuple(sp.dims))

def make_op_error(msg: str) -> Callable[..., Any]:
  def op(*args: Any, **kwargs: Any) -> Any: raise OnnxUnsupportedOpError(msg)
  return op

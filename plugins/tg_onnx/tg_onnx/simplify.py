"""Load-time simplification of convolutional graphs, as onnxruntime does when it loads a model: a Conv's parameters given as Constant
nodes become initializers (so the BatchNormalization fold and the channels-last weight layout apply to them: PaddlePaddle's exports
give every weight as a Constant node), per-channel affine chains after a Conv (tf2onnx's Sub/Mul/Add batch norms, PaddlePaddle's
learnable Mul/Add scales) are folded into its weight and bias, and the decomposed hard-swish `x * clip(x + 3, 0, 6) / 6` becomes one
HardSwish node. The last two leave the Conv's output read by a single node: the runner then fuses the activation into the conv's
kernel instead of storing the conv's output and reading it back for the activation. Every pass returns `model` unchanged when
nothing applies, else a changed copy."""
from __future__ import annotations

import numpy as np
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, helper, numpy_helper

ONNX_DOMAINS = ("", "ai.onnx")
# the inputs of these ops that are parameters (a Conv's weight and bias, a BatchNormalization's scale, bias, mean and variance)
PARAM_INPUTS = {"Conv": (1, 2), "BatchNormalization": (1, 2, 3, 4)}
AFFINE_OPS = ("Mul", "Add", "Sub", "Div")

def _uses(graph: GraphProto) -> dict[str, list[tuple[NodeProto, int]]]:
  """Each value's readers as (node, input index)."""
  ret: dict[str, list[tuple[NodeProto, int]]] = {}
  for node in graph.node:
    for i, n in enumerate(node.input):
      if n: ret.setdefault(n, []).append((node, i))
  return ret

def _copy(model: ModelProto) -> ModelProto: return ModelProto.FromString(model.SerializeToString())

def _constant_value(node: NodeProto) -> np.ndarray | None:
  """The value of a Constant node given as a tensor, a float or an int (or lists of them); None for other forms."""
  if node.op_type != "Constant" or node.domain not in ONNX_DOMAINS or len(node.attribute) != 1: return None
  a = node.attribute[0]
  if a.name == "value" and a.type == AttributeProto.TENSOR: return numpy_helper.to_array(a.t)
  if a.name in ("value_float", "value_floats", "value_int", "value_ints"): return np.asarray(helper.get_attribute_value(a))
  return None

def conv_params_as_initializers(model: ModelProto) -> ModelProto:
  """The model with each top-level Constant node that only ever is a Conv's or a BatchNormalization's parameter turned into an initializer."""
  g = model.graph
  uses, outputs = _uses(g), {o.name for o in g.output}
  def param_only(name: str) -> bool:
    return name not in outputs and bool(uses.get(name)) and \
      all(n.op_type in PARAM_INPUTS and n.domain in ONNX_DOMAINS and i in PARAM_INPUTS[n.op_type] for n, i in uses[name])
  moved = [n.output[0] for n in g.node if n.op_type == "Constant" and n.domain in ONNX_DOMAINS and len(n.output) == 1 and
           len(n.attribute) == 1 and n.attribute[0].name == "value" and param_only(n.output[0])]
  if not moved: return model
  model = _copy(model)
  g, names = model.graph, set(moved)
  for n in g.node:
    if n.op_type == "Constant" and n.output and n.output[0] in names:
      t = TensorProto()
      t.CopyFrom(n.attribute[0].t)
      t.name = n.output[0]
      g.initializer.append(t)
  keep = [n for n in g.node if not (n.op_type == "Constant" and n.output and n.output[0] in names)]
  del g.node[:]
  g.node.extend(keep)
  return model

def _channel_vector(c: np.ndarray, rank: int, axis: int, channels: int) -> np.ndarray | None:
  """`c` as one value per channel when, broadcast against a value of rank `rank` whose channels lie along `axis`, it varies
  along that axis only (or not at all); else None."""
  if c.ndim > rank or not np.issubdtype(c.dtype, np.floating): return None
  shape = (1,) * (rank - c.ndim) + c.shape
  if any(s != 1 for i, s in enumerate(shape) if i != axis) or shape[axis] not in (1, channels): return None
  return np.broadcast_to(c.reshape(shape[axis]).astype(np.float64), (channels,))

def fold_conv_affine(model: ModelProto) -> ModelProto:
  """The model with the per-channel Mul/Add/Sub/Div by constants that follow a Conv (through Transposes and Casts to the Conv's own
  type) folded into the Conv's weight and bias: y = s * conv(x) + t per channel is conv with weight w * s and bias b * s + t. Only
  where each value between the Conv and the last folded node has that one reader (and is no graph output), and the Conv's weight
  and bias are initializers; the folded nodes become Identity nodes (the Transposes and Casts between them stay)."""
  g = model.graph
  inits = {i.name: i for i in g.initializer}
  consts = {n.output[0]: v for n in g.node if n.output and (v := _constant_value(n)) is not None}
  consts.update({k: numpy_helper.to_array(v) for k, v in inits.items()})
  uses, outputs = _uses(g), {o.name for o in g.output}
  plans: list[tuple[str, list[tuple[str, int]], np.ndarray, np.ndarray]] = []  # (conv output, folded (node output, const input)), s, t
  for conv in g.node:
    if conv.op_type != "Conv" or conv.domain not in ONNX_DOMAINS or len(conv.input) < 2 or len(conv.output) != 1: continue
    if conv.input[1] not in inits or (len(conv.input) > 2 and conv.input[2] and conv.input[2] not in inits): continue
    w = consts[conv.input[1]]
    if not np.issubdtype(w.dtype, np.floating): continue
    channels, rank, axis = w.shape[0], w.ndim, 1
    to_type = helper.np_dtype_to_tensor_dtype(w.dtype)
    s, t = np.ones(channels), np.zeros(channels)
    cur, folded, best = conv.output[0], [], None
    while cur not in outputs and len(readers := uses.get(cur, [])) == 1:
      node, i = readers[0]
      if node.domain not in ONNX_DOMAINS or len(node.output) != 1: break
      if node.op_type == "Transpose":
        perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), list(range(rank))[::-1])
        axis = perm.index(axis)
      elif node.op_type == "Cast":
        if next((a.i for a in node.attribute if a.name == "to"), None) != to_type: break
      elif node.op_type in AFFINE_OPS and len(node.input) == 2 and node.input[1 - i] in consts:
        if (c := _channel_vector(consts[node.input[1 - i]], rank, axis, channels)) is None: break
        if node.op_type == "Mul": s, t = s * c, t * c
        elif node.op_type == "Add": t = t + c
        elif node.op_type == "Sub" and i == 0: t = t - c
        elif node.op_type == "Sub": s, t = -s, c - t
        elif i == 0 and np.all(c != 0): s, t = s / c, t / c
        else: break  # c / x isn't affine in x; x / 0 stays as it is
        folded.append((node.output[0], i))
        best = (list(folded), s, t)
      else: break
      cur = node.output[0]
    if best is not None: plans.append((conv.output[0], *best))
  if not plans: return model
  model = _copy(model)
  g = model.graph
  by_out = {n.output[0]: n for n in g.node if n.output}
  inits = {i.name: i for i in g.initializer}
  for k, (conv_out, folded, s, t) in enumerate(plans):
    conv = by_out[conv_out]
    w = numpy_helper.to_array(inits[conv.input[1]])
    b = numpy_helper.to_array(inits[conv.input[2]]).astype(np.float64) if len(conv.input) > 2 and conv.input[2] else np.zeros(w.shape[0])
    wname, bname = f"{conv.input[1]}__affine_folded_{k}", f"{conv_out}__affine_folded_bias"
    g.initializer.append(numpy_helper.from_array((w * s.reshape(-1, *[1] * (w.ndim - 1))).astype(w.dtype), wname))
    g.initializer.append(numpy_helper.from_array((b * s + t).astype(w.dtype), bname))
    del conv.input[1:]
    conv.input.extend([wname, bname])
    for out, i in folded:
      node = by_out[out]
      src = node.input[i]
      node.op_type, node.domain = "Identity", ""
      del node.input[:]
      node.input.append(src)
      del node.attribute[:]
  return model

def fuse_hard_swish(model: ModelProto) -> ModelProto:
  """The model with each `Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)` (PaddlePaddle's hard-swish; the Mul's and Add's operands in either
  order, Clip's bounds as inputs or attributes) replaced by `HardSwish(x)`, where the Add, Clip and Mul outputs have no other reader.
  x is then read by one node, so a Conv before it keeps the activation in its kernel."""
  g = model.graph
  consts = {n.output[0]: v for n in g.node if n.output and (v := _constant_value(n)) is not None}
  consts.update({i.name: numpy_helper.to_array(i) for i in g.initializer})
  uses, outputs = _uses(g), {o.name for o in g.output}
  producer = {o: n for n in g.node for o in n.output}
  def is_const(name: str, value: float) -> bool: return name in consts and consts[name].size == 1 and float(consts[name].reshape(())) == value
  def only(name: str, op: str) -> NodeProto | None:
    """The producer of `name` when it is an `op` whose output nothing else reads."""
    n = producer.get(name)
    return n if n is not None and n.op_type == op and n.domain in ONNX_DOMAINS and len(uses.get(name, [])) == 1 and name not in outputs else None
  def other(node: NodeProto, name: str) -> str | None:
    return node.input[1] if node.input[0] == name else node.input[0] if len(node.input) == 2 and node.input[1] == name else None
  fused: list[tuple[str, str, tuple[str, ...]]] = []  # (Div output, x, the outputs of the Mul, Clip and Add it replaces)
  for div in g.node:
    if div.op_type != "Div" or div.domain not in ONNX_DOMAINS or len(div.input) != 2 or not is_const(div.input[1], 6.0): continue
    if (mul := only(div.input[0], "Mul")) is None or len(mul.input) != 2: continue
    for clip_out in mul.input:
      if (clip := only(clip_out, "Clip")) is None: continue
      bounds = {a.name: a.f for a in clip.attribute}
      lo = bounds.get("min") == 0.0 if "min" in bounds else len(clip.input) > 1 and is_const(clip.input[1], 0.0)
      hi = bounds.get("max") == 6.0 if "max" in bounds else len(clip.input) > 2 and is_const(clip.input[2], 6.0)
      if not (lo and hi) or (add := only(clip.input[0], "Add")) is None or len(add.input) != 2: continue
      x = next((n for n in add.input if is_const(other(add, n) or "", 3.0)), None)
      if x is not None and other(mul, clip_out) == x:
        fused.append((div.output[0], x, (mul.output[0], clip_out, add.output[0])))
        break
  if not fused: return model
  model = _copy(model)
  g = model.graph
  by_out = {n.output[0]: n for n in g.node if n.output}
  drop: set[str] = set()
  for out, x, replaced in fused:
    drop.update(replaced)
    by_out[out].CopyFrom(helper.make_node("HardSwish", [x], [out], name=by_out[out].name))
  keep = [n for n in g.node if not (n.output and n.output[0] in drop)]
  del g.node[:]
  g.node.extend(keep)
  return model

def simplify_conv_graph(model: ModelProto) -> ModelProto:
  """The affine folds and the hard-swish fusion, after the Conv parameters became initializers and the BatchNormalizations were folded."""
  return fuse_hard_swish(fold_conv_affine(model))

"""Conv-model paths of tg-onnx checked against onnxruntime: Conv weights stored output channel innermost at load (shared weights,
a weight another op also reads), a residual chain whose block outputs several nodes read, and ConvTranspose with kernel == stride."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tg_onnx import OnnxRunner

ort = pytest.importorskip("onnxruntime")
rng = np.random.default_rng(0)

def check(model: onnx.ModelProto, feed: dict[str, np.ndarray], rtol: float = 1e-4, atol: float = 1e-4) -> None:
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  want = sess.run(None, feed)
  runner = OnnxRunner(model)
  for _ in range(3):  # the first call traces, later ones replay the captured kernels
    got = runner(feed)
    for o, w in zip(model.graph.output, want): np.testing.assert_allclose(got[o.name].numpy(), w, rtol=rtol, atol=atol)

def init(name: str, *shape: int) -> onnx.TensorProto: return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

def test_residual_chain_with_shared_and_reread_weights() -> None:
  # r_i = relu(conv(r_{i-1}) + r_{i-1}): each block output is read by the next conv and the next add; w2 is shared by two convs,
  # w3 is also an output of the graph (so it stays in its own layout), the last conv is strided with a bias
  nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"])]
  prev = "r1"
  for i, w in enumerate(["w2", "w2", "w3"]):
    nodes += [helper.make_node("Conv", [prev, w], [f"c{i + 2}"], pads=[1, 1, 1, 1]), helper.make_node("Add", [f"c{i + 2}", prev], [f"a{i + 2}"]),
              helper.make_node("Relu", [f"a{i + 2}"], [f"r{i + 2}"])]
    prev = f"r{i + 2}"
  nodes += [helper.make_node("Conv", [prev, "w5", "b5"], ["y"], strides=[2, 2], kernel_shape=[1, 1]), helper.make_node("Identity", ["w3"], ["w3_out"])]
  g = helper.make_graph(nodes, "res", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 14, 14])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None), helper.make_tensor_value_info("w3_out", TensorProto.FLOAT, None)],
                        [init("w1", 16, 3, 3, 3), init("w2", 16, 16, 3, 3), init("w3", 16, 16, 3, 3), init("w5", 24, 16, 1, 1), init("b5", 24)])
  check(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), {"x": rng.standard_normal((1, 3, 14, 14)).astype(np.float32)})

@pytest.mark.parametrize("k,pads,output_padding,group", [(2, None, None, 1), (3, [1, 0, 2, 1], [1, 2], 1), (1, None, None, 1), (2, None, None, 2),
                                                          (3, [0, 0, 0, 0], None, 1)])
def test_conv_transpose_kernel_equal_stride(k: int, pads: list[int] | None, output_padding: list[int] | None, group: int) -> None:
  attrs: dict = {"strides": [k, k]}
  if pads is not None: attrs["pads"] = pads
  if output_padding is not None: attrs["output_padding"] = output_padding
  if group != 1: attrs["group"] = group
  node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
  g = helper.make_graph([node], "ct", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 5, 7])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [init("w", 6, 4 // group, k, k), init("b", 4)])
  check(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), {"x": rng.standard_normal((2, 6, 5, 7)).astype(np.float32)})

def test_batchnorm_folds_into_the_conv_before_it() -> None:
  # Conv -> BatchNormalization (folded at load) -> Relu, and a BatchNormalization whose Conv output is also read elsewhere (kept)
  nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
           helper.make_node("BatchNormalization", ["c1", "s1", "be1", "m1", "v1"], ["n1"], epsilon=1e-3), helper.make_node("Relu", ["n1"], ["r1"]),
           helper.make_node("Conv", ["r1", "w2"], ["c2"]), helper.make_node("BatchNormalization", ["c2", "s2", "be2", "m2", "v2"], ["n2"]),
           helper.make_node("Add", ["n2", "c2"], ["y"])]
  var = [numpy_helper.from_array(rng.uniform(0.5, 2, 8).astype(np.float32), f"v{i}") for i in (1, 2)]
  g = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 9, 9])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                        [init("w1", 8, 3, 3, 3), init("b1", 8), init("w2", 8, 8, 1, 1), *var,
                         *[init(f"{p}{i}", 8) for i in (1, 2) for p in ("s", "be", "m")]])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
  check(m, {"x": rng.standard_normal((2, 3, 9, 9)).astype(np.float32)})
  assert [n.op_type for n in OnnxRunner(m).model.graph.node] == ["Conv", "Relu", "Conv", "BatchNormalization", "Add"]
  assert [n.op_type for n in m.graph.node].count("BatchNormalization") == 2, "the caller's model must not change"

def const(name: str, value: np.ndarray) -> onnx.NodeProto:
  return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, dtype=np.float32), f"{name}_value"))

def test_conv_params_given_as_constant_nodes() -> None:
  # PaddlePaddle's export: every weight a Constant node. The Conv's and the BatchNormalization's become initializers (then the
  # BatchNormalization folds); a Constant also read by an Add stays a node
  nodes = [const("w", rng.standard_normal((8, 3, 3, 3)) * 0.3), const("b", rng.standard_normal(8)), const("s", rng.uniform(0.5, 2, 8)),
           const("be", rng.standard_normal(8)), const("mu", rng.standard_normal(8)), const("var", rng.uniform(0.5, 2, 8)),
           const("b4", rng.standard_normal((1, 8, 1, 1))), const("w2", rng.standard_normal((8, 3, 1, 1))),
           helper.make_node("Constant", [], ["shape"], value_ints=[8]), helper.make_node("Reshape", ["b4", "shape"], ["b4r"]),
           helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
           helper.make_node("BatchNormalization", ["c", "s", "be", "mu", "var"], ["n"]), helper.make_node("Add", ["n", "b4"], ["y"]),
           helper.make_node("Conv", ["x", "w2", "b4r"], ["c2"]), helper.make_node("Add", ["y", "c2"], ["z"])]
  g = helper.make_graph(nodes, "pd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 10, 12])],
                        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)])
  check(m, {"x": rng.standard_normal((1, 3, 10, 12)).astype(np.float32)})
  ops = [n.op_type for n in OnnxRunner(m).model.graph.node]
  assert "BatchNormalization" not in ops and ops.count("Constant") == 2, ops  # b4 (read by an Add and a Reshape) and the shape stay

def test_tf2onnx_affine_chain_folds_into_the_conv() -> None:
  # tf2onnx's NHWC sandwich: Transpose -> Conv -> Transpose -> Cast -> Add(bias) -> Sub(mean) -> Mul(scale) -> Add(beta) -> Relu, the
  # constants per channel along the last axis; then a chain that must stop: a Div by a constant with a zero, c - x, a per-column constant
  nhwc = [1, 7, 9, 3]
  nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]), helper.make_node("Conv", ["xt", "w"], ["c"], pads=[1, 1, 1, 1]),
           helper.make_node("Transpose", ["c"], ["ct"], perm=[0, 2, 3, 1]), helper.make_node("Cast", ["ct"], ["cc"], to=TensorProto.FLOAT),
           helper.make_node("Add", ["cc", "bias"], ["a1"]), helper.make_node("Sub", ["a1", "mean"], ["a2"]), helper.make_node("Mul", ["scale", "a2"], ["a3"]),
           helper.make_node("Add", ["a3", "beta"], ["a4"]), helper.make_node("Relu", ["a4"], ["r"]),
           helper.make_node("Transpose", ["r"], ["rt"], perm=[0, 3, 1, 2]), helper.make_node("Conv", ["rt", "w2", "b2"], ["d"]),
           helper.make_node("Sub", ["two", "d"], ["e1"]), helper.make_node("Div", ["e1", "halfzero"], ["e2"]), helper.make_node("Mul", ["e2", "cols"], ["y"])]
  halfzero = np.full((1, 6, 1, 1), 0.5, np.float32)
  halfzero[0, 2] = 0
  scale = numpy_helper.from_array(rng.uniform(0.5, 2, (1, 1, 1, 8)).astype(np.float32), "scale")
  g = helper.make_graph(nodes, "tf", [helper.make_tensor_value_info("x", TensorProto.FLOAT, nhwc)],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                        [init("w", 8, 3, 3, 3), init("bias", 8), init("mean", 8), scale,
                         init("beta", 8), init("w2", 6, 8, 1, 1), init("b2", 6), numpy_helper.from_array(np.float32(2), "two"),
                         numpy_helper.from_array(halfzero, "halfzero"), init("cols", 9)])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
  check(m, {"x": rng.standard_normal(nhwc).astype(np.float32)}, atol=1e-3)
  ops = [n.op_type for n in OnnxRunner(m).model.graph.node]
  assert ops.count("Identity") == 5 and ops.count("Div") == 1 and ops.count("Mul") == 1, ops  # Add, Sub, Mul, Add; and 2 - d

def test_affine_chain_stops_at_a_value_read_twice() -> None:
  # conv -> Mul -> Add, the Mul's output also read by a Relu: the Mul folds (its input has one reader), the Add can't (folding it
  # would change the value the Relu reads)
  nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Mul", ["c", "s"], ["m"]), helper.make_node("Add", ["m", "t"], ["y"]),
           helper.make_node("Relu", ["m"], ["z"])]
  g = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None), helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                        [init("w", 4, 3, 3, 3), init("s", 4, 1, 1), init("t", 4, 1, 1)])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
  check(m, {"x": rng.standard_normal((1, 3, 5, 5)).astype(np.float32)})
  assert [n.op_type for n in OnnxRunner(m).model.graph.node] == ["Conv", "Identity", "Add", "Relu"]

@pytest.mark.parametrize("opset", [10, 13])
def test_paddle_hard_swish_becomes_one_node(opset: int) -> None:
  # x * clip(x + 3, 0, 6) / 6 after a depthwise Conv (Clip's bounds: attributes before opset 11, inputs after), and one whose Add
  # output is read elsewhere too (kept as it is)
  clip = helper.make_node("Clip", ["p"], ["q"], min=0.0, max=6.0) if opset < 11 else helper.make_node("Clip", ["p", "zero", "six"], ["q"])
  nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=4, pads=[1, 1, 1, 1]), helper.make_node("Add", ["three", "c"], ["p"]), clip,
           helper.make_node("Mul", ["q", "c"], ["h"]), helper.make_node("Div", ["h", "six"], ["y"]),
           helper.make_node("Add", ["y", "three"], ["p2"]), helper.make_node("Clip", ["p2", "zero", "six"] if opset >= 11 else ["p2"], ["q2"],
                                                                              **({} if opset >= 11 else {"min": 0.0, "max": 6.0})),
           helper.make_node("Mul", ["y", "q2"], ["h2"]), helper.make_node("Div", ["h2", "six"], ["y2"]), helper.make_node("Add", ["y2", "p2"], ["z"])]
  scalars = [numpy_helper.from_array(np.float32(v), n) for v, n in ((3, "three"), (0, "zero"), (6, "six"))]
  g = helper.make_graph(nodes, "hs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                        [numpy_helper.from_array((rng.standard_normal((4, 1, 3, 3)) * 2).astype(np.float32), "w"), init("b", 4), *scalars])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
  check(m, {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)})
  assert [n.op_type for n in OnnxRunner(m).model.graph.node] == ["Conv", "HardSwish", "Add", "Clip", "Mul", "Div", "Add"]

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

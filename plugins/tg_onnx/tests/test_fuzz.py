"""Mutated model files: each of 500 seeded mutants of a small model either loads and runs, or raises a typed OnnxError."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tg_onnx import OnnxError, OnnxRunner

def small_model() -> bytes:
  rng = np.random.default_rng(0)
  w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
  b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
  m = numpy_helper.from_array(rng.standard_normal((16, 5)).astype(np.float32), "m")
  shape = numpy_helper.from_array(np.array([1, -1], dtype=np.int64), "shape")
  nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
           helper.make_node("Relu", ["c"], ["r"]),
           helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
           helper.make_node("Reshape", ["p", "shape"], ["f"]),
           helper.make_node("MatMul", ["f", "m"], ["y0"]),
           helper.make_node("Softmax", ["y0"], ["y"], axis=-1)]
  g = helper.make_graph(nodes, "fuzz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], [w, b, m, shape])
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()

def mutate(data: bytes, rng: np.random.Generator) -> bytes:
  buf = bytearray(data)
  for _ in range(int(rng.integers(1, 4))):
    kind, pos = int(rng.integers(0, 5)), int(rng.integers(0, len(buf)))
    if kind == 0: buf[pos] ^= 1 << int(rng.integers(0, 8))                     # flip a bit
    elif kind == 1: buf[pos] = int(rng.integers(0, 256))                       # replace a byte
    elif kind == 2: del buf[pos:pos + int(rng.integers(1, 16))]                # delete a run
    elif kind == 3: buf[pos:pos] = bytes(rng.integers(0, 256, int(rng.integers(1, 8)), dtype=np.uint8))  # insert junk
    else: buf = buf[:pos]                                                      # truncate
  return bytes(buf)

def test_unmutated_model_runs() -> None:
  out = OnnxRunner(small_model(), device="PYTHON")({"x": np.ones((1, 3, 8, 8), np.float32)})["y"].numpy()
  assert out.shape == (1, 5) and np.isclose(out.sum(), 1.0)

@pytest.mark.parametrize("chunk", range(5))
def test_mutants_run_or_raise_typed_errors(chunk: int) -> None:
  base, rng = small_model(), np.random.default_rng(1234 + chunk)
  x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
  outcomes = {"ran": 0, "typed error": 0}
  for i in range(100):
    data = mutate(base, rng)
    try:
      runner = OnnxRunner(data, device="PYTHON", jit=False)
      for v in runner({"x": x}).values(): v.numpy() if hasattr(v, "numpy") else v
      outcomes["ran"] += 1
    except OnnxError: outcomes["typed error"] += 1
    except Exception as e:
      try: model = onnx.load_model_from_string(data)
      except Exception: model = None
      pytest.fail(f"mutant {chunk * 100 + i} raised {type(e).__name__}: {e}\n{model}")
  assert sum(outcomes.values()) == 100

"""OnnxRunner behaviour: typed errors naming the problem, host folding of shape chains, JIT replay, the importer entry point."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from models import MODELS

from tg_core import Tensor
from tg_core.engine.realize import buffer_of
from tg_core.plugins import open_model
from tg_onnx import OnnxInputError, OnnxLoadError, OnnxOpsetError, OnnxRunner, OnnxUnsupportedOpError

ort = pytest.importorskip("onnxruntime")

def make(nodes: list, inputs: list, outputs: list, inits: list = (), opset: int = 17, domain: str = "") -> onnx.ModelProto:  # type: ignore[assignment]
  g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
  return helper.make_model(g, opset_imports=[helper.make_opsetid(domain, opset)])

def reshape_model() -> onnx.ModelProto:
  """y = Reshape(x, Concat(Shape(x)[0:1], [-1])) * 2: the new shape comes from a Shape chain, folded on the host."""
  nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Slice", ["s", "zero", "one"], ["b"]),
           helper.make_node("Concat", ["b", "minus1"], ["ns"], axis=0), helper.make_node("Reshape", ["x", "ns"], ["r"]),
           helper.make_node("Mul", ["r", "two"], ["y"])]
  inits = [numpy_helper.from_array(np.array([0], np.int64), "zero"), numpy_helper.from_array(np.array([1], np.int64), "one"),
           numpy_helper.from_array(np.array([-1], np.int64), "minus1"), numpy_helper.from_array(np.array(2.0, np.float32), "two")]
  return make(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 4])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
              inits)

def test_shape_chain_folds_on_host_and_jit_replays() -> None:
  m = reshape_model()
  runner, sess = OnnxRunner(m), ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
  rng = np.random.default_rng(0)
  for n in (2, 2, 2, 2, 5, 5, 5):  # a new leading dim is a new signature: folded again, then replayed again
    x = rng.standard_normal((n, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(runner({"x": x})["y"].numpy(), sess.run(None, {"x": x})[0], rtol=1e-6)
  assert runner._host_reads == 0, "the Shape chain must fold on the host, not read back from the device"
  assert len(runner._jits) == 2 and all(j.cnt >= 2 for j in runner._jits.values()), "repeated shapes must replay captured kernels"

def test_replayed_outputs_are_fresh_and_tensor_inputs_replay() -> None:
  m = reshape_model()
  runner, sess = OnnxRunner(m), ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
  rng = np.random.default_rng(2)
  xs = [rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(6)]
  outs = [runner({"x": x})["y"] for x in xs[:4]]
  outs += [runner({"x": Tensor(x)})["y"] for x in xs[4:]]  # a Tensor input replays too (its data is copied in)
  for x, y in zip(xs, outs):  # every call's outputs are its own: a later replay does not overwrite them
    np.testing.assert_allclose(y.numpy(), sess.run(None, {"x": x})[0], rtol=1e-6)
  assert len(runner._replay_sigs) == 2, "numpy and Tensor inputs each reach the replay fast path"
  with pytest.raises(OnnxInputError, match=r"input 'x' must have dtype FLOAT"): runner({"x": xs[0].astype(np.float64)})  # still checked

def test_run_numpy_replays_in_place_and_outputs_are_copies() -> None:
  m = reshape_model()
  runner, sess = OnnxRunner(m), ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
  rng = np.random.default_rng(3)
  xs = [rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(6)]
  outs = [runner.run_numpy({"x": x})["y"] for x in xs]
  outs.append(runner({"x": xs[0]})["y"].numpy())  # a Tensor-returning call on the same replay
  for x, y in zip([*xs, xs[0]], outs):  # every call's outputs are its own: a later replay does not overwrite them
    assert isinstance(y, np.ndarray) and y.dtype == np.float32
    np.testing.assert_allclose(y, sess.run(None, {"x": x})[0], rtol=1e-6)
  assert len(runner._in_place) == 1, "the captured signature replays through host views of its buffers"
  with pytest.raises(OnnxInputError, match=r"input 'x' must have dtype FLOAT"): runner.run_numpy({"x": xs[0].astype(np.float64)})  # still checked

@pytest.mark.parametrize("as_numpy", [False, True], ids=["tensors", "run_numpy"])
def test_silero_state_carried_through_jit_replay(as_numpy: bool) -> None:
  m = next(m for m in MODELS if m.name == "silero_vad")
  runner, sess = OnnxRunner(m.path), ort.InferenceSession(str(m.path), providers=["CPUExecutionProvider"])
  audio = np.random.default_rng(1).standard_normal(512 * 6).astype(np.float32) * 0.1
  st_tg = st_ref = np.zeros((2, 1, 128), np.float32)
  for i in range(6):
    feed = {"input": audio[i * 512:(i + 1) * 512].reshape(1, 512), "sr": np.array(16000, np.int64)}
    got, want = (runner.run_numpy if as_numpy else runner)({**feed, "state": st_tg}), sess.run(None, {**feed, "state": st_ref})
    np.testing.assert_allclose(got["output"] if as_numpy else got["output"].numpy(), want[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["stateN"] if as_numpy else got["stateN"].numpy(), want[1], rtol=1e-4, atol=1e-5)
    st_tg, st_ref = got["stateN"] if as_numpy else got["stateN"].numpy(), want[1]
  assert len(runner._jits) == 1, "the If on the sample rate is specialized on its value, so the model replays"
  assert len(runner._in_place) == 1, "calls 4 to 6 replay in place"

def test_open_model_finds_the_onnx_importer() -> None:
  assert isinstance(open_model(MODELS[0].path), OnnxRunner)

def test_errors_name_the_problem(tmp_path) -> None:  # type: ignore[no-untyped-def]
  m = reshape_model()
  runner = OnnxRunner(m)
  with pytest.raises(OnnxInputError, match=r"unknown input name\(s\) \['z'\].*\['x'\]"): runner({"z": np.zeros((2, 3, 4), np.float32)})
  with pytest.raises(OnnxInputError, match=r"missing input\(s\) \['x'\]"): runner({})
  with pytest.raises(OnnxInputError, match=r"input 'x' must have shape \(n, 3, 4\): dim 1 is 5"): runner({"x": np.zeros((2, 5, 4), np.float32)})
  with pytest.raises(OnnxInputError, match=r"input 'x' must have rank 3"): runner({"x": np.zeros((2, 3), np.float32)})
  with pytest.raises(OnnxInputError, match=r"input 'x' must have dtype FLOAT"): runner({"x": np.zeros((2, 3, 4), np.int32)})
  data = m.SerializeToString()
  with pytest.raises(OnnxLoadError, match="truncated"): OnnxRunner(data[:len(data) // 2])
  (p := tmp_path / "bad.onnx").write_bytes(b"\xff\xff\xff not a model")
  with pytest.raises(OnnxLoadError): OnnxRunner(p)
  with pytest.raises(OnnxLoadError, match="does not exist"): OnnxRunner(tmp_path / "missing.onnx")
  with pytest.raises(OnnxOpsetError, match=r"opset 99 of domain ai.onnx.*1 to \d+"):
    OnnxRunner(make([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], opset=99))
  bogus = make([helper.make_node("FancyOp", ["x"], ["y"], name="n1", domain="com.example")], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
  bogus.opset_import.append(helper.make_opsetid("com.example", 3))
  with pytest.raises(OnnxUnsupportedOpError, match=r"op FancyOp of domain com.example \(opset 3\) used by node 'n1'"):
    OnnxRunner(bogus)({"x": np.zeros(2, np.float32)})

def test_manifest_imports_neither_onnx_nor_the_runner() -> None:
  # plugin discovery imports the manifest in every process that opens a device: it must stay light (cold start)
  import subprocess
  import sys
  code = ("import sys, tg_core; before = set(sys.modules); import tg_onnx.plugin; new = set(sys.modules) - before; "
          "print(sorted(m for m in new if m.split('.')[0] == 'onnx' or m == 'tg_onnx.runner'))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
  assert out.strip() == "[]", out

def test_constant_weights_computed_once_and_rnn_layout() -> None:
  """An LSTM whose W is computed from Constants (Slice + Concat: gate reordering, as exporters write it) and whose R is an initializer,
  run with its state carried: matches onnxruntime on every call, and the replayed kernels don't recompute W."""
  rng = np.random.default_rng(4)
  H, I = 32, 16  # W has 2048 elements: more than the host folds (HOST_MAX_ELEMS)
  w0 = rng.standard_normal((1, 4 * H, I)).astype(np.float32)
  nodes = [helper.make_node("Constant", [], ["wc"], value=numpy_helper.from_array(w0)),
           helper.make_node("Constant", [], ["s0"], value=numpy_helper.from_array(np.array([0], np.int64))),
           helper.make_node("Constant", [], ["s1"], value=numpy_helper.from_array(np.array([2 * H], np.int64))),
           helper.make_node("Constant", [], ["s2"], value=numpy_helper.from_array(np.array([4 * H], np.int64))),
           helper.make_node("Constant", [], ["ax"], value=numpy_helper.from_array(np.array([1], np.int64))),
           helper.make_node("Slice", ["wc", "s0", "s1", "ax"], ["wa"]), helper.make_node("Slice", ["wc", "s1", "s2", "ax"], ["wb"]),
           helper.make_node("Concat", ["wb", "wa"], ["w"], axis=1),
           helper.make_node("LSTM", ["x", "w", "r", "", "", "h0", "c0"], ["y", "hn", "cn"], hidden_size=H)]
  inits = [numpy_helper.from_array(rng.standard_normal((1, 4 * H, H)).astype(np.float32), "r")]
  ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, I]), helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, 1, H]),
         helper.make_tensor_value_info("c0", TensorProto.FLOAT, [1, 1, H])]
  outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "hn", "cn")]
  m = make(nodes, ins, outs, inits)
  runner, sess = OnnxRunner(m), ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
  h = c = np.zeros((1, 1, H), np.float32)
  for _ in range(5):
    x = rng.standard_normal((2, 1, I)).astype(np.float32)
    got, want = runner.run_numpy({"x": x, "h0": h, "c0": c}), sess.run(None, {"x": x, "h0": h, "c0": c})
    for g, w in zip((got["y"], got["hn"], got["cn"]), want): np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    h, c = want[1], want[2]
  assert len(runner._in_place) == 1, "the model replays"
  jit = next(iter(runner._jits.values()))
  w = buffer_of(runner._graph_consts[id(runner.model.graph)].values["w"].uop.base)
  assert any(b is w for _, bufs, _ in jit.captured for b in bufs[1:]), "the replayed kernels read W from the buffer computed on the first run"
  assert all(bufs[0] is not w and bufs[0].size != w0.size for _, bufs, _ in jit.captured), "no replayed kernel computes W again"

"""Real models from PyPI packages, run by tg-onnx and compared with onnxruntime (CPU provider) on the same inputs, state carried."""
import numpy as np
import pytest

from models import MODELS, Model

from tg_core import Tensor
from tg_onnx import OnnxRunner
from tg_onnx.runner import to_numpy

ort = pytest.importorskip("onnxruntime")

def _run_both(m: Model) -> list[tuple[str, np.ndarray, np.ndarray]]:
  sess = ort.InferenceSession(str(m.path), providers=["CPUExecutionProvider"])
  runner = OnnxRunner(m.path)
  feeds = m.feeds(np.random.default_rng(0))
  ref_state: dict[str, np.ndarray] = {}
  tg_state: dict[str, Tensor] = {}
  results = []
  for i, feed in enumerate(feeds):
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {**feed, **ref_state})))
    got = runner({**feed, **tg_state})
    for name, want in ref.items(): results.append((f"call {i} {name}", to_numpy(got[name]), want))
    ref_state = {inp: ref[out] for out, inp in m.carry}
    tg_state = {inp: got[out] for out, inp in m.carry}   # tg's own state carried, so errors would compound
  return results

@pytest.mark.parametrize("m", MODELS, ids=[m.name for m in MODELS])
def test_model_matches_onnxruntime(m: Model) -> None:
  for what, got, want in _run_both(m):
    assert got.shape == want.shape and got.dtype == want.dtype, f"{m.name} {what}: {got.shape} {got.dtype} vs {want.shape} {want.dtype}"
    np.testing.assert_allclose(got, want, rtol=m.rtol, atol=m.atol, err_msg=f"{m.name} {what}")

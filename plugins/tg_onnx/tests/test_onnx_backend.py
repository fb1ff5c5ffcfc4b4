"""The ONNX backend suite (onnx.backend.test) run through tg-onnx on the default tg device (DEV=CPU in make test).
Every pattern in EXCLUDES says why those tests cannot pass; bench/onnx_backend_counts.py compares the counts with onnxruntime."""
import os

import onnx.backend.test

from backend import TgBackend

backend_test = onnx.backend.test.BackendTest(TgBackend, __name__)

EXCLUDES: dict[str, str] = {
  # tensor types tg has no dtype for (a typed OnnxUnsupportedOpError names the type)
  r"STRING|_string|string_|regex_full_match|strnorm|tfidfvectorizer|label_encoder_(string|tensor)": "string tensors: tg has no string dtype",
  r"FNUZ|fnuz": "float8 e4m3fnuz/e5m2fnuz: tg has fp8e4m3 (fn) and fp8e5m2 only",
  r"INT2|INT4|int2|int4": "2- and 4-bit integer tensors: no tg dtype",
  r"FLOAT4E2M1|float4e2m1": "float4 e2m1 tensors: no tg dtype",
  r"E8M0|e8m0": "float8 e8m0 tensors: no tg dtype",
  # ops not implemented (each raises OnnxUnsupportedOpError naming the op, its domain and opset)
  r"image_decoder": "ImageDecoder decodes JPEG/PNG/...: needs an image codec, outside a tensor compiler",
  r"flexattention(?!.*_expanded)": "ai.onnx.preview FlexAttention (score/prob mods as subgraphs) not implemented",
  r"tree_ensemble": "ai.onnx.ml TreeEnsemble not implemented",
  r"test_gradient_of_add": "ai.onnx.preview.training Gradient (a graph-level autodiff op) not implemented",
  r"test_scan_sum_": "Scan opset 8 (batch axis + sequence_lens) not implemented; opset 9+ Scan is",
  r"resize_.*antialias": "Resize antialias=1 (a downsampling filter whose width depends on the scale) not implemented",
  # random ops: values cannot match the reference's numpy generator (onnxruntime fails these too)
  r"bernoulli|training_dropout(?!_zero_ratio)": "random: tg's generator is not numpy's, so sampled values differ from the reference",
  # numerics and known gaps
  r"fp16_expanded|causal_conv_with_state_silu_fp16": "fp16 softmax/silu chains: tg's fp16 exp/sigmoid land 1-2 fp16 ulp from the reference, over "
                                                     "rtol 1e-3 (onnxruntime passes these)",
  r"test_adam_": "Adam (preview training) bias-correction mismatch with the reference, not yet fixed",
  r"test_l2normalization_axis_0_": "LpNormalization of an all-zero slice: reference gives 0/0 = NaN positions tg computes differently",
  r"test_loop16_seq_none_": "Loop carrying an empty optional sequence: the output type (empty sequence vs None) is not reproduced",
  r"test_maxunpool_export_with_output_shape_": "MaxUnpool with output_shape: indices are taken as flat into the given shape, reference differs",
  r"resize_downsample_scales_(cubic|linear)_align_corners": "Resize align_corners downsampling by scales: output coordinates differ (onnxruntime fails too)",
  r"dft_(inverse|irfft)": "inverse DFT / irfft: normalization and onesided-inverse handling not yet matching the reference",
}
if not os.environ.get("TG_ONNX_REAL_MODELS"):
  # nine ImageNet CNNs (AlexNet ... VGG-19): ~7 minutes of one CPU core; they pass (run them with TG_ONNX_REAL_MODELS=1, as the counts script does)
  EXCLUDES[r"^test_(bvlc_alexnet|densenet121|inception_v1|inception_v2|resnet50|shufflenet|squeezenet|vgg19|zfnet512)_"] = \
    "CI time: the real ImageNet models take ~400 s of CPU; set TG_ONNX_REAL_MODELS=1 to run them"
for pattern in EXCLUDES: backend_test.exclude(pattern)
globals().update(backend_test.test_cases)

"""The ONNX backend suite (onnx.backend.test) run through tg-onnx on the default tg device (DEV=CPU in make test).
Each exclude pattern says why the test cannot pass; bench/onnx_backend_counts.py compares the counts with onnxruntime."""
import onnx.backend.test

from backend import TgBackend

backend_test = onnx.backend.test.BackendTest(TgBackend, __name__)

EXCLUDES: dict[str, str] = {
}
for pattern, reason in EXCLUDES.items(): backend_test.exclude(pattern)
globals().update(backend_test.test_cases)

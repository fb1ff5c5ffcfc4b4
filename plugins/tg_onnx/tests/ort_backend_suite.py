"""The ONNX backend suite against onnxruntime (CPU provider): the reference pass counts for tg's suite.
Not collected by `make test` (no test_ prefix); bench/onnx_backend_counts.py runs it next to test_onnx_backend.py."""
import onnx.backend.test
import onnxruntime.backend

backend_test = onnx.backend.test.BackendTest(onnxruntime.backend, __name__)
globals().update(backend_test.test_cases)

"""tg-cuda: tg's NVIDIA backend. So far only the groundwork exists: `tg_cuda.mock`, a PTX interpreter behind a mock of the
CUDA driver API (see README.md). No device is registered yet."""

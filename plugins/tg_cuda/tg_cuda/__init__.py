"""tg-cuda: tg's NVIDIA backend. The CUDA device (CUDA C via NVRTC on the driver API, `tg_cuda.device`) and `tg_cuda.mock`,
a PTX interpreter behind a mock of the CUDA driver API that the same runtime code drives for DEV=MOCK+CUDA (see README.md)."""

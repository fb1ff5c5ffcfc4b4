"""The CUDA driver-API mock (`driver.py`) and the PTX interpreter it runs kernels with (`ptx_parser.py`, `ptx_interp.py`)."""

#!/usr/bin/env bash
# The device check for a machine with an NVIDIA GPU (issue 13): run from the repo root of a working tree, no installs
# (the machine reaches no package registry). tg_core and tg_cuda come from the tree through PYTHONPATH; a throwaway
# dist-info folder declares tg_cuda's entry point so plugin discovery finds it without pip.
set -u
cd "$(dirname "$0")/.."
EP=$(mktemp -d)
mkdir -p "$EP/tg_cuda-0.1.0.dist-info"
printf 'Metadata-Version: 2.1\nName: tg-cuda\nVersion: 0.1.0\n\n' > "$EP/tg_cuda-0.1.0.dist-info/METADATA"
printf '[tg_core.plugins]\ncuda = tg_cuda.plugin\n' > "$EP/tg_cuda-0.1.0.dist-info/entry_points.txt"
export PYTHONPATH="$PWD:$PWD/plugins/tg_cuda:$EP${PYTHONPATH:+:$PYTHONPATH}"
export TG_CACHE_DIR="${TG_CACHE_DIR:-$(mktemp -d)}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
DEV=CUDA python -m tg_core doctor
echo "== conformance kit, DEV=CUDA"
DEV=CUDA timeout 300 python -m pytest -q -p no:cacheprovider -rs --pyargs tg_core.testing --tg-device=CUDA --tg-strict-renderer 2>&1 | tail -15
echo "== conformance kit, DEV=CUDA:PTX (the PTX renderer, JIT-compiled by the driver)"
DEV=CUDA:PTX timeout 300 python -m pytest -q -p no:cacheprovider -rs --pyargs tg_core.testing --tg-device=CUDA:PTX --tg-strict-renderer 2>&1 | tail -15
echo "== matmul vs cuBLAS"
DEV=CUDA timeout 240 python bench/cuda_matmul.py --sizes 4096 8192 --runs 3
echo "== tensor-core matmul (the TC opt's mma.sync) from the PTX renderer, vs cuBLAS"
DEV=CUDA:PTX timeout 180 python bench/cuda_matmul.py --sizes 4096 8192 --dtypes float16 bfloat16 --runs 3

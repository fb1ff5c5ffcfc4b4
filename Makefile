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

# the tests also need the references (torch CPU, safetensors, ...) and the test tools
$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[test,demo]"
	touch $@

demo: $(VENV)/.installed-demo
	$(BIN)/python examples/digits_cnn.py

test: $(VENV)/.installed-test
	SPEC=1 DEV=PYTHON $(BIN)/python -m pytest -n 2 --pyargs tg_core.testing --tg-device=PYTHON
	SPEC=1 $(BIN)/python -m pytest -n 2 tests

lint: $(VENV)/.installed-test
	$(BIN)/ruff check tg_core tests bench examples

bench: $(VENV)/.installed-test
	$(BIN)/python bench/matmul_python.py
	$(BIN)/python bench/rewrite.py
	$(BIN)/python bench/import_time.py

.PHONY: demo test lint bench

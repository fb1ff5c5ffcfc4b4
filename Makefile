# Install steps live here: `make test` and `make demo` create .venv and install tg editable on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test,demo]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	SPEC=1 $(BIN)/python -m pytest -n 2 tests

lint: $(STAMP)
	$(BIN)/ruff check tg_core tests bench

demo: $(STAMP)
	$(BIN)/python examples/digits_cnn.py

bench: $(STAMP)
	$(BIN)/python bench/rewrite.py

.PHONY: install test lint demo bench

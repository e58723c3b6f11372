# Two entry points: `make demo` and `make test`. Each creates or refreshes .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PACKAGES := platform log projections spark_projections apps

.PHONY: demo test lint typecheck pytest venv bench-storage clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/platform demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy $(PACKAGES)

pytest: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m pytest

test: lint typecheck pytest

bench-storage: $(STAMP)
	$(BIN)/python bench/storage.py

clean:
	rm -rf $(VENV) .eventplatform .pytest_cache .mypy_cache .ruff_cache .hypothesis

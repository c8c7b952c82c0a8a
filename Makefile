# Quick start: `make demo` and `make test` on a fresh clone with Python 3.11+.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,fast]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/blockfma report

# CI subset: everything except tests marked slow (exhaustive sweeps).
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

test-all: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_gemm.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .hypothesis

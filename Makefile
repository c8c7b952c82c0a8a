# Quick start: `make demo` and `make test` on a fresh clone with Python 3.11+.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TORCH  := $(VENV)/.torch

.PHONY: demo report torch test test-all lint bench clean

$(BIN)/python:
	@echo "make: creating $(VENV) and upgrading pip ..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# pip is quiet, so the line before it says what it does and for how long (timed on a 2-core machine: README.md)
$(STAMP): $(BIN)/python pyproject.toml
	@echo "make: installing blockfma with numpy, ml_dtypes, numba, z3, cvc5, bitwuzla, matplotlib, dask, pytest" \
	  "(about 6 min on a busy 2-core machine) ..."
	$(BIN)/python -m pip install --quiet -e '.[test,fast]'
	touch $(STAMP)

# torch (CPU build) runs the GPU engine's kernels on the CPU in the tests. Only the local CPU wheel is
# asked for, so that a machine without one skips those tests instead of downloading CUDA builds.
# With torch, MMA-Sim (an independent, hardware-tested simulator; no deps: it would pull a CUDA torch) for
# the differential test tests/test_mmasim.py, which skips where it is missing. With torch, Triton too: its
# interpreter (TRITON_INTERPRET=1) runs our own GPU kernel on the CPU in tests/test_triton_engine.py.
# Hugging Face transformers (its dependencies do not include torch) for bf.torch.divergence on real models.
$(TORCH): $(STAMP)
	@echo "make: installing torch (CPU build), mmasim, triton and transformers (a few minutes) ..."
	$(BIN)/python -m pip install --quiet 'torch==2.13.0+cpu' || \
	  echo "note: no CPU build of torch 2.13.0 here; the GPU-engine tests will be skipped"
	$(BIN)/python -c "import torch" 2>/dev/null && { $(BIN)/python -m pip install --quiet --no-deps 'mmasim==2.1.1' || \
	  echo "note: mmasim not installable here; the MMA-Sim differential test will be skipped"; } || true
	$(BIN)/python -c "import torch" 2>/dev/null && { $(BIN)/python -m pip install --quiet --no-deps 'mmaemu==0.1.0' || echo "note: mmaemu not installable here; its fp8 split-K oracle tests (tests/test_torch_orders.py) will be skipped"; } || true
	$(BIN)/python -c "import torch" 2>/dev/null && { $(BIN)/python -m pip install --quiet 'triton==3.9.0' || \
	  echo "note: triton 3.9.0 not installable here; tests/test_triton_engine.py will be skipped"; } || true
	$(BIN)/python -c "import torch" 2>/dev/null && { $(BIN)/python -m pip install --quiet 'transformers==5.24.0' || \
	  echo "note: transformers not installable here; its divergence tests will be skipped"; } || true
	touch $(TORCH)

# torch for README's PyTorch example and blockfma.torch (make test installs it too)
torch: $(TORCH)

# The report without its probe section, a line per step on stderr even in a pipe or a log: the first run
# compiles numba's kernels (cached in __pycache__ after). `make report`: the whole report, ten presets probed
# as black boxes too (their rows kept in ~/.cache/blockfma, so the next run reads them).
demo: $(STAMP)
	$(BIN)/blockfma report --no-probes --progress
	@echo "make: the whole report, with ten presets probed as black boxes: make report (about 6 min the first" \
	  "time on a busy 2-core machine, 15 s after: the probe rows are cached); as one HTML page:" \
	  "$(BIN)/blockfma report --html report.html"

report: $(STAMP)
	$(BIN)/blockfma report --progress

# CI subset: everything except tests marked slow (exhaustive sweeps), on every core (pytest-xdist: the
# tests are independent; on CI's two cores the suite takes about half the time of one process).
test: $(TORCH)
	$(BIN)/python -m pytest -q -m "not slow" -n auto

test-all: $(TORCH)
	$(BIN)/python -m pytest -q

# ruff (in the test extra, pinned) with the rules of pyproject.toml's [tool.ruff]; why those rules:
# docs/contributing.md. CI runs it before the tests.
lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_gemm.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .hypothesis

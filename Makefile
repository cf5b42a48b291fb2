# Two commands set everything up on a fresh machine:  `make train`  and  `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Installed before the project so pip never pulls a different torch build; override for CUDA wheels,
# e.g. `make TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128" install`.
TORCH ?= torch==2.13.0
# `make train` runs this preset (about a minute on 2 CPU cores); ARGS adds overrides.
EXPERIMENT ?= shakespeare_char_cpu
ARGS ?=

.PHONY: help install data train test test-fast lint bench-gpu clean
help:  ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

install: $(VENV)/.installed  ## a virtual environment in .venv with the project (CPU torch unless TORCH= says otherwise)

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install $(TORCH)
	$(PY) -m pip install -e ".[test,corpora,pretrained,lens,notebooks]"
	touch $@

# Use a local mirror of the datasets when one sits beside the checkout (no network needed);
# otherwise the data modules download on first use.
data:  ## copy the local dataset mirror (../shared/data) into data/, where there is one
	@if [ -d ../shared/data ]; then cp -rn ../shared/data/. data/ && chmod -R u+w data; fi

train: install data  ## the CPU preset (EXPERIMENT=..., ARGS=overrides)
	$(PY) train.py experiment=$(EXPERIMENT) $(ARGS)

test: install data  ## every test, tests/unit and tests/e2e, one process per core (what CI runs)
	$(PY) -m pytest -n auto --dist worksteal $(ARGS)

test-fast: install data  ## the unit tier, tests/unit: no train.py or command in a subprocess (docs/tests.md: its time)
	$(PY) -m pytest -n auto --dist worksteal tests/unit $(ARGS)

lint: install  ## ruff: lint and format check
	$(VENV)/bin/ruff check src tests benchmarks notebooks train.py
	$(VENV)/bin/ruff format --check src tests benchmarks notebooks train.py

# Every GPU figure (the GPU presets on each precision): benchmarks/gpu.{json,md} and the presets' .md files.
# ARGS="--smoke" runs the same matrix for 3 steps of a small model (on the CPU where there is no GPU).
bench-gpu: install data  ## every GPU figure (ARGS=--smoke: the same matrix, tiny, on any machine)
	$(PY) benchmarks/gpu.py $(ARGS)

clean:  ## remove outputs/, multirun/ and pytest's cache
	rm -rf outputs multirun .pytest_cache

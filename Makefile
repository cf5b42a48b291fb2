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

.PHONY: install data train test bench-gpu clean
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install $(TORCH)
	$(PY) -m pip install -e ".[test]"
	touch $@

# Use a local mirror of the datasets when one sits beside the checkout (no network needed);
# otherwise the data modules download on first use.
data:
	@if [ -d ../shared/data ]; then cp -rn ../shared/data/. data/ && chmod -R u+w data; fi

train: install data
	$(PY) train.py experiment=$(EXPERIMENT) $(ARGS)

test: install data
	$(PY) -m pytest $(ARGS)

# Every GPU figure (the GPU presets on each precision): benchmarks/gpu.{json,md} and the presets' .md files.
# ARGS="--smoke" runs the same matrix for 3 steps of a small model (on the CPU where there is no GPU).
bench-gpu: install data
	$(PY) benchmarks/gpu.py $(ARGS)

clean:
	rm -rf outputs multirun .pytest_cache

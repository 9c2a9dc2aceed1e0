# Fresh-machine set-up and the two commands the README opens with.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
DEMO_DATA ?= data/synth
DEMO_RUN ?= runs/demo
DEMO_VQA_RUN ?= runs/demo-vqa
TEST_JOBS ?= 2

.PHONY: demo demo-vqa lint test install clean bench

# The venv is made without pip (ensurepip runs pip once just to install pip and setuptools: ~5 CPU s); the one pip
# run below installs pip into it along with everything else, driven by $(PY)'s own pip (--python).
$(BIN)/python:
	$(PY) -m venv --without-pip $(VENV)

# One pip run: torch==2.14.1 with torchvision==0.29.1 (the pair this machine keeps on disk: the pixel feature
# extractors need torchvision, and no torchvision loads beside the CPU-only torch 2.13.0 build; any other spec
# downloads gigabytes; pyproject keeps loose lower bounds for GPU users) and the package with what `make demo` needs
# (the coco extra: pycocoevalcap's METEOR; the viz extra: matplotlib for the run report). Byte-compiling all
# ~6,800 installed modules was half of pip's time; instead the modules
# vlattn's commands import (about 800: torch's core and dynamo, numpy, vlattn) are compiled by importing them once
# with bytecode writing on. That must happen: with PYTHONDONTWRITEBYTECODE set, as on the shared machine, modules
# left uncompiled are compiled again by every process that imports them (5-6 CPU s for `import vlattn.cli`).
# `make test` / `make install` add the test extras on top (byte-compiled by pip).
$(STAMP): $(BIN)/python pyproject.toml
	$(PY) -m pip --python $(BIN)/python install -q --no-compile pip torch==2.14.1 torchvision==0.29.1 -e '.[coco,viz]'
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -c 'import torch._dynamo, vlattn.cli, vlattn.demo, vlattn.demo_vqa'
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[test]'
	touch $(TEST_STAMP)

install: $(TEST_STAMP)

demo: $(STAMP)
	$(BIN)/python -m vlattn.demo --data $(DEMO_DATA) --out $(DEMO_RUN)

demo-vqa: $(STAMP)
	$(BIN)/python -m vlattn.demo_vqa --data $(DEMO_DATA) --out $(DEMO_VQA_RUN)

# Lint first (ruff's rule set and the import-linter contracts of the layers are in pyproject.toml), then the tests,
# whose closing line ends the output.
lint: $(TEST_STAMP)
	$(BIN)/ruff check --quiet .
	$(BIN)/lint-imports --no-logo --no-cache

# The tests run in TEST_JOBS processes (pytest-xdist), each on one torch thread (tests/conftest.py).
test: lint
	$(BIN)/python -m pytest -q -n $(TEST_JOBS)

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) runs

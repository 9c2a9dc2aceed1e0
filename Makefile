# Fresh-machine set-up and the two commands the README opens with.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_DATA ?= data/synth
DEMO_RUN ?= runs/demo
DEMO_VQA_RUN ?= runs/demo-vqa

.PHONY: demo demo-vqa test install clean bench

$(BIN)/python:
	$(PY) -m venv $(VENV)

# torch==2.13.0 first (the CPU build on this machine's disk; any other torch spec downloads gigabytes, and
# pyproject keeps torch>=2.2 for GPU users), then the package and its test extras. The venv's own pip
# installs editable pyproject projects, so no self-upgrade. Byte-compiling stays on: with
# PYTHONDONTWRITEBYTECODE set, as on the shared machine, modules left uncompiled would be compiled again by
# every process (benchmarks/RESULTS.md "Demo time").
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m vlattn.demo --data $(DEMO_DATA) --out $(DEMO_RUN)

demo-vqa: $(STAMP)
	$(BIN)/python -m vlattn.demo_vqa --data $(DEMO_DATA) --out $(DEMO_VQA_RUN)

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) runs

# `make demo`: set up .venv and run the CPU quickstart.  `make test`: set up .venv, check the import
# contracts (pyproject.toml) and run the tests.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/agent-rl quickstart

test: $(STAMP)
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -m "not gpu"

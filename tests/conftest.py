"""Shared fixtures: a tiny model and tokenizer built once per session (no model hub)."""

from __future__ import annotations

import functools
import os
import warnings
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from agent_rl.run.envloader import init_tiny

    return init_tiny(tmp_path_factory.mktemp("models") / "tiny", seed=0)


@pytest.fixture(scope="session")
def family_model_dir(tmp_path_factory, tiny_model_dir):
    """``family_model_dir(family)``: the tiny model of that family (``init_tiny(family=...)``), built
    once per worker: xdist spreads a module's tests over both workers, and several modules read them.
    Tests only read it (copy it to change it)."""
    from agent_rl.run.envloader import init_tiny

    root = tmp_path_factory.mktemp("families")

    @functools.cache
    def build(family: str) -> Path:
        # qwen2.5 is init_tiny's default family: the same files as tiny_model_dir
        return tiny_model_dir if family == "qwen2.5" else init_tiny(root / family, family=family)

    return build


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from agent_rl.models.loading import load_tokenizer

    return load_tokenizer(str(tiny_model_dir))


@pytest.fixture(scope="session")
def vllm_server(tiny_model_dir):
    """`vllm serve` of the tiny model (docs/vllm.md's command), one for the vLLM group's tests (one
    worker: XDIST_GROUPS): tests/rollout/backends/vllm_support.py's TinyServer."""
    from tests.rollout.backends.vllm_support import TinyServer

    server = TinyServer(tiny_model_dir)
    yield server
    server.stop()


@pytest.fixture(scope="session", autouse=True)
def _openenv_servers_outlast_their_tests():
    """An OpenEnv server a test started (``envs/openenv/server.py``: the vault example's for the env contract,
    card and fuzz tests, ``tests/envs/test_openenv.py``'s) waits for the next test of this process for as
    long as the session runs, not 30 s: one start per worker instead of one per test (each is 3-4 s of CPU,
    openenv imports gradio). Every server still stops at exit."""
    from envs.openenv import server

    server.LINGER_S = 3600.0
    yield


@pytest.fixture(autouse=True)
def _quiet_process_sandbox_warning():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*NOT isolated.*")
        yield


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONWARNINGS"] = "ignore"
    return env


# --- docker- and vllm-marked tests: skip with a reason without a Docker engine / vLLM; in CI fail.


@functools.cache
def _docker_status() -> tuple[bool, str]:
    from sandbox.docker import check

    return check()


@functools.cache
def _vllm_status() -> tuple[bool, str]:
    from agent_rl.rollout.backends.vllm import import_vllm

    try:
        import_vllm()
    except ImportError as e:
        return False, str(e)
    return True, ""


# marker -> (what it needs, whether it is here and why not)
_NEEDED = {"docker": ("a working Docker engine", _docker_status), "vllm": ("vLLM", _vllm_status)}


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", help="run the larger tier too: the full-marked recipe checks")
    parser.addoption(
        "--serial",
        action="store_true",
        help="collect only SERIAL_FILES (make pytest's second session; the other files are not even imported)",
    )


# The tests that need the machine to themselves: `make pytest` runs them in a session of their own, one at
# a time, after the rest has run on two xdist workers. The hostile sandbox suite checks that the host is as
# it found it (no process under a sandbox uid but its own, no disk filled), exhausts memory and PIDs within
# tight time limits, and runs a private dockerd in a fixed cgroup.
SERIAL_FILES = (
    "tests/sandbox/test_sandbox_security.py",
    "tests/sandbox/test_sandbox_exhaustion.py",
    "tests/sandbox/test_sandbox_reliability.py",
    "tests/sandbox/test_sandbox_daemon_outage.py",
    "tests/sandbox/test_sandbox_shutdown.py",
    "tests/sandbox/test_sandbox_blame.py",
    "tests/sandbox/test_zz_sandbox_no_leaks.py",
)
# Tests that run one at a time on one xdist worker, beside the other worker's tests: the Ray tests share
# one session-scoped cluster (tests/distributed; the chaos run's private dockerd too), and vLLM engines
# are started one at a time (each sizes its KV cache from its run, at most a few GiB). By test file: the
# scheduler below sends each group to one worker as one unit. (xdist's own `--dist loadgroup` does not
# group under pytest 9.2: it renames `item._nodeid`, which pytest no longer reads.)
XDIST_GROUPS = {
    "tests/distributed/": "ray",
    "tests/algorithms/test_remote_teacher.py": "vllm",
    "tests/learner/test_lora_vllm.py": "vllm",
    "tests/rollout/backends/test_family_backends.py": "vllm",
    "tests/rollout/backends/test_vllm_backend.py": "vllm",
    "tests/rollout/backends/test_vllm_serve.py": "vllm",
}


def xdist_group(nodeid: str) -> str | None:
    path = nodeid.split("::")[0]
    return next((group for prefix, group in XDIST_GROUPS.items() if path.startswith(prefix)), None)


class GroupScheduling(LoadScopeScheduling):
    """xdist's load scheduling, but the tests of a group in ``XDIST_GROUPS`` are one unit of work."""

    def _split_scope(self, nodeid: str) -> str:
        return xdist_group(nodeid) or nodeid


def pytest_ignore_collect(collection_path, config):
    """With ``--serial``, test files outside SERIAL_FILES are not collected: importing them costs 15-25 s."""
    if not config.getoption("--serial") or not collection_path.name.startswith("test_"):
        return None
    try:
        rel = collection_path.relative_to(ROOT).as_posix()
    except ValueError:
        return None
    return True if rel not in SERIAL_FILES else None


def pytest_xdist_make_scheduler(config, log):
    return GroupScheduling(config, log)


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the markers
def pytest_collection_modifyitems(config, items):
    """Marks the `serial` tests; deselects the full-marked ones (the larger tier, hours) unless ``--full``."""
    for item in items:
        path = item.nodeid.split("::")[0]
        if path in SERIAL_FILES:
            item.add_marker(pytest.mark.serial)
        if item.get_closest_marker("vllm") and xdist_group(item.nodeid) != "vllm":
            raise pytest.UsageError(
                f"{item.nodeid} is vllm-marked: add its file to XDIST_GROUPS in tests/conftest.py as 'vllm' "
                "(vLLM engines start one at a time)"
            )
    if config.getoption("--full"):
        return
    full = [item for item in items if item.get_closest_marker("full") is not None]
    if full:
        config.hook.pytest_deselected(items=full)
        items[:] = [item for item in items if item.get_closest_marker("full") is None]


def pytest_runtest_setup(item):
    for marker, (what, status) in _NEEDED.items():
        if item.get_closest_marker(marker) is None:
            continue
        ok, why = status()
        if not ok:
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"{marker}-marked test without {what} in CI: {why}", pytrace=False)
            pytest.skip(f"{what} is not available here: {why}")


# --- keep the suite fast: every test that took more than SLOW_S (setup + call + teardown) is printed at
# the end of the run, with the reason it may where it is on SLOW_ALLOWED. tests/durations.md has the rest.

SLOW_S = 120.0
SLOW_ALLOWED = {  # node id -> why it may take that long
    "tests/distributed/test_chaos.py::test_chaos_training_run": "20 steps on Ray with four faults injected and "
    "recovered one after another (docker daemon down 6 s, a worker killed, the server killed, a disk filled)",
}
_durations: dict[str, float] = {}


def pytest_runtest_logreport(report):
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    slow = sorted(((s, nodeid) for nodeid, s in _durations.items() if s > SLOW_S), reverse=True)
    if not slow:
        return
    terminalreporter.write_sep("=", f"{len(slow)} tests took more than {SLOW_S:.0f} s")
    for s, nodeid in slow:
        why = SLOW_ALLOWED.get(nodeid, "not on SLOW_ALLOWED in tests/conftest.py: make it cheaper")
        terminalreporter.write_line(f"{s:7.1f} s  {nodeid}  ({why})")

"""Shared fixtures: a tiny model and tokenizer built once per session (no model hub)."""

from __future__ import annotations

import functools
import os
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from agent_rl.run.envloader import init_tiny

    return init_tiny(tmp_path_factory.mktemp("models") / "tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from agent_rl.models.loading import load_tokenizer

    return load_tokenizer(str(tiny_model_dir))


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


def pytest_runtest_setup(item):
    for marker, (what, status) in _NEEDED.items():
        if item.get_closest_marker(marker) is None:
            continue
        ok, why = status()
        if not ok:
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"{marker}-marked test without {what} in CI: {why}", pytrace=False)
            pytest.skip(f"{what} is not available here: {why}")

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
    from agent_rl.tiny import init_tiny

    return init_tiny(tmp_path_factory.mktemp("models") / "tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from agent_rl.rollout.backends.hf import load_tokenizer

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


def pytest_runtest_setup(item):
    # docker- and vllm-marked tests skip here without a Docker engine / vLLM, and fail in CI
    in_ci = os.environ.get("CI", "").lower() == "true"
    if item.get_closest_marker("docker") is not None:
        ok, why = _docker_status()
        if not ok:
            if in_ci:
                pytest.fail(f"docker-marked test without a working Docker engine in CI: {why}", pytrace=False)
            pytest.skip(f"no Docker engine here: {why}")
    if item.get_closest_marker("vllm") is not None:
        ok, why = _vllm_status()
        if not ok:
            if in_ci:
                pytest.fail(f"vllm-marked test without vLLM in CI: {why}", pytrace=False)
            pytest.skip(f"no vLLM here: {why}")

"""Shared fixtures: a tiny model and tokenizer built once per session (no model hub)."""

from __future__ import annotations

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

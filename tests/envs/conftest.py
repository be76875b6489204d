"""Fixtures of the env tests: the tiny model that docs/ecosystem.md's commands write, made once."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from tests import cli_runner
from tests.conftest import cli_env

INIT_TINY = "agent-rl init-model tiny --out runs/models/tiny"  # a line of both bash blocks of docs/ecosystem.md


@pytest.fixture(scope="session")
def ecosystem_models(tmp_path_factory) -> Path:
    """The ``runs/models`` that docs/ecosystem.md's ``agent-rl init-model`` line writes, run as written once
    per worker in a user's directory of its own; the page's tests link it into theirs."""
    cwd = tmp_path_factory.mktemp("ecosystem-user")
    argv = [sys.executable, "-m", "agent_rl.cli", *shlex.split(INIT_TINY)[1:]]
    done = cli_runner.run(argv, cwd, cli_env(), timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return cwd / "runs" / "models"

"""sandbox/cli.py (``agent-rl sandbox doctor`` / ``build-image``) and .ci/setup_sandbox.sh."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from sandbox_helpers import bwrap_status

from sandbox.cli import build_image, doctor

ROOT = Path(__file__).resolve().parents[2]


def test_doctor_reports_every_backend(capsys):
    rc = doctor(calls=3)
    out = capsys.readouterr().out
    for name in ("docker", "bwrap", "process", "backend auto ->"):
        assert name in out
    isolated = bwrap_status()[0] or "docker    yes       yes" in out
    assert rc == (0 if isolated else 2)


@pytest.mark.docker
def test_build_image_reuses_an_existing_image(capsys):
    assert build_image() == 0
    assert "reusing" in capsys.readouterr().out


def test_build_image_fails_clearly_without_docker(monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert build_image(name="agent-rl-test:none") == 1
    assert "docker CLI is not installed" in capsys.readouterr().err


def test_setup_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(ROOT / ".ci" / "setup_sandbox.sh")], check=True)


@pytest.mark.docker
def test_setup_script_is_idempotent():
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("bwrap", "debootstrap", "dockerd", "setpriv")):
        pytest.skip("the fast (nothing to install) path needs root and the tools already installed")
    out = subprocess.run(
        ["bash", str(ROOT / ".ci" / "setup_sandbox.sh")],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ, CI="true"),
    )
    assert out.returncode == 0, out.stderr
    assert "reusing" in out.stdout and "setup_sandbox: ready" in out.stdout

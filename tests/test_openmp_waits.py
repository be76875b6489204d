"""``import agent_rl`` chooses how OpenMP threads wait before torch loads (agent_rl/core/threads.py):
passive unless the user chose, and nothing once torch is loaded (it would not take effect)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, cli_env

SHOW = "import os; {imports}; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))"


def wait_settings(imports: str, **env: str) -> str:
    base = {k: v for k, v in cli_env().items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    r = subprocess.run(
        [sys.executable, "-c", SHOW.format(imports=imports)],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return r.stdout.strip()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "PASSIVE None"),  # nobody chose: passive
        ({"OMP_WAIT_POLICY": "active"}, "active None"),  # the user's choice stays
        ({"GOMP_SPINCOUNT": "300000"}, "None 300000"),  # a spin count is a choice too
    ],
)
def test_import_sets_a_passive_wait_policy_unless_one_is_chosen(env, expected):
    assert wait_settings("import agent_rl", **env) == expected


def test_nothing_is_set_once_torch_is_loaded():
    assert wait_settings("import torch; import agent_rl") == "None None"

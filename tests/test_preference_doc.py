"""docs/preference.md: its commands, as written, with a tiny budget appended (slow: four CLI runs)."""

from __future__ import annotations

import json

import pytest

from tests.test_docs_commands import ROOT, _run, _scratch, documented_commands

SMALL = ["trainer.steps=1", "trainer.prompts_per_step=2", "tracking.tensorboard=false", "sandbox.backend=process"]


@pytest.mark.slow
def test_preference_commands(tmp_path):
    init, online, offline, train_rm = documented_commands("docs/preference.md")
    cwd = _scratch(tmp_path)
    (cwd / "examples").symlink_to(ROOT / "examples")
    _run(init, cwd)
    _run(online, cwd, *SMALL, "rollout.group_size=2")  # two groups of two episodes
    _run(offline, cwd, *SMALL)
    _run(train_rm, cwd, "--steps", "2", "--heldout-frac", "0.25")
    metrics = json.loads((cwd / "runs" / "rm" / "metrics.json").read_text())
    assert metrics["heldout_pairs"] == 4 and metrics["train_pairs"] == 12 and metrics["heldout_accuracy_before"] == 0.5

"""docs/preference.md: its commands, as written, with a tiny budget appended (slow: CLI runs)."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.test_docs_commands import ROOT, _run, _scratch, documented_commands

SMALL = ["trainer.steps=1", "trainer.prompts_per_step=2", "tracking.loggers=[]", "sandbox.backend=process"]


@pytest.mark.slow
def test_preference_commands(tmp_path):
    init, online, offline, train_rm = documented_commands("docs/preference.md")[:4]
    cwd = _scratch(tmp_path)
    (cwd / "examples").symlink_to(ROOT / "examples")
    _run(init, cwd)
    _run(online, cwd, *SMALL, "rollout.group_size=2")  # two groups of two episodes
    _run(offline, cwd, *SMALL)
    _run(train_rm, cwd, "--steps", "2", "--heldout-frac", "0.25")
    metrics = json.loads((cwd / "runs" / "rm" / "metrics.json").read_text())
    assert metrics["heldout_pairs"] == 4 and metrics["train_pairs"] == 12 and metrics["heldout_accuracy_before"] == 0.5


@pytest.mark.slow
def test_generative_reward_model_and_dpo_recipe_commands(tmp_path):
    """The judge: its tiny model, GRPO on PreferenceJudge-v0, export, then the judge as Arithmetic's
    reward; then the DPO vs GRPO recipe's DPO arm on a stand-in for the quickstart's SFT model (that
    tiny model), 1 step and 2 eval episodes."""
    init, train_judge, export, rewarded, dpo, evaluate = documented_commands("docs/preference.md")[4:10]
    cwd = _scratch(tmp_path)
    (cwd / "examples").symlink_to(ROOT / "examples")
    _run(init, cwd)
    _run(train_judge, cwd, *SMALL, "rollout.group_size=2")
    _run(export, cwd)
    assert (cwd / "runs" / "judge" / "export" / "config.json").exists()
    _run(rewarded, cwd, *SMALL, "rollout.group_size=2")
    rows = [json.loads(line) for line in (cwd / "runs" / "judge_rewarded" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and 0.0 < rows[0]["rollout/reward_mean"] < 1.0  # the judge's p(good): never exactly 0 or 1
    shutil.copytree(cwd / "runs" / "models" / "tiny-judge", cwd / "runs" / "quickstart" / "sft_model")
    _run(dpo, cwd, *SMALL)
    assert "step_000040" in evaluate
    _run(evaluate.replace("step_000040", "step_000001"), cwd, "eval.episodes=2", "sandbox.backend=process")


@pytest.mark.slow
def test_e_grm_commands(tmp_path):
    """E-GRM: the scorer trained with --loss egrm, then one step of the e_grm filter with it."""
    init = documented_commands("docs/preference.md")[0]
    train_scorer, train = documented_commands("docs/preference.md")[10:]
    cwd = _scratch(tmp_path)
    (cwd / "examples").symlink_to(ROOT / "examples")
    _run(init, cwd)
    _run(train_scorer, cwd, "--steps", "2")
    assert (cwd / "runs" / "egrm_scorer" / "metrics.json").exists()
    _run(train, cwd, *SMALL, "rollout.group_size=2")
    rows = [json.loads(line) for line in (cwd / "runs" / "e_grm" / "metrics.jsonl").read_text().splitlines()]
    assert (
        len(rows) == 1 and 0.0 <= rows[0]["e_grm/judged_frac"] <= 1.0 and 0.0 <= rows[0]["rollout/reward_mean"] <= 1.0
    )

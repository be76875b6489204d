"""docs/distillation.md: the comparison's commands, as written, with a tiny budget appended (slow: four
CLI runs). The tiny model stands in for the quickstart's SFT model and for the g_opd teacher."""

from __future__ import annotations

import shutil

import pytest

from tests.test_docs_commands import _run, _scratch, documented_commands

SMALL = ["trainer.steps=1", "trainer.prompts_per_step=2", "rollout.group_size=2", "sandbox.backend=process"]


@pytest.mark.slow
def test_distillation_comparison_commands(tmp_path, tiny_model_dir):
    opsd, g_opd, eval_opsd, eval_g_opd = documented_commands("docs/distillation.md")
    cwd = _scratch(tmp_path)
    for name in ("sft_model", "teacher_rl40"):  # the copies the page names
        shutil.copytree(tiny_model_dir, cwd / "runs" / "distill_cmp" / name)
    for command in (opsd, g_opd):
        _run(command, cwd, *SMALL)
    for arm, command in (("opsd", eval_opsd), ("g_opd", eval_g_opd)):
        checkpoints = cwd / "runs" / "distill_cmp" / arm / "checkpoints"
        (checkpoints / "step_000040").symlink_to(
            checkpoints / "step_000001"
        )  # the page's step 40 is this budget's step 1
        _run(command, cwd, "eval.episodes=4")
    config = (cwd / "runs" / "distill_cmp" / "g_opd" / "config.yaml").read_text()  # the resolved config of the run
    assert "teacher_path: runs/distill_cmp/teacher_rl40" in config and "name: g_opd" in config

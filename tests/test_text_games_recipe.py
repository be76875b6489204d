"""configs/twx_coin.yaml as `agent-rl quickstart --config` recipe, end to end with a tiny budget:
init-model (the tokenizer learns TextWorld-Express text), SFT on the env's noisy gold teacher, one
GRPO step, and the held-out evaluation of both (docs/text-games.md has what a real budget gave)."""

from __future__ import annotations

import json

from tests.test_docs_commands import _run, _scratch

TINY = [
    "sft.demos=16", "sft.max_steps=4", "sft.eval_every_steps=2", "sft.eval_episodes=4",
    "trainer.steps=1", "trainer.prompts_per_step=2", "rollout.group_size=2", "eval.episodes=4",
    "rollout.concurrency=2",  # 2 JVMs per phase, not the recipe's 16 (16 demos started 16: ~1 s of CPU each)
]  # fmt: skip


def test_twx_coin_quickstart_recipe_tiny_budget(tmp_path):
    cwd = _scratch(tmp_path)
    done = _run("agent-rl quickstart --config configs/twx_coin.yaml", cwd, *TINY)
    assert "held-out success" in done.stdout, done.stdout[-2000:]
    summary = json.loads((cwd / "runs" / "twx_coin" / "summary.json").read_text())
    assert summary["sft"]["episodes"] == 4 and summary["rl"]["episodes"] == 4
    assert summary["sft"]["errors"] == 0 and summary["rl"]["errors"] == 0  # no JVM failure

"""The BFCL training recipe (docs/bfcl.md, "Training"; configs/bfcl_calls.yaml): SFT on the ground
truth's calls, then GRPO, then held-out evaluation of both.

* the SFT demonstrations are the ground truth token for token: the tokens with loss mask 1 decode to
  the replay policy's calls plus the end-of-turn token, and every demonstration scores 1;
* the documented command runs end to end with a reduced budget (a few SFT and GRPO steps) and
  writes its metrics and before/after summary; the documented diagnosis runs on its SFT model;
* the diagnosis finds the function name, argument names and values in a call's text.
"""

from __future__ import annotations

import json
import re
import shlex
import sys

import pytest

from tests import cli_runner
from tests.conftest import ROOT, cli_env

pytest.importorskip("bfcl_eval")
RECIPE = ROOT / "configs" / "bfcl_calls.yaml"


def _block(heading: str) -> str:
    doc = (ROOT / "docs" / "bfcl.md").read_text()
    section = doc.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"^```bash\n(.*?)^```$", section, re.DOTALL | re.MULTILINE)
    return block


def _training_block() -> str:
    return _block("Training")


def test_diagnosis_finds_the_parts_of_a_call():
    from envs.bfcl.diagnose import _part, _spans
    from tools.base import ToolCall

    call = ToolCall("f.g", {"a": 50, "b": "x y"})
    hermes = '<tool_call>\n{"name": "f.g", "arguments": {"a": 50, "b": "x y"}}\n</tool_call>'
    spans = _spans(hermes, [call])  # the key "a", not the first letter of "arguments"
    assert spans == {"name": [(22, 25)], "arg names": [(43, 44), (52, 53)], "values": [(47, 49), (56, 61)]}
    assert [_part(i + 0.5, spans) for i in (0, 22, 30, 43, 47, 56, 61)] == [
        "syntax",
        "name",
        "syntax",
        "arg names",
        "values",
        "values",
        "syntax",
    ]
    pythonic = "[f.g(a=50, b='x y')]"
    assert _spans(pythonic, [call]) == {"name": [(1, 4)], "arg names": [(5, 6), (11, 12)], "values": [(7, 9), (13, 18)]}


def test_demonstrations_are_the_ground_truth(tiny_model_dir):
    from agent_rl.commands.sft import demonstrations
    from agent_rl.config import load_config
    from agent_rl.run.envloader import bind_tool_format
    from agent_rl.run.runtime import Components
    from envs.bfcl import policies
    from envs.bfcl.calls import BfclCallsEnv

    cfg = load_config(RECIPE, [f"model.path={tiny_model_dir}"])
    components = Components(cfg)
    teacher = bind_tool_format(policies.replay, components.tool_format)
    groups = demonstrations(components, teacher, 6, seed=0)
    assert len(groups) == 6
    env = BfclCallsEnv(split="train", categories=cfg.env.options["categories"])
    tok = components.tokenizer
    for group in groups:
        [t] = group.trajectories_G
        assert t.reward == 1.0 and len(t.turns_N) == 1
        messages, _ = env.reset(options={"task": t.task_id})
        first = t.loss_mask_T.index(1)
        #  prompt (mask 0) ... | the calls + <|im_end|> (mask 1)
        assert t.loss_mask_T == [0] * first + [1] * (len(t.loss_mask_T) - first)
        assert tok.decode(t.token_ids_T[first:]) == teacher(messages) + "<|im_end|>"
        assert t.task_id.rsplit("_", 1)[0] in cfg.env.options["categories"]


@pytest.mark.slow
def test_documented_recipe_runs_with_a_small_budget(tmp_path):
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    [line] = _training_block().splitlines()
    argv = shlex.split(line)
    assert argv[:2] == ["agent-rl", "quickstart"]
    small = [
        "sft.demos=16",
        "sft.batch_size=8",
        "sft.max_steps=2",
        "sft.eval_every_steps=2",
        "sft.eval_episodes=4",
        "rollout.group_size=2",
        "trainer.prompts_per_step=2",
        "trainer.steps=2",
        "eval.episodes=4",
        "eval.k=2",
        "tracking.progress=false",
    ]
    done = cli_runner.run([*argv, *small], tmp_path, {**cli_env(), "PYTHONPATH": str(ROOT)}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SFT + RL" in done.stdout
    assert (
        float(re.search(r"teacher success ([0-9.]+)", done.stdout).group(1)) >= 0.9
    )  # the ground truth (a few cut at max_new_tokens)
    root = tmp_path / "runs" / "bfcl_calls"
    summary = json.loads((root / "summary.json").read_text())
    for phase in ("sft", "rl"):
        assert summary[phase]["tasks"] + summary[phase]["errors"] // 2 == 4  # 4 test tasks, 2 samples each
    [run_dir] = [p for p in root.glob("bfcl_calls-*") if not p.name.startswith("bfcl_calls-sft-")]
    steps = [json.loads(row)["step"] for row in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    [sft_dir] = root.glob("bfcl_calls-sft-*")
    sft_rows = [json.loads(row) for row in (sft_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in sft_rows] == [1, 2] and "sft/val_success" in sft_rows[-1]
    [line] = _block("Why the tiny model writes no call").splitlines()
    argv = shlex.split(line)
    assert argv[:3] == ["python", "-m", "envs.bfcl.diagnose"]
    done = cli_runner.run(
        [sys.executable, *argv[1:], "--tasks", "2"], tmp_path, {**cli_env(), "PYTHONPATH": str(ROOT)}, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r.split()[0]: r for r in done.stdout.splitlines() if r.split()[:1] in (["train"], ["val"])}
    assert set(rows) == {"train", "val"} and all(r.endswith("/2)") for r in rows.values())  # name whole: of 2 tasks

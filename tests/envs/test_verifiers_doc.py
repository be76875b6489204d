"""docs/ecosystem.md's verifiers commands, run as written from a user's directory: the scripted oracle
scores 1.000 and the wrong policy 0.000 through `agent-rl eval`, and a 2-step `agent-rl train` records
one segment per episode with no breaks, on the single-turn and the multi-turn tool taskset."""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from envs.openenv.venv import ensure_venv
from envs.verifiers.program import REQUIREMENTS, WARM
from tests import cli_runner
from tests.conftest import ROOT, cli_env
from tests.envs.conftest import INIT_TINY
from tests.envs.test_openenv_doc import commands, make_venv

SHARED = ("make verifiers-venv", INIT_TINY)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["verifiers_sum", "verifiers_prices"])
def test_verifiers_ecosystem_commands_run_as_written(name, tmp_path, ecosystem_models):
    lines = commands(1)
    assert lines[:2] == list(SHARED) and len(lines) == 8
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    make_venv("verifiers", lambda: ensure_venv("verifiers", REQUIREMENTS, post_install=[[str(WARM)]]))
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "models").symlink_to(ecosystem_models, target_is_directory=True)  # the init-model line's
    said = []
    for line in [x for x in lines if f"examples/{name}/" in x]:
        words = shlex.split(line)
        done = cli_runner.run([sys.executable, "-m", "agent_rl.cli", *words[1:]], tmp_path, cli_env(), timeout=600)
        assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        said.append(done.stdout + done.stderr)
    oracle, wrong, train = said
    assert "mean@1 1.000 [1.000, 1.000]  pass@1 1.000" in oracle and "(tasks=1, n=1, errors=0)" in oracle, oracle
    assert "mean@1 0.000 [0.000, 0.000]  pass@1 0.000" in wrong and "(tasks=1, n=1, errors=0)" in wrong, wrong
    assert "train done: 2 step(s)" in train and "hint: RL cannot learn here" in train, train[-2000:]
    [run_dir] = (tmp_path / "runs").glob(f"{name}-grpo-*")
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:  # one segment per episode, no breaks: the learner trains on the ids the policy sampled
        assert row["proxy/segments"] == row["rollout/episodes"] == 2 and row["proxy/segment_breaks"] == 0
        assert row["train/mismatch_logprob_abs_max"] < 1e-4
    if name == "verifiers_prices":  # three calls each (two tool calls, then the answer), spliced into one segment
        runs = (tmp_path / "runs").glob(f"{name}-eval-*")
        [evals] = [d for d in runs if json.loads((d / "eval.json").read_text())["success"] == 1.0]
        rows = [json.loads(x) for x in (evals / "trajectories" / "eval.jsonl").read_text().splitlines()]
        assert [(len(r["turns_N"]), r["info"]["segment_breaks"], r["reward"]) for r in rows] == [(3, 0, 1.0)]

"""pass@k / mean@k estimators with hand-computed values, and `agent-rl eval` end to end."""

from __future__ import annotations

import json

import pytest

from agent_rl.commands.eval import run_eval
from agent_rl.config import load_config
from agent_rl.core.types import StopReason, Trajectory
from agent_rl.train.evaluation import bootstrap_ci, pass_at_k, score
from tests import cli_runner
from tests.builders import trajectory
from tests.conftest import ROOT, cli_env

CODE = str(ROOT / "configs" / "code_exec.yaml")


def test_pass_at_k_unbiased_estimator():
    # n=5 samples, c=2 correct: 1 - C(3,k)/C(5,k)
    assert pass_at_k(5, 2, 1) == pytest.approx(2 / 5)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)
    assert pass_at_k(5, 2, 4) == 1.0  # n - c < k: some draw of 4 always holds a correct one
    assert pass_at_k(8, 0, 8) == 0.0 and pass_at_k(8, 8, 1) == 1.0


def test_bootstrap_interval_over_tasks():
    assert bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5)
    assert bootstrap_ci([0.0, 1.0]) == (0.0, 1.0)  # resampled means 0, 0.5, 1 with p 1/4, 1/2, 1/4
    # [0,0,0,1]: P(mean = 0) = (3/4)^4 = 0.32 > 2.5%; P(mean >= 3/4) = 13/256 = 5.1% > 2.5% > P(mean = 1) = 0.4%
    assert bootstrap_ci([0.0, 0.0, 0.0, 1.0]) == (0.0, 0.75)
    assert bootstrap_ci([]) == (0.0, 1.0)


def _traj(group: str, reward: float | None, turns: int = 1) -> Trajectory:
    from agent_rl.core.types import Turn

    stop = StopReason.DONE if reward is not None else StopReason.INFRA_ERROR
    return trajectory(f"{group}-{id(object())}", reward, ids=[1, 2], mask=[0, 1], turns=[Turn(1, 2, 2, 2)] * turns,
                      task=f"task-{group}", group=group, stop=stop)  # fmt: skip


def test_score_per_task_errors_excluded_and_counted():
    trajectories = (
        [_traj("a", r) for r in (1.0, 0.0, 1.0, 0.0)]  # mean 0.5, pass@4 = 1 (n - c = 2 < 4)
        + [_traj("b", r) for r in (0.0, 0.0, 0.5, 0.0)]  # mean 0.125 (partial credit), pass@4 = 0
        + [_traj("c", r, turns=2) for r in (1.0, 1.0, None, 1.0)]  # 3 scored: mean 1, pass@3 = 1
        + [_traj("d", None), _traj("d", None)]  # only errors: no score, 2 errors
    )
    r = score(trajectories, k=4)
    assert (r.tasks, r.episodes, r.errors) == (3, 11, 3)
    assert r.success == pytest.approx((0.5 + 0.125 + 1.0) / 3)
    assert r.pass_at_k == pytest.approx(2 / 3)
    assert r.multi_turn == pytest.approx(4 / 14)
    assert [(t.group_id, t.samples, t.correct, t.errors, t.pass_at_k) for t in r.per_task] == [
        ("a", 4, 2, 0, 1.0),
        ("b", 4, 0, 0, 0.0),
        ("c", 3, 3, 1, 1.0),
        ("d", 0, 0, 2, 0.0),
    ]
    assert r.pass_at_k_ci == bootstrap_ci([1.0, 0.0, 1.0]) and r.success_ci == bootstrap_ci([0.5, 0.125, 1.0])


def test_cli_eval_with_a_scripted_policy(tmp_path, tiny_model_dir):
    """`agent-rl eval` on CodeExec-v0 with the canonical solutions standing in for the model."""
    run_dir = tmp_path / "run"
    r = cli_runner.run(
        [
            "agent-rl",
            "eval",
            CODE,
            f"model.path={tiny_model_dir}",
            "eval.episodes=3",
            "eval.k=2",
            "eval.policy=envs.code_exec.policies:canonical",
            f"run.dir={run_dir}",
        ],
        ROOT,
        cli_env(),
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "mean@2 1.000 [1.000, 1.000]  pass@2 1.000 [1.000, 1.000]  (tasks=3, n=6, errors=0)" in r.stdout
    # piped: a progress line per episode (6 < 20), the last with the running success, then the summary
    lines = [line for line in r.stdout.splitlines() if line.startswith("eval episode")]
    assert [line.split(" | ")[0] for line in lines] == [f"eval episode {i}/6" for i in range(1, 7)]
    assert lines[-1].startswith("eval episode 6/6 | success 1.000 | errors 0 | ")
    assert r.stdout.index("eval episode 6/6") < r.stdout.index("mean@2")
    assert f"written to {run_dir} (eval.json, trajectories/eval.jsonl)" in r.stdout
    summary = json.loads((run_dir / "eval.json").read_text())
    assert summary["ci_method"] == "95% percentile bootstrap over tasks" and len(summary["per_task"]) == 3
    lines = (run_dir / "trajectories" / "eval.jsonl").read_text().splitlines()
    assert len(lines) == 6 and all(json.loads(line)["reward"] == 1.0 for line in lines)


@pytest.mark.docker
def test_eval_counts_infrastructure_failures_as_errors(tmp_path, tiny_model_dir, monkeypatch):
    """A sandbox that cannot start (here: docker without its image) is an error, never a 0."""
    monkeypatch.setenv("AGENT_RL_SANDBOX_IMAGE", "agent-rl-no-such-image:0")
    cfg = load_config(
        CODE,
        [
            f"model.path={tiny_model_dir}",
            "eval.episodes=2",
            "eval.k=2",
            "sandbox.backend=docker",
            "eval.policy=envs.code_exec.policies:stub",
            f"run.dir={tmp_path}",
        ],
    )
    result, _ = run_eval(cfg, log=lambda *a: None)
    assert (result.errors, result.episodes, result.tasks) == (4, 0, 0)


def test_eval_config_mistakes_name_the_key(tiny_model_dir, tmp_path):
    cfg = load_config(CODE, [f"model.path={tmp_path / 'nothing'}", "eval.policy=envs.code_exec.policies:canonical"])
    with pytest.raises(ValueError, match="config key 'model.path': cannot load a tokenizer from .*init-model tiny"):
        run_eval(cfg)
    cfg = load_config(CODE, [f"model.path={tiny_model_dir}", "eval.policy=envs.code_exec.policies:nope"])
    with pytest.raises(ValueError, match="config key 'eval.policy': cannot load 'envs.code_exec.policies:nope'"):
        run_eval(cfg)
    # Arithmetic has no fixed task set, so no split 'all': the error comes before any episode runs
    cfg = load_config(ROOT / "configs" / "quickstart.yaml", [f"model.path={tiny_model_dir}", "eval.split=all"])
    with pytest.raises(ValueError, match="config key 'eval.split': unknown split 'all'; known: train, val, test"):
        run_eval(cfg)


def test_eval_with_the_model_through_the_hf_backend(tmp_path, tiny_model_dir):
    cfg = load_config(
        ROOT / "configs" / "quickstart.yaml",
        [
            f"model.path={tiny_model_dir}",
            "sandbox.backend=process",
            "rollout.max_new_tokens=8",
            "eval.episodes=3",
            "eval.k=2",
            f"run.dir={tmp_path}",
        ],
    )
    result, run_dir = run_eval(cfg, log=lambda *a: None)
    assert (result.tasks, result.episodes + result.errors) == (3, 6) and len(result.per_task) == 3
    rows = [json.loads(line) for line in (run_dir / "trajectories" / "eval.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(sum(r["loss_mask_T"]) > 0 for r in rows)  # the model generated every turn

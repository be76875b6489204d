"""Resuming asynchronous training: groups drawn ahead of the checkpoint are produced again, not lost
or drawn anew, and none is trained twice.

An episode is its (task seed, group id, sample seed). A resumed run must train on exactly the
multiset of episodes of the uninterrupted run. The runs steer their task draws (a pool of tasks,
Kimi's curriculum filter), so a plan drawn again after the resume would draw other tasks: the
checkpoint has to hold the plans drawn ahead.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

from agent_rl.learner import checkpoint as ckpt
from agent_rl.train.trainer import Trainer
from tests import cli_runner
from tests.conftest import ROOT, cli_env
from tests.distributed.conftest import small_config
from tests.distributed.helpers import record_rollouts
from tests.test_trainer import SMALL

STEERED = [
    "trainer.task_pool=12",
    "algorithm.filters=[{name: curriculum, anneal_steps: 100}]",
    "tracking.save_trajectories=100",  # every episode of a step (2 groups of 2)
]


def trained_episodes(run_dir: Path) -> Counter[tuple[int, str, int]]:
    """The (task seed, group id, sample seed) of every episode the run's steps trained on."""
    keys: Counter[tuple[int, str, int]] = Counter()
    for path in sorted((run_dir / "trajectories").glob("step_*.jsonl")):
        for line in path.read_text().splitlines():
            d = json.loads(line)
            keys[(d["info"]["seed"], d["group_id"], d["info"]["sample_seed"])] += 1
    return keys


def uninterrupted(tmp_path: Path, model_dir: Path, *overrides: str) -> Counter[tuple[int, str, int]]:
    return trained_episodes(
        Trainer(small_config(tmp_path / "uninterrupted", model_dir, *overrides), log=lambda *a: None).train()
    )


def test_a_checkpoint_with_groups_in_flight_resumes_them(tmp_path, tiny_model_dir):
    overrides = ["trainer.steps=5", "distributed.max_staleness=2", *STEERED]  # two steps produced ahead
    expected = uninterrupted(tmp_path, tiny_model_dir, *overrides)
    assert sum(expected.values()) == 5 * 4 and max(expected.values()) == 1

    cfg = small_config(tmp_path / "resumed", tiny_model_dir, *overrides)
    first = Trainer(cfg, log=lambda *a: None)
    try:
        for step in range(3):
            first.step(step)
        checkpoint = first.save_checkpoint(3)  # steps 3 and 4 drawn: queued, running or buffered
    finally:
        first.rollouts.close()
    plans = torch.load(checkpoint / "trainer.pt", weights_only=False)["rollouts"]["plans"]
    assert sorted(plans) == [(3, 0), (4, 0)]
    assert [s["group_id"] for s in plans[(3, 0)]["specs"]] == ["s3r0p0", "s3r0p0", "s3r0p1", "s3r0p1"]

    resumed = Trainer(cfg, resume=str(first.run_dir), log=lambda *a: None)
    draws, draw = [], resumed.sampler.draw
    resumed.sampler.draw = lambda step, round_, n: draws.append((step, round_)) or draw(step, round_, n)
    record = record_rollouts(resumed)
    resumed.train()
    assert draws == []  # both steps ran the checkpoint's plans
    assert [(s, v) for s, v, _ in record.calls] == [(3, 3), (4, 4)]
    assert all(v <= 2 for v in record.staleness_values())
    assert trained_episodes(first.run_dir) == expected


def test_a_step_that_fails_after_its_rollout_runs_the_same_groups_again(tmp_path, tiny_model_dir):
    overrides = ["trainer.steps=4", "distributed.max_staleness=1", *STEERED]
    expected = uninterrupted(tmp_path, tiny_model_dir, *overrides)
    cfg = small_config(tmp_path / "failed", tiny_model_dir, *overrides)
    first = Trainer(cfg, log=lambda *a: None)
    inner = first.rollouts.rollout

    def rollout(step: int, round_: int, n: int):
        out = inner(step, round_, n)  # handed over, never trained
        if step == 1:
            raise RuntimeError("the step fails after its rollout")
        return out

    first.rollouts.rollout = rollout
    with pytest.raises(RuntimeError, match="fails after its rollout"):
        first.train()
    plans = torch.load(first.run_dir / "checkpoints" / "step_000001" / "trainer.pt", weights_only=False)["rollouts"][
        "plans"
    ]
    assert sorted(plans) == [(1, 0), (2, 0)]  # the failed step's groups and those drawn ahead

    resumed = Trainer(cfg, resume=str(first.run_dir), log=lambda *a: None)
    record = record_rollouts(resumed)
    resumed.train()
    assert [(s, v) for s, v, _ in record.calls] == [(1, 1), (2, 2), (3, 3)]
    assert all(v <= 1 for v in record.staleness_values())
    assert trained_episodes(first.run_dir) == expected


def test_kill_9_between_checkpoints_then_resume(tmp_path, tiny_model_dir):
    steps = 10
    overrides = [f"trainer.steps={steps}", "distributed.max_staleness=1", "trainer.save_every=1", *STEERED]
    expected = uninterrupted(tmp_path, tiny_model_dir, *overrides)
    run_dir = tmp_path / "killed"
    train = [sys.executable, "-m", "agent_rl.cli", "train"]
    config = [
        str(ROOT / "configs" / "quickstart.yaml"),
        f"run.dir={run_dir}",
        f"model.path={tiny_model_dir}",
        *SMALL,
        *overrides,
    ]
    env = {**cli_env(), "OMP_NUM_THREADS": "1"}
    proc = cli_runner.start([*train, *config], ROOT, env)  # forked from the preloaded server: no imports to wait for
    try:
        after, delay_s = random.randint(1, steps // 2), random.uniform(0.0, 0.3)  # a step takes ~0.3 s here
        deadline = time.monotonic() + 120
        while not (run_dir / "checkpoints" / f"step_{after:06d}").is_dir():
            assert proc.poll() is None, proc.stderr.read_text()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(delay_s)
        assert proc.poll() is None, (
            f"the run ended before it could be killed ({delay_s:.2f} s after checkpoint {after})"
        )
        proc.kill()  # SIGKILL
        assert proc.wait(timeout=30) == -9
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    last = ckpt.latest(run_dir / "checkpoints")
    assert last is not None and after <= int(last.name[5:]) < steps, (after, delay_s, last)

    resumed = cli_runner.run([*train, "--resume", str(run_dir)], ROOT, env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed {run_dir} at step {int(last.name[5:])}" in resumed.stdout
    assert trained_episodes(run_dir) == expected
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(m.get("distributed/staleness_max", 0) <= 1 for m in steps)

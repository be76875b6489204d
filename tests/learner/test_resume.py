"""Kill -9 a training run (between steps, and during a checkpoint write), resume: identical metrics.

Subprocess runs of ``agent-rl train`` with deterministic CPU settings (one thread, seeded
sampling); an entropy bonus makes every step move the weights, so any state that is not restored
exactly (weights, Adam moments, scheduler, RNG, data position, version) changes later metrics.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests import cli_runner
from tests.conftest import ROOT
from tests.learner.helpers import env, run, train_cmd

ARGS = [
    "sandbox.backend=process",
    "rollout.group_size=2",
    "rollout.max_new_tokens=8",
    "rollout.max_turns=1",
    "trainer.prompts_per_step=2",
    "trainer.steps=6",
    "trainer.save_every=1",
    "learner.lr=0.01",
    "learner.lr_schedule=cosine",
    "learner.warmup_steps=2",
    "algorithm.loss_options.entropy_coef=0.05",
    "tracking.loggers=[]",
    "tracking.progress=false",
    "tracking.save_trajectories=0",
]


def metrics_by_step(run_dir: Path) -> dict[int, dict[str, float]]:
    """The last logged metrics of each step (a killed step may have been logged before the kill)."""
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        out[row.pop("step")] = {k: v for k, v in row.items() if not k.startswith("time/") and "latency" not in k}
    return out


@pytest.mark.distributed
def test_kill_and_resume_gives_the_uninterrupted_metrics(tmp_path, tiny_model_dir):
    base = [str(ROOT / "configs" / "quickstart.yaml"), f"model.path={tiny_model_dir}", *ARGS]
    ref_dir, killed_dir = tmp_path / "ref", tmp_path / "killed"
    r = run(train_cmd(*base, f"run.dir={ref_dir}"))
    assert r.returncode == 0, r.stderr[-3000:]

    # kill -9 between steps 3 and 4: as soon as checkpoint 3 is complete
    proc = cli_runner.start(train_cmd(*base, f"run.dir={killed_dir}"), ROOT, env())  # forked from the preloaded server
    ckpts = killed_dir / "checkpoints"
    deadline = time.time() + 240
    while not (ckpts / "step_000003").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.kill()  # SIGKILL
    proc.wait()
    done = sorted(p.name for p in ckpts.glob("step_*"))
    assert done[-1] in ("step_000003", "step_000004") and "step_000006" not in done

    # resume, and kill it again inside the write of checkpoint 5 (shards written, not yet renamed)
    r = run(train_cmd("--resume", str(killed_dir)), AGENT_RL_FAULT_KILL_IN_CHECKPOINT="5")
    assert r.returncode == -signal.SIGKILL, r.stderr[-3000:]
    assert (ckpts / ".tmp_step_000005" / "dcp").is_dir() and not (ckpts / "step_000005").exists()

    r = run(train_cmd("--resume", str(killed_dir)))  # picks step 4, the newest complete one
    assert r.returncode == 0, r.stderr[-3000:]
    assert "at step 4" in r.stdout + r.stderr
    ref, resumed = metrics_by_step(ref_dir), metrics_by_step(killed_dir)
    for step in (4, 5, 6):
        assert resumed[step] == ref[step], step
    assert ref[4]["train/loss"] != ref[5]["train/loss"]  # the steps really differ
    assert not (ckpts / ".tmp_step_000005").exists() and (ckpts / "step_000006" / "model" / "config.json").exists()

"""``learner.world_size=2`` from ``agent-rl train``: the same rollouts and updates as one process,
and the exported policy loads with ``from_pretrained``."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tests.conftest import ROOT
from tests.learner.helpers import run, train_cmd

ARGS = [
    "sandbox.backend=process",
    "rollout.group_size=2",
    "rollout.max_new_tokens=8",
    "rollout.max_turns=1",
    "trainer.prompts_per_step=2",
    "trainer.steps=2",
    "learner.lr=0.01",
    "learner.micro_batch_size=1",
    "algorithm.loss_options.entropy_coef=0.05",
    "tracking.loggers=[]",
    "tracking.progress=false",
    "tracking.save_trajectories=0",
]


@pytest.mark.distributed
def test_two_learner_ranks_equal_one_process(tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = [str(ROOT / "configs" / "quickstart.yaml"), f"model.path={tiny_model_dir}", *ARGS]
    dirs = {n: tmp_path / f"w{n}" for n in (1, 2)}
    for n, d in dirs.items():
        r = run(train_cmd(*base, f"learner.world_size={n}", f"run.dir={d}"))
        assert r.returncode == 0, r.stderr[-3000:]
    rows = {n: [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()] for n, d in dirs.items()}
    assert len(rows[1]) == len(rows[2]) == 2
    for one, two in zip(rows[1], rows[2], strict=True):
        # rank 0 sampled the same episodes (weights synced from the sharded learner)
        for k in ("rollout/reward_mean", "rollout/generated_tokens", "train/tokens"):
            assert one[k] == two[k], k
        for k in ("train/loss", "train/grad_norm", "train/update_ratio", "loss/entropy"):
            assert math.isclose(one[k], two[k], rel_tol=1e-5), (k, one[k], two[k])
        assert two["time/weight_sync_s"] > 0
    # the exported policies (full state dict gathered on rank 0) load and agree
    models = {
        n: AutoModelForCausalLM.from_pretrained(d / "checkpoints" / "step_000002" / "model") for n, d in dirs.items()
    }
    AutoTokenizer.from_pretrained(dirs[2] / "checkpoints" / "step_000002" / "model")
    ref = models[1].state_dict()
    for k, v in models[2].state_dict().items():
        assert float((v - ref[k]).norm() / ref[k].norm().clamp(min=1e-12)) <= 1e-5, k
    init = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    assert any(not torch.equal(init[k], v) for k, v in ref.items())  # it trained
    assert sorted(p.name for p in (dirs[2] / "checkpoints" / "step_000002").iterdir()) == [
        "dcp",
        "model",
        "rank_0.pt",
        "rank_1.pt",
        "trainer.pt",
    ]

"""Rollout workers on Ray: same results as one process, the staleness bound, dead workers replaced."""

from __future__ import annotations

import math

import pytest
import torch

from tests.distributed.conftest import small_config
from tests.distributed.helpers import (
    assert_one_worker_replaced_and_nothing_lost,
    run_killing_a_worker,
    run_steps,
    trajectory_key,
)

pytestmark = pytest.mark.distributed


def test_ray_synchronous_equals_local(ray_cluster, tmp_path, tiny_model_dir):
    lr = "learner.lr=0.05"  # large enough that step 1 samples from visibly different weights
    local, local_rec, _ = run_steps(small_config(tmp_path / "local", tiny_model_dir, lr), steps=2)
    ray_cfg = small_config(
        tmp_path / "ray",
        tiny_model_dir,
        lr,
        "distributed.backend=ray",
        "distributed.ray.num_rollout_workers=2",
        "distributed.ray.placement_strategy=SPREAD",
        "distributed.ray.sandbox_pools=false",
    )
    remote, ray_rec, metrics = run_steps(ray_cfg, steps=2)
    for (s1, v1, ts1), (s2, v2, ts2) in zip(local_rec.calls, ray_rec.calls, strict=True):
        assert (s1, v1) == (s2, v2)
        assert [trajectory_key(t) for t in ts1] == [trajectory_key(t) for t in ts2]
        # the same tokens from batches of other shapes: logprobs equal up to float rounding
        for t1, t2 in zip(ts1, ts2, strict=True):
            torch.testing.assert_close(
                torch.tensor(t1.rollout_logprobs_T), torch.tensor(t2.rollout_logprobs_T), rtol=0, atol=1e-5
            )
    assert [u.policy_version for _, _, ts in ray_rec.calls for t in ts for u in t.turns_N][-1] == 1
    for (name, p1), p2 in zip(
        local.components.model.state_dict().items(), remote.components.model.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(p1, p2, rtol=0, atol=1e-5, msg=name)
    assert metrics[1]["distributed/staleness_max"] == 0


def test_killed_worker_is_replaced_and_nothing_is_lost(ray_cluster, tmp_path, tiny_model_dir):
    import ray

    from tests.distributed.test_async import LATENCY_ENV

    cfg = small_config(
        tmp_path,
        tiny_model_dir,
        "distributed.backend=ray",
        "distributed.max_staleness=1",
        "distributed.ray.num_rollout_workers=2",
        *LATENCY_ENV,
    )
    source, victim, record, metrics = run_killing_a_worker(cfg, lambda victim: ray.kill(victim.actor))
    assert_one_worker_replaced_and_nothing_lost(source, victim, record, metrics)


def test_two_rank_learner_group_over_ray_equals_one_process(ray_cluster, tmp_path, tiny_model_dir):
    from agent_rl.config import load_config
    from agent_rl.distributed import make_learner
    from agent_rl.models.loading import load_model
    from tests.learner.helpers import parts, step_batch
    from tests.learner.test_learner import one_step, update_rel_diff

    single = one_step(str(tiny_model_dir), "prompt_mean", 2, 5)
    cfg = load_config(
        None,
        [
            f"model.path={tiny_model_dir}",
            "learner.lr=1e-3",
            "learner.micro_batch_size=2",
            "learner.adam_eps=1e-6",
            "distributed.backend=ray",
            "learner.world_size=2",
            "distributed.ray.learner_placement_strategy=SPREAD",
        ],
    )
    torch.manual_seed(0)
    replica = load_model(str(tiny_model_dir), "float32", "cpu")
    before = {k: v.clone() for k, v in replica.state_dict().items()}
    group = make_learner(cfg, replica, temperature=0.9)
    try:
        batch, adv_BT = step_batch(replica.config.vocab_size, B=5)
        metrics = group.update(batch, adv_BT, parts("prompt_mean"))
    finally:
        group.close()
    update = {k: v - before[k] for k, v in replica.state_dict().items()}
    assert group.version == 1
    assert update_rel_diff(update, single["update"]) <= 1e-5  # the driver's replica took the group's step
    for k in ("train/loss", "train/grad_norm", "train/mismatch_kl"):
        assert math.isclose(metrics[k], single["metrics"][k], rel_tol=1e-5), k
    assert metrics["train/tokens"] == 9 + 6 + 4 + 9 + 2

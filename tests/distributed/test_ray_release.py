"""A Ray run that fails (at start or mid-way) releases what it holds in this process: the next run places its
workers at once."""

from __future__ import annotations

import threading

import pytest

from agent_rl.train.trainer import Trainer
from tests.distributed.conftest import small_config
from tests.distributed.test_async import LATENCY_ENV

pytestmark = pytest.mark.distributed

RAY = ["distributed.backend=ray", "distributed.ray.num_rollout_workers=2", "distributed.ray.sandbox_pools=false"]


def test_a_failed_ray_run_releases_its_workers_and_the_next_run_starts(ray_cluster, tmp_path, tiny_model_dir):
    import ray
    from ray.util import placement_group_table

    # a run that fails after its workers were placed: --resume of a directory without a checkpoint
    cfg = small_config(tmp_path / "empty", tiny_model_dir, *RAY, "distributed.max_staleness=1")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no complete checkpoint"):
        Trainer(cfg, resume=str(tmp_path / "empty"), log=lambda *a: None)
    # a run that fails mid-way: a worker dies (as Ray's OOM killer kills it) and may not be replaced
    cfg = small_config(
        tmp_path / "failed", tiny_model_dir, *RAY, "distributed.max_staleness=1", "trainer.steps=3",
        "distributed.ray.max_worker_restarts=0", "distributed.ray.startup_timeout_s=60", *LATENCY_ENV,
    )  # fmt: skip
    trainer = Trainer(cfg, log=lambda *a: None)
    source = trainer.rollouts
    victim, inner = source.group.handles()[0], source.rollout

    def rollout(step: int, round_: int, n: int):
        if step == 1:
            threading.Timer(0.2, ray.kill, args=(victim.actor,)).start()
        return inner(step, round_, n)

    source.rollout = rollout
    with pytest.raises(
        RuntimeError, match=r"died and 0 were already replaced \(distributed.ray.max_worker_restarts=0\)"
    ):
        trainer.train()
    assert placement_group_table(source.group.pg)["state"] == "REMOVED"
    # the cluster has 2 CPUs: a placement group left behind by either would keep the next run from
    # placing its 2 workers (it would wait out startup_timeout_s and stop)
    cfg = small_config(
        tmp_path / "next", tiny_model_dir, *RAY, "trainer.steps=1", "distributed.ray.startup_timeout_s=60"
    )
    assert (Trainer(cfg, log=lambda *a: None).train() / "metrics.jsonl").is_file()

"""``agent-rl train ... distributed.backend=ray learner.world_size=2``: the trainer loop in this (driver)
process, the two FSDP2 ranks as Ray actors; its weights equal the one-process run's, a resumed run
continues with the ranks' AdamW moments, and a rank that dies leaves a checkpoint of the replica."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file

from agent_rl.train.trainer import train as run_training
from tests.distributed.conftest import small_config

pytestmark = pytest.mark.distributed

# an entropy bonus and a visible learning rate: every step moves the weights, so AdamW moments that
# restarted from zero on resume would change step 3's update
TRAIN = ["learner.lr=0.01", "algorithm.loss_options.entropy_coef=0.05", "learner.micro_batch_size=2"]
# two ranks of half a CPU and one rollout worker fit the session's two one-CPU nodes
RAY_GROUP = [
    "distributed.backend=ray",
    "learner.world_size=2",
    "distributed.ray.learner_cpus_per_rank=0.5",
    "distributed.ray.num_rollout_workers=1",
    "distributed.ray.sandbox_pools=false",
]


def weights(run_dir, step: int) -> dict[str, torch.Tensor]:
    """The exported policy of checkpoint ``step`` (the driver's replica under a Ray learner group)."""
    return load_file(run_dir / "checkpoints" / f"step_{step:06d}" / "model" / "model.safetensors")


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k, v in a.items():
        torch.testing.assert_close(v, b[k], rtol=0, atol=1e-5, msg=k)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, tiny_model_dir):
    """The plain one-process run, 3 steps, checkpoints after steps 2 and 3."""
    root = tmp_path_factory.mktemp("one")
    cfg = small_config(root, tiny_model_dir, *TRAIN, "trainer.steps=3", "trainer.save_every=2")
    return run_training(cfg)


@pytest.fixture(scope="module")
def ray_group_run(ray_cluster, tmp_path_factory, tiny_model_dir):
    """The same run's first 2 steps with the learner as a Ray group of 2 ranks, through ``run_training``."""
    import ray

    root = tmp_path_factory.mktemp("ray")
    run_dir = run_training(small_config(root, tiny_model_dir, *TRAIN, *RAY_GROUP, "trainer.steps=2"))
    # the rank actors and the rollout workers were released; the session's Ray instance stays
    assert ray.is_initialized() and all(p["state"] == "REMOVED" for p in ray.util.placement_group_table().values())
    return run_dir


def test_ray_learner_group_trains_like_one_process(ray_group_run, one_process):
    import torch.distributed as dist
    from torch.distributed.checkpoint import FileSystemReader

    assert not dist.is_initialized()  # the driver was no rank
    assert_same_weights(weights(ray_group_run, 2), weights(one_process, 2))
    ckpt = ray_group_run / "checkpoints" / "step_000002"
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "dcp",
        "driver.pt",
        "model",
        "rank_0.pt",
        "rank_1.pt",
        "trainer.pt",
    ]
    keys = FileSystemReader(str(ckpt / "dcp")).read_metadata().state_dict_metadata
    assert any(k.startswith("policy.optimizer.state.") and k.endswith("exp_avg_sq") for k in keys)  # AdamW's moments


def test_resumed_ray_learner_group_continues_with_the_same_moments(
    ray_group_run, one_process, tmp_path, tiny_model_dir
):
    import ray

    from agent_rl.distributed.learner_group import LearnerGroupError
    from agent_rl.train.trainer import Trainer

    run_dir = shutil.copytree(ray_group_run, tmp_path / "resumed")
    # what run_training(cfg, resume) runs, step by step (trainer.steps=4 leaves a step for the fault below)
    trainer = Trainer(
        small_config(tmp_path, tiny_model_dir, *TRAIN, *RAY_GROUP, "trainer.steps=4"), resume=str(run_dir)
    )
    assert (trainer.start_step, trainer.learner.version) == (2, 2)
    trainer._guarded_step(2)
    replica = {k: v.detach().clone() for k, v in trainer.components.model.state_dict().items()}
    assert_same_weights({k: replica[k] for k in weights(one_process, 3)}, weights(one_process, 3))
    two, three = weights(one_process, 2), weights(one_process, 3)
    assert any(not torch.equal(v, two[k]) for k, v in three.items())  # step 3 moved the weights

    # a rank dies: the step stops with a checkpoint of the replica's weights and no rank shards
    ray.kill(trainer.learner.ranks[1], no_restart=True)
    with pytest.raises(LearnerGroupError, match="learner rank died"):
        trainer._guarded_step(3)
    ckpt = run_dir / "checkpoints" / "step_000003"
    assert sorted(p.name for p in ckpt.iterdir()) == ["driver.pt", "model", "trainer.pt"]
    assert_same_weights(weights(run_dir, 3), {k: replica[k] for k in weights(run_dir, 3)})
    assert torch.load(ckpt / "driver.pt", weights_only=False)["policy_scheduler"]["last_epoch"] == 3
    assert all(p["state"] == "REMOVED" for p in ray.util.placement_group_table().values())  # ranks and workers released

"""lspo: cliff groups (all fail) get successful re-rolls of base + a scaffold adapter spliced in,
weighted by min(pi_base / pi_adapter, cap); the adapter never reaches the checkpoint."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from agent_rl.algorithms.losses.common import LossOptions, rollout_is_weights
from agent_rl.core.types import Trajectory, TrajectoryGroup
from agent_rl.methods.lspo import LspoConfig, LspoState, is_cliff, lspo_loss_options, splice
from tests.builders import trajectory


def traj(name: str, reward: float | None, gid: str = "g") -> Trajectory:
    return trajectory(name, reward, ids=[1, 2], mask=[0, 1], logprobs=[0.0, -0.5], group=gid)  # no reward: an env error


def test_cliffs_splicing_and_the_is_weights_by_hand():
    cfg = LspoConfig()  # max_splice_frac .5, success_threshold .5, is_cap 2
    assert is_cliff(TrajectoryGroup("task", "g", [traj("a", 0.0), traj("b", None)]), 0.5)  # errors are no successes
    assert not is_cliff(TrajectoryGroup("task", "g", [traj("a", 0.0), traj("b", 1.0)]), 0.5)
    assert not is_cliff(TrajectoryGroup("task", "g", [traj("b", None)]), 0.5)  # no valid reward: nothing to rescue
    group = TrajectoryGroup("task", "g", [traj(f"f{i}", 0.0) for i in range(4)])
    rerolls = [traj("w0", 1.0, "x"), traj("lose", 0.0, "x"), traj("w1", 1.0, "x"), traj("w2", 1.0, "x")]
    out, n = splice(group, rerolls, cfg)
    # 3 wins, at most floor(.5 * 4) = 2 rows replaced: the last two, by the first two wins
    assert n == 2
    assert [t.episode_id for t in out.trajectories_G] == ["f0", "f1", "w1", "w0"]
    assert [t.reward for t in out.trajectories_G] == [0.0, 0.0, 1.0, 1.0]
    assert [t.info.get("lspo_scaffold", False) for t in out.trajectories_G] == [False, False, True, True]
    assert {t.group_id for t in out.trajectories_G} == {"g"} and out.group_id == "g"
    # IS: mu = pi_adapter (sampler logprobs of spliced rows), pi_old = pi_base (the learner's)
    opts = LossOptions(**lspo_loss_options(cfg)).rollout_is
    base = torch.tensor([[0.0, -1.0, -0.2, -2.0]])
    adapter = torch.tensor([[0.0, -1.5, -1.2, -1.0]])
    x = SimpleNamespace(
        old_logprobs_BT=base, rollout_logprobs_BT=adapter, loss_mask_BT=torch.tensor([[0.0, 1.0, 1.0, 1.0]])
    )
    w = rollout_is_weights(x, opts)
    # exp(0.5) = 1.6487; exp(1.0) = 2.718 -> capped at 2; exp(-1) = 0.3679; off-mask log-ratio 0 -> 1
    assert w[0].tolist() == pytest.approx([1.0, math.exp(0.5), 2.0, math.exp(-1.0)], rel=1e-6)


def test_a_one_step_run_scaffolds_its_cliffs_and_checkpoints_the_base_only(tmp_path, tiny_model_dir):
    from tests.test_trainer import trainer

    t = trainer(
        tmp_path,
        tiny_model_dir,
        "algorithm.filters=[{name: lspo, sft_steps: 2}]",
        "trainer.steps=1",
        "trainer.prompts_per_step=1",
        "rollout.max_new_tokens=40",
        "rollout.max_turns=3",
    )
    assert t.plan.parts.options.rollout_is is not None  # the spliced rows' correction is on
    state = t.states["filter0"]
    assert state.run is t.services  # the RunAPI, not the trainer
    metrics = t.step(1)
    # the untrained tiny model fails every task: its group is a cliff; the teacher solves them
    assert metrics["lspo/cliffs"] == 1.0 and metrics["lspo/solutions"] >= 1.0
    assert metrics["lspo/sft_loss_last"] < metrics["lspo/sft_loss_first"]
    assert 0.0 <= metrics["lspo/spliced"] <= 1.0  # at most half of its group of 2
    assert "loss/rollout_is_mean" in metrics
    assert state.adapter is not None  # kept between steps ...
    assert state.state_dict() == {"steps": 1, "spliced_total": int(metrics["lspo/spliced"])}
    assert state.adapter is None  # ... and dropped at checkpoint
    assert not any("lora" in k for k in t.components.model.state_dict())  # the policy never got the adapter


def test_lspo_refuses_a_lora_policy(tmp_path, tiny_model_dir):
    from tests.test_trainer import trainer

    with pytest.raises(ValueError, match="learner.lora is set"):
        trainer(tmp_path, tiny_model_dir, "algorithm.filters=[{name: lspo}]", "learner.lora={rank: 2}")
    state = LspoState()
    with pytest.raises(ValueError, match=r"bind\(run, cfg\)"):
        from agent_rl.methods.lspo import lspo

        lspo([TrajectoryGroup("task", "g", [traj("a", 0.0)])], state, LspoConfig())

"""grpo_process (step rewards -> normalized reward-to-go) and sa_mrpo (saturation-weighted
components), hand-computed; sa_mrpo's need reads the env's info['reward_components']."""

from __future__ import annotations

import math

import pytest
import torch
from losses_helpers import assert_close

from agent_rl.algorithms.advantages.multi_reward import GrpoProcessConfig, SaMrpoConfig, grpo_process, sa_mrpo
from agent_rl.algorithms.needs import NEEDS, NeedContext
from agent_rl.algorithms.registry import AdvantageInputs
from agent_rl.core.types import Trajectory, TrajectoryGroup, Turn
from tests.builders import trajectory


def episode(step_rewards: list[float], components: dict | None = None) -> Trajectory:
    #  P  a0 a0 o  a1 a1   (two turns: tokens 1-2 and 4-5)
    turns = [Turn(1, 3, 3, 4, reward=step_rewards[0]), Turn(4, 6, 6, 6, reward=step_rewards[1])]
    info = {"reward_components": components} if components is not None else {}
    return trajectory("e", sum(step_rewards), ids=[1] * 6, mask=[0, 1, 1, 0, 1, 1], turns=turns, task="t", info=info)


def test_grpo_process_normalizes_the_groups_step_rewards_and_sums_them_to_go():
    trajs = [episode([0.5, 1.0]), episode([0.0, 0.0])]
    x = AdvantageInputs(rewards_B=torch.tensor([1.5, 0.0]), loss_mask_BT=torch.tensor([[0, 1, 1, 0, 1, 1]] * 2),
                        group_index_B=torch.tensor([0, 0]), turn_index_BT=torch.tensor([[-1, 0, 0, -1, 1, 1]] * 2),
                        groups=[TrajectoryGroup("t", "g", trajs)])  # fmt: skip
    # R = {.5, 1, 0, 0}: mean .375, population std sqrt(.6875 / 4)
    mean, std = 0.375, math.sqrt(0.6875 / 4) + 1e-6
    n = [[(0.5 - mean) / std, (1.0 - mean) / std], [-mean / std, -mean / std]]
    #  token        P   a0            a0            o   a1     a1
    expected = [[0.0, n[0][0] + n[0][1], n[0][0] + n[0][1], 0.0, n[0][1], n[0][1]],
                [0.0, n[1][0] + n[1][1], n[1][0] + n[1][1], 0.0, n[1][1], n[1][1]]]  # fmt: skip
    assert_close(grpo_process(x, GrpoProcessConfig()).advantages_BT, expected, atol=1e-5)
    # the in-reward KL comes off each step's reward: .5 on turn 1's tokens of row 0 makes its steps [.5, .5]
    x.kl_penalty_BT = torch.tensor([[0, 0, 0, 0, 0.25, 0.25], [0] * 6], dtype=torch.float32)
    mean, std = 0.25, math.sqrt((2 * 0.25**2 + 2 * 0.25**2) / 4) + 1e-6
    kl = grpo_process(x, GrpoProcessConfig()).advantages_BT
    assert_close(kl[0, [1, 4]], [2 * 0.25 / std, 0.25 / std], atol=1e-5)
    # without the step's groups: one step per row (its reward), normalized over the group's rows
    x.groups, x.kl_penalty_BT = None, None
    assert_close(grpo_process(x, GrpoProcessConfig()).advantages_BT[:, 1], [1.0, -1.0], atol=1e-5)


def test_sa_mrpo_discounts_saturated_components():
    groups = [TrajectoryGroup("t", "g", [episode([1.0, 0.0], {"correct": 1.0, "format": 1.0}),
                                         episode([0.0, 0.0], {"correct": 0.0, "format": 0.5})])]  # fmt: skip
    comps = NEEDS["reward_components"].compute(NeedContext(None, groups, 0, None, None))
    assert comps.tolist() == [[1.0, 1.0], [0.0, 0.5]]  # names sorted: correct, format
    x = AdvantageInputs(rewards_B=torch.tensor([2.0, 0.5]), loss_mask_BT=torch.ones(2, 1), group_index_B=torch.tensor([0, 0]),
                        extras={"reward_components": comps})  # fmt: skip
    #  correct [1, 0]:   z = [.7071, -.7071], saturation .5  -> w .5
    #  format  [1, .5]:  z = [.7071, -.7071], saturation .75 -> w .25
    z = 1 / math.sqrt(2)
    out = sa_mrpo(x, SaMrpoConfig(eps=0.0))
    assert_close(out.advantages_BT, [[0.75 * z], [-0.75 * z]], atol=1e-6)
    assert out.metrics == {"adv/sa_mrpo_weight_0": 0.5, "adv/sa_mrpo_weight_1": 0.25}
    assert "reward_components" in sa_mrpo_needs()
    with pytest.raises(ValueError, match="reward_components"):
        NEEDS["reward_components"].compute(
            NeedContext(None, [TrajectoryGroup("t", "g", [episode([0.0, 0.0])])], 0, None, None)
        )


def sa_mrpo_needs():
    from agent_rl.algorithms import ADVANTAGES

    return ADVANTAGES.get("sa_mrpo").needs_for(SaMrpoConfig())


def test_sa_mrpo_plan_computes_the_components_before_the_update():
    from test_plan import plan_of

    assert "reward_components" in plan_of("algorithm.advantage.name=sa_mrpo").precompute

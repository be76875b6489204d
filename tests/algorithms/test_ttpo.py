"""ttpo, test-time RL without labels: the label-free env hides the verdict, the vote filter makes
the pseudo-rewards and the teacher's context, the loss distils agreeing rows and penalizes the rest.
The reward source is never the hidden label: a wrong majority is rewarded, the right minority is not."""

from __future__ import annotations

import asyncio
import math

import gymnasium as gym
import pytest
import torch
from losses_helpers import assert_close, inputs, logs, loss_and_grad

from agent_rl.algorithms.filters.test_time import PENDING_CONTEXT, TtpoVoteConfig, majority, ttpo_vote
from agent_rl.algorithms.losses.distill_family import TtpoConfig, ttpo
from agent_rl.core.types import StopReason, Trajectory, TrajectoryGroup
from envs import rewards
from envs.arithmetic.policies import answer_text


def label_free_episode(env, seed: int, answer: str) -> tuple[Trajectory, dict]:
    async def run():
        _, reset_info = await env.areset(seed=seed)
        _, reward, done, _, info = await env.astep(answer_text(answer))
        return reset_info, reward, done, info

    reset_info, reward, done, info = asyncio.run(run())
    assert done and reward == 0.0  # the env's verdict never leaves it
    assert "correct" not in info and reset_info["teacher_context"] == PENDING_CONTEXT
    traj = Trajectory("t", "g", f"e{answer}", [1, 2], [0, 1], [0.0, 0.0], [], reward, StopReason.DONE,
                      info={**reset_info, **info})  # fmt: skip
    return traj, reset_info


def test_the_reward_is_the_vote_never_the_hidden_label():
    assert rewards.PENDING_CONTEXT == PENDING_CONTEXT
    env = rewards.LabelFreeEnv(gym.make("agent_rl/Arithmetic-v0", sandbox_backend="process"))
    _, reset_info = label_free_episode(env, 3, "0")
    assert "answer" not in reset_info["task"]  # the task replays without its label
    plain = gym.make("agent_rl/Arithmetic-v0", sandbox_backend="process")
    truth = str(plain.reset(seed=3)[1]["task"]["answer"])  # known to the test only
    plain.close()
    wrong = str(int(truth) + 1)
    # two episodes agree on a wrong answer, one gives the right one
    group = TrajectoryGroup("t", "g", [label_free_episode(env, 3, a)[0] for a in (wrong, wrong, truth)])
    assert [t.info["final_answer"] for t in group.trajectories_G] == [wrong, wrong, truth]
    out = ttpo_vote([group], None, TtpoVoteConfig())
    assert [t.reward for t in group.trajectories_G] == [1.0, 1.0, 0.0]  # the majority, not the label
    assert all(t.info["teacher_context"].endswith(f": {wrong}") for t in group.trajectories_G)
    assert out.metrics["filter/ttpo_vote_share"] == pytest.approx(2 / 3)
    env.close()


def test_the_vote_filter_refuses_an_env_that_is_not_label_free_and_drops_silent_groups():
    labelled = Trajectory("t", "g", "e", [1], [0], [0.0], [], 1.0, StopReason.DONE,
                          info={"final_answer": "3", "teacher_context": "Verified solution: 1 + 2 = 3"})  # fmt: skip
    with pytest.raises(ValueError, match="label-free"):
        ttpo_vote([TrajectoryGroup("t", "g", [labelled])], None, TtpoVoteConfig())
    silent = Trajectory("t", "g", "e", [1], [0], [0.0], [], 0.0, StopReason.MAX_TURNS, info={})
    assert ttpo_vote([TrajectoryGroup("t", "g", [silent])], None, TtpoVoteConfig()).groups == []
    assert majority(["a", "b", "b", None, "a"]) == "a" and majority([None]) is None  # ties: first seen


def test_ttpo_loss_by_hand():
    #  row  pseudo-reward  tokens (pi, q)            A
    #  0    1 (agree)      (.25, .5)  (.5, .51)      -    -> distil token 0 (delta ln2); token 1 converged (|delta| < .05)
    #  1    0 (disagree)   (.8, .1)   (.3, .1)       -1   -> RL on token 0 (pi .8 > .5 confident); token 1 skipped
    #  token mean over 4: d/dlogp = [-ln2/4, 0 | -A r /4 = .25, 0]
    lp = [logs([0.25, 0.5]), logs([0.8, 0.3])]
    x = inputs(lp, lp, [[0.0, 0.0], [-1.0, -1.0]], teacher_logprobs_BT=[logs([0.5, 0.51]), logs([0.1, 0.1])],
               rewards_B=[1.0, 0.0])  # fmt: skip
    _, grad = loss_and_grad(ttpo, TtpoConfig(), x)
    assert_close(grad, [[-math.log(2) / 4, 0.0], [0.25, 0.0]])
    assert ttpo(x, TtpoConfig()).metrics["loss/ttpo_agree_frac"] == 0.5
    assert torch.isfinite(ttpo(x, TtpoConfig()).loss_BT).all()

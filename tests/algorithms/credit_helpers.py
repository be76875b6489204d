"""Hand-built multi-turn trajectories and branch trees for the credit tests.

Token layout of ``traj``: ``prompt`` prompt tokens (mask 0), then per turn ``turn_len`` policy
tokens (mask 1) followed, except after the last turn, by ``obs_len`` observation tokens (mask 0):

    prompt=2, turn_len=2, obs_len=1, two turns:   P P a a o a a     (mask 0 0 1 1 0 1 1)
"""

from __future__ import annotations

import torch

from agent_rl.algorithms import CREDITS
from agent_rl.algorithms.registry import AdvantageInputs, AdvantageOutput
from agent_rl.core.types import StopReason, Trajectory, TrajectoryGroup, Turn
from agent_rl.rollout.batching import make_batch
from tests.builders import group_of, trajectory


def traj(
    episode: str,
    turn_rewards: list[float],
    keys: list[str | None] | None = None,
    *,
    reward: float | None = None,
    prompt: int = 2,
    turn_len: int = 2,
    obs_len: int = 1,
    valid: list[bool] | None = None,
    versions: list[int] | None = None,
    task: str = "t",
    parent: Trajectory | None = None,
    branch_point: int | None = None,
    topk_logprobs_TK: list[list[float]] | None = None,
) -> Trajectory:
    """A trajectory; with ``parent`` its tokens [0, branch_point) are a copy of the parent's."""
    n_turns = len(turn_rewards)
    keys = keys or [None] * n_turns
    valid = valid or [True] * n_turns
    versions = versions or [0] * n_turns
    ids, mask, turns = list(range(100, 100 + prompt)), [0] * prompt, []
    for k in range(n_turns):
        start = len(ids)
        ids += [10 + k] * turn_len
        mask += [1] * turn_len
        u = Turn(start, len(ids), len(ids), len(ids), turn_rewards[k], keys[k], valid[k], versions[k])
        if k + 1 < n_turns:
            ids += [5] * obs_len
            mask += [0] * obs_len
            u.obs_end = len(ids)
        turns.append(u)
    if parent is not None:
        assert branch_point is not None and mask[:branch_point] == parent.loss_mask_T[:branch_point]
        ids[:branch_point] = parent.token_ids_T[:branch_point]
    topk_ids = [[0] * len(c) for c in topk_logprobs_TK] if topk_logprobs_TK is not None else None
    return trajectory(
        episode, sum(turn_rewards) if reward is None else reward, ids=ids, mask=mask, turns=turns, task=task, group=f"{task}-g",
        stop=StopReason.DONE, topk_ids_TK=topk_ids, topk_logprobs_TK=topk_logprobs_TK,
        parent_id=parent.episode_id if parent is not None else None, branch_point=branch_point,
    )  # fmt: skip


group = group_of  # the trajectories as one group


def inputs(groups: list[TrajectoryGroup], **extra) -> AdvantageInputs:
    """The AdvantageInputs the trainer builds, from the real batching code."""
    batch = make_batch(groups, pad_token_id=0)
    return AdvantageInputs(
        rewards_B=batch.rewards_B, loss_mask_BT=batch.loss_mask_BT, group_index_B=batch.group_index_B,
        turn_index_BT=batch.turn_index_BT, task_ids_B=[t.task_id for g in groups for t in g.trajectories_G], **extra,
    )  # fmt: skip


def run(
    name: str, groups: list[TrajectoryGroup], state=None, x: AdvantageInputs | None = None, **cfg
) -> AdvantageOutput:
    entry = CREDITS.get(name)
    if state is None:
        state = entry.make_state()
    x = x if x is not None else inputs(groups)
    x.state, x.groups = state, groups
    out = entry.fn(x, CREDITS.parse_config({"name": name, **cfg}))
    mask_BT = out.loss_mask_BT if out.loss_mask_BT is not None else x.loss_mask_BT
    assert torch.all(out.advantages_BT[mask_BT == 0] == 0), "advantages must be 0 outside the loss mask"
    return out


def per_turn(out: AdvantageOutput, groups: list[TrajectoryGroup]) -> list[list[float]]:
    """The advantage of each turn of each row, checking it is constant over the turn's tokens."""
    rows = [t for g in groups for t in g.trajectories_G]
    result = []
    for i, t in enumerate(rows):
        vals = []
        for u in t.turns_N:
            a = out.advantages_BT[i, u.start : u.end]
            assert torch.allclose(a, a[0].expand_as(a)), a
            vals.append(float(a[0]))
        result.append(vals)
    return result


# ----------------------------------------------------------------------------------------------
# Shared examples.


def two_episode_example() -> list[TrajectoryGroup]:
    """The spec's 3.4 / 3b.3 example: tau1 s0 -> s1 -> success (R 10), tau2 s0 -> s2 -> failure (R 0)."""
    return [group(traj("tau1", [0, 10], ["s0", "s1"]), traj("tau2", [0, 0], ["s0", "s2"]))]


def cbpo_tree() -> list[TrajectoryGroup]:
    """Parent p (R 1) with c1 forked at token 4 (R 0) and c2 at token 6 (R 1); fallback f (R 0). 8-token turns."""
    p = traj("p", [1], turn_len=8)
    c1 = traj("c1", [0], turn_len=8, parent=p, branch_point=4)
    c2 = traj("c2", [1], turn_len=8, parent=p, branch_point=6)
    f = traj("f", [0], turn_len=8)
    return [group(p, c1, c2, f)]


def arpo_tree() -> list[TrajectoryGroup]:
    """Parent p (R 1, two turns: P P a a o a a) and a child forked at its second turn's start (R 0)."""
    p = traj("p", [0, 1])
    c = traj("c", [0, 0], parent=p, branch_point=5)
    return [group(p, c)]


def vine_tree() -> list[TrajectoryGroup]:
    """Main m (R 1, turn starts at 2 and 5); 4 continuations from each turn start: V = 0.5 at 2, 0.75 at 5."""
    m = traj("m", [0, 1])
    at2 = [traj(f"x{k}", [0, r], parent=m, branch_point=2) for k, r in enumerate([1, 0, 0, 1])]
    at5 = [traj(f"y{k}", [0, r], parent=m, branch_point=5) for k, r in enumerate([1, 1, 1, 0])]
    return [group(m, *at2, *at5)]

"""Grouping finished episodes and summarising them: what the trainer does between rollout and batch."""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from agent_rl.core.types import Trajectory, TrajectoryGroup


def group_trajectories(trajectories: list[Trajectory]) -> list[TrajectoryGroup]:
    groups: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault(t.group_id, []).append(t)
    return [TrajectoryGroup(ts[0].task_id, gid, ts) for gid, ts in groups.items()]


def rollout_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    scored = [t.reward for t in trajectories if t.reward is not None]
    stops = Counter(str(t.stop_reason) for t in trajectories)
    m = {
        "rollout/reward_mean": float(np.mean(scored)) if scored else 0.0,
        "rollout/episodes": float(len(trajectories)),
        "rollout/turns_mean": float(np.mean([len(t.turns_N) for t in trajectories])),
        "rollout/generated_tokens": float(sum(t.num_generated_tokens for t in trajectories)),
        "rollout/invalid_actions": float(sum(1 for t in trajectories for u in t.turns_N if not u.action_valid)),
    }
    m.update({f"rollout/stop_{k}": float(v) for k, v in stops.items()})
    return m


def short_groups(groups: list[TrajectoryGroup], group_size: int) -> list[TrajectoryGroup]:
    """The trainable groups with fewer than ``rollout.group_size`` episodes: episodes that ended in an
    env or infrastructure error were dropped from them, so their advantages come from fewer samples."""
    return [g for g in groups if len(g.trajectories_G) < group_size]


def advantages_by_episode(groups: list[TrajectoryGroup], advantages_BT: torch.Tensor) -> dict[str, list[float]]:
    """Per-token advantages of each trained episode, when the batch has one row per episode (concat)."""
    episodes = [t for g in groups for t in g.trajectories_G]
    if advantages_BT.shape[0] != len(episodes):
        return {}
    rows = advantages_BT.detach().float().cpu().tolist()
    return {
        t.episode_id: [round(a, 5) for a in row[: len(t.token_ids_T)]] for t, row in zip(episodes, rows, strict=True)
    }

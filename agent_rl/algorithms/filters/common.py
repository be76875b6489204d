"""Helpers shared by the filters: informative groups, copies with new rewards or masks."""

from __future__ import annotations

from dataclasses import replace

from agent_rl.core.types import Trajectory, TrajectoryGroup


def valid_rewards(group: TrajectoryGroup) -> list[float]:
    """Rewards of the group's trainable rows (None = env/infra error, never a failure)."""
    return [r for r in group.rewards_G if r is not None]


def is_informative(group: TrajectoryGroup, atol: float) -> bool:
    """At least two valid rewards that are not all equal (a nonzero group-relative advantage)."""
    rewards = valid_rewards(group)
    return len(rewards) >= 2 and max(rewards) - min(rewards) > atol


def pass_rate(group: TrajectoryGroup, correct_threshold: float) -> float | None:
    """Share of valid rewards above ``correct_threshold``; None without valid rewards."""
    rewards = valid_rewards(group)
    return sum(r > correct_threshold for r in rewards) / len(rewards) if rewards else None


def with_trajectories(group: TrajectoryGroup, trajectories_G: list[Trajectory]) -> TrajectoryGroup:
    """A new group of the same task and id holding ``trajectories_G``."""
    return TrajectoryGroup(task_id=group.task_id, group_id=group.group_id, trajectories_G=trajectories_G)


def add_to_rewards(group: TrajectoryGroup, deltas_G: list[float]) -> TrajectoryGroup:
    """A copy of ``group`` whose valid rewards are shifted by ``deltas_G`` (None rewards stay None)."""
    pairs = zip(group.trajectories_G, deltas_G, strict=True)
    return with_trajectories(
        group, [t if t.reward is None or d == 0.0 else replace(t, reward=t.reward + d) for t, d in pairs]
    )

"""The one trajectory builder of the tests: small hand-made episodes with exact masks.

A test describes its episode's layout by its loss mask (0: prompt and observations, 1: sampled
tokens) and gives what it checks; everything else has a plain default::

    #                    P  P  a0 a1
    trajectory("a", 1.0, mask=[0, 0, 1, 1])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_rl.core.types import StopReason, Trajectory, TrajectoryGroup, Turn


def trajectory(
    episode: str = "e",
    reward: float | None = 1.0,
    *,
    mask: Sequence[int] = (0, 1),
    ids: Sequence[int] | None = None,
    logprobs: Sequence[float] | None = None,
    turns: Sequence[Turn] = (),
    task: str = "task",
    group: str = "g",
    stop: StopReason | None = None,
    info: dict[str, Any] | None = None,
    **fields: Any,
) -> Trajectory:
    """``ids`` default to 0..T-1 and ``logprobs`` to 0; ``stop`` to DONE, or ENV_ERROR when ``reward``
    is None (an episode without a reward ended through no fault of the policy). ``fields``: any
    other ``Trajectory`` field (top-k, parent, branch point)."""
    T = len(mask)
    return Trajectory(
        task_id=task,
        group_id=group,
        episode_id=episode,
        token_ids_T=list(ids) if ids is not None else list(range(T)),
        loss_mask_T=list(mask),
        rollout_logprobs_T=list(logprobs) if logprobs is not None else [0.0] * T,
        turns_N=list(turns),
        reward=reward,
        stop_reason=stop if stop is not None else (StopReason.DONE if reward is not None else StopReason.ENV_ERROR),
        info=dict(info) if info is not None else {},
        **fields,
    )


def turn_mask(T: int, spans: Sequence[tuple[int, int]]) -> list[int]:
    """A loss mask of ``T`` tokens with 1 on each ``[start, end)`` span."""
    mask = [0] * T
    for s, e in spans:
        mask[s:e] = [1] * (e - s)
    return mask


def group_of(*trajectories: Trajectory) -> TrajectoryGroup:
    """The trajectories as one group (task and group id of the first)."""
    first = trajectories[0]
    return TrajectoryGroup(first.task_id, first.group_id, list(trajectories))

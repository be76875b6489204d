"""Group-level sampling filters: drop or replace groups whose rewards are all equal."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from pydantic import Field

from agent_rl.algorithms.filters.common import is_informative, with_trajectories
from agent_rl.algorithms.registry import ComponentConfig, FilterResult, register_filter
from agent_rl.core.types import Trajectory, TrajectoryGroup


class DynamicSamplingConfig(ComponentConfig):
    max_refill_rounds: int = Field(3, description="at most this many extra sampling rounds per step")
    atol: float = Field(1e-8, description="rewards closer than this count as equal")


@register_filter(
    "dynamic_sampling",
    config=DynamicSamplingConfig,
    status="paper",
    evidence="DAPO dynamic sampling (Yu et al. 2025); hand-computed in tests/algorithms/test_filters.py",
)
def dynamic_sampling(groups: list[TrajectoryGroup], state: object, cfg: DynamicSamplingConfig) -> FilterResult:
    """DAPO dynamic sampling (Yu et al. 2025): drop groups whose rewards are all equal.

    Keep a group iff 0 < #correct < G, generalized to: max(r) - min(r) > atol over its valid
    rewards. Such groups have zero group-relative advantage and only dilute the batch.
    ``num_more`` asks the trainer to sample that many more groups to refill the batch (it stops
    after ``max_refill_rounds``). Rows with reward None (infra/env errors) are ignored when comparing.
    """
    kept = [g for g in groups if is_informative(g, cfg.atol)]
    dropped = len(groups) - len(kept)
    return FilterResult(
        groups=kept,
        num_more=dropped,
        metrics={"filter/dynamic_sampling_dropped": float(dropped), "filter/dynamic_sampling_kept": float(len(kept))},
    )


def group_to_json(group: TrajectoryGroup) -> dict[str, Any]:
    return {
        "task_id": group.task_id,
        "group_id": group.group_id,
        "trajectories_G": [t.to_json() for t in group.trajectories_G],
    }


def group_from_json(d: dict[str, Any]) -> TrajectoryGroup:
    return TrajectoryGroup(d["task_id"], d["group_id"], [Trajectory.from_json(t) for t in d["trajectories_G"]])


class ReplayBuffer:
    """POPO's buffer of recent informative groups: [{"group", "step", "replays"}], newest last."""

    def __init__(self) -> None:
        self.step = 0  # calls of the filter so far
        self.entries: list[dict[str, Any]] = []

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "entries": [
                {"group": group_to_json(e["group"]), "step": e["step"], "replays": e["replays"]} for e in self.entries
            ],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.entries = [
            {"group": group_from_json(e["group"]), "step": int(e["step"]), "replays": int(e["replays"])}
            for e in state["entries"]
        ]


class PopoReplayConfig(ComponentConfig):
    buffer_size: int = Field(64, ge=1, description="informative groups kept for replay (our choice)")
    max_age_steps: int = Field(4, ge=1, description="groups older than this many steps are evicted (our choice)")
    max_replays: int = Field(1, ge=1, description="times one stored group may be replayed")
    refill_unreplaced: bool = Field(
        False, description="ask for new groups for ineffective ones the buffer could not replace"
    )
    atol: float = Field(1e-8, description="rewards closer than this count as equal")
    correction_cap: float = Field(2.0, gt=0.0, description="cap of the correction min(pi_old / mu, cap) (our choice)")


def replay_loss_options(cfg: PopoReplayConfig) -> dict[str, object]:
    """The loss-side correction replayed rows need: token-level truncated weights pi_old / mu.

    For fresh rows pi_old = mu (up to float noise), so the weight is 1 there; for replayed rows it
    is exactly ``replay_correction``. The trainer sets it unless the user configured rollout_is.
    """
    return {"rollout_is": {"level": "token", "mode": "truncate", "threshold": cfg.correction_cap}}


def replay_correction(
    old_logprobs_BT: torch.Tensor, rollout_logprobs_BT: torch.Tensor, loss_mask_BT: torch.Tensor, cap: float = 2.0
) -> torch.Tensor:
    """POPO's correction factor of a replayed row: min(pi_old / mu, cap) per token (detached, 1 off-mask).

    mu is the stale policy that sampled the replayed group (its ``rollout_logprobs``), pi_old the
    learner before this step's update; the policy loss then corrects pi_theta / pi_old as usual,
    which makes the three-policy correction pi_theta / mu.
    """
    log_w_BT = (old_logprobs_BT.detach() - rollout_logprobs_BT).clamp(-20.0, 20.0)
    return torch.where(loss_mask_BT > 0, torch.exp(log_w_BT).clamp(max=cap), torch.ones_like(log_w_BT))


@register_filter(
    "popo_replay",
    config=PopoReplayConfig,
    state=ReplayBuffer,
    loss_options=replay_loss_options,
    status="interpretation",
    evidence="POPO's replay (2026): buffer size, maximum age and the correction cap are ours (config "
    "'our choice'); tests/algorithms/test_filters.py",
)
def popo_replay(groups: list[TrajectoryGroup], state: ReplayBuffer, cfg: PopoReplayConfig) -> FilterResult:
    """POPO group-prioritized off-policy replay (RLVR without Ineffective Samples, 2026).

    An ineffective group (all rewards equal, std = 0) is replaced by the most recent informative
    group of an earlier step still in the buffer (age <= max_age_steps, replayed < max_replays
    times) instead of being dropped. Replayed trajectories keep their sampler logprobs and are
    marked ``info["popo_replay"] = True`` / ``info["popo_age"]``; the learner weights them with
    ``replay_correction`` = min(pi_old / mu, cap). This step's informative groups enter the buffer.
    """
    if state is None:
        raise ValueError("'popo_replay' needs its ReplayBuffer state, which the caller did not provide")
    state.step += 1
    kept: list[TrajectoryGroup] = []
    replaced = unreplaced = 0
    state.entries = [e for e in state.entries if state.step - e["step"] <= cfg.max_age_steps]
    for g in groups:
        if is_informative(g, cfg.atol):
            kept.append(g)
            continue
        entry = next((e for e in reversed(state.entries) if e["replays"] < cfg.max_replays), None)
        if entry is None:
            unreplaced += 1
            continue
        entry["replays"] += 1
        age = state.step - entry["step"]
        src: TrajectoryGroup = entry["group"]
        trajectories = [replace(t, info={**t.info, "popo_replay": True, "popo_age": age}) for t in src.trajectories_G]
        replay = with_trajectories(src, trajectories)
        replay.group_id = f"{src.group_id}/replay{entry['replays']}@{state.step}"
        kept.append(replay)
        replaced += 1
    for g in groups:
        if is_informative(g, cfg.atol):
            state.entries.append({"group": g, "step": state.step, "replays": 0})
    state.entries = state.entries[-cfg.buffer_size :]
    return FilterResult(
        groups=kept,
        num_more=unreplaced if cfg.refill_unreplaced else 0,
        metrics={
            "filter/popo_replayed": float(replaced),
            "filter/popo_dropped": float(unreplaced),
            "filter/popo_buffer": float(len(state.entries)),
        },
        levels=frozenset({"filter/popo_buffer"}),
    )

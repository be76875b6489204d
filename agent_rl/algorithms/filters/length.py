"""Length handling before the update: overlong filtering / penalties, forced interruption, length reward.

Filters here return new groups (copies with new rewards or loss masks); inputs are never mutated.
The length of a trajectory is its generated (loss-masked) token count, across all its turns.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import Field

from agent_rl.algorithms.filters.common import add_to_rewards, with_trajectories
from agent_rl.algorithms.registry import ComponentConfig, FilterResult, register_filter
from agent_rl.core.types import StopReason, Trajectory, TrajectoryGroup


class OverlongFilterConfig(ComponentConfig):
    stop_reasons: list[StopReason] = Field(
        default_factory=lambda: [StopReason.MAX_TOKENS], description="stop reasons that count as truncated"
    )
    mode: Literal["mask", "drop"] = Field(
        "mask", description="mask: keep in the group baseline, no loss tokens; drop: remove the row"
    )


@register_filter(
    "overlong_filter",
    config=OverlongFilterConfig,
    status="paper",
    evidence="DAPO overlong filtering (Yu et al. 2025); hand-computed in tests/algorithms/test_filters.py",
)
def overlong_filter(groups: list[TrajectoryGroup], state: object, cfg: OverlongFilterConfig) -> FilterResult:
    """DAPO overlong filtering (Yu et al. 2025): truncated samples contribute no loss.

    A trajectory that ended by a budget (stop_reason in stop_reasons, default max_tokens) has an
    unknown outcome, so it is not trained on: mode ``mask`` zeroes its loss mask (its reward still
    enters the group baseline, as in DAPO's loss masking); mode ``drop`` removes it, and a group
    left empty is dropped.
    """
    truncated = set(cfg.stop_reasons)
    out: list[TrajectoryGroup] = []
    n_truncated = 0
    for g in groups:
        trajectories: list[Trajectory] = []
        for t in g.trajectories_G:
            if t.stop_reason not in truncated:
                trajectories.append(t)
                continue
            n_truncated += 1
            if cfg.mode == "mask":
                trajectories.append(replace(t, loss_mask_T=[0] * len(t.loss_mask_T)))
        if trajectories:
            out.append(with_trajectories(g, trajectories))
    metrics = {
        "filter/overlong_truncated": float(n_truncated),
        "filter/overlong_groups_dropped": float(len(groups) - len(out)),
    }
    return FilterResult(groups=out, metrics=metrics)


class OverlongSoftPenaltyConfig(ComponentConfig):
    max_length: int = Field(20480, ge=1, description="L_max: the generation budget (DAPO: 20480)")
    cache_length: int = Field(4096, ge=1, description="L_cache: the soft punishment interval before L_max (DAPO: 4096)")
    penalty_factor: float = Field(1.0, description="scale of the penalty (verl overlong_buffer.penalty_factor)")


def overlong_penalty(length: int, cfg: OverlongSoftPenaltyConfig) -> float:
    """DAPO's R_length(|y|): 0, then linear down to -1 over the cache interval, -1 beyond L_max."""
    soft_start = cfg.max_length - cfg.cache_length
    if length <= soft_start:
        return 0.0
    if length <= cfg.max_length:
        return cfg.penalty_factor * (soft_start - length) / cfg.cache_length
    return -cfg.penalty_factor


@register_filter(
    "overlong_soft_penalty",
    config=OverlongSoftPenaltyConfig,
    status="paper",
    evidence="DAPO soft overlong punishment (Yu et al. 2025) R_length; hand-computed in "
    "tests/algorithms/test_filters.py",
)
def overlong_soft_penalty(groups: list[TrajectoryGroup], state: object, cfg: OverlongSoftPenaltyConfig) -> FilterResult:
    """DAPO soft overlong punishment (Yu et al. 2025): a length-aware penalty added to the reward.

    R_length(|y|) = 0                                   if |y| <= L_max - L_cache
                  = ((L_max - L_cache) - |y|) / L_cache if L_max - L_cache < |y| <= L_max
                  = -1                                  if |y| > L_max
    r <- r + penalty_factor * R_length(|y|). Rewards that are None stay None.
    """
    out = [add_to_rewards(g, [overlong_penalty(t.num_generated_tokens, cfg) for t in g.trajectories_G]) for g in groups]
    n_penalized = sum(overlong_penalty(t.num_generated_tokens, cfg) < 0 for g in groups for t in g.trajectories_G)
    return FilterResult(groups=out, metrics={"filter/overlong_penalized": float(n_penalized)})


class ForcedInterruptionConfig(ComponentConfig):
    think_budget_tokens: int = Field(
        10000, ge=1, description="generated tokens before the message is injected (ScaleRL: ~10k)"
    )
    answer_budget_tokens: int = Field(
        2048, ge=0, description="tokens allowed after the message, then truncation (our choice)"
    )
    message: str = Field(
        "Okay, time is up. Let me stop thinking and formulate a final answer now.",
        description="text injected (as non-policy tokens) when the thinking budget is used up",
    )


def interruption_engine_options(cfg: ForcedInterruptionConfig) -> dict[str, object]:
    """What the rollout engine needs to interrupt: its budgets and the message."""
    return {
        "think_budget_tokens": cfg.think_budget_tokens,
        "answer_budget_tokens": cfg.answer_budget_tokens,
        "interrupt_message": cfg.message,
    }


def _truncate_loss(t: Trajectory, keep_tokens: int) -> Trajectory:
    """Zero the loss mask after the first ``keep_tokens`` generated tokens."""
    mask, seen = [], 0
    for m in t.loss_mask_T:
        seen += m
        mask.append(m if seen <= keep_tokens else 0)
    return replace(t, loss_mask_T=mask, info={**t.info, "forced_truncated": True})


@register_filter(
    "forced_interruption",
    config=ForcedInterruptionConfig,
    engine_options=interruption_engine_options,
    status="paper",
    evidence="ScaleRL forced interruption (The Art of Scaling RL Compute, 2025); the answer budget is "
    "our choice; tests/algorithms/test_filters.py",
)
def forced_interruption(groups: list[TrajectoryGroup], state: object, cfg: ForcedInterruptionConfig) -> FilterResult:
    """ScaleRL forced interruption (The Art of Scaling RL Compute, 2025), instead of an overlong penalty.

    During generation, once a trajectory has think_budget_tokens generated tokens, the engine
    injects ``message`` inside the assistant's turn (not trained on; the engine reads the budgets
    through ``interruption_engine_options`` and marks the trajectory
    ``info["forced_interruption"] = True``) and lets it answer for answer_budget_tokens more. This filter enforces the hard truncation: generated tokens beyond
    think_budget_tokens + answer_budget_tokens get no loss, and it counts the interruptions.
    """
    cap = cfg.think_budget_tokens + cfg.answer_budget_tokens
    out: list[TrajectoryGroup] = []
    interrupted = truncated = 0
    for g in groups:
        trajectories = []
        for t in g.trajectories_G:
            interrupted += bool(t.info.get("forced_interruption", False))
            if t.num_generated_tokens > cap:
                truncated += 1
                t = _truncate_loss(t, cap)
            trajectories.append(t)
        out.append(with_trajectories(g, trajectories))
    metrics = {"filter/forced_interrupted": float(interrupted), "filter/forced_truncated": float(truncated)}
    return FilterResult(groups=out, metrics=metrics)


class LengthPenaltyConfig(ComponentConfig):
    weight: float = Field(1.0, description="scale of the length reward added to the task reward")
    correct_threshold: float = Field(0.5, description="a reward above this counts as correct")


def length_rewards(lengths_G: list[int], correct_G: list[bool]) -> list[float]:
    """Kimi's len_reward per sample: lambda if correct else min(0, lambda), lambda = 0.5 - (len - min) / (max - min)."""
    lo, hi = min(lengths_G), max(lengths_G)
    if hi == lo:
        return [0.0] * len(lengths_G)
    lams = [0.5 - (n - lo) / (hi - lo) for n in lengths_G]
    return [lam if c else min(0.0, lam) for lam, c in zip(lams, correct_G, strict=True)]


@register_filter(
    "length_penalty",
    config=LengthPenaltyConfig,
    status="paper",
    evidence="Kimi k1.5 length reward as the report gives it; hand-computed in tests/algorithms/test_filters.py",
)
def length_penalty(groups: list[TrajectoryGroup], state: object, cfg: LengthPenaltyConfig) -> FilterResult:
    """Kimi k1.5 length reward (Kimi Team 2025): shorter responses of a group get more reward.

    With min_len / max_len over the group's samples (valid rewards only),
    lambda_i = 0.5 - (len_i - min_len) / (max_len - min_len)  (0 for all when max_len = min_len)
    len_reward_i = lambda_i if correct, min(0, lambda_i) if incorrect;  r_i <- r_i + weight * len_reward_i.
    """
    out = []
    for g in groups:
        valid = [t for t in g.trajectories_G if t.reward is not None]
        deltas = {id(t): 0.0 for t in g.trajectories_G}
        if valid:
            rewards = length_rewards(
                [t.num_generated_tokens for t in valid], [t.reward > cfg.correct_threshold for t in valid]
            )
            for t, lr in zip(valid, rewards, strict=True):
                deltas[id(t)] = cfg.weight * lr
        out.append(add_to_rewards(g, [deltas[id(t)] for t in g.trajectories_G]))
    return FilterResult(groups=out)

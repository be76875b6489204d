"""Group filters and samplers (registry ``filter``), applied to groups before the update."""

from __future__ import annotations

from pydantic import Field

from agent_rl.algorithms.registry import ComponentConfig, FilterResult, register_filter
from agent_rl.types import TrajectoryGroup


class DynamicSamplingConfig(ComponentConfig):
    max_refill_rounds: int = Field(3, description="at most this many extra sampling rounds per step")
    atol: float = Field(1e-8, description="rewards closer than this count as equal")


@register_filter("dynamic_sampling", config=DynamicSamplingConfig)
def dynamic_sampling(groups: list[TrajectoryGroup], state: object, cfg: DynamicSamplingConfig) -> FilterResult:
    """DAPO dynamic sampling (Yu et al. 2025): drop groups whose rewards are all equal.

    Such groups have zero group-relative advantage and only dilute the batch. ``num_more`` asks
    the trainer to sample that many more groups to refill the batch (it stops after
    ``max_refill_rounds``). Rows with reward None (infra/env errors) are ignored when comparing.
    """
    kept: list[TrajectoryGroup] = []
    for g in groups:
        rewards = [r for r in g.rewards_G if r is not None]
        if len(rewards) >= 2 and max(rewards) - min(rewards) > cfg.atol:
            kept.append(g)
    dropped = len(groups) - len(kept)
    return FilterResult(
        groups=kept,
        num_more=dropped,
        metrics={"filter/dynamic_sampling_dropped": float(dropped), "filter/dynamic_sampling_kept": float(len(kept))},
    )

"""Outcome / sequence-level advantage estimators (registry ``advantage``).

Every estimator maps per-row rewards (plus optional extras) to per-token advantages
``advantages_BT`` that are zero outside ``loss_mask_BT``.
"""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    register_advantage,
)


def group_stats(values_B: torch.Tensor, group_index_B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row mean, unbiased std and size of the row's group (std is 0 for groups of one)."""
    _, inverse_B, counts = torch.unique(group_index_B, return_inverse=True, return_counts=True)
    num_groups = counts.numel()
    values_B = values_B.double()
    sums = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, inverse_B, values_B)
    means = sums / counts
    sq = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, inverse_B, (values_B - means[inverse_B]) ** 2)
    stds = torch.where(counts > 1, (sq / (counts - 1).clamp(min=1)).sqrt(), torch.zeros_like(sq))
    return means[inverse_B], stds[inverse_B], counts[inverse_B]


def broadcast_to_tokens(per_row_B: torch.Tensor, loss_mask_BT: torch.Tensor) -> torch.Tensor:
    return per_row_B.to(torch.float32)[:, None] * loss_mask_BT.to(torch.float32)


class GrpoConfig(ComponentConfig):
    eps: float = Field(1e-6, description="added to the group std before dividing")
    norm_by_std: bool = Field(True, description="divide by the group std (False = Dr. GRPO)")


@register_advantage("grpo", config=GrpoConfig)
def grpo(x: AdvantageInputs, cfg: GrpoConfig) -> AdvantageOutput:
    """GRPO group-normalized advantage (Shao et al. 2024, DeepSeekMath).

    A_i = (r_i - mean(r_group)) / (std(r_group) + eps), the same for every token of row i.
    std is the unbiased (Bessel-corrected) sample std, as in verl's ``grpo`` estimator; a group of
    one sample gets mean 0 and std 1 there, i.e. A_i = r_i, and so it does here.
    """
    mean_B, std_B, count_B = group_stats(x.rewards_B, x.group_index_B)
    rewards_B = x.rewards_B.double()
    singleton = count_B == 1
    mean_B = torch.where(singleton, torch.zeros_like(mean_B), mean_B)
    std_B = torch.where(singleton, torch.ones_like(std_B), std_B)
    centered_B = rewards_B - mean_B
    adv_B = centered_B / (std_B + cfg.eps) if cfg.norm_by_std else centered_B
    return AdvantageOutput(
        advantages_BT=broadcast_to_tokens(adv_B, x.loss_mask_BT),
        metrics={"adv/zero_std_groups_frac": float(((std_B == 0) & ~singleton).float().mean())},
    )

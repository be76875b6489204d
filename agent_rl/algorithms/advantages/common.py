"""Shared tensor helpers of the advantage estimators (group statistics, returns, whitening).

All statistics are computed in float64; estimators return float32 advantages that are zero
outside ``loss_mask_BT``.
"""

from __future__ import annotations

import torch

from agent_rl.algorithms.registry import AdvantageInputs


def group_stats(values_B: torch.Tensor, group_index_B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row mean, unbiased std and size of the row's group (std is 0 for groups of one)."""
    _, inverse_B, counts = torch.unique(group_index_B, return_inverse=True, return_counts=True)
    num_groups = counts.numel()
    values_B = values_B.double()
    sums = torch.zeros(num_groups, dtype=torch.float64, device=values_B.device).index_add_(0, inverse_B, values_B)
    means = sums / counts
    sq = torch.zeros_like(sums).index_add_(0, inverse_B, (values_B - means[inverse_B]) ** 2)
    stds = torch.where(counts > 1, (sq / (counts - 1).clamp(min=1)).sqrt(), torch.zeros_like(sq))
    return means[inverse_B], stds[inverse_B], counts[inverse_B]


def group_sum(values_B: torch.Tensor, group_index_B: torch.Tensor) -> torch.Tensor:
    """Per-row sum of ``values_B`` over the row's group."""
    _, inverse_B = torch.unique(group_index_B, return_inverse=True)
    num_groups = int(inverse_B.max()) + 1 if inverse_B.numel() else 0
    sums = torch.zeros(num_groups, dtype=torch.float64, device=values_B.device)
    sums.index_add_(0, inverse_B, values_B.double())
    return sums[inverse_B]


def group_rows(group_index_B: torch.Tensor) -> list[torch.Tensor]:
    """Row indices of each group, groups in increasing order of their id."""
    _, inverse_B = torch.unique(group_index_B, return_inverse=True)
    return (
        [torch.nonzero(inverse_B == g).flatten() for g in range(int(inverse_B.max()) + 1)] if inverse_B.numel() else []
    )


def broadcast_to_tokens(per_row_B: torch.Tensor, loss_mask_BT: torch.Tensor) -> torch.Tensor:
    return per_row_B.to(torch.float32)[:, None] * loss_mask_BT.to(torch.float32)


def is_correct(rewards_B: torch.Tensor, threshold: float) -> torch.Tensor:
    """Binary correctness of each row: reward strictly above ``threshold``."""
    return (rewards_B.double() > threshold).double()


def sequence_rewards(x: AdvantageInputs) -> torch.Tensor:
    """Outcome reward of each row minus its summed in-reward KL penalty (verl sums token rewards)."""
    rewards_B = x.rewards_B.double()
    if x.kl_penalty_BT is not None:
        rewards_B = rewards_B - (x.kl_penalty_BT.double() * x.loss_mask_BT.double()).sum(-1)
    return rewards_B


def token_rewards(x: AdvantageInputs) -> torch.Tensor:
    """Token-level rewards: the outcome reward on each row's last loss token, minus the KL penalty."""
    mask_BT = x.loss_mask_BT.double()
    T = mask_BT.shape[1]
    positions_T = torch.arange(T, dtype=torch.float64, device=mask_BT.device)
    last_B = (mask_BT * (positions_T + 1)).argmax(-1)  # index of the last masked token
    has_tokens_B = mask_BT.sum(-1) > 0
    rewards_BT = torch.zeros_like(mask_BT)
    rows = torch.arange(mask_BT.shape[0], device=mask_BT.device)
    rewards_BT[rows, last_B] = torch.where(has_tokens_B, x.rewards_B.double(), torch.zeros_like(x.rewards_B.double()))
    if x.kl_penalty_BT is not None:
        rewards_BT = rewards_BT - x.kl_penalty_BT.double() * mask_BT
    return rewards_BT


def discounted_returns(rewards_BT: torch.Tensor, mask_BT: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = sum_{k >= t, masked} gamma^(#masked steps from t to k) r_k; unmasked tokens are skipped.

    Observation / prompt tokens (mask 0) neither add reward nor count as a discount step, and
    their own return is 0.
    """
    mask_BT = mask_BT.double()
    returns_BT = torch.zeros_like(rewards_BT, dtype=torch.float64)
    running_B = torch.zeros(rewards_BT.shape[0], dtype=torch.float64, device=rewards_BT.device)
    for t in reversed(range(rewards_BT.shape[1])):
        m = mask_BT[:, t]
        new_B = rewards_BT[:, t].double() + gamma * running_B
        returns_BT[:, t] = new_B * m
        running_B = new_B * m + running_B * (1 - m)
    return returns_BT


def masked_whiten(values_BT: torch.Tensor, mask_BT: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(v - mean) / sqrt(var + eps) over masked entries, unbiased var; 0 outside the mask."""
    mask_BT = mask_BT.double()
    values_BT = values_BT.double()
    n = mask_BT.sum()
    mean = (values_BT * mask_BT).sum() / n.clamp(min=1)
    sq = (((values_BT - mean) ** 2) * mask_BT).sum()
    var = sq / (n - 1) if n > 1 else torch.zeros_like(sq)
    return (values_BT - mean) * torch.rsqrt(var + eps) * mask_BT


def group_inverse(group_index_B: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense group number (0..num_groups-1, in increasing order of id) of each row, and the group count."""
    _, inverse_B = torch.unique(group_index_B, return_inverse=True)
    return inverse_B, int(inverse_B.max()) + 1 if inverse_B.numel() else 0


def segment_mean_std(values: torch.Tensor, keys: torch.Tensor, num_keys: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and unbiased std of the 1-D ``values`` per key in [0, num_keys); std 0 below two values."""
    values = values.double()
    counts = torch.zeros(num_keys, dtype=torch.float64, device=values.device).index_add_(
        0, keys, torch.ones_like(values)
    )
    means = torch.zeros_like(counts).index_add_(0, keys, values) / counts.clamp(min=1)
    sq = torch.zeros_like(counts).index_add_(0, keys, (values - means[keys]) ** 2)
    return means, torch.where(counts > 1, (sq / (counts - 1).clamp(min=1)).sqrt(), torch.zeros_like(sq))


def masked_group_norm(
    values_BT: torch.Tensor, mask_BT: torch.Tensor, group_index_B: torch.Tensor, eps: float
) -> torch.Tensor:
    """Per group: (v - mean_G) / (std_G + eps) over the group's masked tokens (unbiased std); 0 off the mask."""
    inverse_B, num_groups = group_inverse(group_index_B)
    sel_BT = mask_BT > 0
    keys = inverse_B[:, None].expand_as(sel_BT)[sel_BT]
    vals = values_BT.double()[sel_BT]
    mean, std = segment_mean_std(vals, keys, num_groups)
    out_BT = torch.zeros(values_BT.shape, dtype=torch.float64, device=values_BT.device)
    out_BT[sel_BT] = (vals - mean[keys]) / (std[keys] + eps)
    return out_BT


def grpo_advantage_B(
    rewards_B: torch.Tensor, group_index_B: torch.Tensor, eps: float, norm_by_std: bool
) -> torch.Tensor:
    """(r - mean_G) / (std_G + eps) per row (or r - mean_G); a group of one keeps r (verl's choice)."""
    mean_B, std_B, count_B = group_stats(rewards_B, group_index_B)
    singleton = count_B == 1
    mean_B = torch.where(singleton, torch.zeros_like(mean_B), mean_B)
    std_B = torch.where(singleton, torch.ones_like(std_B), std_B)
    centered_B = rewards_B.double() - mean_B
    return centered_B / (std_B + eps) if norm_by_std else centered_B

"""Outcome estimators that reweight group advantages by prompt difficulty or reward tails."""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.advantages.common import (
    broadcast_to_tokens,
    group_rows,
    group_stats,
    grpo_advantage_B,
    is_correct,
    sequence_rewards,
)
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    register_advantage,
)


class TailRlConfig(ComponentConfig):
    reward_min: float = Field(0.0, description="reward mapped to 0 before thresholding")
    reward_max: float = Field(1.0, description="reward mapped to 1 before thresholding")


@register_advantage(
    "tailrl",
    config=TailRlConfig,
    status="interpretation",
    evidence="arXiv 2609.02987 read through two summaries and a third-party visualiser, not the "
    "paper's text; worked examples hand-computed in tests/algorithms/test_advantages_reshaping.py",
)
def tailrl(x: AdvantageInputs, cfg: TailRlConfig) -> AdvantageOutput:
    """TailRL tail-likelihood advantage (arXiv 2609.02987): maximize E_t log P(R > t), t ~ U[0, 1].

    Rewards are mapped to [0, 1] with (r - reward_min) / (reward_max - reward_min) and clipped.
    Sort a group of N ascending, r_(1) <= ... <= r_(N), r_(0) = 0:
    w_(i) = w_(i-1) + (r_(i) - r_(i-1)) / (N - i + 1),  w_(0) = 0;  A_i = N * (w_i - mean_j w_j).
    Ties get equal w; binary rewards give MaxRL's (b - p) / p.
    """
    span = max(cfg.reward_max - cfg.reward_min, 1e-12)
    rewards_B = ((sequence_rewards(x) - cfg.reward_min) / span).clamp(0.0, 1.0)
    adv_B = torch.zeros_like(rewards_B)
    for rows in group_rows(x.group_index_B):
        r_sorted, order = torch.sort(rewards_B[rows], stable=True)
        n = r_sorted.numel()
        steps = torch.diff(r_sorted, prepend=torch.zeros_like(r_sorted[:1]))
        remaining = torch.arange(n, 0, -1, dtype=r_sorted.dtype, device=r_sorted.device)  # N - i + 1 for i = 1..N
        w_sorted = torch.cumsum(steps / remaining, 0)
        w = torch.empty_like(w_sorted)
        w[order] = w_sorted
        adv_B[rows] = n * (w - w.mean())
    return AdvantageOutput(advantages_BT=broadcast_to_tokens(adv_B, x.loss_mask_BT))


class Da3poConfig(ComponentConfig):
    amplification: float = Field(2.0, description="lambda: factor on correct responses of hard prompts (paper: 2)")
    hard_threshold: float = Field(
        0.5, description="tau: a prompt is hard when its group accuracy < tau (not given by the paper)"
    )
    correct_threshold: float = Field(0.5, description="a reward above this counts as correct")
    eps: float = Field(1e-6, description="added to the group std before dividing")
    norm_by_std: bool = Field(True, description="GRPO/DAPO std normalization of the base advantage")


@register_advantage(
    "da3po",
    config=Da3poConfig,
    status="interpretation",
    evidence="arXiv 2608.27982 read through summaries only; the hardness threshold tau is ours (not "
    "given); tests/algorithms/test_advantages_reshaping.py",
)
def da3po(x: AdvantageInputs, cfg: Da3poConfig) -> AdvantageOutput:
    """DA3PO Difficulty-aware Advantage Amplification (arXiv 2608.27982), on top of GRPO/DAPO.

    A_i = lambda * A_i^GRPO  if row i is correct and its group accuracy p_hat < tau,
    A_i = A_i^GRPO           otherwise.
    (Amplification after the std scaling; tau is our choice, the paper's value was not found.)
    """
    rewards_B = sequence_rewards(x)
    adv_B = grpo_advantage_B(rewards_B, x.group_index_B, cfg.eps, cfg.norm_by_std)
    correct_B = is_correct(rewards_B, cfg.correct_threshold)
    accuracy_B, _, _ = group_stats(correct_B, x.group_index_B)
    amplify_B = (correct_B > 0) & (accuracy_B < cfg.hard_threshold)
    adv_B = torch.where(amplify_B, adv_B * cfg.amplification, adv_B)
    return AdvantageOutput(
        advantages_BT=broadcast_to_tokens(adv_B, x.loss_mask_BT),
        metrics={"adv/da3po_amplified_frac": float(amplify_B.double().mean()) if amplify_B.numel() else 0.0},
    )


class MmpoConfig(ComponentConfig):
    num_moments: int = Field(4, ge=1, description="T: moments of the failure probability minimized (paper: 4)")


@register_advantage(
    "mmpo",
    config=MmpoConfig,
    status="interpretation",
    evidence="arXiv 2608.02149 read through a detailed summary only; 'no std division' is our "
    "assumption; tests/algorithms/test_advantages_reshaping.py",
)
def mmpo(x: AdvantageInputs, cfg: MmpoConfig) -> AdvantageOutput:
    """MMPO Multi-Moment Policy Optimization (arXiv 2608.02149), plug-in estimator.

    Minimizes sum_{k=1}^T E[q^k], q = 1 - p the failure probability of a prompt. With p_hat the
    group mean reward (binary rewards: the pass rate):
    w(p_hat) = sum_{k=1}^T k * (1 - p_hat)^(k-1);  A_i = w(p_hat) * (r_i - p_hat)  (no std division).
    """
    rewards_B = sequence_rewards(x)
    p_B, _, _ = group_stats(rewards_B, x.group_index_B)
    q_B = (1.0 - p_B).clamp(min=0.0)
    w_B = sum(k * q_B ** (k - 1) for k in range(1, cfg.num_moments + 1))
    return AdvantageOutput(advantages_BT=broadcast_to_tokens(w_B * (rewards_B - p_B), x.loss_mask_BT))

"""Group-baseline outcome estimators: every token of a row gets the same advantage.

The reward of a row is ``rewards_B`` minus its summed in-reward KL penalty when one is given
(``AdvantageInputs.kl_penalty_BT``), as verl sums token-level rewards.
"""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.advantages.common import (
    broadcast_to_tokens,
    group_rows,
    group_stats,
    group_sum,
    grpo_advantage_B,
    masked_whiten,
    sequence_rewards,
)
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    register_advantage,
)


class GrpoConfig(ComponentConfig):
    eps: float = Field(1e-6, description="added to the group std before dividing")
    norm_by_std: bool = Field(True, description="divide by the group std (False = Dr. GRPO)")


@register_advantage(
    "grpo",
    config=GrpoConfig,
    status="reference",
    evidence="tests/algorithms/test_advantages.py: expected values equal verl 0.9.1 core_algos grpo "
    "outcome advantage (run outside CI, max diff < 1e-5)",
)
def grpo(x: AdvantageInputs, cfg: GrpoConfig) -> AdvantageOutput:
    """GRPO group-normalized advantage (Shao et al. 2024, DeepSeekMath).

    A_i = (r_i - mean(r_group)) / (std(r_group) + eps), the same for every token of row i.
    std is the unbiased (Bessel-corrected) sample std, as in verl's ``grpo`` estimator; a group of
    one sample gets mean 0 and std 1 there, i.e. A_i = r_i, and so it does here.
    """
    rewards_B = sequence_rewards(x)
    adv_B = grpo_advantage_B(rewards_B, x.group_index_B, cfg.eps, cfg.norm_by_std)
    _, std_B, count_B = group_stats(rewards_B, x.group_index_B)
    zero_std_B = (std_B == 0) & (count_B > 1)  # a group of 2+ samples with equal rewards: no signal
    groups = x.group_index_B.unique().numel()
    zero_groups = x.group_index_B[zero_std_B].unique().numel()
    return AdvantageOutput(
        advantages_BT=broadcast_to_tokens(adv_B, x.loss_mask_BT),
        metrics={"adv/zero_std_groups_frac": zero_groups / groups if groups else 0.0},  # of the groups, not rows
    )


class DrGrpoConfig(ComponentConfig):
    """Dr. GRPO has no parameters: it is GRPO without the division by the group std."""


@register_advantage(
    "dr_grpo",
    config=DrGrpoConfig,
    status="reference",
    evidence="tests/algorithms/test_advantages.py: expected values equal verl 0.9.1 grpo with "
    "norm_adv_by_std_in_grpo=False (run outside CI)",
)
def dr_grpo(x: AdvantageInputs, cfg: DrGrpoConfig) -> AdvantageOutput:
    """Dr. GRPO group-mean baseline (Liu et al. 2025, Understanding R1-Zero-Like Training).

    A_i = r_i - mean(r_group), no std division (rare successes are not blown up). A group of one
    keeps A_i = r_i, as verl's ``grpo`` with ``norm_adv_by_std_in_grpo=False``.
    """
    adv_B = grpo_advantage_B(sequence_rewards(x), x.group_index_B, 0.0, norm_by_std=False)
    return AdvantageOutput(advantages_BT=broadcast_to_tokens(adv_B, x.loss_mask_BT))


class RlooConfig(ComponentConfig):
    """RLOO has no parameters."""


@register_advantage(
    "rloo",
    config=RlooConfig,
    status="reference",
    evidence="tests/algorithms/test_advantages.py: expected values equal verl 0.9.1 rloo (run outside CI)",
)
def rloo(x: AdvantageInputs, cfg: RlooConfig) -> AdvantageOutput:
    """RLOO leave-one-out baseline (Ahmadian et al. 2024, Back to Basics).

    A_i = r_i - mean_{j != i} r_j = n/(n-1) * (r_i - mean(r_group)) for a group of n >= 2;
    a group of one keeps A_i = r_i (as verl's ``rloo``).
    """
    rewards_B = sequence_rewards(x)
    mean_B, _, count_B = group_stats(rewards_B, x.group_index_B)
    n_B = count_B.double()
    loo_B = (rewards_B - mean_B) * n_B / (n_B - 1).clamp(min=1)
    adv_B = torch.where(count_B > 1, loo_B, rewards_B)
    return AdvantageOutput(advantages_BT=broadcast_to_tokens(adv_B, x.loss_mask_BT))


class KimiAdvantageConfig(ComponentConfig):
    """Kimi k1.5's baseline has no parameters."""


@register_advantage(
    "kimi",
    config=KimiAdvantageConfig,
    status="paper",
    evidence="Kimi k1.5 report's sample-mean baseline; hand-computed in tests/algorithms/test_advantages.py",
)
def kimi(x: AdvantageInputs, cfg: KimiAdvantageConfig) -> AdvantageOutput:
    """Kimi k1.5 group-mean baseline (Kimi Team 2025), paired with the ``kimi`` policy loss.

    A_i = r_i - r_bar with r_bar = (1/k) sum_j r_j over the k samples of the prompt (the sample
    mean that stands in for tau * log Z). Unlike ``dr_grpo`` a group of one gets A_i = 0: its
    mean is its own reward.
    """
    rewards_B = sequence_rewards(x)
    mean_B, _, _ = group_stats(rewards_B, x.group_index_B)
    return AdvantageOutput(advantages_BT=broadcast_to_tokens(rewards_B - mean_B, x.loss_mask_BT))


class LagunaLooConfig(ComponentConfig):
    length_power: float = Field(1.0, description="w_j = L_j ** length_power (1 = token-length weights)")


@register_advantage(
    "laguna_loo",
    config=LagunaLooConfig,
    status="paper",
    evidence="Laguna (Poolside 2026) length-weighted leave-one-out baseline as the docstring states "
    "it; hand-computed in tests/algorithms/test_advantages.py",
)
def laguna_loo(x: AdvantageInputs, cfg: LagunaLooConfig) -> AdvantageOutput:
    """Laguna (Poolside 2026) length-weighted leave-one-out baseline.

    A_i = r_i - b_i,  b_i = sum_{j != i} w_j r_j / sum_{j != i} w_j,  w_j = L_j ** length_power,
    L_j the generated (loss-masked) tokens of row j. A row with no other weighted row in its group
    gets b_i = 0 (A_i = r_i, as RLOO).
    """
    rewards_B = sequence_rewards(x)
    w_B = x.loss_mask_BT.double().sum(-1) ** cfg.length_power
    num_B = group_sum(w_B * rewards_B, x.group_index_B) - w_B * rewards_B
    den_B = group_sum(w_B, x.group_index_B) - w_B
    baseline_B = torch.where(den_B > 0, num_B / den_B.clamp(min=1e-30), torch.zeros_like(num_B))
    return AdvantageOutput(advantages_BT=broadcast_to_tokens(rewards_B - baseline_B, x.loss_mask_BT))


class PasskConfig(ComponentConfig):
    eps: float = Field(1e-6, description="added to the group std before dividing")
    norm_by_std: bool = Field(True, description="divide by the group std")


@register_advantage(
    "passk",
    config=PasskConfig,
    status="reference",
    evidence="tests/algorithms/test_advantages.py: expected values equal verl 0.9.1 grpo_passk (run "
    "outside CI; verl raises on a group of one, we give 0)",
)
def passk(x: AdvantageInputs, cfg: PasskConfig) -> AdvantageOutput:
    """Pass@k advantage (arXiv 2503.19595; verl's ``grpo_passk``).

    Only the best sample of each group gets a non-zero advantage:
    A_best = (r_max - r_second_max) / (std(r_group) + eps), every other A_i = 0. Groups of one get
    0 (verl raises there). Ties at the top give r_max - r_second_max = 0.
    """
    rewards_B = sequence_rewards(x)
    adv_B = torch.zeros_like(rewards_B)
    for rows in group_rows(x.group_index_B):
        if rows.numel() < 2:
            continue
        r = rewards_B[rows]
        top, top_idx = torch.topk(r, 2)
        a = top[0] - top[1]
        if cfg.norm_by_std:
            a = a / (r.std() + cfg.eps)
        adv_B[rows[top_idx[0]]] = a
    return AdvantageOutput(advantages_BT=broadcast_to_tokens(adv_B, x.loss_mask_BT))


class ReinforcePpBaselineConfig(ComponentConfig):
    eps: float = Field(1e-8, description="added to the batch variance before the square root")


@register_advantage(
    "reinforce_pp_baseline",
    config=ReinforcePpBaselineConfig,
    status="reference",
    evidence="tests/algorithms/test_advantages.py: expected values equal verl 0.9.1 "
    "reinforce_plus_plus_baseline (run outside CI)",
)
def reinforce_pp_baseline(x: AdvantageInputs, cfg: ReinforcePpBaselineConfig) -> AdvantageOutput:
    """REINFORCE++-baseline (Hu et al. 2025): group-mean centering, then batch-level whitening.

    c_i = r_i - mean(r_group) (a group of one keeps r_i), broadcast to the row's tokens; then
    A_it = (c_it - mean_tokens(c)) / sqrt(var_tokens(c) + eps) over every loss token of the batch
    (unbiased var), as verl's ``reinforce_plus_plus_baseline``. ScaleRL's prompt-centering with
    batch-level std is this estimator.
    """
    centered_B = grpo_advantage_B(sequence_rewards(x), x.group_index_B, 0.0, norm_by_std=False)
    centered_BT = centered_B[:, None] * x.loss_mask_BT.double()
    adv_BT = masked_whiten(centered_BT, x.loss_mask_BT, cfg.eps)
    return AdvantageOutput(advantages_BT=adv_BT.to(torch.float32))

"""Token-level return estimators: GAE with a critic, REINFORCE++ and ReMax.

The outcome reward sits on each row's last loss token; an in-reward KL penalty
(``AdvantageInputs.kl_penalty_BT``) is subtracted on every loss token. Tokens outside the loss
mask (prompt, tool observations, padding) are skipped: they add no reward, take no discount
step and get advantage 0.
"""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.advantages.common import (
    discounted_returns,
    masked_whiten,
    token_rewards,
)
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    register_advantage,
    require,
)


class GaeConfig(ComponentConfig):
    gamma: float = Field(1.0, description="discount (LLM PPO, ORZ: 1.0)")
    lam: float = Field(0.95, description="GAE lambda of the actor's advantages (ORZ: 1.0)")
    critic_lam: float | None = Field(
        None, description="VAPO decoupled lambda for the critic's returns (VAPO: 1.0); None = lam"
    )
    length_adaptive_alpha: float | None = Field(
        None, description="VAPO: actor lambda_i = 1 - 1/(alpha * L_i) per row (VAPO: 0.05); None = fixed lam"
    )
    whiten: bool = Field(True, description="whiten advantages over the batch's loss tokens (verl's gae does)")


def gae_scan(
    rewards_BT: torch.Tensor, values_BT: torch.Tensor, mask_BT: torch.Tensor, gamma: float, lam_B: torch.Tensor
) -> torch.Tensor:
    """A_t = delta_t + gamma * lam * A_{t+1},  delta_t = r_t + gamma * V_{t+1} - V_t, over masked tokens.

    ``V_{t+1}`` and ``A_{t+1}`` are those of the next masked token (0 after the last one).
    """
    mask_BT = mask_BT.double()
    values_BT = values_BT.double()
    B, T = rewards_BT.shape
    adv_BT = torch.zeros(B, T, dtype=torch.float64, device=values_BT.device)
    next_value_B = torch.zeros(B, dtype=torch.float64, device=values_BT.device)
    last_B = torch.zeros(B, dtype=torch.float64, device=values_BT.device)
    for t in reversed(range(T)):
        m = mask_BT[:, t]
        delta_B = rewards_BT[:, t] + gamma * next_value_B - values_BT[:, t]
        new_B = delta_B + gamma * lam_B * last_B
        next_value_B = values_BT[:, t] * m + next_value_B * (1 - m)
        last_B = new_B * m + last_B * (1 - m)
        adv_BT[:, t] = last_B * m
    return adv_BT


@register_advantage(
    "gae",
    config=GaeConfig,
    needs={"values"},
    status="reference",
    evidence="tests/algorithms/test_advantages.py: expected values equal verl 0.9.1 gae (run "
    "outside CI); VAPO / ORZ options hand-computed only",
)
def gae(x: AdvantageInputs, cfg: GaeConfig) -> AdvantageOutput:
    """GAE with critic values (Schulman et al. 2016; PPO, Schulman et al. 2017), with VAPO/ORZ options.

    delta_t = r_t + gamma * V_{t+1} - V_t;  A_t = sum_l (gamma * lam)^l delta_{t+l}  (masked tokens only)
    returns R_t = A_t(critic_lam) + V_t  (the critic's target; critic_lam defaults to lam)
    VAPO length-adaptive lambda: lam_i = 1 - 1 / (alpha * L_i), clipped to [0, 1], L_i the row's tokens.
    Open-Reasoner-Zero: gamma = lam = 1, so A_t = r - V_t.
    Advantages are then whitened over the batch's loss tokens (unbiased var, +1e-8), as verl's ``gae``.
    """
    values_BT = require(x, "values_BT", "gae")
    mask_BT = x.loss_mask_BT
    rewards_BT = token_rewards(x)
    B = rewards_BT.shape[0]
    if cfg.length_adaptive_alpha is not None:
        length_B = mask_BT.double().sum(-1).clamp(min=1)
        lam_B = (1.0 - 1.0 / (cfg.length_adaptive_alpha * length_B)).clamp(0.0, 1.0)
    else:
        lam_B = torch.full((B,), cfg.lam, dtype=torch.float64, device=rewards_BT.device)
    adv_BT = gae_scan(rewards_BT, values_BT, mask_BT, cfg.gamma, lam_B)
    critic_BT = adv_BT
    if cfg.critic_lam is not None:
        critic_lam_B = torch.full_like(lam_B, cfg.critic_lam)
        critic_BT = gae_scan(rewards_BT, values_BT, mask_BT, cfg.gamma, critic_lam_B)
    returns_BT = (critic_BT + values_BT.double()) * mask_BT.double()
    if cfg.whiten:
        adv_BT = masked_whiten(adv_BT, mask_BT)
    return AdvantageOutput(
        advantages_BT=adv_BT.to(torch.float32),
        returns_BT=returns_BT.to(torch.float32),
        metrics={"adv/gae_lambda_mean": float(lam_B.mean()) if B else 0.0},
    )


class ReinforcePpConfig(ComponentConfig):
    gamma: float = Field(1.0, description="discount of the token returns (REINFORCE++: 1.0)")
    eps: float = Field(1e-8, description="added to the batch variance before the square root")


@register_advantage(
    "reinforce_pp",
    config=ReinforcePpConfig,
    status="reference",
    evidence="tests/algorithms/test_advantages.py: expected values equal verl 0.9.1 "
    "reinforce_plus_plus (run outside CI)",
)
def reinforce_pp(x: AdvantageInputs, cfg: ReinforcePpConfig) -> AdvantageOutput:
    """REINFORCE++ (Hu et al. 2025): token returns with KL-to-go, normalized over the whole batch.

    A_t^raw = r * gamma^(T - t) - beta * sum_{j >= t} gamma^(j - t) KL_j  (the KL part comes from
    ``kl_penalty_BT`` = beta * KL_j when ``kl.placement`` is ``in_reward``)
    A_t = (A_t^raw - mean_batch) / sqrt(var_batch + eps), over every loss token of the batch
    (unbiased var), as verl's ``reinforce_plus_plus``. ``returns_BT`` is A^raw.
    """
    returns_BT = discounted_returns(token_rewards(x), x.loss_mask_BT, cfg.gamma)
    adv_BT = masked_whiten(returns_BT, x.loss_mask_BT, cfg.eps)
    return AdvantageOutput(advantages_BT=adv_BT.to(torch.float32), returns_BT=returns_BT.to(torch.float32))


class RemaxConfig(ComponentConfig):
    """ReMax has no parameters: the baseline is the greedy rollout's reward."""


@register_advantage(
    "remax",
    config=RemaxConfig,
    needs={"greedy_rewards"},
    status="reference",
    evidence="tests/algorithms/test_advantages.py: expected values equal verl 0.9.1 remax (run outside CI)",
)
def remax(x: AdvantageInputs, cfg: RemaxConfig) -> AdvantageOutput:
    """ReMax (Li et al. 2023): reward minus the reward of a greedy rollout of the same prompt.

    A_t = G_t - r_greedy, G_t = r - sum_{j >= t} beta * KL_j (the return-to-go; just r without an
    in-reward KL), the same scalar r - r_greedy on every token otherwise. As verl's ``remax``.
    """
    greedy_B = require(x, "greedy_rewards_B", "remax")
    mask_BT = x.loss_mask_BT.double()
    returns_BT = discounted_returns(token_rewards(x), mask_BT, 1.0)
    adv_BT = (returns_BT - greedy_B.double()[:, None]) * mask_BT
    return AdvantageOutput(advantages_BT=adv_BT.to(torch.float32), returns_BT=returns_BT.to(torch.float32))

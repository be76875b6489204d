"""Turn-level GAE: the critic's value at each turn's first token, one TD step per turn."""

from __future__ import annotations

from pydantic import Field

from agent_rl.algorithms.advantages.common import masked_whiten
from agent_rl.algorithms.credit.common import batch_rows, scatter_turn_values
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    register_credit,
    require,
)


class TurnGaeConfig(ComponentConfig):
    gamma: float = Field(1.0, description="discount per turn")
    lam: float = Field(0.95, description="GAE lambda over turns")
    whiten: bool = Field(True, description="whiten advantages over the batch's loss tokens (as the token-level gae)")


def turn_gae(
    rewards_N: list[float], values_N: list[float], gamma: float, lam: float
) -> tuple[list[float], list[float]]:
    """A_k = sum_l (gamma lam)^l delta_{k+l}, delta_k = r_k + gamma V_{k+1} - V_k (V after the last turn = 0); R_k = A_k + V_k."""
    n = len(rewards_N)
    adv, running = [0.0] * n, 0.0
    for k in reversed(range(n)):
        next_v = values_N[k + 1] if k + 1 < n else 0.0
        running = rewards_N[k] + gamma * next_v - values_N[k] + gamma * lam * running
        adv[k] = running
    return adv, [a + v for a, v in zip(adv, values_N, strict=True)]


@register_credit(
    "turn_gae",
    config=TurnGaeConfig,
    needs={"values"},
    status="paper",
    evidence="GAE (Schulman et al. 2016) with turns as the MDP steps; hand-computed in "
    "tests/algorithms/test_credit_turn.py",
)
def turn_gae_credit(x: AdvantageInputs, cfg: TurnGaeConfig) -> AdvantageOutput:
    """Turn-level GAE with a critic (GAE, Schulman et al. 2016, applied with turns as the MDP steps).

    V_k = values_BT at the first token of turn k (the state the agent saw before acting); r_k = the turn's env
    reward minus its summed in-reward KL penalty; delta_k = r_k + gamma V_{k+1} - V_k with V_{N} = 0;
    A_k = sum_l (gamma lam)^l delta_{k+l} on every token of turn k; returns_BT = A_k + V_k (the critic's target,
    on the turn's tokens). Advantages are whitened over the loss tokens (unbiased var) when ``whiten``.
    A truncated episode is not bootstrapped (V after its last turn is 0 as well).
    """
    groups = require(x, "groups", "turn_gae")
    values_BT = require(x, "values_BT", "turn_gae")
    rows = batch_rows(groups, x)
    advs, rets = [], []
    for i, (_, t) in enumerate(rows):
        rewards = [u.reward for u in t.turns_N]
        if x.kl_penalty_BT is not None:
            rewards = [
                r - float(x.kl_penalty_BT[i, u.start : u.end].sum()) for r, u in zip(rewards, t.turns_N, strict=True)
            ]
        a, r = turn_gae(rewards, [float(values_BT[i, u.start]) for u in t.turns_N], cfg.gamma, cfg.lam)
        advs.append(a)
        rets.append(r)
    adv_BT = scatter_turn_values(rows, advs, x.loss_mask_BT)
    returns_BT = scatter_turn_values(rows, rets, x.loss_mask_BT)
    if cfg.whiten:
        adv_BT = masked_whiten(adv_BT, x.loss_mask_BT)
    return AdvantageOutput(advantages_BT=adv_BT.float(), returns_BT=returns_BT.float())

"""SARPO's advantage: trajectory-level GAE over turns with the policy's own state values, normalized
over the batch's turns (Liang et al. 2026, arXiv 2608.19842, "SAPO: Single-Rollout Autoregressive
Policy Optimization"; the value read and its choices: ``agent_rl/algorithms/value_basis.py``).

One rollout per task suffices: with r_k the outcome reward on a row's last turn (0 before it) and
d_k = 1 there,

    delta_k = r_k + gamma (1 - d_k) V_old(s_{k+1}) - V_old(s_k)
    A_k     = delta_k + gamma lam (1 - d_k) A_{k+1}
    A^_k    = (A_k - mean_batch(A)) / (std_batch(A) + eps)      over every real turn of the batch

and A^_k goes to every response token of turn k (normalized before the broadcast, so long turns do
not weigh more in the statistics). The policy's advantage comes from GAE directly, not from the
learned Q minus V (the paper's choice). Train with ``algorithm.loss.name=sarpo`` (PPO + the V and
SARSA Q losses on the same backbone). Called without the need (row tensors alone), V_old = 0.
"""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms import value_basis as vb
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    record_choice,
    register_advantage,
)


class SarpoAdvantageConfig(ComponentConfig):
    gamma: float = Field(
        1.0, ge=0.0, le=1.0, description="discount between turns (our default; the available text gives none)"
    )
    lam: float = Field(
        0.95, ge=0.0, le=1.0, description="GAE lambda between turns (our default; the available text gives none)"
    )
    r_max: float = Field(1.0, gt=0.0, description="R_max: values live in [-R_max, R_max] (1 for binary verifiers)")
    value_temperature: float = Field(1.0, gt=0.0, description="tau_v: p(c) = clip((z_{w+} - z_{w-}) / tau_v, -1, 1)")
    eps: float = Field(1e-6, gt=0.0, description="eps_adv, added to the batch std")


@register_advantage(
    "sarpo",
    config=SarpoAdvantageConfig,
    config_needs=lambda cfg: {"value_basis"},
    status="interpretation",
    evidence="arXiv 2608.19842 read through a summary that gives the recursion, not gamma / lambda "
    "(ours: 1.0, 0.95); 3 recorded choices; tests/algorithms/test_sarpo.py",
)
def sarpo(x: AdvantageInputs, cfg: SarpoAdvantageConfig) -> AdvantageOutput:
    """SARPO trajectory-level GAE over turns with the policy's own values, batch-normalized (Liang et al. 2026).

    delta_k = r_k + gamma (1 - d_k) V_old(s_{k+1}) - V_old(s_k); A_k = delta_k + gamma lam (1 - d_k) A_{k+1};
    A^_k = (A_k - mean) / (std + eps) over the batch's turns, on every response token of turn k.
    """
    mask_BT = x.loss_mask_BT.double().cpu()
    basis = x.extras.get("value_basis")
    if basis is None:
        v_pos, q_pos, valid = vb.turn_boundaries(mask_BT, None if x.turn_index_BT is None else x.turn_index_BT.cpu())
        v_old = torch.zeros(valid.shape, dtype=torch.float64)
        valid = valid.double()
    else:
        v_pos, q_pos, valid, v_old, _ = vb.old_turn_values(basis.double().cpu(), cfg.r_max, cfg.value_temperature)
    r_BK, done_BK = vb.turn_rewards(x.rewards_B.double().cpu(), valid)
    adv_BK = vb.turn_gae(r_BK, done_BK, v_old, valid, cfg.gamma, cfg.lam)
    real = valid > 0
    mean = adv_BK[real].mean() if real.any() else torch.tensor(0.0, dtype=torch.float64)
    std = adv_BK[real].std(unbiased=False) if real.sum() > 1 else torch.tensor(0.0, dtype=torch.float64)
    norm_BK = (adv_BK - mean) / (std + cfg.eps) * valid
    adv_BT = vb.spread_over_turns(norm_BK, v_pos, q_pos, valid, mask_BT.shape[1]) * mask_BT
    metrics = {"sarpo/v_old_mean": float(v_old[real].mean()) if real.any() else 0.0, "sarpo/turns": float(real.sum())}
    return AdvantageOutput(advantages_BT=adv_BT.float().to(x.loss_mask_BT.device), metrics=metrics)


record_choice(
    "sarpo",
    "gamma and lambda of the turn-level GAE",
    "gamma 1.0, lambda 0.95 (the available summary of arXiv 2608.19842 gives the recursion, not the values)",
)
record_choice("sarpo", "std of the batch normalization", "the population std over the batch's real turns")
record_choice(
    "sarpo", "per-turn rewards", "the outcome reward on each row's last turn, 0 before it (done on the last turn)"
)

"""SARPO's loss: PPO on the policy plus the state-value and on-policy SARSA action-value losses of the
same backbone and LM head, in one backward pass (Liang et al. 2026, arXiv 2608.19842; the value
read: ``agent_rl/algorithms/value_basis.py``, the advantage: ``advantages/sarpo.py``).

    L = L_ppo + c_V L_V + c_Q L_Q
    y^V_k = V_old(s_k) + A_k                          (the lambda-return; A_k the turn GAE, unnormalized)
    y^Q_k = r_k + gamma (1 - d_k) Q_old(s_{k+1}, a_{k+1})     (SARSA)
    L_V  = 0.5 max((V - y^V)^2, (V_old + clip(V - V_old, -c, c) - y^V)^2)     per turn, Q alike

V and Q come from the learner's own forward pass (need ``policy_hidden``: the hidden states reach the
LM head's value basis with gradient), V_old / Q_old from the policy before the update (need
``value_basis``). Each turn's value losses are spread evenly over its response tokens, so every turn
weighs the same whatever its length, then aggregated with the policy loss. Without the needs (row
tensors alone) it is ``ppo_clip``.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from agent_rl.algorithms import value_basis as vb
from agent_rl.algorithms.registry import (
    POLICY_LOSSES,
    ComponentConfig,
    LossInputs,
    LossOutput,
    record_choice,
    register_policy_loss,
)


class SarpoLossConfig(ComponentConfig):
    ppo_options: dict[str, Any] = Field(
        default_factory=dict, description="ppo_clip's config fields (eps_low, eps_high, dual_clip_c)"
    )
    value_coef: float = Field(0.5, ge=0.0, description="c_V, weight of the state-value loss (our default)")
    q_coef: float = Field(0.5, ge=0.0, description="c_Q, weight of the SARSA action-value loss (our default)")
    value_clip: float | None = Field(
        0.2, gt=0.0, description="c of the clipped regression around the old value (None: plain squared error)"
    )
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="discount between turns; keep equal to the sarpo advantage's")
    lam: float = Field(
        0.95, ge=0.0, le=1.0, description="GAE lambda of the V target; keep equal to the sarpo advantage's"
    )
    r_max: float = Field(1.0, gt=0.0, description="R_max of the value read; keep equal to the sarpo advantage's")
    value_temperature: float = Field(
        1.0, gt=0.0, description="tau_v of the value read; keep equal to the sarpo advantage's"
    )


def clipped_value_loss(pred: torch.Tensor, old: torch.Tensor, target: torch.Tensor, clip: float | None) -> torch.Tensor:
    err = (pred - target) ** 2
    if clip is None:
        return 0.5 * err
    return 0.5 * torch.maximum(err, (old + (pred - old).clamp(-clip, clip) - target) ** 2)


@register_policy_loss(
    "sarpo",
    config=SarpoLossConfig,
    config_needs=lambda cfg: {"value_basis", "policy_hidden", "rewards"},
    status="interpretation",
    evidence="arXiv 2608.19842 read through a summary: c_V, c_Q, value clip and the value basis "
    "are ours (3 recorded choices here, 3 on the advantage); "
    "tests/algorithms/test_sarpo.py",
)
def sarpo_loss(x: LossInputs, cfg: SarpoLossConfig) -> LossOutput:
    """SARPO: PPO + state-value and SARSA action-value losses on the shared backbone (Liang et al. 2026).

    L = L_ppo + c_V 0.5 max((V - y^V)^2, (V_clip - y^V)^2) + c_Q (same for Q with y^Q = r + gamma (1 - d) Q_old'),
    y^V = V_old + A^GAE; V, Q read from the LM head's value basis at the turn's boundaries.
    """
    ppo = POLICY_LOSSES.get("ppo_clip")
    out = ppo.fn(x, ppo.config(**cfg.ppo_options))
    basis, hidden, head = x.extras.get("value_basis"), x.extras.get("policy_hidden"), x.extras.get("lm_head")
    if hidden is not None and basis is None:  # the learner ran it, the batch lost the targets (per-turn rows)
        raise ValueError(
            "algorithm.loss.name=sarpo: the value targets (need value_basis) did not reach the loss; use rollout.layout: concat"
        )
    if basis is None or hidden is None or head is None or x.rewards_B is None:
        return out
    device = hidden.device
    v_pos, q_pos, valid, v_old, q_old = (
        t.to(device) for t in vb.old_turn_values(basis.double(), cfg.r_max, cfg.value_temperature)
    )
    w_H, b = vb.basis_direction(head)
    z_BT = (hidden @ w_H.to(hidden.dtype)).float() + b
    v = vb.squash(z_BT.gather(1, v_pos.clamp(min=0)).double(), cfg.r_max, cfg.value_temperature)
    q = vb.squash(z_BT.gather(1, q_pos).double(), cfg.r_max, cfg.value_temperature)
    r_BK, done_BK = vb.turn_rewards(x.rewards_B.double().to(device), valid)
    y_v = v_old + vb.turn_gae(r_BK, done_BK, v_old, valid, cfg.gamma, cfg.lam)
    y_q = vb.sarsa_targets(r_BK, done_BK, q_old, valid, cfg.gamma)
    l_v = clipped_value_loss(v, v_old, y_v, cfg.value_clip) * valid
    l_q = clipped_value_loss(q, q_old, y_q, cfg.value_clip) * valid
    mask_BT = x.loss_mask_BT.double()
    T = mask_BT.shape[1]
    n_BK = (
        (vb.turn_tokens(v_pos, q_pos, valid, T) * mask_BT[:, None, :]).sum(-1).clamp(min=1.0)
    )  # response tokens per turn
    per_token_BK = (cfg.value_coef * l_v + cfg.q_coef * l_q) / n_BK
    value_BT = vb.spread_over_turns(per_token_BK, v_pos, q_pos, valid, T) * mask_BT
    real = valid > 0
    out.metrics.update(
        {
            "sarpo/value_loss": float(l_v.detach()[real].mean()) if real.any() else 0.0,
            "sarpo/q_loss": float(l_q.detach()[real].mean()) if real.any() else 0.0,
            "sarpo/v_mean": float(v.detach()[real].mean()) if real.any() else 0.0,
        }
    )
    return LossOutput(loss_BT=out.loss_BT + value_BT.to(out.loss_BT.dtype), metrics=out.metrics)


record_choice(
    "sarpo",
    "c_V, c_Q and the value clip",
    "0.5, 0.5 and 0.2 (PPO's usual critic settings; the available text names the coefficients without values)",
)
record_choice(
    "sarpo",
    "per-turn value losses in a token-aggregated objective",
    "each turn's loss spread evenly over its response tokens, then aggregated with the policy loss (every turn weighs the same)",
)
record_choice(
    "sarpo",
    "the value basis w+ / w-",
    "the LM head's two last rows (ids V-1, V-2), no renormalization of the policy over the other ids (the paper reserves two entries and renormalizes)",
)

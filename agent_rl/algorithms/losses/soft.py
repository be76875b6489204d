"""Losses that keep every token's gradient: clipped detached weights and soft gates on the ratio."""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.losses.common import log_ratio, ratio_metrics
from agent_rl.algorithms.registry import (
    ComponentConfig,
    LossInputs,
    LossOutput,
    register_policy_loss,
    require,
)


class CispoConfig(ComponentConfig):
    eps_low: float = Field(1.0, description="IS weight >= 1 - eps_low (MiniMax-M1: no lower bound, i.e. >= 1)")
    eps_high: float = Field(0.2, description="IS weight <= 1 + eps_high (the value MiniMax tunes; verl's example: 0.2)")


@register_policy_loss(
    "cispo",
    config=CispoConfig,
    status="reference",
    evidence="tests/algorithms/test_losses_soft.py: loss and gradient equal verl 0.9.1 cispo "
    "(0.315561; max diff 0, run outside CI)",
)
def cispo(x: LossInputs, cfg: CispoConfig) -> LossOutput:
    """CISPO, clipped IS-weight policy optimization (MiniMax-M1, MiniMax 2025).

    L_t = -sg(clip(r_t, 1 - eps_low, 1 + eps_high)) * A_t * logp_t
    grad = -clip(r_t) A_t grad logp_t: the weight is clipped, the gradient never dropped (it is
    zero only where the clipped weight is 0). Agrees with verl's ``cispo`` (loss and gradient).
    """
    lr_BT = log_ratio(x)
    ratio_BT = torch.exp(lr_BT)
    weight_BT = torch.clamp(ratio_BT, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high).detach()
    loss_BT = -weight_BT * x.advantages_BT * x.logprobs_BT
    r = ratio_BT.detach()
    return LossOutput(loss_BT=loss_BT, metrics=ratio_metrics(x, lr_BT, r < 1.0 - cfg.eps_low, r > 1.0 + cfg.eps_high))


class SapoConfig(ComponentConfig):
    tau_pos: float = Field(1.0, gt=0.0, description="gate temperature for A > 0 (SAPO: 1.0)")
    tau_neg: float = Field(1.05, gt=0.0, description="gate temperature for A <= 0 (SAPO: 1.05, damps negatives faster)")


@register_policy_loss(
    "sapo",
    config=SapoConfig,
    status="reference",
    evidence="tests/algorithms/test_losses_soft.py: loss and gradient equal verl 0.9.1 sapo with "
    "equal row lengths (-0.754148; max diff 6e-10, run outside CI)",
)
def sapo(x: LossInputs, cfg: SapoConfig) -> LossOutput:
    """SAPO, soft adaptive policy optimization (Gao et al. 2025, Qwen).

    L_t = -A_t * (4 / tau) * sigmoid(tau (r_t - 1)),  tau = tau_pos if A_t > 0 else tau_neg
    grad = -A_t w(r_t) r_t grad logp_t with w(r) = 4 sigmoid(tau(r-1)) (1 - sigmoid(tau(r-1))) in
    (0, 1], w(1) = 1: a soft trust region instead of a hard clip. Agrees with verl's ``sapo``
    (verl always aggregates SAPO as ``seq_mean_token_mean``; choose that aggregation to match it).
    """
    lr_BT = log_ratio(x)
    adv_BT = x.advantages_BT
    tau_BT = torch.where(adv_BT > 0, torch.full_like(lr_BT, cfg.tau_pos), torch.full_like(lr_BT, cfg.tau_neg))
    gate_BT = torch.sigmoid(tau_BT * (torch.exp(lr_BT) - 1.0)) * (4.0 / tau_BT)
    return LossOutput(loss_BT=-gate_BT * adv_BT, metrics=ratio_metrics(x, lr_BT))


class GipoConfig(ComponentConfig):
    sigma: float = Field(1.0, gt=0.0, description="width of the Gaussian gate in log-ratio space (not published; ours)")
    sigma_neg: float | None = Field(None, gt=0.0, description="width for A <= 0 (None: same as sigma)")


@register_policy_loss(
    "gipo",
    config=GipoConfig,
    status="interpretation",
    evidence="GIPO's Gaussian gate (arXiv 2603.03955); its width sigma is not published, ours; "
    "hand-computed in tests/algorithms/test_losses_soft.py",
)
def gipo(x: LossInputs, cfg: GipoConfig) -> LossOutput:
    """GIPO, Gaussian importance-sampling policy optimization (Lu et al. 2026, arXiv 2603.03955).

    omega(r) = exp(-(log r)^2 / (2 sigma^2))         (Gaussian trust weight, omega(r) = omega(1/r))
    L_t = -A_t * sg(omega(r_t)) * r_t,   grad = -A_t omega(r_t) r_t grad logp_t
    Never exactly zero, softly damped far from r = 1; at r = 1 the plain policy gradient.
    """
    lr_BT = log_ratio(x)
    adv_BT = x.advantages_BT
    sigma_neg = cfg.sigma_neg if cfg.sigma_neg is not None else cfg.sigma
    sigma_BT = torch.where(adv_BT > 0, torch.full_like(lr_BT, cfg.sigma), torch.full_like(lr_BT, sigma_neg))
    omega_BT = torch.exp(-(lr_BT.detach() ** 2) / (2.0 * sigma_BT**2))
    loss_BT = -adv_BT * omega_BT * torch.exp(lr_BT)
    metrics = ratio_metrics(x, lr_BT)
    metrics["loss/gipo_weight_mean"] = float((omega_BT * x.loss_mask_BT).sum() / x.loss_mask_BT.sum().clamp(min=1))
    return LossOutput(loss_BT=loss_BT, metrics=metrics)


@register_policy_loss(
    "opefo",
    config=ComponentConfig,
    needs={"entropy"},
    status="paper",
    evidence="OPEFO's entropy-flow weights (2026) as the docstring states them; hand-computed in "
    "tests/algorithms/test_losses_soft.py",
)
def opefo(x: LossInputs, cfg: ComponentConfig) -> LossOutput:
    """OPEFO, on-policy entropy flow optimization (2026, "Understanding and Preventing Entropy Collapse").

    Entropy change a token's update causes (eta dropped), p_t = pi(y_t) (detached):
        dH_t = -A_t (1 - p_t)^2 (log p_t + H_t)
    P = sum of dH_t > 0 (entropy-raising tokens), N = sum of |dH_t| < 0 (entropy-lowering), over
    the tokens of this call; lambda = (N - P) / (N + P) balances the flows, (1+lambda) P = (1-lambda) N.
    L_t = -sg(w_t) A_t logp_t with w_t = 1 + lambda (dH_t > 0), 1 - lambda (dH_t < 0), 1 otherwise.
    Strictly on-policy (no ratio); ``rollout_is`` adds sampler weights if wanted.
    """
    entropy_BT = require(x, "entropy_BT", "opefo").detach()
    mask = x.loss_mask_BT.to(entropy_BT.dtype)
    adv_BT = x.advantages_BT
    with torch.no_grad():
        logp_BT = x.logprobs_BT.detach()
        dh_BT = -adv_BT * (1.0 - torch.exp(logp_BT)) ** 2 * (logp_BT + entropy_BT) * mask
        pos, neg = dh_BT.clamp(min=0).sum(), (-dh_BT).clamp(min=0).sum()
        lam = torch.where(pos + neg > 0, (neg - pos) / (pos + neg).clamp(min=1e-30), torch.zeros_like(pos))
        w_BT = torch.where(dh_BT > 0, 1.0 + lam, torch.where(dh_BT < 0, 1.0 - lam, torch.ones_like(dh_BT)))
    loss_BT = -w_BT * adv_BT * x.logprobs_BT
    metrics = ratio_metrics(x, log_ratio(x))
    metrics["loss/opefo_lambda"] = float(lam)
    return LossOutput(loss_BT=loss_BT, metrics=metrics)

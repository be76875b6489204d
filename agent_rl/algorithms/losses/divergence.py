"""Trust regions defined by a divergence between pi_old and pi on the sampled token's binary split.

The binary split of a position is {the sampled token, everything else}: with q = pi_old(y_t) and
p = pi(y_t), TV = |p - q| and KL = q log(q/p) + (1-q) log((1-q)/(1-p)).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from agent_rl.algorithms.losses.common import log_ratio, ppo_surrogate, ratio_metrics
from agent_rl.algorithms.registry import (
    ComponentConfig,
    LossInputs,
    LossOutput,
    register_policy_loss,
)

# keeps 1 - p away from 0 in the binary KL (verl's DPPO uses the same constant)
BINARY_EPS = 1e-8


def _binary_kl(old_logp_BT: torch.Tensor, logp_BT: torch.Tensor) -> torch.Tensor:
    """KL(Bern(q) || Bern(p)) with q = exp(old_logp), p = exp(logp); differentiable in logp."""
    q_BT, p_BT = torch.exp(old_logp_BT), torch.exp(logp_BT)
    return q_BT * (old_logp_BT - logp_BT) + (1.0 - q_BT) * torch.log(
        (1.0 - q_BT + BINARY_EPS) / (1.0 - p_BT + BINARY_EPS)
    )


def _outside_trust_region(x: LossInputs, divergence: str, delta_low: float, delta_high: float) -> torch.Tensor:
    """Tokens whose move in the advantage's direction left the region (DPPO's mask is its negation)."""
    with torch.no_grad():
        old, logp = x.old_logprobs_BT.detach(), x.logprobs_BT.detach()
        p_BT, q_BT = torch.exp(logp), torch.exp(old)
        if divergence == "tv":
            out_pos_BT, out_neg_BT = (p_BT - q_BT) > delta_high, (p_BT - q_BT) < -delta_low
        else:
            kl_BT = _binary_kl(old, logp)  # a NaN divergence (p >= 1) counts as outside
            out_pos_BT, out_neg_BT = ~((kl_BT <= delta_high) | (p_BT <= q_BT)), ~((kl_BT <= delta_low) | (p_BT >= q_BT))
        return torch.where(x.advantages_BT > 0, out_pos_BT, out_neg_BT)


class DppoConfig(ComponentConfig):
    divergence: Literal["tv", "kl"] = Field("tv", description="binary TV (verl dppo_tv) or binary KL (verl dppo_kl)")
    delta_low: float = Field(0.2, description="bound for moves against a token (A <= 0); verl's default clip_ratio")
    delta_high: float = Field(0.2, description="bound for moves towards a token (A > 0)")
    truncation: float = Field(20.0, description="c of the detached, truncated weight min(r, c) (DPPO: 20)")


@register_policy_loss(
    "dppo",
    config=DppoConfig,
    status="reference",
    evidence="tests/algorithms/test_losses_divergence.py: loss and gradient equal verl 0.9.1 "
    "dppo_tv and dppo_kl (-0.030010, run outside CI)",
)
def dppo(x: LossInputs, cfg: DppoConfig) -> LossOutput:
    """DPPO, divergence-masked policy optimization (arXiv 2602.04879; DRPO's baseline).

    L_t = -A_t * sg(min(r_t, c)) * logp_t * M_t
    with M_t = 0 once the token's binary divergence left the trust region in the direction A pushes:
      tv: A > 0 and p - q > delta_high, or A <= 0 and p - q < -delta_low
      kl: A > 0, p > q and KL > delta_high, or A <= 0, p < q and KL > delta_low
    Agrees with verl's ``dppo_tv`` / ``dppo_kl`` (loss and gradient).
    """
    lr_BT = log_ratio(x)
    weight_BT = torch.exp(lr_BT).clamp(max=cfg.truncation).detach()
    outside_BT = _outside_trust_region(x, cfg.divergence, cfg.delta_low, cfg.delta_high)
    loss_BT = -x.advantages_BT * weight_BT * x.logprobs_BT * (~outside_BT).to(lr_BT.dtype)
    adv_BT = x.advantages_BT
    return LossOutput(
        loss_BT=loss_BT, metrics=ratio_metrics(x, lr_BT, outside_BT & (adv_BT <= 0), outside_BT & (adv_BT > 0))
    )


class DrpoConfig(ComponentConfig):
    divergence: Literal["tv", "kl"] = Field("tv", description="binary TV or binary KL, as in DPPO")
    delta_low: float = Field(0.2, description="bound for moves against a token (A <= 0)")
    delta_high: float = Field(0.2, description="bound for moves towards a token (A > 0)")
    truncation: float = Field(20.0, description="c of the detached, truncated weight min(r, c)")
    penalty: float = Field(10.0, gt=0.0, description="lambda of the quadratic penalty beyond the bound (ours)")


@register_policy_loss(
    "drpo",
    config=DrpoConfig,
    status="interpretation",
    evidence="from two sentences of seed 002 (paper text not available): the penalty's form, "
    "lambda 10 and per-sign deltas are ours (docstring); "
    "tests/algorithms/test_losses_divergence.py",
)
def drpo(x: LossInputs, cfg: DrpoConfig) -> LossOutput:
    """DRPO, divergence-regularized policy optimization (seed 002), a documented interpretation.

    DPPO's hard mask is replaced by a smooth, advantage-weighted quadratic on the divergence beyond
    the trust region, e = max(D_t - delta, 0) in the direction A pushes (D = p - q or q - p for TV,
    the binary KL for KL; p carries the gradient):
        L_t = -A_t sg(min(r_t, c)) logp_t + lambda * |A_t| * e_t^2 / 2
    Inside the region this is DPPO; at the boundary the gradient is continuous (e = 0); beyond it
    the penalty pulls back with weight lambda |A| e dD/dlogp, bounded for TV (e, p <= 1). Design
    choices (ours, the paper's text was not available): the penalty's form, lambda = 10, per-sign
    deltas as in DPPO.
    """
    lr_BT = log_ratio(x)
    adv_BT = x.advantages_BT
    weight_BT = torch.exp(lr_BT).clamp(max=cfg.truncation).detach()
    p_BT, q_BT = torch.exp(x.logprobs_BT), torch.exp(x.old_logprobs_BT.detach())
    if cfg.divergence == "tv":
        excess_BT = torch.where(adv_BT > 0, p_BT - q_BT - cfg.delta_high, q_BT - p_BT - cfg.delta_low)
    else:
        kl_BT = _binary_kl(x.old_logprobs_BT.detach(), x.logprobs_BT)
        toward_BT = torch.where(adv_BT > 0, p_BT > q_BT, p_BT < q_BT)
        bound_BT = torch.where(
            adv_BT > 0, torch.full_like(kl_BT, cfg.delta_high), torch.full_like(kl_BT, cfg.delta_low)
        )
        excess_BT = torch.where(toward_BT, kl_BT - bound_BT, torch.zeros_like(kl_BT))
    excess_BT = excess_BT.clamp(min=0.0)
    loss_BT = -adv_BT * weight_BT * x.logprobs_BT + 0.5 * cfg.penalty * adv_BT.abs() * excess_BT**2
    outside_BT = excess_BT.detach() > 0
    return LossOutput(
        loss_BT=loss_BT, metrics=ratio_metrics(x, lr_BT, outside_BT & (adv_BT <= 0), outside_BT & (adv_BT > 0))
    )


def _bisect(
    fn, lo_BT: torch.Tensor, hi_BT: torch.Tensor, target: float, increasing: bool, iters: int = 80
) -> torch.Tensor:
    """Root of fn(r) = target on [lo, hi] per element, fn monotone on the bracket."""
    for _ in range(iters):
        mid_BT = 0.5 * (lo_BT + hi_BT)
        above_BT = fn(mid_BT) > target
        go_left_BT = above_BT if increasing else ~above_BT
        hi_BT = torch.where(go_left_BT, mid_BT, hi_BT)
        lo_BT = torch.where(go_left_BT, lo_BT, mid_BT)
    return 0.5 * (lo_BT + hi_BT)


def band_bounds(old_logprobs_BT: torch.Tensor, method: str, delta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """BandPO's ratio interval [l(p), u(p)] of the f-divergence ball of radius delta, before relaxation.

    p = pi_old(y_t); r in [0, 1/p] keeps the binary split a distribution.
      tv:   r = 1 -+ delta / p
      chi2: r = 1 -+ sqrt(delta (1 - p) / p)
      kl:   p f(r) + (1-p) f((1 - r p)/(1 - p)) = delta, f(u) = u - 1 - log u (KL(old || new)), by bisection
    """
    with torch.no_grad():
        p = torch.exp(old_logprobs_BT.detach().to(torch.float64)).clamp(1e-12, 1.0 - 1e-12)
        inv_p = 1.0 / p
        if method == "tv":
            low, high = 1.0 - delta * inv_p, 1.0 + delta * inv_p
        elif method == "chi2":
            half = torch.sqrt(delta * (1.0 - p) * inv_p)
            low, high = 1.0 - half, 1.0 + half
        else:

            def kl(r: torch.Tensor) -> torch.Tensor:
                rest = ((1.0 - r * p) / (1.0 - p)).clamp(min=1e-300)
                return -p * torch.log(r.clamp(min=1e-300)) - (1.0 - p) * torch.log(rest)

            low = _bisect(kl, torch.zeros_like(p), torch.ones_like(p), delta, increasing=False)
            high = _bisect(kl, torch.ones_like(p), inv_p, delta, increasing=True)
        low, high = low.clamp(min=0.0), torch.minimum(high, inv_p)
        return low.to(old_logprobs_BT.dtype), high.to(old_logprobs_BT.dtype)


class BandpoConfig(ComponentConfig):
    method: Literal["kl", "tv", "chi2"] = Field("kl", description="the f-divergence of the band (BandPO default: kl)")
    delta: float = Field(0.05, gt=0.0, description="radius of the divergence ball (BandPO default: 0.05)")
    relax: bool = Field(
        True, description="widen to at least [1 - relax_eps_low, 1 + relax_eps_high] (BandPO default on)"
    )
    relax_eps_low: float = Field(0.2, description="relaxation: l <= 1 - relax_eps_low")
    relax_eps_high: float = Field(0.28, description="relaxation: u >= 1 + relax_eps_high")
    ratio_max: float = Field(100.0, description="cap on the upper bound after relaxation (BandPO: 100)")


@register_policy_loss(
    "bandpo",
    config=BandpoConfig,
    status="paper",
    evidence="bounds and relaxation from the authors' code (OpenMOSS/BandPO band.py, arXiv "
    "2603.04918); hand-computed bounds in tests/algorithms/test_losses_divergence.py",
)
def bandpo(x: LossInputs, cfg: BandpoConfig) -> LossOutput:
    """BandPO, band-constrained policy optimization (Li et al. 2026, arXiv 2603.04918; OpenMOSS/BandPO).

    Per token, the divergence ball around pi_old projected onto the ratio gives [l(p), u(p)]
    (see ``band_bounds``); with relaxation l <- min(l, 1 - 0.2), u <- max(u, 1 + 0.28), then
    l in [0, 1], u in [1, 100]. L_t = max(-A r, -A clip(r, l_t, u_t)). Low-probability tokens get
    wide upward room (u -> 1/p), near-certain ones a tight band.
    """
    lr_BT = log_ratio(x)
    low_BT, high_BT = band_bounds(x.old_logprobs_BT, cfg.method, cfg.delta)
    if cfg.relax:
        low_BT = low_BT.clamp(max=1.0 - cfg.relax_eps_low)
        high_BT = high_BT.clamp(min=1.0 + cfg.relax_eps_high)
    low_BT, high_BT = low_BT.clamp(0.0, 1.0), high_BT.clamp(1.0, cfg.ratio_max)
    loss_BT, clip_low_BT, clip_high_BT = ppo_surrogate(torch.exp(lr_BT), x.advantages_BT, low_BT, high_BT)
    return LossOutput(loss_BT=loss_BT, metrics=ratio_metrics(x, lr_BT, clip_low_BT, clip_high_BT))

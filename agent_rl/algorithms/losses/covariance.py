"""Entropy-preserving losses from "The Entropy Mechanism of RL for Reasoning LMs" (Cui et al. 2025).

Entropy falls when the covariance between a token's log-probability and its advantage is large;
Clip-Cov and KL-Cov act only on the few tokens with the largest covariance (a micro-batch
statistic: the selection, like the paper's, is made within the call's tokens).
"""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.losses.common import log_ratio, ratio_metrics, seeded_generator
from agent_rl.algorithms.registry import (
    ComponentConfig,
    LossInputs,
    LossOutput,
    register_policy_loss,
)


def _token_covariance(x: LossInputs) -> torch.Tensor:
    """(A_t - mean A) * (logp_t - mean logp) over the call's policy tokens (detached)."""
    with torch.no_grad():
        m = x.loss_mask_BT.to(x.logprobs_BT.dtype)
        n = m.sum().clamp(min=1)
        adv, logp = x.advantages_BT.detach(), x.logprobs_BT.detach()
        return (adv - (adv * m).sum() / n) * (logp - (logp * m).sum() / n)


class ClipCovConfig(ComponentConfig):
    eps_low: float = Field(0.2, description="PPO clip: ratio >= 1 - eps_low")
    eps_high: float = Field(0.2, description="PPO clip: ratio <= 1 + eps_high")
    clip_ratio: float = Field(2e-4, gt=0.0, description="fraction of tokens whose gradient is detached (paper: 2e-4)")
    cov_low: float = Field(1.0, description="only tokens with covariance > cov_low are candidates (paper: 1)")
    cov_high: float = Field(5.0, description="only tokens with covariance < cov_high are candidates (paper: 5)")
    seed: int = Field(0, description="seed of the random choice among candidates (derived with the step)")


@register_policy_loss(
    "clip_cov",
    config=ClipCovConfig,
    status="reference",
    evidence="tests/algorithms/test_losses_divergence.py: equals verl 0.9.1 clip_cov when the "
    "candidates are no more than the tokens to drop (-0.65, run outside CI)",
)
def clip_cov(x: LossInputs, cfg: ClipCovConfig) -> LossOutput:
    """Clip-Cov (Cui et al. 2025): PPO clip, plus the gradient of a few high-covariance tokens removed.

    cov_t = (A_t - mean A)(logp_t - mean logp); among tokens not already clipped by PPO with
    cov_low < cov_t < cov_high, max(1, floor(clip_ratio * N)) are drawn at random and get L_t = 0.
    L_t = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)) otherwise (no dual clip).
    Agrees with verl's ``clip_cov`` when the candidates are no more than the tokens to drop (then the
    draw does not matter); the draw uses an explicit (seed, step) generator, not the global RNG.
    """
    lr_BT = log_ratio(x)
    ratio_BT = torch.exp(lr_BT)
    adv_BT = x.advantages_BT
    unclipped_BT = -adv_BT * ratio_BT
    clipped_BT = -adv_BT * ratio_BT.clamp(1.0 - cfg.eps_low, 1.0 + cfg.eps_high)
    mask = x.loss_mask_BT.bool()
    with torch.no_grad():
        cov_BT = _token_covariance(x)
        candidate_BT = mask & ~(clipped_BT > unclipped_BT) & (cov_BT > cfg.cov_low) & (cov_BT < cfg.cov_high)
        n_drop = max(int(cfg.clip_ratio * int(mask.sum())), 1)
        idx_N = torch.nonzero(candidate_BT.flatten()).squeeze(-1)
        if idx_N.numel() > n_drop:
            gen = seeded_generator(cfg.seed, x.step, torch.device("cpu"))
            idx_N = idx_N[torch.randperm(idx_N.numel(), generator=gen)[:n_drop].to(idx_N.device)]
        keep_BT = torch.ones_like(lr_BT).flatten().index_fill_(0, idx_N, 0.0).view_as(lr_BT)
    loss_BT = torch.maximum(unclipped_BT, clipped_BT) * keep_BT
    r = ratio_BT.detach()
    metrics = ratio_metrics(x, lr_BT, (r < 1.0 - cfg.eps_low) & (adv_BT < 0), (r > 1.0 + cfg.eps_high) & (adv_BT > 0))
    metrics["loss/cov_dropped_frac"] = float(idx_N.numel()) / max(int(mask.sum()), 1)
    return LossOutput(loss_BT=loss_BT, metrics=metrics)


class KlCovConfig(ComponentConfig):
    kl_ratio: float = Field(2e-3, gt=0.0, description="fraction of tokens that get the KL penalty (paper: 2e-3 at 7B)")
    kl_coef: float = Field(1.0, ge=0.0, description="beta: weight of |log r| on the selected tokens (paper: 1)")


@register_policy_loss(
    "kl_cov",
    config=KlCovConfig,
    status="reference",
    evidence="tests/algorithms/test_losses_divergence.py: loss and gradient equal verl 0.9.1 "
    "kl_cov (-0.248634, run outside CI)",
)
def kl_cov(x: LossInputs, cfg: KlCovConfig) -> LossOutput:
    """KL-Cov (Cui et al. 2025): unclipped policy gradient, plus a KL penalty on high-covariance tokens.

    L_t = -A_t r_t + beta * |log r_t| * [t among the top max(1, floor(kl_ratio * N)) by cov_t]
    with cov_t = (A_t - mean A)(logp_t - mean logp) over the call's policy tokens.
    Agrees with verl's ``kl_cov`` (loss and gradient).
    """
    lr_BT = log_ratio(x)
    mask = x.loss_mask_BT.bool()
    with torch.no_grad():
        cov_N = _token_covariance(x).flatten()
        valid_N = torch.nonzero(mask.flatten()).squeeze(-1)
        selected_BT = torch.zeros_like(lr_BT).flatten()
        if valid_N.numel() > 0:
            k = max(1, int(valid_N.numel() * cfg.kl_ratio))
            top_N = valid_N[torch.topk(cov_N[valid_N], k, largest=True).indices]
            selected_BT.index_fill_(0, top_N, 1.0)
        selected_BT = selected_BT.view_as(lr_BT)
    loss_BT = -x.advantages_BT * torch.exp(lr_BT) + cfg.kl_coef * lr_BT.abs() * selected_BT
    metrics = ratio_metrics(x, lr_BT)
    metrics["loss/cov_kl_frac"] = float(selected_BT.sum()) / max(int(mask.sum()), 1)
    return LossOutput(loss_BT=loss_BT, metrics=metrics)

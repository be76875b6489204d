"""Sequence- and prefix-level ratios: one importance weight per response (or per causal prefix).

A sequence-level loss l_i broadcasts to every token of row i, so ``seq_mean_token_mean`` gives the
papers' (1/G) sum_i l_i and ``token_mean`` a length-weighted version of it.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from agent_rl.algorithms.losses.common import (
    LOG_RATIO_CLAMP,
    broadcast,
    dual_clip,
    log_ratio,
    ppo_surrogate,
    prefix_position,
    ratio_metrics,
    seq_mean,
    seq_sum,
)
from agent_rl.algorithms.registry import (
    ComponentConfig,
    LossInputs,
    LossOutput,
    register_policy_loss,
    require,
)

# GSPO/CTPO cap the token-form log-ratio at 10 before exp()
SEQ_LOG_RATIO_MAX = 10.0


def _sequence_token_ratio(x: LossInputs, seq_log_ratio_B: torch.Tensor) -> torch.Tensor:
    """s_i,t = sg(s_i) * pi_t / sg(pi_t): value s_i on every token, gradient only through token t."""
    log_s_BT = x.logprobs_BT - x.logprobs_BT.detach() + broadcast(seq_log_ratio_B.detach(), x.logprobs_BT)
    return torch.exp(log_s_BT.clamp(-LOG_RATIO_CLAMP, SEQ_LOG_RATIO_MAX))


class GspoConfig(ComponentConfig):
    eps_low: float = Field(3e-4, description="sequence ratio >= 1 - eps_low (GSPO paper: 3e-4)")
    eps_high: float = Field(4e-4, description="sequence ratio <= 1 + eps_high (GSPO paper: 4e-4)")


@register_policy_loss(
    "gspo",
    config=GspoConfig,
    status="reference",
    evidence="tests/algorithms/test_losses_sequence.py: loss and gradient equal verl 0.9.1 gspo "
    "(0.262943; random inputs max diff 0, run outside CI)",
)
def gspo(x: LossInputs, cfg: GspoConfig) -> LossOutput:
    """GSPO, group sequence policy optimization (Zheng et al. 2025).

    s_i = exp((1/T_i) sum_t log r_i,t)                      (geometric-mean sequence ratio)
    s_i,t = sg(s_i) * pi_t / sg(pi_t)                        (token form: value s_i)
    L_t = max(-A_t s_i,t, -A_t clip(s_i,t, 1 - eps_low, 1 + eps_high))
    grad of the row = -(s_i A_i / T_i) sum_t grad logp_t under ``seq_mean_token_mean``; the clip is
    applied after the geometric mean, so a clipped sequence loses the gradient of all its tokens.
    Agrees with verl's ``gspo`` (loss and gradient).
    """
    lr_BT = log_ratio(x)
    s_BT = _sequence_token_ratio(x, seq_mean(lr_BT, x.loss_mask_BT))
    loss_BT, low_BT, high_BT = ppo_surrogate(s_BT, x.advantages_BT, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high)
    return LossOutput(loss_BT=loss_BT, metrics=ratio_metrics(x, lr_BT, low_BT, high_BT))


class GmpoConfig(ComponentConfig):
    eps_low: float = Field(0.4, description="per-token log-ratio clip: log r >= -eps_low (GMPO: (e^-0.4, e^0.4))")
    eps_high: float = Field(0.4, description="per-token log-ratio clip: log r <= eps_high")


@register_policy_loss(
    "gmpo",
    config=GmpoConfig,
    status="reference",
    evidence="tests/algorithms/test_losses_sequence.py: loss and gradient equal verl 0.9.1 "
    "geo_mean with equal row lengths (-1.142631; max diff 6e-10, run outside CI)",
)
def gmpo(x: LossInputs, cfg: GmpoConfig) -> LossOutput:
    """GMPO, geometric-mean policy optimization (Zhao et al. 2025).

    Per token, clip in log space on the side the advantage pushes:
        c_t = sgn(A) * min(sgn(A) log r_t, sgn(A) clip(log r_t, -eps_low, eps_high))
    then the geometric mean  R_i = exp((1/T_i) sum_t c_t)  and  l_i = -mean_t(A_i,t) * R_i,
    broadcast to the row. Clipping happens per token *before* the mean, so one clipped token does
    not stop the others' gradient: d l_i / d logp_t = -A_i R_i / T_i unless token t is clipped.
    Agrees with verl's ``geo_mean`` (verl averages rows, i.e. our ``seq_mean_token_mean``).
    """
    lr_BT = log_ratio(x)
    adv_BT = x.advantages_BT
    sgn_BT = torch.sign(adv_BT)
    clipped_BT = lr_BT.clamp(-cfg.eps_low, cfg.eps_high)
    c_BT = sgn_BT * torch.minimum(sgn_BT * lr_BT, sgn_BT * clipped_BT)
    mask = x.loss_mask_BT
    loss_B = -seq_mean(adv_BT, mask) * torch.exp(seq_mean(c_BT, mask))
    lr = lr_BT.detach()
    low_BT, high_BT = (adv_BT < 0) & (lr < -cfg.eps_low), (adv_BT > 0) & (lr > cfg.eps_high)
    return LossOutput(loss_BT=broadcast(loss_B, lr_BT), metrics=ratio_metrics(x, lr_BT, low_BT, high_BT))


class TicGrpoConfig(ComponentConfig):
    eps_high: float = Field(0.2, description="upper clip of the trajectory ratio: min(rho_traj, 1 + eps_high)")


@register_policy_loss(
    "tic_grpo",
    config=TicGrpoConfig,
    status="paper",
    evidence="TIC-GRPO (Pang & Jin 2025) trajectory ratio with an upper clip; hand-computed in "
    "tests/algorithms/test_losses_sequence.py",
)
def tic_grpo(x: LossInputs, cfg: TicGrpoConfig) -> LossOutput:
    """TIC-GRPO, trajectory-corrected GRPO ("On the Theory and Practice of GRPO", Pang & Jin 2025).

    rho_i = exp(sum_t log r_i,t)  (the exact trajectory ratio, log clamped to +-20)
    l_i   = -min(rho_i, 1 + eps_high) * A_i      (upper clip only, broadcast to the row)
    TIC-GRPO replaces GRPO's 1/T_i by a constant: pair with ``seq_mean_token_sum_norm``.
    """
    lr_BT = log_ratio(x)
    mask = x.loss_mask_BT
    rho_B = torch.exp(seq_sum(lr_BT, mask).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    loss_B = -torch.clamp(rho_B, max=1.0 + cfg.eps_high) * seq_mean(x.advantages_BT, mask)
    high_BT = broadcast(rho_B.detach() > 1.0 + cfg.eps_high, lr_BT) & (x.advantages_BT != 0)
    return LossOutput(loss_BT=broadcast(loss_B, lr_BT), metrics=ratio_metrics(x, lr_BT, None, high_BT))


def _prefix_log_ratio(x: LossInputs, mean: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per position: (sum or mean over the policy tokens k <= t of log r_k, the 1-indexed count t)."""
    mask = x.loss_mask_BT
    lr_BT = log_ratio(x) * mask.to(x.logprobs_BT.dtype)
    cum_BT = torch.cumsum(lr_BT, dim=-1)
    t_BT = prefix_position(mask).clamp(min=1.0).to(cum_BT.dtype)
    return (cum_BT / t_BT if mean else cum_BT), t_BT


class CtpoConfig(ComponentConfig):
    mode: Literal["cumprod", "geomean"] = Field(
        "cumprod", description="prefix product of ratios, or its geometric mean"
    )
    a_low: float = Field(0.025, description="log-space lower bound -a_low * t^p")
    a_high: float = Field(0.05, description="log-space upper bound a_high * t^p")
    a_dual: float | None = Field(0.05, description="dual clip for A < 0 at exp(a_dual * t^p) (None disables)")
    power: float = Field(0.5, description="p: bounds grow as t^p (authors suggest -0.5 for geomean)")


@register_policy_loss(
    "ctpo",
    config=CtpoConfig,
    status="paper",
    evidence="ratio, clip and defaults from the authors' code (horizon-llm/CTPO core_algos.py, "
    "arXiv 2605.07331); hand-computed in tests/algorithms/test_losses_sequence.py",
)
def ctpo(x: LossInputs, cfg: CtpoConfig) -> LossOutput:
    """CTPO, cumulative token policy optimization (Zhang et al. 2026, arXiv 2605.07331; horizon-llm/CTPO).

    c_t   = sum_{k<=t} log r_k  (cumprod) or that sum / t  (geomean), over policy tokens only
    log w_t = min(sg(c_t) + logp_t - sg(logp_t), 10)
    with t the 1-indexed count of policy tokens, clip in log space to [-a_low t^p, a_high t^p]:
    L_t = max(-A w_t, -A exp(clip(log w_t))), dual-clipped at exp(a_dual t^p) for A < 0.
    The weight at t depends on tokens <= t only (causal), the gradient only on token t.
    """
    mask = x.loss_mask_BT
    c_BT, t_BT = _prefix_log_ratio(x, mean=cfg.mode == "geomean")
    log_w_BT = (c_BT.detach() + x.logprobs_BT - x.logprobs_BT.detach()).clamp(-LOG_RATIO_CLAMP, SEQ_LOG_RATIO_MAX)
    scale_BT = t_BT**cfg.power
    lo_BT, hi_BT = -cfg.a_low * scale_BT, cfg.a_high * scale_BT
    adv_BT = x.advantages_BT
    loss_BT = torch.maximum(-adv_BT * torch.exp(log_w_BT), -adv_BT * torch.exp(torch.clamp(log_w_BT, lo_BT, hi_BT)))
    if cfg.a_dual is not None:
        loss_BT = dual_clip(loss_BT, adv_BT, torch.exp(cfg.a_dual * scale_BT))
    lw = log_w_BT.detach()
    low_BT, high_BT = (lw < lo_BT) & (adv_BT < 0), (lw > hi_BT) & (adv_BT > 0)
    metrics = ratio_metrics(x, log_ratio(x), low_BT, high_BT)
    metrics["loss/prefix_log_weight_mean"] = float((lw * mask).sum() / mask.sum().clamp(min=1))
    return LossOutput(loss_BT=loss_BT, metrics=metrics)


class PnpoConfig(ComponentConfig):
    eps_low: float = Field(3e-4, description="prefix weight >= 1 - eps_low (GSPO-like; paper's value not found)")
    eps_high: float = Field(4e-4, description="prefix weight <= 1 + eps_high (GSPO-like; paper's value not found)")


@register_policy_loss(
    "pnpo",
    config=PnpoConfig,
    status="interpretation",
    evidence="arXiv 2608.01418 read through summaries: the weight is the paper's, the gradient "
    "form and clip bounds are ours (as CTPO's geomean); "
    "tests/algorithms/test_losses_sequence.py",
)
def pnpo(x: LossInputs, cfg: PnpoConfig) -> LossOutput:
    """PNPO, prefix-normalized policy optimization (Zhang et al. 2026, arXiv 2608.01418).

    w_t = exp((1/t) sum_{k<=t} log r_k), the geometric mean of the causal prefix's ratios.
    Gradient form and clip are not published; ours (as CTPO's geomean mode):
        log w_t = sg(mean_{k<=t} log r_k) + logp_t - sg(logp_t)
        L_t = max(-A w_t, -A clip(w_t, 1 - eps_low, 1 + eps_high))
    The weight at t depends on tokens <= t only.
    """
    c_BT, _ = _prefix_log_ratio(x, mean=True)
    log_w_BT = (c_BT.detach() + x.logprobs_BT - x.logprobs_BT.detach()).clamp(-LOG_RATIO_CLAMP, SEQ_LOG_RATIO_MAX)
    loss_BT, low_BT, high_BT = ppo_surrogate(
        torch.exp(log_w_BT), x.advantages_BT, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high
    )
    return LossOutput(loss_BT=loss_BT, metrics=ratio_metrics(x, log_ratio(x), low_BT, high_BT))


class DhpoConfig(ComponentConfig):
    mix: Literal["fixed", "entropy"] = Field("fixed", description="fixed weight w, or entropy-guided w_t")
    weight: float = Field(0.5, ge=0.0, le=1.0, description="w of the token ratio in 'fixed' mode (paper: 0.5)")
    eps_low: float = Field(0.2, description="token ratio clip: r >= 1 - eps_low")
    eps_high: float = Field(0.28, description="token ratio clip: r <= 1 + eps_high")
    eps_low_seq: float = Field(3e-4, description="sequence ratio clip: s >= 1 - eps_low_seq")
    eps_high_seq: float = Field(4e-4, description="sequence ratio clip: s <= 1 + eps_high_seq")


@register_policy_loss(
    "dhpo",
    config=DhpoConfig,
    needs={"entropy"},
    status="paper",
    evidence="DHPO's hybrid ratio with the paper's fixed w = 0.5 (default); the non-default "
    "'entropy' mapping is ours; hand-computed in tests/algorithms/test_losses_sequence.py",
)
def dhpo(x: LossInputs, cfg: DhpoConfig) -> LossOutput:
    """DHPO, dynamic hybrid policy optimization ("Orchestrating Tokens and Sequences", 2026).

    m_t  = w_t r_t + (1 - w_t) s_i,t            (token ratio and GSPO's token-form sequence ratio)
    m~_t = w_t clip(r_t, 1-eps_low, 1+eps_high) + (1 - w_t) clip(s_i,t, 1-eps_low_seq, 1+eps_high_seq)
    L_t  = max(-A m_t, -A m~_t)
    'fixed': w_t = ``weight``. 'entropy' (the paper's mapping was not found; ours): w_t =
    H_t / (H_t + mean_row(H)), detached, so a token at the row's mean entropy gets 0.5 and
    high-entropy tokens lean on their own ratio.
    """
    lr_BT = log_ratio(x)
    mask = x.loss_mask_BT
    r_BT = torch.exp(lr_BT)
    s_BT = _sequence_token_ratio(x, seq_mean(lr_BT, mask))
    if cfg.mix == "entropy":
        entropy_BT = require(x, "entropy_BT", "dhpo (mix='entropy')").detach()
        denom_BT = entropy_BT + broadcast(seq_mean(entropy_BT, mask), entropy_BT)
        w_BT = torch.where(denom_BT > 0, entropy_BT / denom_BT.clamp(min=1e-12), torch.full_like(entropy_BT, 0.5))
    else:
        w_BT = torch.full_like(r_BT, cfg.weight)
    m_BT = w_BT * r_BT + (1.0 - w_BT) * s_BT
    m_clipped_BT = w_BT * r_BT.clamp(1.0 - cfg.eps_low, 1.0 + cfg.eps_high) + (1.0 - w_BT) * s_BT.clamp(
        1.0 - cfg.eps_low_seq, 1.0 + cfg.eps_high_seq
    )
    adv_BT = x.advantages_BT
    loss_BT = torch.maximum(-adv_BT * m_BT, -adv_BT * m_clipped_BT)
    with torch.no_grad():
        clipped_BT = (-adv_BT * m_clipped_BT) > (-adv_BT * m_BT)
    return LossOutput(
        loss_BT=loss_BT, metrics=ratio_metrics(x, lr_BT, clipped_BT & (adv_BT < 0), clipped_BT & (adv_BT > 0))
    )


class SspoConfig(ComponentConfig):
    tau_pos: float = Field(0.4, gt=0.0, description="soft log-ratio bound for A > 0: tau * arctan(log r / tau)")
    tau_neg: float = Field(0.4, gt=0.0, description="soft log-ratio bound for A <= 0")


@register_policy_loss(
    "sspo",
    config=SspoConfig,
    status="paper",
    evidence="SSPO's exp-arctan gate (Bridging GMPO and SAPO, 2026); one tau per advantage sign "
    "is our parametrisation, equal by default; tests/algorithms/test_losses_sequence.py",
)
def sspo(x: LossInputs, cfg: SspoConfig) -> LossOutput:
    """SSPO, soft sequence policy optimization ("Bridging GMPO and SAPO", 2026), exp-arctan gate.

    f(r_t) = exp(tau * arctan(log r_t / tau))    (a soft, bounded version of GMPO's log clip)
    W_i = [prod_t f(r_t)]^(1/T_i),  l_i = -mean_t(A_i,t) * W_i, broadcast to the row.
    grad: d l_i / d logp_t = -A_i W_i (1/T_i) / (1 + (log r_t / tau)^2) = F_i * w_t * A_i; at
    r = 1 this is GSPO's/GMPO's -A_i / T_i. tau per advantage sign (our parametrisation of the gate).
    """
    lr_BT = log_ratio(x)
    mask = x.loss_mask_BT
    adv_BT = x.advantages_BT
    tau_BT = torch.where(adv_BT > 0, torch.full_like(lr_BT, cfg.tau_pos), torch.full_like(lr_BT, cfg.tau_neg))
    gate_BT = tau_BT * torch.atan(lr_BT / tau_BT)
    loss_B = -seq_mean(adv_BT, mask) * torch.exp(seq_mean(gate_BT, mask))
    return LossOutput(loss_BT=broadcast(loss_B, lr_BT), metrics=ratio_metrics(x, lr_BT))


class KimiConfig(ComponentConfig):
    tau: float = Field(0.1, gt=0.0, description="weight of the tau/2 (sequence log-ratio)^2 term (not published; ours)")


@register_policy_loss(
    "kimi",
    config=KimiConfig,
    status="interpretation",
    evidence="Kimi k1.5's surrogate as the report gives it, but tau is not published (ours); "
    "hand-computed in tests/algorithms/test_losses_sequence.py",
)
def kimi(x: LossInputs, cfg: KimiConfig) -> LossOutput:
    """Kimi k1.5 online mirror descent surrogate (Kimi Team 2025), sequence level.

    l_i = -sum_t A_i,t logp_i,t + (tau / 2) * (sum_t log r_i,t)^2, broadcast to the row;
    with the ``kimi`` advantage (r - group mean) its gradient is Kimi's
    (r_i - r_bar) grad log pi(y_i) - (tau/2) grad (log pi(y_i)/pi_old(y_i))^2.
    Pair with ``seq_mean_token_mean`` for Kimi's (1/k) sum_i.
    """
    lr_BT = log_ratio(x)
    mask = x.loss_mask_BT
    loss_B = -seq_sum(x.advantages_BT * x.logprobs_BT, mask) + 0.5 * cfg.tau * seq_sum(lr_BT, mask) ** 2
    return LossOutput(loss_BT=broadcast(loss_B, lr_BT), metrics=ratio_metrics(x, lr_BT))

"""Corrections for the gap between the sampler's and the learner's distributions (off-policy tokens,
training/inference mismatch). SIS and score centering read the sampler's top-k candidates (need
``topk``): ``*_topk_logprobs_BTK`` are logprobs at the same K candidate ids of each position."""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.losses.common import (
    LOG_RATIO_CLAMP,
    log_ratio,
    ppo_surrogate,
    ratio_metrics,
    seeded_generator,
)
from agent_rl.algorithms.registry import (
    ComponentConfig,
    LossInputs,
    LossOutput,
    register_policy_loss,
    require,
)


def _topk_mask(x: LossInputs, like_BTK: torch.Tensor) -> torch.Tensor:
    return x.topk_mask_BTK.bool() if x.topk_mask_BTK is not None else torch.ones_like(like_BTK, dtype=torch.bool)


class SisConfig(ComponentConfig):
    eps_low: float = Field(0.2, description="PPO clip of the resulting weight: >= 1 - eps_low")
    eps_high: float = Field(0.28, description="PPO clip of the resulting weight: <= 1 + eps_high")
    sample: bool = Field(True, description="draw the accept test (paper); False uses its expectation a*1 + (1-a)*r")
    seed: int = Field(0, description="seed of the accept draws (derived with the step)")


@register_policy_loss(
    "sis",
    config=SisConfig,
    needs={"topk"},
    status="interpretation",
    evidence="arXiv 2607.04728 read through its abstract and summaries plus a third-party "
    "reproduction of Algorithm 1; K not found (ours); "
    "tests/algorithms/test_losses_mismatch.py",
)
def sis(x: LossInputs, cfg: SisConfig) -> LossOutput:
    """SIS, selective importance sampling (Li et al. 2026, arXiv 2607.04728; reproduction of Algorithm 1).

    For y_t among the top-K candidates: envelope M_t = max_{v in top-K} pi(v) / pi_old(v), accept
    with probability a_t = min(1, r_t / M_t). Accepted tokens are treated as on-policy, weight
    w_t = pi_t / sg(pi_t) (value 1, gradient grad logp); rejected tokens and tokens outside the
    top-K keep w_t = r_t. L_t = max(-A w_t, -A clip(w_t, 1 - eps_low, 1 + eps_high)).
    Membership: logp_old(y_t) >= the smallest old logprob among the candidates.
    """
    cur_BTK = require(x, "topk_logprobs_BTK", "sis").detach()
    old_BTK = require(x, "old_topk_logprobs_BTK", "sis").detach()
    valid_BTK = _topk_mask(x, old_BTK)
    lr_BT = log_ratio(x)
    ratio_BT = torch.exp(lr_BT)
    with torch.no_grad():
        env_BT = torch.where(valid_BTK, (cur_BTK - old_BTK).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP), -torch.inf).amax(
            -1
        )
        kth_BT = torch.where(valid_BTK, old_BTK, torch.inf).amin(-1)
        in_topk_BT = (x.old_logprobs_BT.detach() >= kth_BT - 1e-6) & valid_BTK.any(-1)
        accept_p_BT = torch.where(
            in_topk_BT, torch.exp((lr_BT.detach() - env_BT).clamp(max=0.0)), torch.zeros_like(lr_BT)
        )
    on_policy_BT = torch.exp(x.logprobs_BT - x.logprobs_BT.detach())
    if cfg.sample:
        gen = seeded_generator(cfg.seed, x.step, torch.device("cpu"))
        u_BT = torch.rand(accept_p_BT.shape, generator=gen, dtype=accept_p_BT.dtype).to(accept_p_BT.device)
        accepted_BT = u_BT < accept_p_BT
        w_BT = torch.where(accepted_BT, on_policy_BT, ratio_BT)
        accepted = accepted_BT.to(lr_BT.dtype)
    else:
        w_BT = accept_p_BT * on_policy_BT + (1.0 - accept_p_BT) * ratio_BT
        accepted = accept_p_BT
    loss_BT, low_BT, high_BT = ppo_surrogate(w_BT, x.advantages_BT, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high)
    metrics = ratio_metrics(x, lr_BT, low_BT, high_BT)
    mask = x.loss_mask_BT.to(lr_BT.dtype)
    metrics["loss/sis_accept_frac"] = float((accepted * mask).sum() / mask.sum().clamp(min=1))
    return LossOutput(loss_BT=loss_BT, metrics=metrics)


class ScoreCenteringConfig(ComponentConfig):
    cap: float | None = Field(2.0, gt=0.0, description="C of w(r) = min(r, C) (TIS+SC); None: w = 1 (SC alone)")
    tail_min: float = Field(1e-6, gt=0.0, description="floor of the tail masses 1 - sum_H q and 1 - sum_H p")


@register_policy_loss(
    "score_centering",
    config=ScoreCenteringConfig,
    needs={"topk", "rollout_logprobs"},
    status="interpretation",
    evidence="from torchtitan's ScoreCenteringLoss (a third-party implementation), the arXiv text "
    "was not read; hand-computed in tests/algorithms/test_losses_mismatch.py",
)
def score_centering(x: LossInputs, cfg: ScoreCenteringConfig) -> LossOutput:
    """Score centering for training/inference mismatch ("Score Centering Stabilizes Off-policy RL", 2026).

    q = sampler (generator) probs, p = learner probs, H = the sampler's top-k set, w(r) = min(r, C):
        rho    = (1 - sum_H q) / (1 - sum_H p)        (tails floored at tail_min)
        a      = rho * w(1 / rho)
        coef_v = q_v w(p_v / q_v) - a p_v             (v in H, detached)
        L_t    = -A_t ( sg(w(p_y / q_y)) logp_y - sum_{v in H} sg(coef_v) logp_v )
    The second sum subtracts the generator-expected score, cancelling the drift term of the gradient;
    ``cap: null`` is SC alone, the default C = 2 is TIS+SC. Gradient flows through ``topk_logprobs_BTK``.
    """
    q_BTK = torch.exp(require(x, "rollout_topk_logprobs_BTK", "score_centering").detach())
    cur_BTK = require(x, "topk_logprobs_BTK", "score_centering")
    rollout_BT = require(x, "rollout_logprobs_BT", "score_centering").detach()
    valid_BTK = _topk_mask(x, cur_BTK).to(q_BTK.dtype)

    def w(r: torch.Tensor) -> torch.Tensor:
        return r.clamp(max=cfg.cap) if cfg.cap is not None else torch.ones_like(r)

    with torch.no_grad():
        p_BTK = torch.exp(cur_BTK.detach())
        q_tail_BT = (1.0 - (q_BTK * valid_BTK).sum(-1)).clamp(min=cfg.tail_min)
        p_tail_BT = (1.0 - (p_BTK * valid_BTK).sum(-1)).clamp(min=cfg.tail_min)
        rho_BT = q_tail_BT / p_tail_BT
        a_BT = rho_BT * w(1.0 / rho_BT)
        coef_BTK = (q_BTK * w(p_BTK / q_BTK.clamp(min=1e-30)) - a_BT.unsqueeze(-1) * p_BTK) * valid_BTK
        w_y_BT = w(torch.exp((x.logprobs_BT.detach() - rollout_BT).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)))
    centered_BT = (coef_BTK * cur_BTK * valid_BTK).sum(-1)
    loss_BT = -x.advantages_BT * (w_y_BT * x.logprobs_BT - centered_BT)
    metrics = ratio_metrics(x, log_ratio(x))
    mask = x.loss_mask_BT.to(rho_BT.dtype)
    metrics["loss/sc_tail_ratio_mean"] = float((rho_BT * mask).sum() / mask.sum().clamp(min=1))
    return LossOutput(loss_BT=loss_BT, metrics=metrics)


class BpoConfig(ComponentConfig):
    eps: float = Field(0.1, gt=0.0, description="smoothing of the complementary probabilities (BPO: 0.1)")
    cap: float = Field(3.0, gt=0.0, description="C: the weight is min(omega, C) (BPO: 3)")
    eps_low: float = Field(0.2, description="drop A < 0 tokens with omega < 1 - eps_low")
    eps_high: float = Field(0.28, description="drop A > 0 tokens with omega > 1 + eps_high")


@register_policy_loss(
    "bpo",
    config=BpoConfig,
    needs={"rollout_logprobs"},
    status="interpretation",
    evidence="omega and mask from TRL's experimental BPOTrainer (a third-party implementation) "
    "and a reading note, not the paper's text; not compared to TRL by a test; "
    "tests/algorithms/test_losses_mismatch.py",
)
def bpo(x: LossInputs, cfg: BpoConfig) -> LossOutput:
    """BPO, Bellman policy optimization (Song et al. 2026, arXiv 2609.15987; TRL's BPOTrainer).

    omega_t = (1 + eps - mu(y_t)) / (1 + eps - pi(y_t)),  mu = sampler prob (``rollout_logprobs_BT``,
    else pi_old), pi detached. Mask M_t = 0 if (A < 0 and omega < 1 - eps_low) or
    (A > 0 and omega > 1 + eps_high), on the uncapped omega.
    L_t = -A_t M_t min(sg(omega_t), C) logp_t   (pair with ``seq_mean_token_mean``, as BPO).
    """
    behaviour_BT = x.rollout_logprobs_BT if x.rollout_logprobs_BT is not None else x.old_logprobs_BT
    adv_BT = x.advantages_BT
    with torch.no_grad():
        mu_BT, pi_BT = torch.exp(behaviour_BT.detach()), torch.exp(x.logprobs_BT.detach())
        omega_BT = (1.0 + cfg.eps - mu_BT) / (1.0 + cfg.eps - pi_BT)
        drop_low_BT = (adv_BT < 0) & (omega_BT < 1.0 - cfg.eps_low)
        drop_high_BT = (adv_BT > 0) & (omega_BT > 1.0 + cfg.eps_high)
        weight_BT = omega_BT.clamp(max=cfg.cap) * (~(drop_low_BT | drop_high_BT)).to(omega_BT.dtype)
    loss_BT = -adv_BT * weight_BT * x.logprobs_BT
    return LossOutput(loss_BT=loss_BT, metrics=ratio_metrics(x, log_ratio(x), drop_low_BT, drop_high_BT))

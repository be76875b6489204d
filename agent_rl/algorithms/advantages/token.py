"""Token-level reshaping of outcome advantages: per-token multipliers or per-token terms.

Each estimator starts from the GRPO advantage of its row (except ``opsa``, which needs no reward)
and reads per-token extras (logprobs, entropy, teacher logprobs) from ``AdvantageInputs``.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from agent_rl.algorithms.advantages.common import (
    discounted_returns,
    group_inverse,
    grpo_advantage_B,
    masked_group_norm,
    segment_mean_std,
    sequence_rewards,
)
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    register_advantage,
    require,
)

LOG_RATIO_CLAMP = 20.0  # clamp log-ratios before exp(): sampler/learner mismatch can overflow


class A3poConfig(ComponentConfig):
    token_fraction: float = Field(
        0.2, ge=0.0, le=1.0, description="share of tokens amplified per polarity (paper: 20%)"
    )
    init_multiplier: float = Field(2.0, description="multiplier at step 0 (paper: 2)")
    decay_per_step: float = Field(0.005, description="multiplier decay per trainer step (paper: 0.005)")
    min_multiplier: float = Field(1.0, description="floor of the multiplier (paper: 1, reached at step 200)")
    eps: float = Field(1e-6, description="added to the group std of the base GRPO advantage")
    norm_by_std: bool = Field(True, description="std normalization of the base GRPO advantage")


def _select_extreme(values_BT: torch.Tensor, where_BT: torch.Tensor, fraction: float, lowest: bool) -> torch.Tensor:
    """Boolean mask of the ``ceil(fraction * n)`` lowest (or highest) values among the n ``where_BT`` entries."""
    chosen_BT = torch.zeros_like(where_BT, dtype=torch.bool)
    idx = torch.nonzero(where_BT.flatten()).flatten()
    k = math.ceil(round(fraction * idx.numel(), 9))
    if k == 0:
        return chosen_BT
    vals = values_BT.flatten()[idx]
    order = torch.argsort(vals if lowest else -vals, stable=True)
    chosen_BT.view(-1)[idx[order[:k]]] = True
    return chosen_BT


@register_advantage(
    "a3po",
    config=A3poConfig,
    needs={"old_logprobs"},
    status="interpretation",
    evidence="formula of Rethinking Sample Polarity in RLVR (2025) as the docstring gives it; the "
    "batch-wide pool of the token fractions is our reading; hand-computed in "
    "tests/algorithms/test_advantages_reshaping.py",
)
def a3po(x: AdvantageInputs, cfg: A3poConfig) -> AdvantageOutput:
    """A3PO asymmetric token advantages (Rethinking Sample Polarity in RLVR, 2025), on GRPO/DAPO.

    m(step) = max(init_multiplier - decay_per_step * step, min_multiplier)  (2 -> 1 over 200 steps)
    A_it = m * A_i  for the token_fraction lowest-probability tokens of positive rollouts (A_i > 0)
                    and the token_fraction highest-probability tokens of negative rollouts (A_i < 0);
    A_it = A_i      otherwise. Probabilities are the learner's before the update (old_logprobs);
    the fractions are taken over all loss tokens of that polarity in the batch (our reading).
    """
    logp_BT = require(x, "old_logprobs_BT", "a3po")
    adv_B = grpo_advantage_B(sequence_rewards(x), x.group_index_B, cfg.eps, cfg.norm_by_std)
    mask_BT = x.loss_mask_BT > 0
    multiplier = max(cfg.init_multiplier - cfg.decay_per_step * x.step, cfg.min_multiplier)
    low_pos_BT = _select_extreme(logp_BT, mask_BT & (adv_B > 0)[:, None], cfg.token_fraction, lowest=True)
    high_neg_BT = _select_extreme(logp_BT, mask_BT & (adv_B < 0)[:, None], cfg.token_fraction, lowest=False)
    scale_BT = torch.where(low_pos_BT | high_neg_BT, multiplier, 1.0).double()
    adv_BT = adv_B[:, None] * scale_BT * mask_BT.double()
    return AdvantageOutput(advantages_BT=adv_BT.to(torch.float32), metrics={"adv/a3po_multiplier": multiplier})


class ErpoConfig(ComponentConfig):
    num_buckets: int = Field(4, ge=1, description="K reasoning-stage buckets by relative token position (our choice)")
    eta: float = Field(0.2, description="weight of the entropy-regulated token term (our choice)")
    target_std: float = Field(1.0, description="std the token term is scaled to within a group")
    eps: float = Field(1e-6, description="added to every std before dividing")
    norm_by_std: bool = Field(True, description="std normalization of the base GRPO advantage")


def _stage_buckets(mask_BT: torch.Tensor, num_buckets: int) -> torch.Tensor:
    """Bucket of each loss token: floor(K * k / L), k its index among the row's L loss tokens."""
    m = mask_BT.long()
    rank_BT = torch.cumsum(m, -1) - 1
    length_B = m.sum(-1).clamp(min=1)
    return torch.div(rank_BT * num_buckets, length_B[:, None], rounding_mode="floor").clamp(0, num_buckets - 1)


@register_advantage(
    "erpo",
    config=ErpoConfig,
    needs={"entropy", "ref_logprobs", "old_logprobs"},
    status="interpretation",
    evidence="ERPO's token-level advantage (2026); num_buckets 4 and eta 0.2 are ours (config "
    "fields marked 'our choice'); tests/algorithms/test_advantages_reshaping.py",
)
def erpo(x: AdvantageInputs, cfg: ErpoConfig) -> AdvantageOutput:
    """ERPO entropy-regulated token-level advantage (Token-Level Entropy-Regulated PO, 2026).

    s_it = log pi(y_t) - log pi_ref(y_t) (drift from the reference; pi = learner before the update)
    s~_it = (s_it - mu_k) / (sigma_k + eps) within reasoning-stage bucket k of the group (tokens of
    the G rollouts whose relative position falls in bucket k)
    B_it = H_it * sign(A_i) * s~_it (H the token entropy);  Psi = B * target_std / (std_G(B) + eps)
    C_it = A_i + eta * Psi_it;  A_it = (C_it - mean_G(C)) / (std_G(C) + eps) over the group's tokens.
    """
    entropy_BT = require(x, "entropy_BT", "erpo").double()
    ref_BT = require(x, "ref_logprobs_BT", "erpo").double()
    logp_BT = require(x, "old_logprobs_BT", "erpo").double()
    mask_BT = x.loss_mask_BT.double()
    adv_B = grpo_advantage_B(sequence_rewards(x), x.group_index_B, cfg.eps, cfg.norm_by_std)
    sel_BT = mask_BT > 0
    inverse_B, num_groups = group_inverse(x.group_index_B)
    group_BT = inverse_B[:, None].expand_as(sel_BT)
    # drift standardized within (group, stage bucket)
    drift = (logp_BT - ref_BT)[sel_BT]
    keys = (group_BT * cfg.num_buckets + _stage_buckets(x.loss_mask_BT, cfg.num_buckets))[sel_BT]
    mean, std = segment_mean_std(drift, keys, num_groups * cfg.num_buckets)
    z_BT = torch.zeros_like(mask_BT)
    z_BT[sel_BT] = (drift - mean[keys]) / (std[keys] + cfg.eps)
    # entropy-weighted, signed by the outcome, scaled to target_std within the group
    b = (entropy_BT * torch.sign(adv_B)[:, None] * z_BT)[sel_BT]
    group_keys = group_BT[sel_BT]
    _, b_std = segment_mean_std(b, group_keys, num_groups)
    psi_BT = torch.zeros_like(mask_BT)
    psi_BT[sel_BT] = b * cfg.target_std / (b_std[group_keys] + cfg.eps)
    c_BT = (adv_B[:, None] + cfg.eta * psi_BT) * mask_BT
    adv_BT = masked_group_norm(c_BT, mask_BT, x.group_index_B, cfg.eps)
    return AdvantageOutput(advantages_BT=adv_BT.to(torch.float32))


class FipoConfig(ComponentConfig):
    gamma: float = Field(
        0.995, description="discount of future log-ratios (horizon of a few hundred tokens; our choice)"
    )
    ratio_cap: float = Field(10.0, description="c: future tokens with ratio > c are left out (paper: 10)")
    eps_low: float = Field(0.0, description="multiplier >= 1 - eps_low (paper: f in [1, 1.2])")
    eps_high: float = Field(0.2, description="multiplier <= 1 + eps_high")
    eps: float = Field(1e-6, description="added to the group std of the base GRPO advantage")
    norm_by_std: bool = Field(True, description="std normalization of the base GRPO advantage")


def future_kl_multiplier(
    log_ratio_BT: torch.Tensor, mask_BT: torch.Tensor, gamma: float, ratio_cap: float, low: float, high: float
) -> torch.Tensor:
    """f_t = clip(exp(F_t), low, high), F_t = sum_{k >= t} gamma^(k-t) 1[rho_k <= cap] log rho_k (detached)."""
    log_ratio_BT = log_ratio_BT.detach().double()
    keep_BT = (log_ratio_BT <= math.log(ratio_cap)).double()
    future_BT = discounted_returns(log_ratio_BT * keep_BT, mask_BT, gamma)
    return torch.exp(future_BT.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)).clamp(low, high)


@register_advantage(
    "fipo",
    config=FipoConfig,
    needs={"old_logprobs", "rollout_logprobs"},
    status="interpretation",
    evidence="FIPO's future-KL multiplier (2026); the discount gamma 0.995 is ours ('our choice' in "
    "the config); tests/algorithms/test_advantages_reshaping.py",
)
def fipo(x: AdvantageInputs, cfg: FipoConfig) -> AdvantageOutput:
    """FIPO Future-KL Influenced Policy Optimization (2026): future-drift multiplier on the advantage.

    Delta_k = log pi(y_k) - log mu(y_k);  M_k = 1[exp(Delta_k) <= c]
    F_t = sum_{k >= t} M_k gamma^(k-t) Delta_k;  f_t = clip(exp(F_t), 1 - eps_low, 1 + eps_high) (detached)
    A_it = f_t * A_i (GRPO). Here pi is the learner before the update (old_logprobs) and mu the
    sampler (rollout_logprobs), so f_t > 1 only under policy lag; ``future_kl_multiplier`` is the
    same rule for a loss that has the live logprobs.
    """
    old_BT = require(x, "old_logprobs_BT", "fipo")
    rollout_BT = require(x, "rollout_logprobs_BT", "fipo")
    mask_BT = x.loss_mask_BT.double()
    adv_B = grpo_advantage_B(sequence_rewards(x), x.group_index_B, cfg.eps, cfg.norm_by_std)
    log_ratio_BT = (old_BT - rollout_BT) * mask_BT
    f_BT = future_kl_multiplier(log_ratio_BT, mask_BT, cfg.gamma, cfg.ratio_cap, 1 - cfg.eps_low, 1 + cfg.eps_high)
    adv_BT = adv_B[:, None] * f_BT * mask_BT
    n = mask_BT.sum().clamp(min=1)
    metrics = {"adv/fipo_multiplier_mean": float((f_BT * mask_BT).sum() / n)}
    return AdvantageOutput(advantages_BT=adv_BT.to(torch.float32), metrics=metrics)


class OpsaConfig(ComponentConfig):
    coef: float = Field(1.0, description="magnitude of the fixed negative advantage at average entropy")
    normalize: bool = Field(True, description="divide entropy by its batch mean over loss tokens (scale-free)")
    eps: float = Field(1e-8, description="added to the mean entropy before dividing")


@register_advantage(
    "opsa",
    config=OpsaConfig,
    needs={"entropy"},
    status="interpretation",
    evidence="built from OPSA's abstract (seed 003): the scaling of the negative advantage is ours; "
    "tests/algorithms/test_advantages_reshaping.py",
)
def opsa(x: AdvantageInputs, cfg: OpsaConfig) -> AdvantageOutput:
    """OPSA On-Policy Self-Adaptation (2026): entropy-adaptive negative advantages, no teacher, no reward.

    A_it = -coef * H_it / (mean_batch(H) + eps)   (normalize=True; else -coef * H_it)
    A negative advantage on every sampled token, larger at high-entropy positions, suppresses tail
    tokens there (an interpretation of the abstract: its exact scaling is not given).
    """
    entropy_BT = require(x, "entropy_BT", "opsa").double()
    mask_BT = x.loss_mask_BT.double()
    scale = 1.0
    if cfg.normalize:
        scale = float((entropy_BT * mask_BT).sum() / mask_BT.sum().clamp(min=1)) + cfg.eps
    adv_BT = -cfg.coef * entropy_BT / scale * mask_BT
    return AdvantageOutput(advantages_BT=adv_BT.to(torch.float32))


class ScGrpoConfig(ComponentConfig):
    floor: float = Field(0.0, ge=0.0, le=1.0, description="f(D) = floor + (1 - floor) * D / max_row(D)")
    eps: float = Field(1e-6, description="added to the group std of the base GRPO advantage")
    norm_by_std: bool = Field(True, description="std normalization of the base GRPO advantage")


@register_advantage(
    "sc_grpo",
    config=ScGrpoConfig,
    needs={"teacher_logprobs", "old_logprobs"},
    status="paper",
    evidence="SC-GRPO (Learning from Own Solutions, 2026) A_it = f(D_it) A_i as the docstring "
    "states it; hand-computed in tests/algorithms/test_advantages_reshaping.py",
)
def sc_grpo(x: AdvantageInputs, cfg: ScGrpoConfig) -> AdvantageOutput:
    """SC-GRPO self-conditioned credit (Learning from Own Solutions, 2026): A_it = f(D_it) * A_i.

    D_it estimates KL(pi(.|x, solution, y_<t) || pi(.|x, y_<t)) at the sampled token, with
    r = pi_sol(y_t) / pi(y_t) (teacher_logprobs = the solution-conditioned pass, old_logprobs = plain):
    D_it = r log r - r + 1 >= 0 (unbiased for that KL under samples of pi);
    f = floor + (1 - floor) * D_it / max_t D_it within the row, in [0, 1]; a row with max D = 0 keeps f = 1.
    """
    teacher_BT = require(x, "teacher_logprobs_BT", "sc_grpo").double()
    old_BT = require(x, "old_logprobs_BT", "sc_grpo").double()
    mask_BT = x.loss_mask_BT.double()
    adv_B = grpo_advantage_B(sequence_rewards(x), x.group_index_B, cfg.eps, cfg.norm_by_std)
    log_r_BT = ((teacher_BT - old_BT) * mask_BT).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    r_BT = torch.exp(log_r_BT)
    d_BT = (r_BT * log_r_BT - r_BT + 1.0).clamp(min=0.0) * mask_BT
    max_B = d_BT.max(-1).values if d_BT.shape[1] else d_BT.new_zeros(d_BT.shape[0])
    f_BT = torch.where(max_B[:, None] > 0, cfg.floor + (1 - cfg.floor) * d_BT / max_B[:, None].clamp(min=1e-300), 1.0)
    adv_BT = adv_B[:, None] * f_BT * mask_BT
    return AdvantageOutput(advantages_BT=adv_BT.to(torch.float32))

"""Shared pieces of the policy losses, and the cross-cutting options every ratio-based loss takes.

Helpers here never reduce a loss to a scalar: sequence-level quantities are ``_B`` tensors that
the losses broadcast back to their tokens, and metrics are plain floats for logging.

The cross-cutting options (sampler/learner importance weights, entropy bonus, NLL on positive
samples, KL to a reference) are applied once, after the loss, by :func:`apply_cross_cutting`::

    out = POLICY_LOSSES(cfg.loss)(x, cfg.loss)        # any registered loss
    out = apply_cross_cutting(x, out, opts)           # the same options for every loss
    loss = AGGREGATIONS(cfg.aggregation)(out.loss_BT, x.loss_mask_BT, agg_inputs, cfg.aggregation)

:func:`compute_policy_loss` does the first two lines.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, field_validator

from agent_rl.algorithms.registry import (
    KLS,
    POLICY_LOSSES,
    ComponentConfig,
    KlInputs,
    LossInputs,
    LossOutput,
    require,
)

# clamp log-ratios before exp(): sampler/learner mismatch can overflow
LOG_RATIO_CLAMP = 20.0


# ----------------------------------------------------------------------------------------------
# Masked statistics (floats are for metrics and detached coefficients only).


def masked_mean(x_BT: torch.Tensor, mask_BT: torch.Tensor) -> float:
    mask = mask_BT.to(x_BT.dtype)
    return float((x_BT * mask).sum() / mask.sum().clamp(min=1))


def masked_max(x_BT: torch.Tensor, mask_BT: torch.Tensor, empty: float = 1.0) -> float:
    if not bool(mask_BT.bool().any()):
        return empty
    return float(x_BT[mask_BT.bool()].max())


def log_ratio(x: LossInputs) -> torch.Tensor:
    """log(pi / pi_old) per token, clamped so that exp() cannot overflow; carries the gradient."""
    return (x.logprobs_BT - x.old_logprobs_BT).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def seq_len(mask_BT: torch.Tensor) -> torch.Tensor:
    """Masked tokens per row, at least 1 (so fully masked rows divide by 1, not 0)."""
    return mask_BT.to(torch.float32).sum(dim=-1).clamp(min=1.0)


def seq_sum(x_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    return (x_BT * mask_BT.to(x_BT.dtype)).sum(dim=-1)


def seq_mean(x_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    return seq_sum(x_BT, mask_BT) / seq_len(mask_BT).to(x_BT.dtype)


def broadcast(x_B: torch.Tensor, like_BT: torch.Tensor) -> torch.Tensor:
    """A per-sequence term on every token of its sequence (the aggregation masks padding)."""
    return x_B.unsqueeze(-1).expand_as(like_BT)


def prefix_position(mask_BT: torch.Tensor) -> torch.Tensor:
    """1-indexed count of policy tokens up to and including each position (observations skipped)."""
    return torch.cumsum(mask_BT.to(torch.float32), dim=-1)


def group_ids(group_index_B: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense group ids 0..n-1 of each row, and n."""
    uniq, inverse = torch.unique(group_index_B, return_inverse=True)
    return inverse, int(uniq.numel())


def group_mean(values_B: torch.Tensor, gid_B: torch.Tensor, n: int) -> torch.Tensor:
    """Mean of ``values_B`` over each row's group, per row."""
    sums = torch.zeros(n, dtype=values_B.dtype, device=values_B.device).index_add_(0, gid_B, values_B)
    counts = torch.zeros(n, dtype=values_B.dtype, device=values_B.device).index_add_(
        0, gid_B, torch.ones_like(values_B)
    )
    return (sums / counts)[gid_B]


def reward_polarity(x: LossInputs, entry: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Rows above (positive) / below (negative) their group's mean reward, dense group ids, n groups.

    Above the mean, not ``reward > 0``: works for {0,1}, {-1,1} and graded rewards alike.
    """
    device = x.logprobs_BT.device
    rewards_B = require(x, "rewards_B", entry).to(device=device, dtype=torch.float64)
    gid_B, n = group_ids(require(x, "group_index_B", entry).to(device))
    mean_B = group_mean(rewards_B, gid_B, n)
    tol_B = 1e-6 * (1.0 + mean_B.abs())
    return rewards_B > mean_B + tol_B, rewards_B < mean_B - tol_B, gid_B, n


def seeded_generator(seed: int, step: int, device: torch.device) -> torch.Generator:
    """Explicit, derived seed (never the global RNG): same (seed, step) -> same draws."""
    gen = torch.Generator(device=device)
    gen.manual_seed(hash((seed, step)) & 0x7FFFFFFF)
    return gen


# ----------------------------------------------------------------------------------------------
# Surrogates and metrics.


def ppo_surrogate(
    ratio_BT: torch.Tensor,
    adv_BT: torch.Tensor,
    low: float | torch.Tensor,
    high: float | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """max(-A r, -A clip(r, low, high)) and where the clip removed the gradient (low side, high side)."""
    unclipped_BT = -adv_BT * ratio_BT
    clipped_BT = -adv_BT * torch.clamp(ratio_BT, low, high)
    loss_BT = torch.maximum(unclipped_BT, clipped_BT)
    with torch.no_grad():
        r = ratio_BT.detach()
        clip_low_BT = (r < low) & (adv_BT < 0)
        clip_high_BT = (r > high) & (adv_BT > 0)
    return loss_BT, clip_low_BT, clip_high_BT


def dual_clip(loss_BT: torch.Tensor, adv_BT: torch.Tensor, c: float | torch.Tensor | None) -> torch.Tensor:
    """Dual clip (Ye et al. 2020): for A < 0 the loss is at most -A * c."""
    if c is None:
        return loss_BT
    return torch.where(adv_BT < 0, torch.minimum(loss_BT, -adv_BT * c), loss_BT)


def ratio_metrics(
    x: LossInputs,
    log_ratio_BT: torch.Tensor,
    clip_low_BT: torch.Tensor | None = None,
    clip_high_BT: torch.Tensor | None = None,
) -> dict[str, float]:
    """The metrics every loss reports: clip fractions, ratio mean/max, approx KL, entropy (if given)."""
    mask = x.loss_mask_BT
    with torch.no_grad():
        lr = log_ratio_BT.detach()
        r = torch.exp(lr.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
        zero = torch.zeros_like(r)
        metrics = {
            "loss/clip_frac_low": masked_mean(clip_low_BT.to(r.dtype), mask) if clip_low_BT is not None else 0.0,
            "loss/clip_frac_high": masked_mean(clip_high_BT.to(r.dtype), mask) if clip_high_BT is not None else 0.0,
            "loss/ratio_mean": masked_mean(r, mask),
            "loss/ratio_max": masked_max(torch.where(mask.bool(), r, zero), mask),
            "loss/approx_kl": masked_mean(0.5 * lr**2, mask),
        }
        if x.entropy_BT is not None:
            metrics["loss/entropy"] = masked_mean(x.entropy_BT.detach(), mask)
    return metrics


# ----------------------------------------------------------------------------------------------
# Cross-cutting options.


class RolloutIsOptions(BaseModel):
    """Truncated / masked importance weights between the sampler and the learner (TIS, MIS, IcePop).

    w = pi_old / pi_rollout from ``old_logprobs_BT`` and ``rollout_logprobs_BT`` (detached); token
    level per token, sequence level exp(sum_t log w_t) on every token of the row.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    level: Literal["token", "sequence"] = Field("token", description="one weight per token or per sequence")
    mode: Literal["truncate", "mask"] = Field(
        "truncate", description="truncate: min(w, threshold) (TIS); mask: w, or 0 outside [threshold_low, threshold]"
    )
    threshold: float = Field(2.0, gt=0.0, description="upper bound of the weight")
    threshold_low: float | None = Field(None, ge=0.0, description="mask mode only: weights below it are zeroed")


class LossOptions(BaseModel):
    """Options every ratio-based loss takes, applied once by :func:`apply_cross_cutting`."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    rollout_is: RolloutIsOptions | None = Field(None, description="sampler/learner importance weights (None: off)")
    entropy_coef: float = Field(0.0, description="entropy bonus: loss -= coef * entropy_BT (needs entropy)")
    nll_coef: float = Field(
        0.0, ge=0.0, description="VAPO: loss += coef * -logp on rows whose reward is above nll_reward_threshold"
    )
    nll_reward_threshold: float = Field(0.0, description="a row is positive for the NLL term when its reward > this")
    kl_coef: float = Field(0.0, ge=0.0, description="loss += coef * kl(logp, ref_logp) (needs ref_logprobs)")
    kl: SerializeAsAny[ComponentConfig] = Field(
        default_factory=lambda: KLS.parse_config("k3"), description="KL estimator from the kl registry"
    )

    @field_validator("kl", mode="before")
    @classmethod
    def _parse_kl(cls, raw: object) -> ComponentConfig:
        return KLS.parse_config(raw)

    def needs(self) -> set[str]:
        """The optional inputs these options read, for the learner to compute."""
        out: set[str] = set()
        if self.rollout_is is not None:
            out.add("rollout_logprobs")
        if self.entropy_coef != 0.0:
            out.add("entropy")
        if self.nll_coef > 0.0:
            out.add("rewards")
        if self.kl_coef > 0.0:
            out |= {"ref_logprobs", *KLS.get(self.kl.name).needs}
        return out


def rollout_is_weights(x: LossInputs, opts: RolloutIsOptions) -> torch.Tensor:
    """Detached pi_old / pi_rollout weights, truncated or masked; shape [B, T]."""
    rollout_BT = require(x, "rollout_logprobs_BT", "rollout_is")
    mask = x.loss_mask_BT
    with torch.no_grad():
        lr_BT = (x.old_logprobs_BT.detach() - rollout_BT) * mask.to(rollout_BT.dtype)
        if opts.level == "sequence":
            lr_BT = broadcast(lr_BT.sum(dim=-1), lr_BT)
        w_BT = torch.exp(lr_BT.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
        if opts.mode == "truncate":
            return w_BT.clamp(max=opts.threshold)
        keep_BT = w_BT <= opts.threshold
        if opts.threshold_low is not None:
            keep_BT &= w_BT >= opts.threshold_low
        return torch.where(keep_BT, w_BT, torch.zeros_like(w_BT))


def apply_cross_cutting(x: LossInputs, out: LossOutput, opts: LossOptions) -> LossOutput:
    """Add the cross-cutting terms to any loss's per-token output (nothing is reduced here).

    loss_t <- w_t * loss_t                            (rollout_is: sampler/learner weights)
              - entropy_coef * H_t                    (entropy bonus)
              + nll_coef * [R_i > thr] * (-logp_t)    (VAPO positive-sample NLL)
              + kl_coef * kl(logp_t, ref_t)           (KL to the reference, kl registry)
    """
    loss_BT = out.loss_BT
    metrics = dict(out.metrics)
    mask = x.loss_mask_BT
    if opts.rollout_is is not None:
        w_BT = rollout_is_weights(x, opts.rollout_is)
        loss_BT = loss_BT * w_BT
        metrics["loss/rollout_is_mean"] = masked_mean(w_BT, mask)
        metrics["loss/rollout_is_max"] = masked_max(w_BT, mask)
    if opts.entropy_coef != 0.0:
        entropy_BT = require(x, "entropy_BT", "entropy bonus")
        loss_BT = loss_BT - opts.entropy_coef * entropy_BT
        metrics.setdefault("loss/entropy", masked_mean(entropy_BT.detach(), mask))
    if opts.nll_coef > 0.0:
        rewards_B = require(x, "rewards_B", "nll on positive samples").to(x.logprobs_BT.device)
        positive_BT = broadcast((rewards_B > opts.nll_reward_threshold).to(x.logprobs_BT.dtype), x.logprobs_BT)
        loss_BT = loss_BT + opts.nll_coef * positive_BT * (-x.logprobs_BT)
        metrics["loss/nll_positive_frac"] = masked_mean(positive_BT, mask)
    if opts.kl_coef > 0.0:
        ref_BT = require(x, "ref_logprobs_BT", "kl term")
        kl_x = KlInputs(loss_mask_BT=x.loss_mask_BT, rewards_B=x.rewards_B, group_index_B=x.group_index_B)
        kl_BT = KLS(opts.kl)(x.logprobs_BT, ref_BT, opts.kl, kl_x)
        loss_BT = loss_BT + opts.kl_coef * kl_BT
        metrics["loss/kl_ref"] = masked_mean(kl_BT.detach(), mask)
    return LossOutput(loss_BT=loss_BT, metrics=metrics)


def compute_policy_loss(x: LossInputs, cfg: ComponentConfig, opts: LossOptions | None = None) -> LossOutput:
    """The registered loss named by ``cfg.name``, then the cross-cutting options (still per token)."""
    out = POLICY_LOSSES(cfg)(x, cfg)
    return apply_cross_cutting(x, out, opts) if opts is not None else out

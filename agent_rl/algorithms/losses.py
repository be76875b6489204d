"""Policy losses (registry ``policy_loss``): per-token losses; only ``aggregation`` reduces them."""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.registry import ComponentConfig, LossInputs, LossOutput, register_policy_loss

# clamp log-ratios before exp(): sampler/learner mismatch can overflow
LOG_RATIO_CLAMP = 20.0


def masked_mean(x_BT: torch.Tensor, mask_BT: torch.Tensor) -> float:
    mask = mask_BT.to(x_BT.dtype)
    return float((x_BT * mask).sum() / mask.sum().clamp(min=1))


class PpoClipConfig(ComponentConfig):
    eps_low: float = Field(0.2, description="lower clip: ratio >= 1 - eps_low")
    eps_high: float = Field(0.28, description="upper clip: ratio <= 1 + eps_high (DAPO clip-higher)")
    dual_clip_c: float | None = Field(3.0, description="dual-clip bound for A < 0 (None disables)")


@register_policy_loss("ppo_clip", config=PpoClipConfig)
def ppo_clip(x: LossInputs, cfg: PpoClipConfig) -> LossOutput:
    """PPO clipped surrogate (Schulman et al. 2017) with DAPO's asymmetric clip and dual clip.

    rho_t = exp(logp_t - logp_old_t)
    L_t   = max(-A_t * rho_t, -A_t * clip(rho_t, 1 - eps_low, 1 + eps_high))
    and, when A_t < 0 and ``dual_clip_c`` is set (Ye et al. 2020), L_t = min(L_t, -A_t * c).
    Agrees with verl's ``vanilla`` policy loss.
    """
    log_ratio_BT = (x.logprobs_BT - x.old_logprobs_BT).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio_BT = torch.exp(log_ratio_BT)
    adv_BT = x.advantages_BT
    unclipped_BT = -adv_BT * ratio_BT
    clipped_BT = -adv_BT * ratio_BT.clamp(1.0 - cfg.eps_low, 1.0 + cfg.eps_high)
    loss_BT = torch.maximum(unclipped_BT, clipped_BT)
    if cfg.dual_clip_c is not None:
        dual_BT = torch.minimum(loss_BT, -adv_BT * cfg.dual_clip_c)
        loss_BT = torch.where(adv_BT < 0, dual_BT, loss_BT)
    mask = x.loss_mask_BT
    with torch.no_grad():
        r = ratio_BT.detach()
        metrics = {
            "loss/clip_frac_low": masked_mean(((r < 1 - cfg.eps_low) & (adv_BT < 0)).float(), mask),
            "loss/clip_frac_high": masked_mean(((r > 1 + cfg.eps_high) & (adv_BT > 0)).float(), mask),
            "loss/ratio_mean": masked_mean(r, mask),
            "loss/ratio_max": float(torch.where(mask.bool(), r, torch.zeros_like(r)).max()) if mask.any() else 1.0,
            "loss/approx_kl": masked_mean(0.5 * log_ratio_BT.detach() ** 2, mask),
        }
    return LossOutput(loss_BT=loss_BT, metrics=metrics)

"""KL estimators (registry ``kl``): per-token estimates of KL(pi || pi_ref) from sampled tokens."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from agent_rl.algorithms.registry import ComponentConfig, register_kl


class KlConfig(ComponentConfig):
    coef: float = Field(0.0, description="weight of the KL term (0 disables it and the reference model)")
    placement: Literal["in_loss", "in_reward"] = Field("in_loss", description="GRPO: in_loss; PPO/REINFORCE++: in_reward")
    direction: Literal["reverse", "forward"] = Field("reverse", description="KL(pi||ref) or KL(ref||pi)")


@register_kl("k3", config=KlConfig, needs={"ref_logprobs"})
def k3(logprobs_BT: torch.Tensor, ref_logprobs_BT: torch.Tensor, cfg: KlConfig) -> torch.Tensor:
    """Schulman's k3 estimator (http://joschu.net/blog/kl-approx.html), as used by GRPO.

    With log r = logp_ref - logp: k3 = exp(log r) - log r - 1 >= 0, unbiased for KL(pi || ref).
    ``direction: forward`` swaps the roles of the two policies.
    """
    log_r = ref_logprobs_BT - logprobs_BT
    if cfg.direction == "forward":
        log_r = -log_r
    log_r = log_r.clamp(-20.0, 20.0)
    return torch.exp(log_r) - log_r - 1.0

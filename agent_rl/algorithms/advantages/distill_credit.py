"""Advantages whose per-token magnitude comes from a self-teacher: rlsd, opid.

The run's teacher (``teacher_logprobs``: the policy with the env's privileged context) scores the
sampled tokens; the outcome reward keeps the direction of the update.
"""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.advantages.common import grpo_advantage_B, sequence_rewards
from agent_rl.algorithms.losses.common import LOG_RATIO_CLAMP
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    register_advantage,
    require,
)


class RlsdConfig(ComponentConfig):
    eps: float = Field(1e-6, description="added to the group std of the base GRPO advantage")
    norm_by_std: bool = Field(True, description="std normalization of the base GRPO advantage")
    weight_clip: float = Field(
        2.0, gt=1.0, description="per-token weights clipped to [1/weight_clip, weight_clip] (ours)"
    )


@register_advantage(
    "rlsd",
    config=RlsdConfig,
    needs={"teacher_logprobs", "old_logprobs"},
    status="interpretation",
    evidence="from the seed's one-sentence mechanism (002): the weight exp(sign(A)(log q - log "
    "pi_old)) and its clip [1/2, 2] are ours (recorded choice); "
    "tests/algorithms/test_distill_family.py",
)
def rlsd(x: AdvantageInputs, cfg: RlsdConfig) -> AdvantageOutput:
    """RLSD, self-distilled RLVR (Yang et al. 2026): RLVR gives the direction, the self-teacher the magnitude.

    A_i = GRPO advantage of row i; w_it = exp(sign(A_i) * (log q(y_t) - log pi_old(y_t))),
    clipped to [1/c, c]; A_it = A_i * w_it. A correct row pushes harder on tokens the teacher favours,
    a wrong row on tokens the teacher disfavours; w > 0, so the sign of A_i is never flipped.
    """
    teacher_BT = require(x, "teacher_logprobs_BT", "rlsd").double()
    old_BT = require(x, "old_logprobs_BT", "rlsd").double()
    mask_BT = x.loss_mask_BT.double()
    adv_B = grpo_advantage_B(sequence_rewards(x), x.group_index_B, cfg.eps, cfg.norm_by_std)
    delta_BT = ((teacher_BT - old_BT) * mask_BT).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    w_BT = torch.exp(torch.sign(adv_B)[:, None] * delta_BT).clamp(1.0 / cfg.weight_clip, cfg.weight_clip)
    adv_BT = adv_B[:, None] * w_BT * mask_BT
    weight_mean = float((w_BT * mask_BT).sum() / mask_BT.sum().clamp(min=1))
    return AdvantageOutput(advantages_BT=adv_BT.to(torch.float32), metrics={"adv/rlsd_weight_mean": weight_mean})

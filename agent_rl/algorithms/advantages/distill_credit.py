"""Advantages whose per-token magnitude comes from a self-teacher: rlsd, opid.

The run's teacher (``teacher_logprobs``: the policy with the env's privileged context) scores the
sampled tokens; the outcome reward keeps the direction of the update.
"""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.advantages.common import grpo_advantage_B, sequence_rewards
from agent_rl.algorithms.losses.common import LOG_RATIO_CLAMP
from agent_rl.algorithms.needs import NEEDS, NeedContext, register_need
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    TeacherSpec,
    record_choice,
    register_advantage,
    require,
)


class RlsdConfig(ComponentConfig):
    eps: float = Field(1e-6, description="added to the group std of the base GRPO advantage")
    norm_by_std: bool = Field(True, description="std normalization of the base GRPO advantage")
    weight_clip: float = Field(
        2.0, gt=1.0, description="per-token weights clipped to [1/weight_clip, weight_clip] (ours)"
    )


@register_advantage("rlsd", config=RlsdConfig, needs={"teacher_logprobs", "old_logprobs"},
                    status="interpretation",
                    evidence="from the seed's one-sentence mechanism (002): the weight exp(sign(A)(log q - log "
                             "pi_old)) and its clip [1/2, 2] are ours (recorded choice); "
                             "tests/algorithms/test_distill_family.py")
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


class OpidConfig(ComponentConfig):
    coef: float = Field(1.0, ge=0.0, description="lam: weight of the skill advantage added to the outcome one (ours)")
    clip: float = Field(1.0, gt=0.0, description="the per-token log-probability shift is clipped to [-clip, clip] (ours)")
    eps: float = Field(1e-6, description="added to the group std of the outcome (GRPO) advantage")
    norm_by_std: bool = Field(True, description="std normalization of the outcome advantage")


def _skill_rows(ctx: NeedContext) -> torch.Tensor:
    """1.0 on rows whose group got a skill from the ``opid`` filter (``info['opid_skill']``), else 0."""
    rows = [t for g in ctx.groups for t in g.trajectories_G]
    if not any("opid_skill" in t.info for t in rows):
        raise ValueError("advantage 'opid' reads the skills of the opid filter: add algorithm.filters=[{name: opid}]")
    return torch.tensor([float(t.info.get("opid_skill") is not None) for t in rows], dtype=torch.float64)


if "opid_skill" not in NEEDS:
    register_need("opid_skill", "1 on rows whose group got a mined skill (filter opid), else 0", compute=_skill_rows, to_batch=False)


@register_advantage(
    "opid", config=OpidConfig, needs={"teacher_logprobs", "old_logprobs"},
    config_needs=lambda cfg: {"opid_skill"},
    teacher=lambda cfg: TeacherSpec(ema_decay=0.0, context=True),
    status="interpretation",
    evidence="arXiv 2606.26790 read through summaries; lam and clip are ours (config '(ours)'), episode-level "
             "skills only; 2 recorded choices; tests/algorithms/test_self_context.py",
)
def opid(x: AdvantageInputs, cfg: OpidConfig) -> AdvantageOutput:
    """OPID, On-Policy Skill Distillation (Yang et al. 2026, arXiv 2606.26790): a skill's log-prob shift as a token advantage.

    The old policy re-scores its own response with the mined skill in context (filter ``opid``).

    A_it = A_i^GRPO + lam * s_i * clip(log pi_old(y_t | x, skill_g, y_<t) - log pi_old(y_t | x, y_<t), -c, c)
    s_i = 1 when row i's group got a skill (filter ``opid``, need ``opid_skill``), else 0. The teacher is the policy before
    the update (``teacher_ema_decay`` 0) with the skill spliced into its prompt.
    """
    teacher_BT = require(x, "teacher_logprobs_BT", "opid").double()
    old_BT = require(x, "old_logprobs_BT", "opid").double()
    mask_BT = x.loss_mask_BT.double()
    has = x.extras.get("opid_skill")  # absent when called without the run: every row has its skill
    has_B = has.to(mask_BT) if has is not None else torch.ones_like(mask_BT[:, 0])
    adv_B = grpo_advantage_B(sequence_rewards(x), x.group_index_B, cfg.eps, cfg.norm_by_std)
    shift_BT = ((teacher_BT - old_BT) * mask_BT).clamp(-cfg.clip, cfg.clip) * has_B[:, None]
    adv_BT = (adv_B[:, None] + cfg.coef * shift_BT) * mask_BT
    n = (mask_BT * has_B[:, None]).sum().clamp(min=1)
    return AdvantageOutput(advantages_BT=adv_BT.to(torch.float32), metrics={"adv/opid_shift_mean": float(shift_BT.sum() / n)})


for _key, _question, _choice in (
    ('rlsd', 'magnitude of the per-token weight', "w = exp(sign(A) (log q - log pi_old)), clipped to [1/2, 2]; the base advantage is GRPO's"),
    ('opid', 'weight and clip of the skill advantage', "lam = 1, the shift clipped to [-1, 1]; the outcome advantage is GRPO's"),
):
    record_choice(_key, _question, _choice)

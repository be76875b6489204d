"""Self-distillation losses: the policy with privileged context is the teacher of the policy without it.

The learner computes ``teacher_logprobs_BT`` with a second forward pass over a teacher context
(``agent_rl/learner/teacher.py``: ``EmaTeacher`` and ``compute_teacher_logprobs``); the loss only
sees the teacher's logprob of each sampled token, so it uses the sampled-token estimator of the
per-token reverse KL, KL(pi(.|x, y<t) || sg q(.|x, f, y<t)):
    grad = E_{a~pi}[ (log pi(a) - log q(a)) grad log pi(a) ]
i.e. REINFORCE with the per-token advantage A_t = log q(y_t) - log pi(y_t).
"""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.losses.common import log_ratio, ratio_metrics
from agent_rl.algorithms.losses.ppo import PpoClipConfig, ppo_clip
from agent_rl.algorithms.registry import (
    ComponentConfig,
    LossInputs,
    LossOutput,
    TeacherSpec,
    register_policy_loss,
    require,
)


class SelfDistillConfig(ComponentConfig):
    coef: float = Field(1.0, ge=0.0, description="weight of the distillation term")
    adv_clip: float | None = Field(None, gt=0.0, description="clip |log q - log pi| per token (None: no clip)")
    rl_coef: float = Field(0.0, ge=0.0, description="add rl_coef * ppo_clip on advantages_BT (SDPO + GRPO); 0: off")


class SdpoConfig(SelfDistillConfig):
    teacher_ema_decay: float = Field(
        0.99,
        ge=0.0,
        lt=1.0,
        description="the learner's EmaTeacher: teacher <- decay * teacher + (1 - decay) * student (ours)",
    )


class OpsdConfig(SelfDistillConfig):
    teacher_ema_decay: float = Field(
        0.0, ge=0.0, lt=1.0, description="0: the teacher is the current policy itself (OPSD); > 0: an EMA teacher"
    )


def ema_teacher(cfg: SdpoConfig | OpsdConfig) -> TeacherSpec:
    """The teacher of sdpo / opsd: an EMA of the policy with the configured decay."""
    return TeacherSpec(ema_decay=cfg.teacher_ema_decay)


def _self_distill(x: LossInputs, cfg: SelfDistillConfig, entry: str) -> LossOutput:
    teacher_BT = require(x, "teacher_logprobs_BT", entry).detach()
    with torch.no_grad():
        adv_BT = teacher_BT - x.logprobs_BT.detach()
        if cfg.adv_clip is not None:
            adv_BT = adv_BT.clamp(-cfg.adv_clip, cfg.adv_clip)
    loss_BT = -cfg.coef * adv_BT * x.logprobs_BT
    metrics = ratio_metrics(x, log_ratio(x))
    mask = x.loss_mask_BT.to(adv_BT.dtype)
    # sampled-token estimate of the reverse KL(student || teacher)
    metrics["loss/distill_kl"] = float((-adv_BT * mask).sum() / mask.sum().clamp(min=1))
    if cfg.rl_coef > 0.0:
        rl = ppo_clip(x, PpoClipConfig())
        loss_BT = loss_BT + cfg.rl_coef * rl.loss_BT
        metrics.update({f"{k}_rl": v for k, v in rl.metrics.items() if "clip_frac" in k})
    return LossOutput(loss_BT=loss_BT, metrics=metrics)


@register_policy_loss("sdpo", config=SdpoConfig, needs={"teacher_logprobs"}, teacher=ema_teacher)
def sdpo(x: LossInputs, cfg: SdpoConfig) -> LossOutput:
    """SDPO, RL via self-distillation (2026): teacher = slow EMA of the student, with feedback in context.

    L_t = -coef * sg(log q_t - log pi_t) * logp_t  [+ rl_coef * ppo_clip]
    q = EMA teacher given the environment's feedback f (and a correct completion when there is one);
    grad = coef * (log pi_t - log q_t) grad logp_t, the sampled-token reverse-KL gradient.
    """
    return _self_distill(x, cfg, "sdpo")


@register_policy_loss("opsd", config=OpsdConfig, needs={"teacher_logprobs"}, teacher=ema_teacher)
def opsd(x: LossInputs, cfg: OpsdConfig) -> LossOutput:
    """OPSD, on-policy self-distillation (2026): the same model is the teacher with a verified solution in context.

    L_t = -coef * sg(log q_t - log pi_t) * logp_t  [+ rl_coef * ppo_clip]
    q = the current policy (``teacher_ema_decay: 0``) conditioned on the privileged reasoning trace;
    per-token distribution matching on the student's own rollouts, sampled-token estimator.
    """
    return _self_distill(x, cfg, "opsd")

"""Self-distillation losses: the policy with privileged context is the teacher of the policy without it.

The learner computes ``teacher_logprobs_BT`` with a second forward pass over a teacher context
(``agent_rl/learner/teacher.py``: ``EmaTeacher`` and ``compute_teacher_logprobs``); the loss only
sees the teacher's logprob of each sampled token, so it uses the sampled-token estimator of the
per-token reverse KL, KL(pi(.|x, y<t) || sg q(.|x, f, y<t)):
    grad = E_{a~pi}[ (log pi(a) - log q(a)) grad log pi(a) ]
i.e. REINFORCE with the per-token advantage A_t = log q(y_t) - log pi(y_t).

``estimator: topk`` matches the whole next-token distribution over the teacher's top-K ids instead
(forward or reverse KL, with a tail bucket; ``distill_topk.py``), which can raise tokens the
student never sampled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from pydantic import Field

from agent_rl.algorithms.losses.common import log_ratio, ratio_metrics
from agent_rl.algorithms.losses.distill_topk import topk_divergence
from agent_rl.algorithms.losses.ppo import PpoClipConfig, ppo_clip
from agent_rl.algorithms.registry import (
    ComponentConfig,
    LossInputs,
    LossOutput,
    TeacherSpec,
    register_policy_loss,
    require,
)


class DistillTermConfig(ComponentConfig):
    """The distillation term's settings (shared by sdpo, opsd, i_sdpo)."""

    coef: float = Field(1.0, ge=0.0, description="weight of the distillation term")
    adv_clip: float | None = Field(None, gt=0.0, description="clip |log q - log pi| per token (None: no clip)")
    estimator: Literal["sampled_token", "topk"] = Field(
        "sampled_token", description="sampled_token: REINFORCE on log q - log pi; topk: KL over the teacher's top-K"
    )
    topk: int = Field(20, ge=1, description="K of estimator=topk (SDPO's top-K logit distillation; ours: 20)")
    divergence: Literal["forward", "reverse"] = Field(
        "reverse", description="estimator=topk: reverse KL(pi||q) (SDPO) or forward KL(q||pi)"
    )
    tail: bool = Field(True, description="estimator=topk: one bucket for the mass outside the top-K (else renormalize)")

    @property
    def teacher_topk(self) -> int:
        """K of the teacher's top-K logprobs the estimator reads: ``topk`` when it reads them, else 0."""
        return self.topk if ESTIMATORS[self.estimator].reads_teacher_topk else 0


class SelfDistillConfig(DistillTermConfig):
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


def ema_teacher(cfg: DistillTermConfig) -> TeacherSpec:
    """The teacher of sdpo / opsd: an EMA of the policy with the configured decay."""
    return TeacherSpec(ema_decay=cfg.teacher_ema_decay, topk=cfg.teacher_topk)


def topk_needs(cfg: DistillTermConfig) -> set[str]:
    """estimator=topk reads the teacher's top-K logprobs (and the policy's at those ids)."""
    return {"teacher_topk"} if cfg.teacher_topk else set()


def _topk_term(x: LossInputs, cfg: DistillTermConfig, entry: str) -> tuple[torch.Tensor, torch.Tensor]:
    """KL over the teacher's top-K ids (``distill_topk.py``): the loss is the divergence itself."""
    student_BTK = require(x, "topk_logprobs_BTK", entry)
    if "teacher_topk" not in x.extras:
        raise ValueError(
            f"'{entry}' with estimator=topk needs extras['teacher_topk'], which the caller did not provide"
        )
    kl_BT = topk_divergence(student_BTK, x.extras["teacher_topk"], cfg.divergence, cfg.tail, x.topk_mask_BTK)
    return cfg.coef * kl_BT, kl_BT.detach()


def _sampled_token_term(x: LossInputs, cfg: DistillTermConfig, entry: str) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE on A_t = log q(y_t) - log pi(y_t), optionally clipped."""
    teacher_BT = require(x, "teacher_logprobs_BT", entry).detach()
    with torch.no_grad():
        adv_BT = teacher_BT - x.logprobs_BT.detach()
        if cfg.adv_clip is not None:
            adv_BT = adv_BT.clamp(-cfg.adv_clip, cfg.adv_clip)
    # sampled-token estimate of the reverse KL(student || teacher): -adv
    return -cfg.coef * adv_BT * x.logprobs_BT, -adv_BT


@dataclass(frozen=True)
class Estimator:
    """One ``estimator`` choice: its per-token loss and KL estimate, and whether it reads the teacher's top-K."""

    term: Callable[[LossInputs, DistillTermConfig, str], tuple[torch.Tensor, torch.Tensor]]
    reads_teacher_topk: bool


# the keys are DistillTermConfig.estimator's choices
ESTIMATORS: dict[str, Estimator] = {
    "sampled_token": Estimator(_sampled_token_term, reads_teacher_topk=False),
    "topk": Estimator(_topk_term, reads_teacher_topk=True),
}


def distill_term(x: LossInputs, cfg: DistillTermConfig, entry: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The distillation loss per token and the detached per-token KL estimate it reports."""
    return ESTIMATORS[cfg.estimator].term(x, cfg, entry)


def _self_distill(x: LossInputs, cfg: SelfDistillConfig, entry: str) -> LossOutput:
    loss_BT, kl_BT = distill_term(x, cfg, entry)
    metrics = ratio_metrics(x, log_ratio(x))
    mask = x.loss_mask_BT.to(kl_BT.dtype)
    metrics["loss/distill_kl"] = float((kl_BT * mask).sum() / mask.sum().clamp(min=1))
    if cfg.rl_coef > 0.0:
        rl = ppo_clip(x, PpoClipConfig())
        loss_BT = loss_BT + cfg.rl_coef * rl.loss_BT
        metrics.update({f"{k}_rl": v for k, v in rl.metrics.items() if "clip_frac" in k})
    return LossOutput(loss_BT=loss_BT, metrics=metrics)


@register_policy_loss(
    "sdpo",
    config=SdpoConfig,
    needs={"teacher_logprobs"},
    teacher=ema_teacher,
    config_needs=topk_needs,
    status="interpretation",
    evidence="SDPO from the survey (seed 000): the EMA decay of the teacher and K = 20 of "
    "estimator=topk are ours (config '(ours)', recorded choice); "
    "tests/algorithms/test_losses_distill.py",
)
def sdpo(x: LossInputs, cfg: SdpoConfig) -> LossOutput:
    """SDPO, RL via self-distillation (2026): teacher = slow EMA of the student, with feedback in context.

    L_t = -coef * sg(log q_t - log pi_t) * logp_t  [+ rl_coef * ppo_clip]
    q = EMA teacher given the environment's feedback f (and a correct completion when there is one);
    grad = coef * (log pi_t - log q_t) grad logp_t, the sampled-token reverse-KL gradient.
    estimator=topk: L_t = coef * KL(pi_t || q_t) over the teacher's top-K ids + a tail bucket (K=20, ours).
    """
    return _self_distill(x, cfg, "sdpo")


@register_policy_loss(
    "opsd",
    config=OpsdConfig,
    needs={"teacher_logprobs"},
    teacher=ema_teacher,
    config_needs=topk_needs,
    status="interpretation",
    evidence="from the seed texts (002/003, no paper text cited): the standard sampled-token "
    "reverse-KL estimator; top-K divergence and K are ours (recorded); "
    "tests/algorithms/test_losses_distill.py",
)
def opsd(x: LossInputs, cfg: OpsdConfig) -> LossOutput:
    """OPSD, on-policy self-distillation (2026): the same model is the teacher with a verified solution in context.

    L_t = -coef * sg(log q_t - log pi_t) * logp_t  [+ rl_coef * ppo_clip]
    q = the current policy (``teacher_ema_decay: 0``) conditioned on the privileged reasoning trace;
    per-token distribution matching on the student's own rollouts, sampled-token estimator;
    estimator=topk: forward or reverse KL over the teacher's top-K ids (+ tail bucket).
    """
    return _self_distill(x, cfg, "opsd")

"""ride: on-policy distillation in representation space, extrapolating the base -> teacher shift.

RIDE (seed 002; "extrapolating the layerwise representation shift from a base model to its
RL-trained teacher and regressing the student's hidden states toward those targets on
student-generated trajectories") on the student's own rollouts:

    y_l(s) = h_l^base(s) + alpha (h_l^teacher(s) - h_l^base(s))            (per layer l, state s)
    d_t    = (1/|L|) sum_l  mean_h (h_l^student(s_t) - sg y_l(s_t))^2 / (mean_h y_l(s_t)^2 + eps)
    loss_t = coef d_t  (+ rl_coef * ppo_clip_t)

s_t is the state that predicts generated token t (the hidden states at position t - 1), so
the loss sits on token t's loss-mask entry and aggregates like any token loss. alpha = 1 is plain
representation distillation to the teacher (OPRD, arXiv 2606.06021); alpha > 1 extrapolates past it.
The teacher is ``teacher_path`` (one local hf checkpoint; it must share the student's architecture
width and depth for the layers used); the base is the run's reference, the frozen initial policy
(the model both were trained from, in the paper's pairs). The student's states come from the
learner's own forward pass with gradient (need ``policy_layers``), the targets from no-grad forwards
of the teacher and the reference on the same rows (needs ``teacher_layers``, ``ref_layers``).
"""

from __future__ import annotations

import torch
from pydantic import Field, field_validator

from agent_rl.algorithms.losses.ppo import PpoClipConfig, ppo_clip
from agent_rl.algorithms.needs import NEEDS, register_need
from agent_rl.algorithms.registry import (
    ComponentConfig,
    LossInputs,
    LossOutput,
    TeacherSpec,
    record_choice,
    register_policy_loss,
)

if "policy_layers" not in NEEDS:
    register_need(
        "policy_layers",
        "every decoder layer's output in the learner's own forward pass (with gradient)",
        when="in_update",
        forward="capture",
    )
    register_need("teacher_layers", "the teacher's decoder-layer outputs on the rows ([B, T, L, H])", builds="teacher")
    register_need("ref_layers", "the reference's decoder-layer outputs on the rows ([B, T, L, H])", builds="reference")


class RideConfig(ComponentConfig):
    teacher_path: str = Field(
        ..., description="the teacher: an hf checkpoint with the student's tokenizer and layer shapes (frozen)"
    )
    alpha: float = Field(
        1.25, gt=0.0, description="extrapolation: the target is base + alpha (teacher - base); 1: the teacher's states"
    )
    layers: list[int] = Field(
        default_factory=list, description="decoder layers regressed (indices, negative from the end); []: all"
    )
    coef: float = Field(1.0, ge=0.0, description="weight of the representation loss")
    rl_coef: float = Field(
        0.0, ge=0.0, description="weight of a ppo_clip term on the run's advantages (0: pure distillation)"
    )
    eps: float = Field(1e-6, gt=0.0, description="added to the target's mean square in the relative error")

    @field_validator("teacher_path", mode="before")
    @classmethod
    def _one_path(cls, v):
        if not isinstance(v, str):
            raise ValueError("ride takes one teacher_path (a mixture has no single hidden state)")
        return v


def ride_teacher(cfg: RideConfig) -> TeacherSpec:
    return TeacherSpec(path=cfg.teacher_path, context=False, hidden_layers=tuple(cfg.layers))


def relative_sq_error(student_BTLH: torch.Tensor, target_BTLH: torch.Tensor, eps: float) -> torch.Tensor:
    """``[B, T]``: mean over layers of mean_h (s - y)^2 / (mean_h y^2 + eps)."""
    return _relative_to(student_BTLH - target_BTLH, target_BTLH, eps)


def _relative_to(diff_BTLH: torch.Tensor, target_BTLH: torch.Tensor, eps: float) -> torch.Tensor:
    return (diff_BTLH.pow(2).mean(-1) / (target_BTLH.pow(2).mean(-1) + eps)).mean(-1)


def to_predicted_tokens(d_BT: torch.Tensor) -> torch.Tensor:
    """Move each state's value to the token it predicts: out[:, t] = d[:, t - 1], out[:, 0] = 0."""
    return torch.cat([torch.zeros_like(d_BT[:, :1]), d_BT[:, :-1]], dim=1)


@register_policy_loss(
    "ride",
    config=RideConfig,
    needs={"policy_layers", "teacher_layers", "ref_layers"},
    teacher=ride_teacher,
    status="interpretation",
    evidence="from one sentence of seed 002 (no RIDE text found): alpha 1.25, layers, distance and base are ours (5 "
    "recorded choices); tests/algorithms/test_ride.py",
)
def ride(x: LossInputs, cfg: RideConfig) -> LossOutput:
    """RIDE, on-policy distillation by representation extrapolation (seed 002; OPRD, arXiv 2606.06021, for alpha = 1).

    loss_t = coef mean_l mean_h (h_l(s_t) - sg y_l(s_t))^2 / mean_h y_l(s_t)^2 (+ rl_coef ppo_clip_t),
    y_l = h_l^base + alpha (h_l^teacher - h_l^base), s_t the state that predicts token t.
    """
    captured = x.extras.get("policy_layers")
    teacher, base = x.extras.get("teacher_layers"), x.extras.get("ref_layers")
    if captured is None or teacher is None or base is None:
        raise ValueError("'ride' needs policy_layers, teacher_layers and ref_layers, which the caller did not provide")
    student = torch.stack([captured[i] for i in cfg.layers] if cfg.layers else list(captured), dim=2)
    if student.shape != teacher.shape or teacher.shape != base.shape:
        raise ValueError(
            f"ride: layer outputs differ in shape (student {tuple(student.shape)}, teacher {tuple(teacher.shape)}, "
            f"base {tuple(base.shape)}): the teacher must have the student's depth and width for algorithm.loss.layers"
        )
    target = (base + cfg.alpha * (teacher - base)).detach()
    d_BT = to_predicted_tokens(relative_sq_error(student, target, cfg.eps))
    mask = x.loss_mask_BT
    loss_BT = cfg.coef * d_BT
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        metrics = {
            "loss/ride_rel_sq_error": float((d_BT * mask).sum() / n),
            # how far the teacher moved from the base, on the loss's scale (mean_h (teacher - base)^2 / mean_h y^2):
            # the student at the base has error alpha^2 times this
            "ride/teacher_shift": float(
                (to_predicted_tokens(_relative_to(teacher - base, target, cfg.eps)) * mask).sum() / n
            ),
        }
    if cfg.rl_coef > 0:
        rl = ppo_clip(x, PpoClipConfig())
        loss_BT = loss_BT + cfg.rl_coef * rl.loss_BT
        metrics.update(rl.metrics)
    return LossOutput(loss_BT=loss_BT * mask, metrics=metrics)


for _question, _choice in (
    (
        "alpha",
        "1.25 (the seed gives no value; ExOPD's reward extrapolation default, g_opd here); 1 is plain representation distillation",
    ),
    (
        "layers and distance",
        (
            "every decoder layer's output (layers: [] ; a list picks some), relative squared error mean_h (s - "
            "y)^2 / mean_h y^2 per layer, averaged over layers, so layers of different scale weigh alike"
        ),
    ),
    (
        "which states",
        (
            "the state that predicts each generated token (position t - 1), on the loss mask; the teacher and base "
            "see the student's rows without privileged context"
        ),
    ),
    (
        "the base",
        "the run's reference (the frozen initial policy): in the paper's pairs the teacher was RL-trained from the base",
    ),
    ("RL term", "none by default (rl_coef 0: pure distillation); rl_coef > 0 adds ppo_clip on the run's advantages"),
):
    record_choice("ride", _question, _choice)

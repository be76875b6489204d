"""Catalog III on-policy (self-)distillation losses: i_sdpo, powered_opd, g_opd, anti_sd.

All read the teacher the run builds for ``teacher_logprobs`` (``learner/teacher.py``): by default
the policy or an EMA of it, with the env's privileged context in its prompt; with ``teacher_path``
another hf checkpoint with the student's tokenizer (frozen; no privileged context unless
``teacher_context: true``), as the papers of ``powered_opd`` and ``g_opd`` use.
Notation: pi = current policy, q = teacher, ref = frozen initial policy, sg = stop-gradient,
logp_t = log pi(y_t) (carries the gradient).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch
from pydantic import Field, model_validator

from agent_rl.algorithms.losses.common import log_ratio, masked_mean, ratio_metrics
from agent_rl.algorithms.losses.distill import DistillTermConfig, distill_term, ema_teacher, topk_needs
from agent_rl.algorithms.losses.distill_topk import topk_entropy, topk_jsd
from agent_rl.algorithms.losses.ppo import PpoClipConfig, ppo_clip
from agent_rl.algorithms.registry import (
    ComponentConfig,
    LossInputs,
    LossOutput,
    TeacherSpec,
    record_choice,
    register_policy_loss,
    require,
)


class SelfTeacherConfig(ComponentConfig):
    teacher_ema_decay: float = Field(
        0.0, ge=0.0, lt=1.0, description="0: the teacher is the current policy with the privileged context; > 0: an EMA"
    )
    teacher_path: str | list[str] | None = Field(
        None,
        description="an hf checkpoint that teaches instead (frozen; the student's tokenizer), or several (their mixture); None: the policy itself",
    )
    teacher_weights: list[float] | None = Field(
        None, description="with several teacher_path: the mixture's weights q = sum_k w_k q_k (None: equal)"
    )
    teacher_context: bool | None = Field(
        None,
        description="put the env's privileged context in the teacher's prompt (None: yes for the self-teacher, no for teacher_path)",
    )
    teacher_routes: dict[str, int | str] | None = Field(
        None,
        description="per-task routing of several teacher_path: {task prefix: teacher (index into teacher_path, or its path)}; "
        "a row whose task value starts with a prefix (the longest wins) is scored by that teacher alone, other rows by the weighted mixture",
    )
    teacher_route_key: str = Field(
        "task_id", description="what teacher_routes match: 'task_id', or a key of the env's task info (e.g. 'category')"
    )

    @model_validator(mode="after")
    def _routes_name_teachers(self):
        if self.teacher_routes:
            paths = [self.teacher_path] if isinstance(self.teacher_path, str) else list(self.teacher_path or [])
            for prefix, target in self.teacher_routes.items():
                if not (isinstance(target, int) and 0 <= target < len(paths)) and target not in paths:
                    raise ValueError(
                        f"teacher_routes[{prefix!r}] = {target!r}: name a teacher of teacher_path by index (0..{len(paths) - 1}) or path"
                    )
        return self


def self_teacher(cfg: SelfTeacherConfig) -> TeacherSpec:
    """The teacher of these losses: the policy (or its EMA) with the privileged context, or the model(s) at teacher_path."""
    context = cfg.teacher_path is None if cfg.teacher_context is None else cfg.teacher_context
    path = tuple(cfg.teacher_path) if isinstance(cfg.teacher_path, list) else cfg.teacher_path
    weights = tuple(cfg.teacher_weights) if cfg.teacher_weights is not None else None
    paths = [path] if isinstance(path, str) else list(path or [])
    routes = tuple((p, t if isinstance(t, int) else paths.index(t)) for p, t in (cfg.teacher_routes or {}).items())
    return TeacherSpec(
        ema_decay=cfg.teacher_ema_decay,
        path=path,
        weights=weights,
        context=context,
        routes=routes,
        route_key=cfg.teacher_route_key,
    )


def _reinforce_on(adv_BT: torch.Tensor, x: LossInputs, coef: float) -> torch.Tensor:
    """-coef * sg(A_t) * logp_t: the dense-reward policy gradient of on-policy distillation."""
    return -coef * adv_BT.detach() * x.logprobs_BT


def _metrics(x: LossInputs, **values: torch.Tensor) -> dict[str, float]:
    metrics = ratio_metrics(x, log_ratio(x))
    metrics.update({f"loss/{k}": masked_mean(v.detach(), x.loss_mask_BT) for k, v in values.items()})
    return metrics


# ----------------------------------------------------------------------------------------------
# I-SDPO: route by group.


class ISdpoConfig(DistillTermConfig, SelfTeacherConfig):
    success_threshold: float = Field(
        1.0,
        description="a row succeeded when reward >= this; a group with none routes to distillation (binary rewards: 1)",
    )
    eps_low: float = Field(0.2, ge=0.0, description="eps_low of the GRPO branch's PPO clip")
    eps_high: float = Field(0.2, ge=0.0, description="eps_high of the GRPO branch's PPO clip (GRPO: symmetric)")


def all_fail_rows(x: LossInputs, threshold: float, entry: str) -> torch.Tensor:
    """1.0 on rows whose whole group stayed below ``threshold`` (no success), per row."""
    rewards_B = require(x, "rewards_B", entry).double()
    group_B = require(x, "group_index_B", entry)
    _, inverse_B = torch.unique(group_B, return_inverse=True)
    success_B = (rewards_B >= threshold).double()
    num_groups = int(inverse_B.max()) + 1 if inverse_B.numel() else 0
    any_G = torch.zeros(num_groups, dtype=torch.float64, device=success_B.device).index_add_(
        0, inverse_B.to(success_B.device), success_B
    )
    return (any_G[inverse_B] == 0).to(x.logprobs_BT.dtype)


@register_policy_loss(
    "i_sdpo",
    config=ISdpoConfig,
    needs={"teacher_logprobs", "rewards", "group_index"},
    teacher=lambda cfg: dataclasses.replace(self_teacher(cfg), topk=ema_teacher(cfg).topk),
    config_needs=topk_needs,
    status="interpretation",
    evidence="from I-SDPO's abstract (seed 003): success threshold and the GRPO branch's settings are ours "
    "(recorded choice); tests/algorithms/test_distill_family.py",
)
def i_sdpo(x: LossInputs, cfg: ISdpoConfig) -> LossOutput:
    """I-SDPO, instance-level adaptive self-distillation PO (2026): all-fail groups distil, the rest do GRPO.

    One routing decision per group: d_i = 1 if no row of i's group has reward >= success_threshold.
    L_t = d_i * coef * distill_t + (1 - d_i) * ppo_clip_t(A)   (distill_t: opsd's term, sampled-token or top-K)
    The teacher is the policy with the privileged context; the distillation rate falls as success rises.
    """
    route_B = all_fail_rows(x, cfg.success_threshold, "i_sdpo")
    distill_BT, kl_BT = distill_term(x, cfg, "i_sdpo")
    rl = ppo_clip(x, PpoClipConfig(eps_low=cfg.eps_low, eps_high=cfg.eps_high))
    d_B1 = route_B.unsqueeze(-1)
    loss_BT = d_B1 * distill_BT + (1 - d_B1) * rl.loss_BT
    metrics = _metrics(x, distill_kl=kl_BT)
    metrics["loss/distill_rows_frac"] = float(route_B.mean()) if route_B.numel() else 0.0
    return LossOutput(loss_BT=loss_BT, metrics=metrics)


# ----------------------------------------------------------------------------------------------
# PowerOPD: bounded Box-Cox reward.


class PoweredOpdConfig(SelfTeacherConfig):
    alpha: float = Field(0.5, gt=0.0, description="Box-Cox power (alpha -> 0: the log-ratio of vanilla OPD; ours: 0.5)")
    coef: float = Field(1.0, ge=0.0, description="weight of the distillation term")


def box_cox_reward(teacher_BT: torch.Tensor, student_BT: torch.Tensor, alpha: float) -> torch.Tensor:
    """(q^alpha - pi^alpha) / alpha = BC_alpha(q) - BC_alpha(pi): in [-1/alpha, 1/alpha], the sign of log q - log pi."""
    return (torch.exp(alpha * teacher_BT) - torch.exp(alpha * student_BT)) / alpha


@register_policy_loss(
    "powered_opd",
    config=PoweredOpdConfig,
    needs={"teacher_logprobs"},
    teacher=self_teacher,
    status="interpretation",
    evidence="from the seed's mechanism (002 PowerOPD): Box-Cox on each probability and alpha 0.5 "
    "are ours (recorded choice); tests/algorithms/test_distill_family.py",
)
def powered_opd(x: LossInputs, cfg: PoweredOpdConfig) -> LossOutput:
    """PowerOPD, on-policy distillation with a bounded power transformation (Zhao et al. 2026).

    r_t = BC_alpha(q(y_t)) - BC_alpha(pi(y_t)) = (q_t^alpha - pi_t^alpha) / alpha, BC_alpha(p) = (p^alpha - 1) / alpha;
    L_t = -coef * sg(r_t) * logp_t. alpha -> 0 gives log q - log pi (vanilla OPD, unbounded);
    alpha > 0 bounds r in [-1/alpha, 1/alpha] and keeps its sign (ours: Box-Cox on each probability).
    """
    teacher_BT = require(x, "teacher_logprobs_BT", "powered_opd").detach()
    r_BT = box_cox_reward(teacher_BT, x.logprobs_BT.detach(), cfg.alpha)
    return LossOutput(loss_BT=_reinforce_on(r_BT, x, cfg.coef), metrics=_metrics(x, distill_reward=r_BT))


# ----------------------------------------------------------------------------------------------
# G-OPD / ExOPD: reward scaling against a chosen reference.


class GOpdConfig(SelfTeacherConfig):
    reward_scale: float = Field(
        1.25, gt=0.0, description="lambda: 1 = standard OPD, > 1 = ExOPD reward extrapolation (ours: 1.25)"
    )
    coef: float = Field(1.0, ge=0.0, description="weight of the distillation term")


@register_policy_loss(
    "g_opd",
    config=GOpdConfig,
    needs={"teacher_logprobs", "ref_logprobs"},
    teacher=self_teacher,
    status="interpretation",
    evidence="from the seed's mechanism (002 G-OPD); reward scale lambda 1.25 and the reference "
    "are ours (2 recorded choices); tests/algorithms/test_distill_family.py",
)
def g_opd(x: LossInputs, cfg: GOpdConfig) -> LossOutput:
    """G-OPD / ExOPD, generalized on-policy distillation with reward extrapolation (Yang et al. 2026).

    OPD = dense KL-constrained RL with token reward r_t = log q_t - log ref_t and KL(pi || ref) weight 1;
    G-OPD scales the reward: A_t = lambda (log q_t - log ref_t) - (log pi_t - log ref_t), L_t = -sg(A_t) logp_t.
    lambda = 1 is OPD (A_t = log q_t - log pi_t, any ref); lambda > 1 (ExOPD) extrapolates past the teacher.
    ref = the run's reference model (the initial policy).
    """
    teacher_BT = require(x, "teacher_logprobs_BT", "g_opd").detach()
    ref_BT = require(x, "ref_logprobs_BT", "g_opd").detach()
    adv_BT = cfg.reward_scale * (teacher_BT - ref_BT) - (x.logprobs_BT.detach() - ref_BT)
    return LossOutput(loss_BT=_reinforce_on(adv_BT, x, cfg.coef), metrics=_metrics(x, distill_reward=adv_BT))


# ----------------------------------------------------------------------------------------------
# AntiSD: ascend a bounded divergence, gated by the teacher's entropy.


class AntiSdConfig(SelfTeacherConfig):
    coef: float = Field(0.1, ge=0.0, description="weight of the ascended JSD term (ours)")
    rl_coef: float = Field(
        1.0, ge=0.0, description="weight of the GRPO term it is added to (AntiSD replaces SD inside RL)"
    )
    entropy_min: float = Field(
        0.1, ge=0.0, description="gate: the term is on where the teacher's top-K entropy >= this, in nats (ours)"
    )
    topk: int = Field(20, ge=1, description="K of the teacher's top-K support of the JSD (ours)")
    tail: bool = Field(True, description="one bucket for the mass outside the top-K")
    gate: Literal["token", "batch"] = Field(
        "token", description="gate per token, or on the batch's mean teacher entropy"
    )


def _anti_sd_teacher(cfg: AntiSdConfig) -> TeacherSpec:
    return dataclasses.replace(self_teacher(cfg), topk=cfg.topk)


@register_policy_loss(
    "anti_sd",
    config=AntiSdConfig,
    needs={"teacher_topk"},
    teacher=_anti_sd_teacher,
    status="interpretation",
    evidence="from the seed's one-sentence mechanism (002 AntiSD): JSD over the teacher's top-20, the entropy gate "
    "and coef are ours (recorded choice); tests/algorithms/test_distill_family.py",
)
def anti_sd(x: LossInputs, cfg: AntiSdConfig) -> LossOutput:
    """AntiSD, anti-self-distillation via pointwise mutual information (Shen et al. 2026).

    L_t = rl_coef * ppo_clip_t(A) - coef * g_t * JSD(pi_t, q_t)   (ascends the divergence: the opposite sign of SD)
    JSD over the teacher's top-K ids + tail (bounded by ln 2); g_t = 1[H(q_t) >= entropy_min] switches the
    term off where the teacher's entropy has collapsed (gate: token, or batch on the mean entropy).
    """
    student_BTK = require(x, "topk_logprobs_BTK", "anti_sd")
    if "teacher_topk" not in x.extras:
        raise ValueError("'anti_sd' needs extras['teacher_topk'], which the caller did not provide")
    teacher_BTK = x.extras["teacher_topk"].detach()
    jsd_BT = topk_jsd(student_BTK, teacher_BTK, cfg.tail, x.topk_mask_BTK)
    h_BT = topk_entropy(teacher_BTK.to(student_BTK.dtype), cfg.tail, x.topk_mask_BTK)
    if cfg.gate == "batch":
        gate_BT = torch.full_like(h_BT, float(masked_mean(h_BT, x.loss_mask_BT) >= cfg.entropy_min))
    else:
        gate_BT = (h_BT >= cfg.entropy_min).to(jsd_BT.dtype)
    loss_BT = -cfg.coef * gate_BT * jsd_BT
    if cfg.rl_coef > 0:
        loss_BT = loss_BT + cfg.rl_coef * ppo_clip(x, PpoClipConfig()).loss_BT
    metrics = _metrics(x, jsd=jsd_BT, teacher_entropy=h_BT)
    metrics["loss/gate_frac"] = masked_mean(gate_BT, x.loss_mask_BT)
    return LossOutput(loss_BT=loss_BT, metrics=metrics)


# ----------------------------------------------------------------------------------------------
# beta-OPSD: the KL-to-reference weight made explicit.


class BetaOpsdConfig(SelfTeacherConfig):
    beta: float = Field(
        1.0, gt=0.0, description="weight of KL(pi || ref); 1 = vanilla OPSD's target (ours: no default in the abstract)"
    )
    return_to_go: bool = Field(
        True, description="credit each token with the sum of the rewards from it to the row's end (beta-OPSD)"
    )
    coef: float = Field(1.0, ge=0.0, description="weight of the distillation term")


def beta_rewards(teacher_BT: torch.Tensor, ref_BT: torch.Tensor, student_BT: torch.Tensor, beta: float) -> torch.Tensor:
    """r_t = (1/beta)(log q_t - log ref_t) - (log pi_t - log ref_t): log pi*_t - log pi_t up to the normalizer."""
    return (teacher_BT - ref_BT) / beta - (student_BT - ref_BT)


@register_policy_loss(
    "beta_opsd",
    config=BetaOpsdConfig,
    needs={"teacher_logprobs", "ref_logprobs"},
    teacher=self_teacher,
    status="interpretation",
    evidence="from the abstract (seed 003): a sampled-token estimator that leaves out log Z "
    "instead of the paper's mixed-logit distillation, beta 1 ours (recorded); "
    "tests/algorithms/test_distill_family.py",
)
def beta_opsd(x: LossInputs, cfg: BetaOpsdConfig) -> LossOutput:
    """beta-OPSD (Liu et al. 2026): OPSD is the beta = 1 member of max E[log q - log ref] - beta KL(pi || ref).

    Optimal policy pi* ∝ ref^(1 - 1/beta) q^(1/beta) (geometric path from the reference to the teacher);
    sampled-token form: r_t = (1/beta)(log q_t - log ref_t) - (log pi_t - log ref_t) = log pi*_t - log pi_t + log Z_t,
    A_t = sum_{t' >= t} r_t' (return-to-go over the row's policy tokens) or r_t; L_t = -coef * sg(A_t) * logp_t.
    Ours: the paper distils to the mixed logits; the sampled-token estimator here leaves out log Z_t.
    """
    teacher_BT = require(x, "teacher_logprobs_BT", "beta_opsd").detach()
    ref_BT = require(x, "ref_logprobs_BT", "beta_opsd").detach()
    mask_BT = x.loss_mask_BT.to(teacher_BT.dtype)
    r_BT = beta_rewards(teacher_BT, ref_BT, x.logprobs_BT.detach(), cfg.beta) * mask_BT
    adv_BT = r_BT.flip(-1).cumsum(-1).flip(-1) * mask_BT if cfg.return_to_go else r_BT
    return LossOutput(loss_BT=_reinforce_on(adv_BT, x, cfg.coef), metrics=_metrics(x, distill_reward=r_BT))


for _key, _question, _choice in (
    (
        "i_sdpo",
        "what counts as a success and what the GRPO branch is",
        (
            "reward >= success_threshold (1.0); the rest of the group trains with ppo_clip at eps 0.2/0.2 on the "
            "run's advantages; the teacher is the current policy with the privileged context"
        ),
    ),
    (
        "powered_opd",
        "where the Box-Cox transform is applied, and alpha",
        (
            "to each probability: r = (q^a - pi^a)/a (bounded by 1/a, the sign of log q - log pi); alpha = 0.5; "
            "the teacher is the run's self-teacher unless teacher_path names another model"
        ),
    ),
    (
        "g_opd",
        "reward scale and reference",
        (
            "lambda = 1.25 (ExOPD); the reference is the run's frozen initial policy; the teacher is the run's "
            "self-teacher unless teacher_path names another model (the paper: a stronger one)"
        ),
    ),
    (
        "anti_sd",
        "divergence, gate and weights",
        (
            "JSD over the teacher's top-20 ids + tail; gate per token where the teacher's top-K entropy >= 0.1 "
            "nats (or on the batch mean); coef 0.1 next to ppo_clip with rl_coef 1"
        ),
    ),
    (
        "g_opd",
        "several teachers at once",
        (
            "teacher_path as a list: q = sum_k w_k q_k (the mixture of their next-token distributions, "
            "teacher_weights, equal by default), scored on the sampled tokens; top-K distillation takes one teacher"
        ),
    ),
    (
        "beta_opsd",
        "estimator and beta",
        (
            "sampled-token rewards (1/beta)(log q - log ref) - (log pi - log ref) with return-to-go, instead of "
            "distilling to mixed logits (the normalizer log Z is left out); beta = 1"
        ),
    ),
):
    record_choice(_key, _question, _choice)


# ----------------------------------------------------------------------------------------------
# TTPO: test-time, label-free; agreeing rows distil, disagreeing rows get grouped RL.


class TtpoConfig(SelfTeacherConfig):
    coef: float = Field(1.0, ge=0.0, description="weight of the distillation branch (rows agreeing with the vote)")
    rl_coef: float = Field(1.0, ge=0.0, description="weight of the RL branch (rows disagreeing with the vote)")
    converged_tol: float = Field(
        0.05, ge=0.0, description="distil only where |log q - log pi| > this (converged positions skipped; ours)"
    )
    confidence: float = Field(
        0.5, ge=0.0, le=1.0, description="penalize only tokens with pi(y_t) > this (confident errors; ours)"
    )


@register_policy_loss(
    "ttpo",
    config=TtpoConfig,
    needs={"teacher_logprobs", "rewards"},
    teacher=self_teacher,
    status="interpretation",
    evidence="from TTPO's abstract (seed 003): both branches' token selections and thresholds are "
    "ours (recorded choices); tests/algorithms/test_ttpo.py",
)
def ttpo(x: LossInputs, cfg: TtpoConfig) -> LossOutput:
    """TTPO, test-time policy optimization without labels (2026): asymmetric OPSD + grouped RL on pseudo-labels.

    With the ``ttpo_vote`` filter: reward_i = 1[answer_i == majority], teacher context = the majority answer.
    agree_i:    L_t = -coef * sg(log q_t - log pi_t) * 1[|log q_t - log pi_t| > converged_tol] * logp_t
    disagree_i: L_t = rl_coef * 1[pi(y_t) > confidence] * ppo_clip_t(A)   (A: the run's advantage on the pseudo-rewards)
    """
    teacher_BT = require(x, "teacher_logprobs_BT", "ttpo").detach()
    agree_B1 = (require(x, "rewards_B", "ttpo") >= 0.5).to(x.logprobs_BT.dtype).unsqueeze(-1)
    delta_BT = teacher_BT - x.logprobs_BT.detach()
    active_BT = (delta_BT.abs() > cfg.converged_tol).to(delta_BT.dtype)
    distill_BT = _reinforce_on(delta_BT * active_BT, x, cfg.coef)
    confident_BT = (x.logprobs_BT.detach().exp() > cfg.confidence).to(delta_BT.dtype)
    rl_BT = cfg.rl_coef * confident_BT * ppo_clip(x, PpoClipConfig()).loss_BT
    loss_BT = agree_B1 * distill_BT + (1 - agree_B1) * rl_BT
    metrics = _metrics(x, distill_kl=-delta_BT)
    metrics["loss/ttpo_agree_frac"] = float(agree_B1.mean()) if agree_B1.numel() else 0.0
    return LossOutput(loss_BT=loss_BT, metrics=metrics)


record_choice(
    "ttpo",
    "token selection of both branches",
    (
        "distillation skips positions with |log q - log pi| <= 0.05 (converged); the RL branch (ppo_clip on the "
        "run's advantage of the pseudo-rewards) keeps tokens with pi > 0.5 (confident errors)"
    ),
)

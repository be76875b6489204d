"""SPO and SPO++: a persistent per-prompt value tracker instead of sibling rollouts.

The tracker (``PromptValueTracker``) is the entry's state: the trainer creates it once,
checkpoints it, and the task sampler draws prompts with ``spo_sampling_weights`` (registered as
the entry's ``sampler``; it steers sampling when ``trainer.task_pool`` > 0). One sample per prompt
(``rollout.group_size: 1``) is the intended "single-stream" mode: the baseline comes from the
tracker and normalisation is over the whole batch, so nothing waits for siblings. Several samples
of one prompt in a batch all read the same baseline and are absorbed one after the other.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from pydantic import Field

from agent_rl.algorithms.credit.common import batch_rows
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    register_credit,
    require,
)


def offline_prior(successes: int, n0: int, rho_min: float) -> tuple[float, float]:
    """(alpha0, beta0) = N0 (s + 1/2) / (n0 + 1), N0 (n0 - s + 1/2) / (n0 + 1) with N0 = 1 / (1 - rho_min).

    Without offline samples (n0 = 0): alpha0 = beta0 = 0.5.
    """
    if n0 == 0:
        return 0.5, 0.5
    n_eq = 1.0 / (1.0 - rho_min)
    return n_eq * (successes + 0.5) / (n0 + 1), n_eq * (n0 - successes + 0.5) / (n0 + 1)


def adaptive_rho(divergence: float, rho_min: float, rho_max: float = 0.96, d_half: float = 0.06) -> float:
    """SPO's KL-adaptive forgetting factor: clip(2^(-D / D_half), rho_min, rho_max)."""
    return min(max(2.0 ** (-divergence / d_half), rho_min), rho_max)


class PromptValueTracker:
    """Per prompt id: discounted Beta evidence (alpha, beta) and the policy version it refers to."""

    def __init__(self) -> None:
        self.alpha: dict[str, float] = {}
        self.beta: dict[str, float] = {}
        self.version: dict[str, int] = {}  # SPO++: the policy event coordinate alpha/beta are expressed at

    def seed(self, task_id: str, successes: int, n0: int, rho_min: float = 0.875, version: int = 0) -> None:
        """Offline initialisation from ``successes`` of ``n0`` samples of the initial policy."""
        self.alpha[task_id], self.beta[task_id] = offline_prior(successes, n0, rho_min)
        self.version[task_id] = version

    def _ensure(self, task_id: str, version: int = 0) -> None:
        if task_id not in self.alpha:
            self.alpha[task_id], self.beta[task_id] = offline_prior(0, 0, 0.0)
            self.version[task_id] = version

    def value(self, task_id: str) -> float:
        """v(x) = alpha / (alpha + beta) (0.5 for an unseen prompt)."""
        if task_id not in self.alpha:
            return 0.5
        return self.alpha[task_id] / (self.alpha[task_id] + self.beta[task_id])

    def n_eff(self, task_id: str, version: int | None = None, rho: float = 1.0) -> float:
        """alpha + beta (decayed to ``version`` by rho^(version - stored version) when given)."""
        if task_id not in self.alpha:
            return 1.0
        decay = rho ** max(0, version - self.version[task_id]) if version is not None else 1.0
        return decay * (self.alpha[task_id] + self.beta[task_id])

    def update(self, task_id: str, success: float, rho: float) -> None:
        """SPO, per visit: alpha <- rho alpha + r, beta <- rho beta + (1 - r)."""
        self._ensure(task_id)
        self.alpha[task_id] = rho * self.alpha[task_id] + success
        self.beta[task_id] = rho * self.beta[task_id] + (1.0 - success)

    def absorb(self, task_id: str, success: float, version: int, rho: float) -> None:
        """SPO++, per policy event: add r with weight rho^(k), k = events between its version and now."""
        self._ensure(task_id, version)
        ref = self.version[task_id]
        if version > ref:  # move the stored evidence forward to the newer coordinate
            self.alpha[task_id] *= rho ** (version - ref)
            self.beta[task_id] *= rho ** (version - ref)
            self.version[task_id] = ref = version
        w = rho ** (ref - version)
        self.alpha[task_id] += w * success
        self.beta[task_id] += w * (1.0 - success)

    def state_dict(self) -> dict[str, Any]:
        return {"alpha": dict(self.alpha), "beta": dict(self.beta), "version": dict(self.version)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.alpha = {k: float(v) for k, v in state["alpha"].items()}
        self.beta = {k: float(v) for k, v in state["beta"].items()}
        self.version = {k: int(v) for k, v in state["version"].items()}


class SpoConfig(ComponentConfig):
    rho: float = Field(0.875, gt=0.0, le=1.0, description="forgetting factor per visit (recipe's constant mode: 0.875)")
    success_threshold: float = Field(0.0, description="reward above this counts as success r = 1 (recipe: score > 0)")
    eps: float = Field(1e-8, description="added to the batch std before dividing")
    sampling_gamma: float = Field(
        0.0, ge=0.0, le=1.0, description="gamma in w = sqrt(v (1 - v)) / N_eff^gamma + eps_w (code: 0)"
    )
    sampling_eps: float = Field(
        0.05, ge=0.0, description="eps_w, the floor of every prompt's sampling weight (code: 0.05)"
    )


def spo_sampling_weights(state: PromptValueTracker, task_ids: list[str], cfg: SpoConfig) -> list[float]:
    """Prioritised prompt sampling: w(x) = sqrt(v(x) (1 - v(x))) / N_eff(x)^gamma + eps_w."""
    return [
        math.sqrt(state.value(t) * (1.0 - state.value(t))) / state.n_eff(t) ** cfg.sampling_gamma + cfg.sampling_eps
        for t in task_ids
    ]


def _binary(x: AdvantageInputs, threshold: float) -> list[float]:
    return [1.0 if r > threshold else 0.0 for r in x.rewards_B.tolist()]


@register_credit(
    "spo",
    config=SpoConfig,
    needs={"task_ids"},
    state=PromptValueTracker,
    sampler=spo_sampling_weights,
    status="paper",
    evidence="SPO (arXiv 2509.13232) tracker, advantage and sampling from the full method and "
    "verl-recipe spo; worked example in tests/algorithms/test_credit_spo.py",
)
def spo(x: AdvantageInputs, cfg: SpoConfig) -> AdvantageOutput:
    """SPO, Single-stream Policy Optimization (Xu & Ding 2025, arXiv 2509.13232; verl-recipe spo).

    Per-prompt tracker: v(x) = alpha / (alpha + beta), updated after use: alpha <- rho alpha + r, beta <- rho beta + 1 - r.
    A = r - v_prev(x) (the baseline read before r is absorbed); A~ = (A - mean_B A) / (std_B A + eps) over the batch
    (unbiased std), on every action token. Prompts are drawn with w = sqrt(v (1 - v)) / N_eff^gamma + 0.05.
    Works with one sample per prompt (group_size 1). Constant rho only (the KL-adaptive rho needs the
    post-update policy's logprobs on the prompt's previous response, which the trainer does not compute).
    """
    tracker = require(x, "state", "spo")
    task_ids = require(x, "task_ids_B", "spo")
    success_B = _binary(x, cfg.success_threshold)
    baseline_B = [tracker.value(t) for t in task_ids]
    adv_B = torch.tensor(
        [r - v for r, v in zip(success_B, baseline_B, strict=True)], dtype=torch.float64, device=x.loss_mask_BT.device
    )
    std = adv_B.std() if adv_B.numel() > 1 else adv_B.new_zeros(())
    norm_B = (adv_B - adv_B.mean()) / (std + cfg.eps)
    for t, r in zip(task_ids, success_B, strict=True):
        tracker.update(t, r, cfg.rho)
    return AdvantageOutput(
        advantages_BT=(norm_B[:, None] * x.loss_mask_BT.double()).float(),
        metrics={
            "credit/spo_baseline_mean": sum(baseline_B) / len(baseline_B),
            "credit/spo_prompts": float(len(tracker.alpha)),
        },
    )


class SpoPpConfig(SpoConfig):
    eps: float = Field(1e-8, description="added to the token-measure std before dividing")


def token_measure_normalize(adv_B: torch.Tensor, length_B: torch.Tensor, eps: float) -> torch.Tensor:
    """SPO++: (A - mu_tok) / (sigma_tok + eps), mu and sigma^2 = sum L (A - mu)^2 / (sum L - 1) weighted by lengths."""
    adv_B, length_B = adv_B.double(), length_B.double()
    total = length_B.sum()
    mu = (length_B * adv_B).sum() / total.clamp(min=1)
    var = (length_B * (adv_B - mu) ** 2).sum() / (total - 1).clamp(min=1)
    return (adv_B - mu) / (var.sqrt() + eps)


@register_credit(
    "spo_pp",
    config=SpoPpConfig,
    needs={"task_ids"},
    state=PromptValueTracker,
    sampler=spo_sampling_weights,
    status="paper",
    evidence="SPO++ from the paper's text (arXiv 2608.24870): event-time memory and token-measure "
    "normalisation; tests/algorithms/test_credit_spo.py",
)
def spo_pp(x: AdvantageInputs, cfg: SpoPpConfig) -> AdvantageOutput:
    """SPO++, Stream-Aligned Policy Optimization (Ruan et al. 2026, arXiv 2608.24870).

    Baseline frozen at dispatch from event-time memory (z advances by -log rho per policy version):
    alpha_q = rho^(v_q - v_0) alpha_0 + sum_{i visible} rho^(v_q - v_i) R_i (beta alike with 1 - R_i), v = alpha / (alpha + beta).
    A_i = R_i - v(dispatch); action-token-measure normalisation with L_i = action tokens of row i:
    mu = sum L A / sum L, sigma^2 = sum L (A - mu)^2 / (sum L - 1), A~ = (A - mu) / (sigma + eps), so sum L A~ = 0.
    Outcomes of this batch become visible only after it (dispatch-causal); the dispatch version is the
    policy version of a row's first turn. Sampling as SPO: w = sqrt(v (1 - v)) / N_eff^gamma + 0.05.
    """
    groups = require(x, "groups", "spo_pp")
    tracker = require(x, "state", "spo_pp")
    task_ids = require(x, "task_ids_B", "spo_pp")
    rows = batch_rows(groups, x)
    versions = [min((u.policy_version for u in t.turns_N), default=0) for _, t in rows]
    success_B = _binary(x, cfg.success_threshold)
    baseline_B = [tracker.value(t) for t in task_ids]  # decay scales alpha and beta alike: v is unchanged
    adv_B = torch.tensor(
        [r - v for r, v in zip(success_B, baseline_B, strict=True)], dtype=torch.float64, device=x.loss_mask_BT.device
    )
    norm_B = token_measure_normalize(adv_B, x.loss_mask_BT.double().sum(-1), cfg.eps)
    for t, r, v in zip(task_ids, success_B, versions, strict=True):
        tracker.absorb(t, r, v, cfg.rho)
    return AdvantageOutput(
        advantages_BT=(norm_B[:, None] * x.loss_mask_BT.double()).float(),
        metrics={
            "credit/spo_baseline_mean": sum(baseline_B) / len(baseline_B),
            "credit/spo_prompts": float(len(tracker.alpha)),
        },
    )

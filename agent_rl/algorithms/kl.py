"""KL estimators (registry ``kl``): per-token estimates of a KL between pi and pi_ref from sampled tokens.

Tokens are sampled from pi. With log r = log pi_ref(y) - log pi(y):

* ``direction: reverse`` estimates KL(pi || pi_ref) = E_pi[-log r] with an estimator k(log r);
* ``direction: forward`` estimates KL(pi_ref || pi) = E_ref[k(-log r)] = E_pi[r * k(-log r)]: the
  same estimator with the roles of the two policies swapped, importance-weighted by r so that it
  stays correct under samples of pi.

``placement`` (``in_loss``: GRPO, added to the per-token loss; ``in_reward``: PPO / REINFORCE++,
coef * KL handed to the advantage estimator as ``AdvantageInputs.kl_penalty_BT``) is read by the
trainer; the estimators only estimate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch
from pydantic import Field

from agent_rl.algorithms.registry import ComponentConfig, KlInputs, register_kl

LOG_RATIO_CLAMP = 20.0  # clamp log-ratios before exp(): a far-off reference can overflow


class KlConfig(ComponentConfig):
    coef: float = Field(0.0, description="weight of the KL term (0 disables it and the reference model)")
    placement: Literal["in_loss", "in_reward"] = Field(
        "in_loss", description="GRPO: in_loss; PPO/REINFORCE++: in_reward"
    )
    direction: Literal["reverse", "forward"] = Field("reverse", description="KL(pi||ref) or KL(ref||pi)")


def _directed(
    logprobs_BT: torch.Tensor, ref_logprobs_BT: torch.Tensor, cfg: KlConfig, k: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """k(log r) for ``reverse``; r * k(-log r) for ``forward`` (log r clamped to +-20 there)."""
    log_r = ref_logprobs_BT - logprobs_BT
    if cfg.direction == "reverse":
        return k(log_r)
    log_r = log_r.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.exp(log_r) * k(-log_r)


def _k3(log_r: torch.Tensor) -> torch.Tensor:
    log_r = log_r.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.exp(log_r) - log_r - 1.0


@register_kl(
    "k1",
    config=KlConfig,
    needs={"ref_logprobs"},
    status="reference",
    evidence="tests/algorithms/test_kl.py: reverse values equal verl 0.9.1 kl_penalty k1 (run outside CI); "
    "forward direction hand-computed only",
)
def k1(
    logprobs_BT: torch.Tensor, ref_logprobs_BT: torch.Tensor, cfg: KlConfig, x: KlInputs | None = None
) -> torch.Tensor:
    """Schulman's k1 estimator (Approximating KL Divergence, 2020): the sampled log-ratio.

    reverse: k1 = log pi - log pi_ref = -log r (unbiased, can be negative; verl ``kl`` / ``k1``);
    forward: r * log r.
    """
    return _directed(logprobs_BT, ref_logprobs_BT, cfg, lambda log_r: -log_r)


@register_kl(
    "abs",
    config=KlConfig,
    needs={"ref_logprobs"},
    status="reference",
    evidence="tests/algorithms/test_kl.py: reverse values equal verl 0.9.1 kl_penalty abs (run outside "
    "CI); forward direction hand-computed only",
)
def abs_kl(
    logprobs_BT: torch.Tensor, ref_logprobs_BT: torch.Tensor, cfg: KlConfig, x: KlInputs | None = None
) -> torch.Tensor:
    """Absolute log-ratio (verl ``abs``), a biased non-negative variant of k1.

    reverse: |log pi - log pi_ref| = |log r|;  forward: r * |log r|.
    """
    return _directed(logprobs_BT, ref_logprobs_BT, cfg, torch.abs)


@register_kl(
    "k2",
    config=KlConfig,
    needs={"ref_logprobs"},
    status="reference",
    evidence="tests/algorithms/test_kl.py: reverse values equal verl 0.9.1 kl_penalty k2 / mse (run "
    "outside CI); forward direction hand-computed only",
)
def k2(
    logprobs_BT: torch.Tensor, ref_logprobs_BT: torch.Tensor, cfg: KlConfig, x: KlInputs | None = None
) -> torch.Tensor:
    """Schulman's k2 estimator (Approximating KL Divergence, 2020): half the squared log-ratio.

    reverse: k2 = 0.5 * (log r)^2 (non-negative, low variance, biased; verl ``k2`` / ``mse``);
    forward: 0.5 * r * (log r)^2.
    """
    return _directed(logprobs_BT, ref_logprobs_BT, cfg, lambda log_r: 0.5 * log_r.square())


@register_kl(
    "k3",
    config=KlConfig,
    needs={"ref_logprobs"},
    status="reference",
    evidence="tests/algorithms/test_kl.py: reverse values below 10 equal verl 0.9.1 kl_penalty k3 (verl "
    "clamps at 10, we do not; run outside CI)",
)
def k3(
    logprobs_BT: torch.Tensor, ref_logprobs_BT: torch.Tensor, cfg: KlConfig, x: KlInputs | None = None
) -> torch.Tensor:
    """Schulman's k3 estimator (http://joschu.net/blog/kl-approx.html), as used by GRPO.

    reverse: k3 = r - log r - 1 >= 0 with log r = log pi_ref - log pi clamped to +-20, unbiased for
    KL(pi || ref); forward: r * (1/r + log r - 1) = r log r - r + 1 >= 0, unbiased for KL(ref || pi).
    Unlike verl's ``k3`` the value is not clamped to 10 (that is ``low_var_kl``).
    """
    return _directed(logprobs_BT, ref_logprobs_BT, cfg, _k3)


class LowVarKlConfig(KlConfig):
    clamp: float = Field(10.0, description="the estimate is clamped to [-clamp, clamp] (verl: 10)")


@register_kl(
    "low_var_kl",
    config=LowVarKlConfig,
    needs={"ref_logprobs"},
    status="reference",
    evidence="tests/algorithms/test_kl.py: reverse values equal verl 0.9.1 kl_penalty low_var_kl (run "
    "outside CI); forward hand-computed only",
)
def low_var_kl(
    logprobs_BT: torch.Tensor, ref_logprobs_BT: torch.Tensor, cfg: LowVarKlConfig, x: KlInputs | None = None
) -> torch.Tensor:
    """Clamped k3 (verl ``low_var_kl``, also verl's ``k3``): bounded per-token KL for stability.

    low_var_kl = clamp(k3, -clamp, clamp), k3 as in ``k3`` (either direction), clamp = 10.
    """
    return k3(logprobs_BT, ref_logprobs_BT, cfg).clamp(-cfg.clamp, cfg.clamp)


class CoklConfig(KlConfig):
    direction: Literal["reverse", "forward"] = Field("forward", description="CoKL is instantiated with forward KL")
    correct_threshold: float = Field(0.5, description="a reward above this counts as correct")


@register_kl(
    "cokl",
    config=CoklConfig,
    needs={"ref_logprobs"},
    status="interpretation",
    evidence="CoKL from its abstract (seed 003, no paper text cited): the group estimators and their "
    "per-row split are ours (docstring); tests/algorithms/test_kl.py",
)
def cokl(
    logprobs_BT: torch.Tensor, ref_logprobs_BT: torch.Tensor, cfg: CoklConfig, x: KlInputs | None = None
) -> torch.Tensor:
    """CoKL correctness-conditioned KL (2026): a KL between pi and pi_ref restricted to correct responses.

    Per group, over its n correct responses: s_i = sum_t (log pi_ref - log pi)(y_it), w = softmax(s).
    forward  KL(ref(.|C) || pi(.|C)) ~ sum_i w_i s_i - log mean_j exp(s_j) = KL(w || uniform_n);
    reverse  KL(pi(.|C) || ref(.|C)) ~ log mean_j exp(s_j) - mean_i s_i.
    Both are >= 0, 0 when pi and ref allocate the same relative mass to the group's correct
    responses, and do not anchor incorrect responses or the total correct mass. The group term is
    split into per-row terms c_i (forward: w_i log w_i + log(n)/n; reverse: (LSE(s) - log n - s_i)/n)
    broadcast to the row's tokens; incorrect rows get 0. Needs ``x`` (mask, rewards, groups) and
    micro-batches holding whole groups.
    """
    if x is None or x.loss_mask_BT is None or x.rewards_B is None or x.group_index_B is None:
        raise ValueError(
            "'cokl' needs KlInputs with loss_mask_BT, rewards_B and group_index_B, which the caller did not provide"
        )
    mask_BT = x.loss_mask_BT.to(logprobs_BT.dtype)
    s_B = ((ref_logprobs_BT - logprobs_BT) * mask_BT).sum(-1)
    correct_B = x.rewards_B > cfg.correct_threshold
    c_B = torch.zeros_like(s_B)
    for g in torch.unique(x.group_index_B):
        rows = torch.nonzero((x.group_index_B == g) & correct_B).flatten()
        n = rows.numel()
        if n < 2:
            continue
        s = s_B[rows]
        log_n = math.log(n)
        if cfg.direction == "forward":
            log_w = torch.log_softmax(s, 0)
            c = torch.exp(log_w) * log_w + log_n / n
        else:
            c = (torch.logsumexp(s, 0) - log_n - s) / n
        c_B = c_B.index_put((rows,), c)
    return c_B[:, None] * mask_BT

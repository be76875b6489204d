"""ReDiPPO: a reference-guided critic beside the standard one; token advantages reweighted by their
discrepancy (Zhang, Wu, Du, Zhang, Wei 2026, "ReDiPPO: Reference-Guided Value Calibration and
Discrepancy-Aware Token Reweighting for Mathematical Reasoning", arXiv 2607.27631).

What the paper gives (its abstract; the full text and its code, cii030/ReDiPPO, were not available):
a reference-guided critic reads the reference answer as training-time privileged information; a
standard critic is kept; their token-level discrepancy marks difficult reasoning states and
reweights the token-level advantages of PPO. Here:

    V_std(s_t)  the run's critic (``learner.critic``, need ``values``), on the policy's own rows
    V_ref(s_t)  a second critic, same settings, own weights, on the rows with the env's
                ``teacher_context`` (the reference answer) spliced in as one more user message
                (need ``privileged_values``: the ``privileged_critic`` component, ``learner/privileged.py``)
    A_t         GAE(V_ref) by default (``advantage_critic: reference``; ``standard``: GAE(V_std)),
                whitened as ``gae`` does
    d_t = |V_ref(s_t) - V_std(s_t)|
    w_t = clip(1 + strength * (d_t / mean(d) - 1), w_min, w_max)   (mean over the batch's loss tokens; w = 1 when mean(d) = 0)
    A'_t = w_t * A_t
    each critic: the clipped value loss (``Critic.update``) towards its own returns GAE(V)(critic_lam) + V

The weight function is OURS: the paper's reweighting function is in no text we could read
(searches listed in docs/objectives-backlog.md). Ours is bounded and has mean one over the batch before
clipping, so it moves weight towards high-discrepancy tokens without changing the advantages' scale;
``strength: 0`` is plain PPO with the chosen critic. Both critics start at zero (``Critic``'s zero
head), so the first step has d = 0 and w = 1.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch
from pydantic import Field

from agent_rl.algorithms.advantages.returns import GaeConfig, gae
from agent_rl.algorithms.needs import register_need
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    record_choice,
    register_advantage,
    require,
)


class RedippoConfig(GaeConfig):
    advantage_critic: Literal["reference", "standard"] = Field(
        "reference",
        description="which critic's GAE the policy's advantages come from (ours: the reference-guided one, the 'more accurate value estimation')",
    )
    strength: float = Field(
        1.0,
        ge=0.0,
        description="lambda of w_t = clip(1 + lambda (d_t / mean d - 1), w_min, w_max) (ours; 0: no reweighting)",
    )
    w_min: float = Field(0.5, ge=0.0, le=1.0, description="lower bound of the token weight (ours)")
    w_max: float = Field(2.0, ge=1.0, description="upper bound of the token weight (ours)")

    def gae_config(self) -> GaeConfig:
        return GaeConfig.model_validate({k: getattr(self, k) for k in GaeConfig.model_fields if k != "name"})


def discrepancy_weights(
    v_ref_BT: torch.Tensor, v_std_BT: torch.Tensor, mask_BT: torch.Tensor, strength: float, w_min: float, w_max: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(w_BT, d_BT): d = |V_ref - V_std| and w = clip(1 + strength (d / mean d - 1), w_min, w_max) on
    the loss tokens (mean over them), 0 elsewhere; w = 1 on every loss token when mean d = 0."""
    m = mask_BT.double()
    d_BT = (v_ref_BT.double() - v_std_BT.double()).abs() * m
    mean_d = d_BT.sum() / m.sum().clamp(min=1)
    if float(mean_d) <= 0.0:
        return m.clone(), d_BT
    w_BT = (1.0 + strength * (d_BT / mean_d - 1.0)).clamp(w_min, w_max)
    return w_BT * m, d_BT


register_need(
    "privileged_values",
    "the privileged critic's value of each token: a second critic that reads each row with the env's teacher_context",
    builds="privileged_critic",
    to_batch=False,
)


@register_advantage(
    "redippo",
    config=RedippoConfig,
    needs={"values", "privileged_values"},
    status="interpretation",
    evidence="from the abstract of arXiv 2607.27631 only (text and code cii030/ReDiPPO not "
    "available); the reweighting function and its defaults are ours; 4 recorded choices; "
    "tests/algorithms/test_redippo.py",
)
def redippo(x: AdvantageInputs, cfg: RedippoConfig) -> AdvantageOutput:
    """ReDiPPO: reference-guided critic, discrepancy-aware PPO (Zhang et al. 2026, arXiv 2607.27631).

    d_t = |V_ref(s_t) - V_std(s_t)|,  w_t = clip(1 + strength (d_t / mean d - 1), w_min, w_max)  (ours)
    A'_t = w_t * whiten(GAE(V_ref))_t; V_ref reads the env's teacher_context; both critics trained.
    """
    v_std_BT = require(x, "values_BT", "redippo")
    if "privileged_values" not in x.extras:
        raise ValueError(
            "'redippo' needs the privileged critic's values (need privileged_values), which the caller did not provide"
        )
    mask_BT = x.loss_mask_BT
    v_ref_BT = x.extras["privileged_values"].to(v_std_BT.dtype) * mask_BT.to(v_std_BT.dtype)
    gcfg = cfg.gae_config()
    std = gae(dataclasses.replace(x, values_BT=v_std_BT), gcfg)
    ref = gae(dataclasses.replace(x, values_BT=v_ref_BT), gcfg)
    base = ref if cfg.advantage_critic == "reference" else std
    w_BT, d_BT = discrepancy_weights(v_ref_BT, v_std_BT, mask_BT, cfg.strength, cfg.w_min, cfg.w_max)
    m = mask_BT.bool()
    n = int(m.sum())
    metrics = {
        "adv/redippo_discrepancy_mean": float(d_BT[m].mean()) if n else 0.0,
        "adv/redippo_weight_min": float(w_BT[m].min()) if n else 1.0,
        "adv/redippo_weight_max": float(w_BT[m].max()) if n else 1.0,
        "adv/redippo_v_ref_mean": float(v_ref_BT[m].mean()) if n else 0.0,
    }
    return AdvantageOutput(
        advantages_BT=(base.advantages_BT.double() * w_BT).to(torch.float32),
        returns_BT=std.returns_BT,  # the trainer trains the standard critic on these
        metrics={**base.metrics, **metrics},
        targets={"privileged_critic": ref.returns_BT},  # and the privileged critic on its own returns
    )


record_choice(
    "redippo",
    "the reweighting function of the discrepancy",
    (
        "not in any text we could read (arXiv 2607.27631 abstract only; cii030/ReDiPPO not available); ours: w_t = "
        "clip(1 + strength (d_t / mean_batch d - 1), w_min, w_max), strength 1, [0.5, 2]; mean one over the "
        "batch's loss tokens before clipping; w = 1 when the critics agree everywhere"
    ),
)
record_choice(
    "redippo",
    "which critic gives the advantages",
    (
        "the reference-guided one by default (GAE(V_ref), the 'more accurate value estimation'); advantage_critic: "
        "standard uses GAE(V_std); the standard critic gives only the discrepancy then"
    ),
)
record_choice(
    "redippo",
    "the reference answer the critic reads",
    "the env's teacher_context (Arithmetic: 'Verified solution: EXPR = N'), spliced as one more user message as the sdpo / opsd teacher gets it",
)
record_choice(
    "redippo",
    "the critics' targets",
    (
        "each its own GAE returns (critic_lam, default lam), the same clipped value loss and learner.critic "
        "settings; both start from model.path (or learner.critic.path) with a zero head"
    ),
)

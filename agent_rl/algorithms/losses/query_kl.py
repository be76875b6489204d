"""QKL: regularize the policy's likelihood of the training queries instead of its responses.

The learner's logprobs cover every token of a row, the prompt's too (``logprobs_BT[:, t]`` =
log pi(token t | tokens < t)), and so do the reference's; the query of a row is its tokens before
its first policy token (column 0 has no logprob). The term's gradient flows only through those
query logprobs: the response's score function never sees it, so exploration is left alone.
"""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.losses.common import LOG_RATIO_CLAMP, broadcast, seq_len
from agent_rl.algorithms.losses.ppo import PpoClipConfig, ppo_clip
from agent_rl.algorithms.registry import LossInputs, LossOutput, record_choice, register_policy_loss, require


class QklConfig(PpoClipConfig):
    coef: float = Field(
        0.01, ge=0.0, description="weight of the query-KL term (ours; it replaces kl.coef, leave that at 0)"
    )
    weight_temperature: float = Field(
        1.0,
        gt=0.0,
        description="w_q = exp(mean_t log ref(q_t) / T): queries typical under the reference weigh more (ours)",
    )


def query_mask(loss_mask_BT: torch.Tensor) -> torch.Tensor:
    """1 on each row's query tokens: positions 1 .. (first policy token - 1)."""
    seen_BT = torch.cumsum(loss_mask_BT.to(torch.int64), dim=-1) > 0
    positions_BT = torch.arange(loss_mask_BT.shape[1], device=loss_mask_BT.device).expand_as(loss_mask_BT)
    return ((~seen_BT) & (positions_BT >= 1)).to(torch.float64)


def query_kl(logprobs_BT: torch.Tensor, ref_BT: torch.Tensor, qmask_BT: torch.Tensor) -> torch.Tensor:
    """Per-query k3 estimate of KL(pi || ref) over its tokens: sum_t (r_t - 1 - log r_t), r_t = ref_t / pi_t."""
    log_r_BT = (ref_BT.detach().to(logprobs_BT.dtype) - logprobs_BT).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    k3_BT = torch.exp(log_r_BT) - 1.0 - log_r_BT
    return (k3_BT * qmask_BT.to(k3_BT.dtype)).sum(-1)


@register_policy_loss(
    "qkl",
    config=QklConfig,
    needs={"ref_logprobs"},
    status="interpretation",
    evidence="from ERPO's Query-KL abstract (seed 003): estimator, per-query weight and coef 0.01 "
    "are ours (recorded choice); tests/algorithms/test_qkl.py",
)
def qkl(x: LossInputs, cfg: QklConfig) -> LossOutput:
    """ERPO's Query-KL (2026): ppo_clip on the response + a KL on the query likelihood, per-query weighted.

    QKL_i = sum_{t in query_i} k3_t, k3_t = r_t - 1 - log r_t, r_t = ref(q_t | q_<t) / pi(q_t | q_<t)
    w_i = exp(mean_t log ref(q_t) / T), the reference's per-token geometric-mean likelihood of the query
    (dataset-static given the frozen reference: typical queries weigh more; ours), L = ppo_clip + coef * w_i * QKL_i / |response_i| on each response token
    (so a row adds w_i QKL_i once to the token sum); the gradient reaches only the query logprobs.
    """
    ref_BT = require(x, "ref_logprobs_BT", "qkl")
    qmask_BT = query_mask(x.loss_mask_BT)
    qkl_B = query_kl(x.logprobs_BT, ref_BT, qmask_BT)
    with torch.no_grad():
        n_B = qmask_BT.sum(-1).clamp(min=1)
        w_B = torch.exp((ref_BT.double() * qmask_BT).sum(-1) / n_B / cfg.weight_temperature)
    per_token_B = cfg.coef * w_B.to(qkl_B.dtype) * qkl_B / seq_len(x.loss_mask_BT).to(qkl_B.dtype)
    rl = ppo_clip(x, cfg)
    metrics = dict(rl.metrics)
    metrics["loss/query_kl"] = float(qkl_B.detach().mean()) if qkl_B.numel() else 0.0
    return LossOutput(loss_BT=rl.loss_BT + broadcast(per_token_B, x.logprobs_BT), metrics=metrics)


for _key, _question, _choice in (
    (
        "qkl",
        "estimator, query tokens and per-query weight",
        "k3 of KL(pi || ref) summed over the tokens before a row's first policy token; w = exp(mean log ref(q)); coef 0.01 next to ppo_clip",
    ),
):
    record_choice(_key, _question, _choice)

"""Top-K distribution matching for on-policy distillation (``sdpo`` / ``opsd`` with ``estimator: topk``).

The sampled-token estimator only sees the teacher's logprob of the token the student sampled, so
it can lower that token but never raise one the student did not sample. Distribution matching
compares the two next-token distributions over the teacher's K most likely ids c_1..c_K of every
position (the trainer puts them in the batch as the candidates at which the learner scores the
policy; ``LossInputs.topk_logprobs_BTK`` = log pi(c_k), ``extras["teacher_topk"]`` = log q(c_k)):

    tail: buckets c_1..c_K plus one "rest" bucket, log p(rest) = log(1 - sum_k p(c_k));
    no tail: both renormalized over c_1..c_K.
    reverse KL(pi || q) = sum_b pi_b (log pi_b - log q_b)      (SDPO's objective, mode-seeking)
    forward KL(q || pi) = sum_b q_b  (log q_b  - log pi_b)     (classic distillation, mass-covering)

The gradient reaches every candidate: a token the teacher likes and the student never sampled
gains probability (``tests/algorithms/test_distill_topk.py``).
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from agent_rl.algorithms.needs import NEEDS, register_need
from agent_rl.algorithms.registry import record_choice

Divergence = Literal["forward", "reverse"]

if "teacher_topk" not in NEEDS:
    register_need(
        "teacher_topk",
        "the teacher's logprobs at its top-k ids of each position (its ids become the batch's candidates)",
        builds="teacher",
        forward="candidates",
    )

# keeps log(1 - sum p) finite when the top-K hold (numerically) all the mass
_TAIL_FLOOR = 1e-6
# log-probability of a padded candidate: exp() is 0, and unlike -inf no nan reaches the gradient
_MASKED = -1e4


def _with_tail(logp_BTK: torch.Tensor) -> torch.Tensor:
    """Append log(1 - sum_k p_k) as bucket K (the mass outside the candidates)."""
    mass_BT = logp_BTK.exp().sum(-1).clamp(max=1.0 - _TAIL_FLOOR)
    return torch.cat([logp_BTK, torch.log1p(-mass_BT).unsqueeze(-1)], dim=-1)


def _buckets(logp_BTK: torch.Tensor, mask_BTK: torch.Tensor, tail: bool) -> torch.Tensor:
    """Log-probabilities of the compared buckets; padded candidates get weight 0."""
    logp_BTK = logp_BTK.masked_fill(~mask_BTK, _MASKED)
    if tail:
        return _with_tail(logp_BTK)
    return logp_BTK - torch.logsumexp(logp_BTK, dim=-1, keepdim=True)


def topk_divergence(
    student_BTK: torch.Tensor,
    teacher_BTK: torch.Tensor,
    divergence: Divergence,
    tail: bool = True,
    mask_BTK: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL between student and teacher over the teacher's top-K (+ tail); grad via the student."""
    mask = torch.ones_like(student_BTK, dtype=torch.bool) if mask_BTK is None else mask_BTK.bool()
    s_BTb = _buckets(student_BTK, mask, tail)
    q_BTb = _buckets(teacher_BTK.detach().to(student_BTK.dtype), mask, tail)
    p_BTb = s_BTb.exp() if divergence == "reverse" else q_BTb.exp()
    diff_BTb = s_BTb - q_BTb if divergence == "reverse" else q_BTb - s_BTb
    return (p_BTb * diff_BTb).sum(-1)


def topk_jsd(
    student_BTK: torch.Tensor, teacher_BTK: torch.Tensor, tail: bool = True, mask_BTK: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-token Jensen-Shannon divergence over the teacher's top-K (+ tail), in [0, ln 2]; grad via the student.

    JSD = 1/2 KL(pi || m) + 1/2 KL(q || m), m = (pi + q) / 2.
    """
    mask = torch.ones_like(student_BTK, dtype=torch.bool) if mask_BTK is None else mask_BTK.bool()
    s_BTb = _buckets(student_BTK, mask, tail)
    q_BTb = _buckets(teacher_BTK.detach().to(student_BTK.dtype), mask, tail)
    m_BTb = torch.logaddexp(s_BTb, q_BTb) - math.log(2.0)
    return 0.5 * (s_BTb.exp() * (s_BTb - m_BTb)).sum(-1) + 0.5 * (q_BTb.exp() * (q_BTb - m_BTb)).sum(-1)


def topk_entropy(logp_BTK: torch.Tensor, tail: bool = True, mask_BTK: torch.Tensor | None = None) -> torch.Tensor:
    """Entropy of the distribution over the top-K buckets (+ tail): a lower bound's proxy for the full entropy."""
    mask = torch.ones_like(logp_BTK, dtype=torch.bool) if mask_BTK is None else mask_BTK.bool()
    b_BTb = _buckets(logp_BTK, mask, tail)
    return -(b_BTb.exp() * b_BTb).sum(-1)


for _key, _question, _choice in (
    (
        "sdpo",
        "top-K support and size",
        (
            "estimator=topk: the teacher's top-K ids (K=20) plus one tail bucket for the rest of the mass; the "
            "learner scores the policy at those ids (the sampler's top-k is not used)"
        ),
    ),
    (
        "opsd",
        "divergence of estimator=topk",
        "reverse KL(pi || q) by default (SDPO's objective); forward KL(q || pi) and renormalizing instead of a tail bucket are options",
    ),
):
    record_choice(_key, _question, _choice)

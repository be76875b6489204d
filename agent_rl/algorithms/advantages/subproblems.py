"""SCRL's advantage: sub-problem-level normalisation, each sub-problem's advantage on its answer span.

A decomposed episode (queued by the filter ``scrl``) answers K sub-problems in order, the last the
original problem; the filter writes ``info["scrl"] = {"prefix": [r_1..r_K], "ends": [e_1..e_(K-1)]}``:
the progress-aware rewards (r_k = 1 while every sub-problem up to k is right, then 0) and the token
index just after the policy's k-th answer.
"""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.advantages.common import (
    broadcast_to_tokens,
    grpo_advantage_B,
    sequence_rewards,
)
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    record_choice,
    register_advantage,
)


def prefix_rewards(correct: list[bool]) -> list[float]:
    """Progress-aware rewards: 1 for each sub-problem inside the longest correct prefix, 0 after it."""
    out, ok = [], True
    for c in correct:
        ok = ok and c
        out.append(1.0 if ok else 0.0)
    return out


class ScrlConfig(ComponentConfig):
    eps: float = Field(1e-6, description="added to each position's std before dividing (as grpo)")


@register_advantage("scrl", config=ScrlConfig,
                    status="interpretation",
                    evidence="arXiv 2605.22074 / seed 000: sub-problems come from the env's verified decomposition, "
                             "not a model (our choice); 4 recorded choices; tests/algorithms/test_scrl.py")
def scrl(x: AdvantageInputs, cfg: ScrlConfig) -> AdvantageOutput:
    """SCRL, Subproblem Curriculum RL (Jiang et al. 2026, arXiv 2605.22074; seed 000).

    In a group of decomposed rows i with progress-aware rewards r_(i,k) (k = 1..K, the last the
    original problem): A_(i,k) = (r_(i,k) - mean_j r_(j,k)) / (std_j r_(j,k) + eps), normalised per
    sub-problem position k (Bessel std, as ``grpo``); token t of row i gets A_(i,k) for the k whose
    answer span holds it: span 1 runs from the first generated token to the end of answer 1, span k
    from the end of answer k-1 to the end of answer k, the last span to the end of the row (an answer
    never written ends its span at the row's end, so later spans are empty). Rows without
    ``info["scrl"]`` (the plain half) get ``grpo`` within their own group: the two halves never share
    a baseline. Rows are read from ``x.groups`` in the concat layout (token indices = columns).
    """
    adv_BT = broadcast_to_tokens(grpo_advantage_B(sequence_rewards(x), x.group_index_B, cfg.eps, True), x.loss_mask_BT)
    b, decomposed = 0, 0
    for g in x.groups or []:
        rows = list(range(b, b + len(g.trajectories_G)))
        b += len(g.trajectories_G)
        infos = [t.info.get("scrl") for t in g.trajectories_G]
        if not all(infos):
            continue
        decomposed += len(rows)
        prefix = torch.tensor([i["prefix"] for i in infos], dtype=torch.float32)  # [n, K]
        n, K = prefix.shape
        mean = prefix.mean(0, keepdim=True)
        std = prefix.std(0, keepdim=True) if n > 1 else torch.ones(1, K)
        adv_nK = (prefix - (mean if n > 1 else 0.0)) / (std + cfg.eps)
        T = x.loss_mask_BT.shape[1]
        for j, (row, info) in enumerate(zip(rows, infos, strict=True)):
            ends = [e if e is not None else T for e in info["ends"]] + [T]
            start = 0
            for k, end in enumerate(ends):
                end = max(min(end, T), start)
                adv_BT[row, start:end] = adv_nK[j, k]
                start = end
        adv_BT[rows] *= x.loss_mask_BT[rows]
    return AdvantageOutput(advantages_BT=adv_BT, metrics={"scrl/decomposed_rows": float(decomposed)})


record_choice("scrl", "span of an answer", "from the end of the previous answer (the first generated token for the first) to the first token after the answer's closing tag; the last sub-problem takes the rest of the row")

"""Loss aggregation (registry ``aggregation``): the ONLY place a per-token loss becomes a scalar.

Every mode divides by step-global quantities (``AggregationInputs``: counts of the whole step,
per-row fields that travel with their row), so summing the results of micro-batches equals the
result on the whole step. Build the inputs once per step with ``aggregation_inputs_for`` and cut
them per micro-batch with ``select_rows``.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from agent_rl.algorithms.registry import (
    AggregationInputs,
    ComponentConfig,
    register_aggregation,
    require,
)


def aggregation_inputs_for(
    loss_mask_BT: torch.Tensor, group_index_B: torch.Tensor, max_response_tokens: float | None = None
) -> AggregationInputs:
    """Step-global counts of a whole-step batch (call once per step, before micro-batching).

    Rows without any loss token count neither as sequences nor for their group (as verl's
    ``agg_loss``). ``max_response_tokens`` is the constant of ``seq_mean_token_sum_norm``: pass the
    generation budget (Dr. GRPO); by default it is the padded width of the step's batch.
    """
    tokens_B = loss_mask_BT.to(torch.float64).sum(-1)
    nonempty_B = tokens_B > 0
    _, inverse_B = torch.unique(group_index_B, return_inverse=True)
    num_groups = int(inverse_B.max()) + 1 if inverse_B.numel() else 0
    group_tokens = torch.zeros(num_groups, dtype=torch.float64, device=tokens_B.device).index_add_(
        0, inverse_B, tokens_B
    )
    return AggregationInputs(
        num_tokens=float(tokens_B.sum()),
        num_sequences=float(nonempty_B.sum()),
        num_groups=float(torch.unique(group_index_B[nonempty_B]).numel()),
        group_index_B=group_index_B,
        group_num_tokens_B=group_tokens[inverse_B].to(torch.float32),
        max_response_tokens=float(max_response_tokens if max_response_tokens is not None else loss_mask_BT.shape[-1]),
    )


def select_rows(x: AggregationInputs, rows: Any) -> AggregationInputs:
    """The inputs of a micro-batch: step-global scalars unchanged, per-row tensors cut to ``rows``."""
    return AggregationInputs(**{k: (v[rows] if isinstance(v, torch.Tensor) else v) for k, v in vars(x).items()})


def _row_sums(loss_BT: torch.Tensor, mask_BT: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row masked loss sum and token count."""
    mask = mask_BT.to(loss_BT.dtype)
    return (loss_BT * mask).sum(-1), mask.sum(-1)


@register_aggregation(
    "token_mean",
    config=ComponentConfig,
    status="reference",
    evidence="tests/algorithms/test_aggregation.py: equals verl 0.9.1 agg_loss token-mean, "
    "whole-batch and micro-batched (run outside CI)",
)
def token_mean(
    loss_BT: torch.Tensor, mask_BT: torch.Tensor, x: AggregationInputs, cfg: ComponentConfig
) -> torch.Tensor:
    """Token-level mean over the whole step (DAPO, Yu et al. 2025).

    L = sum_{i,t} m_it * l_it / N_tokens, with N_tokens the masked tokens of the whole step.
    """
    return (loss_BT * mask_BT.to(loss_BT.dtype)).sum() / max(x.num_tokens, 1.0)


@register_aggregation(
    "seq_mean_token_mean",
    config=ComponentConfig,
    status="reference",
    evidence="tests/algorithms/test_aggregation.py: equals verl 0.9.1 agg_loss "
    "seq-mean-token-mean, whole-batch and micro-batched (run outside CI)",
)
def seq_mean_token_mean(
    loss_BT: torch.Tensor, mask_BT: torch.Tensor, x: AggregationInputs, cfg: ComponentConfig
) -> torch.Tensor:
    """Sequence mean of per-sequence token means (GRPO, Shao et al. 2024).

    L = (1 / N_seq) * sum_i (1 / L_i) sum_t m_it * l_it, N_seq the step's rows with L_i > 0.
    """
    sums_B, tokens_B = _row_sums(loss_BT, mask_BT)
    return (sums_B / tokens_B.clamp(min=1)).sum() / max(x.num_sequences, 1.0)


@register_aggregation(
    "seq_mean_token_sum",
    config=ComponentConfig,
    status="reference",
    evidence="tests/algorithms/test_aggregation.py: equals verl 0.9.1 agg_loss "
    "seq-mean-token-sum, whole-batch and micro-batched (run outside CI)",
)
def seq_mean_token_sum(
    loss_BT: torch.Tensor, mask_BT: torch.Tensor, x: AggregationInputs, cfg: ComponentConfig
) -> torch.Tensor:
    """Sequence mean of per-sequence token sums (Dr. GRPO, Liu et al. 2025; verl ``seq-mean-token-sum``).

    L = (1 / N_seq) * sum_i sum_t m_it * l_it.
    """
    sums_B, _ = _row_sums(loss_BT, mask_BT)
    return sums_B.sum() / max(x.num_sequences, 1.0)


class SeqMeanTokenSumNormConfig(ComponentConfig):
    normalizer: float | None = Field(
        None,
        description="constant divisor (Dr. GRPO: the generation budget); None = AggregationInputs.max_response_tokens",
    )


@register_aggregation(
    "seq_mean_token_sum_norm",
    config=SeqMeanTokenSumNormConfig,
    status="reference",
    evidence="tests/algorithms/test_aggregation.py: equals verl 0.9.1 agg_loss "
    "seq-mean-token-sum-norm (horizon 3), micro-batched too (run outside CI)",
)
def seq_mean_token_sum_norm(
    loss_BT: torch.Tensor, mask_BT: torch.Tensor, x: AggregationInputs, cfg: SeqMeanTokenSumNormConfig
) -> torch.Tensor:
    """Token sums over a constant normalizer (Dr. GRPO's unbiased form; verl ``seq-mean-token-sum-norm``).

    L = (1 / (N_seq * C)) * sum_i sum_t m_it * l_it, C = normalizer or max_response_tokens.
    """
    constant = (
        cfg.normalizer if cfg.normalizer is not None else require(x, "max_response_tokens", "seq_mean_token_sum_norm")
    )
    sums_B, _ = _row_sums(loss_BT, mask_BT)
    return sums_B.sum() / (max(x.num_sequences, 1.0) * constant)


@register_aggregation(
    "prompt_mean",
    config=ComponentConfig,
    status="paper",
    evidence="ScaleRL's prompt-level mean (The Art of Scaling RL Compute, 2025); hand-computed in "
    "tests/algorithms/test_aggregation.py",
)
def prompt_mean(
    loss_BT: torch.Tensor, mask_BT: torch.Tensor, x: AggregationInputs, cfg: ComponentConfig
) -> torch.Tensor:
    """Prompt-level mean (ScaleRL, The Art of Scaling RL Compute 2025): token mean per prompt, then mean over prompts.

    L = (1 / N_groups) * sum_g (1 / N_tokens(g)) sum_{i in g, t} m_it * l_it, where N_tokens(g) is
    the masked tokens of group g in the whole step (``group_num_tokens_B``).
    """
    group_tokens_B = require(x, "group_num_tokens_B", "prompt_mean").to(loss_BT.dtype)
    sums_B, _ = _row_sums(loss_BT, mask_BT)
    return (sums_B / group_tokens_B.clamp(min=1)).sum() / max(x.num_groups, 1.0)


class LengthPowerConfig(ComponentConfig):
    alpha: float = Field(0.5, description="f(L) = L^(alpha-1): 0 ~ GRPO, 1 ~ Dr. GRPO (the paper recommends none)")


@register_aggregation(
    "length_power",
    config=LengthPowerConfig,
    status="interpretation",
    evidence="arXiv 2607.23364 (a theory paper) read through summaries only; f_alpha(L) = "
    "L^(alpha-1) hand-computed in tests/algorithms/test_aggregation.py",
)
def length_power(
    loss_BT: torch.Tensor, mask_BT: torch.Tensor, x: AggregationInputs, cfg: LengthPowerConfig
) -> torch.Tensor:
    """Length-weighting family f_alpha(L) = L^(alpha-1) (On the Impossibility of Unbiased and Length-Invariant PO, 2026).

    L = (1 / N_seq) * sum_i L_i^(alpha-1) * sum_t m_it * l_it, L_i the row's masked tokens.
    alpha = 0 is ``seq_mean_token_mean`` (length-invariant, biased), alpha = 1 ``seq_mean_token_sum``
    (unbiased, length-dependent).
    """
    sums_B, tokens_B = _row_sums(loss_BT, mask_BT)
    weights_B = tokens_B.clamp(min=1) ** (cfg.alpha - 1.0)
    return (weights_B * sums_B).sum() / max(x.num_sequences, 1.0)

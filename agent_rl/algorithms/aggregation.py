"""Loss aggregation (registry ``aggregation``): the ONLY place a per-token loss becomes a scalar.

Every mode divides by a step-global count (``AggregationInputs``), so summing the results of
micro-batches equals the result on the whole step.
"""

from __future__ import annotations

import torch

from agent_rl.algorithms.registry import AggregationInputs, ComponentConfig, register_aggregation


@register_aggregation("token_mean", config=ComponentConfig)
def token_mean(loss_BT: torch.Tensor, mask_BT: torch.Tensor, x: AggregationInputs, cfg: ComponentConfig) -> torch.Tensor:
    """Token-level mean over the whole step (DAPO, Yu et al. 2025).

    L = sum_{i,t} m_it * l_it / N_tokens, with N_tokens the masked tokens of the whole step.
    """
    return (loss_BT * mask_BT.to(loss_BT.dtype)).sum() / max(x.num_tokens, 1.0)

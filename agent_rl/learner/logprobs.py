"""Per-token log-probabilities (and entropy) of a batch under a model, at the sampling temperature."""

from __future__ import annotations

import torch

from agent_rl.types import TrainBatch


def token_logprobs(
    model: torch.nn.Module,
    batch: TrainBatch,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_tokens: int = 4096,
    topk_ids_BTK: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None] | tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``logprobs_BT[:, t]`` = log p(input_ids[:, t] | input_ids[:, :t]); column 0 is 0.

    The log-softmax is taken over chunks of the sequence so the fp32 ``[B, T, V]`` tensor is
    never materialized at once. With ``topk_ids_BTK`` it also returns the logprobs at those ids
    (position t: the distribution that predicted token t), as a third value.
    """
    out = model(
        input_ids=batch.input_ids_BT,
        attention_mask=batch.attention_mask_BT,
        position_ids=batch.position_ids_BT,
        use_cache=False,
    )
    logits_BTV = out.logits[:, :-1]
    targets_BT = batch.input_ids_BT[:, 1:]
    B, T1 = targets_BT.shape
    step = max(1, chunk_tokens // max(B, 1))
    lp_chunks, ent_chunks, topk_chunks = [], [], []
    for s in range(0, T1, step):
        logp = torch.log_softmax(logits_BTV[:, s : s + step].float() / temperature, dim=-1)
        lp_chunks.append(logp.gather(-1, targets_BT[:, s : s + step, None]).squeeze(-1))
        if with_entropy:
            ent_chunks.append(-(logp.exp() * logp).sum(-1))
        if topk_ids_BTK is not None:
            topk_chunks.append(logp.gather(-1, topk_ids_BTK[:, 1:][:, s : s + step]))
    zeros = torch.zeros((B, 1), dtype=torch.float32, device=targets_BT.device)
    logprobs_BT = torch.cat([zeros, *lp_chunks], dim=1)
    entropy_BT = torch.cat([zeros, *ent_chunks], dim=1) if with_entropy else None
    if topk_ids_BTK is None:
        return logprobs_BT, entropy_BT
    K = topk_ids_BTK.shape[-1]
    topk_BTK = torch.cat([torch.zeros((B, 1, K), device=targets_BT.device), *topk_chunks], dim=1)
    return logprobs_BT, entropy_BT, topk_BTK

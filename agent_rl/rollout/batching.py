"""Trajectories -> ``TrainBatch``: right-padded tensors, exactly the sampled tokens."""

from __future__ import annotations

import torch

from agent_rl.types import TrainBatch, Trajectory, TrajectoryGroup


def trainable_groups(groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
    """Drop rows that ended in ENV_ERROR / INFRA_ERROR (reward None): never trained on as failures."""
    out = []
    for g in groups:
        kept = [t for t in g.trajectories_G if t.trainable]
        if kept:
            out.append(TrajectoryGroup(g.task_id, g.group_id, kept))
    return out


def make_batch(groups: list[TrajectoryGroup], pad_token_id: int, device: str | torch.device = "cpu") -> TrainBatch:
    rows: list[tuple[int, Trajectory]] = [
        (gi, t) for gi, g in enumerate(groups) for t in g.trajectories_G if t.trainable
    ]
    if not rows:
        raise ValueError("no trainable trajectories in the batch")
    B, T = len(rows), max(len(t.token_ids_T) for _, t in rows)
    input_ids = torch.full((B, T), pad_token_id, dtype=torch.long)
    attention = torch.zeros((B, T), dtype=torch.long)
    loss_mask = torch.zeros((B, T), dtype=torch.float32)
    rollout_lp = torch.zeros((B, T), dtype=torch.float32)
    turn_index = torch.full((B, T), -1, dtype=torch.long)
    for i, (_, t) in enumerate(rows):
        n = len(t.token_ids_T)
        input_ids[i, :n] = torch.tensor(t.token_ids_T)
        attention[i, :n] = 1
        loss_mask[i, :n] = torch.tensor(t.loss_mask_T, dtype=torch.float32)
        rollout_lp[i, :n] = torch.tensor(t.rollout_logprobs_T, dtype=torch.float32)
        for k, turn in enumerate(t.turns_N):
            turn_index[i, turn.start : turn.end] = k
    loss_mask[:, 0] = 0.0  # the first token has no prediction
    topk = _topk_tensors(rows, T) if any(t.topk_ids_TK for _, t in rows) else (None, None, None)
    position_ids = torch.arange(T).expand(B, T).clone()
    return TrainBatch(
        input_ids_BT=input_ids.to(device),
        attention_mask_BT=attention.to(device),
        loss_mask_BT=loss_mask.to(device),
        position_ids_BT=position_ids.to(device),
        rollout_logprobs_BT=rollout_lp.to(device),
        old_logprobs_BT=None,
        rewards_B=torch.tensor([t.reward for _, t in rows], dtype=torch.float32, device=device),
        group_index_B=torch.tensor([gi for gi, _ in rows], dtype=torch.long, device=device),
        turn_index_BT=turn_index.to(device),
        policy_version_B=torch.tensor([max((u.policy_version for u in t.turns_N), default=0) for _, t in rows], device=device),
        topk_ids_BTK=_to(topk[0], device),
        rollout_topk_logprobs_BTK=_to(topk[1], device),
        topk_mask_BTK=_to(topk[2], device),
    )


def _to(x: torch.Tensor | None, device: str | torch.device) -> torch.Tensor | None:
    return None if x is None else x.to(device)


def _topk_tensors(rows: list[tuple[int, Trajectory]], T: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    K = max(len(c) for _, t in rows for c in (t.topk_ids_TK or []))
    ids = torch.zeros((len(rows), T, K), dtype=torch.long)
    logprobs = torch.zeros((len(rows), T, K), dtype=torch.float32)
    mask = torch.zeros((len(rows), T, K), dtype=torch.float32)
    for i, (_, t) in enumerate(rows):
        for pos, (cand, lp) in enumerate(zip(t.topk_ids_TK or [], t.topk_logprobs_TK or [], strict=True)):
            if cand:
                ids[i, pos, : len(cand)] = torch.tensor(cand)
                logprobs[i, pos, : len(lp)] = torch.tensor(lp)
                mask[i, pos, : len(cand)] = 1.0
    return ids, logprobs, mask

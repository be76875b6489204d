"""Trajectories -> ``TrainBatch``: right-padded tensors, exactly the sampled tokens.

Two layouts (``rollout.layout``):

- ``concat``: one row per episode, its whole token sequence (prompt, turns, observations);
- ``per_turn``: one row per assistant turn: the context the model actually saw for that turn
  (``Turn.prompt_ids`` when the engine re-rendered it, else the stored prefix, which is what a
  concat rollout sent) followed by the turn's tokens, mask 1 on exactly its sampled tokens. Every
  row keeps its episode's reward and group, ``turn_index_BT`` = the turn's index on its tokens and
  ``episode_index_B`` = which episode it came from. ``turn_rows`` maps per-token tensors computed on
  the concat batch (advantages, credit) onto the per-turn rows, so episode-level estimators see
  each episode once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agent_rl.core.types import TrainBatch, Trajectory, TrajectoryGroup, Turn

LAYOUTS = ("concat", "per_turn")


def trainable_groups(groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
    """Drop rows that ended in ENV_ERROR / INFRA_ERROR (reward None): never trained on as failures."""
    out = []
    for g in groups:
        kept = [t for t in g.trajectories_G if t.trainable]
        if kept:
            out.append(TrajectoryGroup(g.task_id, g.group_id, kept))
    return out


@dataclass
class _Row:
    """One row of a batch: ``token_ids`` whose ``[offset, offset + n)`` is ``traj``'s span ``[src, src + n)``."""

    group: int
    episode: int
    traj: Trajectory
    token_ids: list[int]
    offset: int  # where the copied span starts in this row
    src: int  # where it starts in traj.token_ids_T
    n: int  # its length
    turns: list[tuple[int, Turn]]  # (turn index, turn) whose tokens lie in this row


def _rows(groups: list[TrajectoryGroup], layout: str) -> list[_Row]:
    if layout not in LAYOUTS:
        raise ValueError(f"rollout.layout: unknown layout '{layout}'; allowed: {', '.join(LAYOUTS)}")
    trajectories = [(gi, t) for gi, g in enumerate(groups) for t in g.trajectories_G if t.trainable]
    rows = []
    for e, (gi, t) in enumerate(trajectories):
        if layout == "concat":
            rows.append(_Row(gi, e, t, t.token_ids_T, 0, 0, len(t.token_ids_T), list(enumerate(t.turns_N))))
            continue
        for k, u in enumerate(t.turns_N):
            context = u.prompt_ids if u.prompt_ids is not None else t.token_ids_T[: u.start]
            ids = list(context) + t.token_ids_T[u.start : u.end]
            rows.append(_Row(gi, e, t, ids, len(context), u.start, u.end - u.start, [(k, u)]))
    return rows


def make_batch(
    groups: list[TrajectoryGroup], pad_token_id: int, device: str | torch.device = "cpu", layout: str = "concat"
) -> TrainBatch:
    rows = _rows(groups, layout)
    if not rows:
        raise ValueError("no trainable trajectories in the batch")
    B, T = len(rows), max(len(r.token_ids) for r in rows)
    input_ids = torch.full((B, T), pad_token_id, dtype=torch.long)
    attention = torch.zeros((B, T), dtype=torch.long)
    loss_mask = torch.zeros((B, T), dtype=torch.float32)
    rollout_lp = torch.zeros((B, T), dtype=torch.float32)
    turn_index = torch.full((B, T), -1, dtype=torch.long)
    for i, r in enumerate(rows):
        n, span = len(r.token_ids), slice(r.offset, r.offset + r.n)
        input_ids[i, :n] = torch.tensor(r.token_ids)
        attention[i, :n] = 1
        loss_mask[i, span] = torch.tensor(r.traj.loss_mask_T[r.src : r.src + r.n], dtype=torch.float32)
        rollout_lp[i, span] = torch.tensor(r.traj.rollout_logprobs_T[r.src : r.src + r.n], dtype=torch.float32)
        for k, turn in r.turns:
            turn_index[i, turn.start - r.src + r.offset : turn.end - r.src + r.offset] = k
    loss_mask[:, 0] = 0.0  # the first token has no prediction
    topk = _topk_tensors(rows, T) if any(r.traj.topk_ids_TK for r in rows) else (None, None, None)
    position_ids = torch.arange(T).expand(B, T).clone()
    return TrainBatch(
        input_ids_BT=input_ids.to(device),
        attention_mask_BT=attention.to(device),
        loss_mask_BT=loss_mask.to(device),
        position_ids_BT=position_ids.to(device),
        rollout_logprobs_BT=rollout_lp.to(device),
        old_logprobs_BT=None,
        rewards_B=torch.tensor([r.traj.reward for r in rows], dtype=torch.float32, device=device),
        group_index_B=torch.tensor([r.group for r in rows], dtype=torch.long, device=device),
        turn_index_BT=turn_index.to(device),
        policy_version_B=torch.tensor(
            [max((u.policy_version for _, u in r.turns), default=0) for r in rows], device=device
        ),
        topk_ids_BTK=_to(topk[0], device),
        rollout_topk_logprobs_BTK=_to(topk[1], device),
        topk_mask_BTK=_to(topk[2], device),
        episode_index_B=torch.tensor([r.episode for r in rows], dtype=torch.long, device=device),
    )


def turn_rows(groups: list[TrajectoryGroup], values_BT: torch.Tensor, layout: str = "per_turn") -> torch.Tensor:
    """``values_BT`` of the concat batch of ``groups`` (e.g. advantages), laid out as ``layout``'s rows.

    Each row's copied span takes the values of the same tokens in its episode's concat row; the
    context positions of a per-turn row get 0 (they carry mask 0).
    """
    rows = _rows(groups, layout)
    out_BT = torch.zeros(
        (len(rows), max(len(r.token_ids) for r in rows)), dtype=values_BT.dtype, device=values_BT.device
    )
    for i, r in enumerate(rows):
        out_BT[i, r.offset : r.offset + r.n] = values_BT[r.episode, r.src : r.src + r.n]
    return out_BT


def per_turn_batch(
    groups: list[TrajectoryGroup], concat: TrainBatch, advantages_BT: torch.Tensor, pad_token_id: int
) -> tuple[TrainBatch, torch.Tensor]:
    """The per_turn rows of ``groups`` and their advantages, from the concat batch the estimators saw.

    Advantages and the loss mask (a credit method may have taken tokens out, e.g. forked prefixes)
    are carried over token by token. Reference / teacher logprobs of the concat rows were computed
    under the concat contexts, not the ones each turn was sampled from, so they are refused.
    """
    if concat.ref_logprobs_BT is not None or concat.teacher_logprobs_BT is not None:
        raise ValueError(
            "rollout.layout=per_turn: reference-model KL and teacher logprobs are computed on concat rows; "
            "use rollout.layout=concat with algorithm.kl.coef > 0 or a self-distillation objective"
        )
    batch = make_batch(groups, pad_token_id, concat.input_ids_BT.device, layout="per_turn")
    batch.loss_mask_BT = turn_rows(groups, concat.loss_mask_BT)
    batch.loss_mask_BT[:, 0] = 0.0
    return batch, turn_rows(groups, advantages_BT)


def _to(x: torch.Tensor | None, device: str | torch.device) -> torch.Tensor | None:
    return None if x is None else x.to(device)


def _topk_tensors(rows: list[_Row], T: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    K = max(len(c) for r in rows for c in (r.traj.topk_ids_TK or []))
    ids = torch.zeros((len(rows), T, K), dtype=torch.long)
    logprobs = torch.zeros((len(rows), T, K), dtype=torch.float32)
    mask = torch.zeros((len(rows), T, K), dtype=torch.float32)
    for i, r in enumerate(rows):
        cands = (r.traj.topk_ids_TK or [])[r.src : r.src + r.n]
        lps = (r.traj.topk_logprobs_TK or [])[r.src : r.src + r.n]
        for j, (cand, lp) in enumerate(zip(cands, lps, strict=True)):
            if cand:
                ids[i, r.offset + j, : len(cand)] = torch.tensor(cand)
                logprobs[i, r.offset + j, : len(lp)] = torch.tensor(lp)
                mask[i, r.offset + j, : len(cand)] = 1.0
    return ids, logprobs, mask

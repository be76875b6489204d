"""Helpers shared by the credit methods: batch rows, turn spans, branch trees, top-k entropy.

A credit method receives the ``TrajectoryGroup``s the trainer batched and the ``AdvantageInputs``
of that batch. Rows of the batch are the groups' trajectories in order (``rollout/batching.py``),
so row ``i`` of every ``_BT`` tensor is ``batch_rows(groups, x)[i]``. Token indices of ``Turn``
spans and of ``Trajectory.branch_point`` are columns of those tensors (right padding, no shift).

Branch trees: a trajectory with ``parent_id`` set was forked from the trajectory whose
``episode_id`` is ``parent_id`` at token ``branch_point``; tokens ``[0, branch_point)`` are an
exact copy of the parent's. Such copies are dropped from the loss by the branch methods (they
return ``loss_mask_BT``), so a shared prefix is trained on once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from agent_rl.algorithms.registry import AdvantageInputs
from agent_rl.core.types import Trajectory, TrajectoryGroup


def batch_rows(groups: list[TrajectoryGroup], x: AdvantageInputs) -> list[tuple[int, Trajectory]]:
    """(group number, trajectory) of each batch row, checked against the batch's row count."""
    rows = [(gi, t) for gi, g in enumerate(groups) for t in g.trajectories_G if t.trainable]
    if len(rows) != x.rewards_B.shape[0]:
        raise ValueError(
            f"credit: {len(rows)} trainable trajectories in the groups but {x.rewards_B.shape[0]} batch rows"
        )
    return rows


def zscore(values: list[float], mode: str, eps: float, population: bool = False) -> list[float]:
    """``mean_norm``: v - mean; ``mean_std_norm``: (v - mean) / (std + eps). One value: mean 0, std 1.

    std is unbiased (n - 1) unless ``population``.
    """
    n = len(values)
    if n == 0:
        return []
    if n == 1:
        mean, std = 0.0, 1.0
    else:
        mean = sum(values) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n if population else n - 1))
    if mode == "mean_norm":
        return [v - mean for v in values]
    return [(v - mean) / (std + eps) for v in values]


def turn_spans(t: Trajectory) -> list[tuple[int, int]]:
    """[start, end) token span of each assistant turn."""
    return [(u.start, u.end) for u in t.turns_N]


def scatter_turn_values(
    rows: list[tuple[int, Trajectory]], per_turn: list[list[float]], mask_BT: torch.Tensor
) -> torch.Tensor:
    """A [B, T] float64 tensor holding ``per_turn[i][k]`` on the tokens of turn k of row i (times the mask)."""
    out_BT = torch.zeros(mask_BT.shape, dtype=torch.float64, device=mask_BT.device)
    for i, (_, t) in enumerate(rows):
        for (start, end), v in zip(turn_spans(t), per_turn[i], strict=True):
            out_BT[i, start:end] = v
    return out_BT * mask_BT.double()


def discounted_turn_returns(rewards_N: list[float], gamma: float) -> list[float]:
    """R_k = sum_{j >= k} gamma^(j - k) r_j over the turns of one episode."""
    out, running = [0.0] * len(rewards_N), 0.0
    for k in reversed(range(len(rewards_N))):
        running = rewards_N[k] + gamma * running
        out[k] = running
    return out


# ----------------------------------------------------------------------------------------------
# Branch trees.


@dataclass
class BranchRequest:
    """Fork ``trajectory`` at token ``at_token`` into ``n`` new continuations (the engine's ``fork``)."""

    trajectory: Trajectory
    at_token: int
    n: int = 1


@dataclass
class BranchPlan:
    """What a branch method asks the trainer to sample next for one batch of groups."""

    branches: list[BranchRequest]
    fresh: dict[str, int]  # group_id -> independent complete trajectories to add ("fallback" slots)


def children_of(group: TrajectoryGroup) -> dict[str, list[Trajectory]]:
    """episode_id -> the trajectories forked from it (in group order)."""
    out: dict[str, list[Trajectory]] = {}
    for t in group.trajectories_G:
        if t.parent_id is not None:
            out.setdefault(t.parent_id, []).append(t)
    return out


def copied_prefix_mask(rows: list[tuple[int, Trajectory]], mask_BT: torch.Tensor) -> torch.Tensor:
    """``mask_BT`` with the copied prefix ``[0, branch_point)`` of every forked row set to 0.

    A row whose parent is not in the batch (dropped as an infra error) keeps its prefix: nobody else trains on it.
    """
    out_BT = mask_BT.clone()
    present = {t.episode_id for _, t in rows}
    for i, (_, t) in enumerate(rows):
        if t.parent_id is not None and t.parent_id in present:
            if t.branch_point is None:
                raise ValueError(f"trajectory {t.episode_id} has parent_id but no branch_point")
            out_BT[i, : t.branch_point] = 0
    return out_BT


def action_positions(t: Trajectory) -> list[int]:
    """Token indices of the policy's tokens (loss mask 1), in order."""
    return [i for i, m in enumerate(t.loss_mask_T) if m]


def topk_entropy(t: Trajectory, positions: list[int], vocab_size: int) -> float:
    """-(1 / log|V|) * sum over ``positions`` of sum_{v in top-k} p log p (top-k mass not renormalised).

    A ranking proxy for the entropy of those tokens (CBPO, ARPO); needs the sampler's top-k.
    """
    if t.topk_logprobs_TK is None:
        raise ValueError("branch planning needs the sampler's top-k logprobs: set rollout.topk (e.g. 10)")
    total = 0.0
    for pos in positions:
        for lp in t.topk_logprobs_TK[pos]:
            total -= math.exp(lp) * lp
    return total / math.log(vocab_size)

"""ARPO: entropy-adaptive branching after tool calls under a global budget; advantage attribution.

``plan_arpo`` (called by the trainer after the N initial rollouts of every group) decides, tool
round by tool round, which rollouts to fork at the start of the turn that follows a tool result;
the registered credit ``arpo`` attributes GRPO advantages over the resulting tree.
"""

from __future__ import annotations

import math
import random
from typing import Literal

import torch
from pydantic import Field

from agent_rl.algorithms.advantages.common import grpo_advantage_B
from agent_rl.algorithms.credit.common import (
    BranchPlan,
    BranchRequest,
    batch_rows,
    copied_prefix_mask,
    topk_entropy,
)
from agent_rl.algorithms.credit.diagnostics import branch_diagnostics
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    register_credit,
    require,
)
from agent_rl.core.seeding import derive_seed
from agent_rl.core.types import Trajectory, TrajectoryGroup


class ArpoConfig(ComponentConfig):
    total_rollouts: int = Field(16, ge=1, description="M, rollouts per prompt (initial + branches + fresh)")
    entropy_tokens: int = Field(
        20, ge=1, description="first generated tokens of a segment whose top-k entropy is measured"
    )
    base_prob: float = Field(0.5, ge=0.0, le=1.0, description="p_b: branch probability at zero entropy change")
    entropy_weight: float = Field(0.2, description="w_H: P = clip(p_b + w_H * dH, 0, 1)")
    beam_size: int = Field(2, ge=1, description="a rollout spawns at most beam_size - 1 branches per tool round")
    attribution: Literal["soft", "hard"] = Field(
        "soft",
        description="soft: GRPO on every full trajectory (the released code); hard: shared tokens get the mean, once",
    )
    eps: float = Field(1e-6, description="added to the group std before dividing")
    seed: int = Field(0, description="seed of the branching draws (derived per step, group, rollout, round)")


def segment_entropy(t: Trajectory, turn: int, cfg: ArpoConfig, vocab_size: int) -> float:
    """-(1/log|V|) sum over the first ``entropy_tokens`` tokens of the turn of sum_{top-k} p log p (summed, not averaged)."""
    u = t.turns_N[turn]
    positions = [p for p in range(u.start, u.end) if t.loss_mask_T[p]][: cfg.entropy_tokens]
    return topk_entropy(t, positions, vocab_size)


def branch_probability(delta_h: float, cfg: ArpoConfig) -> float:
    """clip(p_b + w_H * dH, 0, 1), dH = H(turn after the tool call) - H(first turn)."""
    return min(max(cfg.base_prob + cfg.entropy_weight * delta_h, 0.0), 1.0)


def plan_arpo(groups: list[TrajectoryGroup], cfg: ArpoConfig, vocab_size: int, step: int = 0) -> BranchPlan:
    """Tool round k = 1, 2, ...: each initial rollout with a turn k draws beam_size - 1 times u ~ U(0,1) and
    forks at that turn's first token when u <= P, while the prompt's slots last; the rest are fresh rollouts."""
    branches: list[BranchRequest] = []
    fresh: dict[str, int] = {}
    for gi, g in enumerate(groups):
        roots = [t for t in g.trajectories_G if t.parent_id is None]
        slots = cfg.total_rollouts - len(g.trajectories_G)
        h0 = [segment_entropy(t, 0, cfg, vocab_size) if t.turns_N else 0.0 for t in roots]
        rounds = max((len(t.turns_N) for t in roots), default=0)
        for k in range(1, rounds):
            for j, t in enumerate(roots):
                if k >= len(t.turns_N) or slots == 0:
                    continue
                p = branch_probability(segment_entropy(t, k, cfg, vocab_size) - h0[j], cfg)
                rng = random.Random(derive_seed("arpo", cfg.seed, step, gi, j, k))
                n = min(sum(rng.random() <= p for _ in range(cfg.beam_size - 1)), slots)
                if n:
                    branches.append(BranchRequest(t, t.turns_N[k].start, n))
                    slots -= n
        if slots > 0:
            fresh[g.group_id] = slots
    return BranchPlan(branches, fresh)


def hard_attribution(rows: list[tuple[int, Trajectory]], adv_B: list[float], mask_BT: torch.Tensor) -> torch.Tensor:
    """Tokens shared by a set S of trajectories get mean_{i in S} A_i on the row that generated them.

    Trajectory d shares token t of its ancestor o when every branch point on the path from d up to o is > t.
    """
    by_id = {t.episode_id: i for i, (_, t) in enumerate(rows)}
    T = mask_BT.shape[1]
    sum_BT = torch.tensor(adv_B, dtype=torch.float64, device=mask_BT.device)[:, None].expand(-1, T).clone()
    count_BT = torch.ones_like(sum_BT)
    for d, (_, t) in enumerate(rows):
        shared_until, cur = math.inf, t
        while cur.parent_id is not None and cur.parent_id in by_id:
            shared_until = min(shared_until, int(cur.branch_point))
            o = by_id[cur.parent_id]
            sum_BT[o, : int(shared_until)] += adv_B[d]
            count_BT[o, : int(shared_until)] += 1
            cur = rows[o][1]
    return sum_BT / count_BT


@register_credit(
    "arpo",
    config=ArpoConfig,
    needs={"topk"},
    branch_planner=plan_arpo,
    status="paper",
    evidence="rollout and attribution from the authors' code (dongguanting/ARPO) with the paper's "
    "summaries (arXiv 2507.19849); tests/algorithms/test_credit_branch.py",
)
def arpo(x: AdvantageInputs, cfg: ArpoConfig) -> AdvantageOutput:
    """ARPO, Agentic Reinforced Policy Optimization (Dong et al. 2025, arXiv 2507.19849; dongguanting/ARPO code).

    Rollout (``plan_arpo``): H = -(1/log|V|) sum over the first 20 tokens of a segment of sum_{top-10} p log p;
    after each tool call dH = H_t - H_initial; fork Z = beam_size - 1 times with probability clip(p_b + w_H dH, 0, 1)
    from the prefix ending at the tool result, within M - N slots per prompt (left-over slots: fresh rollouts).
    Credit: A_i = (R_i - mean) / (std + eps) over the M trajectories of the prompt (unbiased std, as grpo).
    soft: A_i on every token of every trajectory, shared prefixes included (their gradient sums to |S| x the mean);
    hard: a token shared by a set S gets mean_{i in S} A_i, trained once (copied prefixes leave the loss).
    """
    groups = require(x, "groups", "arpo")
    rows = batch_rows(groups, x)
    adv_B = grpo_advantage_B(x.rewards_B, x.group_index_B, cfg.eps, norm_by_std=True)
    if cfg.attribution == "soft":
        return AdvantageOutput(
            advantages_BT=(adv_B[:, None] * x.loss_mask_BT.double()).float(), metrics=branch_diagnostics(groups)
        )
    mask_BT = copied_prefix_mask(rows, x.loss_mask_BT)
    adv_BT = hard_attribution(rows, adv_B.tolist(), mask_BT)
    return AdvantageOutput(
        advantages_BT=(adv_BT * mask_BT.double()).float(), loss_mask_BT=mask_BT, metrics=branch_diagnostics(groups)
    )

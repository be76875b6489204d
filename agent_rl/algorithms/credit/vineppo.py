"""VinePPO: Monte Carlo state values from branch continuations instead of a critic.

``plan_vineppo`` (called by the trainer after the main rollouts) forks every main trajectory at
the first token of each of its turns (its "steps"), ``mc_rollouts`` times; the registered credit
``vineppo`` turns the continuations' rewards into values and per-step advantages.
"""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.credit.common import (
    BranchPlan,
    BranchRequest,
    batch_rows,
    children_of,
)
from agent_rl.algorithms.credit.diagnostics import branch_diagnostics
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    register_credit,
    require,
)
from agent_rl.core.types import Trajectory, TrajectoryGroup


class VinePpoConfig(ComponentConfig):
    mc_rollouts: int = Field(
        4, ge=1, description="K, continuations sampled from each chosen position (VinePPO math: 9)"
    )
    include_first_turn: bool = Field(
        True,
        description="also estimate V at the first turn's start (else: leave-one-out mean of the other main rollouts)",
    )
    max_points: int = Field(8, ge=1, description="at most this many positions per trajectory (the first turns)")
    train_on_branches: bool = Field(False, description="also train on the continuations' own tokens (VinePPO does not)")


def plan_vineppo(groups: list[TrajectoryGroup], cfg: VinePpoConfig, vocab_size: int = 0, step: int = 0) -> BranchPlan:
    """K continuations from the start of each turn of every main (unforked) trajectory."""
    branches = []
    for g in groups:
        for t in g.trajectories_G:
            if t.parent_id is not None:
                continue
            first = 0 if cfg.include_first_turn else 1
            for u in t.turns_N[first : first + cfg.max_points]:
                branches.append(BranchRequest(t, u.start, cfg.mc_rollouts))
    return BranchPlan(branches, {})


def step_values(main: Trajectory, kids: list[Trajectory]) -> list[tuple[int, float]]:
    """(token, V_hat) at every branch point of ``main``: the mean reward of the continuations forked there."""
    by_point: dict[int, list[float]] = {}
    for c in kids:
        by_point.setdefault(int(c.branch_point), []).append(float(c.reward))
    return [(b, sum(r) / len(r)) for b, r in sorted(by_point.items())]


@register_credit(
    "vineppo",
    config=VinePpoConfig,
    branch_planner=plan_vineppo,
    status="paper",
    evidence="VinePPO (arXiv 2410.01679) Monte Carlo values at turn starts; hand-computed in "
    "tests/algorithms/test_credit_branch.py",
)
def vineppo(x: AdvantageInputs, cfg: VinePpoConfig) -> AdvantageOutput:
    """VinePPO (Kazemnejad et al. 2024, arXiv 2410.01679): unbiased Monte Carlo values at chosen positions.

    V_hat(s_b) = (1/K) sum_k R(continuation k forked at token b); V(end) = R of the main trajectory.
    Tokens in [b_j, b_{j+1}) of a main trajectory get A = V_hat(s_{b_{j+1}}) - V_hat(s_{b_j}) (gamma = 1, terminal
    reward), so the advantages of a trajectory telescope to R - V_hat(s_{b_1}). Tokens before the first position
    get V_hat(s_{b_1}) - V_0, V_0 = the leave-one-out mean reward of the group's other main trajectories (0 advantage
    when there is none). Positions: the start of each turn. Continuations are value samples and leave the loss,
    unless train_on_branches (then their own tokens get R_c - the mean of the other continuations from that point).
    """
    groups = require(x, "groups", "vineppo")
    rows = batch_rows(groups, x)
    mask_BT = x.loss_mask_BT.clone()
    adv_BT = torch.zeros(mask_BT.shape, dtype=torch.float64, device=mask_BT.device)
    row_of = {id(t): i for i, (_, t) in enumerate(rows)}
    for g in groups:
        members = [t for t in g.trajectories_G if t.trainable]
        kids = children_of(TrajectoryGroup(g.task_id, g.group_id, members))
        mains = [t for t in members if t.parent_id is None]
        for t in mains:
            i = row_of[id(t)]
            points = step_values(t, kids.get(t.episode_id, [])) + [(len(t.token_ids_T), float(t.reward))]
            others = [float(o.reward) for o in mains if o is not t]
            v0 = sum(others) / len(others) if others else points[0][1]
            prev_b, prev_v = 0, v0
            for b, v in points:
                adv_BT[i, prev_b:b] = v - prev_v
                prev_b, prev_v = b, v
        for t in members:
            if t.parent_id is None:
                continue
            i = row_of[id(t)]
            if not cfg.train_on_branches:
                mask_BT[i] = 0
                continue
            siblings = [
                float(c.reward) for c in kids.get(t.parent_id, []) if c is not t and c.branch_point == t.branch_point
            ]
            baseline = sum(siblings) / len(siblings) if siblings else float(t.reward)
            mask_BT[i, : int(t.branch_point)] = 0
            adv_BT[i] = float(t.reward) - baseline
    return AdvantageOutput(
        advantages_BT=(adv_BT * mask_BT.double()).float(), loss_mask_BT=mask_BT, metrics=branch_diagnostics(groups)
    )

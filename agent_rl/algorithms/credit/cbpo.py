"""CBPO: entropy-screened branches from exact prefixes, contrastive branch values, segmented credit.

Stage 1 (``plan_cbpo``, called by the trainer after the N0 parents of every group are sampled)
chooses where to fork; Stage 2 (the registered credit ``cbpo``) turns the branch tree into
per-token advantages. Branching depth is 1: only parents are scanned.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field, model_validator

from agent_rl.algorithms.credit.common import (
    BranchPlan,
    BranchRequest,
    action_positions,
    batch_rows,
    children_of,
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
from agent_rl.core.types import Trajectory, TrajectoryGroup


class CbpoConfig(ComponentConfig):
    total_rollouts: int = Field(16, ge=1, description="M, rollout slots per problem (parents + branches + fallbacks)")
    window: int = Field(20, ge=1, description="w, model tokens in an entropy window")
    d_min: int = Field(64, ge=1, description="candidate branch points every d_min action tokens")
    max_candidates: int = Field(3, ge=1, description="J_max, candidates kept per parent")
    alpha: float = Field(0.2, description="P_raw = clip(alpha + gamma * dH, 0, 1)")
    gamma: float = Field(2.0, description="weight of the entropy rise dH = H_b - H_root")
    threshold: float = Field(0.25, description="kappa: a branch is taken only while max P_bal > kappa")
    rho_path: float = Field(0.2, ge=0.0, description="path-level budget decay exponent")
    rho_node: float = Field(0.2, ge=0.0, description="node-level budget decay exponent")
    max_per_node: int = Field(3, ge=1, description="B_node, branches per node")
    max_per_path: int = Field(4, ge=1, description="B_path, branches per parent")
    eta: float = Field(0.2, ge=0.0, description="strength of the contrastive modulation (0 <= eta < phi)")
    phi: float = Field(2.0, gt=0.0, description="bound of the modulation: |C| <= |A| / phi")
    eps: float = Field(1e-6, description="added to the reward / CBV std before dividing")
    cbv_std_floor: float = Field(1e-6, description="sigma_CBV below this sets every Z to 0")

    @model_validator(mode="after")
    def _eta_below_phi(self) -> CbpoConfig:
        if not self.eta < self.phi:
            raise ValueError(f"eta must be < phi so that no advantage changes sign; got eta={self.eta}, phi={self.phi}")
        return self


# ----------------------------------------------------------------------------------------------
# Stage 1: where to branch.


def window_entropy(t: Trajectory, start: int, cfg: CbpoConfig, vocab_size: int) -> float:
    """H_{i,b}: top-k entropy of the ``window`` action tokens from action token ``start``, per token."""
    positions = action_positions(t)[start : start + cfg.window]
    return topk_entropy(t, positions, vocab_size) / max(len(positions), 1)


def balanced_priority(p_raw: float, path_taken: int, node_taken: int, cfg: CbpoConfig) -> float:
    """P_bal = P_raw / ((1 + L_i)^rho_path (1 + l_ib)^rho_node)."""
    return p_raw / ((1 + path_taken) ** cfg.rho_path * (1 + node_taken) ** cfg.rho_node)


def candidates(t: Trajectory, cfg: CbpoConfig, vocab_size: int) -> list[tuple[int, float]]:
    """(action-token index b, P_raw) of the top ``max_candidates`` boundaries b = q d_min of one parent."""
    n = len(action_positions(t))
    root = window_entropy(t, 0, cfg, vocab_size)
    out = [
        (b, min(max(cfg.alpha + cfg.gamma * (window_entropy(t, b, cfg, vocab_size) - root), 0.0), 1.0))
        for b in range(cfg.d_min, n, cfg.d_min)
    ]
    return sorted(out, key=lambda c: -c[1])[: cfg.max_candidates]


def plan_cbpo(groups: list[TrajectoryGroup], cfg: CbpoConfig, vocab_size: int, step: int = 0) -> BranchPlan:
    """Fill each group's ``total_rollouts`` slots: branches by balanced priority while it beats kappa, then fresh ones."""
    branches: list[BranchRequest] = []
    fresh: dict[str, int] = {}
    for g in groups:
        parents = [t for t in g.trajectories_G if t.parent_id is None]
        slots = cfg.total_rollouts - len(g.trajectories_G)
        cands = [(i, b, p) for i, t in enumerate(parents) for b, p in candidates(t, cfg, vocab_size)]
        path, node = [0] * len(parents), {(i, b): 0 for i, b, _ in cands}
        while slots > 0:
            eligible = [(i, b, p) for i, b, p in cands if node[i, b] < cfg.max_per_node and path[i] < cfg.max_per_path]
            if not eligible:
                break
            i, b, p = max(eligible, key=lambda c: balanced_priority(c[2], path[c[0]], node[c[0], c[1]], cfg))
            if balanced_priority(p, path[i], node[i, b], cfg) <= cfg.threshold:
                break
            path[i] += 1
            node[i, b] += 1
            slots -= 1
        for (i, b), n in node.items():
            if n:
                branches.append(BranchRequest(parents[i], action_positions(parents[i])[b], n))
        if slots > 0:
            fresh[g.group_id] = slots
    return BranchPlan(branches, fresh)


# ----------------------------------------------------------------------------------------------
# Stage 2: credit.


def cbv_z(node_rewards: list[list[float]], floor: float, eps: float) -> list[float]:
    """Z_i = (CBV_i - mean CBV) / (std CBV + eps), CBV_i the population std of node i's rewards.

    Both stds are population stds; Z = 0 everywhere when std CBV < ``floor``.
    """
    cbv = [float(torch.tensor(r, dtype=torch.float64).std(correction=0)) for r in node_rewards]
    if not cbv:
        return []
    mean = sum(cbv) / len(cbv)
    std = math.sqrt(sum((c - mean) ** 2 for c in cbv) / len(cbv))
    if std < floor:
        return [0.0] * len(cbv)
    return [(c - mean) / (std + eps) for c in cbv]


def modulate(a: float, z: float, cfg: CbpoConfig) -> float:
    """A_final = A + eta sign(A) sg(clip(Z, -|A| / phi, |A| / phi)); the factor 1 + eta C / |A| > 0 keeps the sign."""
    c = min(max(z, -abs(a) / cfg.phi), abs(a) / cfg.phi)
    return a + cfg.eta * math.copysign(1.0, a) * c if a != 0 else 0.0


def _base_advantages(rewards: list[float], eps: float) -> list[float]:
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1)) if n > 1 else 1.0
    return [(r - mean) / (std + eps) for r in rewards]


def parent_segments(nodes: list[int], shared: list[float], final_parent: list[float]) -> list[tuple[int, float]]:
    """(first token, advantage) of each segment of a parent with nodes b_1 < ... < b_J, in order.

    [0, b_1): A_shared_1;  [b_j, b_{j+1}): (A_final_j + A_shared_{j+1}) / 2;  [b_J, end): A_final_J.
    """
    out = [(0, shared[0])]
    for j in range(len(nodes)):
        a = final_parent[j] if j + 1 == len(nodes) else 0.5 * (final_parent[j] + shared[j + 1])
        out.append((nodes[j], a))
    return out


@register_credit(
    "cbpo",
    config=CbpoConfig,
    needs={"topk"},
    branch_planner=plan_cbpo,
    status="paper",
    evidence="the paper's full text (arXiv 2608.24300); two garbled symbols inferred (w = 20, kappa = "
    "0.25); hand-computed in tests/algorithms/test_credit_branch.py",
)
def cbpo(x: AdvantageInputs, cfg: CbpoConfig) -> AdvantageOutput:
    """CBPO, Contrastive Branch Policy Optimization (Wang et al. 2026, arXiv 2608.24300).

    Base A_k = (R_k - mean R) / (std R + eps) over every trajectory of the problem (unbiased std, as grpo).
    Exact-prefix group of node (i,b) = parent i + its branches forked at b; CBV = population std of its rewards;
    Z = (CBV - mean) / (std + eps) across the batch's nodes (population std; 0 if std < 1e-6).
    A_shared = mean of the group's base A; A_final = A + eta sign(A) sg(clip(Z, -|A|/phi, |A|/phi)) (sign kept).
    Branch: copied prefix masked out of the loss, suffix gets A_final. Parent with nodes b_1 < .. < b_J:
    [0,b_1) A_shared_1; [b_j,b_{j+1}) (A_final_j + A_shared_{j+1})/2; [b_J,end) A_final_J. Others keep A.
    Stage 1 (``plan_cbpo``): P_raw = clip(alpha + gamma (H_b - H_root), 0, 1) on windows every d_min action tokens,
    P_bal = P_raw / ((1+L_i)^rho_path (1+l_ib)^rho_node), branch while max P_bal > kappa within B_node / B_path.
    """
    groups = require(x, "groups", "cbpo")
    rows = batch_rows(groups, x)
    row_of = {id(t): i for i, (_, t) in enumerate(rows)}
    per_row: list[list[tuple[int, float]]] = [[] for _ in rows]  # (first token, advantage) segments
    # first pass: base advantages and the nodes of every group
    nodes: list[tuple[Trajectory, int, list[Trajectory]]] = []  # (parent, branch point, branches)
    base: dict[int, float] = {}
    for g in groups:
        members = [t for t in g.trajectories_G if t.trainable]
        for t, a in zip(members, _base_advantages([float(t.reward) for t in members], cfg.eps), strict=True):
            base[id(t)] = a
        kids = children_of(TrajectoryGroup(g.task_id, g.group_id, members))
        for parent in members:
            by_point: dict[int, list[Trajectory]] = {}
            for c in kids.get(parent.episode_id, []):
                by_point.setdefault(int(c.branch_point), []).append(c)
            nodes += [(parent, b, by_point[b]) for b in sorted(by_point)]
    z = cbv_z(
        [[float(parent.reward)] + [float(c.reward) for c in kids] for parent, _, kids in nodes],
        cfg.cbv_std_floor,
        cfg.eps,
    )
    # second pass: branches get A_final on their suffix; parents are segmented at their nodes
    parent_nodes: dict[int, list[tuple[int, float, float]]] = {}  # parent row -> (b, A_shared, A_final_parent)
    for (parent, b, kids), z_i in zip(nodes, z, strict=True):
        shared = sum(base[id(t)] for t in [parent, *kids]) / (1 + len(kids))
        for c in kids:
            per_row[row_of[id(c)]] = [(b, modulate(base[id(c)], z_i, cfg))]
        parent_nodes.setdefault(row_of[id(parent)], []).append((b, shared, modulate(base[id(parent)], z_i, cfg)))
    for i, (_, t) in enumerate(rows):
        if i in parent_nodes:
            pts = parent_nodes[i]
            per_row[i] = parent_segments([b for b, _, _ in pts], [s for _, s, _ in pts], [f for _, _, f in pts])
        elif not per_row[i]:
            per_row[i] = [(0, base[id(t)])]
    mask_BT = copied_prefix_mask(rows, x.loss_mask_BT)
    adv_BT = torch.zeros(mask_BT.shape, dtype=torch.float64, device=mask_BT.device)
    for i, segments in enumerate(per_row):
        for start, a in segments:
            adv_BT[i, start:] = a  # later segments overwrite from their start on: no overlap
    return AdvantageOutput(
        advantages_BT=(adv_BT * mask_BT.double()).float(),
        loss_mask_BT=mask_BT,
        metrics={
            "credit/cbpo_branches": float(sum(len(k) for _, _, k in nodes)),
            **branch_diagnostics(groups),  # credit/branch_points: the nodes
        },
    )

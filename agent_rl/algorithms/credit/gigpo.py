"""GiGPO: episode-level groups plus anchor-state step groups built from identical ``state_key``s."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agent_rl.algorithms.credit.common import (
    batch_rows,
    discounted_turn_returns,
    scatter_turn_values,
    zscore,
)
from agent_rl.algorithms.credit.diagnostics import shared_states
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    register_credit,
    require,
)
from agent_rl.core.types import Trajectory

NormMode = Literal["mean_norm", "mean_std_norm"]


class GigpoConfig(ComponentConfig):
    omega: float = Field(1.0, description="weight of the step-level advantage (GiGPO: 1.0)")
    gamma: float = Field(0.95, description="discount of the step returns within an episode (GiGPO: 0.95)")
    mode: NormMode = Field(
        "mean_std_norm", description="mean_norm (F_norm = 1) or mean_std_norm (F_norm = unbiased std)"
    )
    eps: float = Field(1e-6, description="added to the std before dividing")
    invalid_action_penalty: float = Field(
        0.1, description="subtracted from the step reward of an invalid action (verl-agent: 0.1)"
    )


def step_groups(trajectories: list[Trajectory]) -> dict[str, list[tuple[int, int]]]:
    """state_key -> the (trajectory, turn) pairs of one prompt group that saw exactly that state.

    Turns without a key form no group (they are singletons and get no step-level advantage).
    """
    out: dict[str, list[tuple[int, int]]] = {}
    for j, t in enumerate(trajectories):
        for k, u in enumerate(t.turns_N):
            if u.state_key is not None:
                out.setdefault(u.state_key, []).append((j, k))
    return out


def gigpo_turn_advantages(trajectories: list[Trajectory], cfg: GigpoConfig) -> list[list[float]]:
    """A = A^E + omega * A^S for every turn of every trajectory of one prompt group."""
    # episode level: the episode reward on each step row, normalised over all step rows of the group
    flat = [float(t.reward or 0.0) for t in trajectories for _ in t.turns_N]
    a_e = zscore(flat, cfg.mode, cfg.eps)
    out, n = [], 0
    for t in trajectories:
        out.append(a_e[n : n + len(t.turns_N)])
        n += len(t.turns_N)
    # step level: discounted step returns, normalised within each anchor-state group
    returns = [
        discounted_turn_returns(
            [u.reward - cfg.invalid_action_penalty * (not u.action_valid) for u in t.turns_N], cfg.gamma
        )
        for t in trajectories
    ]
    for members in step_groups(trajectories).values():
        if len(members) < 2:
            continue
        a_s = zscore([returns[j][k] for j, k in members], cfg.mode, cfg.eps)
        for (j, k), a in zip(members, a_s, strict=True):
            out[j][k] += cfg.omega * a
    return out


@register_credit(
    "gigpo",
    config=GigpoConfig,
    status="paper",
    evidence="GiGPO's episode and anchor-state step advantages (arXiv 2505.10978); hand-computed in "
    "tests/algorithms/test_credit_turn.py",
)
def gigpo(x: AdvantageInputs, cfg: GigpoConfig) -> AdvantageOutput:
    """GiGPO, Group-in-Group Policy Optimization (Feng et al. 2025, arXiv 2505.10978).

    Episode level: A^E(tau_i) = (R(tau_i) - mean_j R(tau_j)) / F_norm over every step row of the prompt group.
    Anchor-state step groups: all turns (any trajectory, any time) of the group whose ``state_key`` is identical.
    Step return R_t = sum_{k >= t} gamma^(k - t) r_k (r_k the turn reward, minus the invalid-action penalty);
    A^S = (R_t - mean_{step group} R) / F_norm, 0 for a singleton group.
    A = A^E + omega * A^S on every token of the turn. F_norm: 1 (mean_norm) or unbiased std + eps (mean_std_norm).
    """
    groups = require(x, "groups", "gigpo")
    rows = batch_rows(groups, x)
    per_turn: list[list[float]] = []
    for g in groups:
        per_turn += gigpo_turn_advantages([t for t in g.trajectories_G if t.trainable], cfg)
    adv_BT = scatter_turn_values(rows, per_turn, x.loss_mask_BT)
    sizes = [len(m) for g in groups for m in step_groups(g.trajectories_G).values()]
    return AdvantageOutput(
        advantages_BT=adv_BT.float(),
        metrics={
            "credit/gigpo_step_groups": float(len(sizes)),
            "credit/gigpo_nontrivial_step_groups": float(sum(s > 1 for s in sizes)),
            **shared_states(groups),
        },
    )

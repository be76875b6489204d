"""Advantages from richer rewards than one scalar per row: per-step rewards (``grpo_process``)
and several reward components (``sa_mrpo``).

Step rewards are the env's per-turn rewards (``Turn.reward``; they sum to the episode's reward).
Reward components are the episode totals an env reports in ``info["reward_components"]`` (a dict
name -> value; ``envs/rewards.py``'s ``ShapedEnv`` writes them), read through the need
``reward_components`` registered here.
"""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.advantages.common import group_stats, sequence_rewards
from agent_rl.algorithms.needs import NEEDS, NeedContext, register_need
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    record_choice,
    register_advantage,
    require,
)


def _trajectories(x: AdvantageInputs, entry: str) -> list:
    groups = require(x, "groups", entry)
    trajs = [t for g in groups for t in g.trajectories_G]
    if len(trajs) != x.rewards_B.shape[0]:
        raise ValueError(
            f"'{entry}' needs one row per episode (rollout.layout=concat); got {x.rewards_B.shape[0]} rows"
        )
    return trajs


# ----------------------------------------------------------------------------------------------
# GRPO with process supervision (DeepSeekMath 4.1.3).


class GrpoProcessConfig(ComponentConfig):
    eps: float = Field(1e-6, description="added to the std of the group's step rewards")


def step_rewards(x: AdvantageInputs) -> list[list[float]]:
    """Each row's step rewards, minus the in-reward KL penalty of each step's tokens: the env's per-turn
    rewards when the step's groups are given, else one step, the row's reward."""
    mask_BT = x.loss_mask_BT.double().cpu()
    kl_BT = x.kl_penalty_BT.double().cpu() * mask_BT if x.kl_penalty_BT is not None else torch.zeros_like(mask_BT)
    if x.groups is None:
        return [[float(r) - float(kl_BT[b].sum())] for b, r in enumerate(x.rewards_B.double().tolist())]
    trajs = _trajectories(x, "grpo_process")
    turn_BT = require(x, "turn_index_BT", "grpo_process").cpu()
    return [
        [turn.reward - float(kl_BT[b][turn_BT[b] == n].sum()) for n, turn in enumerate(t.turns_N)]
        or [float(x.rewards_B[b])]
        for b, t in enumerate(trajs)
    ]


@register_advantage(
    "grpo_process",
    config=GrpoProcessConfig,
    status="paper",
    evidence="DeepSeekMath (Shao et al. 2024) process supervision: normalized step rewards summed "
    "to go; population std is our one choice; tests/algorithms/test_multi_reward.py",
)
def grpo_process(x: AdvantageInputs, cfg: GrpoProcessConfig) -> AdvantageOutput:
    """GRPO with process supervision (Shao et al. 2024, DeepSeekMath): step rewards -> normalized reward-to-go.

    r_i^n = reward of step (turn) n of row i; every step reward of the group, R = {r_j^m}, is normalized:
    r~_i^n = (r_i^n - mean(R)) / (std(R) + eps)   (population std over the group's steps, ours)
    A_it = sum_{n >= turn(t)} r~_i^n: the normalized reward-to-go of the step token t belongs to.
    Step rewards: the env's per-turn rewards (their sum is the row's reward), minus the in-reward KL of
    the step's tokens; without the step's groups, one step per row (its reward).
    """
    steps = step_rewards(x)
    _, inverse_B = torch.unique(x.group_index_B.cpu(), return_inverse=True)
    stats: dict[int, tuple[float, float]] = {}
    for g in inverse_B.unique().tolist():
        values = torch.tensor(
            [r for b in (inverse_B == g).nonzero().flatten().tolist() for r in steps[b]], dtype=torch.float64
        )
        stats[g] = (float(values.mean()), float(values.std(unbiased=False)))
    mask_BT = x.loss_mask_BT.double().cpu()
    adv_BT = torch.zeros(mask_BT.shape, dtype=torch.float64)
    for b, rewards_N in enumerate(steps):
        mean, std = stats[int(inverse_B[b])]
        to_go_N = ((torch.tensor(rewards_N, dtype=torch.float64) - mean) / (std + cfg.eps)).flip(0).cumsum(0).flip(0)
        if x.groups is None or x.turn_index_BT is None:
            adv_BT[b] = to_go_N[-1]
            continue
        turn_T = x.turn_index_BT[b].cpu()
        has_T = (turn_T >= 0) & (turn_T < len(rewards_N))
        adv_BT[b, has_T] = to_go_N[turn_T[has_T]]
    adv_BT = adv_BT * mask_BT
    return AdvantageOutput(advantages_BT=adv_BT.to(device=x.loss_mask_BT.device, dtype=torch.float32))


# ----------------------------------------------------------------------------------------------
# SA-MRPO: multi-reward, saturation-aware.


def _reward_components(ctx: NeedContext) -> torch.Tensor:
    """``[B, C]``: each row's episode totals of every component any row reports, names sorted (0 if absent)."""
    trajs = [t for g in ctx.groups for t in g.trajectories_G]
    rows = [t.info.get("reward_components") for t in trajs]
    if any(r is None for r in rows):
        raise ValueError("the objective needs info['reward_components'] from the env (e.g. envs.rewards.ShapedEnv)")
    names = sorted({k for r in rows for k in r})
    return torch.tensor([[float(r.get(k, 0.0)) for k in names] for r in rows], dtype=torch.float32)


if "reward_components" not in NEEDS:
    register_need(
        "reward_components",
        "each row's reward split by component, from the env's info['reward_components'] (names sorted)",
        compute=_reward_components,
        to_batch=False,
    )


class SaMrpoConfig(ComponentConfig):
    eps: float = Field(1e-6, description="added to each component's group std")
    component_max: float = Field(
        1.0, gt=0.0, description="a component's value when fully satisfied (rewards in [0, 1]: 1)"
    )
    floor: float = Field(0.1, ge=0.0, le=1.0, description="smallest weight of a saturated component (ours)")


@register_advantage(
    "sa_mrpo",
    config=SaMrpoConfig,
    config_needs=lambda cfg: {"reward_components"},
    status="interpretation",
    evidence="from SA-MRPO's abstract (seed 003): the linear saturation discount and its floor are "
    "ours; 1 recorded choice; tests/algorithms/test_multi_reward.py",
)
def sa_mrpo(x: AdvantageInputs, cfg: SaMrpoConfig) -> AdvantageOutput:
    """SA-MRPO, saturation-aware advantage reweighting for multi-reward PO (2026).

    For each reward component k: z_ik = (r_ik - mean_G(r_k)) / (std_G(r_k) + eps)   (standardized per group)
    saturation s_k = mean over the batch of clip(r_ik / component_max, 0, 1); w_k = max(floor, 1 - s_k)
    A_i = sum_k w_k z_ik, on every token of row i. A solved component (s_k -> 1) stops taking the
    advantage budget; the weights can reverse the sign of A_i against the plain sum (ours: linear discount).
    The need ``reward_components`` is declared through ``config_needs``; called without it, the row's
    reward is the one component.
    """
    comps_BC = x.extras.get("reward_components")
    if (
        comps_BC is None
    ):  # the run always provides them (the need refuses an env without them); direct calls: the reward
        comps_BC = sequence_rewards(x).unsqueeze(-1)
    comps_BC = comps_BC.double().to(x.loss_mask_BT.device)
    z_cols, weights = [], []
    for k in range(comps_BC.shape[1]):
        mean_B, std_B, _ = group_stats(comps_BC[:, k], x.group_index_B)
        z_cols.append((comps_BC[:, k] - mean_B) / (std_B + cfg.eps))
        saturation = float((comps_BC[:, k] / cfg.component_max).clamp(0.0, 1.0).mean())
        weights.append(max(cfg.floor, 1.0 - saturation))
    z_BC = torch.stack(z_cols, dim=1) if z_cols else comps_BC
    adv_B = (z_BC * torch.tensor(weights, dtype=torch.float64, device=z_BC.device)).sum(-1)
    metrics = {f"adv/sa_mrpo_weight_{k}": w for k, w in enumerate(weights)}
    return AdvantageOutput(advantages_BT=(adv_B[:, None] * x.loss_mask_BT.double()).to(torch.float32), metrics=metrics)


for _key, _question, _choice in (
    (
        "grpo_process",
        "step rewards and their normalization",
        "the env's per-turn rewards; mean and population std over all step rewards of the group; reward-to-go per turn",
    ),
    (
        "sa_mrpo",
        "saturation estimate and discount",
        "s_k = batch mean of clip(r_k / component_max, 0, 1); w_k = max(0.1, 1 - s_k); components = the env's info['reward_components'] totals",
    ),
):
    record_choice(_key, _question, _choice)

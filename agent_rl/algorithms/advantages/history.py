"""Advantage estimators with per-prompt history across steps (state keyed by ``task_ids_B``)."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from agent_rl.algorithms.advantages.common import (
    broadcast_to_tokens,
    grpo_advantage_B,
    sequence_rewards,
)
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    register_advantage,
    require,
)


class RewardHistory:
    """Per prompt: visits (steps it was sampled in), and count / sum / sum of squares of its rewards."""

    def __init__(self) -> None:
        self.stats: dict[str, list[float]] = {}  # task_id -> [visits, n, sum, sumsq]

    def add(self, task_id: str, rewards: list[float]) -> None:
        s = self.stats.setdefault(task_id, [0.0, 0.0, 0.0, 0.0])
        s[0] += 1
        s[1] += len(rewards)
        s[2] += sum(rewards)
        s[3] += sum(r * r for r in rewards)

    def mean_std(self, task_id: str) -> tuple[float, float]:
        """Mean and unbiased std of every reward seen for ``task_id`` (std 0 below two rewards)."""
        _, n, total, sq = self.stats[task_id]
        mean = total / n
        var = max(sq - n * mean * mean, 0.0) / (n - 1) if n > 1 else 0.0
        return mean, var**0.5

    def visits(self, task_id: str) -> int:
        return int(self.stats[task_id][0])

    def state_dict(self) -> dict[str, Any]:
        return {"stats": {k: list(v) for k, v in self.stats.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stats = {k: [float(a) for a in v] for k, v in state["stats"].items()}


class DcpoSmoothConfig(ComponentConfig):
    eps: float = Field(1e-6, description="added to both stds before dividing")


@register_advantage(
    "dcpo_smooth",
    config=DcpoSmoothConfig,
    needs={"task_ids"},
    state=RewardHistory,
    status="paper",
    evidence="DCPO's smooth advantage standardization (Yang et al. 2025) as the docstring states "
    "it; hand-computed in tests/algorithms/test_advantages_reshaping.py",
)
def dcpo_smooth(x: AdvantageInputs, cfg: DcpoSmoothConfig) -> AdvantageOutput:
    """DCPO Smooth Advantage Standardization (Yang et al. 2025, Dynamic Clipping Policy Optimization).

    A_new   = (r - mean_step) / (std_step + eps)        this step's group (GRPO)
    A_total = (r - mean_all) / (std_all + eps)          every reward of the prompt so far, this step included
    with i the number of steps the prompt has been sampled in (this one included):
    S_new = (i-1)/i * A_new + 1/i * A_total;  S_total = (i-1)/i * A_total + 1/i * A_new
    A = the one of S_new, S_total with the smaller |.|. An all-equal group still gets A_total / i.
    """
    task_ids = require(x, "task_ids_B", "dcpo_smooth")
    history = require(x, "state", "dcpo_smooth")
    rewards_B = sequence_rewards(x)
    by_task: dict[str, list[float]] = {}
    for task_id, r in zip(task_ids, rewards_B.tolist(), strict=True):
        by_task.setdefault(task_id, []).append(r)
    for task_id, rewards in by_task.items():
        history.add(task_id, rewards)
    a_new_B = grpo_advantage_B(rewards_B, x.group_index_B, cfg.eps, norm_by_std=True)
    stats = [history.mean_std(t) for t in task_ids]
    mean_all_B = torch.tensor([m for m, _ in stats], dtype=torch.float64, device=rewards_B.device)
    std_all_B = torch.tensor([s for _, s in stats], dtype=torch.float64, device=rewards_B.device)
    a_total_B = (rewards_B - mean_all_B) / (std_all_B + cfg.eps)
    i_B = torch.tensor([float(history.visits(t)) for t in task_ids], dtype=torch.float64, device=rewards_B.device)
    s_new_B = (i_B - 1) / i_B * a_new_B + a_total_B / i_B
    s_total_B = (i_B - 1) / i_B * a_total_B + a_new_B / i_B
    adv_B = torch.where(s_total_B.abs() < s_new_B.abs(), s_total_B, s_new_B)
    return AdvantageOutput(advantages_BT=broadcast_to_tokens(adv_B, x.loss_mask_BT))

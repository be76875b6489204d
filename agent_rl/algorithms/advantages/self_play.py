"""Absolute Zero's advantage (TRR++): rewards normalised per task type and role over the batch.

One model plays two roles on three code-reasoning task types (Zhao et al. 2025, "Absolute Zero:
Reinforced Self-play Reasoning with Zero Data", arXiv 2505.03335): it proposes tasks and solves
them. Each row says its role and type in ``info["options"]["origin"]`` (``{"method": "absolute_zero",
"role": "propose" | "solve", "type": "deduction" | "abduction" | "induction"}``, set by the filter
``absolute_zero`` that queued it, or by the env's reset options of a proposer episode); a row
without one is a solver of type ``task`` (an ordinary env task). The paper's env is
``agent_rl/CodeReason-v0`` (envs/code_reason), whose episodes the filter issues.
"""

from __future__ import annotations

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
    record_choice,
    register_advantage,
)
from agent_rl.core.types import Trajectory

ROLES = ("propose", "solve")
TASK_TYPES = ("deduction", "abduction", "induction")


def role_and_type(t: Trajectory) -> tuple[str, str]:
    """(role, task type) of a row from its ``origin``; (``solve``, ``task``) for a drawn env task."""
    origin = (t.info.get("options") or {}).get("origin") or {}
    if origin.get("method") != "absolute_zero":
        return "solve", "task"
    return origin.get("role", "solve"), origin.get("type", "task")


def propose_reward(solve_rewards: list[float], threshold: float = 0.5) -> float:
    """r_propose = 1 - r_solve_bar when 0 < r_solve_bar < 1, else 0 (a task every solver solves, or
    none does, teaches nothing); r_solve_bar = share of the solver rollouts with reward > ``threshold``."""
    if not solve_rewards:
        return 0.0
    rate = sum(r > threshold for r in solve_rewards) / len(solve_rewards)
    return 0.0 if rate in (0.0, 1.0) else 1.0 - rate


class AbsoluteZeroConfig(ComponentConfig):
    eps: float = Field(1e-6, description="added to each (task type, role) std before dividing (as grpo)")
    norm_by_std: bool = Field(True, description="divide by the (task type, role) std (the paper's TRR++ does)")


@register_advantage("absolute_zero", config=AbsoluteZeroConfig,
                    status="interpretation",
                    evidence="TRR++ read from summaries of arXiv 2505.03335 and the paper's HTML opening, not its "
                             "appendix (docs/objectives-backlog.md); 11 recorded choices; "
                             "tests/algorithms/test_absolute_zero.py")
def absolute_zero(x: AdvantageInputs, cfg: AbsoluteZeroConfig) -> AdvantageOutput:
    """Task-Relative REINFORCE++ (TRR++) of Absolute Zero (Zhao et al. 2025, arXiv 2505.03335).

    A_i = (r_i - mu_(type_i, role_i)) / (sigma_(type_i, role_i) + eps), where mu and sigma are the
    mean and the (Bessel-corrected, as ``grpo``) std of the rewards of every row of the batch with
    the same task type (deduction, abduction, induction) and role (propose, solve): six baselines
    instead of one per prompt, the same for every token of the row. The rewards are the ones the
    run gives: a solver's verifier reward, and a proposer's r_propose = 1 - r_solve_bar (0 when
    r_solve_bar is 0 or 1), set by the filter ``absolute_zero`` once its solver rollouts returned.
    Roles and types are read from ``x.groups`` (the trainer always gives them); without them every
    row is a plain solver row (one batch-level baseline).
    """
    keys: dict[tuple[str, str], int] = {}
    if x.groups is None:  # outside a run (no rows to read roles from): every row a plain solver row
        keys[("solve", "task")] = 0
        index = [0] * x.rewards_B.shape[0]
    else:
        index = [keys.setdefault(role_and_type(t), len(keys)) for g in x.groups for t in g.trajectories_G]
    if len(index) != x.rewards_B.shape[0]:
        raise ValueError(f"'absolute_zero': {len(index)} rows in x.groups, {x.rewards_B.shape[0]} rewards")
    index_B = torch.tensor(index, dtype=torch.long, device=x.rewards_B.device)
    adv_B = grpo_advantage_B(sequence_rewards(x), index_B, cfg.eps, cfg.norm_by_std)
    metrics = {f"az/rows_{role}_{kind}": float(sum(i == k for i in index)) for (role, kind), k in keys.items()}
    return AdvantageOutput(advantages_BT=broadcast_to_tokens(adv_B, x.loss_mask_BT), metrics=metrics)


record_choice("absolute_zero", "std in TRR++", "Bessel-corrected std plus eps 1e-6, as our grpo (a (type, role) bucket of one row keeps A = r)")
record_choice("absolute_zero", "rows without a role", "an ordinary env task is a solver row of its own type 'task', normalised on its own")

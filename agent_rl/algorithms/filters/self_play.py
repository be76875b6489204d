"""Absolute Zero's propose -> solve loop (``absolute_zero``): proposed tasks become solver groups in
the run's task queue, and each proposer row's reward becomes r_propose once its solvers returned.

The env opts in with two things it already has or adds:

- a proposer episode (reset options ``origin: {method: absolute_zero, role: propose, type: T}``)
  ends with ``info["proposed_task"]``: the task it validated (for code: the program ran in the
  sandbox, deterministically, and gave the recorded output), JSON, or no such key when invalid (the
  env's own format reward stands then);
- ``reset(options={"task": proposed_task})`` plays that task (the replay interface every
  ``ToolEnv`` has; Arithmetic takes ``{"expression": ...}``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from agent_rl.algorithms.advantages.self_play import propose_reward, role_and_type
from agent_rl.algorithms.filters.common import with_trajectories
from agent_rl.algorithms.registry import (
    ComponentConfig,
    FilterResult,
    record_choice,
    register_filter,
)
from agent_rl.types import Trajectory, TrajectoryGroup


class AbsoluteZeroFilterConfig(ComponentConfig):
    n_solve: int = Field(8, ge=1, description="solver rollouts per proposed task, to estimate its solve rate (paper: 8)")
    success_threshold: float = Field(0.5, description="a solver rollout succeeded when its reward > this")


class AbsoluteZeroState:
    """The run's services (``bind_run``), the proposer groups held until their solvers return (not
    checkpointed: they are released at the next filter call, the same step's refill round), counters."""

    def __init__(self) -> None:
        self.services: Any = None
        self.held: list[TrajectoryGroup] = []
        self.proposals = 0

    def bind_run(self, trainer: Any) -> None:
        self.services = trainer.services

    def state_dict(self) -> dict[str, Any]:
        return {"proposals": self.proposals}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.proposals = int(state["proposals"])


def solver_specs(t: Trajectory, group_id: str, kind: str, services: Any, cfg: AbsoluteZeroFilterConfig) -> list[Any]:
    """``n_solve`` episodes of the task proposer row ``t`` validated, marked as its solvers."""
    options = {k: v for k, v in (t.info.get("options") or {}).items() if k not in ("origin", "extra_messages", "task")}
    options["task"] = t.info["proposed_task"]
    options["origin"] = {"method": "absolute_zero", "role": "solve", "type": kind, "proposal": t.episode_id}
    spec = services.episode_spec(t, group_id)
    spec.options = options
    return [spec] * cfg.n_solve


def release(held: list[TrajectoryGroup], solved: dict[str, list[float]], cfg: AbsoluteZeroFilterConfig) -> list[TrajectoryGroup]:
    """The held proposer groups with each row's reward r_propose of its solvers' rewards (rows
    without a valid proposal keep the env's reward)."""
    from dataclasses import replace

    out = []
    for g in held:
        rows = [
            replace(t, reward=propose_reward(solved.get(t.episode_id, []), cfg.success_threshold)) if "proposed_task" in t.info and t.trainable else t
            for t in g.trajectories_G
        ]
        out.append(with_trajectories(g, rows))
    return out


@register_filter("absolute_zero", config=AbsoluteZeroFilterConfig, state=AbsoluteZeroState)
def absolute_zero(groups: list[TrajectoryGroup], state: AbsoluteZeroState, cfg: AbsoluteZeroFilterConfig) -> FilterResult:
    """Absolute Zero self-play (Zhao et al. 2025, arXiv 2505.03335): propose, validate, solve.

    Proposer rows with a validated task (``info["proposed_task"]``) each queue ``n_solve`` = 8
    solver episodes of it (one group per proposal; ``num_more`` asks the refill round for them) and
    their group is held back. At the next call (the refill round, with ``trainer.refill_rounds`` >= 1)
    the solver groups arrive; every held proposer row gets r_propose = 1 - r_solve_bar, or 0 when
    r_solve_bar is 0 or 1 (``propose_reward``), and is released with the solvers for the update.
    The advantage ``absolute_zero`` (TRR++) then normalises per task type and role.
    """
    if state is None:
        raise ValueError("'absolute_zero' needs its AbsoluteZeroState state, which the caller did not provide")
    solved: dict[str, list[float]] = {}
    for g in groups:
        for t in g.trajectories_G:
            proposal = ((t.info.get("options") or {}).get("origin") or {}).get("proposal")
            if proposal is not None and t.trainable:
                solved.setdefault(proposal, []).append(t.reward)
    out = release(state.held, solved, cfg)
    state.held, queued, kept = [], [], []
    for g in groups:
        proposers = [t for t in g.trajectories_G if role_and_type(t)[0] == "propose" and "proposed_task" in t.info and t.trainable]
        if not proposers:
            kept.append(g)
            continue
        if state.services is None:
            raise ValueError("'absolute_zero' needs the run bound to its state (the trainer calls bind_run)")
        state.held.append(g)
        queued += [solver_specs(t, g.group_id, role_and_type(t)[1], state.services, cfg) for t in proposers]
    n = state.services.enqueue(queued) if queued else 0
    state.proposals += n
    rates = [propose_reward(v, cfg.success_threshold) for v in solved.values()]
    metrics = {"az/proposals": float(n), "az/held_groups": float(len(state.held)), "az/released_groups": float(len(out))}
    if rates:
        metrics["az/propose_reward_mean"] = sum(rates) / len(rates)
    return FilterResult(out + kept, num_more=n, metrics=metrics)


record_choice("absolute_zero", "when proposals are solved", "in the same step's refill round (trainer.refill_rounds >= 1); the proposer rows are held until then and trained with their solvers")
record_choice("absolute_zero", "solver groups", "one group of n_solve = 8 solvers per proposal, so r_solve_bar is that group's success rate")

"""Per-prompt success statistics across steps: the pass-rate filter and Kimi's samplers.

The state (``TaskStats``) is updated by the filter each step; ``curriculum`` and ``prioritized``
keep every group and expose sampling weights for the trainer's task sampler
(``curriculum_weights`` / ``prioritized_weights``: draw task i with probability proportional to w_i).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from agent_rl.algorithms.filters.common import pass_rate, valid_rewards
from agent_rl.algorithms.registry import ComponentConfig, FilterResult, register_filter
from agent_rl.core.types import TrajectoryGroup


class TaskStats:
    """Per task id: samples seen and how many were correct; ``retired`` ids; filter calls."""

    def __init__(self) -> None:
        self.samples: dict[str, int] = {}
        self.correct: dict[str, int] = {}
        self.retired: set[str] = set()
        self.calls = 0

    def add(self, group: TrajectoryGroup, correct_threshold: float) -> None:
        rewards = valid_rewards(group)
        self.samples[group.task_id] = self.samples.get(group.task_id, 0) + len(rewards)
        self.correct[group.task_id] = self.correct.get(group.task_id, 0) + sum(r > correct_threshold for r in rewards)

    def success_rate(self, task_id: str, default: float) -> float:
        n = self.samples.get(task_id, 0)
        return self.correct[task_id] / n if n else default

    def state_dict(self) -> dict[str, Any]:
        return {
            "samples": dict(self.samples),
            "correct": dict(self.correct),
            "retired": sorted(self.retired),
            "calls": self.calls,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.samples = {k: int(v) for k, v in state["samples"].items()}
        self.correct = {k: int(v) for k, v in state["correct"].items()}
        self.retired = set(state["retired"])
        self.calls = int(state["calls"])


def _need_state(state: TaskStats | None, name: str) -> TaskStats:
    if state is None:
        raise ValueError(f"'{name}' needs its TaskStats state, which the caller did not provide")
    return state


class PassRateFilterConfig(ComponentConfig):
    max_pass_rate: float = Field(
        0.9, description="a prompt whose group pass rate reaches this is retired (ScaleRL: 0.9)"
    )
    correct_threshold: float = Field(0.5, description="a reward above this counts as a pass")


def pass_rate_weights(state: TaskStats, task_ids: list[str], cfg: PassRateFilterConfig) -> list[float]:
    """Sampling weight of each task: 0 once retired, else 1 (retired prompts are not drawn again)."""
    return [0.0 if t in state.retired else 1.0 for t in task_ids]


@register_filter(
    "pass_rate_filter",
    config=PassRateFilterConfig,
    state=TaskStats,
    sampler=pass_rate_weights,
    status="paper",
    evidence="ScaleRL no-positive-resampling (pass rate >= 0.9 retired); hand-computed in "
    "tests/algorithms/test_filters.py",
)
def pass_rate_filter(groups: list[TrajectoryGroup], state: TaskStats, cfg: PassRateFilterConfig) -> FilterResult:
    """ScaleRL no-positive-resampling (The Art of Scaling RL Compute, 2025): retire easy prompts.

    A prompt whose group pass rate p = #(r > correct_threshold) / G reaches max_pass_rate (0.9) is
    added to ``state.retired`` and dropped whenever it comes back in a later epoch (its group this
    step is still trained on). ``num_more`` asks for one new group per dropped one; the task
    sampler may skip ``state.retired`` up front.
    """
    state = _need_state(state, "pass_rate_filter")
    state.calls += 1
    kept: list[TrajectoryGroup] = []
    newly_retired = 0
    for g in groups:
        if g.task_id in state.retired:
            continue
        kept.append(g)
        state.add(g, cfg.correct_threshold)
        p = pass_rate(g, cfg.correct_threshold)
        if p is not None and p >= cfg.max_pass_rate:
            state.retired.add(g.task_id)
            newly_retired += 1
    dropped = len(groups) - len(kept)
    return FilterResult(
        groups=kept,
        num_more=dropped,
        metrics={
            "filter/pass_rate_dropped": float(dropped),
            "filter/pass_rate_newly_retired": float(newly_retired),
            "filter/pass_rate_retired_total": float(len(state.retired)),
        },
        levels=frozenset({"filter/pass_rate_retired_total"}),
    )


class CurriculumConfig(ComponentConfig):
    start_min_success: float = Field(
        0.5, description="at the start only tasks with success rate >= this are drawn (our choice)"
    )
    anneal_steps: int = Field(
        100, ge=1, description="steps over which the bar falls linearly to 0 (all tasks) (our choice)"
    )
    init_success_rate: float = Field(0.5, description="success rate assumed for a task not seen yet")
    correct_threshold: float = Field(0.5, description="a reward above this counts as correct")


def curriculum_min_success(state: TaskStats, cfg: CurriculumConfig) -> float:
    """The bar at the current step: start_min_success * max(0, 1 - calls / anneal_steps)."""
    return cfg.start_min_success * max(0.0, 1.0 - state.calls / cfg.anneal_steps)


def curriculum_weights(state: TaskStats, task_ids: list[str], cfg: CurriculumConfig) -> list[float]:
    """Sampling weight of each task: 1 when its success rate meets the current bar, else 0."""
    bar = curriculum_min_success(state, cfg)
    return [1.0 if state.success_rate(t, cfg.init_success_rate) >= bar else 0.0 for t in task_ids]


@register_filter(
    "curriculum",
    config=CurriculumConfig,
    state=TaskStats,
    sampler=curriculum_weights,
    status="interpretation",
    evidence="Kimi k1.5 names the curriculum, not its schedule: the success bar and its linear anneal "
    "are ours (config 'our choice'); tests/algorithms/test_filters.py",
)
def curriculum(groups: list[TrajectoryGroup], state: TaskStats, cfg: CurriculumConfig) -> FilterResult:
    """Kimi k1.5 curriculum sampling (Kimi Team 2025): easy tasks first, then progressively harder.

    Tracks each task's success rate s_i (correct / samples, all steps). The task sampler draws
    with ``curriculum_weights``: w_i = 1[s_i >= bar(step)], bar = start_min_success * (1 - step /
    anneal_steps) clipped at 0, so training starts on tasks the model often solves and reaches
    the full set after anneal_steps. Keeps every group (no compute is thrown away).
    """
    state = _need_state(state, "curriculum")
    state.calls += 1
    for g in groups:
        state.add(g, cfg.correct_threshold)
    metrics = {"filter/curriculum_min_success": curriculum_min_success(state, cfg)}
    return FilterResult(groups=list(groups), metrics=metrics, levels=frozenset(metrics))


class PrioritizedConfig(ComponentConfig):
    init_success_rate: float = Field(0.0, description="success rate assumed for a task not seen yet (weight 1)")
    min_weight: float = Field(0.0, description="floor of a task's weight (0: solved tasks are not drawn)")
    correct_threshold: float = Field(0.5, description="a reward above this counts as correct")


def prioritized_weights(state: TaskStats, task_ids: list[str], cfg: PrioritizedConfig) -> list[float]:
    """Sampling weight of each task: max(1 - s_i, min_weight)."""
    return [max(1.0 - state.success_rate(t, cfg.init_success_rate), cfg.min_weight) for t in task_ids]


@register_filter(
    "prioritized",
    config=PrioritizedConfig,
    state=TaskStats,
    sampler=prioritized_weights,
    status="paper",
    evidence="Kimi k1.5 prioritized sampling, weight 1 - s_i; hand-computed in tests/algorithms/test_filters.py",
)
def prioritized(groups: list[TrajectoryGroup], state: TaskStats, cfg: PrioritizedConfig) -> FilterResult:
    """Kimi k1.5 prioritized sampling (Kimi Team 2025): draw task i with probability proportional to 1 - s_i.

    s_i = correct / samples of task i over all steps; the task sampler uses ``prioritized_weights``
    (w_i = max(1 - s_i, min_weight)), so failed tasks come back more often. Keeps every group.
    """
    state = _need_state(state, "prioritized")
    state.calls += 1
    for g in groups:
        state.add(g, cfg.correct_threshold)
    tracked = list(state.samples)
    weights = prioritized_weights(state, tracked, cfg)
    return FilterResult(
        groups=list(groups),
        metrics={"filter/prioritized_mean_weight": sum(weights) / len(weights) if weights else 0.0},
        levels=frozenset({"filter/prioritized_mean_weight"}),  # over every tracked sample, not this call's groups
    )

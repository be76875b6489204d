"""Posterior-tempered group sampling (``posterior_temperature``): each task's rollout temperature
follows a Beta posterior of its failure probability, so hard tasks are sampled more diversely.

The entry keeps the groups as they are; it updates the per-task posterior from each step's groups
(its filter call) and sets the temperature of the task's next episodes through the task sampler
(``ObjectiveEntry.episode_options`` -> ``EpisodeSpec.temperature``). Samples drawn at a temperature
other than ``rollout.temperature`` are off-policy for the learner, which scores them at
``rollout.temperature``: the entry switches on token-level truncated importance weights (pi_old / mu),
as POPO's replay does, unless the user configured ``rollout_is``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from agent_rl.algorithms.registry import ComponentConfig, FilterResult, record_choice, register_filter
from agent_rl.core.types import TrajectoryGroup


class TaskPosterior:
    """Successes and failures per task id (the Beta posterior's counts), checkpointed with the run."""

    def __init__(self) -> None:
        self.counts: dict[str, list[float]] = {}

    def update(self, task_id: str, successes: float, failures: float) -> None:
        s, f = self.counts.get(task_id, [0.0, 0.0])
        self.counts[task_id] = [s + successes, f + failures]

    def state_dict(self) -> dict[str, Any]:
        return {"counts": {k: list(v) for k, v in self.counts.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counts = {k: list(v) for k, v in state["counts"].items()}


class PosteriorTemperatureConfig(ComponentConfig):
    t_min: float = Field(0.8, gt=0.0, description="temperature of a task the policy always solves (ours)")
    t_max: float = Field(1.2, gt=0.0, description="temperature of a task it always fails (ours)")
    prior_successes: float = Field(1.0, gt=0.0, description="alpha of the Beta prior (1, 1: uniform)")
    prior_failures: float = Field(1.0, gt=0.0, description="beta of the Beta prior")
    success_threshold: float = Field(0.5, description="a rollout succeeded when reward > this")
    is_cap: float = Field(2.0, gt=0.0, description="cap of the truncated importance weight pi_old / mu it switches on")

    @model_validator(mode="after")
    def _ordered(self) -> PosteriorTemperatureConfig:
        if self.t_min > self.t_max:
            raise ValueError(f"posterior_temperature: t_min ({self.t_min}) must be <= t_max ({self.t_max})")
        return self


def failure_probability(state: TaskPosterior, task_id: str, cfg: PosteriorTemperatureConfig) -> float:
    """Posterior mean of the task's failure probability: (b0 + f) / (a0 + b0 + s + f)."""
    s, f = state.counts.get(task_id, [0.0, 0.0])
    return (cfg.prior_failures + f) / (cfg.prior_successes + cfg.prior_failures + s + f)


def task_temperature(state: TaskPosterior, task_id: str, cfg: PosteriorTemperatureConfig) -> dict[str, float]:
    """EpisodeSpec fields of the task's next episodes: temperature = t_min + (t_max - t_min) * P(fail)."""
    return {"temperature": cfg.t_min + (cfg.t_max - cfg.t_min) * failure_probability(state, task_id, cfg)}


def truncated_is(cfg: PosteriorTemperatureConfig) -> dict[str, object]:
    return {"rollout_is": {"level": "token", "mode": "truncate", "threshold": cfg.is_cap}}


@register_filter(
    "posterior_temperature",
    config=PosteriorTemperatureConfig,
    state=TaskPosterior,
    episode_options=task_temperature,
    loss_options=truncated_is,
    status="interpretation",
    evidence="from the seed's mechanism (002, Sharpening Tax): the linear map from the posterior to t_min..t_max is "
    "ours (recorded choice); tests/algorithms/test_posterior_temperature.py",
)
def posterior_temperature(
    groups: list[TrajectoryGroup], state: TaskPosterior, cfg: PosteriorTemperatureConfig
) -> FilterResult:
    """Posterior-tempered group sampling (Sharpening Tax, 2026): per-task rollout temperature from a difficulty posterior.

    Per task: Beta(a0 + successes, b0 + failures) over the rollouts seen so far; p_fail = posterior mean failure rate;
    T_task = t_min + (t_max - t_min) * p_fail for its next episodes (unseen tasks: the prior's mean).
    Groups pass unchanged; rows sampled at T_task != rollout.temperature get truncated IS weights min(pi_old / mu, cap).
    """
    if state is None:
        raise ValueError(
            "filter 'posterior_temperature' needs its state (TaskPosterior), which the caller did not provide"
        )
    temps = []
    for g in groups:
        rewards = [t.reward for t in g.trajectories_G if t.reward is not None]
        wins = sum(1.0 for r in rewards if r > cfg.success_threshold)
        state.update(g.task_id, wins, len(rewards) - wins)
        temps.append(task_temperature(state, g.task_id, cfg)["temperature"])
    metrics = {"filter/posterior_temperature_mean": sum(temps) / len(temps)} if temps else {}
    return FilterResult(groups=groups, metrics=metrics, means=frozenset({"filter/posterior_temperature_mean"}))


record_choice(
    "posterior_temperature",
    "how difficulty maps to temperature",
    (
        "linear in the Beta(1, 1) posterior mean failure rate, from t_min 0.8 (always solved) to t_max 1.2 (always "
        "failed); off-policy rows corrected by token-level truncated IS (cap 2)"
    ),
)

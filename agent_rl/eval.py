"""pass@k / mean@k on held-out tasks, with confidence intervals."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from agent_rl.rollout.engine import EpisodeSpec, RolloutEngine
from agent_rl.types import Trajectory


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of Chen et al. 2021: 1 - C(n-c, k) / C(n, k), for n samples with c correct."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def wilson_interval(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass
class EvalResult:
    episodes: int
    tasks: int
    k: int
    success: float  # mean@k: mean reward over all scored episodes
    success_ci: tuple[float, float]
    pass_at_k: float
    pass_at_k_ci: tuple[float, float]
    errors: int  # env / infra failures, excluded from the scores
    multi_turn: float  # fraction of episodes with more than one assistant turn (e.g. used a tool)

    def row(self) -> str:
        lo, hi = self.success_ci
        return f"mean@{self.k} {self.success:.3f} [{lo:.3f}, {hi:.3f}]  pass@{self.k} {self.pass_at_k:.3f}  (n={self.episodes}, errors={self.errors})"


def score(trajectories: list[Trajectory], k: int) -> EvalResult:
    by_task: dict[str, list[float]] = defaultdict(list)
    errors = 0
    for t in trajectories:
        if t.reward is None:
            errors += 1
            continue
        by_task[t.group_id].append(1.0 if t.reward >= 1.0 - 1e-9 else float(t.reward))
    rewards = [r for rs in by_task.values() for r in rs]
    n = len(rewards)
    mean = sum(rewards) / n if n else 0.0
    passes = [pass_at_k(len(rs), sum(1 for r in rs if r >= 1.0 - 1e-9), min(k, len(rs))) for rs in by_task.values()]
    pk = sum(passes) / len(passes) if passes else 0.0
    multi_turn = sum(1 for t in trajectories if len(t.turns_N) > 1) / max(len(trajectories), 1)
    return EvalResult(
        episodes=n,
        tasks=len(by_task),
        k=k,
        success=mean,
        success_ci=wilson_interval(sum(rewards), n),
        pass_at_k=pk,
        pass_at_k_ci=wilson_interval(pk * len(passes), len(passes)),
        errors=errors,
        multi_turn=multi_turn,
    )


def eval_specs(episodes: int, k: int, split: str, seed: int = 10_000) -> list[EpisodeSpec]:
    """``episodes`` tasks of ``split``, each sampled ``k`` times; the same seed gives the same tasks."""
    return [
        EpisodeSpec(seed=seed + i, group_id=f"eval-{i}", options={"split": split})
        for i in range(episodes)
        for _ in range(k)
    ]


async def evaluate(engine: RolloutEngine, episodes: int, k: int = 1, split: str = "test", seed: int = 10_000) -> tuple[EvalResult, list[Trajectory]]:
    trajectories = await engine.run(eval_specs(episodes, k, split, seed), seed=seed)
    return score(trajectories, k), trajectories

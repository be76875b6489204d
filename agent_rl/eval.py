"""pass@k / mean@k on held-out tasks, with 95% confidence intervals, per-task results and errors.

Estimators, per task with ``n`` scored samples of which ``c`` are correct (reward 1):

* pass@k = 1 - C(n-c, k) / C(n, k), the unbiased estimator of Chen et al. 2021 (k <= n), averaged
  over tasks;
* mean@k = the task's mean reward over its samples, averaged over tasks (partial credit counts).

Intervals: percentile bootstrap over tasks (tasks are resampled with replacement, the samples of
one task stay together since they are correlated), ``resamples`` draws with a fixed seed, 2.5th and
97.5th percentiles (nearest rank). Episodes that ended in ENV_ERROR / INFRA_ERROR (reward None) are
excluded from every score and counted in ``errors``.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent_rl.rollout.engine import RolloutEngine, select_layout
from agent_rl.rollout.episode import EpisodeSpec
from agent_rl.types import Trajectory

CI_METHOD = "95% percentile bootstrap over tasks"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of Chen et al. 2021: 1 - C(n-c, k) / C(n, k), for n samples with c correct."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def bootstrap_ci(values_T: list[float], resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the mean of per-task values (nearest-rank percentiles)."""
    if not values_T:
        return (0.0, 1.0)
    values = np.asarray(values_T, dtype=np.float64)
    idx = np.random.default_rng(seed).integers(0, len(values), size=(resamples, len(values)))
    means = values[idx].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975], method="nearest")
    return (float(lo), float(hi))


@dataclass
class TaskResult:
    task_id: str
    group_id: str
    samples: int  # scored samples (errors excluded)
    correct: int  # samples with reward 1
    errors: int
    mean_reward: float
    pass_at_k: float


@dataclass
class EvalResult:
    episodes: int  # scored episodes
    tasks: int  # tasks with at least one scored episode
    k: int
    success: float  # mean@k
    success_ci: tuple[float, float]
    pass_at_k: float
    pass_at_k_ci: tuple[float, float]
    errors: int  # env / infra failures, excluded from the scores
    multi_turn: float  # fraction of episodes with more than one assistant turn (e.g. used a tool)
    ci_method: str = CI_METHOD
    per_task: list[TaskResult] = field(default_factory=list)

    def row(self) -> str:
        (lo, hi), (plo, phi) = self.success_ci, self.pass_at_k_ci
        return (
            f"mean@{self.k} {self.success:.3f} [{lo:.3f}, {hi:.3f}]  pass@{self.k} {self.pass_at_k:.3f} [{plo:.3f}, {phi:.3f}]"
            f"  (tasks={self.tasks}, n={self.episodes}, errors={self.errors})"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _correct(reward: float) -> bool:
    return reward >= 1.0 - 1e-9


def score(trajectories: list[Trajectory], k: int, resamples: int = 1000, seed: int = 0) -> EvalResult:
    """Group by ``group_id`` (one task, its k samples) and score; see the module docstring."""
    rewards: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    task_ids: dict[str, str] = {}
    for t in trajectories:
        task_ids.setdefault(t.group_id, t.task_id)
        if t.reward is None:
            errors[t.group_id] += 1
        else:
            rewards[t.group_id].append(float(t.reward))
    per_task = []
    for gid in task_ids:
        rs = rewards.get(gid, [])
        c = sum(1 for r in rs if _correct(r))
        per_task.append(TaskResult(
            task_id=task_ids[gid], group_id=gid, samples=len(rs), correct=c, errors=errors[gid],
            mean_reward=sum(rs) / len(rs) if rs else 0.0,
            pass_at_k=pass_at_k(len(rs), c, min(k, len(rs))) if rs else 0.0,
        ))
    scored = [r for r in per_task if r.samples]
    means_T = [r.mean_reward for r in scored]
    passes_T = [r.pass_at_k for r in scored]
    return EvalResult(
        episodes=sum(r.samples for r in scored),
        tasks=len(scored),
        k=k,
        success=sum(means_T) / len(means_T) if means_T else 0.0,
        success_ci=bootstrap_ci(means_T, resamples, seed),
        pass_at_k=sum(passes_T) / len(passes_T) if passes_T else 0.0,
        pass_at_k_ci=bootstrap_ci(passes_T, resamples, seed),
        errors=sum(errors.values()),
        multi_turn=sum(1 for t in trajectories if len(t.turns_N) > 1) / max(len(trajectories), 1),
        per_task=per_task,
    )


def eval_specs(episodes: int, k: int, split: str, seed: int = 10_000) -> list[EpisodeSpec]:
    """``episodes`` tasks of ``split``, each sampled ``k`` times; the same seed gives the same tasks."""
    return [
        EpisodeSpec(seed=seed + i, group_id=f"eval-{i}", options={"split": split})
        for i in range(episodes)
        for _ in range(k)
    ]


async def evaluate(
    engine: RolloutEngine, episodes: int, k: int = 1, split: str = "test", seed: int = 10_000, resamples: int = 1000
) -> tuple[EvalResult, list[Trajectory]]:
    trajectories = await engine.run(eval_specs(episodes, k, split, seed), seed=seed)
    return score(trajectories, k, resamples=resamples), trajectories


# ---------------------------------------------------------------- `agent-rl eval`


def _load_policy(path: str) -> Any:
    import pkgutil

    try:
        policy = pkgutil.resolve_name(path)
    except (ImportError, AttributeError, ValueError) as e:
        raise ValueError(f"config key 'eval.policy': cannot load '{path}' ({e}); expected module:function") from None
    if not callable(policy):
        raise ValueError(f"config key 'eval.policy': '{path}' is not a function of (messages, rng)")
    return policy


def _engine(cfg: Any) -> RolloutEngine:
    """The model's backend (any registered rollout backend), or a scripted policy (``eval.policy``)."""
    from agent_rl.envloader import bind_tool_format, env_factory, sandbox_kwargs, tool_format
    from agent_rl.rollout.backends import make_backend
    from agent_rl.rollout.backends.hf import load_tokenizer
    from agent_rl.rollout.backends.scripted import ScriptedBackend
    from agent_rl.rollout.render import ChatRenderer

    make_env = env_factory(cfg.env, **sandbox_kwargs(cfg))
    env = make_env()
    try:  # a split the env does not know fails now, not in every episode
        env.reset(seed=0, options={"split": cfg.eval.split})
    except ValueError as e:
        raise ValueError(f"config key 'eval.split': {e}") from None
    finally:
        env.close()
    try:
        tokenizer = load_tokenizer(cfg.model.path)
    except OSError as e:
        hint = "; a scripted policy still needs a tokenizer (agent-rl init-model tiny --out DIR)" if cfg.eval.policy else ""
        raise ValueError(f"config key 'model.path': cannot load a tokenizer from '{cfg.model.path}' ({e}){hint}") from None
    fmt = tool_format(cfg, tokenizer)
    if fmt is not None and "tool_format" not in cfg.env.options:  # envs in the model's tool-call format
        make_env = env_factory(cfg.env, **sandbox_kwargs(cfg), tool_format=fmt)
    if cfg.eval.policy:
        policy = bind_tool_format(_load_policy(cfg.eval.policy), fmt)
        backend = ScriptedBackend(policy, tokenizer, seed=cfg.trainer.seed, tool_format=fmt)
    else:
        backend = make_backend(cfg.rollout.backend, cfg.model, tokenizer=tokenizer)
    renderer = ChatRenderer(tokenizer, chat_template_kwargs=cfg.rollout.chat_template_kwargs)
    select_layout(cfg.rollout, renderer)
    if cfg.agent.program is not None:  # episodes are runs of an agent program (agent_rl/proxy/programs.py)
        from agent_rl.proxy.programs import make_program_engine

        return make_program_engine(cfg, backend, renderer, make_env, tokenizer, fmt, cfg.rollout.with_options(temperature=cfg.eval.temperature))
    return RolloutEngine(backend, renderer, make_env, cfg.rollout.with_options(temperature=cfg.eval.temperature), tool_format=fmt)


def per_category(cfg: Any, trajectories: list[Trajectory], resamples: int = 1000) -> dict[str, EvalResult]:
    """Scores per task category, for envs that declare ``task_category`` (a ``module:function`` of
    the task id, e.g. BFCL's category names); empty for the others."""
    from agent_rl.envloader import declared, load_function

    path = declared(cfg.env.id, "task_category")
    if path is None:
        return {}
    category_of = load_function(path)
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        groups[category_of(t.task_id)].append(t)
    return {c: score(ts, cfg.eval.k, resamples=resamples) for c, ts in groups.items()}


def run_eval(cfg: Any, log: Any = print) -> tuple[EvalResult, Path]:
    """``agent-rl eval``: score, print, and write ``eval.json`` + ``trajectories/eval.jsonl``."""
    from agent_rl.runtime import make_run_dir

    from agent_rl.progress import EpisodeProgress

    engine = _engine(cfg)
    t0 = time.perf_counter()
    progress = EpisodeProgress("eval", cfg.eval.episodes * cfg.eval.k, enabled=cfg.tracking.progress)
    engine.on_episode_done = progress.episode_done
    try:
        with progress:
            result, trajectories = asyncio.run(
                evaluate(engine, cfg.eval.episodes, cfg.eval.k, split=cfg.eval.split, resamples=cfg.eval.bootstrap)
            )
    finally:
        engine.close()
        engine.backend.close()
    wall_s = time.perf_counter() - t0
    run_dir = make_run_dir(cfg, suffix="-eval")
    by_category = per_category(cfg, trajectories, resamples=cfg.eval.bootstrap)
    summary = {**result.to_json(), "wall_s": wall_s, "env": cfg.env.id, "split": cfg.eval.split,
               "policy": cfg.eval.policy or cfg.model.path,
               "per_category": {c: {k: v for k, v in r.to_json().items() if k != "per_task"} for c, r in by_category.items()}}
    (run_dir / "eval.json").write_text(json.dumps(summary, indent=2))
    (run_dir / "trajectories").mkdir(exist_ok=True)
    with open(run_dir / "trajectories" / "eval.jsonl", "w") as f:
        f.writelines(json.dumps(t.to_json()) + "\n" for t in trajectories)
    distinct = len({r.task_id for r in result.per_task})
    log(f"{cfg.env.id} [{cfg.eval.split}] {result.row()}")
    for category, r in by_category.items():
        log(f"  {category:<24} {r.row()}")
    log(f"  intervals: {result.ci_method}; {distinct} distinct tasks; "
        f"{cfg.eval.episodes} x {cfg.eval.k} episodes in {wall_s:.1f} s")
    failed = [r.task_id for r in result.per_task if r.samples and r.correct < r.samples]
    if failed:
        log(f"  tasks not always solved ({len(failed)}): {', '.join(failed[:10])}{' ...' if len(failed) > 10 else ''}")
    log(f"written to {run_dir} (eval.json, trajectories/eval.jsonl)")
    return result, run_dir

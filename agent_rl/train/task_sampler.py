"""Which tasks a training step draws.

``trainer.task_pool: 0`` draws a fresh task per prompt (procedural envs: seeds derived from the run
seed, step and prompt index). ``task_pool: N`` fixes a pool of N tasks, revisited across steps,
drawn without replacement each step with probability proportional to the product of the weights
of every configured filter that steers sampling (``sampler=`` in its registration: the pass-rate
filter retires easy tasks, Kimi's curriculum and prioritized sampling reweight them).

``queue`` (``task_queue.py``) holds groups a method generated during the run (retries, sub-problems,
proposed tasks); each round takes them before drawing (``TaskQueue.take``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agent_rl.core.seeding import derive_seed
from agent_rl.train.task_queue import TaskQueue


class TaskSampler:
    def __init__(self, run_seed: int, pool_size: int, steering: list[tuple[Any, Any, Any]]):
        """``steering``: (registry entry, its config, its state) of each filter with a sampler."""
        self.run_seed = run_seed
        self.pool_seeds = [derive_seed("pool", run_seed, i) for i in range(pool_size)]
        self.steering = steering
        self.task_ids: dict[int, str] = {}  # seed -> task id, learned from the rollouts
        self.queue = TaskQueue()  # generated groups, rolled out before fresh draws

    def observe(self, seed: int, task_id: str) -> None:
        self.task_ids[seed] = task_id

    def weights(self) -> np.ndarray:
        ids = [self.task_ids.get(s, f"unseen-seed-{s}") for s in self.pool_seeds]
        w = np.ones(len(ids))
        for entry, cfg, state in self.steering:
            if entry.sampler is not None:
                w *= np.asarray(entry.sampler(state, ids, cfg), dtype=np.float64)
        return w

    def episode_options(self, seed: int) -> dict[str, Any]:
        """EpisodeSpec fields the steering entries set for the task of ``seed`` (posterior_temperature)."""
        task_id = self.task_ids.get(seed, f"unseen-seed-{seed}")
        out: dict[str, Any] = {}
        for entry, cfg, state in self.steering:
            if getattr(entry, "episode_options", None) is not None:
                out.update(entry.episode_options(state, task_id, cfg))
        return out

    def draw(self, step: int, round_: int, n: int) -> list[int]:
        if not self.pool_seeds:
            return [derive_seed(self.run_seed, step, round_, i) for i in range(n)]
        w = self.weights()
        if w.sum() <= 0:  # every task excluded (e.g. all retired): fall back to uniform
            w = np.ones_like(w)
        rng = np.random.default_rng(derive_seed("draw", self.run_seed, step, round_))
        n_nonzero = int((w > 0).sum())
        replace = n > n_nonzero
        idx = rng.choice(len(w), size=n, replace=replace, p=w / w.sum())
        return [self.pool_seeds[i] for i in idx]

    def state_dict(self) -> dict[str, Any]:
        return {"task_ids": {str(k): v for k, v in self.task_ids.items()}, "queue": self.queue.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.task_ids = {int(k): v for k, v in state["task_ids"].items()}
        self.queue.load_state_dict(state.get("queue", {}))

"""``agent_rl/ToolLatency-v0``: any environment, with a long-tailed wait in every step.

A stand-in for slow sandboxes and tools (a test suite, a web call): each ``step`` first waits a
time drawn from a Pareto law truncated to ``[latency_min_s, latency_max_s]`` (``tail_alpha`` 1:
the median is about twice the minimum, one call in ~40 waits over 20x the minimum), then steps
the wrapped env. The wait is ``asyncio.sleep`` in ``astep`` (it costs no CPU) and the wrapped env's
rewards are unchanged, so synchronous and asynchronous training can be compared on wall time
(``bench/async_speedup.py``). A plugin: ``env.plugins: [agent_rl.distributed.latency_env]``.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import gymnasium as gym

from agent_rl.core.seeding import derive_seed

ENV_ID = "agent_rl/ToolLatency-v0"


def truncated_pareto(u: float, low: float, high: float, alpha: float) -> float:
    """Inverse CDF of a Pareto(alpha) law on [low, high] at ``u`` in [0, 1)."""
    return low / (1.0 - u * (1.0 - (low / high) ** alpha)) ** (1.0 / alpha)


class ToolLatencyEnv(gym.Env):
    metadata = {"render_modes": []}
    description = "any env, with a long-tailed (truncated Pareto) wait before every step"

    def __init__(
        self,
        inner: str = "agent_rl/Arithmetic-v0",
        inner_options: dict[str, Any] | None = None,
        latency_min_s: float = 0.05,
        latency_max_s: float = 2.0,
        tail_alpha: float = 1.0,
        sandbox_backend: str | None = None,
    ):
        if not 0 < latency_min_s <= latency_max_s:
            raise ValueError(f"need 0 < latency_min_s <= latency_max_s, got {latency_min_s}, {latency_max_s}")
        if tail_alpha <= 0:
            raise ValueError(f"tail_alpha must be > 0, got {tail_alpha}")
        options = dict(inner_options or {})
        if sandbox_backend is not None:
            options.setdefault("sandbox_backend", sandbox_backend)
        self.inner = gym.make(inner, **options)
        self.action_space = self.inner.action_space
        self.observation_space = self.inner.observation_space
        self.low, self.high, self.alpha = latency_min_s, latency_max_s, tail_alpha
        self._rng = random.Random(0)
        self._episodes = 0

    def latency(self) -> float:
        return truncated_pareto(self._rng.random(), self.low, self.high, self.alpha)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._episodes += 1
        self._rng = random.Random(derive_seed("latency", seed, self._episodes))
        return self.inner.reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict]:
        time.sleep(self.latency())
        return self.inner.step(action)

    async def astep(self, action: str) -> tuple[Any, float, bool, bool, dict]:
        await asyncio.sleep(self.latency())
        inner_step = getattr(self.inner.unwrapped, "astep", None)
        if inner_step is not None:
            return await inner_step(action)
        return await asyncio.to_thread(self.inner.step, action)

    def close(self) -> None:
        self.inner.close()


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=ToolLatencyEnv, disable_env_checker=True)

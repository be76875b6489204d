"""Helpers of the rollout suite: a scripted env with tool latency, a recording backend, templates."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, ClassVar

import gymnasium as gym

from agent_rl.models.tiny import CHAT_TEMPLATE
from agent_rl.rollout.backends.hf import HfBackend
from envs.spaces import AnyText, Messages


class EchoEnv(gym.Env):
    """Task ``seed``: the user says the seed's digits; each step answers with one tool message.

    The tool message is ``options["obs"]`` (default ``"ok"``); after ``options["turns"]`` steps the
    episode ends with reward 1. Each step sleeps a random time in ``[0, options["latency"]]`` s (a
    tool call) from a generator the episode's content never depends on. ``steps`` counts the steps
    since reset and ``actions`` records them (what a replay must reproduce).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = Messages()
        self.action_space = AnyText(max_length=4096)
        self.options: dict[str, Any] = {}
        self.actions: list[str] = []
        self._latency_rng = random.Random()

    @property
    def steps(self) -> int:
        return len(self.actions)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.options, self.actions = dict(options or {}), []
        obs = [{"role": "user", "content": str(seed)}]
        return obs, {"task_id": f"echo-{seed}", "state_key": "0"}

    def step(self, action: str):
        time.sleep(self._latency())
        return self._act(action)

    def _latency(self) -> float:
        return self._latency_rng.uniform(0, self.options.get("latency", 0.0))

    def _act(self, action: str):
        self.actions.append(action)
        done = self.steps >= self.options.get("turns", 3)
        obs = [] if done else [{"role": "tool", "content": self.options.get("obs", "ok")}]
        info = {"state_key": str(self.steps), "action_valid": True}
        return obs, float(done), done, False, info


class AsyncEchoEnv(EchoEnv):
    """``EchoEnv`` with ``areset`` / ``astep``: its latency is an ``asyncio.sleep`` (no thread).

    Its coroutines never block, so it runs on the engine's loop (``loop_safe``): the batching
    tests count which requests meet in one backend call."""

    loop_safe = True

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return self.reset(seed=seed, options=options)

    async def astep(self, action: str):
        await asyncio.sleep(self._latency())
        return self._act(action)


class SnapshotEchoEnv(EchoEnv):
    """``EchoEnv`` whose state can be saved and restored (fork replays it once, restores the rest)."""

    def snapshot(self) -> tuple[dict[str, Any], list[str]]:
        return dict(self.options), list(self.actions)

    def restore(self, snapshot: tuple[dict[str, Any], list[str]]) -> None:
        self.options, self.actions = dict(snapshot[0]), list(snapshot[1])


class RecordingBackend(HfBackend):
    """The hf backend, keeping every request it got and everything it sampled."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.prompts: list[list[int]] = []
        self.sampled: list[list[int]] = []

    def generate_sync(self, requests, seed=None):
        results = super().generate_sync(requests, seed)
        self.prompts += [list(r.prompt_ids) for r in requests]
        self.sampled += [list(r.token_ids) for r in results]
        return results


# Like Qwen3's template: an assistant message that is not the last one loses its <think> block.
DROP_THINKING_TEMPLATE = CHAT_TEMPLATE.replace(
    "<|im_start|>assistant\n{{ message.content or '' }}",
    "{% set content = message.content or '' %}"
    "{% if not loop.last and '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
    "<|im_start|>assistant\n{{ content }}",
)
assert DROP_THINKING_TEMPLATE != CHAT_TEMPLATE


def pieces(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each id decoded on its own (for aligned, readable expectations)."""
    return [tokenizer.decode([i]) for i in ids]

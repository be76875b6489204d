"""Scripted policies for TextWorldExpress-v0 (``eval.policy=envs.textworld_express.policies:gold``).

* ``gold``: the upstream gold path (``generateGoldPath``), one command per turn: succeeds on every
  game within its length;
* ``noisy_gold``: the gold path with detours: with probability ``p_noise`` a random harmless valid
  action (look, inventory, examine) or a move and the move back (``envs.text_game_experts``); the
  SFT teacher (``sft_teacher``): demonstrations that succeed but leave turns for RL to save;
* ``random_valid``: a uniformly random action of the shown valid actions (a baseline).
"""

from __future__ import annotations

import random

from envs.text_game_experts import gold_action, noisy_action, random_valid_action, write
from envs.textworld_express.env import TextWorldExpressEnv


def gold(messages: list[dict], rng: random.Random | None = None, *, tool_format: str = "hermes") -> str:
    return write(gold_action(messages, tool_format), messages, tool_format)


def noisy_gold(messages: list[dict], rng: random.Random, p_noise: float = 0.2, *, tool_format: str = "hermes") -> str:
    return write(noisy_action(messages, rng, p_noise, tool_format), messages, tool_format)


def random_valid(messages: list[dict], rng: random.Random, *, tool_format: str = "hermes") -> str:
    return write(random_valid_action(messages, rng), messages, tool_format)


def corpus_conversations(n: int, rng: random.Random):
    """Noisy-gold episodes on train games of coin, cooking and twc, as ``(messages, tools)``, for the
    tiny tokenizer (at most 300; one JVM per game)."""

    games = {g: TextWorldExpressEnv(game=g, max_turns=40) for g in ("coin", "cookingworld", "twc")}
    try:
        for i in range(min(n, 300)):
            env = games[("coin", "cookingworld", "twc")[i % 3]]
            obs, info = env.reset(seed=rng.randrange(1000))
            messages = list(obs)
            while True:
                action = noisy_gold(messages, rng)
                obs, _, terminated, truncated, _ = env.step(action)
                messages += [{"role": "assistant", "content": action}] + obs
                if terminated or truncated:
                    break
            yield messages, info["tools"]
    finally:
        for env in games.values():
            env.close()

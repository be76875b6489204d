"""Scripted policies for ScienceWorld-v0 (``eval.policy=envs.scienceworld.policies:gold``).

* ``gold``: the upstream gold action sequence (``generateGoldPath``), one command per turn;
* ``noisy_gold``: the gold path with, with probability ``p_noise``, a harmless command first
  (``look around``, ``inventory``, or a ``look at`` / ``examine`` from the shown valid actions):
  the world is unchanged, so the gold path still holds (``envs.text_game_experts``); the SFT teacher;
* ``random_valid``: a random shown valid action (``valid_actions=True``), else ``look around``.
"""

from __future__ import annotations

import random

from envs.text_game_experts import gold_action, noisy_action, random_valid_action, write


def gold(messages: list[dict], rng: random.Random | None = None, *, tool_format: str = "hermes") -> str:
    return write(gold_action(messages, tool_format), messages, tool_format)


def noisy_gold(messages: list[dict], rng: random.Random, p_noise: float = 0.2, *, tool_format: str = "hermes") -> str:
    return write(noisy_action(messages, rng, p_noise, tool_format), messages, tool_format)


def random_valid(messages: list[dict], rng: random.Random, *, tool_format: str = "hermes") -> str:
    return write(random_valid_action(messages, rng), messages, tool_format)

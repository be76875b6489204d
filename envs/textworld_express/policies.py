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


def gold(messages: list[dict], rng: random.Random | None = None, *, tool_format: str = "hermes") -> str:
    return write(gold_action(messages, tool_format), messages, tool_format)


def noisy_gold(messages: list[dict], rng: random.Random, p_noise: float = 0.2, *, tool_format: str = "hermes") -> str:
    return write(noisy_action(messages, rng, p_noise, tool_format), messages, tool_format)


def random_valid(messages: list[dict], rng: random.Random, *, tool_format: str = "hermes") -> str:
    return write(random_valid_action(messages, rng), messages, tool_format)

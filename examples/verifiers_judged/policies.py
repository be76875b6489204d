"""A scripted policy for the judged taskset (``eval.policy``): the same answer to every question, so
that the reward is whatever the judge decides."""

from __future__ import annotations

import random


def banana(messages: list[dict], rng: random.Random | None = None, *, tool_format: str = "hermes") -> str:
    return "A banana."

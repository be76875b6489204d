"""Test doubles of the run a method binds to (``agent_rl/algorithms/run_api.py``)."""

from __future__ import annotations

from typing import Any

from agent_rl.algorithms.run_api import RunFacts


def facts(**overrides: Any) -> RunFacts:
    """The facts of a one-process run with seed 0; ``overrides`` change any field."""
    base = dict(
        seed=0,
        model_path=".",
        device="cpu",
        env_id="agent_rl/Arithmetic-v0",
        local_policy=True,
        lora=False,
        refill_rounds=0,
        advantage="grpo",
        teacher_context=True,
    )
    return RunFacts(**{**base, **overrides})


def bound(run: Any, **overrides: Any) -> Any:
    """``run`` (an object with the operations a test needs) with ``facts``."""
    run.facts = facts(**overrides)
    return run

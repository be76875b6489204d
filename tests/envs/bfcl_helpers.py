"""Shared by the BFCL tests: play a multi-turn task's ground truth to its end."""

from __future__ import annotations

from envs.bfcl import policies


def replay(env, task_id: str, max_steps: int = 200) -> float:
    """The reward of ``env`` when the agent replays ``task_id``'s ground truth, turn by turn."""
    messages, _ = env.reset(options={"task": task_id})
    for _ in range(max_steps):
        action = policies.replay(messages)
        obs, reward, terminated, truncated, _ = env.step(action)
        messages = messages + [{"role": "assistant", "content": action}, *obs]
        if terminated or truncated:
            return reward
    raise AssertionError(f"{task_id}: no end within {max_steps} steps")

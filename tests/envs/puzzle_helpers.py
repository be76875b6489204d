"""Play a scripted policy through a grid-puzzle env (tests of Maze-v0 and Sokoban-v0)."""

from __future__ import annotations


def play(env, policy, seed=None, options=None, rng=None):
    """``(total reward, state keys from reset on, messages)`` of one episode."""
    obs, info = env.reset(seed=seed, options=options)
    messages, keys, total = list(obs), [info["state_key"]], 0.0
    while True:
        action = policy(messages, rng)
        obs, reward, terminated, truncated, info = env.step(action)
        messages += [{"role": "assistant", "content": action}] + obs
        keys.append(info["state_key"])
        total += reward
        if terminated or truncated:
            return total, keys, messages

"""Scripted policies for Maze-v0: a BFS oracle and a noisy-BFS weak teacher (SFT demonstrations).

Both read the last board of the conversation and reply with one plain-text move.
"""

from __future__ import annotations

import random

from envs.grid_puzzle import DIRECTIONS, last_board
from envs.maze.env import MazeEnv
from envs.maze.tasks import FLOOR, GOAL, PLAYER, START, WALL, Maze, shortest_path


def _position(messages: list[dict]) -> tuple[Maze, tuple[int, int]] | None:
    rows = last_board(messages, WALL + FLOOR + GOAL + PLAYER)
    if rows is None or "".join(rows).count(PLAYER) != 1 or "".join(rows).count(GOAL) != 1:
        return None
    maze = Maze(tuple(row.replace(PLAYER, START) for row in rows))
    return maze, maze.find(START)


def oracle(messages: list[dict], rng: random.Random | None = None) -> str:
    """The first move of a shortest path (BFS)."""
    found = _position(messages)
    path = shortest_path(*found) if found else None
    return path[0] if path else "up"


def weak_teacher(messages: list[dict], rng: random.Random, p_noise: float = 0.25) -> str:
    """Like ``oracle``, but with probability ``p_noise`` a random other open move (a detour)."""
    found = _position(messages)
    path = shortest_path(*found) if found else None
    if not path:
        return "up"
    maze, (r, c) = found
    others = [d for d, (dr, dc) in DIRECTIONS.items() if d != path[0] and maze.open(r + dr, c + dc)]
    if others and rng.random() < p_noise:
        return rng.choice(others)
    return path[0]


def corpus_conversations(n: int, rng: random.Random):
    """Weak-teacher episodes as ``(messages, tools)`` for the tiny tokenizer (at most 1000)."""

    plain, hinted = (
        MazeEnv(difficulty=[1, 2, 3, 4], max_turns=24),
        MazeEnv(difficulty=[1, 2, 3, 4], max_turns=24, hint=True),
    )
    for i in range(min(n, 1000)):
        env = hinted if i % 2 else plain
        obs, info = env.reset(seed=rng.randrange(2**31))
        messages = list(obs)
        while True:
            action = weak_teacher(messages, rng)
            obs, _, terminated, truncated, _ = env.step(action)
            messages += [{"role": "assistant", "content": action}] + obs
            if terminated or truncated:
                break
        yield messages, info["tools"]

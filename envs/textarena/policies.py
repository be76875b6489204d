"""Scripted policies for TextArena-v0 (``eval.policy=envs.textarena.policies:solver``), reading
the board from the conversation:

* ``solver``: FrozenLake by breadth-first search around the holes, TowerOfHanoi by the recursive
  rule (from any position: to put disk k on a peg, first put disks 1..k-1 on the third peg); other
  games get a random shown valid move;
* ``noisy_solver``: with probability ``p_noise`` a random shown valid move (on FrozenLake never into
  a hole), else ``solver``'s; both solvers continue from wherever the noise led. The SFT teacher;
* ``random_valid``: a random shown valid move (the baseline; two-player games too).
"""

from __future__ import annotations

import random
import re
from collections import deque

from envs.text_game_experts import shown_valid, write
from envs.textarena.env import TextArenaEnv

_STEPS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
_TOWER = re.compile(r"^([ABC]): \[([0-9, ]*)\]", re.MULTILINE)


def _game(messages: list[dict]) -> str:
    first = next((m["content"] for m in messages if m["role"] == "user"), "")
    if "Frozen Lake" in first:
        return "FrozenLake"
    if "Tower of Hanoi" in first:
        return "TowerOfHanoi"
    return ""


def _lake(messages: list[dict]) -> list[list[str]] | None:
    """The last FrozenLake grid shown (cells ' ', 'H', 'G', 'P', 'P/G')."""
    for m in reversed(messages):
        if m["role"] in ("user", "tool"):
            rows = [
                [c.strip() for c in line.strip()[1:-1].split("|")]
                for line in m["content"].splitlines()
                if line.startswith("|")
            ]
            if rows:
                return rows
    return None


def _find(grid: list[list[str]], mark: str) -> tuple[int, int]:
    return next((r, c) for r, row in enumerate(grid) for c, cell in enumerate(row) if mark in cell.split("/"))


def lake_path(grid: list[list[str]]) -> list[str] | None:
    """A shortest list of moves from P to G that avoids the holes (None when there is none)."""
    start, n = _find(grid, "P"), len(grid)
    paths, queue = {start: []}, deque([start])
    while queue:
        r, c = queue.popleft()
        if "G" in grid[r][c].split("/"):
            return paths[(r, c)]
        for d, (dr, dc) in _STEPS.items():
            nxt = (r + dr, c + dc)
            if 0 <= nxt[0] < n and 0 <= nxt[1] < n and nxt not in paths and grid[nxt[0]][nxt[1]] != "H":
                paths[nxt] = paths[(r, c)] + [d]
                queue.append(nxt)
    return None


def _towers(messages: list[dict]) -> dict[str, list[int]] | None:
    for m in reversed(messages):
        if m["role"] in ("user", "tool"):
            found = {t: [int(x) for x in disks.replace(",", " ").split()] for t, disks in _TOWER.findall(m["content"])}
            if len(found) == 3:
                return found
    return None


def hanoi_move(towers: dict[str, list[int]]) -> tuple[str, str] | None:
    """The next move of a shortest way to put every disk on C, from any legal position."""
    peg = {d: t for t, disks in towers.items() for d in disks}

    def toward(k: int, target: str) -> tuple[str, str] | None:
        if k == 0:
            return None
        if peg[k] == target:
            return toward(k - 1, target)
        spare = ({"A", "B", "C"} - {peg[k], target}).pop()
        return toward(k - 1, spare) or (peg[k], target)

    return toward(len(peg), "C")


def _solve(messages: list[dict], rng: random.Random) -> str:
    game = _game(messages)
    if game == "FrozenLake":
        grid = _lake(messages)
        path = lake_path(grid) if grid else None
        if path:
            return f"[{path[0]}]"
    elif game == "TowerOfHanoi":
        towers = _towers(messages)
        move = hanoi_move(towers) if towers else None
        if move:
            return f"[{move[0]} {move[1]}]"
    return rng.choice(shown_valid(messages) or ["[up]"])


def solver(messages: list[dict], rng: random.Random | None = None, *, tool_format: str = "hermes") -> str:
    return write(_solve(messages, rng or random.Random(0)), messages, tool_format)


def noisy_solver(messages: list[dict], rng: random.Random, p_noise: float = 0.2, *, tool_format: str = "hermes") -> str:
    if rng.random() >= p_noise:
        return solver(messages, rng, tool_format=tool_format)
    moves = shown_valid(messages)
    if _game(messages) == "FrozenLake" and (grid := _lake(messages)):
        r, c = _find(grid, "P")
        moves = [m for m in moves if grid[r + _STEPS[m.strip("[]")][0]][c + _STEPS[m.strip("[]")][1]] != "H"]
    return write(rng.choice(moves) if moves else _solve(messages, rng), messages, tool_format)


def random_valid(messages: list[dict], rng: random.Random, *, tool_format: str = "hermes") -> str:
    return write(rng.choice(shown_valid(messages) or ["[up]"]), messages, tool_format)


def corpus_conversations(n: int, rng: random.Random):
    """Noisy-solver episodes of FrozenLake and TowerOfHanoi as ``(messages, tools)``, for the tiny
    tokenizer (at most 300)."""

    games = {g: TextArenaEnv(game=g, max_turns=30) for g in ("FrozenLake-v0", "TowerOfHanoi-v0-medium")}
    for i in range(min(n, 300)):
        env = games[("FrozenLake-v0", "TowerOfHanoi-v0-medium")[i % 2]]
        obs, info = env.reset(seed=rng.randrange(2**31))
        messages = list(obs)
        while True:
            action = noisy_solver(messages, rng)
            obs, _, terminated, truncated, _ = env.step(action)
            messages += [{"role": "assistant", "content": action}] + obs
            if terminated or truncated:
                break
        yield messages, info["tools"]

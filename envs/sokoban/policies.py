"""Scripted policies for Sokoban-v0: a BFS-solver oracle (small boards) and a noisy weak teacher."""

from __future__ import annotations

import random

from envs.grid_puzzle import DIRECTIONS, last_board
from envs.sokoban.tasks import CELLS, Board, State, solve


def _current(messages: list[dict]) -> Board | None:
    rows = last_board(messages, CELLS)
    try:
        return Board.parse(rows) if rows else None
    except ValueError:
        return None


_PLANS: dict[tuple, list[str] | None] = {}  # (walls, goals, state) -> shortest solution from there


def _plan(board: Board) -> list[str] | None:
    """A shortest solution from the board's state; the suffixes along it are cached, so following
    the plan costs one search per episode instead of one per move."""
    key = (board.walls, board.goals, board.start)
    if key not in _PLANS:
        if len(_PLANS) > 100_000:
            _PLANS.clear()
        path = _PLANS[key] = solve(board, board.start)
        state = board.start
        for i, move in enumerate(path or []):
            state = board.move(state, move)
            _PLANS[(board.walls, board.goals, state)] = path[i + 1 :]
    return _PLANS[key]


def oracle(messages: list[dict], rng: random.Random | None = None) -> str:
    """The first move of a shortest solution from the board shown last."""
    board = _current(messages)
    path = _plan(board) if board else None
    return path[0] if path else "up"


def weak_teacher(messages: list[dict], rng: random.Random, p_noise: float = 0.2) -> str:
    """Like ``oracle``, but with probability ``p_noise`` another legal move (it may deadlock)."""
    board = _current(messages)
    path = _plan(board) if board else None
    if not path:
        return "up"
    others = [d for d in DIRECTIONS if d != path[0] and isinstance(board.move(board.start, d), State)]
    return rng.choice(others) if others and rng.random() < p_noise else path[0]

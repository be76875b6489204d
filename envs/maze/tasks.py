"""Maze boards: drawn with reasoning-gym's maze generator, re-checked with our own BFS.

reasoning-gym's ``MazeDataset`` draws a random grid (border walls, each inner cell a passage with
probability ``1 - wall_density``), places start and goal on passages, and keeps it when the BFS
distance lies in ``[min_dist, max_dist]``. It draws four random characters per maze; we map them
to ``#`` (wall), ``.`` (passage), ``S`` and ``G``. Splits are 80/10/10 by a hash of the board.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections import deque
from dataclasses import dataclass

from envs.grid_puzzle import DIRECTIONS
from envs.splits import check_difficulties, check_split, split_of

WALL, FLOOR, START, GOAL, PLAYER = "#", ".", "S", "G", "@"

# difficulty -> (grid size range, shortest-path range)
LEVELS: dict[int, tuple[tuple[int, int], tuple[int, int]]] = {
    1: ((5, 5), (2, 4)),
    2: ((6, 7), (5, 8)),
    3: ((7, 8), (8, 12)),  # episodes of >= 8 moves for the credit-assignment benchmark
    4: ((9, 10), (12, 20)),
}


@dataclass(frozen=True)
class Maze:
    rows: tuple[str, ...]  # with S and G
    difficulty: int = 0

    def __post_init__(self):
        if not self.rows or any(len(r) != len(self.rows[0]) for r in self.rows):
            raise ValueError("a maze is a non-empty list of rows of equal length")
        if not all(c in WALL + FLOOR + START + GOAL for r in self.rows for c in r):
            raise ValueError(f"maze cells must be one of {WALL + FLOOR + START + GOAL!r}")
        if "".join(self.rows).count(START) != 1 or "".join(self.rows).count(GOAL) != 1:
            raise ValueError("a maze has exactly one S and one G")

    def find(self, cell: str) -> tuple[int, int]:
        return next((r, row.index(cell)) for r, row in enumerate(self.rows) if cell in row)

    def open(self, r: int, c: int) -> bool:
        return 0 <= r < len(self.rows) and 0 <= c < len(self.rows[0]) and self.rows[r][c] != WALL

    @property
    def task_id(self) -> str:
        return "maze-" + hashlib.sha256("\n".join(self.rows).encode()).hexdigest()[:12]

    @property
    def split(self) -> str:
        return split_of("\n".join(self.rows))

    def render(self, pos: tuple[int, int]) -> str:
        """The board the agent sees: ``@`` at ``pos``, ``G`` the goal, the start not marked."""
        out = []
        for r, row in enumerate(self.rows):
            cells = [PLAYER if (r, c) == pos else (FLOOR if ch == START else ch) for c, ch in enumerate(row)]
            out.append("".join(cells))
        return "\n".join(out)

    def to_dict(self) -> dict:
        return {"grid": list(self.rows), "difficulty": self.difficulty}


def shortest_path(maze: Maze, start: tuple[int, int]) -> list[str] | None:
    """The moves of a shortest path from ``start`` to G (BFS; directions tried in a fixed order)."""
    goal = maze.find(GOAL)
    parent: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            moves = []
            while parent[cell] is not None:
                cell, move = parent[cell][0], parent[cell][1]
                moves.append(move)
            return moves[::-1]
        for move, (dr, dc) in DIRECTIONS.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if nxt not in parent and maze.open(*nxt):
                parent[nxt] = (cell, move)
                queue.append(nxt)
    return None


@functools.lru_cache(maxsize=4096)
def generate(seed: int, difficulty: int, wall_density: float) -> Maze:
    """reasoning-gym's maze of ``seed`` at ``difficulty``, in our characters; BFS-verified."""
    from reasoning_gym.games.maze import MazeConfig, MazeDataset

    (gmin, gmax), (dmin, dmax) = LEVELS[difficulty]
    config = MazeConfig(min_dist=dmin, max_dist=dmax, min_grid_size=gmin, max_grid_size=gmax, seed=seed, size=1)
    meta = MazeDataset(config, prob_path=1.0 - wall_density)[0]["metadata"]
    mapping = {meta["wall"]: WALL, meta["path"]: FLOOR, meta["start"]: START, meta["goal"]: GOAL}
    maze = Maze(tuple("".join(mapping[ch] for ch in row) for row in meta["grid"]), difficulty)
    path = shortest_path(maze, maze.find(START))
    if path is None or not dmin <= len(path) <= dmax:  # never trust a generator blindly
        raise RuntimeError(f"reasoning-gym maze {seed} has shortest path {path and len(path)}, not in [{dmin}, {dmax}]")
    return maze


def sample_maze(seed: int, split: str, difficulties: tuple[int, ...], wall_density: float = 0.3) -> Maze:
    """The maze of ``seed`` in ``split``: deterministic, drawn by rejection on the split hash."""
    check_split(split)
    check_difficulties(difficulties, LEVELS)
    if not 0.0 <= wall_density < 0.6:
        raise ValueError(f"wall_density must be in [0, 0.6), got {wall_density}")
    rng = random.Random(seed)
    while True:
        maze = generate(rng.randrange(2**31), rng.choice(difficulties), wall_density)
        if maze.split == split:
            return maze

"""Sokoban boards: drawn with reasoning-gym's reverse-play generator, solved with our own BFS.

reasoning-gym's generator (``games/contrib/sokoban``) pulls boxes backwards from their goals and
checks the result with its A* search. We map its characters to the standard XSB notation, then
solve the board ourselves with a move-level BFS (small boards only) and keep it when the shortest
solution has at least ``min_moves`` moves, so every task is solvable and none starts solved.
Splits are 80/10/10 by a hash of the board.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections import deque
from dataclasses import dataclass

from envs.grid_puzzle import DIRECTIONS
from envs.splits import check_difficulties, check_split, split_of

# XSB notation; '-' is an empty floor cell
WALL, FLOOR, GOAL, BOX, BOX_ON_GOAL, PLAYER, PLAYER_ON_GOAL = "#", "-", ".", "$", "*", "@", "+"
CELLS = WALL + FLOOR + GOAL + BOX + BOX_ON_GOAL + PLAYER + PLAYER_ON_GOAL
# reasoning-gym's characters -> ours
_FROM_RG = {"+": WALL, "-": FLOOR, "X": GOAL, "@": BOX, "$": BOX_ON_GOAL, "*": PLAYER, "%": PLAYER_ON_GOAL}

# difficulty -> (width range, height range, boxes range, minimum solution length)
LEVELS: dict[int, tuple[tuple[int, int], tuple[int, int], tuple[int, int], int]] = {
    1: ((5, 6), (5, 6), (1, 1), 2),
    2: ((6, 7), (6, 7), (1, 2), 4),
    3: ((7, 8), (7, 8), (2, 3), 6),
}
MAX_SEARCH_STATES = 200_000

Cell = tuple[int, int]


@dataclass(frozen=True)
class State:
    player: Cell
    boxes: frozenset[Cell]


@dataclass(frozen=True)
class Board:
    """The static part (walls, goals) and the start state of a puzzle."""

    walls: frozenset[Cell]
    goals: frozenset[Cell]
    start: State
    height: int
    width: int
    difficulty: int = 0

    @classmethod
    def parse(cls, rows: list[str] | tuple[str, ...], difficulty: int = 0) -> Board:
        if not rows or any(len(r) != len(rows[0]) for r in rows) or any(ch not in CELLS for r in rows for ch in r):
            raise ValueError(f"a Sokoban board is rows of equal length made of {CELLS!r}")
        cells = {(r, c): ch for r, row in enumerate(rows) for c, ch in enumerate(row)}
        players = [p for p, ch in cells.items() if ch in PLAYER + PLAYER_ON_GOAL]
        boxes = frozenset(p for p, ch in cells.items() if ch in BOX + BOX_ON_GOAL)
        goals = frozenset(p for p, ch in cells.items() if ch in GOAL + BOX_ON_GOAL + PLAYER_ON_GOAL)
        if len(players) != 1 or not boxes or len(boxes) != len(goals):
            raise ValueError("a Sokoban board has one player and as many goals as boxes (at least one)")
        walls = frozenset(p for p, ch in cells.items() if ch == WALL)
        return cls(walls, goals, State(players[0], boxes), len(rows), len(rows[0]), difficulty)

    def render(self, state: State) -> str:
        out = []
        for r in range(self.height):
            row = []
            for c in range(self.width):
                p, goal = (r, c), (r, c) in self.goals
                if p in self.walls:
                    row.append(WALL)
                elif p == state.player:
                    row.append(PLAYER_ON_GOAL if goal else PLAYER)
                elif p in state.boxes:
                    row.append(BOX_ON_GOAL if goal else BOX)
                else:
                    row.append(GOAL if goal else FLOOR)
            out.append("".join(row))
        return "\n".join(out)

    def solved(self, state: State) -> bool:
        return state.boxes == self.goals

    def free(self, p: Cell) -> bool:
        return 0 <= p[0] < self.height and 0 <= p[1] < self.width and p not in self.walls

    def move(self, state: State, direction: str) -> State | str:
        """The next state, or why the move is impossible."""
        dr, dc = DIRECTIONS[direction]
        nxt = (state.player[0] + dr, state.player[1] + dc)
        if not self.free(nxt):
            return f"cannot move {direction}: wall"
        if nxt not in state.boxes:
            return State(nxt, state.boxes)
        beyond = (nxt[0] + dr, nxt[1] + dc)
        if not self.free(beyond) or beyond in state.boxes:
            return f"cannot push the box {direction}: blocked"
        return State(nxt, (state.boxes - {nxt}) | {beyond})

    @property
    def key(self) -> str:
        return self.render(self.start)

    @property
    def task_id(self) -> str:
        return "sokoban-" + hashlib.sha256(self.key.encode()).hexdigest()[:12]

    @property
    def split(self) -> str:
        return split_of(self.key)

    def to_dict(self) -> dict:
        return {"grid": self.key.split("\n"), "difficulty": self.difficulty}


def live_cells(board: Board) -> frozenset[Cell]:
    """Cells from which a box can still reach some goal: the goals and what they can be pulled to.

    Pushing a box anywhere else is a dead end, so the solver never does it (the env still allows it).
    """
    live, queue = set(board.goals), deque(board.goals)
    while queue:
        r, c = queue.popleft()
        for dr, dc in DIRECTIONS.values():
            box, player = (r + dr, c + dc), (r + 2 * dr, c + 2 * dc)  # pull the box one step towards dr,dc
            if box not in live and board.free(box) and board.free(player):
                live.add(box)
                queue.append(box)
    return frozenset(live)


def solve(board: Board, state: State, max_states: int = MAX_SEARCH_STATES) -> list[str] | None:
    """A shortest move sequence (BFS over player + boxes, dead squares pruned), or None
    (unsolvable, or more than ``max_states`` states)."""
    live = live_cells(board)
    parent: dict[State, tuple[State, str] | None] = {state: None}
    queue = deque([state])
    while queue:
        s = queue.popleft()
        if board.solved(s):
            moves = []
            while parent[s] is not None:
                s, move = parent[s]
                moves.append(move)
            return moves[::-1]
        for direction in DIRECTIONS:
            nxt = board.move(s, direction)
            if isinstance(nxt, State) and nxt not in parent and nxt.boxes <= live:
                if len(parent) >= max_states:
                    return None
                parent[nxt] = (s, direction)
                queue.append(nxt)
    return None


@functools.lru_cache(maxsize=4096)
def solution(board: Board, state: State) -> tuple[str, ...] | None:
    """``solve``, cached (resets of the same task ask again)."""
    path = solve(board, state)
    return None if path is None else tuple(path)


@functools.lru_cache(maxsize=1024)
def generate(seed: int, difficulty: int) -> tuple[Board, int]:
    """The first board reasoning-gym draws from ``seed`` that our BFS solves in >= min moves."""
    from reasoning_gym.games.contrib.sokoban.src.generator import (
        generate as rg_generate,
    )

    (wmin, wmax), (hmin, hmax), (bmin, bmax), min_moves = LEVELS[difficulty]
    rng = random.Random(seed)
    for _ in range(100):
        text, _solution, _ = rg_generate(
            rng=rng, min_w=wmin, max_w=wmax, min_h=hmin, max_h=hmax, min_boxes=bmin, max_boxes=bmax, max_depth=60
        )
        rows = ["".join(_FROM_RG[ch] for ch in line.split()) for line in text.strip().split("\n")]
        board = Board.parse(rows, difficulty)
        path = solution(board, board.start)
        if path is not None and len(path) >= min_moves:
            return board, len(path)
    raise RuntimeError(f"no Sokoban board of difficulty {difficulty} for seed {seed} in 100 draws")


def sample_board(seed: int, split: str, difficulties: tuple[int, ...]) -> Board:
    """The board of ``seed`` in ``split``: deterministic, drawn by rejection on the split hash."""
    check_split(split)
    check_difficulties(difficulties, LEVELS)
    rng = random.Random(seed)
    while True:
        board, _ = generate(rng.randrange(2**31), rng.choice(difficulties))
        if board.split == split:
            return board

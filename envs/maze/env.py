"""``agent_rl/Maze-v0``: walk ``@`` to ``G`` one step per turn; reward 1 on reaching the goal.

Boards come from reasoning-gym's maze generator (see ``tasks.py``); every episode of a task starts
from the same board, and ``state_key`` is a hash of the board with the player, so a cell of a maze
has one key across all episodes. Action forms and error handling: ``envs/grid_puzzle.py``.

``hint=True`` adds a line below the board, e.g. ``G: 3 down, 6 right. open: up right`` (the goal's
offset from ``@`` and the moves that do not hit a wall): a tiny model cannot find ``@`` and ``G``
in a BPE-tokenized board, but can learn from this line; the state (and ``state_key``) is the same.
``hint_style="toward"`` names the open moves that bring ``@`` closer to ``G`` instead of the offset
(``toward G: down right. open: up down right``): a model can follow the greedy route by copying a
move from the line instead of combining the offset with the open moves (greedy, not shortest: on
100 test mazes of difficulty 3, walls 0.1, 14 turns, a random move of the line solves 0.80).
"""

from __future__ import annotations

from typing import Any

from envs.grid_puzzle import DIRECTIONS, GridPuzzleEnv
from envs.maze.tasks import GOAL, LEVELS, START, Maze, sample_maze, shortest_path

SYSTEM_PROMPT = "Move @ to G through . cells; # is a wall. Reply with one move: up, down, left or right."


class MazeEnv(GridPuzzleEnv):
    description = "Maze: one step per turn (up/down/left/right); reward 1 on reaching G."
    metadata = {"render_modes": [], "tools": ("move",), "reward": "1 on reaching G"}
    system_prompt = SYSTEM_PROMPT
    tokenizer_corpus = "envs.maze.policies:corpus_conversations"  # text for the tiny tokenizer
    levels = LEVELS

    def __init__(
        self,
        difficulty: int | list[int] = 2,
        wall_density: float = 0.3,
        split: str = "train",
        max_turns: int = 20,
        use_tool: bool = False,
        hint: bool = False,
        hint_style: str = "offset",
        max_action_chars: int = 4096,
    ):
        super().__init__(difficulty, split, max_turns=max_turns, use_tool=use_tool, max_action_chars=max_action_chars)
        if not 0.0 <= wall_density < 0.6:
            raise ValueError(f"wall_density must be in [0, 0.6), got {wall_density}")
        self.wall_density = wall_density
        if hint_style not in ("offset", "toward"):
            raise ValueError(f"hint_style must be one of 'offset', 'toward', got {hint_style!r}")
        self.hint = hint  # a line below the board (next to the reply): where G is from @, the open moves
        self.hint_style = hint_style
        self._maze: Maze | None = None
        self._pos = (0, 0)

    def _new_task(self, seed: int, split: str, options: dict[str, Any]) -> tuple[str, dict, str]:
        if "task" in options:
            task = options["task"]
            self._maze = Maze(tuple(task["grid"]), task.get("difficulty", 0))
        else:
            self._maze = sample_maze(seed, split, self.difficulties, self.wall_density)
        self._pos = self._maze.find(START)
        path = shortest_path(self._maze, self._pos)
        context = "unsolvable" if path is None else f"A shortest path ({len(path)} moves): {' '.join(path)}"
        return self._maze.task_id, self._maze.to_dict(), context

    def _move(self, direction: str) -> str | None:
        dr, dc = DIRECTIONS[direction]
        nxt = (self._pos[0] + dr, self._pos[1] + dc)
        if not self._maze.open(*nxt):
            return f"cannot move {direction}: wall"
        self._pos = nxt
        return None

    def _board(self) -> str:
        return self._maze.render(self._pos)

    def _view(self) -> str:
        if not self.hint:
            return self._board()
        (r, c), (gr, gc) = self._pos, self._maze.find(GOAL)
        offset = [f"{abs(gr - r)} {'down' if gr > r else 'up'}"] if gr != r else []
        offset += [f"{abs(gc - c)} {'right' if gc > c else 'left'}"] if gc != c else []
        moves = [d for d, (dr, dc) in DIRECTIONS.items() if self._maze.open(r + dr, c + dc)]
        if self.hint_style == "toward":
            closer = [d for d in moves if any(d in part for part in offset)]
            return f"{self._board()}\ntoward G: {' '.join(closer) or 'none'}. open: {' '.join(moves)}"
        return f"{self._board()}\nG: {', '.join(offset)}. open: {' '.join(moves)}"

    def _solved(self) -> bool:
        return self._pos == self._maze.find(GOAL)

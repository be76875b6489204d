"""``agent_rl/Sokoban-v0``: push every box ($) onto a goal (.), one step per turn; reward 1 when solved.

Boards come from reasoning-gym's Sokoban generator and are re-solved by our BFS (``tasks.py``).
Every episode of a task starts from the same board; ``state_key`` is a hash of the board (player
and boxes included). A move into a wall or a push against a wall / another box is an error
observation with ``action_valid=False``. Action forms: ``envs/grid_puzzle.py``.
"""

from __future__ import annotations

from typing import Any

from envs.grid_puzzle import GridPuzzleEnv
from envs.sokoban.tasks import LEVELS, Board, State, sample_board, solution

SYSTEM_PROMPT = (
    "Sokoban: push every box $ onto a goal . by walking into it; @ is you, # a wall, - floor, "
    "* a box on a goal, + you on a goal. Reply with one move: up, down, left or right."
)


class SokobanEnv(GridPuzzleEnv):
    description = "Sokoban: one step per turn (up/down/left/right); reward 1 when every box is on a goal."
    metadata = {"render_modes": [], "tools": ("move",), "reward": "1 when every box is on a goal"}
    system_prompt = SYSTEM_PROMPT
    levels = LEVELS

    def __init__(
        self,
        difficulty: int | list[int] = 1,
        split: str = "train",
        max_turns: int = 30,
        use_tool: bool = False,
        max_action_chars: int = 4096,
    ):
        super().__init__(difficulty, split, max_turns=max_turns, use_tool=use_tool, max_action_chars=max_action_chars)
        self._board_def: Board | None = None
        self._state: State | None = None

    def _new_task(self, seed: int, split: str, options: dict[str, Any]) -> tuple[str, dict, str]:
        if "task" in options:
            task = options["task"]
            self._board_def = Board.parse(task["grid"], task.get("difficulty", 0))
        else:
            self._board_def = sample_board(seed, split, self.difficulties)
        self._state = self._board_def.start
        path = solution(self._board_def, self._state)
        context = "no solution found" if path is None else f"A shortest solution ({len(path)} moves): {' '.join(path)}"
        return self._board_def.task_id, self._board_def.to_dict(), context

    def _move(self, direction: str) -> str | None:
        nxt = self._board_def.move(self._state, direction)
        if isinstance(nxt, str):
            return nxt
        self._state = nxt
        return None

    def _board(self) -> str:
        return self._board_def.render(self._state)

    def _solved(self) -> bool:
        return self._board_def.solved(self._state)

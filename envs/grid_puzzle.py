"""Shared machinery of the step-by-step grid puzzles (``Maze-v0``, ``Sokoban-v0``).

One action moves one step. Two action forms are accepted, always:

* plain text: exactly one of ``up``, ``down``, ``left``, ``right`` (case-insensitive; surrounding
  whitespace and a trailing ``.`` are ignored), answered by a ``user`` message with the new board;
* a tool call ``<tool_call>{"name": "move", "arguments": {"direction": "up"}}</tool_call>``,
  answered by a ``tool`` message with the new board.

Anything else (garbage, two directions, an unknown tool, a move into a wall) is an error
observation with ``action_valid=False``, reward 0 and an unchanged board. ``state_key`` is a hash
of the rendered board (which includes the player, and the boxes in Sokoban), so the same position
of the same puzzle has the same key in every episode, whatever the path that led there.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, ClassVar, Literal

import gymnasium as gym
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envs.spaces import AnyText, Messages
from envs.splits import check_difficulties, check_split
from tools.base import ToolError, tool_schema
from tools.parsers import parse_action

#: direction -> (row delta, column delta)
DIRECTIONS: dict[str, tuple[int, int]] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
# (?a:...): ASCII case folding only; Unicode folding matched "rıght" (dotless i), not a direction
_PLAIN = re.compile(r"^\s*((?a:up|down|left|right))\s*\.?\s*$", re.IGNORECASE)


class MoveArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")  # one step per call: no "steps", no "path"

    direction: Literal["up", "down", "left", "right"] = Field(description="where to move one step")


class MoveTool:
    """The ``move`` tool's description (the env applies moves itself; nothing runs in a sandbox)."""

    name = "move"
    description = "Move one step: up, down, left or right; returns the new board."
    Args = MoveArgs

    @classmethod
    def direction(cls, arguments: dict[str, Any]) -> str:
        """The validated direction, or ``ToolError`` naming the allowed values."""
        try:
            return cls.Args.model_validate(arguments).direction
        except ValidationError:
            raise ToolError(
                f"invalid arguments for tool 'move': only a direction, one of {', '.join(DIRECTIONS)}"
            ) from None


def board_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_move(text: str) -> tuple[str | None, bool, str]:
    """``(direction, via_tool, error)``: a direction and how it came, or None and why not."""
    plain = _PLAIN.match(text)
    if plain:
        return plain.group(1).lower(), False, ""
    parsed = parse_action(text, fenced_code=False)
    if parsed.errors:
        return None, False, "; ".join(parsed.errors)
    if len(parsed.tool_calls) != 1:
        many = len(parsed.tool_calls) > 1
        return None, many, "one move per turn" if many else "no move"
    call = parsed.tool_calls[0]
    if call.name != MoveTool.name:
        return None, True, f"unknown tool '{call.name}'; available: {MoveTool.name}"
    try:
        return MoveTool.direction(call.arguments), True, ""
    except ToolError as e:
        return None, True, str(e)


class GridPuzzleEnv(gym.Env):
    """A one-step-per-turn puzzle. Subclasses define the task, the move rule and the rendering.

    Subclass hooks: ``_new_task(seed, split, options)`` sets the puzzle and returns
    ``(task_id, task_dict, teacher_context)``; ``_move(direction)`` applies a move and returns
    None or an error text (board unchanged); ``_board()`` renders the current board (the state;
    ``_view()``, what the agent is shown, may add lines around it);
    ``_solved()`` says whether the goal is reached.
    """

    metadata = {"render_modes": []}
    system_prompt: ClassVar[str]

    levels: ClassVar[dict]  # difficulty -> generator settings

    def __init__(self, difficulty: int | list[int], split: str, max_turns: int, use_tool: bool, max_action_chars: int):
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.difficulties = check_difficulties(difficulty, self.levels)
        self.split = check_split(split)
        self.max_turns = max_turns
        self.use_tool = use_tool  # True: the move tool is listed in info["tools"] (both forms always parse)
        self.action_space = AnyText(max_length=max_action_chars)
        self.observation_space = Messages()
        self._turn = 0
        self._ready = False

    # -- hooks ----------------------------------------------------------------------------------
    def _new_task(self, seed: int, split: str, options: dict[str, Any]) -> tuple[str, dict, str]:
        raise NotImplementedError

    def _move(self, direction: str) -> str | None:
        raise NotImplementedError

    def _board(self) -> str:
        raise NotImplementedError

    def _solved(self) -> bool:
        raise NotImplementedError

    def _view(self) -> str:
        return self._board()

    # -- the gymnasium API ----------------------------------------------------------------------
    def _state_key(self) -> str:
        return board_key(self._board())

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        task_seed = int(self.np_random.integers(2**31)) if seed is None else seed
        split = check_split(options.get("split", self.split))
        task_id, task, teacher_context = self._new_task(task_seed, split, options)
        self._turn, self._ready = 0, True
        obs = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": self._view()}]
        info = {
            "tools": [tool_schema(MoveTool)] if self.use_tool else [],
            "task_id": task_id,
            "task": task,
            "state_key": self._state_key(),
            "teacher_context": teacher_context,  # never shown to the policy
        }
        return obs, info

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return self.reset(seed=seed, options=options)

    def step(self, action: str):
        if not self._ready:
            raise RuntimeError("call reset() before step()")
        self._turn += 1
        direction, via_tool, error = parse_move(action if isinstance(action, str) else str(action))
        if direction is not None:
            error = self._move(direction) or ""
        valid = not error
        board = self._view()
        solved = valid and self._solved()
        if valid:
            content = board
        elif direction is not None:
            content = f"error: {error}. The board is unchanged:\n{board}"
        else:
            content = f"error: {error}. Reply with one of up, down, left, right."
        obs = [] if solved else [{"role": "tool" if via_tool else "user", "content": content}]
        reward = 1.0 if solved else 0.0
        truncated = not solved and self._turn >= self.max_turns
        info = {"action_valid": valid, "state_key": self._state_key(), "solved": solved, "moves": self._turn}
        return obs, reward, solved, truncated, info

    loop_safe = True  # astep is a short pure-Python step: the rollout engine runs it on its own loop

    async def astep(self, action: str):
        return self.step(action)

    def close(self):
        self._ready = False
        super().close()


def last_board(messages: list[dict], cells: str) -> list[str] | None:
    """The last board shown in a conversation: the last block of lines made of ``cells``."""
    for m in reversed(messages):
        if m["role"] in ("user", "tool"):
            block: list[str] = []
            for line in reversed(m["content"].split("\n")):
                if line and all(ch in cells for ch in line):
                    block.append(line)
                elif block:
                    break
            if block:
                return block[::-1]
    return None

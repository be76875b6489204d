"""``agent_rl/ShellTask-v0``: a long-horizon task (5-20 tool calls) in a sandbox's file tree.

At reset the task's files are written into a fresh sandbox; the agent works with the ``shell``,
``read_file`` and ``write_file`` tools (Hermes ``<tool_call>{json}</tool_call>``, several per turn
allowed, run in order) and ends with the ``submit`` tool. The reward comes from a check of the
final state, run by the env inside the sandbox (``checker.py``, fed its spec on stdin, so nothing
the agent can read or delete decides it): 1 when it passes, else 0. The check also runs when the
env's ``max_turns`` is reached without a submit (keep ``rollout.max_turns`` >= it).

``progress_reward`` > 0 adds potential-based shaping: after each turn with tool calls the check
runs and the turn earns ``progress_reward * (progress_t - progress_{t-1})``; the final turn earns
``passed - progress_reward * progress_{T-1}``, so an episode's rewards still sum to 0 or 1.

A sandbox failure raises ``InfraError`` (the episode ends as INFRA_ERROR, never scored 0).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from envs.shell_task.tasks import (
    FAMILIES,
    LEVELS,
    Task,
    check_families,
    make_task,
    sample_task,
)
from envs.splits import check_difficulties
from envs.tool_env import TaskStart, ToolEnv, TurnResult
from tools.base import Tool
from tools.files import ReadFileTool, WriteFileTool
from tools.parsers import ParsedAction
from tools.shell import ShellTool

CHECKER_SRC = (Path(__file__).parent / "checker.py").read_text()
SYSTEM_PROMPT = (
    "You work in a sandbox's work directory with the shell, read_file and write_file tools. "
    "Call submit when the task is done; the final state of the files is checked."
)


class SubmitArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubmitTool(Tool):
    """The ``submit`` tool's description (the env runs the check itself)."""

    name = "submit"
    description = "Finish: the work directory's final state is checked."
    Args = SubmitArgs
    final = True


class ShellTaskEnv(ToolEnv):
    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": [],
        "tools": ("shell", "read_file", "write_file", "submit"),
        "reward": "1 when the in-sandbox check of the final files passes (optional progress shaping)",
    }
    description = "Long-horizon file-tree tasks in a sandbox; shell/read_file/write_file/submit."
    tools = (ShellTool, ReadFileTool, WriteFileTool, SubmitTool)
    fenced_code = False
    no_action = "no tool call"
    action_hint = 'Call a tool as <tool_call>{"name": ..., "arguments": {...}}</tool_call>, or submit.'

    def __init__(
        self,
        difficulty: int | list[int] = (1, 2),
        families: str | list[str] = tuple(FAMILIES),
        split: str = "train",
        max_turns: int = 20,
        progress_reward: float = 0.0,
        sandbox_backend: str = "auto",
        tool_timeout_s: float = 5.0,
        check_timeout_s: float = 20.0,
        max_action_chars: int = 16384,
        tool_format: str = "hermes",
    ):
        self.difficulties = check_difficulties(difficulty, LEVELS)
        self.families = check_families(families)
        super().__init__(
            split=split,
            max_turns=max_turns,
            sandbox_backend=sandbox_backend,
            tool_timeout_s=tool_timeout_s,
            max_action_chars=max_action_chars,
            tool_format=tool_format,
        )
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if not 0.0 <= progress_reward <= 1.0:
            raise ValueError(f"progress_reward must be in [0, 1], got {progress_reward}")
        self.progress_reward = progress_reward
        self.check_timeout_s = check_timeout_s
        self._task: Task | None = None
        self._progress = 0.0

    async def new_task(self, seed: int | None, split: str, options: dict[str, Any]) -> TaskStart:
        if seed is None:  # replay: info["task"] of an earlier reset
            t = options["task"]
            task = make_task(t["family"], t["difficulty"], t["seed"])
        else:
            task = sample_task(seed, split, self.difficulties, self.families)
        sandbox = self.sandbox()
        for path, content in task.files.items():
            await sandbox.write_file(path, content)
        self._task, self._progress = task, 0.0
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task.instruction}]
        return TaskStart(messages, task.task_id, task.to_dict(), teacher_context=f"Solution: {task.solution}")

    def step_info(self, parsed: ParsedAction) -> dict[str, Any]:
        return {"tool_calls": len(parsed.tool_calls)}

    async def take_turn(self, text: str, parsed: ParsedAction) -> TurnResult:
        """Every call of the turn runs, in order, until a ``submit``; the check scores the submit
        (or the last turn), and with ``progress_reward`` every turn with calls."""
        turn, submitted = TurnResult(valid=not parsed.errors), False
        for call in parsed.tool_calls:
            if call.name == SubmitTool.name:
                submitted = not call.arguments
                if call.arguments:
                    turn.messages.append(self.tool_result(call, "error: submit takes no arguments"))
                    turn.valid = False
                break
            content, ok = await self.call_tool(call)
            turn.messages.append(self.tool_result(call, content))
            turn.valid = turn.valid and ok
        if not parsed.tool_calls:
            turn = self.invalid_action(parsed)
        if submitted or self.final_turn:
            result = await self._check()
            turn.reward = float(result["passed"]) - self.progress_reward * self._progress
            turn.info = {"passed": bool(result["passed"]), "check": result["detail"], "submitted": submitted}
            turn.done = submitted
        elif self.progress_reward > 0 and parsed.tool_calls:
            progress = float((await self._check())["progress"])
            turn.reward, self._progress = self.progress_reward * (progress - self._progress), progress
        if submitted:
            turn.messages = []
        return turn

    async def _check(self) -> dict:
        """Run the checker in the sandbox: ``{"passed", "progress", "detail"}``."""
        spec = json.dumps(self._task.check_spec())
        res = await self.sandbox_exec(code=CHECKER_SRC, stdin=spec, timeout_s=self.check_timeout_s)
        try:
            out = json.loads(res.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):  # the agent's files broke the check (e.g. a huge tree): a fail
            return {"passed": False, "progress": 0.0, "detail": f"check did not finish: {res.status}"}
        return out

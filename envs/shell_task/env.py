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

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from agent_rl.core.errors import InfraError
from envs.async_env import AsyncTextEnv
from envs.shell_task.tasks import (
    FAMILIES,
    LEVELS,
    Task,
    check_families,
    make_task,
    sample_task,
)
from envs.spaces import AnyText, Messages
from envs.splits import check_difficulties, check_split
from tools.base import ToolError, tool_schema
from tools.files import ReadFileTool, WriteFileTool
from tools.parsers import parse_action
from tools.shell import ShellTool

CHECKER_SRC = (Path(__file__).parent / "checker.py").read_text()
SYSTEM_PROMPT = (
    "You work in a sandbox's work directory with the shell, read_file and write_file tools. "
    "Call submit when the task is done; the final state of the files is checked."
)


class SubmitArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubmitTool:
    """The ``submit`` tool's description (the env runs the check itself)."""

    name = "submit"
    description = "Finish: the work directory's final state is checked."
    Args = SubmitArgs


class ShellTaskEnv(AsyncTextEnv):
    metadata = {
        "render_modes": [],
        "tools": ("shell", "read_file", "write_file", "submit"),
        "reward": "1 when the in-sandbox check of the final files passes (optional progress shaping)",
    }
    description = "Long-horizon file-tree tasks in a sandbox; shell/read_file/write_file/submit."

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
    ):
        self.difficulties = check_difficulties(difficulty, LEVELS)
        self.families = check_families(families)
        self.split = check_split(split)
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if not 0.0 <= progress_reward <= 1.0:
            raise ValueError(f"progress_reward must be in [0, 1], got {progress_reward}")
        self.max_turns = max_turns
        self.progress_reward = progress_reward
        self.sandbox_backend = sandbox_backend
        self.tool_timeout_s = tool_timeout_s
        self.check_timeout_s = check_timeout_s
        self.action_space = AnyText(max_length=max_action_chars)
        self.observation_space = Messages()
        self._sandbox = None
        self._tools: dict[str, Any] = {}
        self._task: Task | None = None
        self._turn = 0
        self._progress = 0.0
        self._seen: list[str] = []

    # -- the task -------------------------------------------------------------------------------
    def _state_key(self) -> str:
        return hashlib.sha256("\x00".join(self._seen).encode()).hexdigest()[:16]

    async def _new_sandbox(self):
        from sandbox import make_sandbox

        await self.aclose_resources()
        self._sandbox = make_sandbox(backend=self.sandbox_backend, timeout_s=self.tool_timeout_s)
        self._tools = {
            "shell": ShellTool(self._sandbox, timeout_s=self.tool_timeout_s),
            "read_file": ReadFileTool(self._sandbox),
            "write_file": WriteFileTool(self._sandbox),
        }

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "task" in options:  # replay: info["task"] of an earlier reset
            t = options["task"]
            task = make_task(t["family"], t["difficulty"], t["seed"])
        else:
            task_seed = int(self.np_random.integers(2**31)) if seed is None else seed
            task = sample_task(task_seed, check_split(options.get("split", self.split)), self.difficulties, self.families)
        await self._new_sandbox()
        for path, content in task.files.items():
            await self._sandbox.write_file(path, content)
        self._task, self._turn, self._progress = task, 0, 0.0
        self._seen = [task.instruction]
        obs = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task.instruction}]
        info = {
            "tools": [tool_schema(t) for t in (*self._tools.values(), SubmitTool)],
            "task_id": task.task_id,
            "task": task.to_dict(),
            "state_key": self._state_key(),
            "teacher_context": f"Solution: {task.solution}",  # never shown to the policy
        }
        return obs, info

    # -- a turn ---------------------------------------------------------------------------------
    async def _check(self) -> dict:
        """Run the checker in the sandbox: ``{"passed", "progress", "detail"}``."""
        from sandbox import ExecStatus

        spec = json.dumps(self._task.check_spec())
        res = await self._sandbox.exec(code=CHECKER_SRC, stdin=spec, timeout_s=self.check_timeout_s)
        if res.status == ExecStatus.INFRA_ERROR:
            raise InfraError(res.error or res.stderr or "sandbox infrastructure failure")
        try:
            out = json.loads(res.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):  # the agent's files broke the check (e.g. a huge tree): a fail
            return {"passed": False, "progress": 0.0, "detail": f"check did not finish: {res.status}"}
        return out

    async def _call(self, name: str, arguments: dict) -> tuple[str, bool]:
        tool = self._tools.get(name)
        if tool is None:
            return f"error: unknown tool '{name}'; available: {', '.join([*self._tools, SubmitTool.name])}", False
        try:
            return await tool(arguments), True
        except ToolError as e:
            return f"error: {e}", False

    async def astep(self, action: str):
        if self._task is None:
            raise RuntimeError("call reset() before step()")
        self._turn += 1
        parsed = parse_action(action if isinstance(action, str) else str(action), fenced_code=False)
        obs: list[dict] = []
        valid, submitted = not parsed.errors, False
        for call in parsed.tool_calls:
            if call.name == SubmitTool.name:
                submitted = not call.arguments
                if call.arguments:
                    obs.append({"role": "tool", "content": "error: submit takes no arguments"})
                    valid = False
                break
            content, ok = await self._call(call.name, call.arguments)
            obs.append({"role": "tool", "content": content})
            valid = valid and ok
        if not parsed.tool_calls:
            valid = False
            problem = "; ".join(parsed.errors) or "no tool call"
            obs.append({"role": "user", "content": f"error: {problem}. Call a tool as <tool_call>{{\"name\": ..., \"arguments\": {{...}}}}</tool_call>, or submit."})
        truncated = not submitted and self._turn >= self.max_turns
        reward, info = 0.0, {"tool_calls": len(parsed.tool_calls)}
        if submitted or truncated:
            result = await self._check()
            reward = float(result["passed"]) - self.progress_reward * self._progress
            info.update(passed=bool(result["passed"]), check=result["detail"], submitted=submitted)
        elif self.progress_reward > 0 and parsed.tool_calls:
            progress = float((await self._check())["progress"])
            reward, self._progress = self.progress_reward * (progress - self._progress), progress
        if submitted:
            obs = []
        self._seen += [m["content"] for m in obs]
        info.update(action_valid=valid, state_key=self._state_key())
        return obs, reward, submitted, truncated, info

    # -- sync API and cleanup -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return self.run_sync(self.areset(seed=seed, options=options))

    async def aclose_resources(self) -> None:
        if self._sandbox is not None:
            sandbox, self._sandbox, self._tools = self._sandbox, None, {}
            await sandbox.close()

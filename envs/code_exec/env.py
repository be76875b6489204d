"""``agent_rl/CodeExec-v0``: write a Python function for a HumanEval problem; hidden tests decide.

Turn protocol (also in the system prompt):

* ``<tool_call>{"name": "python", "arguments": {"code": ...}}</tool_call>`` runs code in the
  sandbox and answers with what it printed (as often as the turn budget allows);
* ``<tool_call>{"name": "submit", "arguments": {"code": ...}}</tool_call>``, or a reply with the
  solution in a ```python fenced block and no tool call, submits: the hidden tests (the dataset's
  ``check(candidate)``) run on it in the sandbox and the episode ends with reward 1 if they all
  pass, else 0 (``partial_credit=True``: the fraction of passing asserts, see ``harness.Grade``).

With ``mcp_servers`` (``env.options.mcp_servers: [{command, args}]``), the tools of those MCP
servers are offered too (``tools.mcp``). Anything else gets an error observation, reward 0 and
``action_valid=False``; the turn budget then truncates the episode (reward 0). Grading is
hack-proof by construction (``runner.py``); a sandbox infrastructure failure raises
``InfraError`` (INFRA_ERROR, reward None).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from pydantic import BaseModel, Field

from envs.async_env import AsyncTextEnv
from envs.code_exec.harness import Grade, grade
from envs.code_exec.tasks import SPLITS, CodeTask, by_id, task_for_seed
from envs.spaces import AnyText, Messages
from tools.base import Tool, ToolError, tool_schema
from tools.parsers import parse_action
from tools.python import PythonTool

SYSTEM_PROMPT = (
    "Write the Python function the user asks for. You may run code with the python tool to try it "
    "(one tool call per turn; you see what it prints). When your solution is ready, submit the "
    "complete code (imports, helpers and the function) with the submit tool, or reply with it in "
    "one ```python block and no tool call. The first submission is final: hidden tests decide."
)
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


class SubmitArgs(BaseModel):
    code: str = Field(description="the complete solution: imports, helpers and the function")


class SubmitTool(Tool):
    """Ends the episode: the environment grades ``code`` (it is never run as a tool)."""

    name = "submit"
    description = "Submit your final solution; hidden tests run on it and the episode ends."
    Args = SubmitArgs


def user_prompt(task: CodeTask) -> str:
    return f"Complete the function `{task.entry_point}`:\n```python\n{task.prompt}```"


class CodeExecEnv(AsyncTextEnv):
    metadata = {
        "render_modes": [],
        "tools": ("python", "submit"),
        "reward": "1 if the hidden tests pass, else 0 (partial_credit: fraction of asserts)",
    }

    def __init__(
        self,
        split: str = "train",
        max_turns: int = 4,
        partial_credit: bool = False,
        sandbox_backend: str = "auto",
        tool_timeout_s: float = 5.0,
        test_timeout_s: float = 10.0,
        memory_mb: int = 512,
        max_action_chars: int = 32768,
        mcp_servers: list[dict] | None = None,
    ):
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
        self.split = split
        self.max_turns = max_turns
        self.partial_credit = partial_credit
        self.sandbox_backend = sandbox_backend
        self.tool_timeout_s = tool_timeout_s
        self.test_timeout_s = test_timeout_s
        self.memory_mb = memory_mb
        self.mcp_servers = list(mcp_servers or [])  # extra tools from MCP servers (tools.mcp)
        self._mcp = None
        self.action_space = AnyText(max_length=max_action_chars)
        self.observation_space = Messages()
        self._sandbox = None
        self._task: CodeTask | None = None
        self._turn = 0
        self._seen: list[str] = []

    def _state_key(self) -> str:
        return hashlib.sha256("\x00".join(self._seen).encode()).hexdigest()[:16]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if self._sandbox is not None:  # a new episode starts with an empty work directory
            self._sandbox, sandbox = None, self._sandbox
            self.run_blocking(sandbox.close())
        options = options or {}
        if "task" in options:
            task = options["task"]
            task_id = task["task_id"] if isinstance(task, dict) else task
            if task_id not in by_id():
                raise ValueError(f"options.task: unknown HumanEval task {task_id!r} (HumanEval/0 .. HumanEval/163)")
            self._task = by_id()[task_id]
        else:
            task_seed = int(self.np_random.integers(2**31)) if seed is None else seed
            self._task = task_for_seed(task_seed, options.get("split", self.split))
        self._turn = 0
        obs = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user_prompt(self._task)}]
        self._seen = [obs[1]["content"]]
        info = {
            "tools": [tool_schema(PythonTool), tool_schema(SubmitTool), *self._toolbox_schemas()],
            "task_id": self._task.task_id,
            "task": self._task.to_dict(),
            "state_key": self._state_key(),
            "teacher_context": f"A correct solution:\n```python\n{self._task.reference}```",
        }
        return obs, info

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if self._sandbox is not None:
            self._sandbox, sandbox = None, self._sandbox
            await sandbox.close()
        return self.reset(seed=seed, options=options)

    async def astep(self, action: str):
        if self._task is None:
            raise RuntimeError("call reset() before step()")
        self._turn += 1
        text = action if isinstance(action, str) else str(action)
        parsed = parse_action(text, fenced_code=False)
        reward, terminated, valid = 0.0, False, True
        info: dict[str, Any] = {"tool_calls": len(parsed.tool_calls), "submitted": False}
        submission = _submission(text, parsed)
        if submission is not None:
            result = await self._grade(submission)
            reward = 1.0 if result.passed else (result.fraction if self.partial_credit else 0.0)
            terminated = True
            info.update(submitted=True, passed=result.passed, asserts_passed=result.asserts_passed,
                        asserts_total=result.asserts_total, test_status=result.status, test_error=result.error)
            obs = [{"role": "user", "content": result.summary()}]
        elif parsed.tool_calls:
            call = parsed.tool_calls[0]
            try:
                if self._mcp is not None and call.name in self._mcp.names:
                    content = await self._mcp.call(call.name, call.arguments)
                elif call.name == PythonTool.name:
                    content = await PythonTool(self._sandbox_handle(), timeout_s=self.tool_timeout_s)(call.arguments)
                else:
                    known = ", ".join(["python", "submit", *(self._mcp.names if self._mcp else [])])
                    raise ToolError(f"unknown tool '{call.name}'; available: {known}")
            except (ToolError, ValueError) as e:  # ValueError: code the sandbox refuses (NUL bytes, > 120 kB)
                content, valid = f"error: {e}", False
            obs = [{"role": "tool", "content": content}]
        else:
            valid = False
            problem = "; ".join(parsed.errors) or "no tool call and no ```python block"
            obs = [{"role": "user", "content": f"error: {problem}. Call the python tool, or submit your solution."}]
        self._seen += [m["content"] for m in obs]
        truncated = not terminated and self._turn >= self.max_turns
        info.update(action_valid=valid, state_key=self._state_key())
        return obs, reward, terminated, truncated, info

    async def _grade(self, code: str) -> Grade:
        # a sandbox of its own: files the agent wrote with the python tool do not reach the grader
        from sandbox import make_sandbox

        sandbox = make_sandbox(backend=self.sandbox_backend, timeout_s=self.tool_timeout_s, memory_mb=self.memory_mb)
        try:
            return await grade(sandbox, self._task, code, timeout_s=self.test_timeout_s)
        finally:
            await sandbox.close()

    def _toolbox_schemas(self) -> list[dict]:
        if self.mcp_servers and self._mcp is None:
            from tools.mcp import McpToolbox

            self._mcp = McpToolbox.from_config(self.mcp_servers)
        return self._mcp.schemas() if self._mcp is not None else []

    def _sandbox_handle(self):
        if self._sandbox is None:
            from sandbox import make_sandbox

            self._sandbox = make_sandbox(backend=self.sandbox_backend, timeout_s=self.tool_timeout_s, memory_mb=self.memory_mb)
        return self._sandbox

    async def aclose_resources(self) -> None:
        if self._mcp is not None:
            self._mcp, mcp = None, self._mcp
            mcp.close()
        if self._sandbox is not None:
            sandbox, self._sandbox = self._sandbox, None
            await sandbox.close()


def _submission(text: str, parsed) -> str | None:
    """The submitted code: the first ``submit`` call's code, or the last fenced block of a reply
    without tool calls. None when the action does not submit."""
    for call in parsed.tool_calls:
        if call.name == SubmitTool.name:
            code = call.arguments.get("code")
            return code if isinstance(code, str) else ""
    if not parsed.tool_calls and not parsed.errors:
        blocks = _FENCE.findall(text)
        if blocks:
            return blocks[-1]
    return None

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

import re
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from envs.code_exec.harness import Grade, grade
from envs.code_exec.tasks import SPLITS, CodeTask, by_id, task_for_seed
from envs.tool_env import TaskStart, ToolEnv, TurnResult
from sandbox import make_sandbox
from tools.base import Tool
from tools.parsers import ParsedAction
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
    final = True


def user_prompt(task: CodeTask) -> str:
    return f"Complete the function `{task.entry_point}`:\n```python\n{task.prompt}```"


class CodeExecEnv(ToolEnv):
    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": [],
        "tools": ("python", "submit"),
        "reward": "1 if the hidden tests pass, else 0 (partial_credit: fraction of asserts)",
    }
    tools = (PythonTool, SubmitTool)
    splits = SPLITS
    fenced_code = False  # a ```python block is a submission, not a python call
    no_action = "no tool call and no ```python block"
    action_hint = "Call the python tool, or submit your solution."

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
        tool_format: str = "hermes",
    ):
        super().__init__(
            split=split,
            max_turns=max_turns,
            sandbox_backend=sandbox_backend,
            tool_timeout_s=tool_timeout_s,
            max_action_chars=max_action_chars,
            sandbox_options={"memory_mb": memory_mb},
            mcp_servers=mcp_servers,
            tool_format=tool_format,
        )
        self.partial_credit = partial_credit
        self.test_timeout_s = test_timeout_s
        self.memory_mb = memory_mb
        self._task: CodeTask | None = None

    async def new_task(self, seed: int | None, split: str, options: dict[str, Any]) -> TaskStart:
        if seed is None:
            task = options["task"]
            task_id = task["task_id"] if isinstance(task, dict) else task
            if task_id not in by_id():
                raise ValueError(f"options.task: unknown HumanEval task {task_id!r} (HumanEval/0 .. HumanEval/163)")
            self._task = by_id()[task_id]
        else:
            self._task = task_for_seed(seed, split)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user_prompt(self._task)}]
        return TaskStart(
            messages,
            self._task.task_id,
            self._task.to_dict(),
            teacher_context=f"A correct solution:\n```python\n{self._task.reference}```",
        )

    def step_info(self, parsed: ParsedAction) -> dict[str, Any]:
        return {"tool_calls": len(parsed.tool_calls), "submitted": False}

    async def answer(self, text: str, parsed: ParsedAction) -> TurnResult | None:
        code = _submission(text, parsed)
        if code is None:
            return None
        result = await self._grade(code)
        reward = 1.0 if result.passed else (result.fraction if self.partial_credit else 0.0)
        info = {
            "submitted": True,
            "passed": result.passed,
            "asserts_passed": result.asserts_passed,
            "asserts_total": result.asserts_total,
            "test_status": result.status,
            "test_error": result.error,
        }
        return TurnResult([{"role": "user", "content": result.summary()}], reward, done=True, info=info)

    async def _grade(self, code: str) -> Grade:
        # a sandbox of its own: files the agent wrote with the python tool do not reach the grader

        sandbox = make_sandbox(backend=self.sandbox_backend, timeout_s=self.tool_timeout_s, memory_mb=self.memory_mb)
        try:
            return await grade(sandbox, self._task, code, timeout_s=self.test_timeout_s)
        finally:
            await sandbox.close()


def _submission(text: str, parsed: ParsedAction) -> str | None:
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

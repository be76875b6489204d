"""``agent_rl/MathTool-v0``: procedural math problems from reasoning-gym, a python tool, math-verify.

Turn protocol: the agent calls the ``python`` tool (``<tool_call>{json}</tool_call>`` or a fenced
code block) and sees what the code printed, or answers ``<answer>X</answer>`` with one final value
(an integer, a decimal, or a fraction ``a/b`` — in lowest terms when simplifying). An answer ends
the episode: reward 1 when math-verify finds it equal to the generator's answer, else 0. Several
``<answer>`` tags, several values or an unevaluated expression score 0 (see ``grading``). Anything
else gets an error observation, reward 0 and ``action_valid=False``; the turn budget then truncates.
A sandbox failure raises ``InfraError`` (the engine ends the episode as INFRA_ERROR, unscored).
"""

from __future__ import annotations

import hashlib
from typing import Any

from agent_rl.core.errors import InfraError
from envs.async_env import AsyncTextEnv
from envs.math_tool.grading import grade
from envs.math_tool.tasks import (
    GENERATORS,
    Problem,
    check_choices,
    make_problem,
    sample_problem,
    solution_code,
)
from envs.spaces import AnyText, Messages
from envs.splits import check_split
from tools.base import ToolError, tool_schema
from tools.parsers import parse_action
from tools.python import PythonTool

SYSTEM_PROMPT = "Use the python tool if it helps, then reply <answer>X</answer>: one number, or a fraction a/b in lowest terms."
ANSWER_HINT = "Call the python tool or reply <answer>VALUE</answer>."


class MathToolEnv(AsyncTextEnv):
    metadata = {
        "render_modes": [],
        "tools": ("python",),
        "reward": "1 when math-verify finds the one <answer> equal to the solution, else 0",
    }
    description = "reasoning-gym math problems; python tool; math-verify checks the <answer>."
    tokenizer_corpus = "envs.math_tool.policies:corpus_conversations"  # text for the tiny tokenizer

    def __init__(
        self,
        generators: str | list[str] = tuple(GENERATORS),
        difficulty: int | list[int] = (1, 2),
        split: str = "train",
        max_turns: int = 4,
        sandbox_backend: str = "auto",
        tool_timeout_s: float = 5.0,
        max_action_chars: int = 4096,
        sandbox_options: dict[str, Any] | None = None,
    ):
        self.generators = (generators,) if isinstance(generators, str) else tuple(generators)
        self.difficulties = (difficulty,) if isinstance(difficulty, int) else tuple(difficulty)
        check_choices(self.generators, self.difficulties)
        self.split = check_split(split)
        self.max_turns = max_turns
        self.sandbox_backend = sandbox_backend
        self.tool_timeout_s = tool_timeout_s
        self.sandbox_options = dict(sandbox_options or {})  # backend options (docker: image, base_url, pool_size)
        self.action_space = AnyText(max_length=max_action_chars)
        self.observation_space = Messages()
        self._sandbox = None
        self._tool: PythonTool | None = None
        self._problem: Problem | None = None
        self._turn = 0
        self._seen: list[str] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "task" in options:
            self._problem = make_problem(options["task"])
        else:
            task_seed = int(self.np_random.integers(2**31)) if seed is None else seed
            split = options.get("split", self.split)
            self._problem = sample_problem(task_seed, split, self.generators, self.difficulties)
        self._turn = 0
        self._seen = [self._problem.question]
        obs = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": self._problem.question}]
        code = solution_code(self._problem.question)
        info = {
            "tools": [tool_schema(PythonTool)],
            "task_id": self._problem.task_id,
            "task": self._problem.to_dict(),
            "state_key": self._state_key(),
            # privileged view for self-distillation teachers (never shown to the policy)
            "teacher_context": f"Verified answer: {self._problem.answer}"
            + (f"; python that prints it: {code}" if code else ""),
        }
        return obs, info

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return self.reset(seed=seed, options=options)

    def _state_key(self) -> str:
        return hashlib.sha256("\x00".join(self._seen).encode()).hexdigest()[:16]

    async def astep(self, action: str):
        if self._problem is None:
            raise RuntimeError("call reset() before step()")
        self._turn += 1
        text = action if isinstance(action, str) else str(action)
        parsed = parse_action(text)
        reward, terminated, valid, obs = 0.0, False, True, []
        info: dict[str, Any] = {"tool_calls": 0, "answered": False}
        if parsed.tool_calls:
            info["tool_calls"] = 1
            content, valid = await self._run_tool(parsed.tool_calls[0])
            obs = [{"role": "tool", "content": content}]
        elif parsed.answer is not None:
            n_answers = text.count("<answer>")
            result = grade(parsed.answer, self._problem.answer, self._problem.answer_kind)
            correct = result.correct and n_answers == 1
            reason = result.reason if n_answers == 1 else f"{n_answers} <answer> tags; one final answer is scored"
            reward, terminated = (1.0 if correct else 0.0), True
            info.update(answered=True, correct=correct, grade=reason)
        else:
            valid = False
            problem = "; ".join(parsed.errors) or "no tool call and no <answer>...</answer>"
            obs = [{"role": "user", "content": f"error: {problem}. {ANSWER_HINT}"}]
        self._seen += [m["content"] for m in obs]
        truncated = not terminated and self._turn >= self.max_turns
        info.update(action_valid=valid, state_key=self._state_key())
        return obs, reward, terminated, truncated, info

    async def _run_tool(self, call) -> tuple[str, bool]:
        """The tool's output (or an error message) and whether the call was valid."""
        try:
            if call.name != PythonTool.name:
                raise ToolError(f"unknown tool '{call.name}'; available: {PythonTool.name}")
            return await self._python()(call.arguments), True
        except ToolError as e:
            return f"error: {e}", False

    def _python(self) -> PythonTool:
        if self._tool is None:
            from sandbox import make_sandbox

            try:
                self._sandbox = make_sandbox(
                    backend=self.sandbox_backend, timeout_s=self.tool_timeout_s, **self.sandbox_options
                )
            except (OSError, RuntimeError) as e:  # no usable backend here: infrastructure, not the agent
                raise InfraError(f"cannot start a '{self.sandbox_backend}' sandbox: {e}") from e
            self._tool = PythonTool(self._sandbox, timeout_s=self.tool_timeout_s)
        return self._tool

    async def aclose_resources(self) -> None:
        if self._sandbox is not None:
            sandbox, self._sandbox, self._tool = self._sandbox, None, None
            await sandbox.close()



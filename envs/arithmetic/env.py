"""``agent_rl/Arithmetic-v0``: answer an arithmetic question, optionally using a python tool.

Turn protocol: the agent either calls the ``python`` tool (``<tool_call>{json}</tool_call>`` or
a fenced code block) and receives what it printed, or answers ``<answer>N</answer>``, which ends
the episode with reward 1 for the right number and 0 otherwise. Anything else (garbage, a
malformed call, an unknown tool) gets an error observation, reward 0 and ``action_valid=False``;
the turn budget then truncates the episode.
"""

from __future__ import annotations

import hashlib
from typing import Any

from envs.arithmetic.tasks import LEVELS, SPLITS, Problem, make_problem, sample_problem
from envs.async_env import AsyncTextEnv
from envs.spaces import AnyText, Messages
from tools.base import ToolError, tool_schema
from tools.parsers import parse_action
from tools.python import PythonTool

SYSTEM_PROMPT = "Use the python tool if it helps, then reply <answer>N</answer>."


def question_text(expression: str) -> str:
    return f"What is {expression}?"


class ArithmeticEnv(AsyncTextEnv):
    metadata = {"render_modes": [], "tools": ("python",), "reward": "1 for the right <answer>, else 0"}
    description = "Arithmetic question; a python tool; reward 1 for the right <answer>."
    sft_teacher = "envs.arithmetic.policies:weak_teacher"  # the scripted policy `agent-rl sft` imitates

    def __init__(
        self,
        difficulty: int | list[int] = (1, 2, 3),
        split: str = "train",
        max_turns: int = 4,
        sandbox_backend: str = "auto",
        tool_timeout_s: float = 5.0,
        max_action_chars: int = 4096,
        use_tool: bool = True,
    ):
        self.difficulties = (difficulty,) if isinstance(difficulty, int) else tuple(difficulty)
        for d in self.difficulties:
            if d not in LEVELS:
                raise ValueError(f"unknown difficulty {d}; known: {sorted(LEVELS)}")
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
        self.split = split
        self.use_tool = use_tool  # False: a single question, no system prompt and no tools
        self.max_turns = max_turns
        self.sandbox_backend = sandbox_backend
        self.tool_timeout_s = tool_timeout_s
        self.action_space = AnyText(max_length=max_action_chars)
        self.observation_space = Messages()
        self._sandbox = None
        self._tool: PythonTool | None = None
        self._problem: Problem | None = None
        self._turn = 0
        self._seen: list[str] = []

    # -- the task -------------------------------------------------------------------------------
    def _tools(self) -> list[dict]:
        return [tool_schema(PythonTool)] if self.use_tool else []

    def _state_key(self) -> str:
        return hashlib.sha256("\x00".join(self._seen).encode()).hexdigest()[:16]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "task" in options:
            task = options["task"]
            self._problem = make_problem(task["expression"], task.get("difficulty", 0))
        else:
            task_seed = int(self.np_random.integers(2**31)) if seed is None else seed
            self._problem = sample_problem(task_seed, options.get("split", self.split), self.difficulties)
        self._turn = 0
        question = question_text(self._problem.expression)
        self._seen = [question]
        obs = [{"role": "user", "content": question}]
        if self.use_tool:
            obs.insert(0, {"role": "system", "content": SYSTEM_PROMPT})
        info = {
            "tools": self._tools(),
            "task_id": self._problem.task_id,
            "task": self._problem.to_dict(),
            "state_key": self._state_key(),
            # the verified solution, for self-distillation teachers (never shown to the policy)
            "teacher_context": f"Verified solution: {self._problem.expression} = {self._problem.answer}",
        }
        return obs, info

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return self.reset(seed=seed, options=options)

    # -- a turn ---------------------------------------------------------------------------------
    async def astep(self, action: str):
        if self._problem is None:
            raise RuntimeError("call reset() before step()")
        self._turn += 1
        parsed = parse_action(action if isinstance(action, str) else str(action))
        reward, terminated, valid = 0.0, False, True
        info: dict[str, Any] = {"tool_calls": 0, "answered": False}
        if parsed.answer is not None and not parsed.tool_calls:
            correct = _as_int(parsed.answer) == self._problem.answer
            reward, terminated = (1.0 if correct else 0.0), True
            info.update(answered=True, correct=correct)
            obs: list[dict] = []
        elif parsed.tool_calls and self.use_tool:
            call = parsed.tool_calls[0]
            info["tool_calls"] = 1
            try:
                if call.name != PythonTool.name:
                    raise ToolError(f"unknown tool '{call.name}'; available: {PythonTool.name}")
                content = await self._python()(call.arguments)
            except ToolError as e:
                content, valid = f"error: {e}", False
            obs = [{"role": "tool", "content": content}]
        else:
            valid = False
            problem = "; ".join(parsed.errors) or "no tool call and no <answer>...</answer>"
            obs = [{"role": "user", "content": f"error: {problem}. Call the python tool or reply <answer>NUMBER</answer>."}]
        self._seen += [m["content"] for m in obs]
        truncated = not terminated and self._turn >= self.max_turns
        info.update(action_valid=valid, state_key=self._state_key())
        return obs, reward, terminated, truncated, info

    def _python(self) -> PythonTool:
        if self._tool is None:
            from sandbox import make_sandbox

            self._sandbox = make_sandbox(backend=self.sandbox_backend, timeout_s=self.tool_timeout_s)
            self._tool = PythonTool(self._sandbox, timeout_s=self.tool_timeout_s)
        return self._tool

    async def aclose_resources(self) -> None:
        if self._sandbox is not None:
            sandbox, self._sandbox, self._tool = self._sandbox, None, None
            await sandbox.close()


def _as_int(text: str) -> int | None:
    try:
        return int(text.strip().replace(",", ""))
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            return None
        return int(value) if value.is_integer() else None

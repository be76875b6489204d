"""``agent_rl/Arithmetic-v0``: answer an arithmetic question, optionally using a python tool.

Turn protocol: the agent either calls the ``python`` tool (``<tool_call>{json}</tool_call>`` or
a fenced code block) and receives what it printed, or answers ``<answer>N</answer>``, which ends
the episode with reward 1 for the right number and 0 otherwise. Anything else (garbage, a
malformed call, an unknown tool) gets an error observation, reward 0 and ``action_valid=False``;
the turn budget then truncates the episode.
"""

from __future__ import annotations

from typing import Any, ClassVar

from envs.arithmetic.tasks import (
    LEVELS,
    SPLITS,
    make_problem,
    sample_problem,
    subproblems,
)
from envs.splits import check_difficulties
from envs.tool_env import TaskStart, ToolEnv
from tools.base import tool_schema  # noqa: F401 - read as envs.arithmetic.env.tool_schema
from tools.python import PythonTool

SYSTEM_PROMPT = "Use the python tool if it helps, then reply <answer>N</answer>."


def question_text(expression: str) -> str:
    return f"What is {expression}?"


class ArithmeticEnv(ToolEnv):
    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": [],
        "tools": ("python",),
        "reward": "1 for the right <answer>, else 0",
    }
    description = "Arithmetic question; a python tool; reward 1 for the right <answer>."
    sft_teacher = "envs.arithmetic.policies:weak_teacher"  # the scripted policy `agent-rl sft` imitates
    tools = (PythonTool,)
    splits = SPLITS
    action_hint = "Call the python tool or reply <answer>NUMBER</answer>."

    def __init__(
        self,
        difficulty: int | list[int] = (1, 2, 3),
        split: str = "train",
        max_turns: int = 4,
        sandbox_backend: str = "auto",
        tool_timeout_s: float = 5.0,
        max_action_chars: int = 4096,
        use_tool: bool = True,
        tool_format: str = "hermes",
    ):
        self.difficulties = check_difficulties(difficulty, LEVELS)
        self.use_tool = use_tool  # False: a single question, no system prompt and no tools
        if not use_tool:
            self.tools = ()
        super().__init__(
            split=split,
            max_turns=max_turns,
            sandbox_backend=sandbox_backend,
            tool_timeout_s=tool_timeout_s,
            max_action_chars=max_action_chars,
            tool_format=tool_format,
        )
        self._problem = None

    async def new_task(self, seed: int | None, split: str, options: dict[str, Any]) -> TaskStart:
        if seed is None:
            task = options["task"]
            self._problem = make_problem(task["expression"], task.get("difficulty", 0))
        else:
            self._problem = sample_problem(seed, split, self.difficulties)
        p = self._problem
        system = [{"role": "system", "content": SYSTEM_PROMPT}] if self.use_tool else []
        # the verified solution, for self-distillation teachers (never shown to the policy)
        return TaskStart(
            system + [{"role": "user", "content": question_text(p.expression)}],
            p.task_id,
            p.to_dict(),
            teacher_context=f"Verified solution: {p.expression} = {p.answer}",
        )

    @staticmethod
    def subproblems(task: dict[str, Any]) -> list[dict[str, str]]:
        """Verifiable sub-problems of ``task`` (its ``info["task"]``), easiest first, the last the task
        itself (the ``scrl`` opt-in): every operation of the expression in evaluation order, each with
        the value the env computed (never a generator's claim)."""
        return [{"question": question_text(q), "answer": str(a)} for q, a in subproblems(task["expression"])]

    async def score(self, answer: str, text: str) -> tuple[float, dict[str, Any]]:
        correct = _as_int(answer) == self._problem.answer
        return (1.0 if correct else 0.0), {"correct": correct}


def _as_int(text: str) -> int | None:
    try:
        return int(text.strip().replace(",", ""))
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            return None
        return int(value) if value.is_integer() else None

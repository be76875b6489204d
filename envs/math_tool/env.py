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

from typing import Any, ClassVar

from envs.math_tool.grading import grade
from envs.math_tool.tasks import (
    GENERATORS,
    check_choices,
    make_problem,
    sample_problem,
    solution_code,
)
from envs.tool_env import TaskStart, ToolEnv
from tools.python import PythonTool

SYSTEM_PROMPT = (
    "Use the python tool if it helps, then reply <answer>X</answer>: one number, or a fraction a/b in lowest terms."
)
ANSWER_HINT = "Call the python tool or reply <answer>VALUE</answer>."


class MathToolEnv(ToolEnv):
    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": [],
        "tools": ("python",),
        "reward": "1 when math-verify finds the one <answer> equal to the solution, else 0",
    }
    description = "reasoning-gym math problems; python tool; math-verify checks the <answer>."
    tokenizer_corpus = "envs.math_tool.policies:corpus_conversations"  # text for the tiny tokenizer
    tools = (PythonTool,)
    action_hint = ANSWER_HINT

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
        tool_format: str = "hermes",
    ):
        self.generators = (generators,) if isinstance(generators, str) else tuple(generators)
        self.difficulties = (difficulty,) if isinstance(difficulty, int) else tuple(difficulty)
        check_choices(self.generators, self.difficulties)
        super().__init__(
            split=split,
            max_turns=max_turns,
            sandbox_backend=sandbox_backend,
            tool_timeout_s=tool_timeout_s,
            max_action_chars=max_action_chars,
            sandbox_options=sandbox_options,
            tool_format=tool_format,
        )
        self._problem = None

    async def new_task(self, seed: int | None, split: str, options: dict[str, Any]) -> TaskStart:
        if seed is None:
            self._problem = make_problem(options["task"])
        else:
            self._problem = sample_problem(seed, split, self.generators, self.difficulties)
        p = self._problem
        code = solution_code(p.question)
        # privileged view for self-distillation teachers (never shown to the policy)
        teacher = f"Verified answer: {p.answer}" + (f"; python that prints it: {code}" if code else "")
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": p.question}]
        return TaskStart(messages, p.task_id, p.to_dict(), teacher_context=teacher)

    async def score(self, answer: str, text: str) -> tuple[float, dict[str, Any]]:
        n_answers = text.count("<answer>")
        result = grade(answer, self._problem.answer, self._problem.answer_kind)
        correct = result.correct and n_answers == 1
        reason = result.reason if n_answers == 1 else f"{n_answers} <answer> tags; one final answer is scored"
        return (1.0 if correct else 0.0), {"correct": correct, "grade": reason}

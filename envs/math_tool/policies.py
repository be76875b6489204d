"""Scripted policies for MathTool-v0: an oracle and an imperfect weak teacher.

Both map the conversation so far to the assistant's next text, in the env's tool-call format
(``tool_format``, bound by ``agent-rl sft`` / ``eval`` to the run's). The oracle writes Python for the
question, runs it with the tool and answers what it printed. The weak teacher, like real
demonstration data, often answers at once "in its head": right when the answer is small, with a
wrong digit when the answer has three or more digits in a row. Fine-tuning on it gives a policy
that reinforcement learning can improve by using the tool more.
"""

from __future__ import annotations

import random
import re

from envs.math_tool.env import SYSTEM_PROMPT
from envs.math_tool.tasks import (
    DIFFICULTIES,
    GENERATORS,
    format_value,
    sample_problem,
    solution_code,
    solve,
)
from tools.base import ToolCall, tool_schema
from tools.formats import get_format
from tools.python import PythonTool


def tool_call_text(code: str, tool_format: str = "hermes") -> str:
    return get_format(tool_format).render_calls([ToolCall("python", {"code": code})])


def answer_text(value: str, tool_format: str = "hermes") -> str:
    return get_format(tool_format).render_reply(f"<answer>{value}</answer>")


def _question(messages: list[dict]) -> str | None:
    for m in messages:
        if m["role"] == "user":
            return m["content"]
    return None


def oracle(messages: list[dict], rng: random.Random | None = None, *, tool_format: str = "hermes") -> str:
    """Run the question's Python with the tool, then answer with what it printed."""
    last = messages[-1]
    if get_format(tool_format).is_result(last):
        return answer_text(last["content"].strip(), tool_format)
    code = solution_code(_question(messages) or "")
    return tool_call_text(code, tool_format) if code else answer_text("0", tool_format)


def mental_answer(question: str, rng: random.Random) -> str:
    """The teacher's answer without the tool: exact when small, one digit off in long numbers."""
    value = solve(question)
    if value is None:
        return "0"
    text = format_value(value)
    long_runs = [m for m in re.finditer(r"\d{3,}", text)]
    if not long_runs:
        return text
    run = rng.choice(long_runs)
    i = rng.randrange(run.start(), run.end())
    wrong_digit = str((int(text[i]) + rng.randint(1, 9)) % 10)
    return text[:i] + wrong_digit + text[i + 1 :]


def weak_teacher(
    messages: list[dict], rng: random.Random, p_direct: float = 0.5, *, tool_format: str = "hermes"
) -> str:
    """Like ``oracle``, but with probability ``p_direct`` answers at once from mental math."""
    last = messages[-1]
    if get_format(tool_format).is_result(last):
        return answer_text(last["content"].strip(), tool_format)
    question = _question(messages) or ""
    if rng.random() < p_direct:
        return answer_text(mental_answer(question, rng), tool_format)
    code = solution_code(question)
    return tool_call_text(code, tool_format) if code else answer_text(mental_answer(question, rng), tool_format)


def corpus_conversations(n: int, rng: random.Random):
    """Conversations for training the tiny tokenizer: (messages, tools) of both policies' kinds."""

    tools = [tool_schema(PythonTool)]
    generators = tuple(GENERATORS)
    for i in range(n):
        p = sample_problem(rng.randrange(2**31), "train", generators, DIFFICULTIES)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": p.question}]
        if i % 2:
            code = solution_code(p.question)
            messages += [{"role": "assistant", "content": tool_call_text(code)}, {"role": "tool", "content": p.answer}]
        messages.append({"role": "assistant", "content": answer_text(p.answer)})
        yield messages, tools

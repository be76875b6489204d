"""Scripted policies for Arithmetic-v0: an oracle and an imperfect weak teacher.

Both map the conversation so far (a list of messages) to the assistant's next text, written in the
env's tool-call format (``tool_format``, bound by ``agent-rl sft`` / ``eval`` to the run's). The weak
teacher is like real demonstration data: it often answers without the tool, and then gets large
numbers wrong; supervised fine-tuning on it gives a policy that reinforcement learning can beat.
"""

from __future__ import annotations

import random
import re

from envs.arithmetic.env import SYSTEM_PROMPT, question_text
from envs.arithmetic.tasks import sample_problem
from tools.base import ToolCall, tool_schema
from tools.formats import get_format
from tools.python import PythonTool

_QUESTION = re.compile(r"What is ([0-9+\-*]+)\?")


def tool_call_text(expression: str, tool_format: str = "hermes") -> str:
    return get_format(tool_format).render_calls([ToolCall("python", {"code": f"print({expression})"})])


def answer_text(value: str | int, tool_format: str = "hermes") -> str:
    return get_format(tool_format).render_reply(f"<answer>{value}</answer>")


def _question(messages: list[dict]) -> str | None:
    for m in messages:
        if m["role"] == "user":
            found = _QUESTION.search(m["content"])
            if found:
                return found.group(1)
    return None


def oracle(messages: list[dict], rng: random.Random | None = None, *, tool_format: str = "hermes") -> str:
    """Call the python tool on the question, then answer with what it printed."""
    last = messages[-1]
    if get_format(tool_format).is_result(last):
        return answer_text(last["content"].strip(), tool_format)
    expression = _question(messages)
    return tool_call_text(expression, tool_format) if expression else answer_text(0, tool_format)


def _mental_arithmetic(value: int, rng: random.Random) -> int:
    """The teacher's answer without the tool: right for small numbers, off for large ones."""
    if abs(value) < 100:
        return value
    digits = list(str(abs(value)))
    i = rng.randrange(len(digits))
    digits[i] = str((int(digits[i]) + rng.randint(1, 9)) % 10)
    wrong = int("".join(digits)) * (1 if value >= 0 else -1)
    return wrong if wrong != value else value + 1


def weak_teacher(
    messages: list[dict], rng: random.Random, p_direct: float = 0.5, *, tool_format: str = "hermes"
) -> str:
    """Like ``oracle``, but with probability ``p_direct`` answers at once from mental arithmetic."""
    last = messages[-1]
    if get_format(tool_format).is_result(last):
        return answer_text(last["content"].strip(), tool_format)
    expression = _question(messages)
    if expression is None:
        return answer_text(0, tool_format)
    if rng.random() < p_direct:
        value = int(eval(expression, {"__builtins__": {}}))  # noqa: S307 (digits/ops only)
        return answer_text(_mental_arithmetic(value, rng), tool_format)
    return tool_call_text(expression, tool_format)


def corpus_conversations(n: int, rng: random.Random):
    """Conversations for training the tiny tokenizer: (messages, tools) pairs of both policies."""

    tools = [tool_schema(PythonTool)]
    for i in range(n):
        p = sample_problem(rng.randrange(2**31), "train", (1, 2, 3, 4, 5))
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": question_text(p.expression)},
        ]
        if i % 2:
            messages += [
                {"role": "assistant", "content": tool_call_text(p.expression)},
                {"role": "tool", "content": str(p.answer)},
            ]
        messages.append({"role": "assistant", "content": answer_text(p.answer)})
        yield messages, tools

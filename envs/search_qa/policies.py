"""Scripted policies for SearchQA-v0: an oracle (two searches, then the answer) and a weak teacher
that often answers after the first search with a guess, like real demonstration data."""

from __future__ import annotations

import random

from envs.search_qa.env import SYSTEM_PROMPT, SearchTool
from envs.search_qa.kb import Question, knowledge_base
from tools.base import ToolCall, tool_schema
from tools.formats import get_format


def search_text(query: str, tool_format: str = "hermes") -> str:
    return get_format(tool_format).render_calls([ToolCall("search", {"query": query})])


def answer_text(value: str, tool_format: str = "hermes") -> str:
    return get_format(tool_format).render_reply(f"<answer>{value}</answer>")


def _question(messages: list[dict]) -> Question | None:
    text = next((m["content"] for m in messages if m["role"] == "user"), None)
    return next((q for q in knowledge_base().questions if q.question == text), None)


def _searches(messages: list[dict], tool_format: str) -> int:
    return sum(get_format(tool_format).is_result(m) for m in messages)


def oracle(messages: list[dict], rng: random.Random | None = None, *, tool_format: str = "hermes") -> str:
    """Search the named entity, then the bridge entity, then answer: reward 1 on every question."""
    q = _question(messages)
    if q is None:
        return answer_text("unknown", tool_format)
    n = _searches(messages, tool_format)
    return search_text((q.entity, q.bridge)[n], tool_format) if n < 2 else answer_text(q.answer, tool_format)


def weak_teacher(messages: list[dict], rng: random.Random, p_guess: float = 0.5, *, tool_format: str = "hermes") -> str:
    """Like ``oracle``, but with probability ``p_guess`` answers after the first search with a guess
    (an answer of the same kind to a random question)."""
    q = _question(messages)
    if q is not None and _searches(messages, tool_format) == 1 and rng.random() < p_guess:
        return answer_text(rng.choice(knowledge_base().questions).answer, tool_format)
    return oracle(messages, rng, tool_format=tool_format)


def corpus_conversations(n: int, rng: random.Random):
    """Conversations for training the tiny tokenizer: the oracle's episodes."""

    kb = knowledge_base()
    tools = [tool_schema(SearchTool)]
    for _ in range(n):
        q = rng.choice(kb.questions)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": q.question}]
        for entity in (q.entity, q.bridge):
            messages += [
                {"role": "assistant", "content": search_text(entity)},
                {
                    "role": "tool",
                    "content": "\n".join(f"[doc {d.doc_id}] {d.title}: {d.text}" for d in kb.search(entity, 3)),
                },
            ]
        messages.append({"role": "assistant", "content": answer_text(q.answer)})
        yield messages, tools

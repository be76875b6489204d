"""Scripted policies for the BFCL envs (``eval.policy=envs.bfcl.policies:replay``).

Each maps the conversation so far to the assistant's next text, in the env's tool-call format
(``tool_format``, bound by ``agent-rl sft`` / ``eval``). They find their task by the session tag of
the system prompt (``envs.bfcl.data.session_of``).

* ``replay``: the ground truth. Multi-turn: each user turn's ground-truth calls in one message, then
  ``<answer>done</answer>``; single-turn: the first allowed value of every parameter the answer
  requires (no call on irrelevance tasks). Must score 1.0;
* ``no_op``: never calls (``<answer>`` only): 0, except 1.0 on the irrelevance categories;
* ``call_everything``: calls every offered function with placeholder arguments, then replies: ~0.
"""

from __future__ import annotations

import functools
import random
import re
from typing import Any

from envs.bfcl.apis import keyword_args
from envs.bfcl.calls import BfclCallsEnv
from envs.bfcl.data import call_tasks, function_docs, multi_turn_tasks, parse_call, session_of, tool_schema
from envs.bfcl.multi_turn import BfclMultiTurnEnv
from tools.base import ToolCall
from tools.formats import get_format

_SESSION = re.compile(r"Session ([0-9a-f]{10})\.")
_PLACEHOLDER = {"string": "x", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}


@functools.cache
def _tasks_by_session() -> dict[str, Any]:
    return {session_of(t.task_id): t for t in (*multi_turn_tasks(), *call_tasks())}


def task_of(messages: list[dict]) -> Any:
    """The multi-turn or single-turn task whose session tag the system prompt carries, or None."""
    for m in messages:
        if m["role"] == "system":
            found = _SESSION.search(m["content"])
            if found:
                return _tasks_by_session().get(found.group(1))
    return None


def _answered(message: dict) -> bool:
    return message["role"] == "assistant" and "<answer>" in str(message.get("content", ""))


def _position(messages: list[dict]) -> tuple[int, bool]:
    """(the current user turn: replies given so far, whether the assistant acted in this turn)."""
    turn, acted = 0, False
    for m in messages:
        if _answered(m):
            turn, acted = turn + 1, False
        elif m["role"] == "assistant":
            acted = True
    return turn, acted


def _reply(text: str, tool_format: str) -> str:
    return get_format(tool_format).render_reply(f"<answer>{text}</answer>")


def _first(allowed: list, required: bool) -> tuple[bool, Any]:
    """(whether to pass the parameter, its value): the first allowed value, a dict's or a list of
    dicts' keys each given their own first allowed value; a parameter the answer marks optional
    (``""``) is left out unless the function doc requires it."""
    values = [v for v in allowed if v != ""]
    if not values:
        return (required and bool(allowed)), ""
    if "" in allowed and not required:
        return False, None
    value = values[0]

    def fill(d: dict) -> dict:
        return {k: vs[0] for k, vs in d.items() if vs and "" not in vs}

    if isinstance(value, dict):
        return True, fill(value)
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return True, [fill(v) for v in value]
    return True, value


def _truth_calls(task: Any) -> list[ToolCall]:
    """A single-turn task's ground truth: for every answer entry, the first allowed value of each
    parameter (see ``_first``)."""
    docs = {f["name"]: f for f in task.functions}
    calls = []
    for entry in task.answer:
        ((name, params),) = entry.items()
        required = set(docs.get(name, {}).get("parameters", {}).get("required", []))
        args = {}
        for p, allowed in params.items():
            give, value = _first(allowed, p in required)
            if give:
                args[p] = value
        calls.append(ToolCall(name, args))
    return calls


def replay(messages: list[dict], rng: random.Random | None = None, *, tool_format: str = "hermes") -> str:
    """The ground truth: BFCL's calls of each user turn, then a reply."""
    fmt, task = get_format(tool_format), task_of(messages)
    if task is None:
        return _reply("I cannot tell which task this is.", tool_format)
    if not hasattr(task, "ground_truth"):  # single-turn
        calls = _truth_calls(task)
        return fmt.render_calls(calls) if calls else _reply("None of the functions fits this request.", tool_format)
    turn, acted = _position(messages)
    truth = task.ground_truth[turn] if turn < len(task.ground_truth) else ()
    if acted or not truth:
        return _reply(
            "Done." if truth else "I cannot do that with the functions I have; please tell me more.", tool_format
        )
    calls = []
    for text in truth:
        name, args, kwargs = parse_call(text)
        calls.append(ToolCall(name, keyword_args(task, name, args, kwargs)))
    return fmt.render_calls(calls)


def no_op(messages: list[dict], rng: random.Random | None = None, *, tool_format: str = "hermes") -> str:
    """Never calls a function."""
    return _reply("I would rather not call any function.", tool_format)


def _placeholders(schema: dict) -> dict[str, Any]:
    props = schema["function"]["parameters"].get("properties", {})
    return {
        p: _PLACEHOLDER.get(props[p].get("type", "string"), "x")
        for p in schema["function"]["parameters"].get("required", [])
        if p in props
    }


def call_everything(messages: list[dict], rng: random.Random | None = None, *, tool_format: str = "hermes") -> str:
    """Every function of the task once per user turn, with placeholder arguments; then a reply."""
    fmt, task = get_format(tool_format), task_of(messages)
    if task is None:
        return _reply("?", tool_format)
    if hasattr(task, "ground_truth"):
        turn, acted = _position(messages)
        if acted:
            return _reply("Done.", tool_format)
        held_out = {n for names in task.missed.values() for n in names}
        schemas = [tool_schema(d) for c in task.classes for d in function_docs(c) if d["name"] not in held_out]
    else:
        schemas = [tool_schema(d) for d in task.functions]
    return fmt.render_calls([ToolCall(s["function"]["name"], _placeholders(s)) for s in schemas])


def call_conversations(n: int, rng: random.Random):
    """Single-turn train tasks answered by the ground truth, for the tiny tokenizer
    (``init-model --env agent_rl/BFCL-Calls-v0``)."""

    tasks = [t for t in call_tasks() if t.split == "train"]
    env = BfclCallsEnv(split="train")
    for _ in range(n):
        messages, info = env.reset(options={"task": rng.choice(tasks).task_id})
        yield [*messages, {"role": "assistant", "content": replay(messages)}], info["tools"]


def corpus_conversations(n: int, rng: random.Random):
    """Ground-truth conversations of train tasks, for the tiny tokenizer (``init-model --env``)."""

    env = BfclMultiTurnEnv(split="train")
    try:
        for i in range(n):
            messages, info = env.reset(seed=rng.randrange(2**31))
            for _ in range(6):
                action = replay(messages)
                messages = messages + [{"role": "assistant", "content": action}]
                obs, _, terminated, truncated, _ = env.step(action)
                messages += obs
                if terminated or truncated:
                    break
            yield messages, info["tools"]
    finally:
        env.close()

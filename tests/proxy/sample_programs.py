"""Agent programs for the proxy tests (plain functions of (base_url, task), official client only)."""

from __future__ import annotations

import time

from openai import AsyncOpenAI, OpenAI


def crashes(base_url: str, task: dict) -> str:
    OpenAI(base_url=base_url, api_key="x", max_retries=0).chat.completions.create(
        model=task["model"], messages=task["messages"]
    )
    return str(1 / 0)


def hangs(base_url: str, task: dict) -> str:
    OpenAI(base_url=base_url, api_key="x", max_retries=0).chat.completions.create(
        model=task["model"], messages=task["messages"]
    )
    time.sleep(3600)
    return "never"


def rewrites_history(base_url: str, task: dict) -> str:
    """Two calls where the second drops the first answer: two segments, one break."""
    client = OpenAI(base_url=base_url, api_key="x", max_retries=0)
    client.chat.completions.create(model=task["model"], messages=task["messages"], tools=task["tools"])
    client.chat.completions.create(
        model=task["model"], messages=task["messages"] + [{"role": "user", "content": "again"}], tools=task["tools"]
    )
    return "0"


async def solve_async(base_url: str, task: dict) -> str | None:
    client = AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
    reply = await client.chat.completions.create(model=task["model"], messages=task["messages"], stream=True)
    return "".join([c.choices[0].delta.content or "" async for c in reply if c.choices]) and None


def judge_length(task: dict, answer) -> float:
    """A reward function: 1 for any answer."""
    return 1.0 if answer is not None else 0.0

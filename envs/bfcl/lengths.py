"""Prompt length of every BFCL task: ``python -m envs.bfcl.lengths [--tokenizer DIR] [--per-task]``.

For each task: the first prompt (system message, first user turn, and the tools' JSON schemas as
the chat template renders them) and, for multi-turn tasks, the whole ground-truth episode (every
user turn, call, result and reply): what a model's context must hold. In tokens of ``--tokenizer``
(any from_pretrained directory with a chat template), else in characters of the messages plus the
schemas' JSON. Prints per category the median and the maximum, and with ``--per-task`` one line per
task (``category task_id prompt episode``).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics

from envs.bfcl import policies
from envs.bfcl.calls import BfclCallsEnv
from envs.bfcl.data import call_tasks, multi_turn_tasks
from envs.bfcl.multi_turn import BfclMultiTurnEnv


def _measure(tokenizer, messages: list[dict], tools: list[dict]) -> int:
    if tokenizer is None:
        return sum(len(str(m.get("content", ""))) for m in messages) + len(json.dumps(tools))
    text = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False
    )  # tokenize=True returns a dict in transformers 5
    return len(tokenizer.encode(text, add_special_tokens=False))


def lengths(tokenizer=None):
    """Yield (category, task_id, prompt length, episode length) for every task."""

    env = BfclMultiTurnEnv(split="all")
    for task in multi_turn_tasks():
        messages, info = env.reset(options={"task": task.task_id})
        prompt = _measure(tokenizer, messages, info["tools"])
        for _ in range(400):
            action = policies.replay(messages)
            obs, _, terminated, truncated, _ = env.step(action)
            messages = messages + [{"role": "assistant", "content": action}, *obs]
            if terminated or truncated:
                break
        yield task.category, task.task_id, prompt, _measure(tokenizer, messages, info["tools"])
    env = BfclCallsEnv(split="all")
    for task in call_tasks():
        messages, info = env.reset(options={"task": task.task_id})
        prompt = _measure(tokenizer, messages, info["tools"])
        yield task.category, task.task_id, prompt, prompt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokenizer", help="from_pretrained directory; default: characters")
    parser.add_argument("--per-task", action="store_true", help="one line per task")
    args = parser.parse_args(argv)
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    unit = "tokens" if tokenizer is not None else "chars"
    by_category = collections.defaultdict(list)
    for category, task_id, prompt, episode in lengths(tokenizer):
        by_category[category].append((prompt, episode))
        if args.per_task:
            print(f"{category} {task_id} {prompt} {episode}")
    print(f"{'category':<26} {'tasks':>5}  prompt median / max  episode median / max  ({unit})")
    for category, rows in by_category.items():
        p, e = [r[0] for r in rows], [r[1] for r in rows]
        print(
            f"{category:<26} {len(rows):>5}  {statistics.median(p):>8.0f} / {max(p):<8}  {statistics.median(e):>8.0f} / {max(e)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

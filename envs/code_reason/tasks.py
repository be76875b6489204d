"""Code-reasoning tasks of Absolute Zero (Zhao et al. 2025, arXiv 2505.03335): seed triplets,
the task dicts, the prompts and the blocks an answer is read from.

A triplet is (program, input, output) with output = repr(f(*input)). Tasks are JSON dicts (they
are ``info["task"]``, and ``reset(options={"task": ...})`` replays them):

- propose deduction / abduction: ``{role: propose, type, references: [triplet, ...]}`` -> the
  policy writes a new program and input (```python and ```input blocks);
- propose induction: ``{role: propose, type: induction, program, references}`` -> the policy
  writes a message and several inputs for ``program`` (```message and ```input blocks);
- solve deduction: ``{role: solve, type: deduction, program, input, output}``: answer the output;
- solve abduction: the same triplet; answer an input giving ``output``;
- solve induction: ``{role: solve, type: induction, program, message, inputs, outputs, visible}``:
  the first ``visible`` pairs and the message are shown; answer a program reproducing the rest.
"""

from __future__ import annotations

import random
import re
from typing import Any

TASK_TYPES = ("deduction", "abduction", "induction")
ROLES = ("propose", "solve")

# the built-in seed set: the paper starts from the identity f(x) = x alone; a few more small
# programs give the first proposers K different references
SEED_TRIPLETS: tuple[dict[str, str], ...] = (
    {"program": "def f(x):\n    return x\n", "input": "'Hello World'", "output": "'Hello World'"},
    {"program": "def f(s):\n    return s[::-1]\n", "input": "'abc'", "output": "'cba'"},
    {"program": "def f(xs):\n    return sum(x * x for x in xs)\n", "input": "[1, 2, 3]", "output": "14"},
    {"program": "def f(a, b):\n    return a * b + 1\n", "input": "3, 4", "output": "13"},
    {"program": "def f(xs):\n    return sorted(xs)[-2:]\n", "input": "[5, 1, 4, 2]", "output": "[4, 5]"},
    {
        "program": "def f(s):\n    return {c: s.count(c) for c in sorted(set(s))}\n",
        "input": "'abca'",
        "output": "{'a': 2, 'b': 1, 'c': 1}",
    },
)

SYSTEM_PROMPT = (
    "You reason about small Python programs. Think, then reply with your final answer inside "
    "<answer>...</answer>. Programs define a function f; inputs are f's arguments as Python literals."
)
_BLOCK = re.compile(r"```(\w+)[ \t]*\n(.*?)```", re.DOTALL)


def blocks(text: str) -> dict[str, list[str]]:
    """The fenced blocks of ``text`` by their tag (```python, ```input, ```message, ```output)."""
    out: dict[str, list[str]] = {}
    for tag, body in _BLOCK.findall(text):
        out.setdefault(tag.lower(), []).append(body.strip("\n"))
    return out


def seed_references(kind: str, k: int, seed: int) -> list[dict[str, str]]:
    """``k`` seed triplets, a seeded choice (deduction / abduction / induction reference the same set)."""
    rng = random.Random(f"{kind}:{seed}")
    return rng.sample(list(SEED_TRIPLETS), min(k, len(SEED_TRIPLETS)))


def show_triplet(t: dict[str, Any]) -> str:
    return f"```python\n{t['program'].rstrip()}\n```\n```input\n{t['input']}\n```\n```output\n{t['output']}\n```"


def prompt(task: dict[str, Any], n_inputs: int) -> str:
    """The user message of ``task``."""
    kind, role = task["type"], task["role"]
    if role == "propose":
        refs = "\n\n".join(show_triplet(t) for t in task.get("references", []))
        if kind == "induction":
            return (
                f"Here is a program:\n```python\n{task['program'].rstrip()}\n```\nWrite {n_inputs} different inputs for it, each in "
                "its own ```input block, and one ```message block that hints what the program does without giving it away. "
                "Another solver will see half of the input/output pairs and your message and must write the program."
            )
        what = (
            "its output from the program and input" if kind == "deduction" else "an input from the program and output"
        )
        return (
            f"Reference tasks:\n\n{refs}\n\nPropose a new task, different from these, in which a solver must find {what}. "
            "Reply with a ```python block defining f and an ```input block with f's arguments, inside <answer>...</answer>. "
            "The program must be deterministic and may not use the file system, randomness or the clock."
        )
    if kind == "deduction":
        return f"```python\n{task['program'].rstrip()}\n```\n```input\n{task['input']}\n```\nWhat does f return? Answer with the value as a Python literal."
    if kind == "abduction":
        return (
            f"```python\n{task['program'].rstrip()}\n```\n```output\n{task['output']}\n```\nGive arguments for "
            f"which f returns this output (Python literals, comma separated)."
        )
    shown = "\n".join(
        f"f({i}) == {o}"
        for i, o in zip(task["inputs"][: task["visible"]], task["outputs"][: task["visible"]], strict=True)
    )
    return f"Message: {task['message']}\n\nExamples:\n{shown}\n\nWrite the program: answer with a ```python block defining f."

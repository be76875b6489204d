"""Task splits and difficulty levels shared by the procedural environments.

Splits are 80 / 10 / 10 by a hash of the task's content, so no task is in two splits.
"""

from __future__ import annotations

import hashlib

SPLITS = ("train", "val", "test")


def split_of(key: str) -> str:
    """The split of the task whose content is ``key`` (80 / 10 / 10 by its hash)."""
    bucket = int(hashlib.sha256(("split:" + key).encode()).hexdigest(), 16) % 10
    return "train" if bucket < 8 else ("val" if bucket == 8 else "test")


def check_split(split: str, known: tuple[str, ...] = SPLITS) -> str:
    """``split`` when it is one of ``known``, else ``ValueError`` naming the known ones."""
    if split not in known:
        raise ValueError(f"unknown split {split!r}; known: {', '.join(known)}")
    return split


def check_difficulties(difficulty: int | list[int] | tuple[int, ...], levels: dict) -> tuple[int, ...]:
    """``difficulty`` as a tuple of known levels, or ``ValueError`` naming the known ones."""
    difficulties = (difficulty,) if isinstance(difficulty, int) else tuple(difficulty)
    for d in difficulties:
        if d not in levels:
            raise ValueError(f"unknown difficulty {d}; known: {sorted(levels)}")
    return difficulties

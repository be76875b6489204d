"""Arithmetic problems: generation by difficulty, stable ids, and train/val/test splits by hash."""

from __future__ import annotations

import ast
import hashlib
import random
from dataclasses import dataclass

from envs.splits import check_difficulties, check_split

SPLITS = ("train", "val", "test")

# difficulty -> (number of operands, digits per operand, operators)
LEVELS: dict[int, tuple[int, int, str]] = {
    1: (2, 1, "+-"),  # 7+5
    2: (2, 2, "+-*"),  # 37*91
    3: (3, 2, "+-*"),  # 37*91-12
    4: (3, 3, "+-*"),  # 374*912-125
    5: (4, 3, "+-*"),  # 374*912-125*33
}


@dataclass(frozen=True)
class Problem:
    expression: str
    answer: int
    difficulty: int

    @property
    def task_id(self) -> str:
        return "arith-" + hashlib.sha256(self.expression.encode()).hexdigest()[:12]

    @property
    def split(self) -> str:
        """80 / 10 / 10 by a hash of the expression, so no question is in two splits."""
        bucket = int(hashlib.sha256(("split:" + self.expression).encode()).hexdigest(), 16) % 10
        return "train" if bucket < 8 else ("val" if bucket == 8 else "test")

    def to_dict(self) -> dict:
        return {"expression": self.expression, "answer": self.answer, "difficulty": self.difficulty}


def _expression(rng: random.Random, difficulty: int) -> str:
    n_operands, digits, ops = LEVELS[difficulty]
    lo, hi = (1 if digits == 1 else 10 ** (digits - 1)), 10**digits - 1
    parts = [str(rng.randint(lo, hi))]
    for _ in range(n_operands - 1):
        parts += [rng.choice(ops), str(rng.randint(lo, hi))]
    return "".join(parts)


def make_problem(expression: str, difficulty: int = 0) -> Problem:
    if not all(c in "0123456789+-*() " for c in expression):
        raise ValueError(f"not an arithmetic expression: {expression!r}")
    return Problem(expression, int(eval(expression, {"__builtins__": {}})), difficulty)  # noqa: S307 (digits/ops only)


def sample_problem(seed: int, split: str, difficulties: tuple[int, ...]) -> Problem:
    """The problem of ``seed`` in ``split``: deterministic, drawn by rejection on the split hash."""
    check_split(split, SPLITS)
    check_difficulties(difficulties, LEVELS)
    rng = random.Random(seed)
    while True:
        difficulty = rng.choice(difficulties)
        p = make_problem(_expression(rng, difficulty), difficulty)
        if p.split == split:
            return p


def subproblems(expression: str) -> list[tuple[str, int]]:
    """The expression's operations in evaluation order, each a verified sub-problem (its source text
    and value); the last is the whole expression. ``37*91-12`` -> [("37*91", 3367), ("37*91-12", 3355)]."""
    tree = ast.parse(expression, mode="eval")
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.BinOp):
            visit(node.left)
            visit(node.right)
            text = ast.get_source_segment(expression, node)
            out.append((text, make_problem(text).answer))

    visit(tree.body)
    return out

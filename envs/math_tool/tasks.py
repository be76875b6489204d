"""MathTool problems: reasoning-gym generators by difficulty, stable ids, train/val/test by hash.

Each generator entry says how to configure the reasoning-gym dataset at each difficulty, what
kind of answer it expects (``number`` or a ``fraction`` in lowest terms), and how to read the
question back into Python code that solves it (the oracle's tool call). The question text is the
task: its hash gives the id and the split, so no question is in two splits.
"""

from __future__ import annotations

import ast
import hashlib
import math
import operator
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import cache, reduce
from typing import Any

from envs.splits import check_split, split_of

DIFFICULTIES = (1, 2, 3)


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def safe_eval(expression: str, names: dict[str, Fraction] | None = None) -> Fraction:
    """The exact value of an expression of integers, names, + - * / and parentheses (no exec)."""

    def value(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return Fraction(node.value)
        if isinstance(node, ast.Name) and names and node.id in names:
            return names[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            return -value(node.operand) if isinstance(node.op, ast.USub) else value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return Fraction(_OPS[type(node.op)](value(node.left), value(node.right)))
        raise ValueError(f"not a plain arithmetic expression: {expression!r}")

    return value(ast.parse(expression, mode="eval").body)


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def _solve_equation(found: re.Match) -> Fraction:
    var, lhs, rhs = found.group(1), found.group(2), safe_eval(found.group(3))
    f0, f1 = safe_eval(lhs, {var: Fraction(0)}), safe_eval(lhs, {var: Fraction(1)})
    return (rhs - f0) / (f1 - f0)  # the equations are linear in the variable


def _expression_code(found: re.Match) -> str:
    return f"print({found.group(1)})"


def _call_code(module: str, fn: str) -> Callable[[re.Match], str]:
    def code(found: re.Match) -> str:
        return f"from {module} import {fn}; print({fn}({found.group(1)}))"

    return code


def _equation_code(found: re.Match) -> str:
    var, lhs, rhs = found.group(1), found.group(2), found.group(3)
    return f"print(next({var} for {var} in range(-10**5, 10**5) if {lhs} == {rhs}))"


@dataclass(frozen=True)
class Generator:
    """A reasoning-gym dataset as a MathTool generator."""

    levels: dict[int, dict[str, Any]]  # difficulty -> reasoning-gym config overrides
    question: re.Pattern  # reads the question text back (oracle and weak teacher)
    code: Callable[[re.Match], str]  # python that prints the answer, from the question's match
    solve: Callable[[re.Match], Fraction]  # the exact answer, in-process (no exec)
    answer_kind: str = "number"  # "number": any equal value; "fraction": a/b in lowest terms
    accept: Callable[[re.Match], bool] = lambda found: True  # rejects degenerate items

    def well_formed(self, question: str) -> bool:
        found = self.question.search(question)
        return found is not None and self.accept(found)


GENERATORS: dict[str, Generator] = {
    "basic_arithmetic": Generator(
        levels={
            1: {
                "min_terms": 2,
                "max_terms": 2,
                "min_digits": 1,
                "max_digits": 2,
                "operators": ("+", "-", "*"),
                "allow_parentheses": False,
                "allow_negation": False,
            },
            2: {
                "min_terms": 2,
                "max_terms": 3,
                "min_digits": 1,
                "max_digits": 2,
                "operators": ("+", "-", "*"),
                "allow_parentheses": True,
                "allow_negation": True,
            },
            3: {
                "min_terms": 3,
                "max_terms": 5,
                "min_digits": 2,
                "max_digits": 3,
                "operators": ("+", "-", "*"),
                "allow_parentheses": True,
                "allow_negation": True,
            },
        },
        question=re.compile(r"^Calculate (.+)\.$"),
        code=_expression_code,
        solve=lambda found: safe_eval(found.group(1)),
    ),
    "chain_sum": Generator(
        levels={
            1: {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2},
            2: {"min_terms": 3, "max_terms": 4, "min_digits": 2, "max_digits": 2},
            3: {"min_terms": 4, "max_terms": 6, "min_digits": 3, "max_digits": 3},
        },
        question=re.compile(r"arithmetic problem: (.+) =$"),
        code=_expression_code,
        solve=lambda found: safe_eval(found.group(1)),
    ),
    "products": Generator(
        levels={
            1: {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2},
            2: {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 3},
            3: {"min_terms": 2, "max_terms": 2, "min_digits": 3, "max_digits": 4},
        },
        question=re.compile(r"multiplication: (.+)\. Give only"),
        code=_expression_code,
        solve=lambda found: safe_eval(found.group(1)),
    ),
    "gcd": Generator(
        levels={
            1: {"min_numbers": 2, "max_numbers": 2, "min_value": 2, "max_value": 100},
            2: {"min_numbers": 2, "max_numbers": 2, "min_value": 10, "max_value": 1000},
            3: {"min_numbers": 3, "max_numbers": 3, "min_value": 100, "max_value": 10000},
        },
        question=re.compile(r"Greatest Common Divisor \(GCD\) of these numbers: ([0-9, ]+)\."),
        code=_call_code("math", "gcd"),
        solve=lambda found: Fraction(reduce(math.gcd, _ints(found.group(1)))),
    ),
    "lcm": Generator(
        levels={
            1: {"min_numbers": 2, "max_numbers": 2, "min_value": 2, "max_value": 20},
            2: {"min_numbers": 2, "max_numbers": 2, "min_value": 2, "max_value": 100},
            3: {"min_numbers": 3, "max_numbers": 3, "min_value": 2, "max_value": 100},
        },
        question=re.compile(r"Least Common Multiple \(LCM\) of these numbers: ([0-9, ]+)$"),
        code=_call_code("math", "lcm"),
        solve=lambda found: Fraction(reduce(math.lcm, _ints(found.group(1)))),
    ),
    "fraction_simplification": Generator(
        levels={
            1: {"min_value": 1, "max_value": 20, "min_factor": 2, "max_factor": 10, "styles": ("plain",)},
            2: {"min_value": 1, "max_value": 100, "min_factor": 2, "max_factor": 30, "styles": ("plain",)},
            3: {"min_value": 1, "max_value": 1000, "min_factor": 2, "max_factor": 100, "styles": ("plain",)},
        },
        question=re.compile(r"Simplify the fraction (\d+)/(\d+) to"),
        code=lambda m: f"from fractions import Fraction; print(Fraction({m.group(1)}, {m.group(2)}))",
        solve=lambda found: Fraction(int(found.group(1)), int(found.group(2))),
        answer_kind="fraction",
    ),
    "simple_equations": Generator(
        levels={
            1: {"min_terms": 2, "max_terms": 2, "min_value": 1, "max_value": 10},
            2: {"min_terms": 2, "max_terms": 3, "min_value": 1, "max_value": 50},
            3: {"min_terms": 3, "max_terms": 4, "min_value": 1, "max_value": 100},
        },
        question=re.compile(r"(?:Solve for|value of) ([a-z])(?: in the equation| that satisfies)?: (.+) = (.+)$"),
        code=_equation_code,
        solve=_solve_equation,
        accept=lambda found: found.group(1) in found.group(2),  # "0 = 0" when the variable cancels
    ),
}


@dataclass(frozen=True)
class Problem:
    generator: str
    question: str
    answer: str  # reasoning-gym's answer string, checked with math-verify
    difficulty: int

    @property
    def task_id(self) -> str:
        return "math-" + hashlib.sha256(f"{self.generator}\x00{self.question}".encode()).hexdigest()[:12]

    @property
    def split(self) -> str:
        """80 / 10 / 10 by a hash of the question, so no question is in two splits."""
        return split_of(self.question)

    @property
    def answer_kind(self) -> str:
        return GENERATORS[self.generator].answer_kind

    def to_dict(self) -> dict:
        return {
            "generator": self.generator,
            "question": self.question,
            "answer": self.answer,
            "difficulty": self.difficulty,
        }


def check_choices(generators: tuple[str, ...], difficulties: tuple[int, ...]) -> None:
    if not generators:
        raise ValueError(f"config key 'generators' is empty; known: {', '.join(GENERATORS)}")
    for g in generators:
        if g not in GENERATORS:
            raise ValueError(f"config key 'generators': unknown generator {g!r}; known: {', '.join(GENERATORS)}")
    for d in difficulties:
        if d not in DIFFICULTIES:
            raise ValueError(f"config key 'difficulty': unknown difficulty {d!r}; known: {list(DIFFICULTIES)}")


@cache
def _dataset_class(generator: str):
    from reasoning_gym.factory import DATASETS

    return DATASETS[generator]


def generate(generator: str, difficulty: int, seed: int) -> Problem:
    """reasoning-gym's item for (generator, difficulty, seed): deterministic."""
    dataset_cls, config_cls = _dataset_class(generator)
    config = config_cls(seed=seed, size=1, **GENERATORS[generator].levels[difficulty])
    item = dataset_cls(config)[0]
    return Problem(generator, item["question"], str(item["answer"]), difficulty)


def sample_problem(seed: int, split: str, generators: tuple[str, ...], difficulties: tuple[int, ...]) -> Problem:
    """The problem of ``seed`` in ``split``: deterministic, drawn by rejection on the split hash."""
    check_split(split)
    check_choices(generators, difficulties)
    rng = random.Random(seed)
    while True:
        p = generate(rng.choice(generators), rng.choice(difficulties), rng.randrange(2**31))
        if p.split == split and GENERATORS[p.generator].well_formed(p.question):
            return p


def make_problem(task: dict) -> Problem:
    """A problem from its ``to_dict()`` form (``options={"task": ...}`` in ``reset``)."""
    generator = task.get("generator")
    if generator not in GENERATORS:
        raise ValueError(f"task key 'generator': unknown generator {generator!r}; known: {', '.join(GENERATORS)}")
    if not isinstance(task.get("question"), str) or not isinstance(task.get("answer"), str | int):
        raise ValueError("a task needs 'question' (str) and 'answer' (str)")
    return Problem(generator, task["question"], str(task["answer"]), int(task.get("difficulty", 0)))


def read_question(question: str) -> tuple[Generator, re.Match] | None:
    """The generator that asks ``question`` and the parts of it, or None."""
    for gen in GENERATORS.values():
        found = gen.question.search(question)
        if found:
            return gen, found
    return None


def solution_code(question: str) -> str | None:
    """Python that prints the answer of ``question``, or None for a question no generator asks."""
    read = read_question(question)
    return read[0].code(read[1]) if read else None


def solve(question: str) -> Fraction | None:
    """The exact answer of ``question`` computed in-process, or None."""
    read = read_question(question)
    if read is None:
        return None
    try:
        return read[0].solve(read[1])
    except (ValueError, SyntaxError, ZeroDivisionError, TypeError):
        return None


def format_value(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"

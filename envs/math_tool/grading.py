"""Grading a MathTool answer: one final value in an accepted form, equal to the gold by math-verify.

math-verify alone is too lenient for RL: it accepts ``1 or 2`` for 2, the question's own expression
(``5-3-6`` for -4) and picks one of several candidates. So an answer is first required to be a
single literal value — an integer (``1,000`` allowed), a decimal, a fraction ``a/b`` or
``\\frac{a}{b}``, optionally inside ``\\boxed{}`` or ``$...$`` and after ``x =`` — and only then
compared with math-verify (``0.5`` = ``1/2`` = ``\\frac{1}{2}``, ``3.0`` = ``3``). Fraction tasks
also require lowest terms (``2/4`` does not simplify ``6/12``).
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from functools import cache

_NUMBER = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_INTEGER = r"-?\d+"
_LITERAL = re.compile(rf"{_NUMBER}")
_SLASH_FRACTION = re.compile(rf"({_INTEGER})\s*/\s*({_INTEGER})")
_LATEX_FRACTION = re.compile(rf"(-?)\\[dt]?frac\{{({_INTEGER})\}}\{{({_INTEGER})\}}")
_WRAPPERS = [re.compile(p, re.DOTALL) for p in (r"\\boxed\{(.*)\}", r"\$(.*)\$", r"\\\((.*)\\\)", r"\\\[(.*)\\\]")]
_VARIABLE = re.compile(r"[a-zA-Z]\s*=\s*(.*)", re.DOTALL)


@dataclass(frozen=True)
class Grade:
    correct: bool
    reason: str  # "correct", "wrong value", or why the answer's form was rejected


def normalize(answer: str) -> str:
    """Strip wrappers (``\\boxed{}``, ``$..$``, ``x =``) and unicode minus; whitespace trimmed."""
    text = answer.strip().replace("\u2212", "-")
    changed = True
    while changed:
        changed = False
        for pattern in [*_WRAPPERS, _VARIABLE]:
            found = pattern.fullmatch(text)
            if found:
                text, changed = found.group(1).strip(), True
    return text


def _fraction_parts(text: str) -> tuple[int, int] | None:
    try:
        found = _SLASH_FRACTION.fullmatch(text)
        if found:
            return int(found.group(1)), int(found.group(2))
        found = _LATEX_FRACTION.fullmatch(text)
        if found:
            sign = -1 if found.group(1) else 1
            return sign * int(found.group(2)), int(found.group(3))
    except ValueError:  # int() refuses more digits than sys.get_int_max_str_digits() (4300)
        return None
    return None


def form_problem(text: str, kind: str) -> str | None:
    """Why ``text`` (normalized) is not one final value of ``kind``; None when it is."""
    parts = _fraction_parts(text)
    if parts is not None:
        num, den = parts
        if den == 0:
            return "a fraction with denominator 0"
        if kind == "fraction" and (den < 0 or math.gcd(num, den) != 1):
            return "a fraction not in lowest terms"
        return None
    if _LITERAL.fullmatch(text):
        if kind == "fraction" and not re.fullmatch(_INTEGER, text):
            return "a decimal where a fraction a/b is asked"
        return None
    return "not a single number or fraction"


@cache
def _parse(text: str):
    from math_verify import parse

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # the timeout-disabled notice
    # no signal-based timeout: episodes run in worker threads, and the inputs here are short literals
    return parse(text, parsing_timeout=None)


def grade(answer: str, gold: str, kind: str = "number") -> Grade:
    """Whether ``answer`` is the single value ``gold`` (in the form ``kind`` asks)."""
    text = normalize(answer)
    problem = form_problem(text, kind)
    if problem is not None:
        return Grade(False, problem)
    from math_verify import verify

    # commas are thousands separators here; $..$ lets math-verify read \dfrac and \tfrac too
    gold_parsed, answer_parsed = _parse(gold), _parse("$" + text.replace(",", "") + "$")
    if not gold_parsed:
        raise ValueError(f"math-verify cannot read the gold answer {gold!r}")
    ok = bool(answer_parsed) and verify(gold_parsed, answer_parsed, timeout_seconds=None)
    return Grade(ok, "correct" if ok else "wrong value")

"""Scoring a program against tests so that an early exit is never a pass.

A program that calls ``sys.exit(0)`` or ``os._exit(0)`` before the tests' asserts ends with exit
code 0 and status OK. So the verdict must come from the harness reaching its END: it reads a
fresh random token from stdin before the solution runs, and prints it only after every test
passed. ``passed()`` requires status OK *and* that token as the last line of stdout.

    h = test_harness(solution_src, tests_src)
    res = await sb.exec(code=h.code, stdin=h.stdin)
    reward = 1.0 if passed(res, h) else 0.0
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from sandbox.base import ExecResult, ExecStatus

_HARNESS = """\
import os as _os, sys as _sys
_token = _sys.stdin.readline().strip()
_sys.stdin = open(_os.devnull)
_ns = {{"__name__": "__main__"}}
exec(compile({solution!r}, "solution.py", "exec"), _ns)
exec(compile({tests!r}, "tests.py", "exec"), _ns)
_sys.stdout.flush()
_os.write(1, ("\\n" + _token + "\\n").encode())
"""


@dataclass(frozen=True)
class Harness:
    code: str  # python source to exec
    stdin: str  # carries the token; the solution never sees it (stdin is replaced first)
    token: str


def test_harness(solution: str, tests: str) -> Harness:
    """A program that runs ``solution`` then ``tests`` and proves it reached the end."""
    token = secrets.token_hex(16)
    return Harness(_HARNESS.format(solution=solution, tests=tests), token + "\n", token)


test_harness.__test__ = False  # not a pytest test, despite the name


def passed(result: ExecResult, harness: Harness) -> bool:
    """True only if the harness ran to completion: status OK and the token as the last line."""
    if result.status != ExecStatus.OK:
        return False
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    return bool(lines) and lines[-1].strip() == harness.token

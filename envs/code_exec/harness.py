"""Host side of grading: instrument the hidden test, run ``runner.py`` in a sandbox, check the nonce.

Success is read only from the line the grader prints after the test ran, prefixed by a random
nonce that the candidate's process never sees (see ``runner.py``): exiting early, patching
builtins, redefining ``check`` or printing "all tests passed" cannot produce it.
"""

from __future__ import annotations

import ast
import functools
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from agent_rl.core.errors import InfraError
from envs.code_exec.tasks import CodeTask
from sandbox import ExecStatus

RUNNER = (Path(__file__).parent / "runner.py").read_text()


class _RecordAsserts(ast.NodeTransformer):
    """``assert cond, msg`` -> ``__record_assert__(i, lambda: cond)``: every assert statement is
    evaluated and recorded (one in a loop passes only if it held every time), and the test goes on
    after a failure, so the fraction of passing asserts can be counted."""

    def __init__(self):
        self.count = 0

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        index, self.count = self.count, self.count + 1
        call = ast.Call(
            func=ast.Name("__record_assert__", ast.Load()),
            args=[ast.Constant(index), ast.Lambda(ast.arguments([], [], None, [], [], None, []), node.test)],
            keywords=[],
        )
        return ast.copy_location(ast.Expr(call), node)


@functools.cache
def instrument(test: str) -> tuple[str, int]:
    """The test source with recorded asserts, and how many assert statements it has."""
    tree = _RecordAsserts()
    new = ast.fix_missing_locations(tree.visit(ast.parse(test)))
    return ast.unparse(new), tree.count


@dataclass
class Grade:
    passed: bool  # check() ran to its end and every assert statement ran and held
    asserts_passed: int  # assert statements that ran and always held
    asserts_total: int
    completed: bool  # check() returned (no exception outside an assert)
    status: str  # the sandbox's ExecStatus of the grading run
    error: str = ""  # why it failed, for the observation and the viewer
    details: dict = field(default_factory=dict)

    @property
    def fraction(self) -> float:
        """Partial credit: the fraction of assert statements that held (one that never ran fails);
        a failing submission never gets full credit (``check`` raised after every assert held)."""
        if self.passed:
            return 1.0
        return min(self.asserts_passed, self.asserts_total - 1) / self.asserts_total if self.asserts_total else 0.0

    def summary(self) -> str:
        head = "passed" if self.passed else "failed"
        text = f"hidden tests {head}: {self.asserts_passed}/{self.asserts_total} asserts hold"
        return text + (f" ({self.error})" if self.error and not self.passed else "")


async def grade(sandbox, task: CodeTask, code: str, timeout_s: float = 10.0) -> Grade:
    """Run ``task``'s hidden test on ``code`` in ``sandbox``. Infrastructure failures raise
    ``InfraError`` (the episode becomes INFRA_ERROR, never a reward of 0)."""

    test, total = instrument(task.test)
    nonce = secrets.token_hex(16)
    payload = {
        "nonce": nonce,
        "timeout_s": timeout_s,
        "runner": RUNNER,
        "prompt": task.prompt,
        "test": test,
        "entry_point": task.entry_point,
        "code": code,
    }
    res = await sandbox.exec(code=RUNNER, stdin=json.dumps(payload), timeout_s=timeout_s + 3.0)
    if res.status == ExecStatus.INFRA_ERROR:
        raise InfraError(res.error or res.stderr or "sandbox infrastructure failure")
    reports = [line[len(nonce) + 1 :] for line in res.stdout.splitlines() if line.startswith(nonce + " ")]
    report = json.loads(reports[0]) if len(reports) == 1 else None  # twice: someone forged one
    if report is None:  # the grader did not finish (killed, out of time): a failure of the submission
        tail = res.stderr.strip().splitlines()[-1:] if res.stderr.strip() else []
        return Grade(
            False, 0, total, False, str(res.status), f"grading did not finish [{res.status}] {' '.join(tail)}".strip()
        )
    held = sum(1 for ok in report["asserts"].values() if ok)
    # every assert statement must have run and held (the canonical solutions run all of them): a
    # result that skips a loop of asserts, e.g. an empty list, does not pass by running none
    passed = report["completed"] and held == total
    error = (
        ""
        if passed
        else (report.get("candidate_error") or report.get("error") or f"{total - held} assert(s) failed or never ran")
    )
    details = {
        "calls": report.get("calls", 0),
        "hardened": report.get("hardened"),
        "stderr": report.get("stderr", "")[-500:],
    }
    return Grade(passed, held, total, report["completed"], str(res.status), error or "", details)

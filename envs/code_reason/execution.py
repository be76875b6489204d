"""Running code-reasoning programs in the sandbox, and the checks a proposal must pass.

A program defines ``f``; an input is the text of ``f``'s arguments as Python literals (``'Hello', 3``
or ``[1, 2]``); an output is ``repr`` of what ``f`` returned, and it must read back with
``ast.literal_eval`` (so answers are compared as values, never by running the solver's text).

``RUNNER`` (below) runs INSIDE the sandbox: it reads ``{code, inputs}`` on stdin, executes the
program with its stdout on /dev/null, calls ``f`` on each input and prints one line
``MARK <json>``: the output's repr or the error of each call. Gold outputs never enter the
sandbox, so a program that forges that line only claims outputs it could have returned.

A proposal is valid (Zhao et al. 2025, arXiv 2505.03335, "task validation") when the program
parses, imports no forbidden module and calls no forbidden builtin (``safety``), runs on every
input without an error (``integrity``) and gives the same outputs on a second, separate run
(``determinism``: j = 2 executions, each a fresh interpreter with its own hash seed).
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field

MARK = "@@code_reason@@"
# modules whose use makes a program unsafe or nondeterministic (the paper bans the same kinds:
# file system, processes, randomness, clocks); the root name is checked (``os.path`` -> os)
FORBIDDEN_MODULES = frozenset(
    {
        "os",
        "sys",
        "subprocess",
        "shutil",
        "socket",
        "signal",
        "ctypes",
        "importlib",
        "pathlib",
        "io",
        "glob",
        "tempfile",
        "threading",
        "multiprocessing",
        "concurrent",
        "asyncio",
        "random",
        "secrets",
        "uuid",
        "time",
        "datetime",
        "calendar",
        "hashlib",
        "pickle",
        "marshal",
        "shelve",
        "gc",
        "inspect",
        "resource",
        "builtins",
        "urllib",
        "http",
        "requests",
        "logging",
        "platform",
        "pty",
        "fcntl",
        "mmap",
        "faulthandler",
        "sched",
    }
)
FORBIDDEN_CALLS = frozenset(
    {"open", "exec", "eval", "compile", "__import__", "input", "breakpoint", "globals", "vars", "exit", "quit"}
)

RUNNER = r"""
import ast, json, os, sys
payload = json.loads(sys.stdin.read())
out = os.dup(1)
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1)
sys.stdout = open(os.devnull, "w")
results = []
ns = {"__name__": "__program__"}
try:
    exec(compile(payload["code"], "<program>", "exec"), ns)
    f = ns["f"]
    loaded = None
except BaseException as e:
    loaded = f"{type(e).__name__}: {e}"[:300]
for text in payload["inputs"]:
    if loaded is not None:
        results.append({"error": loaded})
        continue
    try:
        value = f(*ast.literal_eval("(" + text + ",)"))
        text_out = repr(value)
        if ast.literal_eval(text_out) != value and value == value:
            raise TypeError("the output does not read back as a Python literal")
        results.append({"output": text_out})
    except BaseException as e:
        results.append({"error": f"{type(e).__name__}: {e}"[:300]})
os.write(out, ("\n%s " + json.dumps(results) + "\n").encode() % MARK.encode())
""".replace("MARK", repr(MARK))


def literal(text: str) -> tuple[bool, object]:
    """(True, value) when ``text`` is a Python literal, else (False, None)."""
    try:
        return True, ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def arguments_ok(text: str) -> bool:
    """Whether ``text`` is a list of literal arguments (what an input block holds)."""
    return bool(text.strip()) and literal("(" + text + ",)")[0]


def same_value(a: str, b: str) -> bool:
    """Two outputs (reprs) or answers equal as Python values."""
    ok_a, va = literal(a)
    ok_b, vb = literal(b)
    return ok_a and ok_b and va == vb


def safety_problem(code: str) -> str | None:
    """Why ``code`` is refused before running it (a syntax error, no ``f``, a forbidden module or
    builtin), or None."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return f"syntax error: {e.msg} (line {e.lineno})"
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        bad = sorted({n.split(".")[0] for n in names} & FORBIDDEN_MODULES)
        if bad:
            return f"forbidden module: {bad[0]}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            return f"forbidden builtin: {node.func.id}"
        if isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr.endswith("__"):
            return f"forbidden attribute: {node.attr}"
    if not any(isinstance(n, ast.FunctionDef) and n.name == "f" for n in tree.body):
        return "the program defines no function f"
    return None


@dataclass
class Run:
    outputs: list[str | None]  # the output's repr per input, None where the call failed
    errors: list[str | None] = field(default_factory=list)  # the error per input, None where it returned
    status: str = "ok"  # the sandbox's ExecStatus

    @property
    def ok(self) -> bool:
        return all(o is not None for o in self.outputs)

    def first_error(self) -> str:
        return next((e for e in self.errors if e), f"the program did not finish [{self.status}]")


async def run_program(sandbox_exec, code: str, inputs: list[str], timeout_s: float) -> Run:
    """``f`` of ``code`` on each input, in one fresh sandboxed interpreter. ``sandbox_exec``: an
    env's ``sandbox_exec``, which raises ``InfraError`` when the sandbox itself failed (the only
    unscored outcome: anything the program does is its own failure)."""
    res = await sandbox_exec(code=RUNNER, stdin=json.dumps({"code": code, "inputs": inputs}), timeout_s=timeout_s)
    lines = [line[len(MARK) + 1 :] for line in res.stdout.splitlines() if line.startswith(MARK + " ")]
    if not lines:  # killed, out of time or memory before reporting: the program's failure
        return Run([None] * len(inputs), [f"the program did not finish [{res.status}]"] * len(inputs), str(res.status))
    try:  # the runner writes its report last; a malformed one was forged by the program (a failure, never unscored)
        results = json.loads(lines[-1])
    except ValueError:
        results = None
    if not isinstance(results, list) or len(results) != len(inputs):
        return Run(
            [None] * len(inputs), ["the program tampered with the runner's report"] * len(inputs), str(res.status)
        )
    outs = [r.get("output") if isinstance(r, dict) and isinstance(r.get("output"), str) else None for r in results]
    errs = [
        None if o is not None else str((r or {}).get("error", "no result")) if isinstance(r, dict) else "no result"
        for o, r in zip(outs, results, strict=True)
    ]
    return Run(outs, errs, str(res.status))


async def validate(sandbox_exec, code: str, inputs: list[str], timeout_s: float) -> tuple[list[str] | None, str]:
    """The outputs of a proposed program on ``inputs`` and "" when the proposal is valid, else
    (None, the reason): safety, then integrity, then determinism (a second run, compared)."""
    problem = safety_problem(code)
    if problem is not None:
        return None, problem
    first = await run_program(sandbox_exec, code, inputs, timeout_s)
    if not first.ok:
        return None, f"the program failed: {first.first_error()}"
    second = await run_program(sandbox_exec, code, inputs, timeout_s)
    if second.outputs != first.outputs:
        i = next(i for i, (a, b) in enumerate(zip(first.outputs, second.outputs, strict=True)) if a != b)
        return None, f"nondeterministic: two runs gave {first.outputs[i]} and {second.outputs[i]}"
    return list(first.outputs), ""  # type: ignore[arg-type]

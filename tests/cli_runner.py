"""Commands the tests run (``agent-rl ...``, ``python -m module ...``, ``python script.py ...``) in a
process of their own that skips the interpreter's start and the heavy imports.

A command run with ``subprocess`` pays for a new interpreter and for importing torch, transformers,
peft and the project (7 s of CPU on an idle core of this machine, 20-30 s of wall time when the two
cores are busy), and the documentation tests run dozens of them. Here each command runs in a child
forked from one server process (``multiprocessing``'s forkserver) that imported those modules once:
the child gets the command's working directory, environment and argv, writes its stdout and stderr
to files, runs the command's code as its ``__main__`` would (``agent_rl.cli.main``,
``runpy.run_module`` / ``run_path``), runs the ``atexit`` handlers and exits with the command's
code; ``start`` begins one the same way and returns at once, for a test that kills the command or
talks to it while it runs. What a command does in its own process (exit codes, files, children,
signals) is unchanged; what differs from a fresh interpreter is said where it matters:

- environment variables read at import time by the preloaded modules keep the server's values:
  ``OMP_NUM_THREADS`` is applied in the child (``torch.set_num_threads``), ``PYTHONPATH`` is put on
  ``sys.path``, ``PYTHONWARNINGS=ignore`` silences warnings; other variables that change imports
  make ``run`` use a plain subprocess (``SUBPROCESS_ENV``);
- programs other than the three forms above (``make``, ``ray``, ``.venv/bin/python -m vllm ...``)
  run as plain subprocesses.

A test that checks what a fresh interpreter imports (``tests/test_precheck.py``) starts its own.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

# imported once by the server (agent_rl first: it sets how OpenMP threads wait before torch loads)
PRELOAD = [
    "agent_rl",
    "torch",
    "transformers",
    "peft",
    "agent_rl.cli",
    "agent_rl.config",
    "agent_rl.train.trainer",
    "agent_rl.commands.quickstart",
    "agent_rl.commands.sft",
    "agent_rl.commands.eval",
    "envs",
]
# variables that change what the preloaded modules did at import: a command setting one runs in a
# fresh interpreter
SUBPROCESS_ENV = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")

_context = None


def _server():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _main(argv: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """The child: the command's process state, then its code as ``__main__``; never returns."""
    import runpy
    import warnings

    os.setsid()  # its own group, as a subprocess killed on a timeout takes its children with it
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own streams, open until it exits
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    extra = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if "OMP_NUM_THREADS" in env:
        import torch

        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    if env.get("PYTHONWARNINGS") == "ignore":
        warnings.simplefilter("ignore")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = 0
    try:
        if argv[0] == "agent-rl":
            sys.path[:0] = extra
            sys.argv = argv
            from agent_rl.cli import main

            code = main(argv[1:])
        elif argv[0] == "-m":
            sys.path[:0] = [os.getcwd(), *extra]
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.path[:0] = [str(Path(argv[0]).resolve().parent), *extra]
            sys.argv = argv
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        code = e.code
    except BaseException:  # noqa: BLE001 - what the interpreter prints for an uncaught exception
        traceback.print_exc()
        code = 1
    code = _exit_code(code)
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _form(words: list[str]) -> list[str] | None:
    """``words`` as the child's argv (``agent-rl ...``, ``-m module ...``, ``script.py ...``), or None
    for a program it does not run."""
    if words[0] == "agent-rl":
        return words
    if words[0] in ("python", sys.executable) and len(words) > 1:
        if words[1] == "-m" and len(words) > 2:
            return words[1:]
        if words[1].endswith(".py"):
            return words[1:]
    return None


class Started:
    """A command ``start`` began: what the tests use of ``subprocess.Popen`` (``pid``, ``poll``,
    ``wait``, ``kill``, ``terminate``); its stdout and stderr go to the files ``stdout`` and ``stderr``."""

    def __init__(self, child, tmp: tempfile.TemporaryDirectory) -> None:
        self._child, self._tmp = child, tmp  # the files live as long as this object
        self.pid = child.pid
        self.stdout, self.stderr = Path(tmp.name) / "stdout", Path(tmp.name) / "stderr"

    @property
    def returncode(self) -> int | None:
        return self._child.exitcode  # -N: killed by signal N, as subprocess says it

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._child.join(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(str(self.pid), timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # not a pid the server has reaped (and may have given to another)
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def start(words: list[str], cwd: Path | str, env: dict[str, str]) -> Started:
    """``words`` begun in a child of the preloaded server, as ``subprocess.Popen`` would begin them: for
    a test that kills the command or talks to it while it runs. Only the programs the server runs."""
    form = _form(words)
    if form is None or any(k in env and env[k] != os.environ.get(k) for k in SUBPROCESS_ENV):
        raise ValueError(f"not a command the preloaded server runs: {words}")
    tmp = tempfile.TemporaryDirectory(prefix="cli-")
    out, err = os.path.join(tmp.name, "stdout"), os.path.join(tmp.name, "stderr")
    for path in (out, err):
        Path(path).touch()  # readable before the child opens them
    child = _server().Process(target=_main, args=(form, str(cwd), dict(env), out, err))
    child.start()
    return Started(child, tmp)


def run(
    words: list[str], cwd: Path | str, env: dict[str, str], timeout: float | None = None
) -> subprocess.CompletedProcess:
    """``words`` run as ``subprocess.run(..., capture_output=True, text=True)`` would, in a child of
    the preloaded server where the program is one it runs (``agent-rl`` is the project's command)."""
    form = _form(words)
    if form is None or any(k in env and env[k] != os.environ.get(k) for k in SUBPROCESS_ENV):
        if words[0] == "agent-rl":
            words = [sys.executable, "-m", "agent_rl.cli", *words[1:]]
        elif words[0] == "python":
            words = [sys.executable, *words[1:]]
        return subprocess.run(words, cwd=cwd, env=env, timeout=timeout, capture_output=True, text=True)
    child = start(words, cwd, env)
    try:
        child.wait(timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait()
        raise subprocess.TimeoutExpired(words, timeout, child.stdout.read_text(), child.stderr.read_text()) from None
    return subprocess.CompletedProcess(words, child.returncode, child.stdout.read_text(), child.stderr.read_text())

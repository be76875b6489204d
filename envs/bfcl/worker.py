"""An episode's BFCL API instances in a process of their own, so that a call past its limit is stopped.

A BFCL API runs arbitrary Python on the agent's arguments; one that computes past the env's
``call_timeout_s`` cannot be stopped in a thread (it would go on changing the episode's instances
and holding a core). ``ApiWorker`` (the env's side) keeps one worker process per env instance,
started at the first reset and reused by every later episode of that env. ``open(task)`` makes two
fresh ``ApiSession``\\ s of the task in it: ``model`` (the agent's calls) and ``truth`` (the ground
truth's), so the state comparison (``state_differences``) runs where both live, on the objects
themselves, exactly as it did in the env's process.

* A request that runs past its limit raises ``WorkerTimeout``: the process is killed (SIGKILL) and
  reaped before it returns; the next ``open`` starts a fresh one.
* A worker that died on its own (a crash, the kernel's OOM killer), or does not start, raises
  ``InfraError`` naming its pid and exit status: infrastructure, never the agent's failure.
* ``close()`` kills and reaps it; so does garbage collection or the interpreter's exit
  (``weakref.finalize``). A worker whose parent dies exits too (its stdin ends; a watchdog thread
  covers a worker busy in a call).

The protocol: requests and replies are pickled tuples, each framed by its length (8 bytes), over
the worker's stdin and stdout; the APIs' own prints go to stderr. One request at a time (a lock).
A reply is ``("ok", value)``, ``("call_error", message)`` (``CallError``: no such function, an
argument refused) or ``("error", message)`` (the worker's own exception: the env's bug, raised
as ``RuntimeError``).
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from agent_rl.core.errors import InfraError
from envs.bfcl.apis import ApiSession, CallError, state_differences

#: modules the worker imports before it serves (a test plants a call that never ends with one)
PRELOAD: tuple[str, ...] = ()
#: the limit of the requests that are not the agent's calls (start and open, the ground truth's
#: calls, the state comparison): far above what they take (milliseconds), past it the machine failed
SERVICE_TIMEOUT_S = 60.0
_HEADER = struct.Struct("<Q")
# the worker's program: the parent's import path, then serve()
_BOOT = "import json, sys; c = json.loads(sys.argv[1]); sys.path[:] = c['path']; import {m} as w; w.serve(c['preload'])"


class WorkerTimeout(TimeoutError):
    """A request ran past its limit; its worker process has been killed and reaped."""


def exit_text(returncode: int) -> str:
    """How a process ended, in words: ``exit status 1``, ``killed by SIGKILL``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def _frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


def _stop(proc: subprocess.Popen, owner: int) -> int | None:
    """Kill ``proc`` unless it has ended, reap it and close its pipes; its return code. Only in the
    process that started it (``owner``): a forked copy of the env leaves its parent's worker alone."""
    if os.getpid() != owner:
        return None
    if proc.poll() is None:
        proc.kill()
    returncode = proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()
    return returncode


# ------------------------------------------------------------------------------ the env's side
class ApiWorker:
    """The env's handle on its worker process. Blocking: the env calls it in a thread."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._finalizer: weakref.finalize | None = None  # stops the process at close() or at GC
        self._lock = threading.Lock()  # one request at a time (a cancelled episode's may still run)
        self._owner = os.getpid()  # the process that started the worker
        self.starts = 0  # processes started (1 unless one was killed or died)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def open(self, task: Any) -> None:
        """Fresh ``model`` and ``truth`` sessions of ``task``, in a new process when there is none."""
        with self._lock:
            if self._proc is not None and self._owner != os.getpid():
                self._proc = self._finalizer = None  # a forked copy of the env: its parent's worker
            if self._proc is not None and self._proc.poll() is not None:
                self._discard(self._proc)  # died between episodes: start another
            if self._proc is None:
                self._start()
            self._service(("open", task), "opening the task's APIs")

    def call(self, session: str, name: str, kwargs: dict, args: list | None = None, *, timeout_s: float) -> str:
        """``ApiSession.call`` on ``session`` (``model`` or ``truth``) in the worker; ``CallError``
        as there; ``WorkerTimeout`` past ``timeout_s`` (the worker is killed)."""
        with self._lock:
            return self._request(("call", session, name, kwargs, args), timeout_s, f"'{name}'")

    def differences(self) -> list[str]:
        """``state_differences(model, truth)``, computed in the worker."""
        with self._lock:
            return self._service(("differences",), "the state comparison")

    def state(self, session: str) -> dict[str, dict[str, Any]]:
        """``ApiSession.state()`` of ``session``, copied out of the worker."""
        with self._lock:
            return self._service(("state", session), "the state")

    def close(self) -> None:
        """Kill and reap the worker. A request still running (its episode was cancelled) is not
        waited for: the process is killed, and that request, which sees its pipe end, reaps it and
        closes the pipes (whose descriptors it is reading)."""
        proc = self._proc
        if proc is None:
            return
        if self._lock.acquire(blocking=False):
            try:
                self._discard(proc)
            finally:
                self._lock.release()
        elif self._owner == os.getpid():
            proc.kill()

    # -- the process ----------------------------------------------------------------------------
    def _start(self) -> None:
        boot = _BOOT.format(m=__name__)
        config = json.dumps({"path": [p for p in sys.path if isinstance(p, str)], "preload": list(PRELOAD)})
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", boot, config], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
            )
        except OSError as e:
            raise InfraError(f"cannot start the BFCL API worker: {e}") from e
        self._owner = os.getpid()
        self._proc, self._finalizer = proc, weakref.finalize(self, _stop, proc, self._owner)
        self.starts += 1

    def _discard(self, proc: subprocess.Popen) -> int | None:
        """Stop ``proc`` (kill, reap) and forget it if it is the current one; its return code."""
        if self._proc is proc:
            self._proc, finalizer, self._finalizer = None, self._finalizer, None
            if finalizer is not None:
                finalizer.detach()
        return _stop(proc, self._owner)

    def _service(self, request: tuple, what: str) -> Any:
        """A request that is not the agent's call: past ``SERVICE_TIMEOUT_S`` the machine failed."""
        try:
            return self._request(request, SERVICE_TIMEOUT_S, what)
        except WorkerTimeout as e:
            raise InfraError(f"the BFCL API worker: {e}") from None

    def _request(self, request: tuple, timeout_s: float, what: str) -> Any:
        proc = self._proc
        if proc is None:
            raise InfraError("the BFCL API worker is not running (reset the env first)")
        deadline = time.monotonic() + timeout_s
        try:
            _write(proc.stdin.fileno(), _frame(request))
            (size,) = _HEADER.unpack(_read(proc.stdout.fileno(), _HEADER.size, deadline))
            status, value = pickle.loads(_read(proc.stdout.fileno(), size, deadline))
        except WorkerTimeout:
            self._discard(proc)
            raise WorkerTimeout(f"{what} ran longer than {timeout_s} s") from None
        except (OSError, EOFError, ValueError) as e:  # the pipe broke: the process died, or close() killed it
            returncode = self._discard(proc)
            how = exit_text(returncode) if returncode is not None else "its pipe broke"
            raise InfraError(f"the BFCL API worker (pid {proc.pid}) died during {what}: {how}") from e
        if status == "call_error":
            raise CallError(value)
        if status == "error":
            raise RuntimeError(f"BFCL API worker, {what}: {value}")
        return value


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read(fd: int, size: int, deadline: float) -> bytes:
    """``size`` bytes from ``fd``; ``WorkerTimeout`` at ``deadline``, ``EOFError`` when it ends first."""
    poller = select.poll()  # not select(): it cannot watch a descriptor numbered past 1023
    poller.register(fd, select.POLLIN)
    chunks, left = [], size
    while left:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not poller.poll(remaining * 1000):
            raise WorkerTimeout
        chunk = os.read(fd, left)
        if not chunk:
            raise EOFError("the worker closed its end")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# ------------------------------------------------------------------------------ the worker's side
def _handlers(sessions: dict[str, ApiSession]) -> dict[str, Callable[..., Any]]:
    def open_task(task: Any) -> None:
        sessions.clear()
        sessions.update(model=ApiSession(task), truth=ApiSession(task))  # fresh instances, never shared

    return {
        "open": open_task,
        "call": lambda session, name, kwargs, args: sessions[session].call(name, kwargs, args),
        "differences": lambda: state_differences(sessions["model"], sessions["truth"]),
        "state": lambda session: sessions[session].state(),
    }


def _watch_parent() -> None:
    """Exit when the parent process has gone, even while a call computes (its stdin ends only
    when the worker next reads it)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def serve(preload: list[str]) -> None:
    """The worker's loop: answer requests from stdin until it ends."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what the APIs print goes to stderr, never into the replies
    _watch_parent()
    for module in preload:
        importlib.import_module(module)
    inp = sys.stdin.buffer
    handlers = _handlers({})
    while True:
        header = inp.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return  # the env closed its end
        kind, *args = pickle.loads(inp.read(_HEADER.unpack(header)[0]))
        try:
            reply = ("ok", handlers[kind](*args))
        except CallError as e:
            reply = ("call_error", str(e))
        except Exception as e:  # noqa: BLE001 - the env's bug, raised on its side
            reply = ("error", f"{type(e).__name__}: {e}")
        try:
            data = _frame(reply)
        except Exception as e:  # noqa: BLE001 - a value that cannot be pickled
            data = _frame(("error", f"cannot send the reply: {type(e).__name__}: {e}"))
        out.write(data)
        out.flush()

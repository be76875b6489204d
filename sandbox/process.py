"""The ``process`` backend: rlimits and a new session only. NOT isolated.

The program sees the host's filesystem and network. It is meant for laptops without Docker or
bubblewrap and for trusted code; a loud warning says so. When run as root it drops to an
unprivileged uid (root ignores RLIMIT_NPROC). Never send hostile programs (fork bombs,
``kill -9 -1``) here: nothing contains them.

Each call runs in a fresh temporary directory that receives the sandbox's files and whose
changes are copied back afterwards, the same contract as the isolated backends.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import shutil
import subprocess
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping, Sequence

from sandbox.base import (
    ExecResult,
    FileBackedSandbox,
    FileStore,
    SandboxLimits,
    build_argv,
    build_env,
    result_from_report,
    to_bytes,
)
from sandbox.executor import bundle, call, wire
from sandbox.executor.report import failed_report

log = logging.getLogger("sandbox.process")

#: The uid a root controller drops to (RLIMIT_NPROC then applies). Not 65534: docker's
#: ``nobody`` is host uid 65534 too, and the two must not share a process count.
PROCESS_UID = 65533
_THREADS = ThreadPoolExecutor(max_workers=64, thread_name_prefix="sandbox-process")
_EXECUTOR_SRC = bundle.program()  # the executor package, shipped whole on the command line
_warned = False


class SandboxIsolationWarning(UserWarning):
    """The chosen sandbox backend does not isolate the program from the host."""


def _warn_once() -> None:
    global _warned
    if not _warned:
        _warned = True
        msg = (
            "sandbox backend 'process' is NOT isolated: programs can read host files and use the "
            "network. Install bubblewrap or Docker (see `agent-rl sandbox doctor`)."
        )
        log.warning(msg)
        warnings.warn(msg, SandboxIsolationWarning, stacklevel=3)


def rlimits_for(limits: SandboxLimits, timeout_s: float, nproc: bool) -> dict[str, int]:
    """The rlimits of one call (``nproc`` only under a dedicated uid: it counts per uid)."""
    rl = {
        "as": limits.memory_mb << 20,
        "fsize": limits.disk_mb << 20,
        "core": 0,
        "nofile": 256,
        "cpu": math.ceil(timeout_s) + 1,
    }
    if nproc:
        rl["nproc"] = limits.nproc
    return rl


class ProcessSandbox(FileBackedSandbox):
    """Runs each call as a child process with rlimits, in its own session and temp directory."""

    backend_name = "process"

    def __init__(self, limits: SandboxLimits, python: str = "/usr/bin/python3"):
        _warn_once()
        self.limits = limits
        self.python = python if os.path.exists(python) else shutil.which("python3") or python
        self.uid = PROCESS_UID if os.geteuid() == 0 else None
        self._files = FileStore()

    async def exec(
        self,
        code: str | None = None,
        argv: Sequence[str] | None = None,
        stdin: str | bytes | None = None,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        self._check_open()
        timeout_s = self.limits.timeout_s if timeout_s is None else float(timeout_s)
        argv = build_argv(code, argv, self.python)
        build_env(env, home="/")  # invalid names raise ValueError here, in the caller
        req = {
            "argv": argv,
            "stdin": to_bytes(stdin),
            "timeout_s": timeout_s,
            "rlimits": rlimits_for(self.limits, timeout_s, nproc=self.uid is not None),
            "max_output": self.limits.max_output_bytes,
            "flood_bytes": self.limits.flood_bytes,
            "persist_bytes": self.limits.persist_mb << 20,
            "persist_files": self.limits.max_files,
        }
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(_THREADS, self._run, req, env)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:  # the runner itself failed
            log.exception("process sandbox failed")
            return ExecResult.infra(f"process backend: {exc}", time.monotonic() - t0)

    def _run(self, req: dict, env: Mapping[str, str] | None) -> ExecResult:
        work = tempfile.mkdtemp(prefix="agent_rl_process_")
        try:
            req = dict(req, env=build_env(env, home=work), files=self._files.wire())
            if self.uid is None:
                result = call.execute(req, work, kill_all=False)
            else:
                os.chown(work, self.uid, self.uid)
                result = self._run_as_uid(req, work)
            if result.get("error"):
                return ExecResult.infra(result["error"])
            self._files.apply(result["changed"], result["deleted"])
            return result_from_report(result, limits=self.limits)
        finally:
            shutil.rmtree(work, ignore_errors=True)  # fd-based: safe against symlinks planted in it

    def _run_as_uid(self, req: dict, work: str) -> dict:
        """Under root, even the file copying runs as the unprivileged uid, in a helper process:
        a root controller must never follow a path the program could have swapped for a symlink.

        The program runs under the helper's uid, so it can kill the helper (``os.kill(os.getppid(),
        9)``). The helper first reports the program's pid; a helper that dies by a signal we did not
        send after the program started was killed by the program (only it and root can): the
        program's process group is killed and the call is the program's failure (``killed``)."""
        helper = subprocess.Popen(
            [self.python, "-I", "-S", "-c", _EXECUTOR_SRC, "--once", work],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=work,
            start_new_session=True,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            user=self.uid,
            group=self.uid,
            extra_groups=[],
        )
        t0 = time.monotonic()
        try:
            wait_s = req["timeout_s"] + self.limits.kill_grace_s + 10
            out, err = helper.communicate(wire.encode(req), timeout=wait_s)
        except subprocess.TimeoutExpired:
            os.killpg(helper.pid, 9)
            out, _ = helper.communicate()
            self._kill_program(_frames(out))
            return {"error": "the process backend's helper did not finish in time"}
        frames = _frames(out)
        result = next((f for f in frames if f.get("op") == "result"), None)
        if result is not None and helper.returncode == 0:
            return result
        pid = self._kill_program(frames)
        if pid is not None and helper.returncode < 0:
            return _helper_killed_report(-helper.returncode, time.monotonic() - t0)
        why = err.decode(errors="replace")[-500:]
        return {"error": f"the process backend's helper failed (rc={helper.returncode}): {why}"}

    def _kill_program(self, frames: list[dict]) -> int | None:
        """Kill the process group of the program the helper started (if any and still ours)."""
        pid = next((f["pid"] for f in frames if f.get("op") == "started"), None)
        if pid is None:
            return None
        try:
            if os.stat(f"/proc/{pid}").st_uid == self.uid:  # not a recycled pid of someone else
                os.killpg(pid, 9)  # the program leads its own session and group
        except OSError:
            pass
        return pid


def _frames(out: bytes) -> list[dict]:
    """The helper's frames (``started``, then ``result``), as far as they arrived whole."""
    frames, i = [], 0
    while i + 4 <= len(out):
        n = int.from_bytes(out[i : i + 4], "big")
        if i + 4 + n > len(out):
            break
        frames.append(wire.decode(out[i + 4 : i + 4 + n]))
        i += 4 + n
    return frames


def _helper_killed_report(sig: int, wall_s: float) -> dict:
    return failed_report(-9, wall_s, [f"the program killed its sandbox helper (signal {sig}); the program was killed"])


def probe() -> tuple[bool, str]:
    """The process backend always works; it is just not isolated."""
    return True, "always available (NOT isolated)"

"""The Sandbox protocol, its result type, limits, and the helpers every backend shares.

A sandbox runs one program per ``exec`` call in a fresh process (``code`` is Python source run by a
fresh ``python3``; ``argv`` is any command) inside a work directory that persists between calls of
the *same* sandbox object (``write_file`` / ``read_file``) and is never visible to another one.

Why a call ended is an :class:`ExecStatus`; infrastructure failures (daemon gone, executor died)
are ``INFRA_ERROR`` and never raise, so they can never be scored as a failure of the program.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Mapping, Protocol, Sequence, runtime_checkable

from sandbox.executor.report import failed_report


class ExecStatus(StrEnum):
    """Why an ``exec`` call ended, most specific first (see :func:`classify`)."""

    OK = "ok"  # exit code 0, output complete
    NONZERO_EXIT = "nonzero_exit"  # the program failed (exit code != 0)
    TIMEOUT = "timeout"  # wall-clock limit hit; the program was killed
    MEMORY_EXCEEDED = "memory_exceeded"  # memory limit hit (OOM kill, or the allocation limit reached)
    OUTPUT_TRUNCATED = "output_truncated"  # exit 0 but output was capped, or killed for flooding
    KILLED = "killed"  # ended by a signal (other than our timeout / OOM)
    INFRA_ERROR = "infra_error"  # the sandbox failed, not the program: never a reward


@dataclass(frozen=True)
class ExecResult:
    """What one ``exec`` call did. ``exit_code`` is negative (-signal) when a signal ended it."""

    status: ExecStatus
    exit_code: int | None
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float
    truncated: bool = False
    error: str = ""  # infrastructure detail when status is INFRA_ERROR (also appended to stderr)

    @property
    def ok(self) -> bool:
        return self.status == ExecStatus.OK

    @classmethod
    def infra(cls, message: str, wall_s: float = 0.0) -> "ExecResult":
        return cls(ExecStatus.INFRA_ERROR, None, "", f"[sandbox infra_error] {message}", wall_s, 0.0, False, message)


@dataclass(frozen=True)
class SandboxLimits:
    """Per-call limits. Hashable: the docker / bwrap pools are shared per (backend, image, limits)."""

    timeout_s: float = 5.0  # default wall-clock limit of one call (``exec`` may override)
    memory_mb: int = 512  # memory of one call (cgroup where available, else RLIMIT_AS)
    max_output_bytes: int = 65536  # kept per stream: the first and last halves, with a marker
    flood_bytes: int = 8 << 20  # a stream producing more than this is killed (OUTPUT_TRUNCATED)
    nproc: int = 64  # processes + threads of one call (pids cgroup / RLIMIT_NPROC)
    disk_mb: int = 64  # size of the work directory (tmpfs) and largest file
    max_files: int = 4096  # inodes of the work directory (0 would mean unbounded: refused)
    cpus: float = 1.0  # CPU share of one container (docker)
    persist_mb: int = 16  # work-directory changes kept between calls of one sandbox
    kill_grace_s: float = 2.0  # the caller waits this long past the timeout before giving up

    def __post_init__(self):
        for name in (
            "timeout_s",
            "memory_mb",
            "max_output_bytes",
            "flood_bytes",
            "nproc",
            "disk_mb",
            "max_files",
            "cpus",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"sandbox limit {name} must be > 0, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class Scratch:
    """A writable tmpfs of a docker / bwrap worker, bounded in bytes AND in inodes.

    Both bounds matter: an empty file costs no block but ~1 KiB of kernel memory (inode + dentry),
    charged to the worker's memory cgroup, which the resident executor shares; a tmpfs without an
    inode bound lets a program that creates files until it is stopped starve the executor.
    """

    path: str
    size_mb: int
    inodes: int
    mode: int


def scratch_mounts(limits: SandboxLimits) -> tuple[Scratch, ...]:
    """The writable directories of a worker (everything else is read-only)."""
    return (
        Scratch("/work", limits.disk_mb, limits.max_files, 0o755),
        Scratch("/tmp", 32, 4096, 0o1777),
        Scratch("/dev/shm", 16, 1024, 0o1777),
    )


#: Kernel memory of one tmpfs inode (inode + dentry, ~1 KiB measured), with a margin.
INODE_KIB = 2
#: What the resident executor itself may need (Python, a call's request and result).
EXECUTOR_MB = 64


def worker_memory_mb(limits: SandboxLimits) -> int:
    """Memory bound of a worker (its cgroup): the program + full scratch tmpfs + the executor.

    Scratch pages and inodes outlive the program that made them, so the bound reserves them on top
    of ``memory_mb``: a program that fills every scratch mount and then allocates is OOM-killed
    (it has ``oom_score_adj`` 1000), and the executor still has ``EXECUTOR_MB`` to carry on.
    """
    mounts = scratch_mounts(limits)
    inode_mb = -(-sum(m.inodes for m in mounts) * INODE_KIB // 1024)
    return limits.memory_mb + sum(m.size_mb for m in mounts) + inode_mb + EXECUTOR_MB


@runtime_checkable
class Sandbox(Protocol):
    """What environments and tools code against. Every method is safe to call from any event loop."""

    backend_name: str
    limits: SandboxLimits

    async def exec(
        self,
        code: str | None = None,
        argv: Sequence[str] | None = None,
        stdin: str | bytes | None = None,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult: ...

    async def write_file(self, path: str, data: str | bytes, mode: int = 0o644) -> None: ...

    async def read_file(self, path: str, binary: bool = False) -> str | bytes: ...

    async def close(self) -> None: ...


# ---------------------------------------------------------------- environment of the program

#: The only variables a program sees besides the ones the caller passes explicitly in ``env``.
BASE_ENV: dict[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONUNBUFFERED": "1",
}
#: Parent variables allowed through (harmless, locale/time only). Everything else is dropped.
INHERITED_ENV: frozenset[str] = frozenset({"TZ"})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def build_env(extra: Mapping[str, str] | None, home: str) -> dict[str, str]:
    """The program's environment: ``BASE_ENV`` + allowlisted parent vars + the caller's ``env``."""
    env = dict(BASE_ENV, HOME=home, TMPDIR="/tmp")
    env.update({k: os.environ[k] for k in INHERITED_ENV if k in os.environ})
    for key, value in (extra or {}).items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise ValueError(f"invalid environment variable name {key!r}")
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"environment variable {key} must be a string without NUL bytes")
        env[key] = value
    return env


def build_argv(code: str | None, argv: Sequence[str] | None, python: str) -> list[str]:
    """``code`` -> ``[python, -I, -c, code]`` (isolated mode: ignores PYTHON* variables and cwd)."""
    if (code is None) == (argv is None):
        raise ValueError("exec needs exactly one of code= (python source) or argv= (a command)")
    if code is not None:
        if not isinstance(code, str):
            raise ValueError("code must be a str of python source")
        if "\0" in code or len(code.encode()) > 120_000:
            raise ValueError("code must be under 120 kB and contain no NUL bytes")
        return [python, "-I", "-c", code]
    argv = list(argv)
    if not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
        raise ValueError("argv must be a non-empty list of strings without NUL bytes")
    return argv


def to_bytes(data: str | bytes | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


# ---------------------------------------------------------------- output and status


def cap_output(head: bytes, tail: bytes, total: int) -> str:
    """Text of a capped stream: ``head`` and ``tail`` kept, the middle replaced by a marker."""
    if total <= len(head) + len(tail):
        return (head + tail).decode("utf-8", errors="replace")
    dropped = total - len(head) - len(tail)
    marker = f"\n[... {dropped} bytes truncated ...]\n"
    return head.decode("utf-8", errors="replace") + marker + tail.decode("utf-8", errors="replace")


def classify(
    exit_code: int | None,
    *,
    timed_out: bool = False,
    oom_killed: bool = False,
    flooded: bool = False,
    truncated: bool = False,
    memory_limit_hit: bool = False,
) -> ExecStatus:
    """The status of a finished call, from facts the kernel and the runner's clock gave: ``timed_out``
    (the runner's clock), ``oom_killed`` (the cgroup's OOM-kill counter went up), the exit status;
    and ``memory_limit_hit`` (``sandbox/executor/child.py::_memory_limit_hit``), the one fact that is
    the program's own report (an RLIMIT_AS refusal leaves no kernel record), which only tells one
    failure of the program from another: no text makes a call OK or an infra_error."""
    if timed_out:
        return ExecStatus.TIMEOUT
    if oom_killed or (memory_limit_hit and exit_code not in (0, None)):
        return ExecStatus.MEMORY_EXCEEDED
    if flooded:
        return ExecStatus.OUTPUT_TRUNCATED
    if exit_code is None:
        return ExecStatus.INFRA_ERROR
    if exit_code < 0:
        return ExecStatus.KILLED
    if exit_code != 0:
        return ExecStatus.NONZERO_EXIT
    return ExecStatus.OUTPUT_TRUNCATED if truncated else ExecStatus.OK


def oom_report(wall_s: float) -> dict:
    """The report of a call whose executor the OOM killer took along with the program (``pool``).

    The program, which resets its own ``oom_score_adj`` to 0 and spreads its memory over processes
    smaller than the executor, chooses the victim; only it can fill the worker's memory (the
    executor's share is reserved, see :func:`worker_memory_mb`): its failure, not the sandbox's.
    """
    note = "the program exhausted the worker's memory and the executor was killed with it; worker replaced"
    return failed_report(-9, wall_s, [note], oom_killed=True)


def memory_note(oom_killed: bool, limits: SandboxLimits | None) -> str:
    """What a ``memory_exceeded`` result says about the limit it met: the worker's memory cgroup
    (the kernel's OOM killer, the sum over the call's processes) or the per-process RLIMIT_AS."""
    if oom_killed:
        bound = f"the worker's {worker_memory_mb(limits)} MB" if limits is not None else "the worker's memory limit"
        return f"memory_exceeded: killed by the kernel's OOM killer: the call's processes together passed {bound} (memory cgroup)"
    bound = f" of {limits.memory_mb} MB" if limits is not None else ""
    return f"memory_exceeded: an allocation was refused at the per-process address-space limit{bound} (RLIMIT_AS)"


def result_from_report(report: Mapping, wall_s: float | None = None, limits: SandboxLimits | None = None) -> ExecResult:
    """An :class:`ExecResult` from the runner's report (see ``sandbox.executor.child.run_child``);
    ``limits``, the call's, let a ``memory_exceeded`` note name the limit it met."""
    out, err = report["stdout"], report["stderr"]
    truncated = out["total"] > len(out["head"]) + len(out["tail"]) or err["total"] > len(err["head"]) + len(err["tail"])
    status = classify(
        report["exit_code"],
        timed_out=report["timed_out"],
        oom_killed=report["oom_killed"],
        flooded=report["flooded"],
        truncated=truncated,
        memory_limit_hit=report.get("memory_limit_hit", False),
    )
    stderr = cap_output(err["head"], err["tail"], err["total"])
    notes = list(report.get("notes", ()))
    if status == ExecStatus.MEMORY_EXCEEDED:
        notes.insert(0, memory_note(report["oom_killed"], limits))
    for note in notes:  # a note may quote a file name that is not UTF-8
        stderr += "\n[sandbox] " + note.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return ExecResult(
        status=status,
        exit_code=report["exit_code"],
        stdout=cap_output(out["head"], out["tail"], out["total"]),
        stderr=stderr,
        wall_s=report["wall_s"] if wall_s is None else wall_s,
        cpu_s=report["cpu_s"],
        truncated=truncated or report["flooded"],
    )


# ---------------------------------------------------------------- the work directory


def check_relpath(path: str) -> str:
    """A normalised path inside the work directory, or ``ValueError`` (absolute, ``..``, empty)."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise ValueError(f"invalid sandbox path {path!r}")
    if path.startswith("/"):
        if path == "/work" or path.startswith("/work/"):
            path = path[len("/work/") :]
        else:
            raise ValueError(f"sandbox paths are relative to the work directory, got {path!r}")
    norm = posixpath.normpath(path)
    if norm in (".", "") or norm.startswith("../") or norm == "..":
        raise ValueError(f"sandbox path {path!r} leaves the work directory")
    return norm


@dataclass
class FileStore:
    """The controller's copy of a sandbox's work directory (the docker / bwrap backends).

    Each call restores it into the worker's fresh tmpfs and gets the changes back, so a sandbox
    does not hold a container between calls and nothing survives in a worker from one call to the
    next. Entries: ``path -> ("f", mode, bytes)`` | ``("d", mode, b"")`` | ``("l", 0, target)``.
    """

    entries: dict[str, tuple[str, int, bytes]] = field(default_factory=dict)

    def write(self, path: str, data: bytes, mode: int = 0o644) -> None:
        path = check_relpath(path)
        kind = self.entries.get(path, ("f",))[0]
        if kind == "d":
            raise IsADirectoryError(f"{path} is a directory in the sandbox")
        parts = path.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if self.entries.get(parent, ("d",))[0] != "d":
                raise NotADirectoryError(f"{parent} is not a directory in the sandbox")
            self.entries.setdefault(parent, ("d", 0o755, b""))
        self.entries[path] = ("f", mode & 0o777, data)

    def read(self, path: str) -> bytes:
        path = check_relpath(path)
        for _ in range(40):  # follow symlinks that stay inside the work directory
            entry = self.entries.get(path)
            if entry is None:
                raise FileNotFoundError(f"no such file in the sandbox: {path}")
            kind, _mode, data = entry
            if kind == "f":
                return data
            if kind == "d":
                raise IsADirectoryError(f"{path} is a directory in the sandbox")
            target = data.decode(errors="replace")
            if not target.startswith("/"):
                target = posixpath.join(posixpath.dirname(path), target)
            path = check_relpath(target)
        raise OSError(f"too many levels of symbolic links: {path}")

    def wire(self) -> list[dict]:
        """Entries as the executor's ``restore`` list (parents first)."""
        return [{"path": p, "kind": k, "mode": m, "data": d} for p, (k, m, d) in sorted(self.entries.items())]

    def apply(self, changed: list[dict], deleted: list[str]) -> None:
        for path in deleted:
            self.entries.pop(path, None)
        for e in changed:
            self.entries[e["path"]] = (e["kind"], e["mode"], e["data"])


class FileBackedSandbox:
    """The file half of :class:`Sandbox` over the controller's :class:`FileStore` (the process,
    docker and bwrap backends), and the closed state; a subclass sets ``_files`` and implements ``exec``."""

    _files: FileStore
    _closed: bool = False

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("exec on a closed sandbox")

    async def write_file(self, path: str, data: str | bytes, mode: int = 0o644) -> None:
        self._files.write(path, to_bytes(data), mode)

    async def read_file(self, path: str, binary: bool = False) -> str | bytes:
        data = self._files.read(path)
        return data if binary else data.decode("utf-8", errors="replace")

    async def close(self) -> None:
        """Idempotent; the sandbox's files are dropped (a pooled sandbox's pool stays: it is shared)."""
        self._closed = True
        self._files.entries.clear()

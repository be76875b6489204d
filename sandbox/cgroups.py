"""Per-worker cgroups (memory, pids, cpu) for the bubblewrap backend, when we may create them.

Root on cgroup v1 only (separate ``memory``, ``pids`` and ``cpu`` hierarchies): on a cgroup v2 host
no cgroup is made (that needs our own process moved to a leaf before controllers can be delegated,
not done), and ``available()`` says so. Rlimits remain the fallback: RLIMIT_NPROC under a dedicated uid and RLIMIT_AS per
process; a cgroup additionally bounds the *sum* over a call's processes, so a bomb of many
processes, each under its own RLIMIT_AS, cannot take the host's memory.
"""

from __future__ import annotations

import logging
import os
import time

log = logging.getLogger("sandbox.cgroups")

ROOT = "/sys/fs/cgroup"
PREFIX = "agent_rl-"


def _own_path(controller: str) -> str | None:
    """Our cgroup path in ``controller``'s v1 hierarchy ('' for v2), or None if absent."""
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, names, path = line.rstrip("\n").split(":", 2)
                if controller in names.split(","):
                    return path
    except OSError:
        pass
    return None


def _base_dirs() -> dict[str, str]:
    """``controller -> directory`` under which we may create our cgroups (empty if none)."""
    if os.geteuid() != 0:
        return {}
    dirs = {}
    for ctl in ("memory", "pids", "cpu"):
        own = _own_path(ctl)
        if own is not None and os.path.isdir(os.path.join(ROOT, ctl)):
            d = os.path.join(ROOT, ctl) + own
            if os.access(d, os.W_OK):
                dirs[ctl] = d
    return dirs


class WorkerCgroup:
    """One cgroup per worker in each available v1 controller; ``procs_files`` to join them."""

    def __init__(self, name: str, memory_bytes: int, pids: int, cpus: float = 1.0):
        self.dirs: dict[str, str] = {}
        for ctl, base in _base_dirs().items():
            d = os.path.join(base, PREFIX + name)
            try:
                os.makedirs(d, exist_ok=True)
                if ctl == "memory":
                    _write(d, "memory.limit_in_bytes", memory_bytes)
                    if os.path.exists(os.path.join(d, "memory.memsw.limit_in_bytes")):
                        _write(d, "memory.memsw.limit_in_bytes", memory_bytes)
                elif ctl == "pids":
                    _write(d, "pids.max", pids)
                else:
                    _write(d, "cpu.cfs_period_us", 100_000)
                    _write(d, "cpu.cfs_quota_us", int(cpus * 100_000))
                self.dirs[ctl] = d
            except OSError as exc:
                log.debug("cgroup %s unavailable: %s", ctl, exc)
                _rmdir(d)

    @property
    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs.values()]

    def oom_kills(self) -> int | None:
        d = self.dirs.get("memory")
        if d is None:
            return None
        try:
            with open(os.path.join(d, "memory.oom_control")) as f:
                for line in f:
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return None

    def remove(self, wait_s: float = 2.0) -> None:
        end = time.monotonic() + wait_s
        for d in self.dirs.values():
            while not _rmdir(d) and time.monotonic() < end:
                time.sleep(0.02)


def _write(d: str, name: str, value: int) -> None:
    with open(os.path.join(d, name), "w") as f:
        f.write(str(value))


def _rmdir(d: str) -> bool:
    try:
        os.rmdir(d)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


def available() -> list[str]:
    return sorted(_base_dirs())


def reap_stale() -> int:
    """Remove our cgroups left by controllers that died (named ``agent_rl-<pid>-...``)."""
    removed = 0
    for base in _base_dirs().values():
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            if not name.startswith(PREFIX):
                continue
            try:
                pid = int(name[len(PREFIX) :].split("-")[0])
            except ValueError:
                continue
            if pid != os.getpid() and not os.path.exists(f"/proc/{pid}"):
                removed += _rmdir(os.path.join(base, name))
    return removed

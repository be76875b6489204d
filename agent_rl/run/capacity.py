"""Whether a run's episodes in flight fit in this machine's memory, checked at start (issue 58).

An episode in flight holds memory: a code-execution episode its share of the sandbox (the warm
pool's workers, the controller's threads and buffers), a JVM text game its own JVM. What one holds
was measured by ``bench/load.py``: the peak memory of an ``agent-rl eval`` run with every episode
in flight at once (its process tree, its JVMs, its containers), over its episodes. Sandbox envs
(those whose constructor takes ``sandbox_backend``) are counted with ``SANDBOX_EPISODE_MB`` of
their backend; an env class may declare its own ``episode_memory_mb`` (the JVM games do: their
JVM), added to it. A run whose episodes in flight need more than the memory available here
(``MemAvailable``, or less when its memory cgroup's limit leaves less) is refused before anything
loads, in one line that names how many fit and the key that sets it.

Envs that declare nothing and take no sandbox are not checked: nothing was measured for them.
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import TYPE_CHECKING

from agent_rl.run.envloader import check_env_id, env_class

if TYPE_CHECKING:
    from agent_rl.config import Config  # only a type: the check runs before torch loads

# MB per code-execution episode in flight on each sandbox backend: the peak memory of
# `python bench/load.py --docker 64 --backend B` over its 64 episodes (bench/results/load/20261207/:
# docker 679 MB, bwrap 746, process 1,185). The eval process (~600 MB) and docker's 4 pooled
# containers are in it: at 64 the share is more than one more episode adds.
SANDBOX_EPISODE_MB: dict[str, float] = {"docker": 10.6, "bwrap": 11.7, "process": 18.5}
AUTO_BACKEND = "auto"  # counted as the backend that needs the most (auto picks docker, bwrap or process)
_UNLIMITED = 1 << 60  # a cgroup v1 limit this large is no limit


def episode_mb(cfg: Config) -> tuple[float, str, list[str]] | None:
    """MB one episode in flight holds, where its code runs (``" on the docker sandbox"``, or ``""``)
    and notes on the count; None when nothing was measured for the env."""
    check_env_id(cfg.env.id, cfg.env.plugins)  # an unknown id: its own one-line error
    cls = env_class(cfg.env.id)
    total = float(getattr(cls, "episode_memory_mb", None) or 0.0)
    where, notes = "", []
    try:
        takes_sandbox = "sandbox_backend" in inspect.signature(cls).parameters
    except (TypeError, ValueError):  # a creator without a signature
        takes_sandbox = False
    if takes_sandbox:
        backend = str(cfg.env.options.get("sandbox_backend", cfg.sandbox.backend))
        if backend == AUTO_BACKEND:
            largest = max(SANDBOX_EPISODE_MB, key=SANDBOX_EPISODE_MB.get)
            total += SANDBOX_EPISODE_MB[largest]
            where, notes = " on the auto sandbox", [f"auto counted as {largest}, the largest"]
        elif backend in SANDBOX_EPISODE_MB:  # a backend nothing was measured for (a plugin's) adds nothing
            total += SANDBOX_EPISODE_MB[backend]
            where = f" on the {backend} sandbox"
    return (total, where, notes) if total else None


def rollout_workers(cfg: Config) -> int:
    """Engines running ``rollout.concurrency`` episodes each on this machine: the rollout worker
    processes (``distributed.backend: process``, or Ray started here), else one."""
    d = cfg.distributed
    if d.backend == "process":
        return d.process.num_rollout_workers
    if d.backend == "ray" and d.ray.address is None:
        return d.ray.num_rollout_workers
    return 1


def capacity_error(cfg: Config, available: float, most_episodes: int | None = None) -> str | None:
    """The refusal when the run's episodes in flight need more than ``available`` MB, else None.
    ``most_episodes``: a command that never runs more at once (eval: its episodes x k)."""
    per = episode_mb(cfg)
    if per is None:
        return None
    mb, where, notes = per
    workers = rollout_workers(cfg)
    n = cfg.rollout.concurrency * workers
    if most_episodes is not None:
        n = min(n, most_episodes)
    if n * mb <= available:
        return None
    fit = math.floor(available / mb)
    fix = f"set rollout.concurrency={fit // workers}" if fit >= workers else "free memory or use a larger machine"
    each = ", ".join([f"~{mb:g} MB each", *notes, *([f"{workers} rollout workers"] if workers > 1 else [])])
    return (
        f"{n} concurrent episodes of {cfg.env.id}{where} ({each}) need ~{n * mb / 1024:.1f} GiB, "
        f"this machine has {available / 1024:.1f} GiB available: at most {fit} fit; {fix}"
    )


def check_capacity(cfg: Config, most_episodes: int | None = None, available: float | None = None) -> None:
    """``ValueError`` (the CLI's one line) when the run's episodes in flight do not fit here;
    ``available``: MB (None: this machine's, ``available_mb``)."""
    if episode_mb(cfg) is None:
        return
    error = capacity_error(cfg, available_mb() if available is None else available, most_episodes)
    if error is not None:
        raise ValueError(error)


# -- the memory available here ----------------------------------------------------------------------
def meminfo_available_mb(path: str | Path = "/proc/meminfo") -> float:
    for line in Path(path).read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"{path}: no MemAvailable line")


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return None if text in ("", "max") else int(text)


def _stat(d: Path) -> dict[str, int]:
    try:
        return {k: int(v) for k, v in (line.split() for line in (d / "memory.stat").read_text().splitlines())}
    except OSError:
        return {}


def _room(limit: int | None, usage: int | None, inactive: int) -> int | None:
    """What a cgroup's limit leaves: limit - (usage - inactive file pages, which the kernel reclaims)."""
    if limit is None or usage is None or limit >= _UNLIMITED:
        return None
    return limit - max(0, usage - inactive)


def _v2_rooms(root: Path, path: str) -> list[int | None]:
    """What each cgroup from the process's up to ``root`` leaves (any of their limits binds)."""
    d = root / path.lstrip("/")
    d, rooms = (d if d.is_dir() else root), []
    while True:
        inactive = _stat(d).get("inactive_file", 0)
        rooms.append(_room(_read_int(d / "memory.max"), _read_int(d / "memory.current"), inactive))
        if d == root:
            return rooms
        d = d.parent


def _v1_room(root: Path, path: str) -> int | None:
    """What the process's v1 memory cgroup leaves; ``hierarchical_memory_limit`` covers its ancestors."""
    base = root / "memory"
    d = base / path.lstrip("/") if (base / path.lstrip("/")).is_dir() else base
    stat = _stat(d)
    limits = [
        x for x in (_read_int(d / "memory.limit_in_bytes"), stat.get("hierarchical_memory_limit")) if x is not None
    ]
    limit = min(limits) if limits else None
    return _room(limit, _read_int(d / "memory.usage_in_bytes"), stat.get("total_inactive_file", 0))


def cgroup_room_mb(proc_cgroup: str | Path = "/proc/self/cgroup", root: str | Path = "/sys/fs/cgroup") -> float | None:
    """MB this process's memory cgroup still allows, or None without a limit. Inside a container the
    process's path may not exist under ``root``: the cgroup mounted at ``root`` is its own then."""
    rooms: list[int | None] = []
    for line in Path(proc_cgroup).read_text().splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and controllers == "":  # cgroup v2
            rooms += _v2_rooms(Path(root), path)
        elif "memory" in controllers.split(","):  # cgroup v1
            rooms.append(_v1_room(Path(root), path))
    found = [r for r in rooms if r is not None]
    return min(found) / 2**20 if found else None


def available_mb() -> float:
    """This machine's available memory (MB): ``MemAvailable``, or less under a memory cgroup limit."""
    room = cgroup_room_mb() if Path("/proc/self/cgroup").exists() else None
    avail = meminfo_available_mb()
    return min(avail, room) if room is not None else avail

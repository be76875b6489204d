"""What an inference engine started by the project is given on this machine, and why it died.

- **KV cache (CPU).** vLLM's CPU worker takes half of the machine's memory for its KV cache unless
  told a size. The size here comes from the run's need instead: the tokens it holds at once
  (sequences x length) times the bytes one token's keys and values take over every layer, with a
  margin, capped by a config value, and never below one sequence of the engine's context length
  (vLLM refuses to start with less).
- **Cores.** vLLM's CPU worker binds its OpenMP threads to the cores of ``VLLM_CPU_OMP_THREADS_BIND``
  (``auto``: one NUMA node's cores less one kept for the scheduler: core 0 on a 2-core machine, for
  every engine). An engine started here is bound to the cores it is given
  (``rollout.backend.cpu_cores``), one list per tensor-parallel rank. Without them it claims cores
  no other engine on this machine holds (``CoreClaim``: a lock file per core, held while the engine
  runs, released when it closes or its process ends): of the cores this process may run on, the
  free ones less one left to vLLM's scheduler (``pick_cores``). So the first engine of a 2-core
  machine gets core 0 and the second core 1; once every core is held, engines share the default.
- **Death.** An engine process that exits is reported with its exit status and, when the kernel's
  OOM killer fired in this cgroup since the engine started, with that record (cgroup v2
  ``memory.events``, v1 ``memory.oom_control``); one that exited after its requests had no output
  for about vLLM's RPC timeout of a model step is named as that timeout.
"""

from __future__ import annotations

import fcntl
import math
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

CORES_DIR_ENV = "AGENT_RL_CORES_DIR"
STALL_SHARE = 0.9  # a death after this share of the step timeout without output is that timeout
MARGIN = 1.2  # KV blocks are allocated whole and the scheduler keeps some free: room above the exact need


def kv_bytes_per_token(hf_config: Any, dtype_bytes: int) -> int:
    """Keys and values of one token over every layer: 2 x layers x kv heads x head dim x dtype bytes."""
    c = getattr(hf_config, "text_config", None) or hf_config
    heads = c.num_attention_heads
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    return 2 * c.num_hidden_layers * kv_heads * head_dim * dtype_bytes


def kv_cache_bytes(tokens: int, context_len: int, per_token: int, cap_gb: float) -> tuple[int, bool]:
    """(bytes, capped): ``tokens`` (the run's sequences x length) with the margin, at least one
    ``context_len`` sequence, at most ``cap_gb`` GiB. Raises ValueError when one sequence does not fit."""
    one_sequence = math.ceil(context_len * per_token * MARGIN)
    cap = int(cap_gb * 2**30)
    if one_sequence > cap:
        raise ValueError(
            f"rollout.backend.kv_cache_max_gb={cap_gb} holds less than one sequence of {context_len} tokens "
            f"({one_sequence / 2**30:.2f} GiB): raise it, or lower rollout.backend.max_model_len"
        )
    need = max(math.ceil(tokens * per_token * MARGIN), one_sequence)
    mib = 2**20
    need = -(-need // mib) * mib  # whole MiB
    return (cap, True) if need > cap else (need, False)


def parse_cores(spec: str) -> list[int]:
    """``"0-3,6"`` -> ``[0, 1, 2, 3, 6]``; a ValueError names the key on anything else."""
    cores: list[int] = []
    try:
        for part in spec.split(","):
            lo, _, hi = part.strip().partition("-")
            cores += range(int(lo), int(hi or lo) + 1)
    except ValueError:
        raise ValueError(f"rollout.backend.cpu_cores={spec!r}: expected core ids like '0-3' or '0,2,4'") from None
    if not cores:
        raise ValueError(f"rollout.backend.cpu_cores={spec!r}: no core ids")
    return cores


def omp_binding(cores: list[int], ranks: int) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND``: the cores split evenly over the ranks, ``|`` between ranks."""
    if len(cores) < ranks:
        raise ValueError(f"{len(cores)} cores for {ranks} tensor-parallel ranks: give each rank at least one core")
    per = len(cores) // ranks
    return "|".join(",".join(str(c) for c in cores[r * per : (r + 1) * per]) for r in range(ranks))


def default_cores() -> list[int]:
    """The cores this process may run on (its affinity, which a container's cpuset narrows), less
    the last one when there are several: vLLM's scheduler process runs beside the worker's
    threads, which spin, so (as vLLM's ``auto`` does) one core is left to it."""
    cores = sorted(os.sched_getaffinity(0))
    return cores[:-1] if len(cores) > 1 else cores


def pick_cores(allowed: list[int], taken: set[int]) -> list[int]:
    """The cores an engine without ``cpu_cores`` is bound to: of ``allowed``, those no other engine
    holds (``taken``), less the last when several are free (left to vLLM's scheduler); when every
    one is held, ``allowed`` less its last (shared, as vLLM's ``auto`` would)."""
    free = [c for c in allowed if c not in taken] or allowed
    return free[:-1] if len(free) > 1 else free


def cores_dir() -> Path:
    """Where engines of this user on this machine record the cores they hold (``AGENT_RL_CORES_DIR``)."""
    return Path(os.environ.get(CORES_DIR_ENV) or Path(tempfile.gettempdir()) / f"agent_rl_cores-{os.getuid()}")


class CoreClaim:
    """The cores one engine holds on this machine: an exclusive ``flock`` on ``<dir>/core-<n>`` per
    core, kept while the engine runs. The kernel drops a lock when its process ends, so a claim is
    never stale; claims are made one at a time (a lock on ``<dir>/registry``)."""

    def __init__(self, cores: list[int], held: list[int]):
        self.cores, self._held = cores, held  # held: descriptors of the locked core files

    @classmethod
    def take(cls, allowed: list[int] | None = None, root: Path | None = None) -> CoreClaim:
        allowed = sorted(os.sched_getaffinity(0)) if allowed is None else allowed
        root = root or cores_dir()
        root.mkdir(parents=True, exist_ok=True)
        registry = os.open(root / "registry", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(registry, fcntl.LOCK_EX)
            locked = {c: fd for c in allowed if (fd := _lock(root / f"core-{c}")) is not None}
            cores = pick_cores(allowed, {c for c in allowed if c not in locked})
            for c, fd in locked.items():
                if c not in cores:
                    os.close(fd)
            return cls(cores, [locked[c] for c in cores if c in locked])
        finally:
            os.close(registry)  # its lock goes with it

    def release(self) -> None:
        for fd in self._held:
            os.close(fd)
        self._held = []


def _lock(path: Path) -> int | None:
    """A descriptor holding an exclusive lock on ``path``, or None when another holder has it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _cgroup_files() -> list[Path]:
    """This process's OOM record files: cgroup v2 ``memory.events``, v1 ``memory.oom_control``."""
    files = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return files
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            files += [Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.events", Path("/sys/fs/cgroup/memory.events")]
        elif "memory" in controllers.split(","):
            root = Path("/sys/fs/cgroup/memory")
            files += [root / path.lstrip("/") / "memory.oom_control", root / "memory.oom_control"]
    return files


def oom_kills() -> int | None:
    """The kernel's count of OOM kills in this process's cgroup; None where it cannot be read."""
    for f in _cgroup_files():
        try:
            text = f.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return None


def death_cause(
    name: str,
    exitcode: int | None,
    oom_before: int | None,
    stalled_s: float | None = None,
    step_timeout_s: float | None = None,
) -> str | None:
    """One line: which process exited, how, and why where it can be known: the kernel's OOM record
    when it grew since the start; vLLM's RPC timeout of a model step when the process failed on its
    own (an exception: a positive status, or ``None``: it reported itself dead and is still shutting
    down) after its requests had no output for at least ``STALL_SHARE`` of ``step_timeout_s``. (vLLM's
    engine core raises ``TimeoutError("RPC call to sample_tokens timed out.")`` in its own process and
    exits; this process only sees the engine gone.) None: a process still exiting, for no known reason."""
    timed_out = stalled_s is not None and bool(step_timeout_s) and stalled_s >= STALL_SHARE * step_timeout_s
    how = "reported itself dead" if exitcode is None else f"exit status {exitcode}"
    if exitcode is not None and exitcode < 0:
        with_signal = signal.Signals(-exitcode).name if -exitcode in signal.valid_signals() else str(-exitcode)
        how = f"killed by {with_signal}"
    now = oom_kills()
    if oom_before is not None and now is not None and now > oom_before:
        return (
            f"{name} {how}: the kernel's OOM killer fired in this cgroup ({now - oom_before} kill(s) since the engine "
            f"started): out of memory; lower rollout.backend.kv_cache_max_gb / kv_cache_gb, or run fewer engines here"
        )
    if (exitcode is None or exitcode > 0) and timed_out:
        return (
            f"{name} {how} after {stalled_s:.0f} s without output: vLLM's engine-core RPC timeout of a model step "
            f"({step_timeout_s:g} s, VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS); its worker was starved or hung (engines or "
            f"processes sharing its cores: rollout.backend.cpu_cores); give it its own cores, or raise "
            f"rollout.backend.step_timeout_s"
        )
    if exitcode is None:
        return None
    if exitcode == -signal.SIGKILL:
        return f"{name} {how} (no OOM kill in this cgroup's record{'' if now is not None else ', which is unreadable'})"
    return f"{name} {how}"

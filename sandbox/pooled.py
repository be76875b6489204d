"""The sandbox of the docker and bwrap backends: each call leases a worker from the shared pool of
its (backend, image, limits, size); its files live with the controller in a :class:`FileStore`."""

from __future__ import annotations

import time
from typing import Callable, Mapping, Sequence

from agent_rl.core.errors import InfraError
from sandbox.base import (
    ExecResult,
    ExecStatus,
    FileBackedSandbox,
    FileStore,
    SandboxLimits,
    build_argv,
    build_env,
    result_from_report,
    to_bytes,
)
from sandbox.pool import WorkerPool, shared_pool


class PooledSandbox(FileBackedSandbox):
    """A sandbox whose calls lease a worker from a shared pool; its files live in a FileStore."""

    def __init__(
        self,
        backend_name: str,
        pool_key: tuple,
        make_pool: Callable[[], WorkerPool],
        limits: SandboxLimits,
        rlimits: dict,
        python: str = "python3",
    ):
        self.backend_name = backend_name
        self.limits = limits
        self._pool_key, self._make_pool = pool_key, make_pool
        self.pool = shared_pool(pool_key, make_pool)
        self.python = python
        self._rlimits = rlimits
        self._files = FileStore()

    def _request(self, argv: list[str], stdin: bytes | None, timeout_s: float, env: Mapping[str, str] | None) -> dict:
        rlimits = dict(self._rlimits, cpu=int(timeout_s) + 2)
        return {
            "op": "exec",
            "argv": argv,
            "stdin": stdin,
            "timeout_s": timeout_s,
            "env": build_env(env, home="/work"),
            "rlimits": rlimits,
            "max_output": self.limits.max_output_bytes,
            "flood_bytes": self.limits.flood_bytes,
            "persist_bytes": self.limits.persist_mb << 20,
            "persist_files": self.limits.max_files,
            "files": self._files.wire(),
        }

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
        request = self._request(build_argv(code, argv, self.python), to_bytes(stdin), timeout_s, env)
        if self.pool.closed:  # the shared pools were closed (e.g. close_all_pools): use the new one
            self.pool = shared_pool(self._pool_key, self._make_pool)
        t0 = time.monotonic()
        try:
            msg = await self.pool.call(request, timeout_s + self.limits.kill_grace_s + 3.0)
        except InfraError as exc:
            return ExecResult.infra(str(exc), time.monotonic() - t0)
        if msg.get("op") == "caller_timeout":  # the executor itself did not answer in time
            wall = time.monotonic() - t0
            return ExecResult(
                ExecStatus.TIMEOUT, None, "", "[sandbox] no answer from the executor; worker recycled", wall, 0.0, False
            )
        if msg.get("error"):
            return ExecResult.infra(msg["error"], time.monotonic() - t0)
        self._files.apply(msg.get("changed", []), msg.get("deleted", []))
        return result_from_report(msg, limits=self.limits)

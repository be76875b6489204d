"""One sandbox pool per Ray node, shared by every environment on that node.

``NodeSandboxPool`` is a named Ray actor (``agent_rl.sandbox_pool.<node id>``, pinned to its node)
that owns the node's sandboxes (docker / bwrap warm pools are per process, so one owner per node
means one warm pool per node). Environments in rollout workers reach it through ``NodeSandbox``, a
client with the ``Sandbox`` protocol, registered as the sandbox backend ``ray_node`` in the worker
process; each client is one session (one work directory) in the pool.

A pool that dies is restarted by Ray (``max_restarts=-1``); calls in flight, and calls of sessions
it no longer knows, come back as ``INFRA_ERROR`` results (never a reward of 0), and the next
session opens on the restarted pool.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from sandbox import make_sandbox, registry
from sandbox.base import ExecResult, SandboxLimits

BACKEND_NAME = "ray_node"
_NAMESPACE = "agent_rl"  # where the pool actors are named (set by ``register_backend``)


def pool_name(node_id: str) -> str:
    return f"agent_rl.sandbox_pool.{node_id}"


class NodeSandboxPool:
    """The sandboxes of one node (a Ray actor; every method is a coroutine on its event loop)."""

    def __init__(self, backend: str):
        self.backend = backend
        self.sessions: dict[str, Any] = {}

    async def open(self, limits: SandboxLimits) -> str:

        session = uuid.uuid4().hex
        self.sessions[session] = make_sandbox(backend=self.backend, limits=limits)
        return session

    async def exec(self, session: str, kwargs: dict[str, Any]) -> ExecResult:
        sandbox = self.sessions.get(session)
        if sandbox is None:
            return ExecResult.infra(f"sandbox session {session[:8]} is unknown to this pool (restarted?)")
        return await sandbox.exec(**kwargs)

    async def write_file(self, session: str, path: str, data: str | bytes, mode: int) -> None:
        await self._get(session).write_file(path, data, mode)

    async def read_file(self, session: str, path: str, binary: bool) -> str | bytes:
        return await self._get(session).read_file(path, binary)

    async def close(self, session: str) -> None:
        sandbox = self.sessions.pop(session, None)
        if sandbox is not None:
            await sandbox.close()

    async def stats(self) -> dict[str, Any]:

        return {"sessions": len(self.sessions), "pid": os.getpid(), "backend": self.backend}

    def _get(self, session: str) -> Any:
        if session not in self.sessions:
            raise RuntimeError(f"sandbox session {session[:8]} is unknown to this pool (restarted?)")
        return self.sessions[session]


def probe() -> tuple[bool, str]:
    import ray

    if not ray.is_initialized():
        return False, "not inside a Ray worker"
    return True, "the node's sandbox-pool actor"


class NodeSandbox:
    """A session in this node's ``NodeSandboxPool`` (the ``Sandbox`` protocol over Ray calls)."""

    backend_name = BACKEND_NAME

    def __init__(self, limits: SandboxLimits):
        self.limits = limits
        self.namespace = _NAMESPACE
        self._session: str | None = None
        self._pool: Any = None

    async def _open(self) -> tuple[Any, str]:
        import ray

        if self._session is None:
            node = ray.get_runtime_context().get_node_id()
            self._pool = ray.get_actor(pool_name(node), namespace=self.namespace)
            self._session = await self._pool.open.remote(self.limits)
        return self._pool, self._session

    async def exec(
        self,
        code: str | None = None,
        argv: Any = None,
        stdin: Any = None,
        timeout_s: float | None = None,
        env: Any = None,
    ) -> ExecResult:
        import ray

        kwargs = {"code": code, "argv": argv, "stdin": stdin, "timeout_s": timeout_s, "env": env}
        try:
            pool, session = await self._open()
            return await pool.exec.remote(session, kwargs)
        except (ray.exceptions.RayError, ValueError) as e:  # the pool died or is unreachable
            self._session = None  # the next call opens a session on the restarted pool
            return ExecResult.infra(f"node sandbox pool: {e!r}"[:500])

    async def write_file(self, path: str, data: str | bytes, mode: int = 0o644) -> None:
        pool, session = await self._open()
        await pool.write_file.remote(session, path, data, mode)

    async def read_file(self, path: str, binary: bool = False) -> str | bytes:
        pool, session = await self._open()
        return await pool.read_file.remote(session, path, binary)

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            try:
                await self._pool.close.remote(session)
            except Exception:  # noqa: BLE001 - the pool is gone: nothing left to close
                pass


def register_backend(namespace: str) -> None:
    """Make ``make_sandbox(backend="ray_node")`` give ``NodeSandbox`` clients in this process."""
    global _NAMESPACE  # noqa: PLW0603 - one namespace per worker process

    _NAMESPACE = namespace
    if BACKEND_NAME not in registry.BACKENDS:
        registry.register_backend(registry.Backend(BACKEND_NAME, __name__, "NodeSandbox", "probe", isolated=True))


def start_pools(backend: str, namespace: str) -> list[Any]:
    """A pool actor on every alive node (the existing one where a node already has it)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(NodeSandboxPool)
    pools = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        pools.append(
            remote.options(
                name=pool_name(node["NodeID"]),
                namespace=namespace,
                get_if_exists=True,
                num_cpus=0,
                max_restarts=-1,
                max_concurrency=1000,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            ).remote(backend)
        )
    ray.get([p.stats.remote() for p in pools])
    return pools

"""Backend selection, the shared warm pools, and infrastructure failures (never a program failure)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import pytest
from sandbox_helpers import require_bwrap, run

import sandbox.registry as registry
from sandbox import ExecStatus, SandboxLimits, make_sandbox

POOLED = ["bwrap", pytest.param("docker", marks=pytest.mark.docker)]
#: A limits object of its own, so these tests get their own one-worker pools.
ONE = SandboxLimits(timeout_s=3.0, memory_mb=128)


@pytest.fixture(params=POOLED)
def backend(request):
    if request.param == "bwrap":
        require_bwrap()
    return request.param


def test_unknown_backend_names_the_known_ones():
    with pytest.raises(ValueError, match="known: auto, docker, bwrap, process"):
        make_sandbox(backend="podman")


def test_auto_prefers_docker_then_bwrap_then_process(monkeypatch):
    def fake(works):
        return lambda: (works, "fake")

    monkeypatch.setattr(registry, "_auto_choice", None)
    probes = {"docker": fake(False), "bwrap": fake(True), "process": fake(True)}
    monkeypatch.setattr(registry.Backend, "load", lambda self, attr: probes[self.name] if attr == "probe" else None)
    assert registry.resolve_backend("auto") == "bwrap"
    monkeypatch.setattr(registry, "_auto_choice", None)
    probes["bwrap"] = fake(False)
    assert registry.resolve_backend("auto") == "process"
    monkeypatch.setattr(registry, "_auto_choice", None)
    probes["docker"] = fake(True)
    assert registry.resolve_backend("auto") == "docker"


def test_make_sandbox_is_cheap_and_shares_one_pool(backend):
    first = make_sandbox(backend=backend)
    pool = first.pool  # shared with earlier tests' sandboxes: it may hold workers already
    before = (set(pool.workers), pool._starting)
    boxes = [first] + [make_sandbox(backend=backend) for _ in range(63)]  # e.g. one per environment instance
    assert all(b.pool is pool for b in boxes)
    assert (set(pool.workers), pool._starting) == before  # cheap: making a sandbox starts no worker

    async def go():
        return await asyncio.gather(*(b.exec(code=f"print({i})") for i, b in enumerate(boxes)))

    results = run(go())
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(64)]
    assert len(pool.workers) <= pool.size  # 64 sandboxes, at most `size` workers
    for b in boxes:
        run(b.close())


def test_a_sandbox_outlives_the_closing_of_its_pool(backend):
    sb = make_sandbox(backend=backend, limits=ONE, pool_size=1)
    assert run(sb.exec(code="print(1)")).stdout == "1\n"
    old = sb.pool
    run(old.close())  # e.g. close_all_pools() between two users of a long-lived sandbox
    assert run(sb.exec(code="print(2)")).stdout == "2\n" and sb.pool is not old
    run(sb.close())


def test_unreachable_docker_daemon_is_an_infra_error():
    pytest.importorskip("docker")
    sb = make_sandbox(backend="docker", base_url="unix:///tmp/agent_rl_no_such_docker.sock", pool_size=1)
    t0 = time.monotonic()
    res = run(sb.exec(code="print(1)"))
    assert res.status == ExecStatus.INFRA_ERROR and res.exit_code is None and res.error
    assert time.monotonic() - t0 < 30  # one failed connect, no retry loop (a loaded machine needed > 10 s of slack)
    run(sb.close())
    run(sb.pool.close())


def _kill_worker(backend: str, worker) -> None:
    if backend == "bwrap":
        os.kill(worker.pid, signal.SIGKILL)
    else:
        subprocess.run(["docker", "kill", worker.container_id], capture_output=True, timeout=30)


def _freeze_worker(backend: str, worker) -> None:
    if backend == "bwrap":  # stop every process of the worker's uid: the executor stops answering
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/status") as f:
                    if int(next(x for x in f if x.startswith("Uid:")).split()[1]) == worker.uid:
                        os.kill(int(pid), signal.SIGSTOP)
            except (OSError, StopIteration, ValueError):
                pass
    else:
        subprocess.run(["docker", "pause", worker.container_id], capture_output=True, timeout=30)


def _only_worker(sb):
    async def wait():
        while not sb.pool.workers:
            await asyncio.sleep(0.01)
        return next(iter(sb.pool.workers))

    return run(asyncio.wait_for(wait(), 30))


def test_executor_death_mid_call_is_an_infra_error(backend):
    if backend == "bwrap" and os.geteuid() != 0:
        pytest.skip("needs root to kill the worker from outside")
    sb = make_sandbox(backend=backend, limits=ONE, pool_size=1)
    assert run(sb.exec(code="print(1)")).status == ExecStatus.OK
    worker = _only_worker(sb)

    async def go():
        call = asyncio.ensure_future(sb.exec(code="import time; time.sleep(2); print('done')"))
        await asyncio.sleep(0.5)
        await asyncio.to_thread(_kill_worker, backend, worker)
        return await call

    res = run(go())
    assert res.status == ExecStatus.INFRA_ERROR, res
    assert run(sb.exec(code="print('recovered')")).stdout == "recovered\n"
    run(sb.close())


def test_a_frozen_executor_hits_the_callers_timeout(backend):
    if backend == "bwrap" and os.geteuid() != 0:
        pytest.skip("needs root to freeze the worker from outside")
    limits = SandboxLimits(timeout_s=1.0, memory_mb=128, kill_grace_s=1.0)
    sb = make_sandbox(backend=backend, limits=limits, pool_size=1)
    assert run(sb.exec(code="print(1)")).status == ExecStatus.OK
    worker = _only_worker(sb)

    async def go():
        call = asyncio.ensure_future(sb.exec(code="import time; time.sleep(0.5); print('done')"))
        await asyncio.sleep(0.2)
        await asyncio.to_thread(_freeze_worker, backend, worker)
        return await call

    t0 = time.monotonic()
    res = run(go())
    took = time.monotonic() - t0
    assert res.status == ExecStatus.TIMEOUT and "no answer" in res.stderr, res
    assert (
        took < 30
    )  # the caller's limit ends it; a frozen worker would otherwise hang forever (a tight bound failed under load)
    assert run(sb.exec(code="print('recovered')")).stdout == "recovered\n"
    run(sb.close())

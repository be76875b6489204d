"""Reliability: a controller killed mid-call, a Docker daemon restarted under load."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from sandbox_helpers import private_dockerd_with_image, require_bwrap, run

from sandbox import ExecStatus, SandboxLimits, make_sandbox

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONTROLLER = textwrap.dedent("""
    import asyncio, sys
    from sandbox import make_sandbox
    async def main():
        sb = make_sandbox(backend=sys.argv[1], pool_size=2)
        assert (await sb.exec(code="print(1)")).stdout == "1\\n"
        print("started", flush=True)
        await sb.exec(code="import time; time.sleep(30)", timeout_s=30)
    asyncio.run(main())
""")


def _start_controller(backend: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, backend],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout.readline().strip() == "started"
    time.sleep(0.5)  # the long call is in flight
    return proc


def _docker_containers_of(pid: int) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=agent_rl.sandbox", "--filter", f"label=agent_rl.owner_pid={pid}"],
        capture_output=True,
        text=True,
    )
    return out.stdout.split()


@pytest.mark.docker
def test_killed_controller_leaves_no_container():
    proc = _start_controller("docker")
    assert _docker_containers_of(proc.pid), "the controller's containers should exist while it runs"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # The next start (any controller) reaps what the dead one left.
    sb = make_sandbox(backend="docker", limits=SandboxLimits(timeout_s=4.0), pool_size=1)
    assert run(sb.exec(code="print('next run')")).stdout == "next run\n"
    deadline = time.monotonic() + 10
    while _docker_containers_of(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _docker_containers_of(proc.pid) == []
    run(sb.close())


def test_killed_controller_leaves_no_bwrap_process():
    require_bwrap()
    proc = _start_controller("bwrap")
    children = set()
    for task in os.listdir(f"/proc/{proc.pid}/task"):
        with open(f"/proc/{proc.pid}/task/{task}/children") as f:
            children |= {int(p) for p in f.read().split()}
    assert children, "the controller should have bwrap workers"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 5
    while any(os.path.exists(f"/proc/{p}") for p in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = [p for p in children if os.path.exists(f"/proc/{p}")]
    assert not alive, f"bwrap workers outlived their controller: {alive}"


@pytest.mark.docker
def test_docker_daemon_restart_under_load():
    """In-flight calls end as infra_error (never a hang, never a fake result); the pool recovers."""
    with private_dockerd_with_image() as daemon:
        limits = SandboxLimits(timeout_s=3.0, memory_mb=128)
        sb = make_sandbox(backend="docker", base_url=daemon.url, limits=limits, pool_size=4)
        assert run(sb.pool.wait_warm(60)) == 4
        log: list[tuple[float, str, float, str]] = []
        stop = {"at": None}

        async def caller(i: int):
            while stop["at"] is None or time.monotonic() < stop["at"]:
                t0 = time.monotonic()
                res = await sb.exec(code=f"import time; time.sleep(0.2); print({i})")
                log.append((t0, res.status, time.monotonic() - t0, res.stdout))
                if res.status == ExecStatus.INFRA_ERROR:
                    await asyncio.sleep(0.1)

        async def chaos():
            await asyncio.sleep(1.5)
            restart_at = time.monotonic()
            await asyncio.to_thread(daemon.stop)
            await asyncio.sleep(0.5)
            await asyncio.to_thread(daemon.start)
            # keep the load on until calls succeed again for a while
            while not any(t > restart_at and s == ExecStatus.OK for t, s, _, _ in log):
                await asyncio.sleep(0.2)
                assert time.monotonic() - restart_at < 90, "the pool did not recover"
            stop["at"] = time.monotonic() + 1.0
            return restart_at

        async def main():
            results = await asyncio.gather(chaos(), *(caller(i) for i in range(8)))
            return results[0]

        restart_at = run(main())
        statuses = {s for _, s, _, _ in log}
        assert statuses <= {ExecStatus.OK, ExecStatus.INFRA_ERROR}, statuses
        assert ExecStatus.INFRA_ERROR in statuses, "the restart went unnoticed"
        assert all(out.strip().isdigit() for _, s, _, out in log if s == ExecStatus.OK)
        assert max(took for _, _, took, _ in log) < limits.timeout_s + limits.kill_grace_s + 60.0, (
            "a call hung"
        )  # slack: a loaded CPU
        assert sum(1 for t, s, _, _ in log if t > restart_at and s == ExecStatus.OK) > 0
        run(sb.close())
        run(sb.pool.close())
        deadline = time.monotonic() + 15
        while daemon.containers() and time.monotonic() < deadline:
            time.sleep(0.3)
        assert daemon.containers() == [], "containers leaked on the restarted daemon"

"""A pool that ran workers waits out a Docker daemon restart instead of failing every call at once.

Found by the chaos run (tests/distributed/test_chaos.py): with the daemon down for 8 s, every call
of a training step failed at once ("no worker could start"), the step was 8 of 8 infra_error, and
the circuit breaker stopped the run. A pool that never started a worker still fails at once
(``test_unreachable_docker_daemon_is_an_infra_error``): that is a broken setup, not an outage.
"""

from __future__ import annotations

import asyncio

import pytest
from sandbox_helpers import private_dockerd_with_image, run

from sandbox import ExecStatus, SandboxLimits, make_sandbox


@pytest.mark.docker
def test_a_call_during_a_daemon_restart_waits_for_the_daemon():
    with private_dockerd_with_image() as daemon:
        sb = make_sandbox(
            backend="docker", base_url=daemon.url, limits=SandboxLimits(timeout_s=3.0, memory_mb=128), pool_size=2
        )
        assert run(sb.exec(code="print(1)")).stdout == "1\n"
        daemon.stop()  # its containers die with it

        async def go():
            call = asyncio.ensure_future(sb.exec(code="print(2)"))
            await asyncio.sleep(3.0)
            assert not call.done(), call.result()  # waiting for a worker, not failed
            await asyncio.to_thread(daemon.start)
            return await call

        res = run(go())
        assert res.status == ExecStatus.OK and res.stdout == "2\n", res
        assert sb.pool.stats.start_failures > 0  # it did try while the daemon was down
        run(sb.close())
        run(sb.pool.close())

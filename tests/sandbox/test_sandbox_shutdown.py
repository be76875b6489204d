"""A controller that exits cleanly leaves nothing: no worker process, no container, no cgroup.

The controller runs in a subprocess and exits right after a call whose worker is being retired
(a leftover SysV segment taints it), so the shutdown has a destroy in flight.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from sandbox_helpers import require_bwrap

from sandbox import cgroups

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONTROLLER = textwrap.dedent("""
    import asyncio, json, os, sys
    from sandbox import SandboxLimits, make_sandbox
    async def main():
        sb = make_sandbox(backend=sys.argv[1], limits=SandboxLimits(timeout_s=3.0, memory_mb=128), pool_size=2)
        assert (await sb.exec(code="print(1)")).stdout == "1\\n"
        await sb.pool.wait_warm(30)
        taint = "import ctypes; print(ctypes.CDLL(None).shmget(0x51, 4096, 0o1666))"
        assert (await sb.exec(code=taint)).ok
        children = set()
        for task in os.listdir("/proc/self/task"):
            try:  # a thread that ended since the listing: its children, if any, are another thread's now
                with open(f"/proc/self/task/{task}/children") as f:
                    children |= {int(p) for p in f.read().split()}
            except FileNotFoundError:
                continue
        print(json.dumps({"pid": os.getpid(), "children": sorted(children)}), flush=True)
    asyncio.run(main())
""")


def _run_controller(backend: str) -> tuple[int, list[int]]:
    """(pid, worker processes) of a controller that ran and exited cleanly."""
    proc = subprocess.run(
        [sys.executable, "-c", CONTROLLER, backend],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=ROOT),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    return out["pid"], out["children"]


def _cgroups_of(pid: int) -> list[str]:
    found = []
    for base in cgroups._base_dirs().values():
        found += [os.path.join(base, n) for n in os.listdir(base) if n.startswith(f"{cgroups.PREFIX}{pid}-")]
    return found


def test_clean_exit_leaves_no_bwrap_worker_or_cgroup():
    require_bwrap()
    pid, children = _run_controller("bwrap")
    assert children, "the controller should have had bwrap workers"
    alive = [p for p in children if os.path.exists(f"/proc/{p}")]
    assert alive == [], f"workers outlived a clean exit: {alive}"
    assert _cgroups_of(pid) == [], "cgroups left behind by a clean exit"


@pytest.mark.docker
def test_clean_exit_leaves_no_container():
    pid, _ = _run_controller("docker")
    deadline = time.monotonic() + 10
    while True:
        out = subprocess.run(
            [
                "docker",
                "ps",
                "-aq",
                "--filter",
                "label=agent_rl.sandbox",
                "--filter",
                f"label=agent_rl.owner_pid={pid}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if not out.stdout.split() or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert out.stdout.split() == [], "containers left behind by a clean exit"

"""Runs last (file order): after the whole suite, closing the pools leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from sandbox.pool import all_pools, close_all_pools


def _our_containers() -> list[str]:
    out = subprocess.run(
        [
            "docker",
            "ps",
            "-aq",
            "--filter",
            "label=agent_rl.sandbox",
            "--filter",
            f"label=agent_rl.owner_pid={os.getpid()}",
        ],
        capture_output=True,
        text=True,
    )
    return out.stdout.split()


def _our_workers() -> list[int]:
    """Our child processes that are sandbox workers (bwrap), whoever else runs sandboxes here."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and cmd.startswith((b"bwrap", b"setpriv", b"/bin/sh")):
            found.append(int(pid))
    return found


def test_closing_the_pools_leaves_nothing_behind():
    docker_used = any(p.name.startswith("docker") for p in all_pools())
    close_all_pools()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        containers = _our_containers() if docker_used else []
        workers = _our_workers()
        if not containers and not workers:
            break
        time.sleep(0.2)
    assert containers == [], f"{len(containers)} sandbox container(s) leaked"
    assert workers == [], f"sandbox workers still running: {workers[:3]}"


@pytest.mark.docker
def test_no_sandbox_container_of_a_dead_run_remains():
    out = subprocess.run(
        [
            "docker",
            "ps",
            "-a",
            "--filter",
            "label=agent_rl.sandbox",
            "--format",
            '{{.ID}} {{.Label "agent_rl.owner_pid"}}',
        ],
        capture_output=True,
        text=True,
    )
    dead = [line for line in out.stdout.splitlines() if not os.path.exists(f"/proc/{line.split()[1]}")]
    assert dead == [], f"containers of dead runs: {dead}"

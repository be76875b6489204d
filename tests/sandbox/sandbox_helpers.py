"""Helpers of the sandbox suite (limits, backends, host guard); fixtures live in conftest.py."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import subprocess
import time

import pytest

from sandbox import SandboxLimits

#: Limits of the security suite: short, so each hostile test costs ~its timeout.
HOSTILE = SandboxLimits(
    timeout_s=2.0, memory_mb=256, nproc=64, disk_mb=32, max_files=2048, flood_bytes=4 << 20, persist_mb=4
)
DOCKER_UID = 65534


def run(coro):
    return asyncio.run(coro)


@functools.cache
def bwrap_status() -> tuple[bool, str]:
    from sandbox.bwrap import probe

    return probe()


def require_bwrap() -> None:
    ok, why = bwrap_status()
    if not ok:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"bwrap does not work in CI: {why}", pytrace=False)
        pytest.skip(f"bwrap does not work here: {why}")


ISOLATED = [pytest.param("docker", marks=pytest.mark.docker), "bwrap"]


def _sandbox_processes() -> list[tuple[int, int, str]]:
    """(pid, uid, cmdline) of host processes running under a sandbox uid."""
    from sandbox.bwrap import BWRAP_UID_BASE

    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, StopIteration, ValueError):
            continue
        if uid == DOCKER_UID or uid >= BWRAP_UID_BASE:
            found.append((int(pid), uid, cmd))
    return found


def _is_worker(cmd: str) -> bool:
    return cmd.startswith(("bwrap ", "python3 -I -S -c", "/usr/bin/python3 -I -S -c"))


class HostGuard:
    """Checks that a hostile test left the host as it found it."""

    def __init__(self):
        self.canaries: list[subprocess.Popen] = []
        if os.geteuid() == 0 and shutil.which("setpriv"):
            from sandbox.bwrap import BWRAP_UID_BASE

            for uid in (DOCKER_UID, BWRAP_UID_BASE, BWRAP_UID_BASE + 1):  # same uids as the sandboxes
                self.canaries.append(
                    subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "300"])
                )
        self.free = {p: shutil.disk_usage(p).free for p in ("/", "/tmp")}

    def check(self) -> None:
        dead = [c.args[1] for c in self.canaries if c.poll() is not None]
        assert not dead, f"host processes under sandbox uids were killed: {dead}"
        for path, before in self.free.items():
            assert shutil.disk_usage(path).free > before - (200 << 20), f"host disk {path} filled"
        canary_pids = {c.pid for c in self.canaries}
        deadline = time.monotonic() + 5
        while True:  # only workers (bwrap / executor) may run under sandbox uids
            strays = [p for p in _sandbox_processes() if p[0] not in canary_pids and not _is_worker(p[2])]
            if not strays or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert not strays, f"processes escaped the sandbox onto the host: {strays[:5]}"

    def close(self) -> None:
        for c in self.canaries:
            c.kill()
            c.wait()


class OwnDockerd:
    """A private Docker daemon (own data-root, exec-root, pidfile and socket under /tmp).

    Tests that stop or restart a daemon use this one and never touch the main daemon. It runs in a
    network namespace of its own: a second dockerd in the host's namespace deletes the main
    daemon's ``docker0`` bridge when it starts with ``--bridge=none``.
    """

    def __init__(self):
        import tempfile

        self.dir = tempfile.mkdtemp(prefix="ardd", dir="/tmp")  # short: unix socket paths are limited
        self.sock = os.path.join(self.dir, "d.sock")
        self.url = f"unix://{self.sock}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        log = open(os.path.join(self.dir, "dockerd.log"), "ab")
        self.proc = subprocess.Popen(
            [
                "unshare",
                "--net",
                "--",
                "dockerd",
                "--data-root",
                os.path.join(self.dir, "data"),
                "--exec-root",
                os.path.join(self.dir, "x"),
                "--pidfile",
                os.path.join(self.dir, "d.pid"),
                "-H",
                self.url,
                "--bridge=none",
                "--iptables=false",
                "--ip-masq=false",
                "--cgroup-parent=/agent_rl_test_dockerd",
            ],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.docker("info", check=False).returncode == 0:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        with open(os.path.join(self.dir, "dockerd.log"), errors="replace") as f:
            tail = f.read()[-3000:]
        raise RuntimeError(f"private dockerd did not start:\n{tail}")

    def docker(self, *args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "-H", self.url, *args], capture_output=True, check=check, timeout=300, **kw)

    def load_image(self, image: str) -> None:
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        self.docker("load", stdin=save.stdout)
        save.stdout.close()
        save.wait()

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop the daemon as a service manager would (SIGTERM, wait); ``start()`` restarts it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout_s)

    def containers(self) -> list[str]:
        out = self.docker("ps", "-aq", "--filter", "label=agent_rl.sandbox", check=False)
        return out.stdout.decode().split()

    def stop_and_remove(self) -> None:
        for cid in self.containers():
            self.docker("rm", "-f", cid, check=False)
        try:
            self.stop(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        for ctl in os.listdir("/sys/fs/cgroup"):
            top = f"/sys/fs/cgroup/{ctl}/agent_rl_test_dockerd"
            for sub, _, _ in sorted(os.walk(top), key=lambda w: -len(w[0])):
                try:
                    os.rmdir(sub)
                except OSError:
                    pass
        for mnt in reversed(open("/proc/mounts").read().split("\n")):
            parts = mnt.split()
            if len(parts) > 1 and parts[1].startswith(self.dir):
                subprocess.run(["umount", "-l", parts[1]], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def private_dockerd_with_image():
    """A private dockerd (root only: skips otherwise) holding the default sandbox image; it is
    stopped and its state removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("starting a private dockerd needs root")
    from sandbox.image import DEFAULT_IMAGE

    daemon = OwnDockerd()
    try:
        daemon.start()
        daemon.load_image(DEFAULT_IMAGE)
        yield daemon
    finally:
        daemon.stop_and_remove()

"""A program that exhausts a resource fails as a program, never as ``infra_error``.

``infra_error`` drops an episode from training, so a program able to provoke it escapes every
negative reward. Each exhaustion below must end with the program's own status, and the next
``print(1)`` on the same one-worker pool must succeed. ``infra_error`` is kept for broken
machinery: an executor killed from outside, a missing image, an executor that cannot start.
Never run these on the ``process`` backend.
"""

from __future__ import annotations

import dataclasses
import os
import time

import pytest
from sandbox_helpers import HOSTILE, require_bwrap, run

from sandbox import ExecStatus, SandboxLimits, cgroups, make_sandbox
from sandbox.base import scratch_mounts, worker_memory_mb

pytestmark = pytest.mark.usefixtures("host_guard")


def _create_files(directory: str) -> str:
    # empty files: no block, but an inode + dentry each (~1 KiB of the worker's kernel memory)
    return f"i = 0\nwhile True:\n    open(f'{directory}/f{{i}}', 'w').close(); i += 1"


def _fill(directory: str) -> str:
    return f"f = open('{directory}/big', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))"


FILL_EVERYTHING_THEN_ALLOCATE = """
import os
for d in ('/work', '/tmp', '/dev/shm'):
    for kind in ('inodes', 'bytes'):
        try:
            if kind == 'bytes':
                with open(f'{d}/big', 'wb') as f:
                    while True:
                        f.write(b'x' * (1 << 20))
            i = 0
            while True:
                open(f'{d}/f{i}', 'w').close(); i += 1
        except OSError:
            pass
x = []
while True:
    x.append(bytearray(8 << 20))
"""

# The OOM killer picks the largest process among those of the lowest oom_score_adj. The executor
# gives the program 1000, but the program may set it back to 0, and then spread its memory over
# processes smaller than the executor: the victim is the executor.
OOM_ADJ_RESET_THEN_MANY_SMALL = """
import os, time
open('/proc/self/oom_score_adj', 'w').write('0')
for _ in range(60):
    if os.fork() == 0:
        x = bytearray(7 << 20)
        x[::4096] = b'1' * len(x[::4096])
        time.sleep(60)
time.sleep(60)
"""

# Processes of one call, each far under its RLIMIT_AS (memory_mb: 256 MB under HOSTILE), that
# together pass the worker's memory cgroup (414 MB): no allocation is ever refused, so the cgroup
# is the binding limit and the kernel's OOM killer ends the largest process of the lowest
# oom_score_adj: the program itself (1000, as its children; they hold 4 x 50 MB, it grows past
# 150 MB). Every page is written, so resident (an untouched bytearray would only grow the address
# space, and RLIMIT_AS would refuse it first, as in the memory bomb).
MANY_PROCESSES_PAST_THE_CGROUP = """
import os, time
ready_r, ready_w = os.pipe()
for _ in range(4):
    if os.fork() == 0:
        held = b"c" * (50 << 20)
        os.write(ready_w, b"1")
        time.sleep(60)
for _ in range(4):
    os.read(ready_r, 1)
grown = []
while True:
    grown.append(b"p" * (8 << 20))
"""

NO_SPACE = ("No space left on device", "File too large")

#: name -> (code, timeout_s or None, expected status(es), strings one of which stderr must contain, or None)
PROGRAMS = {
    # The inode programs get a long timeout: they must be stopped by the inode bound, in well under it.
    "inodes_work": (_create_files("/work"), 30.0, ExecStatus.NONZERO_EXIT, NO_SPACE),
    "inodes_tmp": (_create_files("/tmp"), 30.0, ExecStatus.NONZERO_EXIT, NO_SPACE),
    "inodes_shm": (_create_files("/dev/shm"), 30.0, ExecStatus.NONZERO_EXIT, NO_SPACE),
    "disk_work": (_fill("/work"), None, ExecStatus.NONZERO_EXIT, NO_SPACE),
    "disk_tmp": (_fill("/tmp"), None, ExecStatus.NONZERO_EXIT, NO_SPACE),
    "disk_shm": (_fill("/dev/shm"), None, ExecStatus.NONZERO_EXIT, NO_SPACE),
    "memory_bomb": ("x = []\nwhile True:\n    x.append(bytearray(8 << 20))", None, ExecStatus.MEMORY_EXCEEDED, None),
    "everything_then_memory": (FILL_EVERYTHING_THEN_ALLOCATE, 20.0, ExecStatus.MEMORY_EXCEEDED, None),
    # the executor may die here; the call is still the program's failure, and the worker is replaced
    "oom_adj_reset_many_small": (
        OOM_ADJ_RESET_THEN_MANY_SMALL,
        None,
        (ExecStatus.MEMORY_EXCEEDED, ExecStatus.TIMEOUT),
        None,
    ),
    "fork_bomb": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        None,
        ExecStatus.TIMEOUT,
        None,
    ),
    "output_flood": (
        "import sys\nwhile True:\n    sys.stdout.buffer.write(b'x' * (1 << 20))",
        None,
        ExecStatus.OUTPUT_TRUNCATED,
        None,
    ),
    "infinite_loop": ("while True: pass", None, ExecStatus.TIMEOUT, None),
    "sleep_past_timeout": ("import time; time.sleep(10**6)", None, ExecStatus.TIMEOUT, None),
}


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_exhaustion_is_the_programs_failure(hostile_sb, program):
    code, timeout_s, expected, stderr_has = PROGRAMS[program]
    t0 = time.monotonic()
    res = run(hostile_sb.exec(code=code, timeout_s=timeout_s))
    took = time.monotonic() - t0
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert res.status in expected, res
    if stderr_has:
        assert any(s in res.stderr for s in stderr_has), res
    limit = HOSTILE.timeout_s if ExecStatus.TIMEOUT in expected else 10.0
    assert took < limit + 3.0, f"took {took:.1f} s: {res}"
    nxt = run(hostile_sb.exec(code="print(1)"))
    assert nxt.status == ExecStatus.OK and nxt.stdout == "1\n", nxt


def test_processes_that_together_pass_the_workers_memory_cgroup_are_oom_killed(hostile_sb, isolated_backend):
    """A real OOM kill by the kernel under the worker's memory cgroup (docker's ``mem_limit``,
    bwrap's per-worker cgroup): ``memory_exceeded``, killed by SIGKILL, and a note naming the
    limit; no ``MemoryError`` (RLIMIT_AS refused nothing). The worker serves the next call."""
    if isolated_backend == "bwrap" and "memory" not in cgroups.available():
        why = "bwrap workers get a memory cgroup only under root on cgroup v1 (sandbox/cgroups.py)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"no memory cgroup for bwrap in CI: {why}", pytrace=False)
        pytest.skip(why)
    res = run(hostile_sb.exec(code=MANY_PROCESSES_PAST_THE_CGROUP, timeout_s=20.0))
    assert (res.status, res.exit_code, res.stdout) == (ExecStatus.MEMORY_EXCEEDED, -9, ""), res
    assert res.stderr == (
        "\n[sandbox] memory_exceeded: killed by the kernel's OOM killer: the call's processes together passed "
        f"the worker's {worker_memory_mb(HOSTILE)} MB (memory cgroup)"
    ), res
    nxt = run(hostile_sb.exec(code="print(1)"))
    assert nxt.status == ExecStatus.OK and nxt.stdout == "1\n", nxt


def test_work_directory_changes_larger_than_the_executors_memory(isolated_backend):
    """The executor carries the program's RLIMIT_AS: 15 MB of changes (under persist_mb) do not fit
    a 64 MB executor once encoded. They are dropped with a note; the executor does not die."""
    limits = SandboxLimits(timeout_s=10.0, memory_mb=64, persist_mb=16)  # a pool of its own
    sb = make_sandbox(backend=isolated_backend, limits=limits, pool_size=1)
    res = run(sb.exec(code="import os\nfor i in range(15):\n    open(f'f{i}', 'wb').write(os.urandom(1 << 20))"))
    assert res.status == ExecStatus.OK and "dropped" in res.stderr, res
    nxt = run(sb.exec(code="import os; print(len(os.listdir('.')))"))
    assert nxt.status == ExecStatus.OK and nxt.stdout == "0\n", nxt
    run(sb.close())


def test_every_writable_mount_is_bounded_in_bytes_and_inodes(hostile_sb):
    code = (
        "import os\n"
        "for line in open('/proc/self/mounts'):\n"
        "    dev, path, fs, opts = line.split()[:4]\n"
        "    if fs == 'tmpfs' and os.path.isdir(path) and os.access(path, os.W_OK):\n"
        "        print(path, opts)\n"
    )
    res = run(hostile_sb.exec(code=code))
    mounts = dict(line.split(" ", 1) for line in res.stdout.splitlines())
    expected = {m.path: m for m in scratch_mounts(HOSTILE)}
    assert set(mounts) == set(expected), res.stdout
    for path, opts in mounts.items():
        opts = dict(o.partition("=")[::2] for o in opts.split(","))
        assert int(opts["nr_inodes"]) == expected[path].inodes, (path, opts)
        assert opts["size"] == f"{expected[path].size_mb << 10}k", (path, opts)


def test_scratch_bounds_and_the_workers_memory():
    limits = SandboxLimits(memory_mb=512, disk_mb=64, max_files=4096)
    mounts = [(m.path, m.size_mb, m.inodes) for m in scratch_mounts(limits)]
    assert mounts == [("/work", 64, 4096), ("/tmp", 32, 4096), ("/dev/shm", 16, 1024)]
    # 512 program + 112 scratch pages + 9216 inodes x 2 KiB (18 MiB) + 64 executor
    assert worker_memory_mb(limits) == 706
    with pytest.raises(ValueError, match="max_files"):
        SandboxLimits(max_files=0)  # tmpfs reads nr_inodes=0 as unbounded


def test_both_backends_mount_every_scratch_with_an_inode_bound():
    from sandbox.bwrap import SCRATCH_DIR, bwrap_command, scratch_script
    from sandbox.docker import tmpfs_options

    limits = SandboxLimits(disk_mb=8, max_files=100)
    assert tmpfs_options(limits) == {
        "/work": "rw,nosuid,nodev,size=8m,nr_inodes=100,mode=755,uid=65534,gid=65534",
        "/tmp": "rw,nosuid,nodev,size=32m,nr_inodes=4096,mode=1777",
        "/dev/shm": "rw,nosuid,nodev,size=16m,nr_inodes=1024,mode=1777",
    }
    cmd = bwrap_command(limits, 1600007, {}, bounded_scratch=True)
    assert "--tmpfs" not in cmd
    for path in ("/work", "/tmp", "/dev/shm"):
        i = cmd.index(SCRATCH_DIR + path)
        assert cmd[i - 1 : i + 2] == ["--bind", SCRATCH_DIR + path, path]
    unprivileged = bwrap_command(limits, None, {})  # no root: bwrap's own tmpfs, bounded in size only
    assert unprivileged[unprivileged.index("/work") - 3 : unprivileged.index("/work") + 1] == [
        "--size",
        str(8 << 20),
        "--tmpfs",
        "/work",
    ]
    assert scratch_script(limits, 1600007).splitlines()[0] == (
        "mount -t tmpfs -o nosuid,nodev,size=8m,nr_inodes=100,mode=755,uid=1600007,gid=1600007 "
        f"agent_rl_scratch {SCRATCH_DIR}/work"
    )


# ---------------------------------------------------------------- broken machinery is infra_error


@pytest.mark.docker
def test_missing_image_is_an_infra_error():
    limits = dataclasses.replace(HOSTILE, timeout_s=1.5)  # a pool of its own
    sb = make_sandbox(backend="docker", image="agent-rl-no-such-image:0", limits=limits, pool_size=1)
    t0 = time.monotonic()
    res = run(sb.exec(code="print(1)"))
    assert res.status == ExecStatus.INFRA_ERROR and res.exit_code is None, res
    assert "agent-rl-no-such-image" in res.error
    assert time.monotonic() - t0 < 30
    run(sb.close())
    run(sb.pool.close())


def test_a_bwrap_executor_that_cannot_start_is_an_infra_error(monkeypatch):
    require_bwrap()
    from sandbox import bwrap

    monkeypatch.setattr(bwrap, "PYTHON", "/usr/bin/agent-rl-no-such-python")
    limits = SandboxLimits(timeout_s=1.25, memory_mb=128)  # a pool of its own
    sb = make_sandbox(backend="bwrap", limits=limits, pool_size=1)
    t0 = time.monotonic()
    res = run(sb.exec(code="print(1)"))
    assert res.status == ExecStatus.INFRA_ERROR and res.exit_code is None, res
    assert "no worker could start" in res.error, res
    assert time.monotonic() - t0 < 30
    run(sb.close())
    run(sb.pool.close())

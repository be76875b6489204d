"""Pure helpers of sandbox/base.py: output capping, status precedence, paths, the file store; the
executor package as it is shipped."""

import subprocess
import sys

import pytest

from sandbox import ExecStatus, FileStore, SandboxLimits
from sandbox.base import build_argv, build_env, cap_output, check_relpath, classify, oom_report, result_from_report
from sandbox.executor import bundle, wire
from sandbox.executor.child import _Capture
from sandbox.executor.report import failed_report
from sandbox.process import _frames, _helper_killed_report
from tests.conftest import ROOT


def test_capture_keeps_head_and_tail():
    cap = _Capture(8)  # 4 bytes of head, 4 of tail
    for chunk in (b"abc", b"defgh", b"ijklmn"):
        cap.add(chunk)
    r = cap.report()
    assert (r["head"], r["tail"], r["total"]) == (b"abcd", b"klmn", 14)
    assert cap_output(r["head"], r["tail"], r["total"]) == "abcd\n[... 6 bytes truncated ...]\nklmn"


def test_capture_short_stream_is_whole():
    cap = _Capture(8)
    cap.add(b"abcdef")
    r = cap.report()
    assert cap_output(r["head"], r["tail"], r["total"]) == "abcdef"


@pytest.mark.parametrize(
    "exit_code, facts, expected",
    [
        (0, {}, ExecStatus.OK),
        (0, {"truncated": True}, ExecStatus.OUTPUT_TRUNCATED),
        (1, {}, ExecStatus.NONZERO_EXIT),
        (-9, {}, ExecStatus.KILLED),
        (-9, {"timed_out": True}, ExecStatus.TIMEOUT),
        (-9, {"oom_killed": True}, ExecStatus.MEMORY_EXCEEDED),
        (1, {"memory_limit_hit": True}, ExecStatus.MEMORY_EXCEEDED),
        (-9, {"flooded": True}, ExecStatus.OUTPUT_TRUNCATED),
        (None, {}, ExecStatus.INFRA_ERROR),
    ],
)
def test_classify(exit_code, facts, expected):
    assert classify(exit_code, **facts) == expected


def test_a_memory_exceeded_result_names_the_limit_it_met():
    """The worker's memory cgroup (the sum over the call's processes: 256 + 80 scratch + 14 inodes +
    64 executor = 414 MB) or the per-process RLIMIT_AS (``memory_mb``); no other status gets a note."""
    limits = SandboxLimits(memory_mb=256, disk_mb=32, max_files=2048)
    report = failed_report(-9, 0.5, oom_killed=True)
    assert result_from_report(report, limits=limits).stderr == (
        "\n[sandbox] memory_exceeded: killed by the kernel's OOM killer: the call's processes together passed "
        "the worker's 414 MB (memory cgroup)"
    )
    refused = dict(failed_report(1, 0.5, stderr=b"MemoryError\n"), memory_limit_hit=True)
    assert result_from_report(refused, limits=limits).stderr == (
        "MemoryError\n\n[sandbox] memory_exceeded: an allocation was refused at the per-process address-space "
        "limit of 256 MB (RLIMIT_AS)"
    )
    assert result_from_report(failed_report(-9, 0.5), limits=limits).stderr == ""  # killed: no memory note


def test_status_values_are_lowercase_strings():
    assert ExecStatus.INFRA_ERROR == "infra_error" and str(ExecStatus.OK) == "ok"


@pytest.mark.parametrize("bad", ["", "/etc/passwd", "../x", "a/../../x", "a\0b", "/work"])
def test_paths_outside_the_work_directory_are_refused(bad):
    with pytest.raises(ValueError):
        check_relpath(bad)


def test_paths_are_normalised():
    assert check_relpath("a/./b//c.txt") == "a/b/c.txt"
    assert check_relpath("/work/x.py") == "x.py"


def test_env_is_an_allowlist(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "secret")
    monkeypatch.setenv("MY_API_KEY", "secret")
    env = build_env({"X": "1"}, home="/work")
    assert env["X"] == "1" and env["HOME"] == "/work"
    assert not any("secret" in v for v in env.values())
    with pytest.raises(ValueError):
        build_env({"A=B": "1"}, home="/work")


def test_argv_needs_exactly_one_of_code_and_argv():
    assert build_argv("print(1)", None, "/usr/bin/python3") == ["/usr/bin/python3", "-I", "-c", "print(1)"]
    with pytest.raises(ValueError):
        build_argv(None, None, "python3")
    with pytest.raises(ValueError):
        build_argv("x", ["ls"], "python3")


def test_file_store_roundtrip_and_symlinks():
    fs = FileStore()
    fs.write("d/a.txt", b"hi")
    assert fs.entries["d"][0] == "d"
    assert fs.read("d/a.txt") == b"hi"
    fs.apply([{"path": "d/link", "kind": "l", "mode": 0, "data": b"a.txt"}], [])
    assert fs.read("d/link") == b"hi"
    fs.apply([{"path": "evil", "kind": "l", "mode": 0, "data": b"/etc/shadow"}], [])
    with pytest.raises(ValueError):  # a link out of the work directory is never followed
        fs.read("evil")
    with pytest.raises(FileNotFoundError):
        fs.read("nope")


def test_limits_validate():
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxLimits(timeout_s=0)
    assert hash(SandboxLimits()) == hash(SandboxLimits())


def test_restore_never_writes_below_a_symlink(tmp_path):
    from sandbox.executor.tree import restore_tree

    entries = [
        {"path": "d", "kind": "l", "mode": 0, "data": str(tmp_path / "outside").encode()},
        {"path": "d/evil", "kind": "f", "mode": 0o644, "data": b"x"},
    ]
    (tmp_path / "outside").mkdir()
    (tmp_path / "work").mkdir()
    with pytest.raises(ValueError, match="below a symlink"):
        restore_tree(str(tmp_path / "work"), entries)
    assert not (tmp_path / "outside" / "evil").exists()


def test_wipe_tree_handles_depth_and_modes(tmp_path):
    import os

    from sandbox.executor.tree import wipe_tree

    fd = os.open(tmp_path, os.O_RDONLY)
    for _ in range(1200):  # deeper than Python's recursion limit
        os.mkdir("d", dir_fd=fd)
        fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    os.close(fd)
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "f").write_text("x")
    os.chmod(tmp_path / "locked", 0)
    wipe_tree(str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_the_executor_ships_as_a_whole_package(tmp_path):
    """Every module of sandbox/executor/ travels in the ``-c`` program, which runs on a bare Python
    (``-I -S``: neither this checkout nor site-packages on its path) and answers one call."""
    modules = {p.stem for p in (ROOT / "sandbox" / "executor").glob("*.py")} - {"__init__"}
    assert set(bundle.shipped_sources()) == {"sandbox", "sandbox.executor", *(f"sandbox.executor.{m}" for m in modules)}
    req = {
        "argv": [sys.executable, "-I", "-S", "-c", "print(6 * 7); open('x', 'w').write('hi')"],
        "env": {"PATH": "/usr/bin:/bin"},
        "stdin": None,
        "timeout_s": 30.0,
        "rlimits": {},
        "max_output": 1000,
        "flood_bytes": 10_000,
        "files": [{"path": "old", "kind": "f", "mode": 0o600, "data": b"kept"}],
    }
    helper = [sys.executable, "-I", "-S", "-c", bundle.program(), "--once", str(tmp_path)]
    out = subprocess.run(helper, input=wire.encode(req), capture_output=True, cwd=tmp_path, timeout=60, check=True)
    started, result = _frames(out.stdout)
    assert started["op"] == "started" and result["op"] == "result", out.stderr
    assert (result["exit_code"], result["stdout"]["head"], result["notes"]) == (0, b"42\n", [])
    assert (result["changed"], result["deleted"]) == ([{"path": "x", "kind": "f", "mode": 0o644, "data": b"hi"}], [])
    assert (tmp_path / "old").read_bytes() == b"kept"


def test_failed_reports_read_as_the_programs_failure():
    """The one shape of a result without a program's facts, as the controller reads it."""
    oom = result_from_report(oom_report(1.5))
    assert (oom.status, oom.exit_code, oom.stdout, oom.wall_s, oom.cpu_s) == (
        ExecStatus.MEMORY_EXCEEDED,
        -9,
        "",
        1.5,
        0.0,
    )
    assert oom.stderr == (
        "\n[sandbox] memory_exceeded: killed by the kernel's OOM killer: the call's processes together passed "
        "the worker's memory limit (memory cgroup)"
        "\n[sandbox] the program exhausted the worker's memory and the executor was killed with it; worker replaced"
    )
    killed = result_from_report(_helper_killed_report(9, 0.25))
    assert (killed.status, killed.exit_code, killed.truncated) == (ExecStatus.KILLED, -9, False)
    assert killed.stderr == "\n[sandbox] the program killed its sandbox helper (signal 9); the program was killed"
    assert oom_report(1.5)["changed"] == oom_report(1.5)["deleted"] == []

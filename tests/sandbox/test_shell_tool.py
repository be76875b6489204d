"""tools/shell.py on the process backend (well-behaved commands only)."""

from __future__ import annotations

import pytest
from sandbox_helpers import run

from sandbox import make_sandbox
from tools.base import ToolError, tool_schema
from tools.python import SandboxInfraError
from tools.shell import ShellTool


@pytest.fixture
def shell():
    sb = make_sandbox(backend="process", timeout_s=5.0)
    yield ShellTool(sb, timeout_s=2.0, max_output_chars=200)
    run(sb.close())


def test_runs_a_command_and_keeps_files(shell):
    assert run(shell({"command": "echo hi > f.txt && cat f.txt"})) == "hi"
    assert run(shell({"command": "cat f.txt; ls"})) == "hi\nf.txt"


def test_failure_shows_stderr_and_status(shell):
    out = run(shell({"command": "echo out; echo oops >&2; exit 4"}))
    assert out == "out\noops\n[nonzero_exit] exit 4"


def test_timeout_and_truncation(shell):
    assert run(shell({"command": "sleep 10"})).endswith("[timeout] exit -9")
    out = run(shell({"command": "seq 1 10000"}))
    assert out.startswith("1\n2\n") and "...[truncated]..." in out and out.endswith("10000")


def test_schema_and_bad_arguments(shell):
    schema = tool_schema(shell)
    assert schema["function"]["name"] == "shell" and "command" in schema["function"]["parameters"]["properties"]
    with pytest.raises(ToolError):
        run(shell({"cmd": "ls"}))


def test_infra_error_raises(shell):
    class Broken:
        async def exec(self, **kw):
            from sandbox import ExecResult

            return ExecResult.infra("daemon gone")

    with pytest.raises(SandboxInfraError, match="daemon gone"):
        run(ShellTool(Broken())({"command": "ls"}))

"""The ``shell`` tool: run a ``sh -c`` command in a sandbox, a fresh process per call."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_rl.core.errors import InfraError
from sandbox import ExecStatus
from tools.base import Tool


class ShellArgs(BaseModel):
    command: str = Field(description="a POSIX shell command line, run with `sh -c` in the work directory")


class ShellTool(Tool):
    """Runs a command in the sandbox's work directory; files persist between calls of one sandbox."""

    name = "shell"
    description = "Run a shell command in the sandbox's work directory; returns its output and exit status."
    Args = ShellArgs

    def __init__(self, sandbox, timeout_s: float = 5.0, max_output_chars: int = 2000):
        self.sandbox = sandbox
        self.timeout_s = timeout_s
        self.max_output_chars = max_output_chars

    async def run(self, args: ShellArgs) -> str:
        """stdout then stderr, and ``[status] exit N`` when it did not succeed. An infrastructure
        failure raises ``InfraError`` (the episode ends as INFRA_ERROR, never a reward of 0)."""

        res = await self.sandbox.exec(argv=["sh", "-c", args.command], timeout_s=self.timeout_s)
        if res.status == ExecStatus.INFRA_ERROR:
            raise InfraError(res.error or res.stderr or "sandbox infrastructure failure")
        out = res.stdout
        if res.stderr:
            out += ("" if not out or out.endswith("\n") else "\n") + res.stderr
        if res.status != ExecStatus.OK:
            code = f" exit {res.exit_code}" if res.exit_code is not None else ""
            out += ("" if not out or out.endswith("\n") else "\n") + f"[{res.status}]{code}"
        if len(out) > self.max_output_chars:
            half = self.max_output_chars // 2
            out = out[:half] + "\n...[truncated]...\n" + out[-half:]
        return out.strip()

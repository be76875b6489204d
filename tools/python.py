"""The ``python`` tool: run Python source in a sandbox, one fresh interpreter per call."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_rl.core.errors import InfraError
from sandbox import ExecStatus
from tools.base import Tool


class PythonArgs(BaseModel):
    code: str = Field(description="Python source; print what you want to see")


class PythonTool(Tool):
    name = "python"
    description = "Run Python code; returns what it prints."
    Args = PythonArgs

    def __init__(self, sandbox, timeout_s: float = 5.0, max_output_chars: int = 2000):
        self.sandbox = sandbox
        self.timeout_s = timeout_s
        self.max_output_chars = max_output_chars

    async def run(self, args: PythonArgs) -> str:
        """Runs the code; an infrastructure failure raises ``InfraError`` (never a reward of 0)."""

        res = await self.sandbox.exec(code=args.code, timeout_s=self.timeout_s)
        if res.status == ExecStatus.INFRA_ERROR:
            raise InfraError(res.stderr or "sandbox infrastructure failure")
        out = res.stdout
        if res.status != ExecStatus.OK:
            tail = res.stderr.strip().splitlines()[-1:] if res.stderr.strip() else []
            out += f"[{res.status}]" + (f" {tail[0]}" if tail else "")
        if len(out) > self.max_output_chars:
            out = out[: self.max_output_chars] + "...[truncated]"
        return out.strip()


SandboxInfraError = InfraError  # the name user envs were shown first: the same one class

"""``chaos/SandboxEcho-v0``: a one-turn env whose every step runs a program in the sandbox, for the chaos run.

An untrained tiny policy writes text, not tool calls, so a tool env would rarely reach its sandbox.
This env runs a program on every action instead: the program prints the action's length in bytes,
and the reward is 1 when that length is even (some variance inside a group, so the update is not
empty). A failure of the sandbox machinery (``INFRA_ERROR``) raises ``InfraError``: the episode is
``infra_error``, unscored.

Fault tickets, files the test creates in ``fault_dir``, change one episode's program; the first
step anywhere that renames the ticket to a name of its own (atomic: one claimer) takes it:

- ``fill_disk``: a program that writes into the work directory until the disk is full, ending
  with the uncaught ``OSError`` (ENOSPC). That is the program's own failure: reward 0 and
  ``info["program_status"]``, never an infrastructure error; ``info["filled_disk"]`` says so.
- ``hold``: a program that sleeps 30 s, so that a call is surely running when the test stops
  the Docker daemon; the env writes ``fault_dir/holding`` once the call went out.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import gymnasium as gym

from agent_rl.core.errors import InfraError
from envs.async_env import AsyncTextEnv
from envs.spaces import AnyText, Messages

ENV_ID = "chaos/SandboxEcho-v0"

ECHO = "import sys\nprint(len(sys.stdin.buffer.read()))\n"
FILL_DISK = """\
import os
i = 0
while True:  # until the work directory's tmpfs is full: OSError ENOSPC, uncaught
    with open(f"fill_{i}", "wb") as f:
        for _ in range(8):
            f.write(b"x" * (1 << 20))
    i += 1
"""
HOLD = "import time\ntime.sleep(30)\n"


class SandboxEchoEnv(AsyncTextEnv):
    metadata = {"render_modes": []}
    description = "one turn: the action's length, computed by a program in the sandbox"
    loop_safe = True  # it only awaits the sandbox

    def __init__(
        self,
        sandbox_backend: str = "auto",
        fault_dir: str | None = None,
        docker_url: str | None = None,
        tool_timeout_s: float = 10.0,
    ):
        self.sandbox_backend = sandbox_backend
        self.fault_dir = fault_dir
        self.options = {"base_url": docker_url} if docker_url else {}  # docker: the daemon to use
        self.tool_timeout_s = tool_timeout_s
        self.action_space = AnyText(max_length=4096)
        self.observation_space = Messages()
        self._sandbox = None

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        await self._close_sandbox()
        return [{"role": "user", "content": f"Say something ({seed})."}], {"task_id": f"echo{seed}"}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return self.run_sync(self.areset(seed=seed, options=options))

    async def astep(self, action: str):
        from sandbox import ExecStatus, make_sandbox

        if self._sandbox is None:
            self._sandbox = make_sandbox(backend=self.sandbox_backend, timeout_s=self.tool_timeout_s, **self.options)
        fill, hold = self._claim("fill_disk"), self._claim("hold")
        data = action.encode("utf-8", errors="replace")
        code, timeout_s = (
            (FILL_DISK, self.tool_timeout_s) if fill else (HOLD, 60.0) if hold else (ECHO, self.tool_timeout_s)
        )
        call = asyncio.ensure_future(self._sandbox.exec(code=code, stdin=data, timeout_s=timeout_s))
        if hold:
            await asyncio.sleep(0.5)
            open(os.path.join(self.fault_dir, "holding"), "w").close()
        res = await call
        if res.status == ExecStatus.INFRA_ERROR:
            raise InfraError(res.error or res.stderr or "sandbox infrastructure failure")
        ok = res.status == ExecStatus.OK and res.stdout.strip() == str(len(data))
        reward = 1.0 if ok and len(data) % 2 == 0 else 0.0
        info = {"program_status": str(res.status), "filled_disk": fill, "stderr_tail": res.stderr.strip()[-200:]}
        return [{"role": "user", "content": res.stdout.strip()[:200] or str(res.status)}], reward, True, False, info

    def _claim(self, ticket: str) -> bool:
        if not self.fault_dir:
            return False
        mine = os.path.join(self.fault_dir, f"{ticket}.claimed.{uuid.uuid4().hex}")
        try:
            os.rename(os.path.join(self.fault_dir, ticket), mine)
        except FileNotFoundError:
            return False
        return True

    async def _close_sandbox(self) -> None:
        if self._sandbox is not None:
            sandbox, self._sandbox = self._sandbox, None
            await sandbox.close()

    async def aclose_resources(self) -> None:
        await self._close_sandbox()


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=SandboxEchoEnv, disable_env_checker=True)

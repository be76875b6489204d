"""Base class of environments whose work is asynchronous (sandbox calls, MCP sessions).

Subclasses implement ``astep`` (and ``areset`` when reset waits too) and release what they hold in
``aclose_resources``; the synchronous Gymnasium API runs those coroutines on a private event loop,
or on a helper thread's loop when called inside a running one (a notebook, an engine closing its
envs). ``close()`` is safe to call twice. Tool environments build on ``envs.tool_env.ToolEnv``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym


class AsyncTextEnv(gym.Env):
    _loop: asyncio.AbstractEventLoop | None = None

    async def astep(self, action: str) -> tuple[list[dict], float, bool, bool, dict[str, Any]]:
        raise NotImplementedError

    async def aclose_resources(self) -> None:
        """Close sandboxes, sessions, ...; called once per ``close()``."""

    def run_sync(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` to completion from sync code (the sync API): on this env's private loop, or,
        when called inside a running loop (a notebook, an engine closing its envs), on a fresh loop
        in a helper thread."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # plain sync code: the env's own loop
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            return self._loop.run_until_complete(coro)
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, coro).result()

    def step(self, action: str):
        return self.run_sync(self.astep(action))

    def close(self) -> None:
        self.run_sync(self.aclose_resources())
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        super().close()

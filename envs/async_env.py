"""Base class of environments whose work is asynchronous (sandbox calls, MCP sessions).

Subclasses implement ``astep`` (and ``areset`` when reset waits too) and release what they hold in
``aclose_resources``; the synchronous Gymnasium API runs those coroutines on a private event loop.
``close()`` works from plain code and from inside a running event loop (there it closes on a
helper thread), and is safe to call twice.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any

import gymnasium as gym


class AsyncTextEnv(gym.Env):
    _loop: asyncio.AbstractEventLoop | None = None

    async def astep(self, action: str) -> tuple[list[dict], float, bool, bool, dict[str, Any]]:
        raise NotImplementedError

    async def aclose_resources(self) -> None:
        """Close sandboxes, sessions, ...; called once per ``close()``."""

    def run_sync(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` on this env's private loop (the sync API)."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    def step(self, action: str):
        return self.run_sync(self.astep(action))

    def run_blocking(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` to completion from sync code, also when called inside a running loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # plain sync code: the env's own loop
            self.run_sync(coro)
        else:  # inside a running loop (an engine closing its envs): a fresh loop on a helper thread
            thread = threading.Thread(target=asyncio.run, args=(coro,))
            thread.start()
            thread.join()

    def close(self) -> None:
        self.run_blocking(self.aclose_resources())
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        super().close()

"""Tools of MCP servers (Model Context Protocol, stdio transport) as environment tools.

    box = McpToolbox.from_config([{"command": "python", "args": ["my_server.py"]}])
    box.schemas()                       # [{"type": "function", "function": {name, description, parameters}}]
    await box.call("add", {"a": 2, "b": 3})   # "5"; errors become error text or ToolError
    box.close()

An environment takes servers from its config (e.g. ``env.options.mcp_servers`` of CodeExec-v0),
lists their tools in ``info["tools"]`` with the servers' own JSON schemas, and routes tool calls
by name. Each server is a subprocess spoken to over stdin/stdout by ``mcp.ClientSession``.

Errors: an unknown tool or arguments that fail the tool's schema raise ``ToolError`` (an error
observation, ``action_valid=False``); a tool that reports an error (``is_error``) or times out
returns ``"error: ..."`` text; a server that cannot start or dies raises ``McpServerError``, an
``InfraError`` (the episode ends as INFRA_ERROR, never as a reward of 0).

The session lives on a background thread with its own event loop, so a toolbox serves any caller
loop (the rollout engine's ``asyncio.run`` per step, Gymnasium's sync API) for its whole life.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from concurrent.futures import Future
from typing import Any

from pydantic import BaseModel, Field

from agent_rl.core.errors import InfraError
from tools.base import ToolError

log = logging.getLogger("tools.mcp")


class McpServerConfig(BaseModel):
    """One MCP server started as a subprocess (stdio transport)."""

    model_config = {"extra": "forbid"}

    command: str = Field(description="executable, e.g. python or npx")
    args: list[str] = Field(default_factory=list, description="its arguments")
    env: dict[str, str] | None = Field(None, description="environment of the server (None: a minimal default)")
    cwd: str | None = Field(None, description="working directory of the server")
    call_timeout_s: float = Field(30.0, gt=0, description="limit of one tool call; then an error observation")
    start_timeout_s: float = Field(30.0, gt=0, description="limit of start-up (initialize + list_tools)")


class McpServerError(InfraError):
    """The MCP server could not start, or died: not the policy's fault."""


class McpClient:
    """A live session with one server, on a private event-loop thread."""

    def __init__(self, cfg: McpServerConfig):
        self.cfg = cfg
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-client", daemon=True)
        self._thread.start()
        self._session: Any = None
        self._stop: asyncio.Event | None = None
        self._served: Future | None = None
        self.tools: list[Any] = []
        self._errlog = open(os.devnull, "w")  # noqa: SIM115 - the server's stderr, for the session's life
        try:
            self.tools = self._submit(self._open()).result(cfg.start_timeout_s + 5)
        except BaseException as e:  # noqa: BLE001 - any start-up failure is the server's, reported as such
            self.close()
            raise McpServerError(f"MCP server {cfg.command} {' '.join(cfg.args)} did not start: {e!r}") from None

    def _submit(self, coro) -> Future:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _open(self) -> list[Any]:
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._served = asyncio.ensure_future(self._serve(ready))
        return await asyncio.wait_for(ready, self.cfg.start_timeout_s)

    async def _serve(self, ready: asyncio.Future) -> None:
        """Enter and leave the transport's contexts in this one task (anyio requires it)."""
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(command=self.cfg.command, args=self.cfg.args, env=self.cfg.env, cwd=self.cfg.cwd)
        try:
            async with (
                stdio_client(params, errlog=self._errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                listed = await session.list_tools()
                self._session = session
                ready.set_result(list(listed.tools))
                await self._stop.wait()
        except BaseException as e:  # noqa: BLE001 - reported to the caller waiting on start-up
            if not ready.done():
                ready.set_exception(e)
        finally:
            self._session = None

    async def _call(self, name: str, arguments: dict[str, Any]) -> Any:
        if self._session is None:
            raise McpServerError(f"MCP server {self.cfg.command} is not running")
        return await asyncio.wait_for(self._session.call_tool(name, arguments), self.cfg.call_timeout_s)

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """``CallToolResult`` of the server; awaitable from any event loop."""
        return await asyncio.wrap_future(self._submit(self._call(name, arguments)))

    def close(self) -> None:
        """Idempotent: ends the session, the server process and the thread."""
        if not self._thread.is_alive():
            return
        if self._stop is not None and self._served is not None:
            try:
                self._submit(self._shutdown()).result(10)
            except Exception:  # best effort; the daemon thread dies with us
                log.debug("closing the MCP session failed", exc_info=True)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()
        self._errlog.close()

    async def _shutdown(self) -> None:
        self._stop.set()
        await asyncio.wait_for(asyncio.shield(self._served), 8)


def _result_text(result: Any) -> str:
    parts = []
    for item in getattr(result, "content", None) or []:
        text = getattr(item, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(item, 'type', 'content')}]")
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts)


class McpToolbox:
    """The tools of several MCP servers under one namespace (a name must be unique across them)."""

    def __init__(self, clients: list[McpClient]):
        self.clients = clients
        self._route: dict[str, tuple[McpClient, Any]] = {}
        for client in clients:
            for tool in client.tools:
                if tool.name in self._route:
                    self.close()
                    raise ValueError(f"MCP tool name '{tool.name}' is offered by two servers; names must be unique")
                self._route[tool.name] = (client, tool)

    @classmethod
    def from_config(cls, servers: list[dict[str, Any] | McpServerConfig]) -> McpToolbox:
        configs = [s if isinstance(s, McpServerConfig) else McpServerConfig.model_validate(s) for s in servers]
        clients: list[McpClient] = []
        try:
            for cfg in configs:
                clients.append(McpClient(cfg))
        except BaseException:
            for c in clients:
                c.close()
            raise
        return cls(clients)

    @property
    def names(self) -> list[str]:
        return list(self._route)

    def schemas(self) -> list[dict[str, Any]]:
        """``tools=[...]`` entries with each server's own JSON schema of the arguments."""
        return [
            {
                "type": "function",
                "function": {"name": name, "description": tool.description or "", "parameters": tool.input_schema},
            }
            for name, (_, tool) in self._route.items()
        ]

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """The tool's text output, ``"error: ..."`` when the tool failed or timed out."""
        import jsonschema

        if name not in self._route:
            raise ToolError(f"unknown tool '{name}'; available: {', '.join(self._route)}")
        client, tool = self._route[name]
        try:
            jsonschema.validate(arguments, tool.input_schema)
        except jsonschema.ValidationError as e:
            raise ToolError(f"invalid arguments for tool '{name}': {e.message}") from None
        try:
            result = await client.call(name, arguments)
        except TimeoutError:
            return f"error: tool '{name}' timed out after {client.cfg.call_timeout_s:g} s"
        except McpServerError:
            raise
        except Exception as e:  # noqa: BLE001 - the session broke: the server is gone
            raise McpServerError(f"MCP server of tool '{name}' failed: {e!r}") from None
        text = _result_text(result)
        return f"error: {text}" if getattr(result, "is_error", False) else text

    def close(self) -> None:
        for client in self.clients:
            client.close()

"""A small MCP server for the tests, run as ``python mcp_test_server.py`` (stdio transport)."""

from __future__ import annotations

import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("agent-rl-test")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()


@server.tool()
def fail(message: str) -> str:
    """Always raises with the message."""
    raise ValueError(message)


@server.tool()
def nap(seconds: float) -> str:
    """Sleep, then say so."""
    time.sleep(seconds)
    return "awake"


if __name__ == "__main__":
    server.run("stdio")

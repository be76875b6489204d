"""MCP tools: a real MCP server (tests/tools/mcp_test_server.py) over stdio, as environment tools."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tools.base import ToolError
from tools.mcp import McpServerError, McpToolbox

SERVER = {"command": sys.executable, "args": [str(Path(__file__).with_name("mcp_test_server.py"))]}


@pytest.fixture(scope="module")
def box():
    toolbox = McpToolbox.from_config([{**SERVER, "call_timeout_s": 20.0}])
    yield toolbox
    toolbox.close()
    toolbox.close()  # twice is safe


def test_tools_are_listed_with_their_json_schemas(box):
    assert box.names == ["add", "shout", "fail", "nap"]
    add = box.schemas()[0]["function"]
    assert add["name"] == "add" and add["description"] == "Add two integers."
    assert add["parameters"]["required"] == ["a", "b"]
    assert add["parameters"]["properties"]["a"]["type"] == "integer"


def test_calls_run_in_the_server_from_any_event_loop(box):
    assert asyncio.run(box.call("add", {"a": 2, "b": 40})) == "42"
    assert asyncio.run(box.call("shout", {"text": "mcp"})) == "MCP"  # a second loop, same session


def test_errors_become_observations(box):
    assert asyncio.run(box.call("fail", {"message": "boom"})).startswith("error: ")
    with pytest.raises(ToolError, match="invalid arguments for tool 'add': 'b' is a required property"):
        asyncio.run(box.call("add", {"a": 1}))
    with pytest.raises(ToolError, match="unknown tool 'nope'; available: add, shout, fail, nap"):
        asyncio.run(box.call("nope", {}))


def test_a_slow_tool_times_out_as_an_error_observation(box):
    cfg = box.clients[0].cfg
    cfg.call_timeout_s = 0.5
    try:
        assert asyncio.run(box.call("nap", {"seconds": 5})) == "error: tool 'nap' timed out after 0.5 s"
    finally:
        cfg.call_timeout_s = 20.0


def test_a_server_that_cannot_start_is_an_infra_error():
    with pytest.raises(McpServerError, match="did not start"):
        McpToolbox.from_config(
            [{"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"], "start_timeout_s": 20}]
        )


def test_an_env_takes_mcp_servers_from_its_options():
    import gymnasium as gym

    import envs  # noqa: F401

    env = gym.make("agent_rl/CodeExec-v0", mcp_servers=[SERVER])
    try:
        _, info = env.reset(seed=0)
        assert [t["function"]["name"] for t in info["tools"]] == ["python", "submit", "add", "shout", "fail", "nap"]
        call = {"name": "add", "arguments": {"a": 20, "b": 22}}
        obs, _, _, _, info = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
        assert obs == [{"role": "tool", "content": "42"}] and info["action_valid"] is True
        obs, _, _, _, info = env.step('<tool_call>{"name": "add", "arguments": {"a": "x", "b": 1}}</tool_call>')
        assert obs[0]["content"].startswith("error: invalid arguments for tool 'add'") and info["action_valid"] is False
    finally:
        env.close()

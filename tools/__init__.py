"""Tools an environment exposes to the agent, and the parsers that read tool calls from its text.

A tool is described by a pydantic model of its arguments (its JSON schema goes into the prompt)
and executed by the environment, usually inside a sandbox.
"""

from tools.base import Tool, ToolCall, ToolError, tool_schema
from tools.parsers import ParsedAction, parse_action

__all__ = ["ParsedAction", "Tool", "ToolCall", "ToolError", "parse_action", "tool_schema"]

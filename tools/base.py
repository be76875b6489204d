"""The Tool protocol: a name, a description, a pydantic argument model and an async ``run``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError


class ToolError(Exception):
    """A tool call that cannot run (bad arguments, unknown tool): becomes an error observation."""


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


class Tool:
    """Subclass with ``name``, ``description``, ``Args`` (a pydantic model) and ``async run(args)``."""

    name: ClassVar[str]
    description: ClassVar[str]
    Args: ClassVar[type[BaseModel]]
    final: ClassVar[bool] = False  # a call ends the episode (``submit``): the env reads it, nothing runs

    async def run(self, args: BaseModel) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def validate(self, arguments: dict[str, Any]) -> BaseModel:
        try:
            return self.Args.model_validate(arguments)
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'arguments'}: {err['msg']}" for err in e.errors())
            raise ToolError(f"invalid arguments for tool '{self.name}': {problems}") from None

    async def __call__(self, arguments: dict[str, Any]) -> str:
        return await self.run(self.validate(arguments))


def tool_schema(tool: Tool | type[Tool]) -> dict[str, Any]:
    """The OpenAI / Hugging Face ``tools=[...]`` entry for a tool (JSON schema of its arguments)."""
    params = tool.Args.model_json_schema()
    params.pop("title", None)
    for prop in params.get("properties", {}).values():
        prop.pop("title", None)
    return {"type": "function", "function": {"name": tool.name, "description": tool.description, "parameters": params}}

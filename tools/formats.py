"""Tool-call formats by name: how a model family writes tool calls (and its final answer) in text.

A format is a function ``(text, *, fenced_code) -> ParsedAction`` that never raises: a malformed
call becomes a message in ``ParsedAction.errors``. ``fenced_code``: a reply whose only code is a
```python block calls the ``python`` tool. An environment picks its format by name (``ToolEnv``'s
``tool_format`` option); ``register_format`` adds one.

    hermes   Hermes / Qwen ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, with the
             fenced-code fallback (``tools.parsers.parse_action``)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tools.parsers import ParsedAction, parse_action


class ToolFormat(Protocol):
    def __call__(self, text: str, *, fenced_code: bool = True) -> ParsedAction: ...


FORMATS: dict[str, ToolFormat] = {}


def register_format(name: str) -> Callable[[ToolFormat], ToolFormat]:
    """Register ``fn`` as the format ``name`` (a decorator)."""

    def decorator(fn: ToolFormat) -> ToolFormat:
        if name in FORMATS:
            raise ValueError(f"tool format '{name}' is registered twice")
        FORMATS[name] = fn
        return fn

    return decorator


def get_format(name: str) -> ToolFormat:
    """The format registered as ``name``, or ``ValueError`` naming the known ones."""
    if name not in FORMATS:
        raise ValueError(f"unknown tool_format '{name}'; known: {', '.join(sorted(FORMATS))}")
    return FORMATS[name]


register_format("hermes")(parse_action)

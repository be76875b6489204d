"""Read tool calls and final answers from an assistant's text: ``parse_action`` is the ``hermes``
format's ``parse`` (Hermes / Qwen ``<tool_call>{json}</tool_call>`` and fenced ```python code).
Every other format lives in ``tools.formats``; parsing never raises."""

from __future__ import annotations

from tools.formats import ParsedAction
from tools.formats.hermes import HERMES

__all__ = ["ParsedAction", "parse_action"]


def parse_action(text: str, *, fenced_code: bool = True) -> ParsedAction:
    return HERMES.parse(text, fenced_code=fenced_code)

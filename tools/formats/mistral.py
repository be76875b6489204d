"""Mistral calls: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` (one list holds the
turn's calls, in order), and the newer ``[TOOL_CALLS]name[ARGS]{...}`` (once per call, optionally
``[CALL_ID]id`` before ``[ARGS]``). Results are ``tool`` messages, which the template renders as
``[TOOL_RESULTS]...[/TOOL_RESULTS]``. Reasoning is ``[THINK]...[/THINK]`` (Magistral).
"""

from __future__ import annotations

import json
import re

from tools.base import ToolCall
from tools.formats.base import Reading, ToolFormat, call_error, dump_json, json_call, register_format

TOOL_CALLS = "[TOOL_CALLS]"
_NAMED = re.compile(r"\s*([^\s\[\]{}]+)(?:\[CALL_ID\][^\[]*)?\[ARGS\]")  # name[CALL_ID]id[ARGS]
_DECODER = json.JSONDecoder()


class MistralFormat(ToolFormat):
    name = "mistral"
    example = '[TOOL_CALLS][{"name": ..., "arguments": {...}}]'
    reasoning = ("[THINK]", "[/THINK]")
    markers = (TOOL_CALLS,)
    reserved = (TOOL_CALLS, "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]")

    def read(self, text: str) -> Reading:
        body = self.after_reasoning(text)
        if body is None:
            return Reading(errors=[self.unterminated_reasoning()])
        first = body.find(TOOL_CALLS)
        if first < 0:
            return Reading(visible=body)
        out = Reading(visible=body[:first])
        segments = body[first + len(TOOL_CALLS) :].split(TOOL_CALLS)
        for segment in segments:
            calls, errors, rest = self._segment(segment)
            out.calls += calls
            out.errors += errors
            out.visible += rest
        return out

    def _segment(self, segment: str) -> tuple[list[ToolCall], list[str], str]:
        """The calls after one ``[TOOL_CALLS]`` (a list, one object, or NAME[ARGS]{...}), the malformed
        ones, and the text after them."""
        named = _NAMED.match(segment)
        start = named.end() if named else len(segment) - len(segment.lstrip())
        if not named and segment[start : start + 1] not in ("[", "{"):
            return (
                [],
                ["malformed tool call: expected a JSON list of calls or NAME[ARGS]{...} after [TOOL_CALLS]"],
                segment,
            )
        try:
            value, end = _DECODER.raw_decode(segment, start)
        except (ValueError, RecursionError) as e:
            return [], [call_error(e)], ""
        if named:
            value = [{"name": named.group(1), "arguments": value}]
        elif not isinstance(value, list):  # one call without its list
            value = [value]
        calls, errors = [], []
        for obj in value:
            try:
                calls.append(json_call(obj))
            except (ValueError, RecursionError) as e:
                errors.append(call_error(e))
        return calls, errors, segment[end:]

    def render_calls(self, calls: list[ToolCall]) -> str:
        return TOOL_CALLS + dump_json([{"name": c.name, "arguments": c.arguments} for c in calls], self.reserved)


MISTRAL = register_format(MistralFormat())

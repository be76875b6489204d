"""Llama 3.1-3.3 calls (``llama3_json``).

A call is the whole assistant message: a bare JSON object ``{"name": ..., "parameters": {...}}``
(``"arguments"`` is read too); several in one turn are separated by ``;`` (or written as a JSON list).
``<|python_tag|>`` starts a call of a built-in tool: JSON as above, ``tool.call(key=value, ...)``,
or Python code (a ``python`` call). Results come back in the ``ipython`` role. Llama 3 has no
reasoning block; ``<think>...</think>`` is still skipped, as for the other formats.
"""

from __future__ import annotations

import json
import re

from tools.base import ToolCall
from tools.formats.base import Reading, ToolFormat, call_error, dump_json, json_call, register_format
from tools.formats.pythonic import read_python_call

PYTHON_TAG = "<|python_tag|>"
_END = ("<|eom_id|>", "<|eot_id|>")
_STARTS_JSON = re.compile(r"\s*(\{|\[\s*\{)")
_BUILTIN = re.compile(r"\s*[A-Za-z_]\w*\.call\s*\(")  # brave_search.call(query="...")
_DECODER = json.JSONDecoder()


def read_json_calls(text: str, pos: int, keys: tuple[str, ...]) -> tuple[list[ToolCall], list[str], int]:
    """The JSON calls of ``text`` from ``pos``: objects (or lists of them) separated by whitespace
    or ``;``. Stops at the first text that is not JSON; returns (calls, errors, where it stopped)."""
    calls: list[ToolCall] = []
    while True:
        while pos < len(text) and (text[pos].isspace() or text[pos] == ";"):
            pos += 1
        if pos >= len(text) or text[pos] not in "{[":
            return calls, [], pos
        try:
            value, pos = _DECODER.raw_decode(text, pos)
            for obj in value if isinstance(value, list) else [value]:
                calls.append(json_call(obj, keys))
        except (ValueError, RecursionError) as e:
            return calls, [call_error(e)], pos


class Llama3JsonFormat(ToolFormat):
    name = "llama3_json"
    example = '{"name": ..., "parameters": {...}}'
    result_role = "ipython"
    markers = (PYTHON_TAG,)
    reserved = (PYTHON_TAG, "<|eom_id|>", "<|eot_id|>", "<think>", "</think>")
    keys = ("parameters", "arguments")

    def read(self, text: str) -> Reading:
        body = self.after_reasoning(text)
        if body is None:
            return Reading(errors=[self.unterminated_reasoning()])
        tag = body.find(PYTHON_TAG)
        if tag >= 0:
            return self._python_tag(body, tag + len(PYTHON_TAG))
        if not _STARTS_JSON.match(body):
            return Reading(visible=body)
        calls, errors, end = read_json_calls(body, 0, self.keys)
        return Reading(calls, errors, visible=body[end:])

    def _python_tag(self, body: str, start: int) -> Reading:
        ends = [i for i in (body.find(e, start) for e in _END) if i >= 0]
        code = body[start : min(ends, default=len(body))]
        visible = body[: start - len(PYTHON_TAG)]
        if _STARTS_JSON.match(code):
            calls, errors, _ = read_json_calls(code, 0, self.keys)
            return Reading(calls, errors, visible)
        if _BUILTIN.match(code):
            call, error = read_python_call(code.strip())
            if call is not None:
                call.name = call.name.removesuffix(".call")
            return Reading([call] if call else [], [error] if error else [], visible)
        if not code.strip():
            return Reading(errors=[f"malformed tool call: nothing after {PYTHON_TAG}"], visible=visible)
        return Reading([ToolCall(name="python", arguments={"code": code})], [], visible)

    def render_calls(self, calls: list[ToolCall]) -> str:
        return "; ".join(dump_json({"name": c.name, "parameters": c.arguments}, self.reserved) for c in calls)


LLAMA3_JSON = register_format(Llama3JsonFormat())

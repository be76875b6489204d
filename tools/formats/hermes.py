"""Hermes / Qwen2.5 / Qwen3 calls, and the fenced-code format.

``hermes``: each call is ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` (several in
one turn, one per line, run in order); results are ``tool`` messages, which the template wraps in
``<tool_response>``. Reasoning is ``<think>...</think>`` (Qwen3): only the text after it is read.

``fenced``: no call syntax at all; a ```python block calls the ``python`` tool (the fallback every
format also has while its env keeps ``fenced_code``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from tools.base import ToolCall
from tools.formats.base import Reading, ToolFormat, call_error, dump_json, json_call, register_format

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)


class HermesFormat(ToolFormat):
    name = "hermes"
    example = '<tool_call>{"name": ..., "arguments": {...}}</tool_call>'
    markers = ("<tool_call>",)
    reserved = ("<tool_call>", "</tool_call>", "<think>", "</think>")  # escaped inside arguments

    def read(self, text: str) -> Reading:
        body = self.after_reasoning(text)
        if body is None:
            return Reading(errors=[self.unterminated_reasoning()])
        out = Reading(visible=body)
        for m in _TOOL_CALL.finditer(body):
            inner, closing = m.group(1).strip(), m.group(2)
            if not closing:
                out.errors.append("unterminated <tool_call>: expected </tool_call>")
                continue
            try:
                out.calls.append(json_call(json.loads(inner)))
            except (ValueError, RecursionError) as e:
                out.errors.append(call_error(e))
        return out

    def render_calls(self, calls: list[ToolCall]) -> str:
        return "\n".join(
            f"<tool_call>\n{dump_json({'name': c.name, 'arguments': c.arguments}, self.reserved)}\n</tool_call>"
            for c in calls
        )

    def render_result(self, call: ToolCall, content: str) -> dict[str, Any]:
        return {"role": "tool", "content": content}


class FencedFormat(ToolFormat):
    name = "fenced"
    example = "a ```python block"

    def read(self, text: str) -> Reading:
        body = self.after_reasoning(text)
        return Reading(errors=[self.unterminated_reasoning()]) if body is None else Reading(visible=body)

    def render_calls(self, calls: list[ToolCall]) -> str:
        blocks = []
        for c in calls:
            code = c.arguments.get("code")
            if c.name != "python" or set(c.arguments) != {"code"} or not isinstance(code, str):
                raise ValueError(
                    f"the fenced format writes only python calls with one 'code' argument, not {c.name}({c.arguments})"
                )
            if any(m in code for m in ("```", "<think>", "</think>")) or "\n" in code[: len(code) - len(code.lstrip())]:
                raise ValueError(
                    "code holding ``` or <think> tags, or starting with blank lines, cannot be written as a fenced block"
                )
            blocks.append(f"```python\n{code}```")
        return "\n".join(blocks)

    def render_result(self, call: ToolCall, content: str) -> dict[str, Any]:
        return {"role": "tool", "content": content}


HERMES = register_format(HermesFormat())
FENCED = register_format(FencedFormat())

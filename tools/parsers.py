"""Read tool calls and final answers from an assistant's text.

Formats: Hermes / Qwen ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` and fenced
code blocks (```python ... ```), which become a call of the ``python`` tool. A malformed call is
reported in ``ParsedAction.errors``; parsing never raises.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from tools.base import ToolCall

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)
# the atomic group keeps its first match (the code starts after the last newline of the blank run):
# a plain ``\s*\n`` retried the rest of an unclosed fence once per newline (quadratic)
_FENCE = re.compile(r"```(?:python|py)(?>\s*\n)(.*?)```", re.DOTALL)


@dataclass
class ParsedAction:
    tool_calls: list[ToolCall] = field(default_factory=list)
    answer: str | None = None
    errors: list[str] = field(default_factory=list)  # malformed calls, one message each

    @property
    def empty(self) -> bool:
        return not self.tool_calls and self.answer is None


def _parse_call(body: str) -> ToolCall:
    obj = json.loads(body)
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise ValueError('a tool call is a JSON object with a string "name"')
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models emit the arguments as a JSON string
        args = json.loads(args)
    if not isinstance(args, dict):
        raise ValueError('"arguments" must be a JSON object')
    if _has_lone_surrogate([obj["name"], args]):
        raise ValueError("a string holds a lone surrogate such as \\ud800 (not valid Unicode)")
    return ToolCall(name=obj["name"], arguments=args)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _has_lone_surrogate(value: object) -> bool:
    """Whether a string in ``value`` (JSON data) holds a surrogate: ``json.loads`` reads ``"\\ud800"``
    as one, and a tool, a sandbox or a tokenizer given it fails on encoding it as UTF-8."""
    stack = [value]
    while stack:  # a loop: the data may be nested as deep as json.loads goes
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item
    return False


def parse_action(text: str, *, fenced_code: bool = True) -> ParsedAction:
    out = ParsedAction()
    for m in _TOOL_CALL.finditer(text):
        body, closing = m.group(1).strip(), m.group(2)
        if not closing:
            out.errors.append("unterminated <tool_call>: expected </tool_call>")
            continue
        try:
            out.tool_calls.append(_parse_call(body))
        except ValueError as e:
            out.errors.append(f"malformed tool call: {e}")
        except RecursionError:  # json.loads recurses once per level of nesting
            out.errors.append("malformed tool call: JSON nested too deeply")
    if fenced_code and not out.tool_calls:
        for m in _FENCE.finditer(text):
            out.tool_calls.append(ToolCall(name="python", arguments={"code": m.group(1)}))
    answer = _last_answer(text)
    if answer is not None:
        out.answer = answer.strip()
    return out


def _last_answer(text: str) -> str | None:
    """The body of the last ``<answer>...</answer>`` pair, pairs read left to right (each
    ``<answer>`` closes at the first ``</answer>`` after it). A scan, not a regex: a lazy regex
    retried every unclosed ``<answer>`` to the end of the text (quadratic in its length)."""
    open_, close = "<answer>", "</answer>"
    answer, pos = None, 0
    while (start := text.find(open_, pos)) >= 0:
        end = text.find(close, start + len(open_))
        if end < 0:  # no close after this one: none after a later one either
            break
        answer, pos = text[start + len(open_) : end], end + len(close)
    return answer

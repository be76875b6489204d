"""What every tool-call format shares: ``ParsedAction``, the ``ToolFormat`` base class, the registry.

A format is how one model family writes tool calls in its text and reads tool results. Each is a
``ToolFormat`` subclass that writes ``read`` (calls and errors in an assistant's text, reasoning
removed) and ``render_calls`` (the text that emits calls); the base does the rest the same way for
all: ``parse`` reads the ``<answer>...</answer>`` and the fenced-code fallback, names a call written
in another registered format, and never raises.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tools.base import ToolCall

# the atomic group keeps its first match (the code starts after the last newline of the blank run):
# a plain ``\s*\n`` retried the rest of an unclosed fence once per newline (quadratic)
_FENCE = re.compile(r"```(?:python|py)(?>\s*\n)(.*?)```", re.DOTALL)
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass
class ParsedAction:
    tool_calls: list[ToolCall] = field(default_factory=list)  # in the order they were written
    answer: str | None = None
    errors: list[str] = field(default_factory=list)  # malformed calls, one message each

    @property
    def empty(self) -> bool:
        return not self.tool_calls and self.answer is None


@dataclass
class Reading:
    """What a format reads in an assistant's text: its calls, its malformed calls, and the visible
    text (reasoning and call syntax removed as the format defines) where answers are read."""

    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    visible: str = ""


class ToolFormat:
    """One family's tool-call format. Subclasses set the class attributes and write ``read`` and
    ``render_calls``; ``render_result`` / ``render_reply`` when the family differs from the default."""

    name: ClassVar[str]
    example: ClassVar[str]  # one call as the family writes it, for error messages
    result_role: ClassVar[str] = "tool"  # the role of tool-result messages
    reasoning: ClassVar[tuple[str, str] | None] = ("<think>", "</think>")  # the reasoning block's tags
    markers: ClassVar[tuple[str, ...]] = ()  # text that marks a call in this format even when malformed
    end_of_calls: ClassVar[str | None] = None  # the token ending a turn of calls, when not the tokenizer's eos

    # -- what a subclass writes -----------------------------------------------------------------
    def read(self, text: str) -> Reading:
        """The calls, the malformed calls and the visible text of ``text``; never raises."""
        raise NotImplementedError

    def render_calls(self, calls: list[ToolCall]) -> str:
        """The assistant text that emits ``calls`` (in order) as this family's model writes them,
        without the end-of-turn token. ``ValueError`` for a call the format cannot express."""
        raise NotImplementedError

    def render_reply(self, text: str) -> str:
        """The assistant text of a reply without calls whose visible content is ``text``."""
        return text

    def render_result(self, call: ToolCall, content: str) -> dict[str, Any]:
        """The observation message that carries ``call``'s result, as this family's template expects
        it (the template renders it: ``<tool_response>``, ``[TOOL_RESULTS]``, an ``ipython`` turn...)."""
        return {"role": self.result_role, "name": call.name, "content": content}

    def is_result(self, message: dict[str, Any]) -> bool:
        """Whether ``message`` is a tool result in this format (scripted policies read them)."""
        return message.get("role") == self.result_role

    # -- shared ---------------------------------------------------------------------------------
    def parse(self, text: str, *, fenced_code: bool = True) -> ParsedAction:
        """The calls (in order), the last ``<answer>...</answer>`` and the malformed calls of an
        assistant's ``text``. Never raises. ``fenced_code``: without a call, each ```python block
        calls the ``python`` tool. Without a call or an answer, a call written in another registered
        format is an error naming this one."""
        reading = self.read(text)
        out = ParsedAction(tool_calls=reading.calls, errors=reading.errors)
        if fenced_code and not out.tool_calls:
            for m in _FENCE.finditer(reading.visible):
                if _SURROGATE.search(m.group(1)):  # no tool, sandbox or tokenizer can encode it
                    out.errors.append(
                        "malformed python block: it holds a lone surrogate such as \\ud800 (not valid Unicode)"
                    )
                else:
                    out.tool_calls.append(ToolCall(name="python", arguments={"code": m.group(1)}))
        answer = last_answer(reading.visible)
        if answer is not None:
            out.answer = answer.strip()
        if not out.tool_calls and out.answer is None and reading.visible:
            other = next(
                (f for f in FORMATS.values() if f.name not in (self.name, "fenced") and f.claims(reading.visible)), None
            )
            if other is not None:
                out.errors.insert(
                    0, f"tool call in {other.name} format; this environment expects {self.name}: {self.example}"
                )
        return out

    def claims(self, text: str) -> bool:
        """Whether ``text`` holds a call in this format: one that parses, or a malformed one with a
        marker of the format (bare JSON and Python lists count only when they parse)."""
        reading = self.read(text)
        return bool(reading.calls) or (bool(reading.errors) and any(m in text for m in self.markers))

    def after_reasoning(self, text: str) -> str | None:
        """The text after the reasoning block (all of it without one), or None when a block is
        left open. A closing tag without an opening one ends a block the prompt opened."""
        if self.reasoning is None:
            return text
        open_, close = self.reasoning
        end = text.rfind(close)
        tail = text if end < 0 else text[end + len(close) :]
        return None if open_ in tail else tail

    def unterminated_reasoning(self) -> str:
        open_, close = self.reasoning or ("", "")
        return f"unterminated {open_}: no tool call or answer is read before {close}"

    def __repr__(self) -> str:
        return f"<tool format {self.name}>"


FORMATS: dict[str, ToolFormat] = {}  # name -> format, in registration order


def register_format(fmt: ToolFormat) -> ToolFormat:
    """Register the format object ``fmt`` under ``fmt.name``; returns it."""
    if fmt.name in FORMATS:
        raise ValueError(f"tool format '{fmt.name}' is registered twice")
    FORMATS[fmt.name] = fmt
    return fmt


def get_format(name: str) -> ToolFormat:
    """The format registered as ``name``, or ``ValueError`` naming the known ones."""
    if name not in FORMATS:
        raise ValueError(f"unknown tool_format '{name}'; known: {', '.join(sorted(FORMATS))}")
    return FORMATS[name]


# -- helpers of the formats ---------------------------------------------------------------------
def checked_call(name: Any, arguments: Any) -> ToolCall:
    """A ``ToolCall`` of JSON data, or ``ValueError`` saying what is wrong with it."""
    if not isinstance(name, str):
        raise ValueError('a tool call is a JSON object with a string "name"')
    if not isinstance(arguments, dict):
        raise ValueError('"arguments" must be a JSON object')
    if has_lone_surrogate([name, arguments]):
        raise ValueError("a string holds a lone surrogate such as \\ud800 (not valid Unicode)")
    return ToolCall(name=name, arguments=arguments)


def json_call(obj: Any, argument_keys: tuple[str, ...] = ("arguments",)) -> ToolCall:
    """The call of a decoded JSON object ``{"name": ..., KEY: {...}}`` (KEY the first of
    ``argument_keys`` present; arguments written as a JSON string are decoded too)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise ValueError('a tool call is a JSON object with a string "name"')
    key = next((k for k in argument_keys if k in obj), argument_keys[0])
    args = obj.get(key, {})
    if isinstance(args, str):  # some models emit the arguments as a JSON string
        args = json.loads(args)
    if not isinstance(args, dict):
        raise ValueError(f'"{key}" must be a JSON object')
    return checked_call(obj["name"], args)


def call_error(e: Exception) -> str:
    """The error message of a call that failed to decode (``ValueError`` or ``RecursionError``)."""
    if isinstance(e, RecursionError):  # json.loads recurses once per level of nesting
        return "malformed tool call: JSON nested too deeply"
    return f"malformed tool call: {e}"


def dump_json(value: Any, reserved: tuple[str, ...] = ()) -> str:
    """``json.dumps(value)`` where each ``reserved`` marker inside a string has its first character
    escaped (``<`` as ``\\u003c``), so an argument can never close or open the format's syntax."""
    text = json.dumps(value)
    for marker in reserved:
        if marker in text:
            text = text.replace(marker, f"\\u{ord(marker[0]):04x}{marker[1:]}")
    return text


def has_lone_surrogate(value: object) -> bool:
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


def last_answer(text: str) -> str | None:
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

"""Pythonic calls: the assistant message is a Python list of calls, ``[get_weather(city="Paris"), f(x=1)]``
(Llama 3.2 / Llama 4 and others; optionally between ``<|python_start|>`` and ``<|python_end|>``).

Read with ``ast``, never evaluated: a call is a (dotted) name with keyword arguments whose values
are literals (JSON's ``true`` / ``false`` / ``null`` are read too); anything else is a malformed call.
"""

from __future__ import annotations

import ast
import json
import keyword
import math
import re
import unicodedata
from typing import Any

from tools.base import ToolCall
from tools.formats.base import Reading, ToolFormat, checked_call, register_format

START, END = "<|python_start|>", "<|python_end|>"
_LIST_OF_CALLS = re.compile(r"\s*\[\s*[A-Za-z_][\w.]*\s*\(")
_JSON_NAMES = {"true": True, "false": False, "null": None}
RESERVED = (START, END, "<think>", "</think>")


class _NotLiteral(ValueError):
    """A value that is code, not a literal (a call, a name, an operation)."""


def _value(node: ast.AST) -> Any:
    """The JSON data a literal node writes (tuples become lists; ``true`` / ``false`` / ``null`` are
    read as JSON's); ``_NotLiteral`` for code, ``ValueError`` for literals JSON cannot hold."""
    if isinstance(node, ast.Constant):
        if node.value is None or isinstance(node.value, bool | int | float | str):
            return node.value
        raise ValueError(f"a {type(node.value).__name__} is not a JSON value")
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub | ast.UAdd)
        and isinstance(node.operand, ast.Constant)
    ):
        value = node.operand.value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.List | ast.Tuple):
        return [_value(v) for v in node.elts]
    if isinstance(node, ast.Dict):
        keys = [_value(k) if k is not None else None for k in node.keys]
        if not all(isinstance(k, str) for k in keys):
            raise ValueError("dictionary keys must be strings")
        return dict(zip(keys, (_value(v) for v in node.values), strict=True))
    if isinstance(node, ast.Set):
        raise ValueError("a set is not a JSON value")
    raise _NotLiteral


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _call(node: ast.AST) -> ToolCall:
    """The ``ToolCall`` of one call node, or ``ValueError`` saying what is wrong with it."""
    name = _dotted(node.func) if isinstance(node, ast.Call) else None
    if name is None:
        raise ValueError(f"'{ast.unparse(node)[:60]}' is not a call of a tool name")
    if node.args:
        raise ValueError(f"positional arguments in the call of '{name}'; write name=value")
    args = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise ValueError(f"**arguments in the call of '{name}'; write name=value")
        try:  # read from the syntax tree, never evaluated
            args[kw.arg] = _value(kw.value)
        except _NotLiteral:
            raise ValueError(f"argument '{kw.arg}' of '{name}' is not a literal") from None
        except (ValueError, RecursionError) as e:
            raise ValueError(f"argument '{kw.arg}' of '{name}' is not JSON data ({e})") from None
    return checked_call(name, args)


def _parse_tree(src: str) -> ast.AST:
    try:
        return ast.parse(src.strip(), mode="eval").body
    except (SyntaxError, ValueError) as e:
        raise ValueError(f"not a Python list of calls ({getattr(e, 'msg', e)})") from None
    except (RecursionError, MemoryError):
        raise ValueError("not a Python list of calls (nested too deeply)") from None


def read_python_call(src: str) -> tuple[ToolCall | None, str | None]:
    """One call written in Python (``tool.call(key=value)``): (the call, None) or (None, the error)."""
    try:
        return _call(_parse_tree(src)), None
    except (ValueError, RecursionError) as e:
        return None, f"malformed tool call: {e}"


class PythonicFormat(ToolFormat):
    name = "pythonic"
    example = '[name(key="value", ...), ...]'
    markers = (START,)

    def read(self, text: str) -> Reading:
        body = self.after_reasoning(text)
        if body is None:
            return Reading(errors=[self.unterminated_reasoning()])
        start = body.find(START)
        if start >= 0:
            end = body.find(END, start)
            src = body[start + len(START) : end if end >= 0 else len(body)]
            visible = body[:start] + (body[end + len(END) :] if end >= 0 else "")
        elif _LIST_OF_CALLS.match(body):
            src, visible = body, ""
        else:
            return Reading(visible=body)
        try:
            tree = _parse_tree(src)
        except ValueError as e:
            return Reading(errors=[f"malformed tool call: {e}"], visible=body)
        out = Reading(visible=visible)
        for node in tree.elts if isinstance(tree, ast.List | ast.Tuple) else [tree]:
            try:
                out.calls.append(_call(node))
            except (ValueError, RecursionError) as e:
                out.errors.append(f"malformed tool call: {e}")
        return out

    def render_calls(self, calls: list[ToolCall]) -> str:
        return (
            "["
            + ", ".join(
                f"{_name(c.name)}({', '.join(f'{_name(k, dotted=False)}={_literal(v)}' for k, v in c.arguments.items())})"
                for c in calls
            )
            + "]"
        )


def _name(name: str, dotted: bool = True) -> str:
    """``name`` when Python reads it back unchanged as a (dotted) name, else ``ValueError``."""
    parts = name.split(".") if dotted else [name]
    if not all(p.isidentifier() and not keyword.iskeyword(p) for p in parts) or (
        unicodedata.normalize("NFKC", name) != name
    ):
        raise ValueError(f"'{name}' cannot be written as a Python name")
    return name


def _literal(value: Any) -> str:
    """The Python literal of JSON data (strings with the format's markers escaped)."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} has no Python literal")
        return repr(value)
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)  # JSON's escapes are Python's
        for marker in RESERVED:
            text = text.replace(marker, f"\\u{ord(marker[0]):04x}{marker[1:]}")
        return text
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"a {type(value).__name__} is not a JSON value")


PYTHONIC = register_format(PythonicFormat())

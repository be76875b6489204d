"""Shared strategies and settings of the fuzz tests (``hypothesis``).

Every fuzz test is derandomized (the same examples on every run, so CI is reproducible) with no
per-example deadline (a loaded 2-core machine is slow, not wrong) and no example database (nothing
is written into the working tree). ``FUZZ_EXAMPLES`` scales every test's example count.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SCALE = float(os.environ.get("FUZZ_EXAMPLES", "1"))


def fuzz_settings(max_examples: int) -> settings:
    return settings(
        max_examples=max(1, int(max_examples * SCALE)),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    )


# the markers the tool-call formats read, and what breaks parsers: quotes, braces, escapes, NUL
MARKERS = [
    "<tool_call>",
    "</tool_call>",
    "<answer>",
    "</answer>",
    "```python\n",
    "```py\n",
    "```",
    "\n",
    "{",
    "}",
    "[",
    "]",
    '"',
    "'",
    "\\",
    ":",
    ",",
    '"name"',
    '"arguments"',
    '"code"',
    "null",
    "true",
    "1e309",
    "-0",
    "NaN",
    "Infinity",
    "\x00",
    "\ud800",
    "\U0001f600",
    "\u202e",
    "\r\n",
    "<tool_call",
    "tool_call>",
    "</answer",
    "<",
    ">",
]

# a tool call's JSON, well-formed or not: real names and argument keys with random values
# hypothesis never draws surrogates: lone ones (what json.loads makes of "\ud800") come from here
SURROGATES = st.sampled_from(["\ud800", "x\udfffy", "\ud83d", "\ud83d\ude00"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20) | SURROGATES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
tool_names = st.sampled_from(["python", "submit", "move", "shell", "read_file", "write_file", "nope", "", "\ud800"])
arg_keys = st.sampled_from(["code", "direction", "command", "path", "content", "x", ""])


@st.composite
def call_json(draw) -> str:
    """The body of a ``<tool_call>``: a JSON object with a name and arguments, often subtly wrong."""
    import json

    obj: object = {
        "name": draw(tool_names | json_values),
        "arguments": draw(st.dictionaries(arg_keys, json_values, max_size=3) | json_values),
    }
    if draw(st.booleans()):
        obj = draw(json_values)
    text = json.dumps(obj, allow_nan=True, ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()) and text:  # cut it, or splice a marker into it
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] + draw(st.sampled_from(MARKERS + [""])) + text[cut:] * draw(st.integers(0, 1))
    return text


@st.composite
def adversarial_text(draw) -> str:
    """Random text built from the formats' own markers, call bodies and arbitrary unicode."""
    pieces = draw(
        st.lists(
            st.sampled_from(MARKERS)
            | call_json()
            | st.text(max_size=30)
            | st.builds(lambda b: f"<tool_call>{b}</tool_call>", call_json())
            | st.builds(lambda c: f"```python\n{c}```", st.text(max_size=30)),
            max_size=12,
        )
    )
    return "".join(pieces)


# the other tool-call formats' syntax (tools/formats): special tokens, reasoning tags, Python calls
FORMAT_MARKERS = [
    "<think>",
    "</think>",
    "[THINK]",
    "[/THINK]",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "<|python_tag|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_start|>",
    "<|python_end|>",
    "<|start|>",
    "assistant",
    "<|channel|>",
    "analysis",
    "commentary",
    "final",
    " to=functions.",
    "to=python",
    " <|constrain|>json",
    "<|message|>",
    "<|end|>",
    "<|call|>",
    "<|return|>",
    "[f(",
    "x=1",
    "(",
    ")",
    "=",
    ";",
    "**kw",
    "true",
    "None",
    '"parameters"',
]
python_calls = st.builds(
    lambda name, keys, values: f"{name}(" + ", ".join(f"{k}={v}" for k, v in zip(keys, values, strict=False)) + ")",
    st.sampled_from(["python", "get_weather", "a.b", "f", "1x", ""]),
    st.lists(st.sampled_from(["code", "x", "class", "", "**"]), max_size=3),
    st.lists(
        st.sampled_from(["1", "'s'", '"\\ud800"', "[1, {'a': None}]", "true", "null", "f(1)", "{1, 2}", "b'x'", "("]),
        max_size=3,
    ),
)


@st.composite
def format_text(draw) -> str:
    """Random text built from every format's markers, JSON call bodies and Python calls."""
    pieces = draw(
        st.lists(
            st.sampled_from(MARKERS + FORMAT_MARKERS)
            | call_json()
            | python_calls
            | st.text(max_size=20)
            | st.builds(lambda calls: "[" + ", ".join(calls) + "]", st.lists(python_calls, max_size=3)),
            max_size=14,
        )
    )
    return "".join(pieces)


# the deepest JSON nesting a parser meets: Python's json recurses once per level
DEEP = 100_000

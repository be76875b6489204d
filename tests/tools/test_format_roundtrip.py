"""render_calls -> parse gives back the same calls, in order, for every format (``hypothesis`` over
random names and arguments, strings holding every format's own syntax included)."""

from __future__ import annotations

import keyword

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tools.base import ToolCall
from tools.formats import FORMATS

SYNTAX = [  # every format's markers: an argument holding them must not break the call around it
    "<tool_call>",
    "</tool_call>",
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
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|call|>",
    "<|return|>",
    "<|constrain|>",
    "to=functions.x",
    "```",
    "<answer>",
    "\\",
    '"',
    "'",
]
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True).filter(lambda s: not keyword.iskeyword(s))
texts = st.lists(st.sampled_from(SYNTAX) | st.text(max_size=12), max_size=5).map("".join)
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=10,
)
python_calls = st.builds(ToolCall, names, st.dictionaries(names, values, max_size=4))  # keyword arguments: identifiers
json_calls = st.builds(ToolCall, names, st.dictionaries(texts, values, max_size=4))  # any JSON object
ROUNDTRIP = settings(
    max_examples=100, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize("fmt", ["hermes", "llama3_json", "mistral", "harmony"])
@ROUNDTRIP
@given(calls=st.lists(json_calls, min_size=1, max_size=3))
def test_json_formats_roundtrip(fmt, calls):
    parsed = FORMATS[fmt].parse(FORMATS[fmt].render_calls(calls), fenced_code=True)
    assert (parsed.tool_calls, parsed.errors) == (calls, [])


@pytest.mark.parametrize("fmt", sorted(set(FORMATS) - {"fenced"}))
@ROUNDTRIP
@given(calls=st.lists(python_calls, min_size=1, max_size=3), reasoning=texts)
def test_roundtrip_after_reasoning(fmt, calls, reasoning):
    """After a closed reasoning block (whose text holds no closing tag of its own)."""
    fmt_ = FORMATS[fmt]
    if fmt == "harmony":
        assume("<|" not in reasoning)
        prefix = f"<|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant"
    else:
        open_, close = fmt_.reasoning
        assume(close not in reasoning and open_ not in reasoning)
        prefix = f"{open_}{reasoning}{close}"
    parsed = fmt_.parse(prefix + fmt_.render_calls(calls), fenced_code=True)
    assert (parsed.tool_calls, parsed.errors) == (calls, [])


@ROUNDTRIP
@given(codes=st.lists(texts, min_size=1, max_size=3))
def test_fenced_roundtrip(codes):
    calls = [ToolCall("python", {"code": code}) for code in codes]
    try:
        text = FORMATS["fenced"].render_calls(calls)
    except ValueError:  # ``` inside the code, or blank lines first: refused, never mis-written
        assume(False)
    assert FORMATS["fenced"].parse(text, fenced_code=True).tool_calls == calls

"""Fuzzed tool-call parsing: every registered format reads any text without raising, in linear
time; a malformed call is a message in ``ParsedAction.errors``, never an exception."""

from __future__ import annotations

import json
import re
import time

import pytest
from fuzz_helpers import DEEP, MARKERS, adversarial_text, format_text, fuzz_settings
from hypothesis import example, given
from hypothesis import strategies as st

from tools.base import ToolCall
from tools.formats import FORMATS
from tools.parsers import ParsedAction, parse_action

# the inputs that broke the parser once (tools/parsers.py): a RecursionError, and quadratic scans
DEEP_CALL = "<tool_call>" + "[" * DEEP + "]" * DEEP + "</tool_call>"
DEEP_ARGUMENTS = '<tool_call>{"name": "python", "arguments": "' + "[" * DEEP + '"}</tool_call>'
UNCLOSED_ANSWERS = "<answer>" * 25_000  # 200k chars: ~20 s with the old lazy regex
UNCLOSED_FENCE = "```python" + "\n" * 50_000  # ~17 s with the old ``\s*\n``


def check(parsed: ParsedAction) -> None:
    assert isinstance(parsed, ParsedAction)
    assert all(
        isinstance(c, ToolCall) and isinstance(c.name, str) and isinstance(c.arguments, dict) for c in parsed.tool_calls
    )
    assert parsed.answer is None or isinstance(parsed.answer, str)
    assert all(isinstance(e, str) and e for e in parsed.errors)
    for c in parsed.tool_calls:  # what a tool receives encodes as UTF-8 (no lone surrogates)
        json.dumps([c.name, c.arguments], ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@fuzz_settings(150)
@given(text=st.text(), fenced_code=st.booleans())
def test_random_text_never_raises(fmt, text, fenced_code):
    check(FORMATS[fmt].parse(text, fenced_code=fenced_code))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@fuzz_settings(150)
@given(text=adversarial_text(), fenced_code=st.booleans())
@example(text=DEEP_CALL, fenced_code=True)
@example(text=DEEP_ARGUMENTS, fenced_code=True)
@example(text="<tool_call>" + "{" * 5000 + "</tool_call>", fenced_code=False)
@example(text='<tool_call>{"name": "x", "arguments": {"a": 1' + "0" * 5000 + "}}</tool_call>", fenced_code=True)
@example(text="<tool_call>\x00</tool_call><answer>\ud800</answer>", fenced_code=True)
@example(text='```python\n{"name": "\ud800", "arguments": {}}```python\n', fenced_code=True)
def test_marker_text_never_raises(fmt, text, fenced_code):
    check(FORMATS[fmt].parse(text, fenced_code=fenced_code))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@fuzz_settings(200)
@given(text=format_text(), fenced_code=st.booleans())
@example(text="<|channel|>commentary to=functions.f <|constrain|>json<|message|>" + "[" * DEEP, fenced_code=True)
@example(text="[f(x=" + "[" * DEEP + ")]", fenced_code=True)
@example(text="<|python_start|>f(x=" + "(" * 5000, fenced_code=False)
@example(text="[TOOL_CALLS]" + "{" * DEEP, fenced_code=True)
@example(text="<|python_tag|>" + "[" * DEEP, fenced_code=True)
@example(text="{" * DEEP, fenced_code=True)
@example(text="[f(x='\\ud800')]", fenced_code=True)
@example(text="[f(x=1" + "0" * 5000 + ")]", fenced_code=True)
def test_every_format_reads_any_format_text(fmt, text, fenced_code):
    """Each format on text made of all formats' syntax: no exception, well-formed output."""
    check(FORMATS[fmt].parse(text, fenced_code=fenced_code))


@fuzz_settings(150)
@given(text=adversarial_text())
def test_hermes_every_call_is_parsed_or_reported(text):
    """A text with ``<tool_call>`` openings gives at least one call or error, at most one per
    opening (an unterminated one takes the rest of the text); without one, neither (but a call in
    another format, such as a bare JSON call, is named)."""
    parsed = parse_action(text, fenced_code=False)
    openings = text.count("<tool_call>")
    errors = [e for e in parsed.errors if not e.startswith("tool call in ")]
    assert (openings > 0) == (len(parsed.tool_calls) + len(errors) > 0)
    assert len(parsed.tool_calls) + len(errors) <= openings


# the regexes parse_action used before its linear rewrite: the same answers and fenced code
_OLD_FENCE = re.compile(r"```(?:python|py)\s*\n(.*?)```", re.DOTALL)
_OLD_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@fuzz_settings(300)
@given(text=st.lists(st.sampled_from(MARKERS + [" ", "\t", "\n\n", "x", "1"]), max_size=30).map("".join))
@example(text="<answer><answer>5</answer>x</answer>")
@example(text="```python\n\n  code```")
def test_answer_and_fence_read_as_before(text):
    parsed = parse_action(text, fenced_code=True)
    answers = _OLD_ANSWER.findall(text)
    assert parsed.answer == (answers[-1].strip() if answers else None)
    if "<tool_call>" not in text:  # a block holding a lone surrogate is an error now, not a call
        assert [c.arguments["code"] for c in parsed.tool_calls] == [
            b for b in _OLD_FENCE.findall(text) if "\ud800" not in b
        ]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize(
    "text",
    [
        DEEP_CALL,
        DEEP_ARGUMENTS,
        UNCLOSED_ANSWERS,
        UNCLOSED_FENCE,
        "<tool_call>" * 50_000,
        "```python\n" * 50_000,
        "</answer><answer>" * 20_000,
        "x" * 1_000_000,
        # the other formats' syntax, repeated
        "<|message|>" * 50_000,
        "<|start|>" * 50_000,
        "<|channel|>analysis<|message|>x<|end|>" * 20_000,
        "[TOOL_CALLS]" * 50_000,
        "[TOOL_CALLS]f[ARGS]{}" * 30_000,
        '{"name": "f"}; ' * 40_000,
        "<|python_tag|>" * 50_000,
        "[" + "f(x=1), " * 5_000 + "]",
        "<think>" * 50_000,
        "</think>" * 50_000,
    ],
    ids=[
        "deep-json",
        "deep-arguments",
        "unclosed-answers",
        "unclosed-fence",
        "many-openings",
        "many-fences",
        "answer-pairs",
        "1M-chars",
        "harmony-messages",
        "harmony-starts",
        "analysis-messages",
        "mistral-markers",
        "mistral-calls",
        "llama3-calls",
        "python-tags",
        "pythonic-calls",
        "think-openings",
        "think-closings",
    ],
)
def test_long_inputs_parse_in_linear_time(fmt, text):
    """CPU seconds of this process (a loaded machine does not inflate them as it does wall time):
    each parse takes well under a second here, a quadratic one of these ~1M-character inputs minutes."""
    start = time.process_time()
    parsed = FORMATS[fmt].parse(text, fenced_code=True)
    assert time.process_time() - start < 15.0
    check(parsed)


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "shell", "arguments": {"command": "\\ud800"}}</tool_call>',
        '<tool_call>{"name": "x\\udfff", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "python", "arguments": {"code": ["\\ud83d"]}}</tool_call>',
        '<tool_call>{"name": "python", "arguments": {"\\ud800": 1}}</tool_call>',
        '<tool_call>{"name": "python", "arguments": "{\\"code\\": \\"\\\\ud800\\"}"}</tool_call>',
    ],
)
def test_lone_surrogate_is_a_malformed_call(text):
    parsed = parse_action(text)
    assert parsed.tool_calls == [] and len(parsed.errors) == 1 and "surrogate" in parsed.errors[0]


def test_surrogate_pair_is_a_character():
    parsed = parse_action('<tool_call>{"name": "shell", "arguments": {"command": "echo \\ud83d\\ude00"}}</tool_call>')
    assert parsed.tool_calls[0].arguments == {"command": "echo \U0001f600"}


def test_deep_json_is_a_malformed_call():
    for text in (DEEP_CALL, DEEP_ARGUMENTS):
        parsed = parse_action(text)
        assert parsed.tool_calls == [] and parsed.errors == ["malformed tool call: JSON nested too deeply"]

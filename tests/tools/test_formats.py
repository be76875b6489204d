"""Every tool-call format on hand-written text: single and parallel calls, reasoning blocks, answers,
each kind of malformed call with its exact message, a call in another format, and results."""

from __future__ import annotations

import pytest

from tools.base import ToolCall
from tools.formats import FORMATS, get_format

A, B = ToolCall("get_weather", {"city": "Paris"}), ToolCall("f", {"x": 1, "y": [1, {"z": None}]})
HERMES_EXPECTS = 'this environment expects hermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call>'


def parse(fmt: str, text: str, fenced_code: bool = False):
    out = FORMATS[fmt].parse(text, fenced_code=fenced_code)
    return out.tool_calls, out.answer, out.errors


# (format, text, calls, answer, errors)
CASES = [
    # -- hermes (Qwen2.5 / Qwen3)
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', [A], None, []),
    (
        "hermes",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
        '<tool_call>{"name": "f", "arguments": {"x": 1, "y": [1, {"z": null}]}}</tool_call>',
        [A, B],
        None,
        [],
    ),
    (
        "hermes",
        '<think>rm first? <tool_call>{"name": "rm", "arguments": {}}</tool_call> no.</think>\n'
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
        [A],
        None,
        [],
    ),
    (
        "hermes",
        "2+2 is 4 <answer>5</answer>, surely</think>\n<answer> 4 </answer>",
        [],
        "4",
        [],
    ),  # the prompt opened <think>
    (
        "hermes",
        '<think>let me <tool_call>{"name": "f", "arguments": {}}</tool_call><answer>4</answer>',
        [],
        None,
        ["unterminated <think>: no tool call or answer is read before </think>"],
    ),
    (
        "hermes",
        '<tool_call>{"name": "f", "arguments": {}}</tool_call> <answer>4</answer>',
        [ToolCall("f", {})],
        "4",
        [],
    ),
    (
        "hermes",
        '<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>',
        [ToolCall("f", {"x": 1})],
        None,
        [],
    ),
    (
        "hermes",
        "<tool_call>{oops}</tool_call>",
        [],
        None,
        ["malformed tool call: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"],
    ),
    (
        "hermes",
        '<tool_call>{"name": 1}</tool_call>',
        [],
        None,
        ['malformed tool call: a tool call is a JSON object with a string "name"'],
    ),
    (
        "hermes",
        '<tool_call>{"name": "a", "arguments": [1]}</tool_call>',
        [],
        None,
        ['malformed tool call: "arguments" must be a JSON object'],
    ),
    (
        "hermes",
        '<tool_call>{"name": "a", "arguments": {"s": "\\ud800"}}</tool_call>',
        [],
        None,
        ["malformed tool call: a string holds a lone surrogate such as \\ud800 (not valid Unicode)"],
    ),
    ("hermes", '<tool_call>{"name": "a"', [], None, ["unterminated <tool_call>: expected </tool_call>"]),
    (
        "hermes",
        '<tool_call>{"name": "f", "arguments": {}}</tool_call><tool_call>{"name": 2}</tool_call>',
        [ToolCall("f", {})],
        None,
        ['malformed tool call: a tool call is a JSON object with a string "name"'],
    ),
    # -- llama3_json (Llama 3.1-3.3)
    ("llama3_json", '{"name": "get_weather", "parameters": {"city": "Paris"}}', [A], None, []),
    ("llama3_json", '{"name": "get_weather", "arguments": {"city": "Paris"}}', [A], None, []),
    (
        "llama3_json",
        '{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "f", "parameters": {"x": 1, "y": [1, {"z": null}]}}',
        [A, B],
        None,
        [],
    ),
    (
        "llama3_json",
        '[{"name": "get_weather", "parameters": {"city": "Paris"}}, {"name": "f", "parameters": {"x": 1, "y": [1, {"z": null}]}}]',
        [A, B],
        None,
        [],
    ),
    ("llama3_json", "<|python_tag|>print(2 + 2)<|eom_id|>", [ToolCall("python", {"code": "print(2 + 2)"})], None, []),
    (
        "llama3_json",
        '<|python_tag|>brave_search.call(query="weather in Paris")<|eom_id|>',
        [ToolCall("brave_search", {"query": "weather in Paris"})],
        None,
        [],
    ),
    ("llama3_json", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}', [A], None, []),
    (
        "llama3_json",
        '<think>{"name": "rm", "parameters": {}}</think>{"name": "get_weather", "parameters": {"city": "Paris"}}',
        [A],
        None,
        [],
    ),
    ("llama3_json", "The answer is <answer>4</answer>", [], "4", []),
    (
        "llama3_json",
        '{"name": "f", "parameters": {"x": }}',
        [],
        None,
        ["malformed tool call: Expecting value: line 1 column 35 (char 34)"],
    ),
    (
        "llama3_json",
        '{"name": "f", "parameters": [1]}',
        [],
        None,
        ['malformed tool call: "parameters" must be a JSON object'],
    ),
    (
        "llama3_json",
        '{"parameters": {}}',
        [],
        None,
        ['malformed tool call: a tool call is a JSON object with a string "name"'],
    ),
    ("llama3_json", "<|python_tag|><|eom_id|>", [], None, ["malformed tool call: nothing after <|python_tag|>"]),
    (
        "llama3_json",
        '<|python_tag|>wolfram_alpha.call("2+2")',
        [],
        None,
        ["malformed tool call: positional arguments in the call of 'wolfram_alpha.call'; write name=value"],
    ),
    # -- mistral
    (
        "mistral",
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "f", "arguments": {"x": 1, "y": [1, {"z": null}]}}]',
        [A, B],
        None,
        [],
    ),
    (
        "mistral",
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]f[ARGS]{"x": 1, "y": [1, {"z": null}]}',
        [A, B],
        None,
        [],
    ),
    ("mistral", '[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}', [A], None, []),
    ("mistral", '[TOOL_CALLS] {"name": "get_weather", "arguments": {"city": "Paris"}}', [A], None, []),
    (
        "mistral",
        '[THINK]maybe [TOOL_CALLS][{"name": "rm", "arguments": {}}][/THINK][TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
        [A],
        None,
        [],
    ),
    (
        "mistral",
        "[THINK]2+2 is 4 <answer>4</answer>",
        [],
        None,
        ["unterminated [THINK]: no tool call or answer is read before [/THINK]"],
    ),
    ("mistral", "[THINK]2+2[/THINK]<answer>4</answer>", [], "4", []),
    (
        "mistral",
        "[TOOL_CALLS]hello",
        [],
        None,
        ["malformed tool call: expected a JSON list of calls or NAME[ARGS]{...} after [TOOL_CALLS]"],
    ),
    (
        "mistral",
        '[TOOL_CALLS][{"name": "f", "arguments": {}}, {"arguments": {}}]',
        [ToolCall("f", {})],
        None,
        ['malformed tool call: a tool call is a JSON object with a string "name"'],
    ),
    ("mistral", "[TOOL_CALLS]f[ARGS][1]", [], None, ['malformed tool call: "arguments" must be a JSON object']),
    (
        "mistral",
        '[TOOL_CALLS][{"name": "a"',
        [],
        None,
        ["malformed tool call: Expecting ',' delimiter: line 1 column 14 (char 13)"],
    ),
    # -- harmony (gpt-oss)
    (
        "harmony",
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
        [A],
        None,
        [],
    ),
    (
        "harmony",
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}',
        [A],
        None,
        [],
    ),
    (
        "harmony",
        '<|channel|>analysis<|message|>Weather first. <tool_call>{"name": "rm", "arguments": {}}</tool_call><|end|>'
        '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
        '<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"x": 1, "y": [1, {"z": null}]}',
        [A, B],
        None,
        [],
    ),
    (
        "harmony",
        "<|channel|>analysis<|message|>2+2=4, so <answer>5</answer>? no<|end|><|start|>assistant<|channel|>final<|message|><answer>4</answer>",
        [],
        "4",
        [],
    ),
    (
        "harmony",
        "<|channel|>analysis to=python<|message|>print(2 + 2)<|call|>",
        [ToolCall("python", {"code": "print(2 + 2)"})],
        None,
        [],
    ),
    (
        "harmony",
        "<|channel|>analysis<|message|>call to=functions.get_weather <answer>4</answer>",
        [],
        None,
        ["unterminated analysis message: no tool call or answer is read before <|end|>"],
    ),
    (
        "harmony",
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"city": }',
        [],
        None,
        ["malformed tool call: Expecting value: line 1 column 10 (char 9)"],
    ),
    (
        "harmony",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>[1]<|call|>",
        [],
        None,
        ["malformed tool call: the arguments must be a JSON object"],
    ),
    # -- pythonic
    ("pythonic", '[get_weather(city="Paris")]', [A], None, []),
    ("pythonic", '[get_weather(city="Paris"), f(x=1, y=[1, {"z": None}])]', [A, B], None, []),
    ("pythonic", "[f(x=1, y=[1, {'z': null}])]", [ToolCall("f", {"x": 1, "y": [1, {"z": None}]})], None, []),
    (
        "pythonic",
        "[f(flag=true, off=false, t=(1, 2))]",
        [ToolCall("f", {"flag": True, "off": False, "t": [1, 2]})],
        None,
        [],
    ),
    ("pythonic", '<|python_start|>[get_weather(city="Paris")]<|python_end|>', [A], None, []),
    ("pythonic", '<think>[rm(path="/")]</think>[get_weather(city="Paris")]', [A], None, []),
    (
        "pythonic",
        "[f(1)]",
        [],
        None,
        ["malformed tool call: positional arguments in the call of 'f'; write name=value"],
    ),
    ("pythonic", "[f(**kw)]", [], None, ["malformed tool call: **arguments in the call of 'f'; write name=value"]),
    (
        "pythonic",
        '[f(x=__import__("os").system("rm -rf /"))]',
        [],
        None,
        ["malformed tool call: argument 'x' of 'f' is not a literal"],
    ),
    (
        "pythonic",
        "[f(x={1, 2})]",
        [],
        None,
        ["malformed tool call: argument 'x' of 'f' is not JSON data (a set is not a JSON value)"],
    ),
    (
        "pythonic",
        "[f(x=1), 3]",
        [ToolCall("f", {"x": 1})],
        None,
        ["malformed tool call: '3' is not a call of a tool name"],
    ),
    ("pythonic", "[f(x=1)", [], None, ["malformed tool call: not a Python list of calls ('[' was never closed)"]),
    (
        "pythonic",
        "[f(x='\\ud800')]",
        [],
        None,
        ["malformed tool call: a string holds a lone surrogate such as \\ud800 (not valid Unicode)"],
    ),
    ("pythonic", "[1, 2] is a list <answer>[1, 2]</answer>", [], "[1, 2]", []),
    # -- fenced
    ("fenced", "```python\nprint(1)\n```", [ToolCall("python", {"code": "print(1)\n"})], None, []),
    ("fenced", "<think>```python\nrm()\n```</think><answer>4</answer>", [], "4", []),
]


@pytest.mark.parametrize(("fmt", "text", "calls", "answer", "errors"), CASES)
def test_parse(fmt, text, calls, answer, errors):
    assert parse(fmt, text, fenced_code=fmt == "fenced") == (calls, answer, errors)


# a call in another format: an error naming the expected format (and no call runs)
WRONG = [
    ("hermes", '[TOOL_CALLS][{"name": "f", "arguments": {}}]', f"tool call in mistral format; {HERMES_EXPECTS}"),
    (
        "hermes",
        '{"name": "python", "parameters": {"code": "print(1)"}}',
        f"tool call in llama3_json format; {HERMES_EXPECTS}",
    ),
    ("hermes", "[get_weather(city='Paris')]", f"tool call in pythonic format; {HERMES_EXPECTS}"),
    (
        "hermes",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}",
        f"tool call in harmony format; {HERMES_EXPECTS}",
    ),
    ("hermes", "[TOOL_CALLS]oops", f"tool call in mistral format; {HERMES_EXPECTS}"),  # malformed, but marked
    (
        "llama3_json",
        '<tool_call>{"name": "f", "arguments": {}}</tool_call>',
        'tool call in hermes format; this environment expects llama3_json: {"name": ..., "parameters": {...}}',
    ),
    (
        "mistral",
        "<|python_tag|>print(1)",
        'tool call in llama3_json format; this environment expects mistral: [TOOL_CALLS][{"name": ..., "arguments": {...}}]',
    ),
    (
        "harmony",
        "[f(x=1)]",
        "tool call in pythonic format; this environment expects harmony: "
        "<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>",
    ),
    (
        "pythonic",
        '<tool_call>{"name": "f", "arguments": {}}</tool_call>',
        'tool call in hermes format; this environment expects pythonic: [name(key="value", ...), ...]',
    ),
    (
        "fenced",
        '<tool_call>{"name": "f", "arguments": {}}</tool_call>',
        "tool call in hermes format; this environment expects fenced: a ```python block",
    ),
]


@pytest.mark.parametrize(("fmt", "text", "error"), WRONG)
def test_call_in_another_format_names_the_expected_one(fmt, text, error):
    assert parse(fmt, text) == ([], None, [error])


def test_not_a_call_in_any_format():
    for fmt in FORMATS:
        assert parse(fmt, "I think the answer is 4.") == ([], None, [])
        assert parse(fmt, '{"answer": 4}')[2] in (
            [],
            ['malformed tool call: a tool call is a JSON object with a string "name"'],
        )


def test_fenced_fallback_in_every_format():
    for fmt in FORMATS:
        assert parse(fmt, "```python\nprint(1)```", fenced_code=True)[0] == [ToolCall("python", {"code": "print(1)"})]
        assert parse(fmt, "```python\nprint(1)```", fenced_code=False)[0] == []


# what each family's model writes for [A, B]
RENDERED = {
    "hermes": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "f", "arguments": {"x": 1, "y": [1, {"z": null}]}}\n</tool_call>',
    "llama3_json": '{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "f", "parameters": {"x": 1, "y": [1, {"z": null}]}}',
    "mistral": '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "f", "arguments": {"x": 1, "y": [1, {"z": null}]}}]',
    "harmony": '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
    '<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"x": 1, "y": [1, {"z": null}]}',
    "pythonic": '[get_weather(city="Paris"), f(x=1, y=[1, {"z": None}])]',
}


@pytest.mark.parametrize("fmt", sorted(RENDERED))
def test_render_calls(fmt):
    assert FORMATS[fmt].render_calls([A, B]) == RENDERED[fmt]
    assert parse(fmt, RENDERED[fmt]) == ([A, B], None, [])


def test_render_escapes_the_format_syntax_inside_arguments():
    call = ToolCall("python", {"code": "print('</tool_call><|call|>[TOOL_CALLS]</think><|python_end|>')"})
    for fmt in ("hermes", "llama3_json", "mistral", "harmony", "pythonic"):
        assert parse(fmt, FORMATS[fmt].render_calls([call])) == ([call], None, [])
    assert "\\u003c/tool_call>" in FORMATS["hermes"].render_calls([call])


def test_render_refuses_what_a_format_cannot_express():
    with pytest.raises(ValueError, match="cannot be written as a Python name"):
        FORMATS["pythonic"].render_calls([ToolCall("f", {"not an identifier": 1})])
    with pytest.raises(ValueError, match="cannot be a harmony recipient"):
        FORMATS["harmony"].render_calls([ToolCall("two words", {})])
    with pytest.raises(ValueError, match="the fenced format writes only python calls"):
        FORMATS["fenced"].render_calls([ToolCall("shell", {"command": "ls"})])
    assert FORMATS["fenced"].render_calls([ToolCall("python", {"code": "print(1)\n"})]) == "```python\nprint(1)\n```"


def test_render_reply_and_results():
    assert FORMATS["harmony"].render_reply("<answer>4</answer>") == "<|channel|>final<|message|><answer>4</answer>"
    assert parse("harmony", FORMATS["harmony"].render_reply("<answer>4</answer>")) == ([], "4", [])
    assert FORMATS["hermes"].render_reply("<answer>4</answer>") == "<answer>4</answer>"
    results = {name: fmt.render_result(A, "18C") for name, fmt in FORMATS.items()}
    assert results == {
        "hermes": {"role": "tool", "content": "18C"},
        "fenced": {"role": "tool", "content": "18C"},
        "llama3_json": {"role": "ipython", "name": "get_weather", "content": "18C"},
        "mistral": {"role": "tool", "name": "get_weather", "content": "18C"},
        "harmony": {"role": "tool", "name": "get_weather", "content": "18C"},
        "pythonic": {"role": "tool", "name": "get_weather", "content": "18C"},
    }
    assert all(FORMATS[name].is_result(message) for name, message in results.items())
    assert not FORMATS["llama3_json"].is_result({"role": "tool", "content": "18C"})


def test_registry():
    assert set(FORMATS) == {"hermes", "llama3_json", "mistral", "harmony", "pythonic", "fenced"}
    with pytest.raises(
        ValueError, match="unknown tool_format 'qwen'; known: fenced, harmony, hermes, llama3_json, mistral, pythonic"
    ):
        get_format("qwen")

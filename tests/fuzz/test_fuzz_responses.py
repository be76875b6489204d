"""Fuzzed capture proxy, ``/v1/responses``: random values of every real field (input items, output items
sent back, ``previous_response_id``, tools, options) get a 4xx with OpenAI's error body (or a 200), never a
5xx. One proxy over the tiny model for the whole module (``conftest.py``); the strategies it shares with the
chat fuzzing are ``proxy_fuzzing.py``'s."""

from __future__ import annotations

import json

from fuzz_helpers import SURROGATES, fuzz_settings, json_values
from hypothesis import example, given
from hypothesis import strategies as st
from proxy_fuzzing import (
    EDGE_FLOATS,
    EDGE_INTS,
    EPISODE,
    MODEL_NAMES,
    SEEDS,
    TOOL_CHOICES,
    arguments_text,
    check,
    draw_body,
    plain,
    post_json,
    texts,
)

from agent_rl.proxy.responses import ResponsesRequest


@st.composite
def input_items(draw, typed: bool):
    """``input``: a string, or items (messages, function calls, their outputs); ``typed``: each
    well-formed, else any type and any value anywhere (reasoning items, images, junk)."""
    if draw(st.integers(0, 4)) == 0:
        return draw(plain if typed else texts)
    kinds = ["message", "function_call", "function_call_output"] + (
        [] if typed else ["reasoning", "item_reference", "", None]
    )
    parts = st.lists(
        st.fixed_dictionaries(
            {
                "type": st.sampled_from(
                    ["input_text", "output_text"] if typed else ["input_text", "input_image", "refusal"]
                ),
                "text": plain if typed else texts,
            }
        ),
        max_size=2,
    )
    out = []
    for _ in range(draw(st.integers(1 if typed else 0, 4))):
        kind = draw(st.sampled_from(kinds))
        call_id = draw(st.sampled_from(["call_1", "call_2"]) | (plain if typed else texts))
        if kind == "message" or kind is None:
            item = {
                "role": draw(
                    st.sampled_from(["user", "system", "developer", "assistant"] + ([] if typed else ["tool", ""]))
                ),
                "content": draw((plain if typed else texts) | parts),
            }
            if kind is not None:
                item["type"] = kind
        elif kind == "function_call":
            args = st.builds(json.dumps, st.fixed_dictionaries({"code": plain})) if typed else arguments_text
            item = {
                "type": kind,
                "call_id": call_id,
                "name": draw(st.sampled_from(["python", "", "nope"]) | texts),
                "arguments": draw(args),
            }
        elif kind == "function_call_output":
            item = {"type": kind, "call_id": call_id, "output": draw((plain if typed else texts) | parts)}
        else:
            item = {"type": kind, "id": draw(plain)}
        if not typed and draw(st.integers(0, 5)) == 0:
            item = draw(json_values)
        out.append(item)
    if typed and out and (out[-1].get("role") == "assistant" or out[-1].get("type") == "function_call"):
        out.append({"role": "user", "content": draw(plain)})
    return out


def response_tools(typed: bool):
    spec = st.fixed_dictionaries(
        {
            "type": st.just("function") if typed else st.sampled_from(["function", "web_search", "custom"]),
            "name": st.sampled_from(["python", "", "a b"]) | (plain if typed else texts),
            "parameters": st.none()
            | st.just({"type": "object", "properties": {"code": {"type": "string"}}})
            | json_values,
            "strict": st.booleans(),
        }
    )
    return st.lists(spec if typed else spec | json_values, max_size=2)


RESPONSE_VALUES = {
    "model": MODEL_NAMES,
    "instructions": st.none() | plain | SURROGATES,
    "previous_response_id": st.none() | st.sampled_from(["resp_nope", ""]) | texts,
    "tool_choice": TOOL_CHOICES,
    "temperature": EDGE_FLOATS,
    "top_p": EDGE_FLOATS,
    "max_output_tokens": st.integers(-1, 4) | EDGE_INTS,
    "stream": st.booleans(),
    "include": st.lists(
        st.sampled_from(["message.output_text.logprobs", "reasoning.encrypted_content", "nope"]), max_size=2
    ),
    "top_logprobs": st.integers(-1, 21) | EDGE_INTS,
    "seed": SEEDS,
    "text": st.sampled_from(
        [{"format": {"type": "text"}}, {"format": {"type": "json_object"}}, {"verbosity": "low"}, {"format": "text"}]
    ),
    "reasoning": st.sampled_from([{"effort": None}, {"effort": "none"}, {"effort": "high"}, {}]),
    "truncation": st.sampled_from(["auto", "disabled", "middle"]),
}


@st.composite
def response_bodies(draw) -> dict:
    """Every field of ``ResponsesRequest``, as ``chat_bodies`` draws those of a chat request."""
    typed = draw(st.booleans())
    values = {**RESPONSE_VALUES, "input": input_items(typed), "tools": response_tools(typed)}
    if typed:
        values.update(
            max_output_tokens=st.integers(1, 4) | EDGE_INTS.filter(lambda v: v > 0),
            temperature=st.floats(0, 2),
            model=st.sampled_from(["policy"] * 4 + ["nope"]),
            instructions=st.none() | plain,
            top_p=st.floats(0.01, 1),
            top_logprobs=st.integers(0, 20),
            previous_response_id=st.none(),
        )
    return draw_body(draw, ResponsesRequest, values, typed, ("model", "input"), ("text", "reasoning", "truncation"))


@fuzz_settings(60)
@given(body=response_bodies(), episode=st.booleans())
@example(body={"model": "policy", "input": [{"role": "user", "content": "\ud800"}]}, episode=False)
@example(
    body={
        "model": "policy",
        "input": "hi",
        "include": ["message.output_text.logprobs"],
        "top_logprobs": 20,
        "temperature": 0.0,
        "stream": True,
    },
    episode=True,
)
@example(
    body={"model": "policy", "input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]}, episode=False
)  # an output, no call
@example(
    body={
        "model": "policy",
        "input": [
            {"role": "user", "content": "x"},
            {"type": "function_call", "call_id": "c", "name": "python", "arguments": "[" * 5000},
            {"type": "function_call_output", "call_id": "c", "output": "1"},
        ],
    },
    episode=True,
)
@example(body={"model": "policy", "instructions": "", "input": []}, episode=False)
@example(body={"model": "policy", "input": "x" * 5000}, episode=True)  # past the context
@example(
    body={"model": "policy", "input": "", "tools": [{"type": "function", "name": "python", "parameters": None}]},
    episode=False,
)
def test_responses_fields(proxy, body, episode):
    check(post_json(proxy, f"/e/{EPISODE}/v1/responses" if episode else "/v1/responses", body))


@fuzz_settings(25)
@given(
    edit=st.sampled_from(["text", "call_id", "name", "arguments", "drop_calls", "drop_message", "none"]),
    value=texts | arguments_text,
    output=texts | json_values,
    call_id=st.none() | texts,
    chain=st.booleans(),
)
def test_sent_back_output_items(proxy, edit, value, output, call_id, chain):
    """A program sends back the proxy's own output items (or chains by ``previous_response_id``),
    edited or not, with any function output: spliced, a new segment, or a 4xx, never a 5xx."""
    path = f"/e/{EPISODE}/v1/responses"
    tool = {
        "type": "function",
        "name": "python",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}},
    }
    first = {"model": "policy", "instructions": "Use python.", "input": "What is 2 + 2?", "tools": [tool], "seed": 1}
    response = post_json(proxy, path, first)
    check(response)
    body = response.json()
    items = [dict(o) for o in body["output"]]
    calls = [o for o in items if o["type"] == "function_call"] or [
        {"type": "function_call", "call_id": "call_x", "name": "python", "arguments": "{}"}
    ]
    if edit == "text":
        for o in items:
            if o["type"] == "message":
                o["content"] = [{"type": "output_text", "text": value}]
    elif edit in ("call_id", "name", "arguments"):
        calls[0][edit] = value
    elif edit == "drop_calls":
        items = [o for o in items if o["type"] != "function_call"]
    elif edit == "drop_message":
        items = [o for o in items if o["type"] != "message"]
    answer = {
        "type": "function_call_output",
        "call_id": calls[0]["call_id"] if call_id is None else call_id,
        "output": output,
    }
    if chain:
        nxt = {**first, "previous_response_id": body["id"], "input": [answer]}
    else:
        nxt = {**first, "input": [{"role": "user", "content": "What is 2 + 2?"}, *items, answer]}
    check(post_json(proxy, path, nxt))

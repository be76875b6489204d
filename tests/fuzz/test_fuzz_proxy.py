"""Fuzzed capture proxy (``agent-rl proxy``, ``agent_rl/proxy``), every path and ``/v1/chat/completions``:
random JSON bodies, random bytes, random Authorization headers, and random values of every real field of a
chat request (messages, tool calls sent back, tools, sampling options) get a 4xx with OpenAI's error body
(or a 200), never a 5xx. ``/v1/responses``'s fields are ``test_fuzz_responses.py``'s. One proxy over the
tiny model (hf backend, 3 new tokens a call) on loopback for the whole module (``conftest.py``)."""

from __future__ import annotations

from fuzz_helpers import fuzz_settings, json_values
from hypothesis import example, given
from hypothesis import strategies as st
from proxy_fuzzing import (
    API_KEY,
    EDGE_FLOATS,
    EDGE_INTS,
    EPISODE,
    MODEL_NAMES,
    PATHS,
    POST_PATHS,
    SEEDS,
    TOOL_CHOICES,
    arguments_text,
    check,
    draw_body,
    plain,
    post_json,
    texts,
)

from agent_rl.proxy.protocol import ChatRequest


@fuzz_settings(40)
@given(path=st.sampled_from(PATHS), body=json_values)
def test_random_json_bodies(proxy, path, body):
    check(post_json(proxy, path, body))


@fuzz_settings(25)
@given(
    path=st.sampled_from(POST_PATHS),
    body=st.binary(max_size=64)
    | st.sampled_from([b"", b"{", b"\xff\xfe", b'{"model": "policy", "messages": [', b"[]"]),
    content_type=st.sampled_from(
        ["application/json", "application/octet-stream", "text/plain", "", "application/json; charset=utf-16"]
    ),
)
def test_random_bytes(proxy, path, body, content_type):
    check(proxy.post(path, content=body, headers={"content-type": content_type}))


def tool_calls(typed: bool):
    call = st.fixed_dictionaries(
        {
            "id": plain if typed else texts,
            "type": st.just("function") if typed else st.sampled_from(["function", "custom"]),
            "function": st.fixed_dictionaries(
                {"name": st.sampled_from(["python", "", "nope"]) | texts, "arguments": arguments_text}
            ),
        }
    )
    return st.lists(call if typed else call | json_values, max_size=2)


def content(typed: bool):
    parts = st.fixed_dictionaries(
        {
            "type": st.sampled_from(["text", "input_text"] if typed else ["text", "input_text", "image_url"]),
            "text": plain if typed else texts,
        }
    )
    return st.none() | (plain if typed else texts) | st.lists(parts if typed else parts | json_values, max_size=2)


@st.composite
def messages(draw, typed: bool) -> list:
    """A conversation; ``typed``: every message well-formed (so the request reaches the renderer and
    the policy), else any role and any value anywhere."""
    roles = ["system", "developer", "user", "assistant", "tool"] + ([] if typed else ["function", ""])
    out = []
    for _ in range(draw(st.integers(1 if typed else 0, 4))):
        m = {"role": draw(st.sampled_from(roles)), "content": draw(content(typed))}
        if draw(st.booleans()) and (not typed or m["role"] == "assistant"):
            m["tool_calls"] = draw(tool_calls(typed))
        if draw(st.booleans()):
            m["tool_call_id"] = draw(plain if typed else texts)
        if not typed and draw(st.integers(0, 5)) == 0:
            m = draw(json_values)
        out.append(m)
    if typed and out[-1]["role"] == "assistant":
        out.append({"role": "user", "content": draw(plain)})
    return out


def tools(typed: bool):
    spec = st.fixed_dictionaries(
        {
            "type": st.just("function") if typed else st.sampled_from(["function", "custom"]),
            "function": st.fixed_dictionaries(
                {
                    "name": st.sampled_from(["python", "", "a b"]) | texts,
                    "parameters": json_values | st.just({"type": "object", "properties": {"code": {"type": "string"}}}),
                }
            ),
        }
    )
    return st.lists(spec if typed else spec | json_values, max_size=2)


FIELD_VALUES = {
    "model": MODEL_NAMES,
    "tool_choice": TOOL_CHOICES,
    "n": st.integers(-1, 3) | EDGE_INTS,
    "temperature": EDGE_FLOATS,
    "top_p": EDGE_FLOATS,
    "max_tokens": st.integers(-1, 4) | EDGE_INTS,
    "max_completion_tokens": st.integers(-1, 4) | EDGE_INTS,
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "seed": SEEDS,
    "logprobs": st.booleans(),
    "top_logprobs": st.integers(-1, 21) | EDGE_INTS,
    "stop": st.none() | texts | st.lists(texts, max_size=2),
    "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}, {}]),
}


@st.composite
def chat_bodies(draw) -> dict:
    """Every real field, each a value of its type (edge values included) or, unless the body is
    ``typed`` (half of them), of a random type."""
    typed = draw(st.booleans())
    values = {**FIELD_VALUES, "messages": messages(typed), "tools": tools(typed)}
    if typed:  # the fields' valid ranges, so that most typed bodies are sampled
        values.update(
            n=st.integers(1, 3),
            max_tokens=st.integers(1, 4) | EDGE_INTS.filter(lambda v: v > 0),
            temperature=st.floats(0, 2),
            top_p=st.floats(0.01, 1),
            top_logprobs=st.integers(0, 20),
        )
    return draw_body(
        draw, ChatRequest, values, typed, ("model", "messages"), ("stop", "max_completion_tokens", "response_format")
    )


@fuzz_settings(80)
@given(body=chat_bodies(), episode=st.booleans())
@example(
    body={"model": "policy", "messages": [{"role": "user", "content": "\ud800"}]}, episode=False
)  # tokenizer TypeError: 500
@example(body={"model": "policy", "messages": [{"role": "user", "content": "hi"}], "seed": -(2**63)}, episode=True)
@example(
    body={"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10**12, "n": 16},
    episode=False,
)
@example(
    body={
        "model": "policy",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": 20,
        "stream": True,
        "stream_options": {"include_usage": True},
    },
    episode=True,
)
@example(
    body={
        "model": "policy",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": 20,
    },
    episode=False,
)  # -inf logprobs of unpickable tokens: JSON refused them, 500
@example(
    body={
        "model": "policy",
        "messages": [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "python", "arguments": "[" * 5000}}
                ],
            },
            {"role": "tool", "content": "1"},
        ],
    },
    episode=False,
)
@example(
    body={
        "model": "policy",
        "messages": [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "python", "arguments": '{"code": "\\ud800"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "\ud800", "content": "1"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "python",
                    "parameters": {"type": "object", "properties": {"code": {"type": "string"}}},
                },
            }
        ],
    },
    episode=True,
)
@example(
    body={"model": "policy", "messages": [{"role": "user", "content": "x" * 5000}]}, episode=False
)  # past the context
@example(
    body={
        "model": "policy",
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "f"}}],
    },
    episode=False,
)  # no parameters: the template read tool.function.parameters, 500
def test_chat_fields(proxy, body, episode):
    check(post_json(proxy, PATHS[1] if episode else PATHS[0], body))


@fuzz_settings(25)
@given(
    edit=st.sampled_from(["content", "id", "name", "arguments", "drop_calls", "none"]),
    value=texts | arguments_text,
    result=texts | json_values,
    tool_call_id=st.none() | texts,
)
def test_sent_back_replies(proxy, edit, value, result, tool_call_id):
    """A program sends back the proxy's own reply, edited or not, with any tool result: the call is
    spliced or starts a new segment (200), or is refused (4xx), never a 5xx."""
    path = f"/e/{EPISODE}/v1/chat/completions"
    tool = {
        "type": "function",
        "function": {"name": "python", "parameters": {"type": "object", "properties": {"code": {"type": "string"}}}},
    }
    first = {"model": "policy", "messages": [{"role": "user", "content": "What is 2 + 2?"}], "tools": [tool], "seed": 1}
    response = post_json(proxy, path, first)
    check(response)
    reply = response.json()["choices"][0]["message"]
    reply.setdefault(
        "tool_calls", [{"id": "call_x", "type": "function", "function": {"name": "python", "arguments": "{}"}}]
    )
    call = reply["tool_calls"][0]
    if edit == "content":
        reply["content"] = value
    elif edit in ("id", "name", "arguments"):
        target = call if edit == "id" else call["function"]
        target[edit] = value
    elif edit == "drop_calls":
        del reply["tool_calls"]
    tool_message = {
        "role": "tool",
        "content": result,
        "tool_call_id": call["id"] if tool_call_id is None else tool_call_id,
    }
    check(post_json(proxy, path, {**first, "messages": first["messages"] + [reply, tool_message]}))


@fuzz_settings(20)
@given(
    auth=st.none()
    | st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=30)
    | st.sampled_from(["Bearer", "Bearer ", f"Bearer {API_KEY} ", f"bearer {API_KEY}", f"Basic {API_KEY}", API_KEY]),
    path=st.sampled_from(PATHS[:6] + PATHS[9:10]),
)
def test_random_authorization(proxy, auth, path):
    """Any Authorization header: 401 (OpenAI's body) unless it is the key, never 5xx."""
    headers = {"content-type": "application/json"}
    if auth is not None:
        headers["authorization"] = auth.strip(" \t").encode("latin-1")
    method = "POST" if path.endswith(("completions", "responses")) else "GET"
    request = proxy.build_request(
        method,
        path,
        content=b'{"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}'
        if path.endswith("completions")
        else b'{"model": "policy", "input": "hi", "max_output_tokens": 1}',
        headers=headers,
    )
    if auth is None:
        del request.headers["authorization"]
    response = proxy.send(request)
    check(response)

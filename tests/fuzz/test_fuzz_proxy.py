"""Fuzzed capture proxy (``agent-rl proxy``, ``agent_rl/proxy``): random JSON bodies, random bytes,
and random values of every real field of ``/v1/chat/completions`` (messages, tool calls sent back,
tools, sampling options) and of ``/v1/responses`` (input items, output items sent back,
``previous_response_id``, tools, options) get a 4xx with OpenAI's error body (or a 200), never a 5xx. One proxy over
the tiny model (hf backend, 3 new tokens a call) on loopback for the whole module."""

from __future__ import annotations

import json
import math

import httpx
import pytest
from fuzz_helpers import MARKERS, SURROGATES, fuzz_settings, json_values
from hypothesis import example, given
from hypothesis import strategies as st

from agent_rl.proxy.protocol import ChatRequest
from agent_rl.proxy.responses import ResponsesRequest

API_KEY = "fuzz-key"
EPISODE = "fuzz-episode"


@pytest.fixture(scope="module")
def proxy(tiny_model_dir):
    """An httpx client of one proxy over the tiny model, with an open episode at /e/fuzz-episode/v1."""
    from agent_rl.proxy.app import create_app
    from agent_rl.proxy.serve import service_over
    from agent_rl.rollout.backends.server import build_state, serve_in_thread

    state = build_state(str(tiny_model_dir))
    service = service_over(state, max_new_tokens=3, max_total_tokens=512)
    service.open_session(EPISODE)
    headers = {"authorization": f"Bearer {API_KEY}"}
    with (
        serve_in_thread(create_app(service, state, api_key=API_KEY)) as url,
        httpx.Client(base_url=url.removesuffix("/v1"), timeout=120, headers=headers) as client,
    ):
        yield client


def check(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        last = response.text.rstrip("\n").rsplit("\n\n", 1)[-1]
        assert last == "data: [DONE]" or last.startswith(("event: response.completed", "event: response.incomplete")), (
            last
        )
        return
    body = response.json()  # every answer is JSON, errors included
    if response.status_code >= 400:
        assert isinstance(body, dict) and body["error"]["message"], body  # OpenAI's error body


def post_json(client, path: str, body) -> httpx.Response:
    return client.post(path, content=json.dumps(body, allow_nan=True), headers={"content-type": "application/json"})


PATHS = [
    "/v1/chat/completions",
    f"/e/{EPISODE}/v1/chat/completions",
    "/e/nope/v1/chat/completions",
    "/v1/models",
    f"/e/{EPISODE}/v1/models",
    "/v1/sessions",
    "/health",
    "/v1/responses",
    "/nope",
    f"/e/{EPISODE}/v1/responses",
    "/e/nope/v1/responses",
]
POST_PATHS = [*PATHS[:3], PATHS[7], *PATHS[9:]]


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


# the text a message carries: the tool-call formats' own markers, lone surrogates, arbitrary unicode
plain = st.text(max_size=12) | st.sampled_from([m for m in MARKERS if m != "\ud800"])
texts = plain | SURROGATES
EDGE_INTS = st.sampled_from([0, 1, -1, 16, 17, 512, 2**31, 2**63 - 1, 2**63, 2**64, 2**70, -(2**63) - 1, 10**12])
EDGE_FLOATS = st.sampled_from([0.0, -0.0, 1e-300, 0.5, 1.0, 2.0, 2.5, 1e308, math.inf, -math.inf, math.nan])
arguments_text = (
    st.builds(json.dumps, st.dictionaries(st.sampled_from(["code", "x", ""]), json_values, max_size=2))
    | st.builds(lambda v: json.dumps(v, allow_nan=True), json_values)
    | texts
    | st.just("[" * 5000)
)


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
    "model": st.sampled_from(["policy", "policy", "nope", ""]),
    "tool_choice": st.sampled_from(["auto", "none", "required", {"type": "function", "function": {"name": "python"}}]),
    "n": st.integers(-1, 3) | EDGE_INTS,
    "temperature": EDGE_FLOATS,
    "top_p": EDGE_FLOATS,
    "max_tokens": st.integers(-1, 4) | EDGE_INTS,
    "max_completion_tokens": st.integers(-1, 4) | EDGE_INTS,
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "seed": st.none() | st.integers(-5, 5) | EDGE_INTS,
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


def draw_body(draw, request, values: dict, typed: bool, always: tuple[str, ...], untyped_only: tuple[str, ...]) -> dict:
    """A body of ``request``'s fields: ``always`` present, each other one in three; a ``typed`` body
    draws from ``values`` only and leaves out ``untyped_only``, else any value may be of any type
    and an unknown field may be added."""
    body = {}
    for name in request.model_fields:
        if name not in always and draw(st.integers(0, 2)) != 0:
            continue
        if typed and (name not in values or name in untyped_only):
            continue
        field = values.get(name, st.booleans() | st.none() | st.text(max_size=5))
        body[name] = draw(field | json_values) if not typed and draw(st.integers(0, 7)) == 0 else draw(field)
    if not typed and draw(st.integers(0, 9)) == 0:
        body[draw(st.text(max_size=6))] = draw(json_values)
    return body


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


# ---- /v1/responses


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
    "model": FIELD_VALUES["model"],
    "instructions": st.none() | plain | SURROGATES,
    "previous_response_id": st.none() | st.sampled_from(["resp_nope", ""]) | texts,
    "tool_choice": FIELD_VALUES["tool_choice"],
    "temperature": EDGE_FLOATS,
    "top_p": EDGE_FLOATS,
    "max_output_tokens": st.integers(-1, 4) | EDGE_INTS,
    "stream": st.booleans(),
    "include": st.lists(
        st.sampled_from(["message.output_text.logprobs", "reasoning.encrypted_content", "nope"]), max_size=2
    ),
    "top_logprobs": st.integers(-1, 21) | EDGE_INTS,
    "seed": FIELD_VALUES["seed"],
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

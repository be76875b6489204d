"""What the capture proxy's fuzz tests share (``test_fuzz_proxy.py``: chat completions and every path;
``test_fuzz_responses.py``: ``/v1/responses``): the proxy's key and open episode, the check that an
answer is a 4xx with OpenAI's error body or a 200 (never a 5xx), the paths, the text and edge-value
strategies, and ``draw_body``, which draws a request body field by field. The proxy itself is
``conftest.py``'s ``proxy`` fixture."""

from __future__ import annotations

import json
import math

import httpx
from fuzz_helpers import MARKERS, SURROGATES, json_values
from hypothesis import strategies as st

API_KEY = "fuzz-key"
EPISODE = "fuzz-episode"


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

MODEL_NAMES = st.sampled_from(["policy", "policy", "nope", ""])
TOOL_CHOICES = st.sampled_from(["auto", "none", "required", {"type": "function", "function": {"name": "python"}}])
SEEDS = st.none() | st.integers(-5, 5) | EDGE_INTS


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

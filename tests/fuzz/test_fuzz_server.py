"""Fuzzed ``agent-rl serve``: random JSON bodies, and random values of every real field of
``/v1/completions`` and ``/v1/update_weights``, get a 4xx with a JSON error body (or a 200),
never a 5xx. One server on loopback (the tiny model) for the whole module."""

from __future__ import annotations

import json
import math

import httpx
import pytest
import torch
from fuzz_helpers import fuzz_settings, json_values
from hypothesis import example, given
from hypothesis import strategies as st

from agent_rl.proxy.completions import CompletionRequest

API_KEY = "fuzz-key"


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    """(client, files): an httpx client of one served tiny model, and paths for update_weights."""
    from safetensors.torch import save_file

    from agent_rl.proxy.serve import server_app
    from agent_rl.rollout.backends.server import (
        build_state,
        serve_in_thread,
    )

    files = tmp_path_factory.mktemp("weights")
    (files / "garbage.safetensors").write_bytes(b"not safetensors")
    torch.save(torch.zeros(3), files / "tensor.pt")  # a tensor, not a state dict
    torch.save({"model.embed_tokens.weight": torch.zeros(2, 2)}, files / "wrong_shape.pt")
    save_file({"nope": torch.zeros(1)}, str(files / "unknown_name.safetensors"))
    (files / "empty_dir").mkdir()
    (files / "pickle.pt").write_bytes(b"\x80\x02K\x01.")  # pickle of the int 1
    state = build_state(str(tiny_model_dir), served_name="tiny")
    headers = {"authorization": f"Bearer {API_KEY}"}
    with (
        serve_in_thread(server_app(state, api_key=API_KEY)) as url,
        httpx.Client(base_url=url, timeout=120, headers=headers) as client,
    ):
        yield client, files


def check(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.headers.get("content-type", "").startswith("text/event-stream"):  # stream: true
        assert response.text.endswith("data: [DONE]\n\n"), response.text[-200:]
        return
    body = response.json()  # every answer is JSON, errors included
    if response.status_code >= 400:
        assert isinstance(body, dict) and body["error"]["message"], body  # OpenAI's error body


def post_json(client, path: str, body, **kw) -> httpx.Response:
    return client.post(
        path, content=json.dumps(body, allow_nan=True), headers={"content-type": "application/json"}, **kw
    )


@fuzz_settings(40)
@given(
    path=st.sampled_from(["/completions", "/update_weights", "/models", "/health", "/policy_version", "/nope"]),
    body=json_values,
)
def test_random_json_bodies(server, path, body):
    client, _ = server
    check(post_json(client, path, body))


@fuzz_settings(25)
@given(
    path=st.sampled_from(["/completions", "/update_weights", "/update_weights?version=3", "/update_weights?version=x"]),
    body=st.binary(max_size=64)
    | st.sampled_from([b"", b"{", b"\xff\xfe", b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "]),
    content_type=st.sampled_from(
        ["application/json", "application/octet-stream", "text/plain", "", "application/json; charset=utf-16"]
    ),
)
@example(path="/update_weights?version=1", body=b"garbage", content_type="application/octet-stream")  # SafetensorError
def test_random_bytes(server, path, body, content_type):
    client, _ = server
    check(client.post(path, content=body, headers={"content-type": content_type}))


# int64 and past it, the vocab (451) and the context (2048) edges, NaN and infinities
EDGE_INTS = st.sampled_from(
    [0, 1, -1, 450, 451, 2048, 2049, 2**31, 2**63 - 1, 2**63, 2**64, 2**70, -(2**63) - 1, 10**12]
)
EDGE_FLOATS = st.sampled_from([0.0, -0.0, 1e-300, 0.5, 1.0, 1.5, 1e308, math.inf, -math.inf, math.nan])
small_prompt = st.lists(st.integers(0, 450), min_size=1, max_size=6)
FIELD_VALUES = {
    "prompt": small_prompt | st.lists(small_prompt, max_size=3) | st.lists(EDGE_INTS, max_size=3) | st.just([[]]),
    "max_tokens": st.integers(-2, 4) | EDGE_INTS,
    "temperature": EDGE_FLOATS,
    "top_p": EDGE_FLOATS,
    "n": st.integers(-1, 3),
    "seed": st.none() | st.integers(-5, 5) | EDGE_INTS,
    "stop_token_ids": st.lists(st.integers(-3, 460) | EDGE_INTS, max_size=3),
    "logprobs": st.none() | st.integers(-1, 5) | EDGE_INTS,
}


@st.composite
def completion_bodies(draw) -> dict:
    """Every real field, each a value of its type (edge values included) or of a random type."""
    body = {}
    for name in CompletionRequest.model_fields:
        if draw(st.integers(0, 3)) == 0:
            continue
        typed = FIELD_VALUES.get(name, st.booleans() | st.none() | st.text(max_size=5))
        body[name] = draw(typed | json_values) if draw(st.integers(0, 5)) == 0 else draw(typed)
    if draw(st.integers(0, 9)) == 0:
        body[draw(st.text(max_size=6))] = draw(json_values)
    if "max_tokens" not in body or (isinstance(body["max_tokens"], int) and 4 < body["max_tokens"] <= 2048):
        body["max_tokens"] = 2  # a valid request stays fast: the fuzz is for what gets refused
    return body


@fuzz_settings(60)
@given(body=completion_bodies())
@example(body={"prompt": [1, 2], "max_tokens": 2, "seed": 2**70})  # torch's manual_seed overflowed: 500
@example(body={"prompt": [1, 2], "max_tokens": 2, "logprobs": 100_000})  # topk > vocab: 500
@example(body={"prompt": [1, 2], "max_tokens": 10**12})  # a 4 TB allocation: 500
@example(body={"prompt": [1, 2], "max_tokens": 2, "stop_token_ids": [2**70]})  # int64 overflow: 500
@example(body={"prompt": [1] * 2048, "max_tokens": 2})  # past the model's context
def test_completion_fields(server, body):
    client, _ = server
    check(post_json(client, "/completions", body))


@fuzz_settings(40)
@given(
    path=st.sampled_from(
        [
            "missing",
            "/etc/passwd",
            "/",
            "garbage.safetensors",
            "tensor.pt",
            "wrong_shape.pt",
            "unknown_name.safetensors",
            "empty_dir",
            "pickle.pt",
            "",
        ]
    )
    | st.text(max_size=8)
    | json_values,
    version=st.integers(-2, 2) | EDGE_INTS | EDGE_FLOATS | json_values,
    drop=st.sampled_from([None, "path", "version"]),
)
@example(path="missing", version=None, drop=None)  # int(None): 500
@example(path="missing", version=math.inf, drop=None)  # int(inf): 500
@example(path="/etc/passwd", version=1, drop=None)  # torch.load of a text file: 500
@example(path="tensor.pt", version=1, drop=None)  # not a state dict: 500
def test_update_weights_json(server, path, version, drop):
    client, files = server
    if isinstance(path, str) and path and (files / path).exists():
        path = str(files / path)
    body = {"path": path, "version": version}
    if drop:
        del body[drop]
    check(post_json(client, "/update_weights", body))


@pytest.mark.parametrize("body", [5, "x", None, ["path", "version"], [1]])
def test_update_weights_non_object_json(server, body):
    client, _ = server
    response = post_json(client, "/update_weights", body)
    check(response)
    assert response.status_code == 400


def test_bad_request_leaves_batch_mates_alone(server):
    """A request the model cannot run is refused before it joins a batch: a concurrent valid
    request is answered (it used to share the 500 of the bad one)."""
    import asyncio

    client, _ = server

    async def both():
        async with httpx.AsyncClient(base_url=str(client.base_url), timeout=120) as ac:
            good = {"prompt": [1, 2], "max_tokens": 2, "seed": 1}
            bad = {"prompt": [1, 2], "max_tokens": 2, "seed": 2**70}
            ac.headers["authorization"] = f"Bearer {API_KEY}"
            return await asyncio.gather(*(post_json(ac, "/completions", b) for b in (good, bad, good)))

    ok, refused, ok2 = asyncio.run(both())
    assert ok.status_code == ok2.status_code == 200 and refused.status_code == 400


@fuzz_settings(30)
@given(
    path=st.sampled_from(["/models", "/policy_version", "/completions", "/update_weights?version=1"]),
    auth=st.none()
    | st.text(
        st.characters(min_codepoint=32, max_codepoint=255, exclude_characters="\x7f"), max_size=30
    )  # HTTP field values: no DEL
    | st.sampled_from(
        [
            "Bearer",
            "Bearer ",
            f"Bearer {API_KEY} ",
            f"bearer {API_KEY}",
            f"Basic {API_KEY}",
            f"Bearer {API_KEY}\u00e9",
            f"Bearer  {API_KEY}",
            API_KEY,
        ]
    ),
)
def test_random_authorization(server, path, auth):
    """Any Authorization header: the key's routes answer 401 (JSON) unless it is the key, never 5xx."""
    client, _ = server
    headers = {"content-type": "application/json"}
    if auth is not None:  # raw latin-1 bytes; HTTP forbids leading and trailing whitespace
        headers["authorization"] = auth.strip(" \t").encode("latin-1")
    request = client.build_request(
        "POST" if "s?" in path or path == "/completions" else "GET",
        path,
        content=b'{"prompt": [1], "max_tokens": 1}',
        headers=headers,
    )
    if auth is None:
        del request.headers["authorization"]
    response = client.send(request)
    check(response)
    if response.status_code != 401:  # only "Bearer <the key>" (any case, any spaces) gets through
        scheme, _, key = auth.strip().partition(" ")
        assert scheme.lower() == "bearer" and key.strip() == API_KEY, auth

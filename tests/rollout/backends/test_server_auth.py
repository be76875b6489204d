"""``agent-rl serve``'s API key: real servers on loopback, httpx and the ``openai`` backend as clients."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import torch

from agent_rl.cli import main as cli_main
from agent_rl.config import load_config
from agent_rl.proxy.serve import server_app
from agent_rl.rollout.backends import BACKENDS, GenerationRequest, GenerationResult
from agent_rl.rollout.backends.openai_http import (
    OpenAIBackend,
    check_push_auth,
    is_loopback,
    serialize_state_dict,
)
from agent_rl.rollout.backends.server import build_state, serve_in_thread
from agent_rl.train.trainer import Trainer

KEY = "s3cret-key"


@pytest.fixture(scope="module")
def keyed(tiny_model_dir):
    """(base URL, ServerState) of a server that requires ``KEY``."""
    state = build_state(str(tiny_model_dir), served_name="tiny")
    with serve_in_thread(server_app(state, api_key=KEY)) as url:
        yield url, state


def client(url: str, env_var: str | None) -> OpenAIBackend:
    return OpenAIBackend(BACKENDS.parse_config({"name": "openai", "base_url": url, "api_key_env": env_var}), "tiny")


def test_update_without_or_with_a_wrong_key_is_401_and_changes_nothing(keyed):
    url, state = keyed
    before = {k: v.clone() for k, v in state.backend.model.state_dict().items()}
    name = next(iter(before))
    payload = serialize_state_dict({name: before[name] + 1.0})  # a valid update, were it authorized
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"}):
        r = httpx.post(
            f"{url}/update_weights",
            params={"version": 5},
            content=payload,
            headers={**headers, "Content-Type": "application/octet-stream"},
        )
        assert r.status_code == 401, r.text
        error = r.json()["error"]  # OpenAI's error body
        assert error["type"] == "authentication_error" and "API key" in error["message"]
        assert r.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{url}/completions").status_code in (401, 405)
    assert httpx.post(f"{url}/completions", json={"prompt": [1, 2]}).status_code == 401
    assert httpx.get(f"{url}/policy_version").status_code == 401
    assert httpx.get(url.removesuffix("/v1") + "/health").status_code == 200  # liveness stays open
    assert state.backend.policy_version == 0 and torch.equal(state.backend.model.state_dict()[name], before[name])
    ok = httpx.get(f"{url}/policy_version", headers={"Authorization": f"Bearer {KEY}"})
    assert ok.status_code == 200 and ok.json()["policy_version"] == 0


def test_the_openai_backend_sends_the_key_from_its_env_var(keyed, monkeypatch):
    url, state = keyed
    request = GenerationRequest(prompt_ids=[1, 2, 3], max_new_tokens=2, temperature=0.0)
    monkeypatch.setenv("TEST_SERVE_KEY", "wrong")
    [denied] = asyncio.run(client(url, "TEST_SERVE_KEY").generate([request]))
    assert isinstance(denied, ValueError) and "HTTP 401" in str(denied)
    with pytest.raises(ValueError, match="HTTP 401"):
        client(url, "TEST_SERVE_KEY").update_weights({}, version=3)
    assert state.backend.policy_version == 0

    monkeypatch.setenv("TEST_SERVE_KEY", KEY)
    keyed_client = client(url, "TEST_SERVE_KEY")
    [out] = asyncio.run(keyed_client.generate([request]))
    assert isinstance(out, GenerationResult) and out.token_ids
    original = {k: v.clone() for k, v in state.backend.model.state_dict().items()}
    try:
        keyed_client.update_weights(original, version=3)  # an authorized push goes through
        assert keyed_client.server_policy_version() == 3
    finally:
        state.backend.update_weights(original, 0)


def test_is_loopback():
    assert all(map(is_loopback, ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"]))
    assert not any(map(is_loopback, ["0.0.0.0", "10.0.0.5", "::", "node-3", "example.com"]))


def test_serve_refuses_a_non_loopback_host_without_a_key(tiny_model_dir, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert cli_main(["serve", "--model", str(tiny_model_dir), "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--host 0.0.0.0 is not a loopback address" in err and "--api-key" in err


@pytest.mark.parametrize(
    "url", ["http://10.0.0.5:8000/v1", "http://inference-node:8000/v1", "http://[2001:db8::1]:8000/v1"]
)
def test_trainer_refuses_to_push_weights_off_this_machine_without_a_token(url, monkeypatch):
    monkeypatch.delenv("TEST_PUSH_KEY", raising=False)
    overrides = [
        "rollout.backend.name=openai",
        f"rollout.backend.base_url={url}",
        "rollout.backend.api_key_env=TEST_PUSH_KEY",
    ]
    cfg = load_config(None, overrides)
    with pytest.raises(ValueError, match=r"set TEST_PUSH_KEY to the server's --api-key") as info:
        Trainer(cfg)  # before any model loads
    assert "\n" not in str(info.value)
    monkeypatch.setenv("TEST_PUSH_KEY", KEY)
    check_push_auth(cfg.rollout.backend)  # with the token: allowed
    # a server on this machine, or one whose weights are never pushed, needs none
    monkeypatch.delenv("TEST_PUSH_KEY")
    check_push_auth(load_config(None, ["rollout.backend.name=openai"]).rollout.backend)
    check_push_auth(load_config(None, [*overrides, "rollout.backend.weight_sync=none"]).rollout.backend)

"""The fuzz tests' fixtures: one capture proxy over the tiny model for each module that fuzzes it."""

from __future__ import annotations

import httpx
import pytest
from proxy_fuzzing import API_KEY, EPISODE


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

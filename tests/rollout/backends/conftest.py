"""A real ``agent-rl serve`` app over the tiny model, on a free loopback port, for the backend tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def served(tiny_model_dir):
    """(base URL, ServerState) of a server running in a background thread."""
    from agent_rl.proxy.serve import server_app
    from agent_rl.rollout.backends.server import (
        build_state,
        serve_in_thread,
    )

    state = build_state(str(tiny_model_dir), served_name="tiny")
    with serve_in_thread(server_app(state)) as url:
        yield url, state

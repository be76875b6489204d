"""A served policy survives its server: pushed weights are pushed again when the server lost them.

Found by the chaos run (tests/distributed/test_chaos.py): a push that met the server down raised
out of the trainer's weight sync and ended the run; and a restarted ``agent-rl serve`` samples
with the weights it was started with (policy version 0) until the next push, so every group
sampled there was stale, re-queued, and sampled stale again, while the trainer waited for it.
"""

from __future__ import annotations

import asyncio
import copy
import threading

import torch

from agent_rl.models.loading import load_model
from agent_rl.proxy.serve import server_app
from agent_rl.rollout.backends.hf import HfBackend
from agent_rl.rollout.backends.openai_http import OpenAIBackend, ServerUnavailableError
from agent_rl.rollout.backends.server import bind, uvicorn_server
from tests.rollout.backends.test_openai_backend import assert_same, backend, requests_for


def perturbed(tiny_model_dir) -> torch.nn.Module:
    learner = load_model(str(tiny_model_dir))
    torch.manual_seed(0)
    with torch.no_grad():
        for p in learner.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return learner


def test_a_restarted_server_gets_the_pushed_weights_before_it_samples(served, tiny_model_dir, tiny_tokenizer):
    url, state = served
    reqs = requests_for(tiny_tokenizer, temperature=0.0)
    original = copy.deepcopy(state.backend.model.state_dict())
    learner = perturbed(tiny_model_dir)
    client = OpenAIBackend(backend(url).cfg, "tiny", model=learner)
    try:
        client.update_weights(None, version=3)
        state.backend.update_weights(original, 0)  # what a restart leaves: the initial weights, version 0
        out = asyncio.run(client.generate(reqs))
        assert [r.policy_version for r in out] == [3] * len(reqs)
        assert client.server_policy_version() == 3
        assert_same(asyncio.run(HfBackend(learner, tiny_tokenizer.pad_token_id).generate(reqs)), out)
    finally:
        state.backend.update_weights(original, 0)


def test_a_push_to_a_server_that_is_down_goes_before_the_next_request(served, tiny_model_dir, tiny_tokenizer):
    _, state = served
    original = copy.deepcopy(state.backend.model.state_dict())
    sock = bind("127.0.0.1", 0)  # the port the server will come back on
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    learner = perturbed(tiny_model_dir)
    weights = {k: v.detach().clone() for k, v in learner.state_dict().items()}
    client = backend(url, max_retries=0)
    client.update_weights(weights, version=5)  # refused: no error, the weights are owed
    assert client.policy_version == 0
    reqs = requests_for(tiny_tokenizer, temperature=0.0)
    down = asyncio.run(client.generate(reqs))
    assert all(isinstance(r, ServerUnavailableError) for r in down)  # each request fails alone, as infra
    sock.listen()
    server = uvicorn_server(server_app(state))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive()
            threading.Event().wait(0.01)
        out = asyncio.run(client.generate(reqs))
        assert [r.policy_version for r in out] == [5] * len(reqs) and client.policy_version == 5
        assert_same(asyncio.run(HfBackend(learner, tiny_tokenizer.pad_token_id).generate(reqs)), out)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        state.backend.update_weights(original, 0)

"""The ``openai`` backend against real servers on loopback: ``agent-rl serve`` and plain ones."""

from __future__ import annotations

import asyncio
import copy

import httpx
import pytest
import torch

from agent_rl.config import ConfigError, load_config
from agent_rl.core.errors import InfraError
from agent_rl.models.loading import load_model
from agent_rl.rollout.backends import BACKENDS, GenerationRequest
from agent_rl.rollout.backends.hf import HfBackend
from agent_rl.rollout.backends.openai_http import OpenAIBackend, ServerUnavailableError
from agent_rl.rollout.backends.server import bind, serve_in_thread


def backend(url: str, **cfg) -> OpenAIBackend:
    return OpenAIBackend(BACKENDS.parse_config({"name": "openai", "base_url": url, **cfg}), "tiny")


def requests_for(tok, temperature: float, topk: int = 0, seeds=None) -> list[GenerationRequest]:
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    questions = ["What is 2+3?", "Compute 17*4 with the tool.", "hi", "What is 123-45?", "x", "Answer with 7."]
    out = []
    for i, q in enumerate(questions):
        ids = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        out.append(
            GenerationRequest(
                prompt_ids=tok.encode(ids, add_special_tokens=False),
                max_new_tokens=6 + 2 * i,
                temperature=temperature,
                stop_token_ids=[eos],
                topk=topk,
                seed=None if seeds is None else seeds[i],
            )
        )
    return out


def assert_same(ref, out, topk: int = 0):
    for r, o in zip(ref, out, strict=True):
        assert o.token_ids == r.token_ids
        assert o.finish_reason == r.finish_reason
        assert max((abs(a - b) for a, b in zip(r.logprobs, o.logprobs, strict=True)), default=0.0) < 1e-4
        if topk:
            assert o.topk_ids == r.topk_ids
            assert torch.allclose(torch.tensor(o.topk_logprobs), torch.tensor(r.topk_logprobs), atol=1e-4)


def test_greedy_matches_hf_backend(served, tiny_model_dir, tiny_tokenizer):
    url, state = served
    reqs = requests_for(tiny_tokenizer, temperature=0.0, topk=3)
    hf = HfBackend(load_model(str(tiny_model_dir)), tiny_tokenizer.pad_token_id)
    ref = asyncio.run(hf.generate(reqs))
    before = dict(state.metrics)
    out = asyncio.run(backend(url).generate(reqs))
    assert_same(ref, out, topk=3)
    assert sum(len(r.token_ids) for r in out) > 20  # real generations, not empty answers
    # the 6 concurrent HTTP requests were sampled in fewer hf calls than requests
    assert state.metrics["requests"] - before["requests"] == 6
    assert state.metrics["batches"] - before["batches"] < 6


def test_seeded_sampling_matches_hf_backend(served, tiny_model_dir, tiny_tokenizer):
    url, _ = served
    reqs = requests_for(tiny_tokenizer, temperature=1.0, seeds=[11, 12, 13, 14, 15, 16])
    hf = HfBackend(load_model(str(tiny_model_dir)), tiny_tokenizer.pad_token_id)
    ref = asyncio.run(hf.generate(reqs))
    out = asyncio.run(backend(url).generate(reqs))
    assert_same(ref, out)
    assert any(lp < 0 for r in out for lp in r.logprobs)  # sampled, not greedy


def test_weight_update_through_server_changes_samples(served, tiny_model_dir, tiny_tokenizer, tmp_path):
    url, state = served
    reqs = requests_for(tiny_tokenizer, temperature=0.0)
    client = backend(url)
    before = asyncio.run(client.generate(reqs))
    original = copy.deepcopy(state.backend.model.state_dict())
    learner = load_model(str(tiny_model_dir))
    torch.manual_seed(0)
    with torch.no_grad():
        for p in learner.parameters():
            p.add_(0.5 * torch.randn_like(p))
    try:
        colocated = OpenAIBackend(client.cfg, "tiny", model=learner)
        colocated.update_weights(None, version=7)  # the trainer's call: the learner's module is sent
        assert colocated.policy_version == 7
        assert client.server_policy_version() == 7
        after = asyncio.run(client.generate(reqs))
        assert client.policy_version == 7  # read from the completions
        assert [r.token_ids for r in after] != [r.token_ids for r in before]
        ref = asyncio.run(HfBackend(learner, tiny_tokenizer.pad_token_id).generate(reqs))
        assert_same(ref, after)
        # the same update from a file on disk (JSON body with a path)
        from safetensors.torch import save_file

        save_file({k: v.clone() for k, v in original.items()}, tmp_path / "w.safetensors")
        r = httpx.post(f"{url}/update_weights", json={"path": str(tmp_path / "w.safetensors"), "version": 8})
        assert r.status_code == 200, r.text
        assert client.server_policy_version() == 8
        assert [r.token_ids for r in asyncio.run(client.generate(reqs))] == [r.token_ids for r in before]
        bad = httpx.post(f"{url}/update_weights", json={"path": str(tmp_path / "missing.safetensors"), "version": 9})
        assert bad.status_code == 400 and "missing.safetensors" in bad.json()["error"]["message"]
        with pytest.raises(ValueError, match="unknown parameter names"):
            client.update_weights({"not.a.weight": torch.zeros(2)}, version=9)
    finally:
        state.backend.update_weights(original, 0)


def test_server_rejects_what_it_does_not_implement(served):
    url, _ = served
    r = httpx.post(f"{url}/completions", json={"prompt": [1, 2], "echo": True})
    assert r.status_code == 400 and "echo" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/completions", json={"prompt": [1, 2], "best_of": 3})
    assert r.status_code == 400 and "best_of" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/completions", json={"prompt": [1, 10**9]})
    assert r.status_code == 400 and "token ids must be in" in r.json()["error"]["message"]
    models = httpx.get(f"{url}/models").json()
    assert models["data"][0]["id"] == "tiny"
    assert httpx.get(url.removesuffix("/v1") + "/health").json() == {"status": "ok"}


def plain_app(fail_first: int = 0):
    """An OpenAI-style completions server that answers with text only (no token ids)."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI()
    app.state.calls = 0

    @app.post("/v1/completions")
    async def completions(body: dict):
        app.state.calls += 1
        if app.state.calls <= fail_first:
            return JSONResponse({"error": "busy"}, 503)
        logprobs = {
            "tokens": ["Hel", "lo"],
            "token_logprobs": [-0.5, -0.25],
            "top_logprobs": None,
            "text_offset": [0, 3],
        }
        choice = {"index": 0, "text": "Hello", "logprobs": logprobs, "finish_reason": "length"}
        return {"id": "x", "object": "text_completion", "model": body.get("model"), "choices": [choice]}

    return app


def test_plain_server_that_cannot_return_token_ids_gives_a_clear_error():
    with serve_in_thread(plain_app()) as url:
        client = backend(url)
        [out] = asyncio.run(client.generate([GenerationRequest(prompt_ids=[1, 2, 3], max_new_tokens=2)]))
        with pytest.raises(ValueError, match=r"cannot return token ids.*return_token_ids.*return_tokens_as_token_ids"):
            raise out  # a failed request is an exception in its slot (backends/base.py)
        with pytest.raises(NotImplementedError, match="no weight-update endpoint.*weight_sync=none"):
            client.update_weights({"w": torch.zeros(1)}, version=1)
        # asked at a run's start what it samples from: the same line, a ValueError (agent-rl prints it alone)
        with pytest.raises(ValueError, match="no weight-update endpoint.*weight_sync=none"):
            client.describe()
        fixed = backend(url, weight_sync="none")  # the server keeps its weights; only the version moves
        fixed.update_weights({"w": torch.zeros(1)}, version=4)
        assert fixed.policy_version == 4 and fixed.describe() is None


def test_retries_busy_server_then_succeeds_and_down_server_is_an_infra_error():
    app = plain_app(fail_first=2)
    with serve_in_thread(app) as url:
        client = backend(url, max_retries=2, backoff_s=0.01)
        [out] = asyncio.run(client.generate([GenerationRequest(prompt_ids=[1], max_new_tokens=2)]))
        with pytest.raises(ValueError, match="cannot return token ids"):  # reached the answer after 2 x 503
            raise out
        assert app.state.calls == 3
    sock = bind("127.0.0.1", 0)  # a port nobody listens on
    port = sock.getsockname()[1]
    sock.close()
    down = backend(f"http://127.0.0.1:{port}/v1", max_retries=2, backoff_s=0.01)
    [out] = asyncio.run(down.generate([GenerationRequest(prompt_ids=[1], max_new_tokens=2)]))
    with pytest.raises(ServerUnavailableError, match="after 3 attempts") as info:
        raise out
    assert isinstance(info.value, InfraError)


def test_config_errors_name_keys():
    cfg = load_config(None, ["rollout.backend.name=openai", "rollout.backend.base_url=http://h:1/v1"])
    assert cfg.rollout.backend.base_url == "http://h:1/v1" and cfg.rollout.backend.max_retries == 4
    with pytest.raises(ConfigError, match=r"'urlx'.*allowed keys: name, base_url, model, timeout_s"):
        load_config(None, ["rollout.backend.name=openai", "rollout.backend.urlx=1"])
    with pytest.raises(ConfigError, match=r"rollout\.backend.*max_retries"):
        load_config(None, ["rollout.backend.name=openai", "rollout.backend.max_retries=-1"])
    with pytest.raises(ConfigError, match=r"rollout\.backend.*logprobs_mode"):
        load_config(None, ["rollout.backend.name=vllm", "rollout.backend.logprobs_mode=raw"])
    with pytest.raises(ConfigError, match=r"'vlm'.*known: .*openai.*vllm"):
        load_config(None, ["rollout.backend.name=vlm"])


def test_mixed_sampling_parameters_in_one_server_batch(served, tiny_model_dir, tiny_tokenizer):
    url, _ = served
    reqs = requests_for(tiny_tokenizer, temperature=1.0, seeds=[21, 22, 23, 24, 25, 26])
    for r, (temperature, top_p) in zip(
        reqs, [(1.0, 1.0), (0.7, 0.9), (0.0, 1.0), (1.3, 0.5), (1.0, 0.8), (0.5, 1.0)], strict=True
    ):
        r.temperature, r.top_p = temperature, top_p
    hf = HfBackend(load_model(str(tiny_model_dir)), tiny_tokenizer.pad_token_id)
    ref = [asyncio.run(hf.generate([r]))[0] for r in reqs]  # each alone
    assert_same(ref, asyncio.run(backend(url).generate(reqs)))  # all together through the server

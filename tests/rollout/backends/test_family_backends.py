"""A checkpoint of every model family gives the same parsed calls from the same tokens in the ``hf``
backend, in the ``openai`` backend against ``agent-rl serve`` and in ``vllm`` (issue 19, item 5).

Each request's prompt ends with one or two calls in the family's format (harmony: closed by
``<|call|>``, a new message begun) and the family's stop ids go with it, so the text read back,
prompt calls + sampled continuation, holds a call whatever the tiny model samples. The continuation
must be the same ids through each backend (seeded sampling for hf and the server, which samples
with hf; greedy for vLLM, whose random stream is its own), and the format must read the same
calls, answer and errors from each."""

from __future__ import annotations

import asyncio

import pytest

from agent_rl.config import load_config
from agent_rl.models.families import FAMILIES
from agent_rl.models.loading import load_model, load_tokenizer
from agent_rl.proxy.serve import server_app
from agent_rl.rollout.backends import BACKENDS, GenerationRequest
from agent_rl.rollout.backends.hf import HfBackend
from agent_rl.rollout.backends.openai_http import OpenAIBackend
from agent_rl.rollout.backends.server import build_state, serve_in_thread
from agent_rl.rollout.render import ChatRenderer
from tools.base import ToolCall
from tools.formats import detect_format, get_format


def family_requests(model_dir, temperature: float):
    """(tokenizer, format, renderer, requests, [(prompt calls, their ids)]) of a family checkpoint."""
    tok = load_tokenizer(str(model_dir))
    fmt = get_format(detect_format(tok))
    renderer = ChatRenderer(tok)
    requests, prefixes = [], []
    for i in range(4):
        calls = [ToolCall("python", {"code": f"print({i}+3)"})] * (1 + i % 2)  # one call, or two in parallel
        text = fmt.render_calls(calls)
        if fmt.end_of_calls:  # harmony: the call message is closed, a new message follows
            text += fmt.end_of_calls + "<|start|>assistant"
        prefix = renderer.encode(text)
        prefixes.append((calls, prefix))
        prompt = renderer.prompt_ids([{"role": "user", "content": "What is 2+3?"}], None) + prefix
        requests.append(
            GenerationRequest(
                prompt_ids=prompt,
                max_new_tokens=12,
                temperature=temperature,
                stop_token_ids=renderer.stop_token_ids,
                seed=100 + i,
            )
        )
    return tok, fmt, renderer, requests, prefixes


def assert_same_parsed_calls(fmt, renderer, prefixes, reference, results):
    for (calls, prefix), a, b in zip(prefixes, reference, results, strict=True):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        read_a = fmt.parse(renderer.assistant_text(prefix + a.token_ids))
        read_b = fmt.parse(renderer.assistant_text(prefix + b.token_ids))
        assert (read_a.tool_calls, read_a.answer, read_a.errors) == (read_b.tool_calls, read_b.answer, read_b.errors)
        assert read_a.tool_calls[0] == calls[0]  # the prompt's call is read back


@pytest.mark.parametrize("family", list(FAMILIES))
def test_same_tokens_same_parsed_calls_in_hf_and_served(family_model_dir, family):
    model_dir = family_model_dir(family)
    tok, fmt, renderer, requests, prefixes = family_requests(model_dir, temperature=1.0)
    hf = asyncio.run(HfBackend(load_model(str(model_dir)), tok.pad_token_id).generate(requests))
    with serve_in_thread(server_app(build_state(str(model_dir), served_name=family))) as url:
        cfg = BACKENDS.parse_config({"name": "openai", "base_url": url})
        served = asyncio.run(OpenAIBackend(cfg, family).generate(requests))
    assert_same_parsed_calls(fmt, renderer, prefixes, hf, served)
    assert any(lp < 0 for r in served for lp in r.logprobs)  # sampled, not greedy


# vLLM: an engine per family (~35 s to start on 2 cores), but the tiny model's own family (init_tiny's
# default, qwen2.5): tests/rollout/backends/test_vllm_backend.py checks it on that module's engine
VLLM_OWN_ENGINE = [family for family in FAMILIES if family != "qwen2.5"]


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("family", VLLM_OWN_ENGINE)
def test_same_tokens_same_parsed_calls_in_hf_and_vllm(family_model_dir, family):
    model_dir = family_model_dir(family)
    tok, fmt, renderer, requests, prefixes = family_requests(model_dir, temperature=0.0)
    model = load_model(str(model_dir))
    hf = asyncio.run(HfBackend(model, tok.pad_token_id).generate(requests))
    cfg = load_config(
        None,
        [
            "rollout.backend.name=vllm",
            f"model.path={model_dir}",
            "rollout.backend.enforce_eager=true",
            "rollout.backend.kv_cache_gb=1",
            "rollout.backend.max_model_len=512",
        ],
    )
    vllm = BACKENDS(cfg.rollout.backend)(cfg.rollout.backend, cfg.model, model=model)
    try:
        assert_same_parsed_calls(fmt, renderer, prefixes, hf, asyncio.run(vllm.generate(requests)))
    finally:
        vllm.close()

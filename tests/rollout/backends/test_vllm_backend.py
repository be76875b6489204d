"""The in-process ``vllm`` backend: a clear error without vLLM; on a GPU, the hf backend's tokens."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest
import torch

from agent_rl.config import load_config
from agent_rl.rollout.backends import BACKENDS, GenerationRequest
from agent_rl.rollout.backends.hf import HfBackend, load_model


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_missing_vllm_is_a_clear_error(tiny_model_dir):
    cfg = load_config(None, ["rollout.backend.name=vllm", f"model.path={tiny_model_dir}"])
    with pytest.raises(ImportError, match=r"needs vLLM and a CUDA GPU: pip install -e '\.\[vllm\]'"):
        BACKENDS(cfg.rollout.backend)(cfg.rollout.backend, cfg.model)


@pytest.mark.gpu
def test_vllm_matches_hf_and_takes_weight_updates(tiny_model_dir, tiny_tokenizer):
    pytest.importorskip("vllm")
    cfg = load_config(None, ["rollout.backend.name=vllm", f"model.path={tiny_model_dir}", "rollout.backend.enforce_eager=true"])
    learner = load_model(str(tiny_model_dir), device="cuda")
    backend = BACKENDS(cfg.rollout.backend)(cfg.rollout.backend, cfg.model, model=learner)
    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompts = ["What is 2+3?", "hi", "Compute 17*4."]
    reqs = [
        GenerationRequest(
            prompt_ids=tiny_tokenizer.encode(
                tiny_tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False),
                add_special_tokens=False,
            ),
            max_new_tokens=12,
            temperature=1.0,
            stop_token_ids=[eos],
            seed=100 + i,
        )
        for i, q in enumerate(prompts)
    ]
    try:
        first = asyncio.run(backend.generate(reqs))
        again = asyncio.run(backend.generate(reqs))
        assert [r.token_ids for r in first] == [r.token_ids for r in again]  # per-request seeds
        assert all(len(r.logprobs) == len(r.token_ids) and all(lp <= 0 for lp in r.logprobs) for r in first)
        greedy = [GenerationRequest(**{**vars(r), "temperature": 0.0}) for r in reqs]
        ref = asyncio.run(HfBackend(learner, tiny_tokenizer.pad_token_id).generate(greedy))
        assert [r.token_ids for r in asyncio.run(backend.generate(greedy))] == [r.token_ids for r in ref]
        with torch.no_grad():
            for p in learner.parameters():
                p.add_(0.5 * torch.randn_like(p))
        backend.update_weights(None, version=3)
        assert backend.policy_version == 3
        after = asyncio.run(backend.generate(greedy))
        ref_after = asyncio.run(HfBackend(learner, tiny_tokenizer.pad_token_id).generate(greedy))
        assert [r.token_ids for r in after] == [r.token_ids for r in ref_after] != [r.token_ids for r in ref]
    finally:
        backend.close()

"""The hf backend's per-request seeds: a request samples the same tokens alone or in any batch."""

from __future__ import annotations

import asyncio

import torch

from agent_rl.models.loading import load_model
from agent_rl.rollout.backends.base import GenerationRequest
from agent_rl.rollout.backends.hf import HfBackend, sample_from_logits


def test_same_request_and_seed_same_tokens_in_any_batch(tiny_model_dir, tiny_tokenizer):
    backend = HfBackend(load_model(str(tiny_model_dir)), tiny_tokenizer.pad_token_id)
    enc = lambda s: tiny_tokenizer.encode(s, add_special_tokens=False)
    mine = GenerationRequest(prompt_ids=enc("What is 2+2?"), max_new_tokens=12, top_p=0.9, seed=7, ignore_eos=True)
    others = [
        GenerationRequest(prompt_ids=enc("the a of to and in is it you " * k), max_new_tokens=5 + k, seed=k)
        for k in (1, 3)
    ]
    [alone] = asyncio.run(backend.generate([mine]))
    in_batch = asyncio.run(backend.generate([others[0], mine, others[1]]))[1]
    backend.close()
    assert in_batch.token_ids == alone.token_ids and len(alone.token_ids) == 12
    assert max(abs(a - b) for a, b in zip(in_batch.logprobs, alone.logprobs, strict=True)) <= 1e-4
    [other_seed] = backend.generate_sync([GenerationRequest(**{**vars(mine), "seed": 8})])
    assert other_seed.token_ids != alone.token_ids


def test_sampling_follows_the_distribution_and_top_p():
    """Row 0: p = (0.5, 0.3, 0.2); row 1 the same with top_p 0.7, which keeps {0, 1} renormalized
    to (0.625, 0.375); row 2 greedy. Uniforms 0.45 / 0.7 / 0.9 pick by the cumulative sums."""
    logits_BV = torch.log(torch.tensor([[0.5, 0.3, 0.2]] * 3))
    temperature_B, top_p_B = torch.tensor([1.0, 1.0, 0.0]), torch.tensor([1.0, 0.7, 1.0])
    cases = {0.45: [0, 0, 0], 0.7: [1, 1, 0], 0.9: [2, 1, 0]}  # cdf row 0: .5 .8 1; row 1: .625 1 1
    for u, expected in cases.items():
        token_B, logprob_B, _ = sample_from_logits(logits_BV, temperature_B, top_p_B, torch.full((3,), u))
        assert token_B.tolist() == expected
    token_B, logprob_B, _ = sample_from_logits(logits_BV, temperature_B, top_p_B, torch.full((3,), 0.9))
    assert torch.allclose(logprob_B, torch.log(torch.tensor([0.2, 0.375, 1.0])))

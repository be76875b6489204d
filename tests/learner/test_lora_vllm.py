"""learner.lora on in-process vLLM (the CPU build here): each sync is a LoRA request, the base stays.

One engine (~30-40 s to start on an idle 2-core machine, minutes on a loaded one). Two adapter
versions in turn, without restarting or reloading the base: vLLM's greedy tokens equal the hf
backend's on the same PeftModel, and each result carries the record of the adapter that sampled it.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from agent_rl.config import LoraConfig, load_config
from agent_rl.models import lora
from agent_rl.models.loading import load_model
from agent_rl.rollout.backends import BACKENDS, GenerationRequest
from agent_rl.rollout.backends.hf import HfBackend

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def set_adapter(policy, seed: int) -> None:
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(seed + len(n))) * 0.3)


def test_vllm_serves_each_adapter_version_as_a_lora_request(tiny_model_dir):
    cfg = load_config(
        None,
        [
            "rollout.backend.name=vllm",
            f"model.path={tiny_model_dir}",
            "rollout.backend.enforce_eager=true",
            "rollout.backend.kv_cache_gb=1",
            "rollout.backend.max_model_len=256",
        ],
    )
    policy = lora.apply_lora(
        load_model(str(tiny_model_dir)), LoraConfig(rank=4, alpha=8.0, target_modules=["q_proj", "v_proj"])
    )
    requests = [
        GenerationRequest(prompt_ids=[i, 5, 9, 2], max_new_tokens=10, temperature=0.0, ignore_eos=True)
        for i in range(1, 7)
    ]
    base = [r.token_ids for r in HfBackend(load_model(str(tiny_model_dir)), 0).generate_sync(requests)]
    backend = BACKENDS(cfg.rollout.backend)(cfg.rollout.backend, cfg.model, model=policy)
    try:
        for version in (1, 2):
            set_adapter(policy, version)
            backend.update_weights(None, version)
            results = asyncio.run(backend.generate(requests, seed=0))
            want = [r.token_ids for r in HfBackend(policy, 0).generate_sync(requests)]
            assert [r.token_ids for r in results] == want and want != base
            record = {"name": "policy", "version": version, "sha256": lora.content_hash(lora.adapter_state(policy))}
            assert all(r.adapter == record and r.policy_version == version for r in results)
    finally:
        backend.close()

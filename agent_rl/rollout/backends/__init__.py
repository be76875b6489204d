"""Inference backends behind one interface (token ids in; token ids, logprobs, finish reason out).

``BACKENDS`` maps ``rollout.backend.name`` to a factory ``fn(cfg, model_cfg) -> InferenceBackend``.
Backend modules are imported lazily by their factories, so the config layer stays light.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from agent_rl.algorithms.registry import ComponentConfig, Registry
from agent_rl.rollout.backends.base import GenerationRequest, GenerationResult, InferenceBackend

BACKENDS = Registry("rollout_backend")


class HfBackendConfig(ComponentConfig):
    max_batch_size: int = Field(256, ge=1, description="requests generated together in one forward")


@BACKENDS.register("hf", config=HfBackendConfig)
def make_hf(cfg: HfBackendConfig, model_cfg: Any, model: Any = None, tokenizer: Any = None) -> InferenceBackend:
    """transformers, CPU or GPU: batched sampling with a KV cache, logprobs from the sampling step.

    Colocated with the learner when given its ``model``: the same module, no weight copy.
    """
    from agent_rl.rollout.backends.hf import HfBackend, load_tokenizer

    if model is None:
        return HfBackend.from_config(cfg, model_cfg)
    tokenizer = tokenizer or load_tokenizer(model_cfg.path)
    return HfBackend(model, tokenizer.pad_token_id, cfg.max_batch_size)


def make_backend(cfg: ComponentConfig, model_cfg: Any, model: Any = None, tokenizer: Any = None) -> InferenceBackend:
    return BACKENDS(cfg)(cfg, model_cfg, model=model, tokenizer=tokenizer)


__all__ = ["BACKENDS", "GenerationRequest", "GenerationResult", "InferenceBackend", "make_backend"]

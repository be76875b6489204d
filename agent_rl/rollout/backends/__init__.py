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
def make_hf(cfg: HfBackendConfig, model_cfg: Any) -> InferenceBackend:
    """transformers, CPU or GPU: batched sampling with a KV cache, logprobs from the sampling step."""
    from agent_rl.rollout.backends.hf import HfBackend

    return HfBackend.from_config(cfg, model_cfg)


def make_backend(cfg: ComponentConfig, model_cfg: Any) -> InferenceBackend:
    return BACKENDS(cfg)(cfg, model_cfg)


__all__ = ["BACKENDS", "GenerationRequest", "GenerationResult", "InferenceBackend", "make_backend"]

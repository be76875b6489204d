"""The interface every inference backend implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol


@dataclass
class GenerationRequest:
    prompt_ids: list[int]
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False  # generate exactly max_new_tokens (benchmarks)
    messages: list[dict] | None = None  # the conversation so far (read by scripted policies only)
    topk: int = 0  # also return the top-k candidates of each sampling distribution
    # per-request sampling seed: the same prompt, parameters and seed give the same tokens whatever
    # else is in the batch (the engine derives it from the episode's seed and the turn index)
    seed: int | None = None


@dataclass
class GenerationResult:
    token_ids: list[int]  # exactly the sampled ids, stop token included when one was sampled
    logprobs: list[float]  # log-prob of each sampled id under the distribution sampled from
    finish_reason: Literal["stop", "length"]
    topk_ids: list[list[int]] | None = None  # per sampled token, the k most likely ids
    topk_logprobs: list[list[float]] | None = None  # and their logprobs (same distribution)


class InferenceBackend(Protocol):
    policy_version: int

    async def generate(self, requests: list[GenerationRequest], seed: int | None = None) -> list[GenerationResult]:
        """Sample a continuation for every request; requests are batched together."""
        ...

    def update_weights(self, state_dict: dict, version: int) -> None:
        """Load new policy weights; later samples carry ``version``."""
        ...

    def close(self) -> None: ...

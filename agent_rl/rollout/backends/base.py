"""The interface every inference backend implements.

Failures, per request or per call: ``generate`` returns one entry per request, in order. An entry
is either that request's ``GenerationResult`` or the exception that failed that request alone (an
HTTP request of the ``openai`` backend that kept failing, a malformed answer); the scheduler hands
it to exactly that request's episode, which ends as ``infra_error``, and the batch's other requests
go on. Raising from ``generate`` fails every request of the call (one forward for the whole batch
failed, e.g. the hf backend's model).
"""

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
    tools: list[dict] | None = None  # the env's tool schemas (read by chat-level backends: openai_chat)
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
    # the policy version whose weights sampled these ids (every backend sets it from the weights it
    # sampled with, never from a later update: the engine records it in ``Turn.policy_version``)
    policy_version: int = 0
    # learner.lora: the adapter that sampled (name, version, sha256 of the tensors the backend held)
    adapter: dict | None = None

    def at_version(self, version: int) -> GenerationResult:
        """This result labelled with the policy version that sampled it."""
        self.policy_version = version
        return self


class InferenceBackend(Protocol):
    policy_version: int

    async def generate(
        self, requests: list[GenerationRequest], seed: int | None = None
    ) -> list[GenerationResult | BaseException]:
        """Sample a continuation for every request; requests are batched together.

        One entry per request: its result, or the exception that failed only that request; raise
        when the whole call failed (see the module docstring)."""
        ...

    def update_weights(self, state_dict: dict, version: int) -> None:
        """Load new policy weights; later samples carry ``version``."""
        ...

    def close(self) -> None: ...

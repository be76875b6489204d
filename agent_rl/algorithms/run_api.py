"""What a method that acts on the run may do: the ``RunAPI`` protocol.

Most objectives are pure tensor functions. Some act on the run itself: they play episodes again
with a scripted teacher or a fitted adapter, fork an episode at an exact prefix, have the policy
write text outside an episode, score rows with another model, or queue tasks for the next round.
Such a method's state defines ``bind(run: RunAPI, cfg)``; the trainer calls it once at start with
an object that implements this protocol (``agent_rl/train/run_services.py::RunServices``) and the entry's
own config. The method sees these operations and the read-only ``RunFacts``, never the trainer,
its config tree or its attributes, so ``agent_rl.algorithms`` stays below the rollout engine, the
learner and the env loader at run time as well as in its imports.

A method checks at ``bind`` whether the run suits it (``facts``) and raises ``ValueError`` in one
line when it does not; a state used without a run raises ``unbound(key)``'s error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import gymnasium as gym
import torch

from agent_rl.core.seeding import derive_seed
from agent_rl.core.types import EpisodeSpec, PassResult, Trajectory, TrajectoryGroup


@dataclass(frozen=True)
class RunFacts:
    """What a method may know about the run it is bound to."""

    seed: int  # trainer.seed: a method derives its own seeds from it (``RunFacts.derive``)
    model_path: str  # the policy's initial checkpoint
    device: str  # where the run's models live
    env_id: str
    local_policy: bool  # the policy's weights are in this process (one learner rank, no Ray learner group)
    lora: bool  # learner.lora: the policy trains adapters, not its weights
    refill_rounds: int  # trainer.refill_rounds: rounds in a step after the first rollout
    advantage: str  # the advantage estimator's or credit method's name
    teacher_context: bool  # the run builds a teacher that reads the env's teacher_context

    def derive(self, *keys: Any) -> int:
        """A seed of the run's own, derived from ``keys`` (never global)."""
        return derive_seed(self.seed, *keys)


@dataclass(frozen=True)
class AdapterSpec:
    """A LoRA adapter fitted on demonstrations (``RunAPI.fit_adapter``)."""

    name: str
    rank: int
    alpha: float
    target_modules: tuple[str, ...]
    steps: int  # AdamW NLL steps on the demonstrations (one batch, grad clip 1)
    lr: float


# who plays the episodes of ``RunAPI.play``: the run's policy (its own backend), the env's scripted SFT
# teacher, or a model of the method's own (an in-process sampler at the learner's version)
Player = Literal["policy", "teacher"] | torch.nn.Module


@runtime_checkable
class RunAPI(Protocol):
    """The operations a run-acting method may call. Implemented by ``RunServices``; a test can
    implement it with a few lines."""

    facts: RunFacts

    # -- episodes -------------------------------------------------------------------------------
    def play(self, specs: list[EpisodeSpec], seed: int, player: Player = "policy") -> list[Trajectory]:
        """``specs`` played to the end by ``player``; one trajectory each (errors included)."""
        ...

    async def fork(
        self, t: Trajectory, at_token: int, n: int, *, seed: int, group_id: str | None = None
    ) -> list[Trajectory]:
        """``n`` continuations of ``t`` from its exact first ``at_token`` ids (env replayed to that point)."""
        ...

    def enqueue(self, groups: list[list[EpisodeSpec]]) -> int:
        """Queue generated groups for the next rollout round; returns how many were queued."""
        ...

    def make_env(self) -> gym.Env:
        """A fresh env of the run (the caller closes it)."""
        ...

    # -- text -----------------------------------------------------------------------------------
    def text_pass(
        self,
        conversations: list[list[dict]],
        *,
        max_new_tokens: int,
        temperature: float,
        seed: int,
        topk: int = 0,
        tools: list[list[dict] | None] | None = None,
    ) -> list[PassResult]:
        """The policy's answer to each conversation, from the run's own inference backend; never
        trained on unless the method makes rows of it."""
        ...

    def transcript(self, t: Trajectory, special_tokens: bool = True) -> str:
        """The finished episode after its prompt, as text."""
        ...

    def decode(self, token_ids: list[int], special_tokens: bool = False) -> str:
        """The policy tokenizer's text of ``token_ids``."""
        ...

    def assistant_text(self, sampled_ids: list[int]) -> str:
        """An assistant turn's message text: its sampled ids without a final end-of-turn token."""
        ...

    def verdict_probability(self, first_topk: dict[int, float] | None, yes: list[str], no: list[str]) -> float:
        """P(yes) at a one-token verdict from its top-k logprobs (each word counted by its first token)."""
        ...

    # -- models ---------------------------------------------------------------------------------
    def policy_scores(self, groups: list[TrajectoryGroup]) -> tuple[torch.Tensor, torch.Tensor]:
        """The current policy's (logprobs_BT, entropy_BT) on the groups' rows, in ``make_batch`` layout."""
        ...

    def fit_adapter(
        self, demos: list[TrajectoryGroup], adapter: dict[str, torch.Tensor] | None, spec: AdapterSpec
    ) -> tuple[torch.nn.Module, list[float], dict[str, torch.Tensor]]:
        """A copy of the current policy with adapter ``spec`` (restored from ``adapter`` when given),
        fitted on ``demos``: the model, the loss of each step, the adapter's tensors."""
        ...

    def reward_model(self, path: str) -> Any:
        """A ``train-rm`` scorer of finished trajectories at ``path``: ``scorer.score(rows) -> sigmoid(r)``."""
        ...

    def text_model(self, path: str) -> Callable[..., list[PassResult]]:
        """Text passes of another checkpoint (a judge): ``fn(conversations, **text_pass keywords)``."""
        ...

    def chunk_teacher(self, path: str) -> Any:
        """A teacher that continues text: a local checkpoint, or an ``openai:URL`` completions server."""
        ...


def unbound(key: str) -> ValueError:
    """The error of a run-acting method's state used before ``bind``."""
    return ValueError(f"'{key}' acts on the run: its state needs bind(run, cfg) (the trainer calls it at start)")

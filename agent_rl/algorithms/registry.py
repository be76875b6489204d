"""Registries of objectives: one per kind, each with one signature (DESIGN §2).

A new objective is one function plus one registration line::

    @register_policy_loss("cispo", config=CispoConfig, needs={"entropy"})
    def cispo(x: LossInputs, cfg: CispoConfig) -> LossOutput: ...

| kind        | signature                                              | returns          |
|-------------|--------------------------------------------------------|------------------|
| advantage   | fn(x: AdvantageInputs, cfg) -> AdvantageOutput         | advantages_BT    |
| policy_loss | fn(x: LossInputs, cfg) -> LossOutput                   | loss_BT          |
| aggregation | fn(loss_BT, mask_BT, x: AggregationInputs, cfg)        | scalar Tensor    |
| kl          | fn(logprobs_BT, ref_logprobs_BT, cfg[, x: KlInputs])   | per-token KL     |
| filter      | fn(groups, state, cfg) -> FilterResult                 | kept groups      |
| credit      | fn(groups, x: AdvantageInputs, state, cfg)             | AdvantageOutput  |

Each entry has a pydantic config class (``extra="forbid"``) whose defaults are the paper's, a
``needs`` set naming the optional inputs it reads (the learner computes only those), and, when it
keeps state across steps, a ``state`` class with ``state_dict()`` / ``load_state_dict()`` that the
trainer creates once and checkpoints.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError
from torch import Tensor

from agent_rl.types import TrajectoryGroup

# Optional inputs an entry may declare in ``needs``; the learner/trainer knows how to make each.
KNOWN_NEEDS = frozenset(
    {
        "entropy",  # entropy_BT of the current policy
        "ref_logprobs",  # ref_logprobs_BT of a frozen reference model
        "values",  # values_BT from a critic
        "teacher_logprobs",  # teacher_logprobs_BT (self-distillation)
        "topk",  # sampler top-k candidates
        "greedy_rewards",  # reward of a greedy rollout per row (ReMax)
        "old_logprobs",  # learner logprobs before the update (always computed today)
        "rollout_logprobs",  # sampler logprobs (always present)
        "task_ids",  # stable prompt ids per row (per-prompt history)
        "rewards",  # rewards_B, the final reward of each row (group-contrastive losses, VAPO NLL)
        "group_index",  # group_index_B, the group of each row (group-contrastive losses)
    }
)


class ComponentConfig(BaseModel):
    """Base of every entry's config: ``name`` selects the entry, the other fields are its own."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    name: str = ""


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


# ----------------------------------------------------------------------------------------------
# Inputs and outputs of the registries.


@dataclass
class AdvantageInputs:
    """Everything an advantage estimator or credit method may read. Shapes per ``types.py``."""

    rewards_B: Tensor  # final reward of each row
    loss_mask_BT: Tensor  # 1 on policy-generated tokens
    group_index_B: Tensor  # integer group id of each row
    # optional, filled when an entry declares the matching need:
    values_BT: Tensor | None = None
    old_logprobs_BT: Tensor | None = None
    rollout_logprobs_BT: Tensor | None = None
    ref_logprobs_BT: Tensor | None = None
    entropy_BT: Tensor | None = None
    teacher_logprobs_BT: Tensor | None = None
    greedy_rewards_B: Tensor | None = None
    turn_index_BT: Tensor | None = None
    task_ids_B: list[str] | None = None
    step: int = 0  # trainer step, for schedules
    state: Any = None  # the entry's state object when it registered one
    # coef * per-token KL estimate when ``kl.placement`` is ``in_reward`` (PPO, REINFORCE++): the
    # estimators subtract it from the reward (token-level ones per token, outcome ones summed).
    kl_penalty_BT: Tensor | None = None


@dataclass
class AdvantageOutput:
    advantages_BT: Tensor
    returns_BT: Tensor | None = None
    # credit methods that drop tokens from the loss (copied prefixes of forked branches) return the
    # mask to train with; None keeps the batch's loss mask
    loss_mask_BT: Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class LossInputs:
    """Everything a policy loss may read. ``logprobs_BT`` carries the gradient."""

    logprobs_BT: Tensor  # current policy, requires grad
    old_logprobs_BT: Tensor  # learner logprobs before this step's first update (detached)
    advantages_BT: Tensor
    loss_mask_BT: Tensor
    rollout_logprobs_BT: Tensor | None = None  # sampler's logprobs
    entropy_BT: Tensor | None = None
    ref_logprobs_BT: Tensor | None = None
    values_BT: Tensor | None = None
    returns_BT: Tensor | None = None
    teacher_logprobs_BT: Tensor | None = None
    rewards_B: Tensor | None = None
    group_index_B: Tensor | None = None
    # need "topk": logprobs at the sampler's top-k candidate ids of each position (SIS, score centering)
    rollout_topk_logprobs_BTK: Tensor | None = None  # sampler's logprobs of its top-k candidates
    topk_logprobs_BTK: Tensor | None = None  # current policy at those ids, carries the gradient
    old_topk_logprobs_BTK: Tensor | None = None  # learner before this step's first update, detached
    topk_mask_BTK: Tensor | None = None  # 1 on real candidates, 0 on padding (None: all real)
    step: int = 0
    state: Any = None


@dataclass
class LossOutput:
    loss_BT: Tensor  # per token; sequence-level losses broadcast their term to the sequence's tokens
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class AggregationInputs:
    """Step-global denominators, so that micro-batching does not change the result."""

    num_tokens: float  # loss-masked tokens in the whole step (all micro-batches, all ranks)
    num_sequences: float  # rows in the whole step
    num_groups: float  # groups in the whole step
    group_index_B: Tensor | None = None  # group of each row of this micro-batch
    group_num_tokens_B: Tensor | None = None  # masked tokens of the row's whole group, step-global
    max_response_tokens: float | None = None  # constant normalizer (Dr. GRPO)


@dataclass
class KlInputs:
    """Optional extras of a KL estimator (``cokl`` reads them); plain estimators ignore them."""

    loss_mask_BT: Tensor | None = None
    rewards_B: Tensor | None = None
    group_index_B: Tensor | None = None


@dataclass
class FilterResult:
    groups: list[TrajectoryGroup]  # the groups kept for the update
    num_more: int = 0  # how many more groups the trainer should sample to refill the batch
    metrics: dict[str, float] = field(default_factory=dict)


def require(x: Any, field_name: str, entry: str) -> Any:
    """Return ``x.<field_name>`` or raise the ``ValueError`` an entry raises on a missing input."""
    value = getattr(x, field_name)
    if value is None:
        raise ValueError(f"'{entry}' needs {field_name}, which the caller did not provide")
    return value


# ----------------------------------------------------------------------------------------------
# The registry.


@dataclass
class Entry:
    kind: str
    name: str
    fn: Callable[..., Any]
    config: type[ComponentConfig]
    needs: frozenset[str]
    state: type | None  # class of the state object, for stateful entries
    # filters that steer which tasks are drawn: fn(state, task_ids, cfg) -> a weight per task
    sampler: Callable[..., list[float]] | None = None
    # entries that change how episodes are rolled out: fn(cfg) -> EngineConfig fields to set
    rollout: Callable[..., dict[str, Any]] | None = None
    # entries whose data needs a loss-side correction: fn(cfg) -> LossOptions fields to set
    loss_options: Callable[..., dict[str, Any]] | None = None

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.fn) or ""

    @property
    def summary(self) -> str:
        return self.doc.splitlines()[0] if self.doc else ""

    def make_state(self) -> Any:
        return self.state() if self.state is not None else None


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry] = {}

    def register(
        self,
        name: str,
        *,
        config: type[ComponentConfig] = ComponentConfig,
        needs: set[str] | frozenset[str] = frozenset(),
        state: type | None = None,
        sampler: Callable[..., list[float]] | None = None,
        rollout: Callable[..., dict[str, Any]] | None = None,
        loss_options: Callable[..., dict[str, Any]] | None = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        unknown = set(needs) - KNOWN_NEEDS
        if unknown:
            raise ValueError(f"{self.kind} '{name}': unknown needs {sorted(unknown)}; known: {sorted(KNOWN_NEEDS)}")
        if not issubclass(config, ComponentConfig):
            raise TypeError(f"{self.kind} '{name}': config must subclass ComponentConfig")

        def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
            if name in self._entries:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._entries[name] = Entry(self.kind, name, fn, config, frozenset(needs), state, sampler, rollout, loss_options)
            return fn

        return decorator

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def names(self) -> list[str]:
        return sorted(self._entries)

    def entries(self) -> list[Entry]:
        return [self._entries[n] for n in self.names()]

    def get(self, name: str) -> Entry:
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} '{name}'; known: {', '.join(self.names())}")
        return self._entries[name]

    def parse_config(self, raw: Any) -> ComponentConfig:
        """Validate ``{"name": ..., **params}`` into the entry's config class, with clear errors."""
        if isinstance(raw, ComponentConfig):
            return raw
        if isinstance(raw, str):
            raw = {"name": raw}
        if not isinstance(raw, dict) or "name" not in raw:
            raise ValueError(f"a {self.kind} is a mapping with a 'name'; known names: {', '.join(self.names())}")
        entry = self.get(str(raw["name"]))
        try:
            return entry.config.model_validate(raw)
        except ValidationError as e:
            allowed = ", ".join(entry.config.model_fields)
            problems = "; ".join(
                f"'{'.'.join(map(str, err['loc']))}': {err['msg']}" for err in e.errors()
            )
            raise ValueError(f"{self.kind} '{entry.name}': {problems} (allowed keys: {allowed})") from None

    def __call__(self, cfg: ComponentConfig) -> Callable[..., Any]:
        return self.get(cfg.name).fn


ADVANTAGES = Registry("advantage")
POLICY_LOSSES = Registry("policy_loss")
AGGREGATIONS = Registry("aggregation")
KLS = Registry("kl")
FILTERS = Registry("filter")
CREDITS = Registry("credit")

ALL_REGISTRIES = {r.kind: r for r in (ADVANTAGES, POLICY_LOSSES, AGGREGATIONS, KLS, FILTERS, CREDITS)}

register_advantage = ADVANTAGES.register
register_policy_loss = POLICY_LOSSES.register
register_aggregation = AGGREGATIONS.register
register_kl = KLS.register
register_filter = FILTERS.register
register_credit = CREDITS.register

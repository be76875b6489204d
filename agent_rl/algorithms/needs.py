"""What an objective can need from the run, and what the run does to provide each need.

An objective declares ``needs={"ref_logprobs", ...}`` at registration. Each name here says where
the value goes (a field of ``AdvantageInputs`` / ``LossInputs`` / ``TrainBatch``, or
``extras[name]``), what the run must build to make it (a reference model, a critic, a teacher,
greedy rollouts), what the rollout must record, and when it is computed:

- ``batch``: in the batch as the rollout recorded it (sampler logprobs and top-k, rewards, groups, task ids);
- ``before_update``: computed once per step before the update, for the advantage and the loss;
- ``in_update``: the learner computes it in the update's own forward pass (entropy); an
  advantage that needs it gets it before the update.

A loss that needs ``topk`` also gets the current policy's logprobs at those candidates, from the
learner's forward pass.

A need that no built-in objective has is one ``register_need`` call with a ``compute`` function,
next to the objective that reads it: the trainer computes it before each update and hands it to
the objective in ``x.extras[name]`` (rows in batch order)::

    register_need("length_B", "response length of each row", compute=lambda ctx: ctx.batch.loss_mask_BT.sum(-1))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

When = Literal["batch", "before_update", "in_update"]


@dataclass
class NeedContext:
    """What a need's ``compute`` may read: the step's batch and groups, the policy and how the
    learner scores a model on a batch (``score(model, batch) -> (logprobs_BT, entropy_BT)``)."""

    batch: Any
    groups: list[Any]
    step: int
    policy: Any
    score: Callable[..., Any]


@dataclass(frozen=True)
class Need:
    name: str
    doc: str
    when: When = "before_update"
    field: str | None = None  # the inputs' field it fills; None: ``extras[name]``
    builds: str | None = None  # what the run builds to provide it
    # what the rollout must record: fn(rollout_cfg) -> an error text, or None when it is recorded
    rollout: Callable[[Any], str | None] | None = None
    compute: Callable[[NeedContext], Any] | None = None  # needs outside the built-ins
    # a value computed before the update also goes into the batch, for the loss (False: the
    # advantage alone reads it; the learner's own forward pass gives the loss its old logprobs)
    to_batch: bool = True
    # what the learner's own forward pass adds for it: "entropy" (the entropy of each position),
    # "candidates" (logprobs at the batch's top-k candidate ids), "capture" (activations recorded by a
    # forward hook registered in ``learner/hidden.py::CAPTURES`` under the need's name); None: nothing
    forward: Literal["entropy", "candidates", "capture"] | None = None


NEEDS: dict[str, Need] = {}


def register_need(
    name: str,
    doc: str,
    *,
    when: When = "before_update",
    field: str | None = None,
    builds: str | None = None,
    rollout: Callable[[Any], str | None] | None = None,
    compute: Callable[[NeedContext], Any] | None = None,
    to_batch: bool = True,
    forward: Literal["entropy", "candidates", "capture"] | None = None,
) -> Need:
    if name in NEEDS:
        raise ValueError(f"need '{name}' is registered twice")
    if when == "before_update" and builds is None and compute is None and name not in _PROVIDED_BY_THE_RUN:
        raise ValueError(f"need '{name}': give compute=fn(ctx) (or builds=...) so the run can provide it")
    NEEDS[name] = Need(name, doc, when, field, builds, rollout, compute, to_batch, forward)
    return NEEDS[name]


def unregister_need(name: str) -> None:
    NEEDS.pop(name, None)


def _recorded_topk(rollout: Any) -> str | None:
    return None if rollout.topk > 0 else "set rollout.topk (e.g. 8)"


# built-in needs whose value the run provides without a component of their own
_PROVIDED_BY_THE_RUN = {"old_logprobs"}

register_need(
    "rollout_logprobs", "the sampler's logprobs of the sampled tokens", when="batch", field="rollout_logprobs_BT"
)
register_need("rewards", "the final reward of each row", when="batch", field="rewards_B")
register_need("group_index", "the group of each row", when="batch", field="group_index_B")
register_need("task_ids", "stable task ids of the rows (per-prompt history)", when="batch", field="task_ids_B")
register_need("old_logprobs", "the learner's logprobs before the update", field="old_logprobs_BT", to_batch=False)
register_need(
    "entropy",
    "the entropy of the current policy at each token",
    when="in_update",
    field="entropy_BT",
    to_batch=False,
    forward="entropy",
)
register_need(
    "topk",
    "the sampler's top-k candidates (recorded by the rollout)",
    when="batch",
    rollout=_recorded_topk,
    forward="candidates",
)
register_need(
    "ref_logprobs",
    "logprobs of a frozen reference model (the initial policy)",
    field="ref_logprobs_BT",
    builds="reference",
)
register_need("values", "a critic's value of each token", field="values_BT", builds="critic")
register_need(
    "teacher_logprobs",
    "a teacher's logprobs of the sampled tokens, with the env's privileged context in its prompt",
    field="teacher_logprobs_BT",
    builds="teacher",
)
register_need(
    "greedy_rewards",
    "the reward of one greedy episode of each row's task (ReMax)",
    field="greedy_rewards_B",
    builds="greedy_rollouts",
    to_batch=False,
)

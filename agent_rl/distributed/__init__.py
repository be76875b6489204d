"""Scale-out and asynchronous training (docs/distributed.md).

The trainer talks to one :class:`RolloutSource`: ``rollout(step, round_, n)`` and
``sync(model, version)``. Behind it: the trainer's own engine (local, synchronous), an in-process
worker producing ahead of the learner (local, ``max_staleness > 0``), or Ray actors
(``backend: ray``: rollout workers, a sandbox pool per node). Every trajectory carries the weights
version of each turn; nothing staler than ``max_staleness`` versions is ever handed to the learner.
"""

from agent_rl.distributed.buffer import AsyncRolloutSource, Plan, staleness
from agent_rl.distributed.source import LocalRolloutSource, RolloutSource, make_learner, make_rollout_source

__all__ = [
    "AsyncRolloutSource",
    "LocalRolloutSource",
    "Plan",
    "RolloutSource",
    "make_learner",
    "make_rollout_source",
    "staleness",
]

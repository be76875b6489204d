"""The policy's weights as the rollout side receives them: a CPU copy, gathered from the learner's
shards when there are several ranks. Used by every rollout source (local, Ray)."""

from __future__ import annotations

from typing import Any


def cpu_state_dict(model: Any) -> dict[str, Any]:
    """A detached CPU copy of the weights (the learner keeps changing its own in place)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def weights_for_broadcast(model: Any) -> dict[str, Any] | None:
    """The complete weights as a CPU copy; under learner ranks (``learner.world_size > 1``) gathered
    from the shards (a collective every rank joins), complete on rank 0 and None elsewhere."""
    from agent_rl.learner import fsdp

    rank, world = fsdp.rank_and_world()
    if world == 1:
        return cpu_state_dict(model)
    full = fsdp.full_state_dict(model)
    return full if rank == 0 else None

"""New weights from the learner to every sampler: ``WeightSync``, the one object that moves them.

After each optimizer step (and on resume) the trainer calls ``weight_sync(version)`` once. It
gathers the full weights at most once (a CPU copy; a collective every learner rank joins when the
policy is sharded) and hands that one copy to the trainer's own backend (unless it shares the
learner's module: colocated ``hf`` on one rank, where only the version moves) and to the rollout
source's samplers (asynchronous workers, Ray actors).
"""

from __future__ import annotations

import time
from typing import Any

from agent_rl.learner import fsdp
from agent_rl.models import lora


def cpu_state_dict(model: Any) -> dict[str, Any]:
    """A detached CPU copy of the weights (the learner keeps changing its own in place)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def weights_for_broadcast(model: Any) -> dict[str, Any] | None:
    """The complete weights as a CPU copy; under learner ranks (``learner.world_size > 1``) gathered
    from the shards (a collective every rank joins), complete on rank 0 and None elsewhere."""

    if lora.is_lora(model):  # learner.lora: only the adapter moves (gathered alone when sharded)
        return lora.adapter_state(model)
    rank, world = fsdp.rank_and_world()
    if world == 1:
        return cpu_state_dict(model)
    full = fsdp.full_state_dict(model)
    return full if rank == 0 else None


class WeightSync:
    """The trainer's backend and rollout source get version ``v``'s weights from one gather."""

    def __init__(self, model: Any, backend: Any, source: Any, rank: int, world: int):
        self.model, self.backend, self.source = model, backend, source
        self.rank, self.world = rank, world
        self.gathers = 0  # how many times the full weights were gathered (tests, metrics)
        self.ledger: Any = None  # learner.lora: records the hash of the adapter sent at each version

    @property
    def shares_module(self) -> bool:
        """The trainer's backend samples from the learner's own module (nothing to copy for it)."""
        return getattr(self.backend, "model", None) is self.model

    def needs_copy(self) -> bool:
        # several ranks: rank 0 samples with an unsharded copy, so every rank joins the gather
        return self.world > 1 or not self.shares_module or self.source.needs_weights

    def __call__(self, version: int) -> dict[str, float]:
        start = time.perf_counter()
        weights = None
        if self.needs_copy() or self.ledger is not None:
            weights = weights_for_broadcast(self.model)
            self.gathers += 1
        if self.rank == 0:
            if self.ledger is not None:
                self.ledger.record(version, weights)
            self.backend.update_weights(None if self.shares_module else weights, version)
            self.source.sync(weights, version)
        return {"time/weight_sync_s": time.perf_counter() - start}

"""The learner as a group of Ray actors: ``learner.world_size`` FSDP2 ranks in one torch.distributed group.

Each rank is a ``LearnerRank`` actor (its own process, placed in a bundle of the learner's
placement group) running the ordinary :class:`~agent_rl.learner.learner.Learner`; rank 0's node
and a free port there are the rendezvous (gloo on CPU, NCCL on GPUs). The driver keeps running the
trainer loop and a full replica of the policy (for advantages, reference/teacher scoring, eval and
the weight broadcast): every step it puts the batch in the object store once, every rank trains on
its block of rows (``fsdp.shard_rows``), and rank 0 returns the gathered full weights, which the
driver loads into its replica.

A rank that dies stops the step with :class:`LearnerGroupError`; the trainer then writes a
checkpoint of the run before that step (the replica holds those weights) and exits, so
``--resume`` continues it. The checkpoint holds the weights, the version and the LR schedule
position; AdamW's moments live sharded on the ranks and restart from zero on resume.
"""

from __future__ import annotations

import math
import os
from typing import Any

import ray
import torch
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy


class LearnerGroupError(RuntimeError):
    """A learner rank died: the run stops with a resumable checkpoint."""


class LearnerRank:
    """One FSDP2 rank of the learner (a Ray actor)."""

    def __init__(self, rank: int, world: int, cfg_json: dict, threads: int, learner_kwargs: dict):
        from agent_rl.config import Config

        self.rank, self.world = rank, world
        self.cfg = Config.model_validate(cfg_json)
        self.learner_kwargs = learner_kwargs
        torch.set_num_threads(max(1, threads))
        self.learner: Any = None

    def address(self) -> tuple[str, int]:
        """Rank 0's rendezvous: this node's IP and a free port on it."""
        from agent_rl.learner.fsdp import free_port

        return ray.util.get_node_ip_address(), free_port()

    def setup(self, master_addr: str, master_port: int) -> int:
        """Join the process group (blocks until every rank has), then build the sharded learner."""
        from agent_rl.learner import fsdp
        from agent_rl.learner.learner import Learner
        from agent_rl.rollout.backends.hf import load_model

        os.environ.update(
            RANK=str(self.rank), WORLD_SIZE=str(self.world), LOCAL_RANK="0", MASTER_ADDR=master_addr, MASTER_PORT=str(master_port)
        )
        m = self.cfg.model
        device = "cuda" if torch.cuda.is_available() and m.device.startswith("cuda") else "cpu"
        fsdp.init_process_group(device)
        torch.manual_seed(self.cfg.trainer.seed)
        model = load_model(m.path, m.dtype, device)
        self.learner = Learner(model, self.cfg.learner, **self.learner_kwargs)
        return self.rank

    def load_weights(self, state_dict: dict) -> None:
        """Set the sharded model from a full state dict (the driver's, e.g. after a resume)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(self.learner.model, state_dict, options=StateDictOptions(full_state_dict=True))

    def update(self, payload: tuple) -> dict[str, float]:
        batch, advantages_BT, parts, step, version = payload
        metrics = self.learner.update(batch, advantages_BT, parts, step)
        self.learner.version = version + 1
        return metrics

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Complete weights on rank 0, empty elsewhere (every rank must call it: a collective)."""
        from agent_rl.learner import fsdp

        return fsdp.full_state_dict(self.learner.model)

    def scheduler_state(self) -> dict:
        return self.learner.scheduler.state_dict()

    def load_scheduler_state(self, state: dict) -> None:
        self.learner.scheduler.load_state_dict(state)


class RayLearnerGroup:
    """Learner-shaped (``update``, ``version``, ``state_dict``) front of ``world_size`` rank actors."""

    def __init__(self, cfg: Any, replica: torch.nn.Module, **learner_kwargs: Any):
        from agent_rl.distributed.ray_group import connect

        rc = cfg.distributed.ray
        self.world = cfg.learner.world_size
        self.replica = replica
        self.version = 0
        cpus, gpus = rc.learner_cpus_per_rank, rc.learner_gpus_per_rank
        self.started_ray = connect(rc, self.world * cpus + rc.num_rollout_workers * rc.cpus_per_worker)
        bundle = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
        self.pg = placement_group([dict(bundle) for _ in range(self.world)], strategy=rc.learner_placement_strategy)
        ready, _ = ray.wait([self.pg.ready()], timeout=rc.startup_timeout_s)
        if not ready:
            remove_placement_group(self.pg)
            raise ValueError(
                f"Ray cannot place {self.world} learner ranks of {bundle}; cluster resources: {ray.cluster_resources()}. "
                "Lower learner.world_size / distributed.ray.learner_cpus_per_rank / learner_gpus_per_rank or add nodes"
            )
        cfg_json = cfg.model_dump(mode="json")
        self.ranks = [
            ray.remote(LearnerRank)
            .options(
                num_cpus=cpus,
                num_gpus=gpus,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=r),
            )
            .remote(r, self.world, cfg_json, math.ceil(cpus), learner_kwargs)
            for r in range(self.world)
        ]
        addr, port = ray.get(self.ranks[0].address.remote(), timeout=rc.startup_timeout_s)
        ray.get([r.setup.remote(addr, port) for r in self.ranks], timeout=rc.startup_timeout_s)
        self._call("load_weights", {k: v.detach().cpu() for k, v in replica.state_dict().items()})

    def _call(self, method: str, *args: Any) -> list[Any]:
        """``method`` on every rank at once (FSDP collectives need all of them)."""
        refs = [ray.put(a) for a in args]
        try:
            return ray.get([getattr(r, method).remote(*refs) for r in self.ranks])
        except ray.exceptions.RayActorError as e:
            raise LearnerGroupError(f"a learner rank died during {method}: {e}") from e

    def update(self, batch: Any, advantages_BT: torch.Tensor, parts: Any, step: int = 0) -> dict[str, float]:
        """One optimizer step on every rank, then the driver's replica takes the new weights."""
        metrics = self._call("update", (batch, advantages_BT, parts, step, self.version))[0]
        self.replica.load_state_dict(self._call("full_state_dict")[0])
        self.version += 1
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": {k: v.detach().cpu() for k, v in self.replica.state_dict().items()},
            "optimizer": None,  # sharded AdamW moments stay on the ranks (see the module docstring)
            "scheduler": self._call("scheduler_state")[0] if self.alive() else None,
            "version": self.version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.replica.load_state_dict(state["model"])
        self._call("load_weights", state["model"])
        if state.get("scheduler") is not None:
            self._call("load_scheduler_state", state["scheduler"])
        self.version = state["version"]

    def alive(self) -> bool:
        try:
            ray.get([r.address.remote() for r in self.ranks], timeout=30)
            return True
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return False

    def close(self) -> None:
        for r in self.ranks:
            ray.kill(r, no_restart=True)
        remove_placement_group(self.pg)

"""Checkpoints of a run with ``torch.distributed.checkpoint`` (DCP): atomic, exact resume, any world size.

Layout of ``<run>/checkpoints/step_NNNNNN/``:

    dcp/            model(s) + optimizer(s), sharded: every rank writes its own shards (DCP)
    rank_<r>.pt     per rank: RNG states (torch, CUDA, Python, NumPy), LR scheduler(s), policy version
    driver_dcp/, driver.pt   only with a Ray learner group: the driver's own shards (a critic) and
                    state; the ranks, in their own process group, write ``dcp/`` and ``rank_<r>.pt``
    trainer.pt      rank 0: trainer step, stateful objectives' state (loss / filter / credit state
                    objects, the task sampler's data position, teacher), the rollout source's plans
                    drawn for the coming steps (``rollouts``), anything picklable
    model/          the policy in Hugging Face format (full state dict gathered on rank 0 + tokenizer)

Atomicity: everything is written into ``.tmp_step_NNNNNN`` and renamed to ``step_NNNNNN`` by
rank 0 after every rank finished (a barrier); ``latest`` only considers ``step_*`` directories,
so a run killed half-way through a write resumes from the previous complete checkpoint. A
leftover temporary directory is removed by the next save of the same step.

``AGENT_RL_FAULT_KILL_IN_CHECKPOINT=<step>`` makes the process SIGKILL itself after the shards of
that step are written and before the rename (how the tests kill a run during a write).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from agent_rl.core.rundirs import latest_checkpoint
from agent_rl.learner import fsdp


class ModelAndOptimizer:
    """DCP ``Stateful`` of one module and its optimizer: fully-qualified, sharding-independent keys."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.model, self.optimizer = model, optimizer

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optimizer": optim_sd}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


latest = latest_checkpoint  # the newest complete checkpoint under a root (agent_rl/core/rundirs.py)


class RemoteShards(Protocol):
    """Learner ranks in other processes than the caller's (a Ray learner group): they write and read
    their own ``dcp/`` shards and ``rank_<r>.pt`` files of a checkpoint directory."""

    def save_shards(self, directory: Path) -> None: ...

    def load_shards(self, directory: Path) -> None: ...


def write_shards(
    directory: Path, sharded: dict[str, Any], per_rank: dict[str, Any], name: str | None = None, dcp_dir: str = "dcp"
) -> None:
    """This process's part of a checkpoint: its DCP shards of ``sharded`` (a collective of its process
    group; nothing when empty) and ``per_rank`` with its RNG states as ``<name>.pt`` (``rank_<r>``)."""
    import torch.distributed.checkpoint as dcp

    rank, _ = fsdp.rank_and_world()
    if sharded:
        dcp.save(dict(sharded), checkpoint_id=str(Path(directory) / dcp_dir))
    torch.save({**per_rank, "rng": rng_state()}, Path(directory) / f"{name or f'rank_{rank}'}.pt")


def read_shards(
    directory: Path, sharded: dict[str, Any], name: str | None = None, dcp_dir: str = "dcp"
) -> dict[str, Any]:
    """Load ``sharded`` in place and restore this process's RNG states; returns its ``per_rank`` state."""
    import torch.distributed.checkpoint as dcp

    rank, _ = fsdp.rank_and_world()
    if sharded:
        dcp.load(dict(sharded), checkpoint_id=str(Path(directory) / dcp_dir))
    rank_file = Path(directory) / f"{name or f'rank_{rank}'}.pt"
    if not rank_file.exists():
        raise ValueError(
            f"{directory} has no {rank_file.name}: it was written by fewer ranks; resume with the same learner.world_size"
        )
    per_rank = torch.load(rank_file, weights_only=False)
    set_rng_state(per_rank["rng"])
    return per_rank


def save(
    root: Path,
    step: int,
    sharded: dict[str, ModelAndOptimizer],
    per_rank: dict[str, Any],
    trainer_state: dict[str, Any],
    export: Callable[[Path], None] | None = None,
    remote: RemoteShards | None = None,
) -> Path:
    """Write checkpoint ``step`` atomically; every rank calls it (the writes are collective).

    ``sharded``: DCP stateful objects; ``per_rank``: picklable state of this rank (RNG states are
    added); ``trainer_state``: rank 0's picklable state; ``export(dir)``: writes the HF model
    (called on every rank: gathering the full state dict is a collective). With ``remote`` (a
    driver outside the learner ranks' group) the ranks write ``dcp/`` and ``rank_<r>.pt`` and
    this process ``driver_dcp/`` (its own ``sharded``, e.g. a critic) and ``driver.pt``.
    """
    rank, _ = fsdp.rank_and_world()
    root = Path(root)
    final, tmp = root / f"step_{step:06d}", root / f".tmp_step_{step:06d}"
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)  # a write that was killed half-way
        tmp.mkdir()
    fsdp.barrier()
    if remote is not None:
        remote.save_shards(tmp)
        write_shards(tmp, sharded, per_rank, name="driver", dcp_dir="driver_dcp")
    else:
        write_shards(tmp, sharded, per_rank)
    if rank == 0:
        torch.save(trainer_state, tmp / "trainer.pt")
    if export is not None:
        export(tmp / "model")
    fsdp.barrier()
    if os.environ.get("AGENT_RL_FAULT_KILL_IN_CHECKPOINT") == str(step):
        os.kill(os.getpid(), signal.SIGKILL)
    if rank == 0:
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    fsdp.barrier()
    return final


def load(
    path: Path, sharded: dict[str, ModelAndOptimizer], remote: RemoteShards | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Load ``sharded`` in place from ``path``, restore this rank's RNG states; returns
    (this rank's ``per_rank`` state, rank 0's ``trainer_state``). ``remote``: as in ``save``."""
    if remote is not None:
        remote.load_shards(Path(path))
        per_rank = read_shards(path, sharded, name="driver", dcp_dir="driver_dcp")
    else:
        per_rank = read_shards(path, sharded)
    return per_rank, torch.load(Path(path) / "trainer.pt", weights_only=False)
